//! Files written by storage format v1 keep working: the fixtures under
//! `fixtures/storage-v1/` (made by `scripts/v1-fixtures.sh` with the v1 release — a redb
//! file, a SQLite file and a Postgres schema dump holding the same sessions) are opened by
//! this release, and every session, message, part, `seq` and open item reads back as the
//! v1 release exported it.
#![cfg(any(feature = "redb", feature = "sqlite", feature = "postgres"))]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use forge_store::{Forge, SessionId, TenantId};
use serde_json::Value;

fn fixtures() -> PathBuf {
    [env!("CARGO_MANIFEST_DIR"), "..", "fixtures", "storage-v1"]
        .iter()
        .collect()
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Checks every row of both tenants against the v1 exports; returns the sessions checked.
async fn check_all(forge: &Forge, backend: &str) -> usize {
    let what = format!("{backend} v1");
    let mut checked = 0;
    for tenant_name in ["default", "acme"] {
        let tenant = TenantId::new(tenant_name).expect("tenant");
        let dir = fixtures().join("expected").join(backend).join(tenant_name);
        let expected_sessions = read_json(&dir.join("sessions.json"));
        let sessions = forge.sessions(&tenant).await.expect("sessions");
        assert_eq!(
            serde_json::to_value(&sessions).expect("json"),
            expected_sessions,
            "{what}: sessions (with their seq) of tenant {tenant_name}"
        );
        let mut expected_open = BTreeSet::new();
        for state in &sessions {
            let id: &SessionId = &state.info.id;
            let expected = read_json(&dir.join(format!("{id}.json")));
            let export = forge.export(&tenant, id).await.expect("export");
            assert_eq!(
                serde_json::to_value(&export).expect("json"),
                expected,
                "{what}: session {tenant_name}/{id}"
            );
            for m in &export.messages {
                if m.info.is_open() {
                    expected_open.insert(format!("message {}", m.info.id));
                }
                for p in &m.parts {
                    if p.is_open() {
                        expected_open.insert(format!("part {}", p.id));
                    }
                }
            }
            checked += 1;
        }
        let open = forge
            .store()
            .open_items(&tenant, None)
            .await
            .expect("open items");
        let found: BTreeSet<String> = open
            .messages
            .iter()
            .map(|m| format!("message {}", m.id))
            .chain(open.parts.iter().map(|p| format!("part {}", p.id)))
            .collect();
        assert_eq!(
            found, expected_open,
            "{what}: open items of tenant {tenant_name}"
        );
        if tenant_name == "default" {
            assert!(
                !found.is_empty(),
                "the crash session leaves open items to recover"
            );
        }
    }
    checked
}

/// A copy of a fixture file in a temporary directory: opening may migrate it in place.
fn copy_of(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join(name);
    std::fs::copy(fixtures().join(name), &path).expect("copy fixture");
    (dir, path)
}

/// Opens the `backend` file at `path` (a copy of a fixture, or one upgraded from it) and
/// checks that it reads back every row of the fixture.
#[cfg(any(feature = "redb", feature = "sqlite"))]
async fn open_checked(backend: &str, path: &Path) -> Forge {
    let forge = forge_store::open(&format!("{backend}://{}", path.display()))
        .await
        .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
    assert_eq!(check_all(&forge, backend).await, 11);
    forge
}

#[cfg(feature = "redb")]
#[tokio::test]
async fn a_v1_redb_file_reads_back_every_row() {
    let (_dir, path) = copy_of("forge.redb");
    let forge = open_checked("redb", &path).await;
    // The upgrade kept the file as it was (schema version 2, every row) beside it.
    let kept = path.with_file_name("forge.redb.schema-v2.bak");
    assert!(kept.exists(), "{} was not kept", kept.display());
    forge.flush().await.expect("flush");
    drop(forge);
    // Opened again, the file is current: no second upgrade, no second copy.
    drop(open_checked("redb", &path).await);
    let copies = |dir: &std::path::Path| {
        std::fs::read_dir(dir)
            .expect("list")
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".bak"))
            })
            .count()
    };
    assert_eq!(
        copies(path.parent().expect("dir")),
        1,
        "one upgrade, one copy"
    );
    // The copy is the v2 file: opening it upgrades it again (keeping its own copy), and
    // it holds every row.
    let other = tempfile::tempdir().expect("temp dir");
    let old = other.path().join("old.redb");
    std::fs::copy(&kept, &old).expect("copy the kept file");
    open_checked("redb", &old).await;
    assert!(other.path().join("old.redb.schema-v2.bak").exists());
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn a_v1_sqlite_file_reads_back_every_row() {
    let (_dir, path) = copy_of("forge.sqlite");
    open_checked("sqlite", &path).await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn a_v1_postgres_schema_reads_back_every_row() {
    let Some(url) = forge_testkit::service_url(
        "FORGE_TEST_POSTGRES_URL",
        "opening the v1 Postgres schema dump",
    ) else {
        return;
    };
    let schema = format!("forge_v1_{}", std::process::id());
    let dump = std::fs::read_to_string(fixtures().join("postgres.sql")).expect("dump");
    // psql meta-commands (`\restrict`) are not SQL; the dump's schema is renamed so
    // runs do not collide.
    let sql: String = dump
        .lines()
        .filter(|l| !l.starts_with('\\'))
        .map(|l| l.replace("forge_v1_fixture", &schema) + "\n")
        .collect();
    let admin = sqlx::PgPool::connect(&url).await.expect("connect");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE"
    )))
    .execute(&admin)
    .await
    .expect("drop");
    sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
        .execute(&admin)
        .await
        .expect("restore the v1 dump");
    let sep = if url.contains('?') { '&' } else { '?' };
    let opened = forge_store::open(&format!("{url}{sep}schema={schema}")).await;
    let result = match opened {
        Ok(forge) => Ok(check_all(&forge, "postgres").await),
        Err(e) => Err(e),
    };
    // The test's user is a superuser: the upgrade could see every tenant's rows and
    // gave each its checksum.
    let mut unchecked = 0i64;
    for table in ["sessions", "messages", "parts"] {
        let n: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {schema}.{table} WHERE checksum IS NULL"
        )))
        .fetch_one(&admin)
        .await
        .expect("count rows without checksum");
        unchecked += n;
    }
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(&admin)
        .await
        .expect("drop");
    assert_eq!(result.expect("open the v1 Postgres schema"), 11);
    assert_eq!(unchecked, 0, "rows left without a checksum by the upgrade");
}
