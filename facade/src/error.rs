//! The errors of the facade's operations.
//!
//! Store and bus failures arrive as [`forge_core::Error`] and stay one, as the source
//! of [`Error::Store`] or [`Error::Open`]. What the facade adds is where: the URL that
//! would not open (always redacted), the line of a stream that did not fit, the file
//! that could not be read. Input errors and backend errors are different variants, so
//! a caller can tell "your stream is malformed" from "the database went away".
//!
//! Input errors quote the input, which may be anything: every [`Error::Input`] is built
//! through one constructor that [`clip`]s its text, so a 5 MB value or a newline in an
//! id gives a short message on one line.

use std::fmt;
use std::path::PathBuf;

use forge_core::{ErrorKind, MessageId, SessionId, TenantId};

use crate::clip::clip;

/// A result of the facade.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in a facade operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The URL is malformed or names an unknown scheme. `url` is redacted.
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
    /// The backend could not be opened or connected to; a URL carrying options its
    /// backend does not take is this with an [`forge_core::Error::InvalidInput`] source.
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
    ///
    /// `at` and `message` are [`clip`](crate::text::clip)ped: one line each, every quoted
    /// value cut to [`QUOTE_MAX`](crate::text::QUOTE_MAX) bytes.
    #[error("{at}: {message}")]
    Input {
        /// Where: `line 12`, `messages[3]`, `event 40`.
        at: String,
        /// What is wrong.
        message: String,
        /// The parser's or the engine's own error, when there is one: a
        /// [`ClippedError`], which displays as clipped and gives the original.
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
    /// A message that was named does not exist in the session.
    #[error("message {message} not found in session {session}")]
    MessageNotFound {
        /// The session searched.
        session: SessionId,
        /// The message id.
        message: MessageId,
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
    /// What kind of error this is, to match on instead of its text: the input's fault
    /// ([`ErrorKind::InvalidInput`], [`ErrorKind::Conflict`]), something missing
    /// ([`ErrorKind::NotFound`]), a backend this build lacks
    /// ([`ErrorKind::Unsupported`]), or the store's own kind for a store or open error
    /// (a file the caller named that cannot be read or written is
    /// [`ErrorKind::Backend`]).
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Url { .. } | Self::Input { .. } => ErrorKind::InvalidInput,
            Self::FeatureDisabled { .. } => ErrorKind::Unsupported,
            Self::Open { source, .. } | Self::Store { source, .. } => source.kind(),
            Self::SessionNotFound { .. } | Self::MessageNotFound { .. } => ErrorKind::NotFound,
            Self::Io { .. } => ErrorKind::Backend,
        }
    }

    /// An [`Error::Input`] without a further source; `at` and `message` are clipped.
    pub(crate) fn input(at: impl AsRef<str>, message: impl AsRef<str>) -> Self {
        Self::Input {
            at: clip(at.as_ref()),
            message: clip(message.as_ref()),
            source: None,
        }
    }

    /// An [`Error::Input`] caused by `source` (the parser's or the engine's error), kept
    /// as a [`ClippedError`]; `at` and `message` are clipped.
    pub(crate) fn input_with(
        at: impl AsRef<str>,
        message: impl AsRef<str>,
        source: impl Into<forge_core::BoxError>,
    ) -> Self {
        Self::Input {
            at: clip(at.as_ref()),
            message: clip(message.as_ref()),
            source: Some(Box::new(ClippedError(source.into()))),
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

    /// An input error a lenient replay skips: the line itself is bad. A conflict with
    /// what the store holds is the store's answer, not the line's fault, and is not.
    pub(crate) fn is_skippable_input(&self) -> bool {
        let Self::Input { source, .. } = self else {
            return false;
        };
        let engine = source
            .as_deref()
            .and_then(|s| s.downcast_ref::<ClippedError>())
            .and_then(|c| c.get_ref().downcast_ref::<forge_core::Error>());
        !matches!(engine, Some(forge_core::Error::Conflict { .. }))
    }
}

/// The source of an [`Error::Input`]: the parser's or the engine's error, displayed
/// [`clip`](crate::text::clip)ped like the message (their own text may quote the input in
/// full: serde writes `invalid type: string "…"` with the whole string).
/// [`ClippedError::get_ref`] gives the original, e.g. to downcast it to
/// `serde_json::Error` or [`forge_core::Error`].
pub struct ClippedError(forge_core::BoxError);

impl ClippedError {
    /// The original error.
    pub fn get_ref(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self.0.as_ref()
    }

    /// The original error, unwrapped.
    pub fn into_inner(self) -> forge_core::BoxError {
        self.0
    }
}

impl fmt::Display for ClippedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&clip(&self.0.to_string()))
    }
}

impl fmt::Debug for ClippedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("ClippedError")
            .field(&clip(&format!("{:?}", self.0)))
            .finish()
    }
}

impl std::error::Error for ClippedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
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
/// is the input's fault; anything else is the store's — a lost connection, a refused
/// write, a full disk — and is reported as a store error, never as "does not fit".
/// Judged by [`forge_core::Error::kind`], which sees through a shared group-commit
/// error to the store's own.
pub(crate) fn classify(at: String, what: &str, e: forge_core::Error) -> Error {
    if e.kind().is_input() {
        Error::input_with(at, format!("{what} does not fit: {e}"), e)
    } else {
        Error::store(format!("{at}: storing {what}"), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_tell_the_input_from_the_store() {
        let input = Error::input("line 3", "bad");
        assert_eq!(input.kind(), ErrorKind::InvalidInput);
        let lost = Error::store(
            "line 4: storing text-end",
            forge_core::Error::backend("postgres", true, "connection reset"),
        );
        assert_eq!(lost.kind(), ErrorKind::Backend);
        assert!(lost.is_retryable() && !input.is_retryable());
        let conflict = classify(
            "line 5".into(),
            "tool-result",
            forge_core::Error::conflict("a removed message"),
        );
        assert!(matches!(conflict, Error::Input { .. }), "{conflict}");
        assert_eq!(conflict.kind(), ErrorKind::InvalidInput);
        let missing = Error::SessionNotFound {
            tenant: TenantId::default(),
            session: SessionId::from("ses_x".to_owned()),
        };
        assert_eq!(missing.kind(), ErrorKind::NotFound);
    }

    #[test]
    fn input_errors_are_clipped_and_so_is_their_source() {
        let big = "B".repeat(5 << 20);
        let parsed: std::result::Result<u64, _> = serde_json::from_value(big.clone().into());
        let Err(serde) = parsed else {
            panic!("a string is no u64")
        };
        assert!(serde.to_string().len() > big.len(), "serde quotes it all");
        let e = Error::input_with(
            format!("message {:?}", "m\nid"),
            format!("`t`: {serde}"),
            serde,
        );
        let text = e.to_string();
        assert!(
            text.len() < 2 * crate::text::QUOTE_MAX,
            "{} bytes",
            text.len()
        );
        assert!(text.contains(&format!("({} bytes)", big.len())), "{text}");
        let source = std::error::Error::source(&e).expect("the parser's error");
        assert!(source.to_string().len() < 2 * crate::text::QUOTE_MAX);
        assert!(format!("{source:?}").len() < 2 * crate::text::QUOTE_MAX);
        let original = source
            .downcast_ref::<ClippedError>()
            .and_then(|c| c.get_ref().downcast_ref::<serde_json::Error>());
        assert!(original.is_some(), "the original stays reachable");
        let plain = Error::input("line\n2", "bad\u{7}");
        assert_eq!(plain.to_string(), "line\\n2: bad\\u{7}");
    }

    #[test]
    fn a_conflict_is_not_skippable_input() {
        let conflict = classify(
            "line 1".into(),
            "x",
            forge_core::Error::conflict("stored differently"),
        );
        assert!(conflict.is_input() && !conflict.is_skippable_input());
        let invalid = classify("line 1".into(), "x", forge_core::Error::invalid("bad"));
        assert!(invalid.is_skippable_input());
    }

    #[test]
    fn a_backend_failure_is_a_store_error_even_when_shared_by_a_group_commit() {
        let lost = forge_core::Error::backend(
            "postgres",
            true,
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused"),
        );
        let shared = forge_core::Error::Shared(forge_core::SharedError::new(lost));
        let e = classify("line 7".into(), "text-end", shared);
        assert!(!e.is_input(), "{e}");
        assert!(e.is_retryable(), "{e}");
        let text = e.to_string();
        assert!(!text.contains("does not fit"), "{text}");
        assert!(
            text.starts_with("line 7: storing text-end: postgres backend error"),
            "{text}"
        );
    }
}
