//! Checks of a SQLite database's files before SQLite opens them: an empty file is not a
//! store, and a write-ahead log (`-wal`) damaged before its end is refused.
//!
//! SQLite reads the WAL up to the first frame that fails its checksum and ignores the
//! rest, without a word: a flipped byte in the middle of the log would drop every commit
//! after it. [`check_wal`] walks the log as SQLite does and, where SQLite would stop,
//! looks for a later frame of the same log (same salts) that verifies against the frame
//! before it: if there is one, the log was damaged rather than cut by a crash (a crash
//! cuts only the end), and the open fails with [`Error::Corrupted`].
//!
//! What cannot be told from a crash: damage in the last frame, a log cut short, or a
//! header that no frame after it confirms. A log whose header fails its checksum while
//! its first frames chain is refused.

use std::path::{Path, PathBuf};

use forge_core::{Error, Result};

/// WAL header length.
const HEADER: usize = 32;
/// WAL frame header length.
const FRAME_HEADER: usize = 24;

/// A file that exists and is empty is not a store: SQLite would make it a new, empty
/// database, and a store whose file was cut to nothing would look like one with no
/// sessions.
pub(crate) fn check_not_empty(path: &Path) -> Result<()> {
    // Another process may be creating the store this moment: SQLite creates the file
    // empty and writes its header with the first transaction. Give it a moment before
    // calling an empty file damaged.
    let empty = || std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0);
    for _ in 0..CREATION_GRACE_POLLS {
        if !empty() {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    if empty() {
        return Err(Error::corrupted(
            path.display(),
            "empty file: not a forge-store SQLite database (cut to nothing, or a crash \
             while it was being created); remove it to start a new store there",
        ));
    }
    Ok(())
}

/// How many times (20 ms apart) an empty file is looked at again before it is refused.
const CREATION_GRACE_POLLS: u32 = 100;

/// What a write error SQLite reports only as "disk I/O error" (`SQLITE_IOERR_WRITE`)
/// was, where it can be told: the process's file-size limit (`ulimit -f`, EFBIG) reached
/// by the database or its WAL (Linux, from `/proc/self/limits`).
pub(crate) fn why_write_failed(
    db: &Path,
    err: &(dyn std::error::Error + 'static),
) -> Option<String> {
    let sqlx::Error::Database(e) = err.downcast_ref::<sqlx::Error>()? else {
        return None;
    };
    let code: i32 = e.code()?.parse().ok()?;
    // SQLITE_IOERR_WRITE, SQLITE_IOERR_TRUNCATE.
    if !matches!(code, 778 | 1546) {
        return None;
    }
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max file size"))?;
    let soft: u64 = line
        .trim_start_matches("Max file size")
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let largest = [db.to_path_buf(), wal_path(db)]
        .iter()
        .filter_map(|p| std::fs::metadata(p).ok())
        .map(|m| m.len())
        .max()?;
    // A write that would cross the limit fails; the file stays just below it.
    (largest + 65_536 > soft).then(|| {
        format!(
            "file too large: the process's file-size limit (ulimit -f) is {soft} bytes, \
             and the file is {largest}"
        )
    })
}

/// The WAL file of the database at `db`.
pub(crate) fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

/// The shared-memory index of `db`'s WAL.
pub(crate) fn shm_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-shm");
    PathBuf::from(name)
}

/// Refuses a WAL that was damaged before its end (see the module docs). A missing,
/// empty or unreadable WAL is left to SQLite.
pub(crate) fn check_wal(db: &Path) -> Result<()> {
    let path = wal_path(db);
    let Ok(bytes) = std::fs::read(&path) else {
        return Ok(());
    };
    match damage(&bytes) {
        None => Ok(()),
        Some(what) => Err(Error::corrupted(
            format!("write-ahead log {}", path.display()),
            format!(
                "{what}: the log is damaged, and SQLite would drop the commits after the \
                 damage without a word; restore it from a backup, or move it away to open \
                 the database as of its last checkpoint"
            ),
        )),
    }
}

/// The words of a WAL, in the byte order its magic number names.
struct Wal<'a> {
    bytes: &'a [u8],
    big_endian: bool,
    page: usize,
}

impl Wal<'_> {
    fn u32(&self, at: usize) -> u32 {
        let b = [
            self.bytes[at],
            self.bytes[at + 1],
            self.bytes[at + 2],
            self.bytes[at + 3],
        ];
        u32::from_be_bytes(b)
    }

    /// SQLite's WAL checksum of `data` (a multiple of 8 bytes) seeded with `s`.
    fn checksum(&self, mut s: (u32, u32), data: &[u8]) -> (u32, u32) {
        for w in data.chunks_exact(8) {
            let word = |i: usize| {
                let b = [w[i], w[i + 1], w[i + 2], w[i + 3]];
                if self.big_endian {
                    u32::from_be_bytes(b)
                } else {
                    u32::from_le_bytes(b)
                }
            };
            s.0 = s.0.wrapping_add(word(0)).wrapping_add(s.1);
            s.1 = s.1.wrapping_add(word(4)).wrapping_add(s.0);
        }
        s
    }

    fn frames(&self) -> usize {
        (self.bytes.len() - HEADER) / (FRAME_HEADER + self.page)
    }

    fn frame(&self, i: usize) -> usize {
        HEADER + i * (FRAME_HEADER + self.page)
    }

    fn salts(&self, at: usize) -> &[u8] {
        &self.bytes[at..at + 8]
    }

    fn stored(&self, at: usize) -> (u32, u32) {
        (self.u32(at), self.u32(at + 4))
    }

    /// Whether frame `i` verifies when its checksum is seeded with `seed`.
    fn verifies(&self, i: usize, seed: (u32, u32)) -> bool {
        let at = self.frame(i);
        let mut s = self.checksum(seed, &self.bytes[at..at + 8]);
        s = self.checksum(
            s,
            &self.bytes[at + FRAME_HEADER..at + FRAME_HEADER + self.page],
        );
        s == self.stored(at + 16)
    }

    /// Frame `i` (i ≥ 1) carries `salts` and verifies against the checksum frame `i - 1`
    /// stores: it was written after frame `i - 1` in the same log.
    fn chains(&self, i: usize, salts: &[u8]) -> bool {
        let at = self.frame(i);
        self.salts(at + 8) == salts && self.verifies(i, self.stored(self.frame(i - 1) + 16))
    }

    /// Frame `i` ends a transaction: its header stores the database size after the
    /// commit (zero in every other frame).
    fn commits(&self, i: usize) -> bool {
        self.u32(self.frame(i) + 4) != 0
    }

    /// The frames from `j` on that chain one after the other (`j` itself taken as
    /// read) include a commit frame: a transaction that SQLite confirmed lies there.
    /// Frames of a transaction that failed before its commit frame was written (a write
    /// refused for a full disk or a file size limit, after SQLite rewrote one of the
    /// transaction's earlier frames in place) chain without one, and are not damage:
    /// SQLite drops them, and they held nothing confirmed.
    fn committed_from(&self, j: usize, salts: &[u8]) -> bool {
        (j..self.frames())
            .take_while(|&k| k == j || self.chains(k, salts))
            .any(|k| self.commits(k))
    }
}

/// What is damaged in the WAL `bytes`, if damage shows.
fn damage(bytes: &[u8]) -> Option<String> {
    if bytes.len() < HEADER {
        return None;
    }
    let magic = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let big_endian = match magic {
        0x377f_0682 => false,
        0x377f_0683 => true,
        _ => return None,
    };
    let page = u32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
    if !(512..=65_536).contains(&page) || !page.is_power_of_two() {
        return None;
    }
    let wal = Wal {
        bytes,
        big_endian,
        page,
    };
    let frames = wal.frames();
    let header_ok = wal.checksum((0, 0), &bytes[..24]) == wal.stored(24);
    if !header_ok {
        // Frames that chain after the first, under the first frame's salts, were written
        // in this log: its header was damaged after they were.
        if frames >= 2 {
            let salts = wal.salts(wal.frame(0) + 8).to_vec();
            if wal.chains(1, &salts) && wal.committed_from(1, &salts) {
                return Some("its header fails its checksum while its frames verify".into());
            }
        }
        return None;
    }
    let salts = wal.salts(16).to_vec();
    let mut seed = wal.stored(24);
    let mut i = 0;
    while i < frames {
        let at = wal.frame(i);
        if wal.salts(at + 8) != salts.as_slice() || !wal.verifies(i, seed) {
            break;
        }
        seed = wal.stored(at + 16);
        i += 1;
    }
    let later =
        (i + 1..frames).find(|&j| wal.chains(j, &salts) && wal.committed_from(j, &salts))?;
    Some(format!(
        "frame {i} fails its checksum while frame {later} of the same log verifies"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WAL of `frames` frames of 512-byte pages, checksummed as SQLite does; each
    /// frame ends its own transaction.
    fn wal(frames: usize) -> Vec<u8> {
        wal_with(frames, |_| true)
    }

    /// A WAL of `frames` frames of 512-byte pages; frame `f` is a commit frame when
    /// `commits(f)`.
    fn wal_with(frames: usize, commits: impl Fn(usize) -> bool) -> Vec<u8> {
        let mut b = vec![0u8; HEADER];
        b[..4].copy_from_slice(&0x377f_0682_u32.to_be_bytes());
        b[4..8].copy_from_slice(&3_007_000_u32.to_be_bytes());
        b[8..12].copy_from_slice(&512_u32.to_be_bytes());
        b[16..24].copy_from_slice(b"saltsalt");
        let w = Wal {
            bytes: &[],
            big_endian: false,
            page: 512,
        };
        let mut s = w.checksum((0, 0), &b[..24]);
        b[24..28].copy_from_slice(&s.0.to_be_bytes());
        b[28..32].copy_from_slice(&s.1.to_be_bytes());
        for f in 0..frames {
            let mut h = vec![0u8; FRAME_HEADER];
            h[..4].copy_from_slice(&u32::try_from(f + 1).unwrap().to_be_bytes());
            if commits(f) {
                // The database's size in pages after the commit.
                h[4..8].copy_from_slice(&u32::try_from(f + 1).unwrap().to_be_bytes());
            }
            h[8..16].copy_from_slice(b"saltsalt");
            let page: Vec<u8> = (0..512)
                .map(|i| u8::try_from((i * 7 + f) % 251).unwrap())
                .collect();
            s = w.checksum(s, &h[..8]);
            s = w.checksum(s, &page);
            h[16..20].copy_from_slice(&s.0.to_be_bytes());
            h[20..24].copy_from_slice(&s.1.to_be_bytes());
            b.extend_from_slice(&h);
            b.extend_from_slice(&page);
        }
        b
    }

    #[test]
    fn an_intact_or_cut_log_shows_no_damage_and_a_flip_before_the_end_does() {
        let good = wal(4);
        assert_eq!(damage(&good), None);
        // Cut anywhere: what a crash leaves.
        for len in [0, 20, 40, 600, good.len() - 1] {
            assert_eq!(damage(&good[..len]), None, "cut to {len}");
        }
        let frame = FRAME_HEADER + 512;
        // A flip in the last frame cannot be told from a torn last write.
        let mut last = good.clone();
        last[HEADER + 3 * frame + 100] ^= 1;
        assert_eq!(damage(&last), None);
        // A flip in frame 1 while frames 2 and 3 verify.
        let mut mid = good.clone();
        mid[HEADER + frame + 100] ^= 1;
        let what = damage(&mid).unwrap();
        assert!(what.contains("frame 1 fails"), "{what}");
        // A flip in the header's checksum.
        let mut head = good.clone();
        head[25] ^= 1;
        assert!(damage(&head).unwrap().contains("header"));
        // Frames of an older log (other salts) after the end are not damage.
        let mut older = good.clone();
        older[HEADER + 2 * frame + 8] ^= 1; // frame 2's salt: the log ends at frame 2
        older[HEADER + 3 * frame + 8] ^= 1;
        assert_eq!(damage(&older), None);
    }

    #[test]
    fn frames_of_a_transaction_that_never_committed_are_not_damage() {
        let frame = FRAME_HEADER + 512;
        // Frames 0 and 1 commit; frames 2 to 5 are a transaction whose commit frame was
        // never written, and SQLite rewrote frame 3's page in place before the write
        // that failed. Frames 4 and 5 still chain after frame 3's stored checksum.
        let mut failed = wal_with(6, |f| f < 2);
        failed[HEADER + 3 * frame + FRAME_HEADER + 7] ^= 0x55;
        assert_eq!(damage(&failed), None);
        // The same break with a commit frame after it: a confirmed transaction would be
        // dropped.
        let mut committed = wal_with(6, |f| f < 2 || f == 5);
        committed[HEADER + 3 * frame + FRAME_HEADER + 7] ^= 0x55;
        let what = damage(&committed).unwrap();
        assert!(what.contains("frame 3 fails"), "{what}");
        // A damaged header before frames with no commit among them loses nothing.
        let mut head = wal_with(4, |_| false);
        head[25] ^= 1;
        assert_eq!(damage(&head), None);
    }
}
