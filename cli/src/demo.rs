//! `demo`: replays the shipped example streams into the backend and shows what the
//! store holds: the history, the compacted view, what was written, and — for the crash
//! example — what `recover` closed.

use std::io::Write;

use anyhow::{anyhow, bail, Result};
use forge_store::{Forge, ReplayOptions, TenantId};

use crate::show;

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

/// Runs the demo against `forge`.
pub async fn run(forge: &Forge, tenant: &TenantId, out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "forge-store demo: replaying {} example streams into {} (tenant {tenant})",
        EXAMPLES.len(),
        forge.url()
    )?;
    for (name, text) in EXAMPLES {
        writeln!(out, "\n=== {name} ===")?;
        let opts = ReplayOptions::titled(*name);
        let source = format!("examples/streams/{name}");
        let report = match forge.replay_str(tenant, text, opts).await {
            Ok(report) => report,
            Err(e) => {
                show::replay_report(out, &e.report, &source, true)?;
                bail!("example {name}: {}", e.error);
            }
        };
        show::replay_report(out, &report, &source, false)?;
        let sid = report
            .session
            .clone()
            .ok_or_else(|| anyhow!("example {name} wrote no session"))?;

        if report.crash_line.is_some() {
            writeln!(out, "\n--- recover (forge-store recover {sid})")?;
            let first = forge.recover(tenant, Some(&sid)).await?;
            writeln!(out, "open before recover:")?;
            show::open_items(out, &first.open_before)?;
            show::recover_report(out, &first.report)?;
            if first.report.text_from_bus > 0 {
                writeln!(
                    out,
                    "  (this process still holds the streamed deltas on its bus, so recover \
                     rebuilt the interrupted text from them; `forge-store recover` in a new \
                     process keeps the text the store has)"
                )?;
            }
            let second = forge.recover(tenant, Some(&sid)).await?;
            write!(out, "second run: ")?;
            show::recover_report(out, &second.report)?;
        }

        let state = forge.session(tenant, &sid).await?;
        let history = forge.history_all(tenant, &sid).await?;
        writeln!(
            out,
            "\n--- stored history (forge-store history {sid} --all)"
        )?;
        show::history(out, &state, &history, None, true)?;
        let view = forge.view(tenant, &sid).await?;
        writeln!(out, "\n--- compacted view (forge-store view {sid})")?;
        // Without a boundary the view is the history above; list it only when it differs.
        show::view(out, &state, &view, history.len(), view.boundary.is_some())?;
    }
    writeln!(
        out,
        "\nAll of it is stored in {}. Next: forge-store sessions · forge-store history SESSION · \
         forge-store view SESSION · forge-store export SESSION",
        forge.url()
    )?;
    Ok(())
}
