//! `demo`: replays the shipped example streams into the backend and shows what the
//! store holds: the history, the compacted view, what was written, and — for the crash
//! example — what `recover` closed.

use std::io::Write;

use anyhow::{anyhow, bail, Result};
use forge_core::store::MAX_PAGE_LIMIT;
use forge_core::{read_all, Engine, TenantId};

use crate::replay::ReplayOptions;
use crate::{backend, show};

/// The example streams under `examples/streams/`, embedded in the binary.
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "multi-turn-tools.jsonl",
        include_str!("../../examples/streams/multi-turn-tools.jsonl"),
    ),
    (
        "compaction.jsonl",
        include_str!("../../examples/streams/compaction.jsonl"),
    ),
    (
        "crash.jsonl",
        include_str!("../../examples/streams/crash.jsonl"),
    ),
];

/// Runs the demo against `engine`.
pub async fn run(engine: &Engine, tenant: &TenantId, url: &str, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "forge-store demo: replaying {} example streams into {} (tenant {tenant})",
        EXAMPLES.len(),
        backend::redact(url)
    )?;
    for (name, text) in EXAMPLES {
        writeln!(out, "\n=== {name} ===")?;
        let (counted, counting) = crate::counted(engine);
        let opts = ReplayOptions {
            session: None,
            default_title: (*name).to_owned(),
        };
        let report = crate::run_replay(&counted, &counting, tenant, text, opts).await;
        show::replay_report(out, &report, &format!("examples/streams/{name}"))?;
        if let Some(e) = &report.error {
            bail!("example {name}: {e}");
        }
        let sid = report
            .session
            .clone()
            .ok_or_else(|| anyhow!("example {name} wrote no session"))?;

        if report.crash_line.is_some() {
            writeln!(out, "\n--- recover (forge-store recover {sid})")?;
            let open = engine.store.open_items(tenant, Some(&sid)).await?;
            writeln!(out, "open before recover:")?;
            show::open_items(out, &open)?;
            let first = engine.recover(tenant, Some(&sid)).await?;
            show::recover_report(out, &first)?;
            if first.text_from_bus > 0 {
                writeln!(
                    out,
                    "  (this process still holds the streamed deltas on its bus, so recover \
                     rebuilt the interrupted text from them; `forge-store recover` in a new \
                     process keeps the text the store has)"
                )?;
            }
            let second = engine.recover(tenant, Some(&sid)).await?;
            write!(out, "second run: ")?;
            show::recover_report(out, &second)?;
        }

        let Some(state) = engine.store.session(tenant, &sid).await? else {
            bail!("session {sid} vanished from the store");
        };
        let history = read_all(engine.store.as_ref(), tenant, &sid, MAX_PAGE_LIMIT).await?;
        writeln!(
            out,
            "\n--- stored history (forge-store history {sid} --all)"
        )?;
        show::history(out, &state, &history, None, true)?;
        let view = engine.view(tenant, &sid).await?;
        writeln!(out, "\n--- compacted view (forge-store view {sid})")?;
        // Without a boundary the view is the history above; list it only when it differs.
        show::view(out, &state, &view, history.len(), view.boundary.is_some())?;
    }
    writeln!(
        out,
        "\nAll of it is stored in {}. Next: forge-store sessions · forge-store history SESSION · \
         forge-store view SESSION · forge-store export SESSION",
        backend::redact(url)
    )?;
    Ok(())
}
