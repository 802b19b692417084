//! The I/O counters of this process and of its threads, from `/proc`.

use std::collections::BTreeMap;
use std::path::Path;

/// The I/O counters of a process or thread (`/proc/<pid>/io`, see proc(5)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ProcIo {
    /// Bytes passed to read-like system calls (page-cache hits included).
    pub rchar: u64,
    /// Bytes passed to write-like system calls (`write`, `pwrite`, …), whether or not
    /// they ever reach a disk.
    pub wchar: u64,
    /// Read-like system calls.
    pub syscr: u64,
    /// Write-like system calls.
    pub syscw: u64,
    /// Bytes fetched from the block layer.
    pub read_bytes: u64,
    /// Bytes sent, or to be sent, to the block layer (counted when a page is dirtied;
    /// 0 on tmpfs).
    pub write_bytes: u64,
    /// Dirtied bytes that were never written back (file truncated or deleted first).
    pub cancelled_write_bytes: u64,
}

impl ProcIo {
    /// The counters of this process (all its threads, those that exited included), or
    /// `None` off Linux or when `/proc/self/io` cannot be read.
    pub fn read() -> Option<ProcIo> {
        Self::read_from(Path::new("/proc/self/io"))
    }

    fn read_from(path: &Path) -> Option<ProcIo> {
        if !cfg!(target_os = "linux") {
            return None;
        }
        Self::parse(&std::fs::read_to_string(path).ok()?)
    }

    /// Parses the `key: value` lines of a `/proc/…/io` file; `None` when a field is
    /// missing or not a number.
    pub fn parse(text: &str) -> Option<ProcIo> {
        let fields: BTreeMap<&str, u64> = text
            .lines()
            .filter_map(|line| {
                let (key, value) = line.split_once(':')?;
                Some((key.trim(), value.trim().parse().ok()?))
            })
            .collect();
        let get = |key: &str| fields.get(key).copied();
        Some(ProcIo {
            rchar: get("rchar")?,
            wchar: get("wchar")?,
            syscr: get("syscr")?,
            syscw: get("syscw")?,
            read_bytes: get("read_bytes")?,
            write_bytes: get("write_bytes")?,
            cancelled_write_bytes: get("cancelled_write_bytes")?,
        })
    }

    /// What happened between `earlier` and `self`, field by field (saturating at 0).
    #[must_use]
    pub fn since(&self, earlier: &ProcIo) -> ProcIo {
        ProcIo {
            rchar: self.rchar.saturating_sub(earlier.rchar),
            wchar: self.wchar.saturating_sub(earlier.wchar),
            syscr: self.syscr.saturating_sub(earlier.syscr),
            syscw: self.syscw.saturating_sub(earlier.syscw),
            read_bytes: self.read_bytes.saturating_sub(earlier.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(earlier.write_bytes),
            cancelled_write_bytes: self
                .cancelled_write_bytes
                .saturating_sub(earlier.cancelled_write_bytes),
        }
    }

    fn add(&mut self, other: &ProcIo) {
        self.rchar += other.rchar;
        self.wchar += other.wchar;
        self.syscr += other.syscr;
        self.syscw += other.syscw;
        self.read_bytes += other.read_bytes;
        self.write_bytes += other.write_bytes;
        self.cancelled_write_bytes += other.cancelled_write_bytes;
    }
}

/// Linux keeps at most this many bytes of a thread's name (`comm`, `TASK_COMM_LEN` − 1);
/// longer names are cut.
pub const COMM_LEN: usize = 15;

/// The counters of every live thread of this process whose name starts with
/// `name_prefix` (cut to [`COMM_LEN`] bytes, as the kernel cuts names), by thread id.
///
/// `None` off Linux or when `/proc/self/task` cannot be listed. A thread that exits
/// takes its counters with it: read while the threads of interest are alive (for sqlx,
/// before the pool is closed).
pub fn thread_io_by_tid(name_prefix: &str) -> Option<BTreeMap<u32, ProcIo>> {
    if !cfg!(target_os = "linux") {
        return None;
    }
    let prefix = &name_prefix.as_bytes()[..name_prefix.len().min(COMM_LEN)];
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir("/proc/self/task").ok()? {
        // Threads come and go while the directory is read; one that vanished is skipped.
        let Ok(entry) = entry else { continue };
        let Some(tid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let Ok(comm) = std::fs::read(entry.path().join("comm")) else {
            continue;
        };
        if !comm.starts_with(prefix) {
            continue;
        }
        if let Some(io) = ProcIo::read_from(&entry.path().join("io")) {
            out.insert(tid, io);
        }
    }
    Some(out)
}

/// The counters of the live threads named `name_prefix…`, summed (see
/// [`thread_io_by_tid`]); all zero when no thread matches.
///
/// A thread that exits takes its counts with it: read before the threads end.
pub fn thread_io(name_prefix: &str) -> Option<ProcIo> {
    let threads = thread_io_by_tid(name_prefix)?;
    let mut sum = ProcIo::default();
    for io in threads.values() {
        sum.add(io);
    }
    Some(sum)
}

/// Growth of each thread since `start`, summed over the threads alive now (a thread
/// started since counts from zero; one that exited since is lost).
pub fn thread_growth(start: &BTreeMap<u32, ProcIo>, now: &BTreeMap<u32, ProcIo>) -> ProcIo {
    let mut sum = ProcIo::default();
    for (tid, io) in now {
        sum.add(&io.since(&start.get(tid).copied().unwrap_or_default()));
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_io() {
        let io = ProcIo::parse(
            "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\n\
             write_bytes: 8192\ncancelled_write_bytes: 0\n",
        )
        .unwrap();
        assert_eq!((io.wchar, io.write_bytes), (20, 8192));
        assert_eq!(ProcIo::parse("rchar: 10\n"), None);
        assert_eq!(io.since(&io), ProcIo::default());
    }

    #[test]
    fn thread_growth_counts_new_threads_from_zero() {
        let io = |wchar| ProcIo {
            wchar,
            ..ProcIo::default()
        };
        let start = BTreeMap::from([(1, io(100)), (2, io(50))]);
        let now = BTreeMap::from([(1, io(160)), (3, io(7))]);
        assert_eq!(thread_growth(&start, &now).wchar, 67);
    }
}
