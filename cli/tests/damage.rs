//! Damaged files through the command line: `forge-store sessions` and `export` of every
//! session on copies of a real redb and SQLite store with bits flipped and the file cut
//! at random positions. Each command either prints exactly what it printed on the
//! undamaged file, or fails with a non-zero exit code and one line on stderr that says
//! the file is damaged (or not a forge-store file) and names it — never a panic, a
//! backtrace, or different output.
//!
//! Prints one line per backend: runs, intact, reported, silent, other failures.
//! `FORGE_CLI_DAMAGE_RUNS=N` sets the damaged copies per backend (default 16).

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

/// The outputs of `sessions --json` and `export SID` for `sids`.
fn outputs(url: &str, sids: &[String], cwd: &Path) -> Vec<Output> {
    let mut out = vec![forge(url, &["sessions", "--json"], cwd)];
    for sid in sids {
        out.push(forge(url, &["export", sid], cwd));
    }
    out
}

#[derive(Default, Debug)]
struct Tally {
    runs: usize,
    intact: usize,
    reported: usize,
    silent: usize,
    other: usize,
    examples: Vec<String>,
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
    let original: Vec<String> = outputs(&url, &sids, dir.path())
        .iter()
        .map(|o| {
            assert!(o.status.success(), "{}", stderr(o));
            stdout(o)
        })
        .collect();
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
        for o in outputs(&copy_url, &sids, dir.path()) {
            tally.runs += 1;
            let err = stderr(&o);
            if o.status.success() {
                if original.contains(&stdout(&o)) {
                    tally.intact += 1;
                } else {
                    tally.silent += 1;
                    tally.examples.push(format!("{what}: different output"));
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
                tally.reported += 1;
            } else {
                tally.other += 1;
                if tally.examples.len() < 8 {
                    tally.examples.push(format!("{what}: {err}"));
                }
            }
        }
        for suffix in ["", "-journal", "-wal", "-shm"] {
            let mut name = copy.as_os_str().to_owned();
            name.push(suffix);
            std::fs::remove_file(name).ok();
        }
    }
    eprintln!(
        "{scheme} through the CLI: {} commands on {runs} damaged copies: {} intact, {} \
         reported on one line naming the file, {} silent, {} other failures",
        tally.runs, tally.intact, tally.reported, tally.silent, tally.other
    );
    for e in &tally.examples {
        eprintln!("  {e}");
    }
    tally
}

#[test]
fn damaged_redb_files_fail_with_one_line_naming_the_file_or_read_unchanged() {
    let t = campaign("redb", "forge.redb");
    assert_eq!((t.silent, t.other), (0, 0), "{t:?}");
    assert!(t.reported > 0, "no damage was reported: {t:?}");
}

#[test]
fn damaged_sqlite_files_fail_with_one_line_naming_the_file_or_read_unchanged() {
    let t = campaign("sqlite", "forge.db");
    assert_eq!((t.silent, t.other), (0, 0), "{t:?}");
    assert!(t.reported > 0, "no damage was reported: {t:?}");
}
