//! A small soak through the real binary: sessions stream W1 at once through one redb
//! engine with the group commit, and the stored history must equal the in-memory
//! reference row for row, with every delta delivered to its subscriber. The full-size
//! soak (1,000 sessions × 10 turns, minutes) is `scripts/soak.sh`.

mod common;

use common::Env;

#[test]
fn a_short_soak_stores_every_row_as_the_reference_does() {
    let env = Env::new();
    let report = env.json(&[
        "--commit-window-ms",
        "10",
        "soak",
        "--sessions",
        "8",
        "--turns",
        "2",
        "--speed",
        "20",
    ]);
    eprintln!("soak smoke: {report}");
    assert_eq!(report["sessions_differing"], 0, "{report}");
    // Per session and turn: a user message with its text part, an assistant message
    // with its parts (steps, reasoning, text, three tools).
    let rows = report["rows_checked"].as_u64().expect("rows_checked");
    assert!(rows >= 8 * 2 * 4, "too few rows checked: {report}");
    assert_eq!(report["deltas"], 8 * 2 * 550, "{report}");
    assert_eq!(report["latency_samples"], report["deltas"], "{report}");
    assert_eq!(report["lagged"], 0, "{report}");
    assert_eq!(report["unreceived"], 0, "{report}");
    assert!(report["rss_kib"]["peak"].as_u64() >= report["rss_kib"]["start"].as_u64());
}
