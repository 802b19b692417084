//! Tenancy on the real path: the CLI and the library connected to Postgres as a plain
//! LOGIN role (no SUPERUSER, no BYPASSRLS), the way a platform team deploys it.
//!
//! Setup, as a privileged user (what a platform team runs once): `forge-store sessions`
//! on the admin URL creates the schema, its tables and policies (the admin owns them);
//! then a login role is created and granted exactly what the backend needs:
//!
//! ```sql
//! CREATE ROLE app_login LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
//! GRANT USAGE ON SCHEMA forge TO app_login;
//! GRANT SELECT, INSERT, UPDATE, DELETE ON forge.sessions, forge.messages, forge.parts TO app_login;
//! GRANT SELECT ON forge.forge_meta TO app_login;
//! ```
//!
//! (or `GRANT forge_app TO app_login`: membership in the application role the migration
//! created and granted). The tests then run with `postgres://app_login@…?schema=forge`:
//!
//! - `a_plain_login_role_keeps_every_tenant_to_itself`: the same session, message and
//!   part ids in tenants A and B; `replay`, `import`, `export`, `sessions`, `history`,
//!   `recover` (one session and tenant-wide) through the CLI, and `forge_store::open` /
//!   `PostgresStore` through the library, never show or touch the other tenant's rows;
//!   the role cannot switch row-level security off (ALTER TABLE, DROP POLICY, ALTER
//!   ROLE … BYPASSRLS, SET ROLE / SESSION AUTHORIZATION postgres all fail;
//!   `row_security = off` makes queries fail instead of bypassing), and a URL that
//!   presets `forge.tenant` cannot move the library to another tenant.
//! - `many_cli_processes_and_tenants_at_once`: several `forge-store replay` processes
//!   at once, tenants sharing session ids and tenants with several sessions written at
//!   the same time; every process succeeds and every session's export equals what a
//!   single process gives. `FORGE_TENANCY_PROCS` (default 8) sets the number of
//!   processes, `FORGE_TENANCY_ROUNDS` (default 1) how often each replays its stream.
//!
//! Without `FORGE_TEST_POSTGRES_URL` both tests print `SKIPPED` and pass, unless
//! `FORGE_TEST_REQUIRE_SERVICES=1`, where they fail. Each run makes its own schema and
//! roles (unique names) and drops them at the end, also when a check fails.

mod checks;
#[path = "../common/mod.rs"]
mod common;
mod deployment;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use checks::{library_checks, switch_off_attempts, Checks};
use common::{env_usize, example, normalized, open_things, postgres_url, stderr, stdout};
use deployment::{spawn, wait, Deployment};
use forge_testkit::process::KillOnDrop;
use forge_testkit::runtime;
use serde_json::Value;

/// Every CLI process gets this long before it is killed and the test fails.
const PROCESS_TIMEOUT: Duration = Duration::from_mins(2);

// ---------------------------------------------------------------------------------------
// Helpers on exports

/// Every string value in `v`.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(o) => o.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

/// `doc` with every text and reasoning part's text replaced by `text`.
fn retexted(doc: &Value, text: &str) -> Value {
    let mut doc = doc.clone();
    for m in doc["messages"].as_array_mut().unwrap() {
        for p in m["parts"].as_array_mut().unwrap() {
            if matches!(p["type"].as_str(), Some("text" | "reasoning")) {
                p["text"] = Value::String(text.to_owned());
            }
        }
    }
    doc
}

// ---------------------------------------------------------------------------------------
// Isolation and attempts to switch it off

const SAME_SESSION: &str = "ses_tenancy_same";
const CRASH_SESSION: &str = "ses_tenancy_crash";
const B_TEXT: &str = "tenant B's secret text";

#[test]
fn a_plain_login_role_keeps_every_tenant_to_itself() {
    let Some(admin) = postgres_url("tenancy under a plain login role") else {
        return;
    };
    let d = Deployment::provision(&admin, true);
    let mut c = Checks::default();

    // Tenant A: a replayed session; tenant B: the same ids (imported), other text.
    let report = d.json(
        "A",
        &[
            "replay",
            &example("multi-turn-tools.jsonl"),
            "--session",
            SAME_SESSION,
        ],
    );
    c.that(report["session"] == SAME_SESSION, &report);
    let a_doc = d.export("A", SAME_SESSION);
    let b_doc = retexted(&a_doc, B_TEXT);
    let b_file = d.dir.path().join("b.json");
    std::fs::write(&b_file, serde_json::to_string(&b_doc).unwrap()).unwrap();
    let imported = d.json("B", &["import", b_file.to_str().unwrap()]);
    c.eq(
        &imported["sessions"].as_array().map(Vec::len),
        &Some(1),
        &imported,
    );
    c.eq(
        &d.export("A", SAME_SESSION),
        &a_doc,
        "an import into B with A's ids changed nothing of A",
    );
    c.eq(&d.export("B", SAME_SESSION), &b_doc, "B's import");
    let mut a_strings = Vec::new();
    strings(&a_doc, &mut a_strings);
    c.that(!a_strings.iter().any(|s| s == B_TEXT), "B's text in A");

    // A crashed turn in both tenants, under the same session id.
    for t in ["A", "B"] {
        d.json(
            t,
            &[
                "replay",
                &example("crash.jsonl"),
                "--session",
                CRASH_SESSION,
            ],
        );
    }
    let both: BTreeSet<String> = [SAME_SESSION, CRASH_SESSION].map(str::to_owned).into();
    c.eq(&d.session_ids("A"), &both, "A's sessions");
    c.eq(&d.session_ids("B"), &both, "B's sessions");
    c.eq(
        &d.session_ids("C"),
        &BTreeSet::new(),
        "an unused tenant sees nothing",
    );

    // history: A's pages carry only A's text, B's only B's.
    let a_hist = d.json("A", &["history", SAME_SESSION, "--all"]);
    let b_hist = d.json("B", &["history", SAME_SESSION, "--all"]);
    let (mut a_s, mut b_s) = (Vec::new(), Vec::new());
    strings(&a_hist, &mut a_s);
    strings(&b_hist, &mut b_s);
    c.that(!a_s.iter().any(|s| s == B_TEXT), "B's text in A's history");
    c.that(
        b_s.iter().any(|s| s == B_TEXT),
        "B's text missing in B's history",
    );
    c.eq(
        &a_hist["messages"].as_array().map(Vec::len),
        &b_hist["messages"].as_array().map(Vec::len),
        "A's and B's histories have as many messages",
    );
    // Tenant C cannot read or export the id that exists in A and B.
    for args in [
        &["history", SAME_SESSION][..],
        &["export", SAME_SESSION][..],
    ] {
        let out = d.cli_at(&d.url(), "C", args);
        c.that(
            !out.status.success(),
            format_args!("{args:?} in C: {}", stdout(&out)),
        );
        c.that(stderr(&out).contains(SAME_SESSION), stderr(&out));
    }

    // recover: the crash example leaves open work (its `crash` line stops the replay
    // as a killed writer would) in A and B; recover closes it per tenant only.
    let open = |t: &str| {
        let h = d.json(t, &["history", CRASH_SESSION, "--all"]);
        open_things(h["messages"].as_array().unwrap())
    };
    c.that(open("A") != (0, 0), "A has open work before recover");
    c.that(open("B") != (0, 0), "B has open work before recover");
    let rec = d.json("A", &["recover"]);
    c.that(rec["report"]["sessions"] == 1, &rec);
    c.eq(&open("A"), &(0, 0), "A recovered");
    c.that(open("B") != (0, 0), "tenant-wide recover in A left B alone");
    let rec = d.json("B", &["recover", CRASH_SESSION]);
    c.that(rec["report"]["sessions"] == 1, &rec);
    c.eq(&open("B"), &(0, 0), "B recovered");
    let again = d.json("A", &["recover"]);
    c.that(
        again["report"]["sessions"] == 0,
        format_args!("recover twice: {again}"),
    );

    let mut attempts = Checks::default();
    runtime().block_on(async {
        library_checks(&d, &a_doc, &b_doc, &mut c).await;
        switch_off_attempts(&d, &mut attempts).await;
    });
    eprintln!(
        "tenancy under plain login role {}: {} isolation checks passed (CLI \
         replay/import/export/sessions/history/recover, library open/PostgresStore), \
         {} checks of ways around row-level security",
        d.login, c.0, attempts.0
    );
}

// ---------------------------------------------------------------------------------------
// Many processes and tenants at once

/// The streams the processes replay, one per process in turn.
const STREAMS: [&str; 3] = [
    "multi-turn-tools.jsonl",
    "compaction.jsonl",
    "aisdk/v7/multi-step-tools.jsonl",
];

#[test]
fn many_cli_processes_and_tenants_at_once() {
    let Some(admin) = postgres_url("many CLI processes and tenants on Postgres") else {
        return;
    };
    let procs = env_usize("FORGE_TENANCY_PROCS", 8).max(2);
    let rounds = env_usize("FORGE_TENANCY_ROUNDS", 1).max(1);
    let d = Deployment::provision(&admin, false);
    let url = d.url();

    // Process i writes session `ses_conc_{i / tenants}` of tenant `t{i % tenants}`:
    // every tenant has two sessions written at once, and every session id is used by
    // every tenant at once.
    let tenants = procs.div_ceil(2);
    let jobs: Vec<(String, String, &str)> = (0..procs)
        .map(|i| {
            (
                format!("t{}", i % tenants),
                format!("ses_conc_{}", i / tenants),
                STREAMS[i % STREAMS.len()],
            )
        })
        .collect();

    // The reference: each stream replayed by a single process, alone, in tenant `ref`.
    let mut reference = BTreeMap::new();
    for (k, stream) in STREAMS.iter().enumerate() {
        let sid = format!("ses_ref_{k}");
        for _ in 0..rounds {
            d.json("ref", &["replay", &example(stream), "--session", &sid]);
        }
        reference.insert(*stream, normalized(&d.export("ref", &sid)));
    }

    // All processes at once; each replays its stream `rounds` times in one process run
    // after another, and the processes of a round start together.
    let start = Instant::now();
    let mut failures = Vec::new();
    for round in 0..rounds {
        let running: Vec<KillOnDrop> = jobs
            .iter()
            .map(|(tenant, sid, stream)| {
                let file = example(stream);
                let args = [
                    "--backend",
                    &url,
                    "--tenant",
                    tenant,
                    "replay",
                    &file,
                    "--session",
                    sid,
                    "--json",
                ];
                spawn(&args, d.dir.path())
            })
            .collect();
        for (job, r) in jobs.iter().zip(running) {
            let out = wait(r);
            let err = stderr(&out);
            if !out.status.success() || err.lines().any(|l| l.starts_with("error")) {
                failures.push(format!("round {round} {job:?}: {}: {err}", out.status));
            }
        }
    }
    let took = start.elapsed();
    assert!(
        failures.is_empty(),
        "failed processes:\n{}",
        failures.join("\n")
    );

    // Every session equals the single-process run of its stream; listings hold exactly
    // the tenant's own sessions.
    for (tenant, sid, stream) in &jobs {
        assert_eq!(
            normalized(&d.export(tenant, sid)),
            reference[stream],
            "{tenant}/{sid} ({stream}) differs from a single-process replay"
        );
    }
    for t in 0..tenants {
        let tenant = format!("t{t}");
        let want: BTreeSet<String> = jobs
            .iter()
            .filter(|(x, ..)| *x == tenant)
            .map(|(_, s, _)| s.clone())
            .collect();
        assert_eq!(d.session_ids(&tenant), want, "sessions of {tenant}");
    }
    eprintln!(
        "postgres, plain login role: {procs} CLI processes x {rounds} round(s) at once \
         over {tenants} tenants ({} sessions, shared ids across tenants): 0 failures, \
         {} exports equal to single-process replays, listings exact; {:.1} s",
        jobs.len(),
        jobs.len(),
        took.as_secs_f64()
    );
}
