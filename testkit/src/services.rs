//! Test services chosen by environment variable, and the loud skip of a test whose
//! requirement is missing.

use std::io::Write as _;

/// The variable that turns a missing service from a skip into a failure (CI sets it).
pub const REQUIRE_SERVICES: &str = "FORGE_TEST_REQUIRE_SERVICES";

/// Whether a missing service must fail the test (`FORGE_TEST_REQUIRE_SERVICES=1`).
pub fn required() -> bool {
    std::env::var(REQUIRE_SERVICES).is_ok_and(|v| v.trim() == "1")
}

/// Skips `test` loudly because of `why`: writes `SKIPPED: <test>: <why>` straight to
/// stderr (past libtest's output capture, so the skip is seen). Under
/// `FORGE_TEST_REQUIRE_SERVICES=1` it panics instead: a missing service is a failure.
pub fn skip(test: &str, why: &str) {
    skip_unless(REQUIRE_SERVICES, test, why);
}

/// As [`skip`], with the variable that makes the skip a failure named: `require=1`
/// (`FORGE_TEST_REQUIRE_FUSE`, `FORGE_TEST_REQUIRE_NODE`, …) panics instead.
pub fn skip_unless(require: &str, test: &str, why: &str) {
    assert!(
        std::env::var(require).map_or(true, |v| v.trim() != "1"),
        "{test}: {why} ({require}=1, so this is a failure)"
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: {test}: {why}");
}

/// The URL of a test service from the environment variable `var` (for example
/// `FORGE_TEST_POSTGRES_URL`), read at run time and trimmed.
///
/// Unset or empty, it writes `SKIPPED: <var> not set (<what>)` straight to stderr and
/// returns `None` — or panics under `FORGE_TEST_REQUIRE_SERVICES=1`.
pub fn service_url(var: &str, what: &str) -> Option<String> {
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Some(url.trim().to_owned()),
        _ => {
            assert!(
                !required(),
                "{REQUIRE_SERVICES}=1 but {var} is not set ({what})"
            );
            let _ = writeln!(std::io::stderr(), "SKIPPED: {var} not set ({what})");
            None
        }
    }
}

/// A Node.js project of the tests (`dir`) when `node` runs and every package `installed`
/// names (a path under `dir/node_modules`, for example `ai7/package.json`) is there;
/// otherwise skips `test` loudly (a failure under `FORGE_TEST_REQUIRE_NODE=1`), telling
/// to run `npm ci` in `dir`.
pub fn node_project(dir: &std::path::Path, installed: &[&str], test: &str) -> bool {
    let present = installed
        .iter()
        .all(|p| dir.join("node_modules").join(p).is_file());
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if present && node {
        return true;
    }
    let why = if node {
        format!(
            "its packages are not installed (npm ci in {})",
            dir.display()
        )
    } else {
        "node is not installed".to_owned()
    };
    skip_unless("FORGE_TEST_REQUIRE_NODE", test, &why);
    false
}
