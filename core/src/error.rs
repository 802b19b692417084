//! The one error type of forge-store.

use std::fmt;

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
    #[error("conflict: {0}")]
    Conflict(String),
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
}

impl Error {
    /// An [`Error::InvalidInput`] from anything displayable.
    pub fn invalid(msg: impl fmt::Display) -> Self {
        Self::InvalidInput(msg.to_string())
    }

    /// An [`Error::Conflict`] from anything displayable.
    pub fn conflict(msg: impl fmt::Display) -> Self {
        Self::Conflict(msg.to_string())
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

    /// Whether retrying the same call may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Backend {
                retryable: true,
                ..
            }
        )
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Self::codec("JSON", e)
    }
}
