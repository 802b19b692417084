//! Mapping of redis errors into [`forge_core::Error`], in one place.

use forge_core::Error;
use redis::{ErrorKind, RedisError};

/// The backend name used in errors.
pub(crate) const BACKEND: &str = "redis";

/// Maps a redis error, keeping it as the source. Connection loss, timeouts, a server
/// still loading or asking to retry are retryable.
pub(crate) fn map(e: RedisError) -> Error {
    let retryable = e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || matches!(e.kind(), ErrorKind::Server(_)) && retryable_code(e.code());
    Error::backend(BACKEND, retryable, e)
}

fn retryable_code(code: Option<&str>) -> bool {
    matches!(
        code,
        Some("LOADING" | "TRYAGAIN" | "BUSY" | "MASTERDOWN" | "CLUSTERDOWN")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_errors_are_retryable_and_keep_their_source() {
        let io = RedisError::from(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        ));
        let err = map(io);
        assert!(err.is_retryable(), "{err:?}");
        assert!(std::error::Error::source(&err).is_some());
    }
}
