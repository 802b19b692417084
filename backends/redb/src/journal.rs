//! The write-ahead journal in front of the redb file.
//!
//! A durable redb commit rewrites a path of 4 KiB pages and the allocator state, tens of
//! kilobytes for a batch of a few rows. So with the journal on (the default), a batch
//! is committed to redb *without* syncing (readers in this process see it at once) and
//! the batch itself is appended to this file and synced with `fdatasync`: about one
//! page per commit. Every [`CHECKPOINT_BYTES`](crate::RedbOptions::checkpoint_bytes)
//! of journal, a durable redb commit (a *checkpoint*) makes everything before it durable
//! in the database file, and the journal starts over from its beginning.
//!
//! # File format
//!
//! `<database>-journal`, next to the database file:
//!
//! ```text
//! header   b"FORGEJNL" · u32 format version (2) · u32 checkpoint mark   16 bytes
//! record   u32 payload length · u32 crc32c · u64 generation · payload
//! ```
//!
//! A generation's first record starts right after the header; every later record starts
//! at the first 4 KiB page boundary after the one before it ends. So a commit writes
//! only pages no acknowledged record lives in: a record of up to 4 KiB costs one page,
//! where records packed end to end cost one page more for every record that crosses a
//! boundary (about half of them, at the sizes a turn writes). Format 1 (older releases)
//! packs records end to end, each padded to 8 bytes; a format-1 journal is read and
//! appended to as such, and its header is rewritten as format 2 by the next checkpoint,
//! which starts the file over.
//!
//! The payload is the batch's operations (`write::journal_record`): a marker byte and
//! bare bincode, each row inside already encoded by the row codec. The crc32c covers
//! the length, the generation and the payload. The database's `meta`
//! table holds the journal generation `G` in force; a checkpoint's durable commit sets
//! `G + 1` and the journal is then rewritten from its first record on. Recovery (on
//! open) replays, in order, the records from the first one on that verify and carry
//! generation `G`, and stops at the first that does not: a torn last write, zeros, or an
//! older generation's record beyond the current end. A record is acknowledged only after
//! its `fdatasync`, so everything acknowledged is replayed, and nothing after a record
//! that fails to verify was ever acknowledged.
//!
//! # Damage
//!
//! A record that fails to verify while a later record of generation `G` verifies was
//! not torn by a crash (a crash tears only the last append): recovery refuses the
//! journal with [`Error::Corrupted`] instead of dropping the batches after it. The
//! header's checkpoint mark (the low 32 bits of the generation a checkpoint started,
//! written after that checkpoint's durable commit; 0 in files of older releases: no
//! mark) catches a database file older than its journal: the mark must equal the
//! database's generation or the one before it (a crash between the commit and the mark),
//! anything else is [`Error::Corrupted`]. What cannot be told from a crash: damage inside
//! the last record, or a file cut inside its records, drops the batches from there on,
//! as a crash in the middle of their append would (a warning names a dropped tail that
//! is not all zeros).
//!
//! # Space
//!
//! The file is overwritten in place, never truncated, and grows ahead of its records: when
//! a record would end past the file's end, the file is first extended with written zeros
//! (doubling from one page, by at most the checkpoint interval at a time, and at most
//! 1 MiB), and that extension is synced with the record. So only a
//! record that crosses into a new extension changes the file's size; every other
//! `fdatasync` writes the record's data pages and no filesystem metadata (a file that
//! grows at each sync costs ext4 a journal commit of the inode and the block bitmaps every
//! time, several times the record's own bytes). The zeros are written, not merely
//! allocated (`fallocate` leaves unwritten extents, whose conversion on first write is
//! metadata again), and paid once: after the first checkpoint the journal is recycled from
//! its start and its size stays put. Zeros never verify as a record (their checksum is
//! not zero), so recovery stops at them as at the end of the file.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use forge_core::{Error, Result};

use crate::counting::IoCounters;

/// The journal's magic bytes.
const MAGIC: &[u8; 8] = b"FORGEJNL";
/// The journal format this release writes (it also reads [`PACKED`]).
const FORMAT: u32 = 2;
/// The format of older releases: records end to end, each padded to 8 bytes.
const PACKED: u32 = 1;
/// Header length.
const HEADER: u64 = 16;
/// Record header length: length, crc32c, generation.
const RECORD_HEADER: usize = 16;
/// The page size the physical byte count assumes: a sync writes whole pages.
pub(crate) const PAGE: u64 = 4096;
/// The largest extension of the file at a time, whatever the checkpoint interval.
const MAX_STEP: u64 = 1 << 20;
/// Zeros written to extend the file, a slice at a time.
static ZEROS: [u8; PAGE as usize] = [0; PAGE as usize];
/// The largest record recovery accepts (a batch larger than this is refused on write).
pub(crate) const MAX_RECORD: usize = 1 << 30;

/// Whether a payload of `len` bytes is over [`MAX_RECORD`].
fn over_limit(len: usize) -> bool {
    len > MAX_RECORD
}

/// A record found on open: the offset where it ends, and its payload.
pub(crate) type Record = (u64, Vec<u8>);

/// The journal file of one open store. Not shared: the store holds it behind a lock.
pub(crate) struct Journal {
    file: File,
    path: PathBuf,
    generation: u64,
    /// Where the next record goes.
    tail: u64,
    counters: Option<IoCounters>,
    /// One reusable buffer for a record.
    buf: Vec<u8>,
    /// Set by a failed write or sync: what reached the disk is then unknown (a failed
    /// `fdatasync` may have dropped dirty pages), so nothing more is appended until the
    /// store is opened again and recovery reads the file as it is.
    failed: Option<String>,
    /// The file's length: it only grows.
    size: u64,
    /// The most the file grows by at once (see "Space" in the module docs).
    step: u64,
    /// The format of the records of this generation: [`FORMAT`], or [`PACKED`] until
    /// the first checkpoint of a journal an older release wrote.
    format: u32,
}

/// The journal's file name for the database at `db`: `<db>-journal`.
pub(crate) fn path_for(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-journal");
    PathBuf::from(name)
}

#[allow(clippy::needless_pass_by_value)] // called as `map_err(|e| io(…, e))`
fn io(path: &Path, what: &str, e: std::io::Error) -> Error {
    Error::backend(
        crate::error::BACKEND,
        false,
        std::io::Error::new(e.kind(), format!("journal {}: {what}: {e}", path.display())),
    )
}

impl Journal {
    /// Opens (or creates) the journal at `path` and returns the payloads of the records
    /// of `generation`, in order, to replay.
    ///
    /// # Errors
    /// [`Error::Corrupted`] when the file exists but is not a forge-store journal (bad
    /// magic, a format this release does not read); [`Error::Backend`] on I/O errors.
    #[cfg(test)]
    pub(crate) fn open(
        path: PathBuf,
        generation: u64,
        counters: Option<IoCounters>,
    ) -> Result<(Self, Vec<Record>)> {
        Self::open_checked(path, generation, 0, MAX_STEP, counters)
    }

    /// As [`Journal::open`], refusing a journal shorter than `min_len` (its length at the
    /// last checkpoint: the file never shrinks) with [`Error::Corrupted`]. A missing
    /// journal is created (moving it away is how a user opens the database as of its
    /// last checkpoint), with a warning when it held records. The file grows ahead of
    /// its records by at most `checkpoint_every` bytes at a time (and at most 1 MiB):
    /// records past that length start a checkpoint, which recycles the file.
    ///
    /// # Errors
    /// As [`Journal::open`].
    pub(crate) fn open_checked(
        path: PathBuf,
        generation: u64,
        min_len: u64,
        checkpoint_every: u64,
        counters: Option<IoCounters>,
    ) -> Result<(Self, Vec<Record>)> {
        let existed = path.exists();
        if !existed && min_len > HEADER {
            tracing::warn!(
                journal = %path.display(),
                "the journal is missing; the database opens as of its last checkpoint"
            );
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io(&path, "open", e))?;
        let len = file.metadata().map_err(|e| io(&path, "stat", e))?.len();
        if existed && len < min_len {
            return Err(Error::corrupted(
                format!("journal {}", path.display()),
                format!(
                    "it is {len} bytes long, and was {min_len} at the last checkpoint (a \
                     journal never shrinks): it was cut, and opening would drop the \
                     batches it held beyond byte {len}; restore it from a backup, or move \
                     it away to open the database as of its last checkpoint"
                ),
            ));
        }
        let mut records = Vec::new();
        let mut format = FORMAT;
        if len == 0 {
            let mut header = [0u8; HEADER as usize];
            header[..8].copy_from_slice(MAGIC);
            header[8..12].copy_from_slice(&FORMAT.to_le_bytes());
            file.write_all(&header)
                .and_then(|()| file.sync_all())
                .map_err(|e| io(&path, "write header", e))?;
            // Every record is synced into this file from now on: its name must be as
            // durable as they are, or a power cut takes the whole journal.
            forge_core::files::sync_dir(&path).map_err(|e| io(&path, "create", e))?;
        } else {
            let mut bytes = Vec::new();
            file.read_to_end(&mut bytes)
                .map_err(|e| io(&path, "read", e))?;
            format = check_header(&path, &bytes, generation)?;
            let (found, damaged) = scan(&bytes, generation, format);
            if let Some((bad, later)) = damaged {
                return Err(Error::corrupted(
                    format!("journal {}", path.display()),
                    format!(
                        "the record at byte {bad} fails its checksum while a later record                          (at byte {later}) verifies: the journal is damaged, and opening would                          drop the batches after byte {bad}; restore it from a backup, or move                          it away to open the database as of its last checkpoint"
                    ),
                ));
            }
            let end = found.last().map_or(HEADER as usize, |(e, _)| *e as usize);
            if torn_record_at(&bytes, end, generation) {
                tracing::warn!(
                    journal = %path.display(),
                    at = end,
                    "the journal's last record does not verify: dropped as an append cut \
                     by a crash (its batch was never acknowledged, unless the file was \
                     damaged there)"
                );
            }
            records = found;
        }
        let mut journal = Self {
            file,
            path,
            generation,
            tail: HEADER,
            counters,
            buf: Vec::new(),
            failed: None,
            size: len.max(HEADER),
            step: checkpoint_every
                .clamp(PAGE, MAX_STEP)
                .next_multiple_of(PAGE),
            format,
        };
        // New records go after these until a checkpoint restarts the journal.
        journal.tail = records.last().map_or(HEADER, |(end, _)| *end);
        Ok((journal, records))
    }

    /// The file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Bytes of records since the last checkpoint.
    pub(crate) fn len(&self) -> u64 {
        self.tail - HEADER
    }

    /// Where the records end: the offset the database records as applied with the
    /// batch of the last record.
    pub(crate) fn tail(&self) -> u64 {
        self.tail
    }

    /// The file's length (it never shrinks).
    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    /// The generation records are written with.
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Appends one record and syncs it; returns its offset (for [`Journal::retract`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a payload over [`MAX_RECORD`]; [`Error::Backend`] when
    /// the write or the sync fails, and from then on (the record may be on disk or not:
    /// opening the store again replays it if it verifies).
    pub(crate) fn append(&mut self, payload: &[u8]) -> Result<u64> {
        if over_limit(payload.len()) {
            return Err(Error::invalid(format!(
                "a batch of {} bytes is over the journal's limit of {MAX_RECORD} bytes",
                payload.len()
            )));
        }
        let at = self.tail;
        self.buf.clear();
        encode_record(&mut self.buf, self.generation, payload);
        // Format 1's padding to 8 bytes is never read: only the record is written.
        self.write_at(at, self.buf.len())?;
        self.tail = next_record(self.format, at, payload.len());
        Ok(at)
    }

    /// Writes `self.buf[..n]` at `at` and syncs, counting the pages a sync writes.
    fn write_at(&mut self, at: u64, n: usize) -> Result<()> {
        if let Some(first) = &self.failed {
            return Err(Error::backend(
                crate::error::BACKEND,
                false,
                std::io::Error::other(format!(
                    "journal {}: an earlier write failed ({first}); nothing more is written \
                     to it until the store is opened again",
                    self.path.display()
                )),
            ));
        }
        let end = at + n as u64;
        let grown = self.grown(end);
        let written = self
            .extend(grown)
            .and_then(|()| self.file.seek(SeekFrom::Start(at)))
            .and_then(|_| self.file.write_all(&self.buf[..n]))
            .map_err(|e| ("write", e))
            .and_then(|()| self.file.sync_data().map_err(|e| ("fdatasync", e)));
        if let Err((what, e)) = written {
            self.failed = Some(format!("{what}: {e}"));
            return Err(io(&self.path, what, e));
        }
        // The sync wrote the record's pages and the zeros of an extension.
        let (from, to) = if grown > self.size {
            (at.min(self.size), grown)
        } else {
            (at, end)
        };
        self.size = grown;
        if let Some(c) = &self.counters {
            let pages = to.div_ceil(PAGE) - from / PAGE;
            c.add_journal(pages * PAGE);
        }
        Ok(())
    }

    /// The file's length once a record ending at `end` is written: as it is when the
    /// record fits, else extended to a page boundary past `end`, by doubling up to
    /// `step` bytes at a time.
    fn grown(&self, end: u64) -> u64 {
        if end <= self.size {
            return self.size;
        }
        let ahead = self.size.saturating_mul(2).min(self.size + self.step);
        end.max(ahead).next_multiple_of(PAGE)
    }

    /// Writes zeros from the file's end to `to` (nothing when it is there already).
    fn extend(&mut self, to: u64) -> std::io::Result<()> {
        let mut at = self.size;
        if at >= to {
            return Ok(());
        }
        self.file.seek(SeekFrom::Start(at))?;
        while at < to {
            // Up to the next page boundary first, then whole pages (`to` is a page boundary).
            let n = PAGE - at % PAGE;
            #[allow(clippy::cast_possible_truncation)] // n <= PAGE
            self.file.write_all(&ZEROS[..n as usize])?;
            at += n;
        }
        Ok(())
    }

    /// Undoes the record appended at `at` (whose batch then failed to commit): zeroes its
    /// header, so recovery stops before it, and writes the next record there.
    ///
    /// # Errors
    /// [`Error::Backend`] when the write or the sync fails.
    pub(crate) fn retract(&mut self, at: u64) -> Result<()> {
        self.buf.clear();
        self.buf.resize(RECORD_HEADER, 0);
        self.write_at(at, RECORD_HEADER)?;
        self.tail = at;
        Ok(())
    }

    /// Where a new generation's records start: what the database records as applied
    /// when the journal restarts.
    pub(crate) const START: u64 = HEADER;

    /// Starts `generation` after a checkpoint made everything journaled durable: the
    /// next record goes to the start of the file (the old records no longer verify
    /// against the new generation), and the header's checkpoint mark is set to it (one
    /// small write and `fdatasync` per checkpoint). A mark that fails to be written is
    /// only logged: the mark of the generation before is still valid. A format-1
    /// journal's header is rewritten as format 2 here; should that fail, nothing more is
    /// appended until the store is opened again (the file's format is then unknown).
    pub(crate) fn restart(&mut self, generation: u64) {
        self.generation = generation;
        self.tail = HEADER;
        let mut header = [0u8; HEADER as usize];
        header[..8].copy_from_slice(MAGIC);
        header[8..12].copy_from_slice(&FORMAT.to_le_bytes());
        header[12..].copy_from_slice(&mark(generation).to_le_bytes());
        // The mark alone when the format stays.
        let from = if self.format == FORMAT { MARK_AT } else { 0 };
        #[allow(clippy::cast_possible_truncation)] // from <= 12
        let written = self
            .file
            .seek(SeekFrom::Start(from))
            .and_then(|_| self.file.write_all(&header[from as usize..]))
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.format = FORMAT;
                if let Some(c) = &self.counters {
                    c.add_journal(PAGE);
                }
            }
            Err(e) if self.format != FORMAT => {
                tracing::error!(
                    journal = %self.path.display(),
                    error = %e,
                    "could not rewrite the journal's header as format {FORMAT}"
                );
                self.failed = Some(format!("header: {e}"));
            }
            Err(e) => tracing::warn!(
                journal = %self.path.display(),
                error = %e,
                "could not write the journal's checkpoint mark"
            ),
        }
    }
}

/// Where the header keeps the checkpoint mark.
const MARK_AT: u64 = 12;

/// The checkpoint mark of `generation`: its low 32 bits (truncation intended).
#[allow(clippy::cast_possible_truncation)]
fn mark(generation: u64) -> u32 {
    generation as u32
}

/// The format of the journal whose bytes are `bytes`, once its header is checked.
fn check_header(path: &Path, bytes: &[u8], generation: u64) -> Result<u32> {
    let at = || format!("journal {}", path.display());
    if bytes.len() < HEADER as usize || &bytes[..8] != MAGIC {
        return Err(Error::corrupted(
            at(),
            "not a forge-store journal (no FORGEJNL header); move it away to open the \
             database without it",
        ));
    }
    let format = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if format != FORMAT && format != PACKED {
        return Err(Error::Unsupported(format!(
            "{} has journal format {format}; this release reads formats {PACKED} and \
             {FORMAT}",
            at()
        )));
    }
    let found = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    let ok = [mark(generation), mark(generation.wrapping_sub(1))];
    if found != 0 && !ok.contains(&found) {
        return Err(Error::corrupted(
            at(),
            format!(
                "its header says checkpoint {found}, the database file checkpoint                  {generation}: the database file is older than its journal (replaced by                  an older copy, or damaged) or the journal header is damaged"
            ),
        ));
    }
    Ok(format)
}

/// The bytes a record of `payload` bytes occupies in format 1, padded to 8.
fn record_len(payload: usize) -> u64 {
    (RECORD_HEADER + payload).next_multiple_of(8) as u64
}

/// Where the record after one of `payload` bytes at `at` starts, in `format`.
fn next_record(format: u32, at: u64, payload: usize) -> u64 {
    match format {
        PACKED => at + record_len(payload),
        _ => (at + (RECORD_HEADER + payload) as u64).next_multiple_of(PAGE),
    }
}

fn checksum(len: u32, generation: u64, payload: &[u8]) -> u32 {
    let c = crc32c::crc32c(&len.to_le_bytes());
    let c = crc32c::crc32c_append(c, &generation.to_le_bytes());
    crc32c::crc32c_append(c, payload)
}

fn encode_record(out: &mut Vec<u8>, generation: u64, payload: &[u8]) {
    // MAX_RECORD < u32::MAX, checked by the caller.
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&checksum(len, generation, payload).to_le_bytes());
    out.extend_from_slice(&generation.to_le_bytes());
    out.extend_from_slice(payload);
}

/// The record of `generation` at `at`, if one verifies there: its payload.
fn record_at(bytes: &[u8], at: usize, generation: u64) -> Option<&[u8]> {
    let header = bytes.get(at..at.checked_add(RECORD_HEADER)?)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let crc = u32::from_le_bytes([header[4], header[5], header[6], header[7]]);
    let mut g = [0u8; 8];
    g.copy_from_slice(&header[8..16]);
    let g = u64::from_le_bytes(g);
    let n = len as usize;
    if g != generation || over_limit(n) {
        return None;
    }
    let payload = bytes.get(at + RECORD_HEADER..at + RECORD_HEADER + n)?;
    (checksum(len, g, payload) == crc).then_some(payload)
}

/// Whether a record header of `generation` starts at `at` (its record then failed to
/// verify: a torn or damaged last record).
fn torn_record_at(bytes: &[u8], at: usize, generation: u64) -> bool {
    bytes.get(at..at + RECORD_HEADER).is_some_and(|header| {
        // All zeros: the file's extension, or a retracted record, never a record.
        header[8..] == generation.to_le_bytes() && header.iter().any(|&b| b != 0)
    })
}

/// Where a scan stopped at a record that does not verify although a later one does:
/// the offsets of both.
type Damaged = Option<(usize, usize)>;

/// The records of `generation` from the first record on, up to the first one that does
/// not verify: each with the offset where it ends and its payload; and whether a record
/// of `generation` verifies beyond that point (damage, not a torn last write).
fn scan(bytes: &[u8], generation: u64, format: u32) -> (Vec<Record>, Damaged) {
    let mut out = Vec::new();
    let mut at = HEADER as usize;
    while let Some(payload) = record_at(bytes, at, generation) {
        #[allow(clippy::cast_possible_truncation)] // within `bytes`, or just past it
        let next = next_record(format, at as u64, payload.len()) as usize;
        out.push((next as u64, payload.to_vec()));
        at = next;
    }
    // Records start at multiples of 8; a torn last write leaves nothing of this
    // generation that verifies after it.
    let later = (at + 8..bytes.len())
        .step_by(8)
        .find(|&off| record_at(bytes, off, generation).is_some());
    (out, later.map(|l| (at, l)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal(dir: &Path, generation: u64) -> (Journal, Vec<Vec<u8>>) {
        let (j, records) = Journal::open(dir.join("j"), generation, None).unwrap();
        let mut at = HEADER;
        for (e, payload) in &records {
            at = next_record(j.format, at, payload.len());
            assert_eq!(*e, at, "where the record after each one starts");
        }
        (j, records.into_iter().map(|(_, p)| p).collect())
    }

    /// The records a reopen of the journal `j` in `dir` for `generation` replays.
    fn replayed(dir: &Path, generation: u64) -> Vec<Vec<u8>> {
        journal(dir, generation).1
    }

    /// Opening the journal `j` in `dir` for `generation` is refused as corrupted, with
    /// a message holding `needle`.
    fn assert_refused(dir: &Path, generation: u64, needle: &str) {
        let err = Journal::open(dir.join("j"), generation, None)
            .err()
            .unwrap();
        assert!(matches!(err, Error::Corrupted { .. }), "{err:?}");
        assert!(err.to_string().contains(needle), "{err}");
    }

    #[test]
    fn records_of_the_current_generation_come_back_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, found) = journal(dir.path(), 7);
        assert!(found.is_empty());
        j.append(b"one").unwrap();
        j.append(&[0u8; 0]).unwrap();
        j.append(&vec![9u8; 5000]).unwrap();
        drop(j);
        assert_eq!(
            replayed(dir.path(), 7),
            vec![b"one".to_vec(), Vec::new(), vec![9u8; 5000]]
        );
        // Another generation: nothing of 7 is replayed.
        assert!(replayed(dir.path(), 8).is_empty());
    }

    #[test]
    fn a_restart_hides_the_older_records_beyond_the_new_end() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = journal(dir.path(), 1);
        for i in 0..10u8 {
            j.append(&[i; 100]).unwrap();
        }
        j.restart(2);
        j.append(b"new").unwrap();
        drop(j);
        assert_eq!(replayed(dir.path(), 2), vec![b"new".to_vec()]);
        // The header marks checkpoint 2: a database of generation 3 (a crash before its
        // mark) opens; one of generation 1 is older than the journal.
        journal(dir.path(), 3);
        assert_refused(dir.path(), 1, "older than its journal");
    }

    #[test]
    fn a_torn_or_flipped_record_ends_the_replay_there() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = journal(dir.path(), 1);
        j.append(b"first").unwrap();
        let second = j.append(b"second").unwrap();
        j.append(b"third").unwrap();
        drop(j);
        let path = dir.path().join("j");
        let third = next_record(FORMAT, second, b"second".len());
        let mut bytes = std::fs::read(&path).unwrap();
        let recorder = forge_testkit::logs::Recorder::default();
        let _logs = tracing::subscriber::set_default(recorder.clone());
        let torn = |recorder: &forge_testkit::logs::Recorder| {
            recorder
                .take()
                .events
                .iter()
                .any(|e| e.contains("last record does not verify"))
        };
        assert_eq!(replayed(dir.path(), 1).len(), 3);
        assert!(!torn(&recorder), "a whole journal is not torn");
        // The last record flipped: as if its append was cut by a crash.
        let mut last = bytes.clone();
        last[third as usize + RECORD_HEADER + 2] ^= 0x40;
        std::fs::write(&path, &last).unwrap();
        assert_eq!(
            replayed(dir.path(), 1),
            vec![b"first".to_vec(), b"second".to_vec()]
        );
        assert!(torn(&recorder), "a torn last record is warned about");
        // A record before the last flipped: damage, refused rather than dropping the
        // third record.
        bytes[second as usize + RECORD_HEADER + 2] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        assert_refused(dir.path(), 1, "later record");
        // Cut in the middle of the first record.
        std::fs::write(&path, &bytes[..HEADER as usize + 10]).unwrap();
        assert!(replayed(dir.path(), 1).is_empty());
    }

    #[test]
    fn a_retracted_record_is_not_replayed_and_its_place_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = journal(dir.path(), 1);
        j.append(b"kept").unwrap();
        let at = j.append(b"failed to commit").unwrap();
        j.retract(at).unwrap();
        drop(j);
        let (mut j, found) = journal(dir.path(), 1);
        assert_eq!(found, vec![b"kept".to_vec()]);
        assert_eq!(j.append(b"next").unwrap(), at);
        drop(j);
        assert_eq!(
            replayed(dir.path(), 1),
            vec![b"kept".to_vec(), b"next".to_vec()]
        );
    }

    #[test]
    fn a_payload_over_the_limit_is_refused_before_anything_is_written() {
        assert!(!over_limit(MAX_RECORD) && over_limit(MAX_RECORD + 1));
        let dir = tempfile::tempdir().unwrap();
        let (mut j, _) = journal(dir.path(), 1);
        j.append(b"kept").unwrap();
        let tail = j.tail();
        // Zeroed pages from the allocator: nothing is touched until written.
        let err = j.append(&vec![0u8; MAX_RECORD + 1]).unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        assert_eq!(j.tail(), tail);
        j.append(b"next").unwrap();
        drop(j);
        assert_eq!(
            replayed(dir.path(), 1),
            vec![b"kept".to_vec(), b"next".to_vec()]
        );
    }

    #[test]
    fn a_file_that_is_not_a_journal_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("j"), b"hello, world, not a journal").unwrap();
        assert_refused(dir.path(), 1, "not a forge-store journal");
    }

    /// The file is extended with zeros ahead of its records, doubling up to the step:
    /// only an append that crosses the file's end changes its size (and counts the
    /// zeros it writes), and a journal of generation 0 (a new database) that ends in
    /// zeros reopens with its records, without a torn-record warning.
    #[test]
    fn the_file_grows_ahead_of_its_records_so_most_syncs_leave_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let counters = IoCounters::default();
        let (mut j, _) =
            Journal::open_checked(path.clone(), 0, 0, 16 * PAGE, Some(counters.clone())).unwrap();
        let mut sizes = vec![std::fs::metadata(&path).unwrap().len()];
        for i in 0..40u8 {
            let before = (
                *sizes.last().unwrap(),
                counters.snapshot().journal_write_bytes,
            );
            let at = j.append(&[i | 1; 100]).unwrap();
            let end = at + RECORD_HEADER as u64 + 100;
            let size = std::fs::metadata(&path).unwrap().len();
            assert_eq!(size, j.size());
            assert!(size >= j.tail() && size.is_multiple_of(PAGE), "{size}");
            let counted = counters.snapshot().journal_write_bytes - before.1;
            if size == before.0 {
                // Inside the file: the record's own page.
                assert_eq!(counted, PAGE);
            } else {
                assert!(end > before.0, "grew for a record that fit");
                assert_eq!(
                    counted,
                    (size.div_ceil(PAGE) - at.min(before.0) / PAGE) * PAGE
                );
                sizes.push(size);
            }
        }
        // One record a page: 4 KiB, doubled up to the step of 64 KiB, then by the step.
        let kib = |k: u64| k * 1024;
        assert_eq!(
            sizes,
            [
                HEADER,
                kib(4),
                kib(8),
                kib(16),
                kib(32),
                kib(64),
                kib(128),
                kib(192)
            ]
        );
        assert_eq!(j.tail(), 40 * PAGE);
        drop(j);
        let recorder = forge_testkit::logs::Recorder::default();
        let _logs = tracing::subscriber::set_default(recorder.clone());
        let replayed = replayed(dir.path(), 0);
        assert_eq!(replayed.len(), 40);
        assert_eq!(replayed[39], vec![39u8; 100]);
        assert_eq!(recorder.take().events, Vec::<String>::new());
    }

    /// A journal in format 1 (records end to end, padded to 8), as older releases wrote
    /// it: replayed, appended to in its own format, and rewritten as format 2 by the
    /// next checkpoint.
    #[test]
    fn a_format_1_journal_is_read_appended_to_and_upgraded_at_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let mut bytes = Vec::from(*MAGIC);
        bytes.extend_from_slice(&PACKED.to_le_bytes());
        bytes.extend_from_slice(&mark(3).to_le_bytes());
        for payload in [&b"one"[..], b"two", &[7u8; 5000]] {
            encode_record(&mut bytes, 4, payload);
            bytes.resize(bytes.len().next_multiple_of(8), 0);
        }
        std::fs::write(&path, &bytes).unwrap();
        let (mut j, found) = journal(dir.path(), 4);
        assert_eq!(found.len(), 3);
        let end = HEADER + record_len(3) * 2 + record_len(5000);
        assert_eq!(j.tail(), end);
        assert_eq!(j.append(b"four").unwrap(), end);
        assert_eq!(j.tail(), end + record_len(4));
        drop(j);
        assert_eq!(replayed(dir.path(), 4)[3], b"four");

        let (mut j, _) = journal(dir.path(), 4);
        j.restart(5);
        j.append(b"five").unwrap();
        assert_eq!(j.append(b"six").unwrap(), PAGE);
        drop(j);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(check_header(&path, &bytes, 5).unwrap(), FORMAT);
        assert_eq!(
            replayed(dir.path(), 5),
            vec![b"five".to_vec(), b"six".to_vec()]
        );
    }

    /// A checkpoint mark that cannot be written is only logged (the mark before stays
    /// valid and the records' format is unchanged), but a format-1 header that cannot be
    /// rewritten as format 2 stops the appends: what the header says is then unknown.
    #[test]
    fn a_header_that_cannot_be_rewritten_stops_the_appends_a_mark_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j");
        let read_only = || File::open(&path).unwrap();
        let (mut j, _) = journal(dir.path(), 1);
        j.append(b"one").unwrap();
        let writable = std::mem::replace(&mut j.file, read_only());
        j.restart(2);
        j.file = writable;
        j.append(b"two").unwrap();
        drop(j);
        assert_eq!(replayed(dir.path(), 2), vec![b"two".to_vec()]);

        let mut bytes = Vec::from(*MAGIC);
        bytes.extend_from_slice(&PACKED.to_le_bytes());
        bytes.extend_from_slice(&mark(1).to_le_bytes());
        encode_record(&mut bytes, 1, b"one");
        std::fs::write(&path, &bytes).unwrap();
        let (mut j, _) = journal(dir.path(), 1);
        let writable = std::mem::replace(&mut j.file, read_only());
        j.restart(2);
        j.file = writable;
        let err = j.append(b"two").unwrap_err();
        assert!(err.to_string().contains("an earlier write failed"), "{err}");
        drop(j);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(check_header(&path, &bytes, 1).unwrap(), PACKED);
    }

    #[test]
    fn a_sync_counts_the_pages_it_touches() {
        let dir = tempfile::tempdir().unwrap();
        let counters = IoCounters::default();
        let (mut j, _) = Journal::open(dir.path().join("j"), 1, Some(counters.clone())).unwrap();
        let counted = || counters.snapshot().journal_write_bytes;
        // The first record shares the header's page; the file grows to that page.
        j.append(&[1u8; 100]).unwrap();
        assert_eq!(counted(), PAGE);
        // The next record starts on the next page, which it fills but for 80 bytes: one
        // page, the file grown to its end.
        assert_eq!(j.append(&[2u8; 4000]).unwrap(), PAGE);
        assert_eq!(counted(), 2 * PAGE);
        assert_eq!(counters.snapshot().journal_syncs, 2);
        // A small record on the third page: that page and the fourth, the file doubled.
        assert_eq!(j.append(&[3u8; 8]).unwrap(), 2 * PAGE);
        assert_eq!(counted(), 4 * PAGE);
        // Inside the file: its page only, wherever the page is; two for a record over
        // a page boundary.
        assert_eq!(j.append(&[4u8; 8]).unwrap(), 3 * PAGE);
        assert_eq!(counted(), 5 * PAGE);
        j.append(&[5u8; 5000]).unwrap();
        assert_eq!(counted(), 9 * PAGE, "two pages and two of zeros");
        j.append(&[6u8; 5000]).unwrap();
        assert_eq!(counted(), 11 * PAGE);
    }
}
