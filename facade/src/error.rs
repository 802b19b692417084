//! The errors of the facade's operations.
//!
//! Store and bus failures arrive as [`forge_core::Error`] and stay one, as the source
//! of [`Error::Store`] or [`Error::Open`]. What the facade adds is where: the URL that
//! would not open (always redacted), the line of a stream that did not fit, the file
//! that could not be read. Input errors and backend errors are different variants, so
//! a caller can tell "your stream is malformed" from "the database went away".

use std::path::PathBuf;

use forge_core::{SessionId, TenantId};

/// A result of the facade.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in a facade operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL is malformed, names an unknown scheme, or carries options its backend
    /// does not take. `url` is redacted.
    #[error("cannot open backend {url}: {reason}")]
    Url {
        /// The URL, password hidden.
        url: String,
        /// What is wrong with it, and what is supported.
        reason: String,
    },
    /// The URL names a backend this build was compiled without.
    #[error(
        "cannot open backend {url}: {scheme}:// needs forge-store's `{feature}` feature \
         (e.g. features = [\"{feature}\"] on the forge-store dependency)"
    )]
    FeatureDisabled {
        /// The URL, password hidden.
        url: String,
        /// Its scheme.
        scheme: String,
        /// The cargo feature that compiles the backend in.
        feature: &'static str,
    },
    /// The backend could not be opened or connected to.
    #[error("cannot open backend {url}: {source}")]
    Open {
        /// The URL, password hidden.
        url: String,
        /// The backend's error.
        #[source]
        source: forge_core::Error,
    },
    /// The input (a stream line, an import document) is not what it must be. Nothing of
    /// the bad item was stored.
    #[error("{at}: {message}")]
    Input {
        /// Where: `line 12`, `messages[3]`, `event 40`.
        at: String,
        /// What is wrong.
        message: String,
        /// The parser's or the engine's own error, when there is one.
        #[source]
        source: Option<forge_core::BoxError>,
    },
    /// A session that was named does not exist in the tenant.
    #[error("session {session} not found in tenant {tenant}")]
    SessionNotFound {
        /// The tenant searched.
        tenant: TenantId,
        /// The session id.
        session: SessionId,
    },
    /// The store or the bus failed while doing `action`. The input was fine.
    #[error("{action}: {source}")]
    Store {
        /// What was being done (`line 12: storing text-end`, `writing message msg_…`).
        action: String,
        /// The engine's error, with its kind ([`forge_core::Error::is_retryable`] …).
        #[source]
        source: forge_core::Error,
    },
    /// A file could not be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// `read` or `write`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// An [`Error::Input`] without a further source.
    pub(crate) fn input(at: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Input {
            at: at.into(),
            message: message.into(),
            source: None,
        }
    }

    /// An [`Error::Store`] for `action`.
    pub(crate) fn store(action: impl Into<String>, source: forge_core::Error) -> Self {
        Self::Store {
            action: action.into(),
            source,
        }
    }

    /// Whether the same call may succeed when retried (a lost connection, a busy file).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Open { source, .. } | Self::Store { source, .. } => source.is_retryable(),
            _ => false,
        }
    }

    /// Whether the caller's input was at fault (rather than the backend).
    pub fn is_input(&self) -> bool {
        matches!(self, Self::Input { .. })
    }
}

impl From<forge_core::Error> for Error {
    /// A store error with no more context than its own text.
    fn from(source: forge_core::Error) -> Self {
        Self::store("store", source)
    }
}

/// An error from `at` in the input, keeping the engine's error as its source: the
/// engine's [`forge_core::Error::InvalidInput`] (and a conflict with what is stored)
/// is the input's fault; anything else is the store's.
pub(crate) fn classify(at: String, what: &str, e: forge_core::Error) -> Error {
    match e {
        forge_core::Error::InvalidInput(_) | forge_core::Error::Conflict { .. } => Error::Input {
            message: format!("{what} does not fit: {e}"),
            at,
            source: Some(Box::new(e)),
        },
        other => Error::store(format!("{at}: {what}"), other),
    }
}
