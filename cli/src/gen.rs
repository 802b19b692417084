//! `gen`: writes a benchmark workload as a replay file (JSONL with event times).
//!
//! The output is what `forge-store replay` reads and what `forge-store bench --input`
//! drives in event time: every line carries `"t"`, ms since the start of the file.

use std::io::Write;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};

/// A workload `gen` can write.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// W1 (docs/backends.md, "Workload W1"): per turn 400 B of user text, 2,000 B of
    /// reasoning, 2,400 B of text in 550 deltas, 3 tool calls (300 B input, 4,000 B
    /// output).
    W1,
    /// W2: W1's events, sizes and timing with real text (this project's documentation
    /// as prose, its sources as what the tools read), which compresses as real
    /// sessions do.
    W2,
}

impl Workload {
    /// What the workload's bytes are.
    pub fn content(self) -> forge_bench::workload::Content {
        match self {
            Self::W1 => forge_bench::workload::Content::Letters,
            Self::W2 => forge_bench::workload::Content::Real,
        }
    }
}

/// `forge-store gen WORKLOAD --turns T [--seed S] [--sessions N]`.
#[derive(Debug, Args)]
pub struct GenArgs {
    /// The workload.
    #[arg(value_enum)]
    workload: Workload,
    /// Turns of the session.
    #[arg(long)]
    turns: u32,
    /// Seed of the content (the same seed writes the same file).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Sessions (only 1: a replay file holds one session).
    #[arg(long, default_value_t = 1)]
    sessions: u32,
}

/// Writes the workload to `out`.
pub fn run(args: &GenArgs, mut out: &mut dyn Write) -> Result<()> {
    if args.sessions != 1 {
        bail!("gen writes one session; use bench for W1xN");
    }
    let script = forge_bench::workload::script(args.workload.content(), args.turns, args.seed);
    forge_bench::workload::write_jsonl(&script, &mut out)?;
    Ok(())
}
