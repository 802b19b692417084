//! Test services (Postgres, Redis) chosen by environment variable, skipped loudly.

use std::io::Write as _;

/// The variable that turns a missing service from a skip into a failure (CI sets it).
pub const REQUIRE_SERVICES: &str = "FORGE_TEST_REQUIRE_SERVICES";

/// The URL of a test service from the environment variable `var` (for example
/// `FORGE_TEST_POSTGRES_URL`), read at run time.
///
/// Unset or empty, it writes `SKIPPED: <var> not set (<what>)` straight to stderr (past
/// libtest's output capture, so the skip is seen) and returns `None` — unless
/// `FORGE_TEST_REQUIRE_SERVICES=1`, where it panics: a missing service is then a failure.
pub fn service_url(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url.trim().to_owned()),
        _ => {
            assert!(
                std::env::var(REQUIRE_SERVICES).as_deref() != Ok("1"),
                "{REQUIRE_SERVICES}=1 but {var} is not set ({what})"
            );
            let _ = writeln!(std::io::stderr(), "SKIPPED: {var} not set ({what})");
            None
        }
    }
}
