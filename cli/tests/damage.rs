//! Damaged files through the command line: `forge-store sessions`, and `history`,
//! `view` and `export` of every session, on copies of a real redb and SQLite store with
//! bits flipped and the file cut at random positions. Each command either prints
//! exactly what that same command printed on the undamaged file, or fails with a
//! non-zero exit code and one line on stderr that says the file is damaged (or not a
//! forge-store file) and names it — never a panic, a backtrace, or different output.
//!
//! Prints one line per backend: commands run, intact, reported, silent, other failures,
//! and the same per command. `FORGE_CLI_DAMAGE_RUNS=N` sets the damaged copies per
//! backend (default 16).

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{example, stderr, stdout};

fn forge(url: &str, args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_forge-store"))
        .arg("--backend")
        .arg(url)
        .args(args)
        .current_dir(cwd)
        .env_remove("FORGE_BACKEND")
        .env_remove("FORGE_TENANT")
        // What a user's shell has: no backtrace asked for.
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LOG")
        .output()
        .expect("run forge-store")
}

/// The read commands run on every copy: `sessions --json`, and `history --all --json`,
/// `view --json` and `export` of each of `sids`. Each command is compared only with
/// its own output on the undamaged file.
fn commands(sids: &[String]) -> Vec<Vec<String>> {
    let mut out = vec![vec!["sessions".to_owned(), "--json".to_owned()]];
    for sid in sids {
        for args in [
            &["history", sid, "--all", "--json"][..],
            &["view", sid, "--json"],
            &["export", sid],
        ] {
            out.push(args.iter().map(|a| (*a).to_owned()).collect());
        }
    }
    out
}

/// The outputs of `commands`, in order.
fn outputs(url: &str, commands: &[Vec<String>], cwd: &Path) -> Vec<Output> {
    commands
        .iter()
        .map(|args| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            forge(url, &args, cwd)
        })
        .collect()
}

/// The commands of [`commands`] by name, for the per-command figures.
const NAMES: [&str; 4] = ["sessions", "history", "view", "export"];

/// How one command fared on one damaged copy.
#[derive(Clone, Copy, Debug)]
enum Outcome {
    /// Succeeded, printing what it printed on the undamaged file.
    Intact,
    /// Failed with one line naming the file and saying it is damaged.
    Reported,
    /// Succeeded, printing something else.
    Silent,
    /// Failed any other way.
    Other,
}

/// Runs, intact, reported, silent, other.
#[derive(Clone, Copy, Default, Debug)]
struct Counts([usize; 5]);

impl Counts {
    fn add(&mut self, outcome: Outcome) {
        self.0[0] += 1;
        self.0[1 + outcome as usize] += 1;
    }
}

#[derive(Default, Debug)]
struct Tally {
    all: Counts,
    /// Per command of [`NAMES`].
    per_command: [Counts; 4],
    examples: Vec<String>,
}

impl Tally {
    fn add(&mut self, name: &str, outcome: Outcome) {
        let c = NAMES
            .iter()
            .position(|n| *n == name)
            .expect("a known command");
        self.all.add(outcome);
        self.per_command[c].add(outcome);
    }

    fn runs(&self) -> usize {
        self.all.0[0]
    }

    fn reported(&self) -> usize {
        self.all.0[2]
    }

    /// Silent changes and other failures.
    fn bad(&self) -> (usize, usize) {
        (self.all.0[3], self.all.0[4])
    }
}

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Replays the example streams into `file` (a fresh store of `scheme`), then damages
/// copies of it and runs the read commands on each.
fn campaign(scheme: &str, file: &str) -> Tally {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(file);
    let url = format!("{scheme}://{}", path.display());
    let mut sids = Vec::new();
    for stream in ["multi-turn-tools.jsonl", "compaction.jsonl", "crash.jsonl"] {
        for _ in 0..2 {
            let out = forge(&url, &["replay", &example(stream), "--json"], dir.path());
            assert!(out.status.success(), "{}", stderr(&out));
            let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
            sids.push(report["session"].as_str().unwrap().to_owned());
        }
    }
    let commands = commands(&sids);
    let original: Vec<String> = outputs(&url, &commands, dir.path())
        .iter()
        .zip(&commands)
        .map(|(o, args)| {
            assert!(o.status.success(), "{args:?}: {}", stderr(o));
            let out = stdout(o);
            assert!(
                out.len() > 2,
                "{args:?} printed nothing on the undamaged file"
            );
            out
        })
        .collect();
    assert_eq!(
        original.len(),
        1 + 3 * sids.len(),
        "sessions, and history, view and export of each session"
    );
    // The store's file, and what a process leaves beside it (SQLite's WAL, redb's
    // journal): part of the store until a checkpoint folds them in, so each copy gets
    // them undamaged.
    let bytes = std::fs::read(&path).unwrap();
    let beside: Vec<(String, Vec<u8>)> = ["-wal", "-journal"]
        .iter()
        .filter_map(|suffix| {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            std::fs::read(&name).ok().map(|b| ((*suffix).to_owned(), b))
        })
        .collect();
    let runs = std::env::var("FORGE_CLI_DAMAGE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16usize);
    let mut tally = Tally::default();
    let mut x = 0x1234_5678_9abc_def1_u64;
    let copy = dir.path().join(format!("damaged-{file}"));
    let copy_url = format!("{scheme}://{}", copy.display());
    for i in 0..runs {
        let mut damaged = bytes.clone();
        let what = if i % 4 == 3 {
            let len = usize::try_from(xorshift(&mut x) % bytes.len() as u64).unwrap();
            damaged.truncate(len);
            format!("cut to {len}")
        } else {
            let at = usize::try_from(xorshift(&mut x) % bytes.len() as u64).unwrap();
            damaged[at] ^= 1 << (xorshift(&mut x) % 8);
            format!("flip at {at}")
        };
        std::fs::write(&copy, &damaged).unwrap();
        for (suffix, b) in &beside {
            let mut name = copy.as_os_str().to_owned();
            name.push(suffix);
            std::fs::write(name, b).unwrap();
        }
        let got = outputs(&copy_url, &commands, dir.path());
        assert_eq!(got.len(), original.len(), "every command ran on the copy");
        for ((o, args), before) in got.iter().zip(&commands).zip(&original) {
            let name = args[0].as_str();
            let err = stderr(o);
            if o.status.success() {
                if stdout(o) == *before {
                    tally.add(name, Outcome::Intact);
                } else {
                    tally.add(name, Outcome::Silent);
                    if tally.examples.len() < 8 {
                        tally
                            .examples
                            .push(format!("{what}: {args:?}: different output"));
                    }
                }
                continue;
            }
            let one_line = err.lines().count() == 1 && err.starts_with("forge-store: ");
            let said = ["corrupted", "damaged", "not a forge-store"]
                .iter()
                .any(|w| err.contains(w));
            let named = err.contains(&copy.display().to_string());
            let panicked = err.contains("panic") || err.contains("backtrace");
            if one_line && said && named && !panicked {
                tally.add(name, Outcome::Reported);
            } else {
                tally.add(name, Outcome::Other);
                if tally.examples.len() < 8 {
                    tally.examples.push(format!("{what}: {args:?}: {err}"));
                }
            }
        }
        for suffix in ["", "-journal", "-wal", "-shm"] {
            let mut name = copy.as_os_str().to_owned();
            name.push(suffix);
            std::fs::remove_file(name).ok();
        }
    }
    let [n, intact, reported, silent, other] = tally.all.0;
    eprintln!(
        "{scheme} through the CLI: {n} commands ({} per copy) on {runs} damaged copies: \
         {intact} intact, {reported} reported on one line naming the file, {silent} silent, \
         {other} other failures",
        commands.len(),
    );
    for (name, Counts([n, intact, reported, silent, other])) in NAMES.iter().zip(tally.per_command)
    {
        eprintln!(
            "  {name}: {n} runs: {intact} intact, {reported} reported, {silent} silent, \
             {other} other"
        );
    }
    assert_eq!(
        tally.runs(),
        runs * commands.len(),
        "every command ran on every copy"
    );
    for e in &tally.examples {
        eprintln!("  {e}");
    }
    tally
}

#[test]
fn damaged_redb_files_fail_with_one_line_naming_the_file_or_read_unchanged() {
    let t = campaign("redb", "forge.redb");
    assert_eq!(t.bad(), (0, 0), "silent, other: {t:?}");
    assert!(t.reported() > 0, "no damage was reported: {t:?}");
}

#[test]
fn damaged_sqlite_files_fail_with_one_line_naming_the_file_or_read_unchanged() {
    let t = campaign("sqlite", "forge.db");
    assert_eq!(t.bad(), (0, 0), "silent, other: {t:?}");
    assert!(t.reported() > 0, "no damage was reported: {t:?}");
}
