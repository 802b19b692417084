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

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{env_usize, example, normalized, open_things, stderr, stdout};
use forge_store::sql::PostgresStore;
use forge_store::{SessionId, TenantId};
use serde_json::Value;
use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// Every CLI process gets this long before it is killed and the test fails.
const PROCESS_TIMEOUT: Duration = Duration::from_mins(2);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

// ---------------------------------------------------------------------------------------
// The deployment: an admin-provisioned schema and a plain login role

/// A schema provisioned by the admin and a login role granted on it; both dropped when
/// the value is (the schema first, then the roles).
struct Deployment {
    admin: String,
    schema: String,
    login: String,
    app_role: String,
    dir: tempfile::TempDir,
}

impl Deployment {
    /// Provisions it: the migration through the CLI as admin, then the login role with
    /// `grants` ("explicit" or "membership").
    fn provision(admin: &str, explicit_grants: bool) -> Self {
        let unique = forge_store::core::id::ascending("t").to_lowercase();
        let d = Self {
            admin: admin.to_owned(),
            schema: format!("forge_tenancy_{unique}"),
            login: format!("forge_login_{unique}"),
            app_role: format!("forge_app_{unique}"),
            dir: tempfile::tempdir().unwrap(),
        };
        let sep = if admin.contains('?') { '&' } else { '?' };
        let admin_url = format!("{admin}{sep}schema={}&app_role={}", d.schema, d.app_role);
        // What a platform team runs once with the admin's URL: the migration.
        let out = d.cli_at(&admin_url, "default", &["sessions", "--json"]);
        assert!(out.status.success(), "migration as admin: {}", stderr(&out));

        let (s, l, a) = (&d.schema, &d.login, &d.app_role);
        let grants = if explicit_grants {
            format!(
                "GRANT USAGE ON SCHEMA \"{s}\" TO \"{l}\";
                 GRANT SELECT, INSERT, UPDATE, DELETE
                     ON \"{s}\".sessions, \"{s}\".messages, \"{s}\".parts TO \"{l}\";
                 GRANT SELECT ON \"{s}\".forge_meta TO \"{l}\";"
            )
        } else {
            format!("GRANT \"{a}\" TO \"{l}\";")
        };
        d.admin_sql(&format!(
            "CREATE ROLE \"{l}\" LOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
             {grants}"
        ));
        d
    }

    /// The login role's URL: the admin URL with the user replaced.
    fn url(&self) -> String {
        self.url_with("")
    }

    /// The login role's URL with extra query pairs (`&k=v…`).
    fn url_with(&self, extra: &str) -> String {
        let (scheme, rest) = self.admin.split_once("://").unwrap();
        let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        let sep = if host.contains('?') { '&' } else { '?' };
        format!(
            "{scheme}://{}@{host}{sep}schema={}{extra}",
            self.login, self.schema
        )
    }

    fn admin_sql(&self, sql: &str) {
        let admin = self.admin.clone();
        let sql = sql.to_owned();
        std::thread::spawn(move || {
            runtime().block_on(async {
                let mut conn = PgConnection::connect(&admin).await.unwrap();
                sqlx::raw_sql(AssertSqlSafe(sql))
                    .execute(&mut conn)
                    .await
                    .unwrap();
                conn.close().await.unwrap();
            });
        })
        .join()
        .unwrap();
    }

    /// `forge-store --backend URL --tenant T ARGS…` with a timeout.
    fn cli_at(&self, url: &str, tenant: &str, args: &[&str]) -> Output {
        let mut all = vec!["--backend", url, "--tenant", tenant];
        all.extend_from_slice(args);
        wait(spawn(&all, self.dir.path()))
    }

    /// As the login role; expects success and returns stdout parsed as JSON.
    fn json(&self, tenant: &str, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.push("--json");
        let out = self.cli_at(&self.url(), tenant, &all);
        assert!(
            out.status.success(),
            "forge-store --tenant {tenant} {args:?}: {}",
            stderr(&out)
        );
        serde_json::from_str(&stdout(&out)).unwrap()
    }

    /// `export` as the login role, parsed.
    fn export(&self, tenant: &str, session: &str) -> Value {
        let out = self.cli_at(&self.url(), tenant, &["export", session]);
        assert!(
            out.status.success(),
            "export {tenant}/{session}: {}",
            stderr(&out)
        );
        serde_json::from_str(&stdout(&out)).unwrap()
    }

    /// The ids `sessions` lists for a tenant, as the login role.
    fn session_ids(&self, tenant: &str) -> BTreeSet<String> {
        self.json(tenant, &["sessions"])
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["info"]["id"].as_str().unwrap().to_owned())
            .collect()
    }
}

impl Drop for Deployment {
    fn drop(&mut self) {
        let sql = format!(
            "DROP SCHEMA IF EXISTS \"{}\" CASCADE;
             DROP ROLE IF EXISTS \"{}\";
             DROP ROLE IF EXISTS \"{}\";",
            self.schema, self.login, self.app_role
        );
        let admin = self.admin.clone();
        let done = std::thread::spawn(move || {
            runtime().block_on(async {
                let mut conn = PgConnection::connect(&admin).await?;
                sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut conn).await?;
                conn.close().await
            })
        })
        .join();
        if !matches!(done, Ok(Ok(()))) {
            eprintln!(
                "could not drop schema {} and roles {}, {}: {done:?}",
                self.schema, self.login, self.app_role
            );
        }
    }
}

/// A child process killed when dropped (a failing test leaves none behind).
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(args: &[&str], cwd: &Path) -> Running {
    let child = Command::new(env!("CARGO_BIN_EXE_forge-store"))
        .args(args)
        .current_dir(cwd)
        .env_remove("FORGE_BACKEND")
        .env_remove("FORGE_TENANT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run forge-store");
    Running(Some(child))
}

/// Waits for the process, killing it (and failing) after [`PROCESS_TIMEOUT`].
fn wait(mut running: Running) -> Output {
    let mut child = running.0.take().unwrap();
    // Drain the pipes on threads so a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut out, &mut v).map(|_| v)
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut err, &mut v).map(|_| v)
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > PROCESS_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("forge-store did not finish within {PROCESS_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap().unwrap(),
        stderr: err.join().unwrap().unwrap(),
    }
}

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
    let Some(admin) = forge_testkit::service_url(
        "FORGE_TEST_POSTGRES_URL",
        "tenancy under a plain login role",
    ) else {
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

/// Counts the checks a test makes, so the figure it prints is the number it made.
#[derive(Debug, Default)]
struct Checks(usize);

impl Checks {
    /// Fails the test with `what` unless `ok`; counts one check.
    #[track_caller]
    fn that(&mut self, ok: bool, what: impl std::fmt::Display) {
        assert!(ok, "{what}");
        self.0 += 1;
    }

    /// Fails the test unless `got == want`; counts one check.
    #[track_caller]
    fn eq<T: PartialEq + std::fmt::Debug + ?Sized>(
        &mut self,
        got: &T,
        want: &T,
        what: impl std::fmt::Display,
    ) {
        assert_eq!(got, want, "{what}");
        self.0 += 1;
    }
}

/// The library as the login role: `forge_store::open` and `PostgresStore`.
async fn library_checks(d: &Deployment, a_doc: &Value, b_doc: &Value, c: &mut Checks) {
    let (a, b, t_c) = (
        TenantId::new("A").unwrap(),
        TenantId::new("B").unwrap(),
        TenantId::new("C").unwrap(),
    );
    let sid = SessionId::from(SAME_SESSION);
    let forge = forge_store::open(&d.url()).await.unwrap();
    let export = |t| {
        let forge = &forge;
        let sid = &sid;
        async move { serde_json::to_value(forge.export(t, sid).await.unwrap()).unwrap() }
    };
    c.eq(&export(&a).await, a_doc, "A's export through the library");
    c.eq(&export(&b).await, b_doc, "B's export through the library");
    c.that(
        forge.export(&t_c, &sid).await.is_err(),
        "C exports A's and B's session id",
    );
    c.that(
        forge.sessions(&t_c).await.unwrap().is_empty(),
        "C lists sessions",
    );

    // PostgresStore runs as the login role itself (no SET ROLE: it is not privileged).
    let store = PostgresStore::connect(&d.url()).await.unwrap();
    c.eq(
        &store.current_role().await.unwrap(),
        &d.login,
        "PostgresStore's role",
    );
    store.close().await;

    // A URL presetting the tenant setting for the whole connection: every transaction
    // sets its own tenant, so tenant A's calls still read A and C's read nothing.
    let preset = forge_store::open(&d.url_with("&options=-c%20forge.tenant%3DB"))
        .await
        .unwrap();
    c.eq(
        &serde_json::to_value(preset.export(&a, &sid).await.unwrap()).unwrap(),
        a_doc,
        "A's export on a URL presetting tenant B",
    );
    c.that(
        preset.sessions(&t_c).await.unwrap().is_empty(),
        "C lists sessions on a URL presetting tenant B",
    );

    // Tenant ids that try to smuggle SQL or another tenant are refused before any query.
    for bad in ["A' OR 'x'='x", "A;SET ROLE postgres", "", "B\0", "*", "A B"] {
        c.that(TenantId::new(bad).is_err(), format_args!("{bad:?}"));
    }
}

/// Raw SQL as the login role, and URLs asking the server for more: every way to get
/// past row-level security fails.
async fn switch_off_attempts(d: &Deployment, c: &mut Checks) {
    let url = d.url();
    let mut conn = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "SET search_path TO \"{}\"",
        d.schema
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    let forbidden = [
        "ALTER TABLE sessions DISABLE ROW LEVEL SECURITY",
        "ALTER TABLE messages NO FORCE ROW LEVEL SECURITY",
        "DROP POLICY tenant_isolation ON parts",
        "CREATE POLICY everything ON sessions USING (true)",
        "SET ROLE postgres",
        "SET SESSION AUTHORIZATION postgres",
    ];
    for sql in forbidden {
        let res = sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut conn).await;
        c.that(res.is_err(), format_args!("{sql} succeeded"));
        if let Err(err) = res {
            eprintln!("refused as expected: {sql}: {err}");
        }
    }
    let res = sqlx::raw_sql(AssertSqlSafe(format!(
        "ALTER ROLE \"{}\" BYPASSRLS",
        d.login
    )))
    .execute(&mut conn)
    .await;
    c.that(res.is_err(), "ALTER ROLE … BYPASSRLS succeeded");
    if let Err(err) = res {
        eprintln!("refused as expected: ALTER ROLE BYPASSRLS: {err}");
    }

    // Without the tenant setting nothing is visible.
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM sessions")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    c.eq(&count, &0, "rows visible without forge.tenant");
    // row_security = off makes a query that RLS would filter fail, not bypass.
    sqlx::raw_sql("SET row_security = off")
        .execute(&mut conn)
        .await
        .unwrap();
    let res = sqlx::query_scalar::<_, i64>("SELECT count(*) FROM sessions")
        .fetch_one(&mut conn)
        .await;
    c.that(res.is_err(), "row_security = off must make the query fail");
    let err = res.map_or_else(|e| e.to_string(), |_| String::new());
    c.that(err.contains("row-level security"), &err);
    conn.close().await.unwrap();

    // The same through the library: a URL switching row_security off gets errors, never
    // another tenant's rows; a URL asking for the postgres role does not connect.
    let a = TenantId::new("A").unwrap();
    // (The migration's first read already fails: `forge_meta` has forced policies.)
    let err = match forge_store::open(&d.url_with("&options=-c%20row_security%3Doff")).await {
        Err(e) => e.to_string(),
        Ok(off) => off
            .sessions(&a)
            .await
            .expect_err("row_security=off URL")
            .to_string(),
    };
    c.that(err.contains("row-level security"), &err);
    eprintln!("refused as expected: URL with row_security=off: {err}");
    let res = forge_store::open(&d.url_with("&options=-c%20role%3Dpostgres")).await;
    c.that(res.is_err(), "a role=postgres URL connected");
    if let Err(err) = res {
        eprintln!("refused as expected: URL with role=postgres: {err}");
    }

    // The limit of database-side isolation: whoever holds the role's credentials and
    // writes raw SQL chooses the tenant setting. Row-level security separates the
    // tenants of forge-store's API (the tenant is an argument of every call, validated);
    // it is not an authentication boundary between tenants sharing one role.
    let mut conn = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "SET search_path TO \"{}\"",
        d.schema
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    let mut tx = conn.begin().await.unwrap();
    sqlx::query("SELECT set_config('forge.tenant', 'B', true)")
        .execute(&mut *tx)
        .await
        .unwrap();
    let visible: i64 = sqlx::query_scalar("SELECT count(*) FROM sessions")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    c.eq(&visible, &2, "the setting selects the tenant");
    tx.rollback().await.unwrap();
    conn.close().await.unwrap();
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
    let Some(admin) = forge_testkit::service_url(
        "FORGE_TEST_POSTGRES_URL",
        "many CLI processes and tenants on Postgres",
    ) else {
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
        let running: Vec<Running> = jobs
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
