//! The measurements as an aligned terminal table and as a GitHub markdown table, each
//! followed by a legend of how "physical" was measured.

use std::fmt::Write as _;

use super::format::{fmt_count, fmt_factor, fmt_ms, fmt_us, human_bytes, human_rate};
use super::{sorted, EMPTY, NONE};
use crate::Measurement;

const HEADERS: [&str; 18] = [
    "backend",
    "mode",
    "policy",
    "workload",
    "fs",
    "T",
    "logical",
    "device",
    "device WA",
    "handed",
    "rows",
    "commits",
    "fsyncs",
    "engine",
    "engine WA",
    "deltas/s",
    "latency p50/p99",
    "publish delay p50/p99",
];
/// Columns before this index are text (left-aligned), the rest numbers.
const FIRST_NUMERIC: usize = 5;

/// Marks the policy of a run measured on the default path.
const DEFAULT_MARK: &str = "★";

fn cells(m: &Measurement) -> Vec<String> {
    vec![
        m.backend.clone(),
        m.mode.as_str().to_owned(),
        if m.is_default() {
            format!("{} {DEFAULT_MARK}", m.policy.label())
        } else if m.options.is_empty() {
            m.policy.label()
        } else {
            format!("{} ({})", m.policy.label(), m.options)
        },
        m.workload.clone(),
        m.filesystem.clone().unwrap_or_else(|| NONE.to_owned()),
        m.turns.to_string(),
        human_bytes(m.logical_bytes),
        m.device_bytes.map_or_else(|| NONE.to_owned(), human_bytes),
        m.device_amplification()
            .map_or_else(|| NONE.to_owned(), fmt_factor),
        human_bytes(m.handed_bytes),
        fmt_count(m.rows),
        fmt_count(m.commits),
        m.fsyncs.map_or_else(|| NONE.to_owned(), fmt_count),
        m.physical
            .as_ref()
            .map_or_else(|| NONE.to_owned(), |p| human_bytes(p.bytes)),
        m.amplification()
            .map_or_else(|| NONE.to_owned(), fmt_factor),
        human_rate(m.deltas_per_s()),
        m.latency_us.map_or_else(
            || NONE.to_owned(),
            |p| format!("{} / {}", fmt_us(p.p50), fmt_us(p.p99)),
        ),
        m.publish_delay_ms.map_or_else(
            || NONE.to_owned(),
            |p| format!("{} / {}", fmt_ms(p.p50), fmt_ms(p.p99)),
        ),
    ]
}

/// What the columns measure, one line each (the markdown table writes them as a list).
fn legend(rows: &[&Measurement]) -> Vec<String> {
    let mut out = vec![
        "device = bytes the device under the run's files wrote (sectors of its loop device, \
         from a sync before the run to a sync after it, the final checkpoint included); \
         device WA = device / logical bytes."
            .to_owned(),
        "engine = what the engine itself counts as written (below); engine WA = engine / \
         logical bytes; – = not measured."
            .to_owned(),
        format!("{DEFAULT_MARK} = the default path (Engine::new / open(): terminal boundaries, 10 ms window, the backend's default options)."),
    ];
    if rows.iter().all(|m| m.device_bytes.is_none()) {
        out.push(
            "No device was measured: the figures are the engines' own counters only.".to_owned(),
        );
    }
    for (source, backends) in physical_legend(rows) {
        out.push(format!("engine ({}): {source}", backends.join(", ")));
    }
    out
}

/// One line per distinct physical source: `(sources, backends measured that way)`.
fn physical_legend(rows: &[&Measurement]) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for m in rows {
        let Some(p) = &m.physical else { continue };
        match out.iter_mut().find(|(s, _)| *s == p.source) {
            Some((_, backends)) => {
                if !backends.contains(&m.backend) {
                    backends.push(m.backend.clone());
                }
            }
            None => out.push((p.source.clone(), vec![m.backend.clone()])),
        }
    }
    out
}

/// The measurements as an aligned terminal table, grouped by workload (a blank line
/// between workloads) then backend, followed by one legend line per way "physical"
/// was measured. Empty input gives `no measurements`.
pub fn table(ms: &[Measurement]) -> String {
    if ms.is_empty() {
        return format!("{EMPTY}\n");
    }
    let rows = sorted(ms);
    let body: Vec<Vec<String>> = rows.iter().map(|m| cells(m)).collect();
    let mut widths: Vec<usize> = HEADERS.iter().map(|h| h.chars().count()).collect();
    for row in &body {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |row: &[String]| -> String {
        let mut s = String::new();
        for (i, (c, w)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                s.push_str("  ");
            }
            if i < FIRST_NUMERIC {
                let _ = write!(s, "{c:<w$}");
            } else {
                let _ = write!(s, "{c:>w$}");
            }
        }
        s.trim_end().to_owned()
    };
    let headers: Vec<String> = HEADERS.iter().map(|h| (*h).to_owned()).collect();
    let mut out = line(&headers);
    out.push('\n');
    let total = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
    out.push_str(&"-".repeat(total));
    out.push('\n');
    for (i, (m, row)) in rows.iter().zip(&body).enumerate() {
        let group = |m: &Measurement| (m.sessions, m.workload.clone(), m.filesystem.clone());
        if i > 0 && group(rows[i - 1]) != group(m) {
            out.push('\n');
        }
        out.push_str(&line(row));
        out.push('\n');
    }
    out.push('\n');
    for line in legend(&rows) {
        let _ = writeln!(out, "{line}");
    }
    out
}

fn md_escape(s: &str) -> String {
    s.replace('|', "\\|")
}

/// The same table as GitHub markdown, followed by the legend as a list. Empty input
/// gives `_no measurements_`.
pub fn markdown(ms: &[Measurement]) -> String {
    if ms.is_empty() {
        return format!("_{EMPTY}_\n");
    }
    let rows = sorted(ms);
    let mut out = format!("| {} |\n|", HEADERS.join(" | "));
    for i in 0..HEADERS.len() {
        out.push_str(if i < FIRST_NUMERIC { "---|" } else { "---:|" });
    }
    out.push('\n');
    for m in &rows {
        let row: Vec<String> = cells(m).iter().map(|c| md_escape(c)).collect();
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out.push('\n');
    for line in legend(&rows) {
        let _ = writeln!(out, "- {}", md_escape(&line));
    }
    out
}
