//! Mapping redb's errors into [`forge_core::Error`].

use std::fmt;
use std::path::{Path, PathBuf};

use forge_core::Error;

/// The backend name used in errors and capabilities.
pub(crate) const BACKEND: &str = "redb";

/// Maps any redb error into [`Error::Backend`], keeping it as the source.
///
/// `retryable` is true only where the same call may succeed later without anyone
/// repairing anything: the file is held open by another process, or a write
/// transaction is in progress. Storage, I/O, corruption, format and type errors are
/// not retryable.
pub(crate) fn map<E: Into<redb::Error>>(err: E) -> Error {
    let err: redb::Error = err.into();
    if let redb::Error::Corrupted(msg) = &err {
        return Error::corrupted("redb file", msg);
    }
    Error::backend(BACKEND, is_retryable(&err), err)
}

fn is_retryable(err: &redb::Error) -> bool {
    matches!(
        err,
        redb::Error::DatabaseAlreadyOpen
            | redb::Error::WouldBlock
            | redb::Error::TransactionInProgress
    )
}

/// Maps an error of opening the file at `path`, naming the path and keeping the redb
/// error as the source.
pub(crate) fn open<E: Into<redb::Error>>(path: &Path, err: E) -> Error {
    let err: redb::Error = err.into();
    if let redb::Error::Corrupted(msg) = &err {
        // A cut file says "File truncated below stored layout".
        return Error::corrupted(path.display(), msg);
    }
    if matches!(err, redb::Error::DatabaseAlreadyOpen) {
        return Error::backend(
            BACKEND,
            true,
            AlreadyOpen {
                path: path.to_path_buf(),
                pid: holder(path),
                source: err,
            },
        );
    }
    let retryable = is_retryable(&err);
    Error::backend(
        BACKEND,
        retryable,
        OpenFailed {
            path: path.to_path_buf(),
            source: err,
        },
    )
}

/// The file is open in another process (redb locks it for one writer).
#[derive(Debug)]
pub(crate) struct AlreadyOpen {
    path: PathBuf,
    pid: Option<u32>,
    source: redb::Error,
}

impl fmt::Display for AlreadyOpen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pid = self.pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        write!(
            f,
            "{} is open in another process{pid}: redb lets one process at a time use a \
             file; wait for it to close (redb URL option wait_ms=MS, or --wait SECS on \
             the command line), or let one process serve it to the others \
             (`forge-store serve`)",
            self.path.display()
        )
    }
}

impl std::error::Error for AlreadyOpen {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// The process holding the lock on `path`, from `/proc/locks` (Linux; `None` elsewhere
/// or when it cannot be told).
fn holder(path: &Path) -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::MetadataExt;
        let inode = std::fs::metadata(path).ok()?.ino();
        let locks = std::fs::read_to_string("/proc/locks").ok()?;
        let me = std::process::id();
        locks.lines().find_map(|line| {
            // `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`
            let fields: Vec<&str> = line.split_whitespace().collect();
            let at = fields.iter().position(|f| f.matches(':').count() == 2)?;
            let ino: u64 = fields[at].rsplit(':').next()?.parse().ok()?;
            let pid: u32 = fields.get(at.checked_sub(1)?)?.parse().ok()?;
            (ino == inode && pid != me).then_some(pid)
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        None
    }
}

/// A failed write's error from redb, with the file named, and with redb's "previous I/O
/// error" (what every write says after one failed, until the file is opened again)
/// replaced by what that first failure was. `first` keeps it for the store.
pub(crate) fn in_write(
    err: Error,
    path: &Path,
    first: &parking_lot::Mutex<Option<String>>,
) -> Error {
    let Error::Backend {
        backend,
        retryable,
        source,
    } = err
    else {
        return err;
    };
    let Some(redb_err) = source.downcast_ref::<redb::Error>() else {
        return Error::Backend {
            backend,
            retryable,
            source,
        };
    };
    let text = match redb_err {
        redb::Error::PreviousIo => {
            let earlier = first
                .lock()
                .clone()
                .unwrap_or_else(|| "an earlier write failed".to_owned());
            format!(
                "{}: an earlier write failed ({earlier}); nothing more is written until \
                 the store is opened again",
                path.display()
            )
        }
        redb::Error::Io(io) => {
            first.lock().get_or_insert_with(|| io.to_string());
            format!("{}: {redb_err}", path.display())
        }
        _ => format!("{}: {redb_err}", path.display()),
    };
    Error::backend(backend, retryable, Named { text, source })
}

/// An error with the text a user needs, keeping the native error as its source.
#[derive(Debug)]
struct Named {
    text: String,
    source: Box<dyn std::error::Error + Send + Sync>,
}

impl fmt::Display for Named {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Named {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.source.as_ref())
    }
}

/// Opening a redb file failed.
#[derive(Debug)]
pub(crate) struct OpenFailed {
    path: PathBuf,
    source: redb::Error,
}

impl fmt::Display for OpenFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cannot open {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for OpenFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// An [`Error::Corrupted`] for broken invariants of the stored data (an index entry
/// without its row): the file was changed behind the store's back or a bug broke an
/// invariant.
pub(crate) fn inconsistent(at: impl fmt::Display, msg: impl fmt::Display) -> Error {
    Error::corrupted(format_args!("redb {at}"), msg)
}

/// A task running redb work panicked or was cancelled. redb panics on some damaged
/// files (an out-of-range page number, a broken page header): that is reported as
/// [`Error::Corrupted`], with redb's panic message.
pub(crate) fn join(err: tokio::task::JoinError) -> Error {
    if err.is_panic() {
        return panicked(err.into_panic().as_ref());
    }
    Error::backend(BACKEND, false, err)
}

/// [`Error::Corrupted`] for a panic caught in redb's code.
pub(crate) fn panicked(payload: &(dyn std::any::Any + Send)) -> Error {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned());
    Error::corrupted(
        "redb file",
        format!("redb failed inside its own code ({what}); the file is probably damaged"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn keeps_the_source_and_classifies_retryability() {
        let io = redb::StorageError::Io(std::io::Error::other("disk on fire"));
        let err = map(io);
        assert!(!err.is_retryable());
        assert!(err.to_string().contains("disk on fire"), "{err}");
        let source = err.source().expect("source kept");
        assert!(source.downcast_ref::<redb::Error>().is_some());

        assert!(map(redb::DatabaseError::DatabaseAlreadyOpen).is_retryable());
        let corrupted = map(redb::StorageError::Corrupted("x".into()));
        assert!(!corrupted.is_retryable());
        assert!(
            matches!(corrupted, Error::Corrupted { .. }),
            "{corrupted:?}"
        );
    }
}
