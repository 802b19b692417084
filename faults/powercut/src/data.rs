//! File contents in chunks shared between the live and the durable tree (`Arc`), so
//! syncing a file copies a map of pointers, not its bytes, and a write after a sync
//! copies only the chunks it touches.

use std::collections::BTreeMap;
use std::sync::Arc;

/// Bytes per chunk of file data.
pub const CHUNK: usize = 16 * 1024;

/// File contents: chunks by index (a missing chunk reads as zeros) and a length.
#[derive(Clone, Debug, Default)]
pub struct Data {
    chunks: BTreeMap<u64, Arc<Vec<u8>>>,
    /// Length in bytes.
    pub size: u64,
}

impl Data {
    /// Up to `len` bytes from `offset` (fewer at the end of the file).
    pub fn read(&self, offset: u64, len: usize) -> Vec<u8> {
        if offset >= self.size {
            return Vec::new();
        }
        let end = (offset + len as u64).min(self.size);
        let mut out = vec![0u8; (end - offset) as usize];
        let mut at = offset;
        while at < end {
            let index = at / CHUNK as u64;
            let within = (at % CHUNK as u64) as usize;
            let n = (CHUNK - within).min((end - at) as usize);
            if let Some(chunk) = self.chunks.get(&index) {
                let dst = (at - offset) as usize;
                out[dst..dst + n].copy_from_slice(&chunk[within..within + n]);
            }
            at += n as u64;
        }
        out
    }

    /// Writes `bytes` at `offset`, growing the file as needed.
    pub fn write(&mut self, offset: u64, bytes: &[u8]) {
        let mut at = offset;
        let mut rest = bytes;
        while !rest.is_empty() {
            let index = at / CHUNK as u64;
            let within = (at % CHUNK as u64) as usize;
            let n = (CHUNK - within).min(rest.len());
            let chunk = self
                .chunks
                .entry(index)
                .or_insert_with(|| Arc::new(vec![0u8; CHUNK]));
            Arc::make_mut(chunk)[within..within + n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
            at += n as u64;
        }
        self.size = self.size.max(offset + bytes.len() as u64);
    }

    /// Sets the length: cuts (zeroing the cut part of the last chunk, so growing again
    /// reads zeros) or extends with zeros.
    pub fn truncate(&mut self, size: u64) {
        if size < self.size {
            let first_gone = size.div_ceil(CHUNK as u64);
            self.chunks.retain(|&i, _| i < first_gone);
            let within = (size % CHUNK as u64) as usize;
            if within > 0 {
                if let Some(chunk) = self.chunks.get_mut(&(size / CHUNK as u64)) {
                    Arc::make_mut(chunk)[within..].fill(0);
                }
            }
        }
        self.size = size;
    }

    /// Bytes held in chunks (for the statistics).
    pub fn allocated(&self) -> u64 {
        self.chunks.len() as u64 * CHUNK as u64
    }
}
