//! The benchmark plan: which workloads, backends, modes and policies `forge-store
//! bench` measures, and running it, reporting each step as a [`ProgressEvent`].

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use forge_core::driver::Kind;

use crate::device::{Filesystem, Placement};
use crate::run::{measure, Run, Target};
use crate::workload::{script, sessions, Content, Script};
use crate::{Measurement, Mode, Policy};

/// The default group-commit window of the boundary mode, ms (matches
/// `forge_core::group::DEFAULT_WINDOW`).
pub const DEFAULT_WINDOW_MS: u64 = 10;

/// What to measure.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Backends, in report order.
    pub targets: Vec<Target>,
    /// Single-session W1 at these turn counts.
    pub turns: Vec<u32>,
    /// W1×N at these session counts.
    pub sessions: Vec<u32>,
    /// Turns per session in W1×N.
    pub sessions_turns: u32,
    /// Group-commit windows measured on W1×N, ms.
    pub windows: Vec<u64>,
    /// Per-delta runs only up to this many turns (single session) …
    pub per_delta_max_turns: u32,
    /// … and up to this many sessions (W1×N): per-delta costs one transaction per delta.
    pub per_delta_max_sessions: u32,
    /// A user's recorded stream instead of the generated workloads.
    pub input: Option<(String, Vec<Script>)>,
    /// Seed of the generated content.
    pub seed: u64,
    /// The generated workloads: W1 (letters), W2 (real text), or both.
    pub contents: Vec<Content>,
    /// Where files are created (and the devices' images).
    pub dir: PathBuf,
    /// Filesystems to measure every run on, each on a device made for the benchmark
    /// ([`Placement`]); empty: the engines' counters only.
    pub devices: Vec<Filesystem>,
}

impl Plan {
    /// The full plan (docs/backends.md, "Workload W1"): W1 and W2 at T = 10, 100, 1000;
    /// W1×64, W1×1000 and the same of W2; windows 0, 10, 100 ms.
    pub fn full(targets: Vec<Target>, dir: PathBuf) -> Self {
        Self {
            targets,
            turns: vec![10, 100, 1000],
            sessions: vec![64, 1000],
            sessions_turns: 1,
            windows: vec![0, 10, 100],
            per_delta_max_turns: 100,
            per_delta_max_sessions: 64,
            input: None,
            seed: 1,
            contents: vec![Content::Letters, Content::Real],
            dir,
            devices: Vec::new(),
        }
    }

    /// A run of a few minutes: W1 and W2 at T = 10, ×64.
    pub fn quick(targets: Vec<Target>, dir: PathBuf) -> Self {
        Self {
            turns: vec![10],
            sessions: vec![64],
            per_delta_max_turns: 10,
            ..Self::full(targets, dir)
        }
    }

    /// Every run of the plan, with its workload, in order.
    pub fn runs(&self) -> Vec<(Run, Workload)> {
        let mut out = Vec::new();
        let run = |target: &Target, mode, policy, workload: &str, turns, latency| Run {
            target: target.clone(),
            mode,
            policy,
            workload: workload.to_owned(),
            turns,
            latency,
            dir: self.dir.clone(),
            device: None,
        };
        let single = [
            (Mode::Boundary, Policy::EveryBoundary),
            (
                Mode::Boundary,
                Policy::Terminal {
                    window_ms: DEFAULT_WINDOW_MS,
                },
            ),
            (Mode::PerDelta, Policy::EveryBoundary),
        ];
        if let Some((name, _)) = &self.input {
            for target in &self.targets {
                for (mode, policy) in single {
                    out.push((run(target, mode, policy, name, 0, true), Workload::Input));
                }
            }
            return out;
        }
        for &content in &self.contents {
            for &t in &self.turns {
                for target in &self.targets {
                    for (mode, policy) in single {
                        if mode == Mode::PerDelta && t > self.per_delta_max_turns {
                            continue;
                        }
                        out.push((
                            run(target, mode, policy, content.name(), t, false),
                            Workload::Single(content, t),
                        ));
                    }
                }
            }
        }
        // Latency: one turn of W1 with its deltas paced in wall time, default policy.
        for target in &self.targets {
            let policy = Policy::Terminal {
                window_ms: DEFAULT_WINDOW_MS,
            };
            out.push((
                run(target, Mode::Boundary, policy, "W1-paced", 1, true),
                Workload::Single(Content::Letters, 1),
            ));
        }
        for (&content, &n) in self
            .contents
            .iter()
            .flat_map(|c| self.sessions.iter().map(move |n| (c, n)))
        {
            let name = format!("{}x{n}", content.name());
            let turns = self.sessions_turns;
            for target in &self.targets {
                let mut policies: Vec<(Mode, Policy)> =
                    vec![(Mode::Boundary, Policy::EveryBoundary)];
                policies.extend(
                    self.windows
                        .iter()
                        .map(|&w| (Mode::Boundary, Policy::Terminal { window_ms: w })),
                );
                if n <= self.per_delta_max_sessions && turns <= self.per_delta_max_turns {
                    policies.push((Mode::PerDelta, Policy::EveryBoundary));
                }
                for (mode, policy) in policies {
                    out.push((
                        run(target, mode, policy, &name, turns, false),
                        Workload::Many(content, n, turns),
                    ));
                }
            }
        }
        out
    }

    /// Measures every run in order; `progress` sees each result as it comes.
    ///
    /// # Errors
    /// The first run that fails, naming it.
    pub async fn execute(
        &self,
        mut progress: impl FnMut(&Measurement),
    ) -> Result<Vec<Measurement>> {
        self.execute_with_progress(|event| {
            if let ProgressEvent::Finished { measurement, .. } = event {
                progress(measurement);
            }
        })
        .await
    }

    /// Measures every run in order, telling `on_event` what happens as it happens (see
    /// [`ProgressEvent`] for the order), e.g. to drive a progress bar. Prints nothing.
    ///
    /// # Errors
    /// The first run that fails, naming it; its `Started` was the last event sent.
    pub async fn execute_with_progress(
        &self,
        mut on_event: impl FnMut(ProgressEvent<'_>),
    ) -> Result<Vec<Measurement>> {
        let planned = self.runs();
        // Only a backend with files or a server writes to a device.
        let writes = self.targets.iter().any(|t| t.kind() != Kind::Memory);
        let runs = if self.devices.is_empty() || !writes {
            planned
        } else {
            let has = |name: &str| self.targets.iter().any(|t| t.name() == name);
            let mut runs = Vec::new();
            for &fs in &self.devices {
                let (placement, notes) =
                    Placement::create(fs, &self.dir, has("postgres"), has("redis"))
                        .await
                        .with_context(|| format!("making an {fs} device for the benchmark"))?;
                for note in &notes {
                    on_event(ProgressEvent::Note { text: note });
                }
                // The runs placed on it hold it: its servers stop and it is unmounted
                // when the last of them is dropped.
                let placement = Arc::new(placement);
                let files = placement.device().path().join("runs");
                std::fs::create_dir_all(&files)
                    .with_context(|| format!("creating {}", files.display()))?;
                for (run, workload) in &planned {
                    runs.push((on_device(run, &placement, &files)?, workload.clone()));
                }
            }
            runs
        };
        on_event(ProgressEvent::Planned { total: runs.len() });
        let mut results = Vec::with_capacity(runs.len());
        let mut cache: Option<(Workload, Vec<Script>)> = None;
        for (index, (run, workload)) in runs.iter().enumerate() {
            on_event(ProgressEvent::Started { index, run });
            let scripts: &[Script] = match (workload, &self.input) {
                (Workload::Input, Some((_, scripts))) => scripts,
                _ => {
                    if cache.as_ref().map(|(w, _)| w) != Some(workload) {
                        cache = Some((workload.clone(), workload.generate(self.seed)));
                    }
                    cache.as_ref().map_or(&[], |(_, s)| s.as_slice())
                }
            };
            let m = measure(run, scripts).await?;
            on_event(ProgressEvent::Finished {
                index,
                run,
                measurement: &m,
            });
            results.push(m);
        }
        Ok(results)
    }
}

/// `run` with its files, or its server, on `placement`'s device: a file backend's files
/// under `files`, a server backend on the throwaway server of its kind there. A backend
/// with neither (memory; a server not started on the device) runs as planned, without a
/// device figure.
fn on_device(run: &Run, placement: &Arc<Placement>, files: &std::path::Path) -> Result<Run> {
    let mut run = run.clone();
    match run.target.kind() {
        Kind::File => {
            run.dir = files.to_path_buf();
            run.device = Some(Arc::clone(placement));
        }
        Kind::Server => {
            if let Some(server) = placement.server_url(run.target.name()) {
                run.target = run.target.on_server(&server)?;
                run.device = Some(Arc::clone(placement));
            }
        }
        _ => {}
    }
    Ok(run)
}

/// What [`Plan::execute_with_progress`] reports, in this order: a `Note` for each device
/// made and each server on it, one `Planned`, then for each run, by increasing `index`,
/// a `Started` and (when it succeeds) a `Finished`. A run that fails ends the execution
/// after its `Started`.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub enum ProgressEvent<'a> {
    /// What was set up for the runs: a device, a server on it, or what could not be.
    Note {
        /// One line.
        text: &'a str,
    },
    /// Sent once, before any run: how many runs the plan has.
    Planned {
        /// Runs to measure, `Plan::runs().len()`.
        total: usize,
    },
    /// A run begins: its workload is generated (unless the previous run's is reused),
    /// then measured.
    Started {
        /// Position in the plan, from 0.
        index: usize,
        /// The run; [`Run::label`] names it.
        run: &'a Run,
    },
    /// A run was measured.
    Finished {
        /// Position in the plan, from 0.
        index: usize,
        /// The run; [`Run::label`] names it.
        run: &'a Run,
        /// What it measured (the same value the execution returns at `index`).
        measurement: &'a Measurement,
    },
}

/// A workload of the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Workload {
    /// One session of W1 or W2 with this many turns.
    Single(Content, u32),
    /// N sessions of W1 or W2 with this many turns each.
    Many(Content, u32, u32),
    /// The plan's input file.
    Input,
}

impl Workload {
    /// The scripts, one per session.
    pub fn generate(&self, seed: u64) -> Vec<Script> {
        match *self {
            Self::Single(c, t) => vec![script(c, t, seed)],
            Self::Many(c, n, t) => sessions(c, n, t, seed),
            Self::Input => Vec::new(),
        }
    }
}
