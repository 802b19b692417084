//! The one error type of forge-store.

use std::fmt;
use std::sync::Arc;

/// A boxed error source, kept so the cause chain survives.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result alias used across forge-store.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in forge-store, in kinds a caller can act on.
///
/// Backends map their native errors into these variants in one function and keep
/// the native error as `source`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The named row does not exist (or is not visible to the tenant).
    #[error("{what} not found: {id}")]
    NotFound {
        /// What was looked up: `session`, `message`, `part`.
        what: &'static str,
        /// The id that was looked up.
        id: String,
    },
    /// The write contradicts what is stored (e.g. a part for a removed message).
    #[error("conflict: {message}")]
    Conflict {
        /// What contradicts what.
        message: String,
        /// The backend's own error (a violated constraint), if there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// The input was malformed; the message names what was wrong.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The backend does not support this operation.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A stored value could not be encoded or decoded.
    #[error("codec error: {message}")]
    Codec {
        /// What failed.
        message: String,
        /// The underlying encoder/decoder error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// Stored data failed to decode or verify, or contradicts other stored data (an
    /// index entry without its row): changed behind the store's back, damaged, or
    /// written by a bug. Never returned as if it were intact data.
    #[error("corrupted data at {at}: {message}")]
    Corrupted {
        /// Where: the key, row or file that failed.
        at: String,
        /// What is wrong with it.
        message: String,
        /// The decoder's or verifier's error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// A subscriber fell behind and the bus dropped events it had not read.
    #[error("subscriber lagged behind and missed {missed} events")]
    Lagged {
        /// How many events were dropped.
        missed: u64,
    },
    /// The backend failed; `retryable` says whether trying again may succeed.
    #[error("{backend} backend error: {source}")]
    Backend {
        /// Which backend (`redb`, `sqlite`, …).
        backend: &'static str,
        /// Whether the same call may succeed when retried (e.g. connection loss).
        retryable: bool,
        /// The native error.
        #[source]
        source: BoxError,
    },
    /// A claim refused: another writer holds the session and its lease still runs
    /// ([`crate::fence`]).
    #[error(
        "session {session} is held by {holder} (epoch {epoch}, lease until Unix ms \
         {expires_ms}); wait for it, or take the session over"
    )]
    Held {
        /// The session.
        session: String,
        /// Who holds it.
        holder: String,
        /// The holder's epoch.
        epoch: u64,
        /// When the holder's lease runs out, Unix ms.
        expires_ms: i64,
    },
    /// A batch or renewal refused: its epoch is not the session's current one, so its
    /// writer no longer holds the session ([`crate::fence`]). Nothing was written.
    #[error("{}", fenced_message(.session, *.epoch, *.current, .holder.as_deref()))]
    Fenced {
        /// The session.
        session: String,
        /// The refused write's epoch; `None` for an unfenced write.
        epoch: Option<u64>,
        /// The session's current epoch (0: never claimed).
        current: u64,
        /// Who holds the current epoch, if anyone claimed the session.
        holder: Option<String>,
    },
    /// An error reported to more than one caller, standing in for the original: the
    /// same message, the same source chain, the same [`kind`](Error::kind) and
    /// retryability. A failed group commit reaches its session this way.
    #[error(transparent)]
    Shared(SharedError),
}

/// The kind of an [`Error`], which a caller matches to decide what to do: tell the user
/// their input was wrong, retry, report a damaged store. [`Error::kind`] sees through a
/// [`SharedError`] to its original.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`Error::NotFound`].
    NotFound,
    /// [`Error::Conflict`].
    Conflict,
    /// [`Error::InvalidInput`].
    InvalidInput,
    /// [`Error::Unsupported`].
    Unsupported,
    /// [`Error::Codec`].
    Codec,
    /// [`Error::Corrupted`].
    Corrupted,
    /// [`Error::Lagged`].
    Lagged,
    /// [`Error::Backend`].
    Backend,
    /// [`Error::Held`].
    Held,
    /// [`Error::Fenced`].
    Fenced,
}

impl ErrorKind {
    /// The kind's name, as reports and JSON error bodies show it: `"NotFound"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotFound => "NotFound",
            Self::Conflict => "Conflict",
            Self::InvalidInput => "InvalidInput",
            Self::Unsupported => "Unsupported",
            Self::Codec => "Codec",
            Self::Corrupted => "Corrupted",
            Self::Lagged => "Lagged",
            Self::Backend => "Backend",
            Self::Held => "Held",
            Self::Fenced => "Fenced",
        }
    }

    /// Whether the caller's input was at fault (invalid, or contradicting what is
    /// stored), as opposed to the store or the system.
    pub fn is_input(self) -> bool {
        matches!(self, Self::InvalidInput | Self::Conflict)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn fenced_message(session: &str, epoch: Option<u64>, current: u64, holder: Option<&str>) -> String {
    let what = match epoch {
        Some(e) => format!("a write with epoch {e}"),
        None => "a write without an epoch".to_owned(),
    };
    match holder {
        Some(h) => format!(
            "fenced: {what} to session {session} was refused: the session is at epoch \
             {current}, claimed by {h}"
        ),
        None => format!(
            "fenced: {what} to session {session} was refused: the session was never claimed"
        ),
    }
}

/// One error reported to several callers.
///
/// A failed group commit is reported to the failing session, to the caller whose
/// flush ran it, and to later calls waiting on what it dropped; the error itself is
/// kept once. It displays as the original and continues a `source()` chain with the
/// original's source, so a walk down the chain reaches the backend's own error;
/// [`SharedError::error`] gives the original (its kind, its retryability).
#[derive(Clone, Debug)]
pub struct SharedError(Arc<Error>);

impl SharedError {
    /// Shares `error`.
    pub fn new(error: Error) -> Self {
        Self(Arc::new(error))
    }

    /// The original error.
    pub fn error(&self) -> &Error {
        &self.0
    }
}

impl From<Error> for SharedError {
    fn from(error: Error) -> Self {
        Self::new(error)
    }
}

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl Error {
    /// An [`Error::InvalidInput`] from anything displayable.
    pub fn invalid(msg: impl fmt::Display) -> Self {
        Self::InvalidInput(msg.to_string())
    }

    /// An [`Error::Conflict`] from anything displayable.
    pub fn conflict(msg: impl fmt::Display) -> Self {
        Self::Conflict {
            message: msg.to_string(),
            source: None,
        }
    }

    /// An [`Error::Conflict`] keeping the backend's error as its source.
    pub fn conflict_with(msg: impl fmt::Display, source: impl Into<BoxError>) -> Self {
        Self::Conflict {
            message: msg.to_string(),
            source: Some(source.into()),
        }
    }

    /// An [`Error::Corrupted`] at `at` (a key, row or file).
    pub fn corrupted(at: impl fmt::Display, message: impl fmt::Display) -> Self {
        Self::Corrupted {
            at: at.to_string(),
            message: message.to_string(),
            source: None,
        }
    }

    /// An [`Error::Corrupted`] keeping the decoder's error as its source.
    pub fn corrupted_with(
        at: impl fmt::Display,
        message: impl fmt::Display,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::Corrupted {
            at: at.to_string(),
            message: message.to_string(),
            source: Some(source.into()),
        }
    }

    /// An [`Error::NotFound`].
    pub fn not_found(what: &'static str, id: impl fmt::Display) -> Self {
        Self::NotFound {
            what,
            id: id.to_string(),
        }
    }

    /// An [`Error::Codec`] keeping its source.
    pub fn codec(message: impl fmt::Display, source: impl Into<BoxError>) -> Self {
        Self::Codec {
            message: message.to_string(),
            source: Some(source.into()),
        }
    }

    /// An [`Error::Backend`] keeping its source.
    pub fn backend(backend: &'static str, retryable: bool, source: impl Into<BoxError>) -> Self {
        Self::Backend {
            backend,
            retryable,
            source: source.into(),
        }
    }

    /// What kind of error this is, for a caller to act on (a shared error has its
    /// original's kind).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::NotFound { .. } => ErrorKind::NotFound,
            Self::Conflict { .. } => ErrorKind::Conflict,
            Self::InvalidInput(_) => ErrorKind::InvalidInput,
            Self::Unsupported(_) => ErrorKind::Unsupported,
            Self::Codec { .. } => ErrorKind::Codec,
            Self::Corrupted { .. } => ErrorKind::Corrupted,
            Self::Lagged { .. } => ErrorKind::Lagged,
            Self::Backend { .. } => ErrorKind::Backend,
            Self::Held { .. } => ErrorKind::Held,
            Self::Fenced { .. } => ErrorKind::Fenced,
            Self::Shared(shared) => shared.error().kind(),
        }
    }

    /// Whether retrying the same call may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Backend { retryable, .. } => *retryable,
            Self::Shared(shared) => shared.error().is_retryable(),
            _ => false,
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self::codec("JSON", e)
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[derive(Debug)]
    struct Native;

    impl fmt::Display for Native {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("native failure")
        }
    }

    impl std::error::Error for Native {}

    #[test]
    fn a_shared_error_stands_in_for_the_original() {
        let shared = SharedError::new(Error::backend("test", true, Native));
        let reported = Error::Shared(shared.clone());
        assert_eq!(reported.to_string(), "test backend error: native failure");
        assert_eq!(reported.kind(), ErrorKind::Backend);
        assert!(reported.is_retryable());
        let source = reported.source().expect("the original's source");
        assert!(source.downcast_ref::<Native>().is_some());
        assert_eq!(shared.error().kind(), ErrorKind::Backend);
    }

    #[test]
    fn a_conflict_over_a_shared_error_chains_to_the_native_error() {
        let shared = SharedError::new(Error::backend("test", false, Native));
        let reported = Error::conflict_with("group commit failed", shared);
        assert_eq!(reported.kind(), ErrorKind::Conflict);
        let first = reported.source().expect("the shared error");
        let original = first.downcast_ref::<SharedError>().expect("a SharedError");
        assert_eq!(original.error().kind(), ErrorKind::Backend);
        let native = first.source().expect("the native error");
        assert!(native.downcast_ref::<Native>().is_some());
    }
}
