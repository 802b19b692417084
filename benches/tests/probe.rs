//! The probes measure what they claim: process and thread I/O counters grow with a
//! written file, the SQLite probe finds sqlx's worker threads, the redb probe counts
//! commits, and (with the services set) the Postgres WAL position and Redis memory grow
//! with writes.

use std::io::Write as _;
use std::sync::mpsc;

use forge_bench::probe::{
    pg_connect, pg_stat_wal, pg_wal_insert_lsn, redis_memory_usage, redis_persistence,
    redis_store_pattern, redis_url_pattern, thread_io, thread_io_by_tid, ProcIo,
    SQLITE_WORKER_THREAD_PREFIX,
};
use forge_conformance::differential::{put_message, put_part, put_session};
use forge_core::driver::{Driver, InstanceOptions, Instances, Written};
use forge_core::Store;
use forge_testkit::service_url;
use sqlx::Connection as _;

const POSTGRES: &str = "FORGE_TEST_POSTGRES_URL";
const REDIS: &str = "FORGE_TEST_REDIS_URL";

/// Runs `test` on a new runtime with the URL of the service in `var`; with none
/// configured, says the test was skipped and does nothing.
fn on_service(var: &str, what: &str, test: impl AsyncFnOnce(&str)) {
    let Some(url) = service_url(var, what) else {
        return;
    };
    block_on(test(&url));
}

/// Runs `f` to its end on a new multi-threaded runtime.
fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Runtime::new().unwrap().block_on(f)
}

/// Runs `sql` (one statement, no parameters) on `conn`.
async fn exec(conn: &mut sqlx::PgConnection, sql: &'static str) {
    sqlx::query(sql).execute(conn).await.unwrap();
}

fn write_and_sync(path: &std::path::Path, bytes: usize) {
    let mut file = std::fs::File::create(path).unwrap();
    file.write_all(&vec![b'x'; bytes]).unwrap();
    file.sync_all().unwrap();
}

fn batch(seq: u64) -> Vec<forge_core::Envelope<forge_core::SyncEvent>> {
    vec![
        put_session("a", "ses_1", seq),
        put_message("a", "ses_1", "msg_1", 2, seq + 1),
        put_part("a", "ses_1", "msg_1", "prt_1", 6, seq + 2),
    ]
}

#[test]
fn proc_io_wchar_grows_after_writing_and_syncing_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let before = ProcIo::read().expect("/proc/self/io on Linux");
    write_and_sync(&dir.path().join("f"), 1 << 20);
    let grown = ProcIo::read().unwrap().since(&before);
    assert!(grown.wchar >= 1 << 20, "{grown:?}");
    assert!(grown.syscw >= 1, "{grown:?}");
}

#[test]
fn thread_io_finds_a_named_thread_and_only_it() {
    // Longer than the 15 bytes the kernel keeps of a name: matching cuts the prefix.
    const NAME: &str = "forge-probe-writer-thread";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t");
    let (written_tx, written_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let writer = std::thread::Builder::new()
        .name(NAME.to_owned())
        .spawn(move || {
            write_and_sync(&path, 100_000);
            written_tx.send(()).unwrap();
            // Stay alive until measured: an exited thread's counters are gone.
            let _ = done_rx.recv();
        })
        .unwrap();
    written_rx.recv().unwrap();

    let io = thread_io(NAME).expect("/proc/self/task on Linux");
    assert!(io.wchar >= 100_000, "{io:?}");
    assert_eq!(thread_io_by_tid(NAME).unwrap().len(), 1);
    assert_eq!(thread_io("no-such-thread").unwrap(), ProcIo::default());

    done_tx.send(()).unwrap();
    writer.join().unwrap();
}

/// A fresh instance of `driver` on `url` (in place when `in_place`), the bytes its
/// probe measures over `work` done on its store, and the set to tear it down with.
async fn probed<F, Fut>(
    driver: &dyn Driver,
    url: &str,
    in_place: bool,
    work: F,
) -> (
    Written,
    std::sync::Arc<dyn Instances>,
    std::sync::Arc<dyn Store>,
)
where
    F: FnOnce(std::sync::Arc<dyn Store>) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let options = InstanceOptions::default().in_place(in_place);
    let set = driver.instances(url, &options).await.unwrap();
    let store = set.fresh().await.unwrap().store;
    let probe = set.probe(&store).expect("the driver measures its writes");
    let run = probe.start().await.unwrap();
    work(std::sync::Arc::clone(&store)).await;
    let written = run.finish().await.unwrap();
    (written, set, store)
}

#[test]
fn the_sqlite_probe_finds_sqlx_worker_threads_by_their_name() {
    block_on(async {
        let (written, set, store) =
            probed(&forge_sql::SQLITE, "sqlite://", false, |store| async move {
                assert!(!thread_io_by_tid(SQLITE_WORKER_THREAD_PREFIX)
                    .unwrap()
                    .is_empty());
                store.apply(&batch(1)).await.unwrap();
            })
            .await;
        eprintln!("sqlite, one batch of 3 rows: {written:?}");
        assert!(written.bytes.expect("measured on Linux") > 0, "{written:?}");
        assert!(written.source.contains("wchar"), "{written:?}");
        assert_eq!(written.syncs, None);
        set.teardown(store).await.unwrap();
    });
}

#[test]
fn the_redb_probe_counts_commits_and_syncs() {
    block_on(async {
        let (written, set, store) =
            probed(&forge_redb::DRIVER, "redb://", false, |store| async move {
                store.apply(&batch(1)).await.unwrap();
            })
            .await;
        eprintln!("redb, one durable batch of 3 rows and a checkpoint: {written:?}");
        // One journal page synced, then the checkpoint that copies it into the file (a
        // durable redb commit: pages and header, synced).
        assert!(written.bytes.unwrap() > 4096, "{written:?}");
        assert_eq!(
            written.source,
            "redb storage backend writes + journal pages synced"
        );
        assert!(written.syncs.unwrap() >= 2, "{written:?}");
        set.teardown(store).await.unwrap();
    });
}

#[test]
fn the_memory_backend_has_no_probe() {
    block_on(async {
        let set = forge_core::driver::MEMORY
            .instances("memory://", &InstanceOptions::default())
            .await
            .unwrap();
        let store = set.fresh().await.unwrap().store;
        assert!(set.probe(&store).is_none());
    });
}

#[test]
fn postgres_wal_insert_lsn_grows_with_an_insert() {
    on_service(POSTGRES, "Postgres WAL probes", async |url| {
        let mut conn = pg_connect(url).await.unwrap();
        exec(
            &mut conn,
            "create temp table probe_t (id bigint, body text)",
        )
        .await;
        let stats_before = pg_stat_wal(&mut conn).await.unwrap();
        let before = pg_wal_insert_lsn(&mut conn).await.unwrap();
        exec(
            &mut conn,
            "insert into probe_t select g, repeat('x', 100) from generate_series(1, 100) g",
        )
        .await;
        let after = pg_wal_insert_lsn(&mut conn).await.unwrap();
        assert!(after > before, "WAL insert LSN {before} → {after}");
        let stats = pg_stat_wal(&mut conn).await.unwrap();
        assert!(
            stats.wal_bytes >= stats_before.wal_bytes,
            "{stats_before:?} → {stats:?}"
        );

        conn.close().await.unwrap();

        // The probe of an instance, around writes of a connection that is closed before
        // it finishes (as the instance's pool is), so their syncs are reported at once.
        let set = forge_sql::POSTGRES
            .instances(url, &InstanceOptions::default().purpose("probe_test"))
            .await
            .unwrap();
        let store = set.fresh().await.unwrap().store;
        let run = set.probe(&store).unwrap().start().await.unwrap();
        let mut writer = pg_connect(url).await.unwrap();
        exec(
            &mut writer,
            "create table if not exists probe_wal_test (id bigint, body text)",
        )
        .await;
        exec(
            &mut writer,
            "insert into probe_wal_test select g, md5(g::text) from generate_series(1, 1000) g",
        )
        .await;
        exec(&mut writer, "drop table probe_wal_test").await;
        writer.close().await.unwrap();
        let written = run.finish().await.unwrap();
        eprintln!("postgres, 1000 rows: {written:?}");
        assert!(written.bytes.unwrap() >= 1000 * 32, "{written:?}");
        assert!(written.source.contains("pg_wal_lsn_diff"), "{written:?}");
        assert!(
            written.syncs.unwrap() >= 1,
            "three durable commits, {written:?}"
        );
        set.teardown(store).await.unwrap();
        set.close().await.unwrap();
    });
}

#[test]
fn redis_memory_usage_and_persistence_see_the_store_keys() {
    on_service(REDIS, "Redis memory / AOF probes", async |url| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let prefix = format!("forge-probe-{}-{nanos}", std::process::id());
        let sep = if url.contains('?') { '&' } else { '?' };
        let store_url = format!("{url}{sep}prefix={prefix}");
        let store = forge_redis::RedisStore::connect(&store_url).await.unwrap();
        let pattern = redis_store_pattern(&store);
        assert_eq!(pattern, format!("{prefix}:*"));
        assert_eq!(redis_url_pattern(&store_url).unwrap(), pattern);

        let disk = redis_persistence(url).await.unwrap();
        assert_eq!(
            disk.aof_enabled,
            disk.aof_current_size.is_some(),
            "{disk:?}"
        );
        // Only the prefix's layout marker so far.
        let marker = redis_memory_usage(url, &pattern).await.unwrap();
        assert!(marker < 256, "{marker} bytes before any write");

        // The driver's instance in place on the same prefix: its probe counts these keys.
        let (written, _set, _instance) =
            probed(&forge_redis::DRIVER, &store_url, true, |_| async {
                store.apply(&batch(1)).await.unwrap();
            })
            .await;
        let used = redis_memory_usage(url, &pattern).await.unwrap();
        assert!(used > marker, "{used} bytes after a write, {marker} before");
        eprintln!("redis, one batch of 3 rows: {written:?} ({disk:?})");
        assert!(written.bytes.unwrap() > 0, "{written:?}");
        if !disk.aof_enabled {
            assert_eq!(written.bytes, Some(used - marker));
            assert!(written.source.contains("MEMORY USAGE"), "{written:?}");
        }
        assert_eq!(written.syncs, None);

        // Leave nothing behind.
        let client = redis::Client::open(url).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(&pattern)
            .query_async(&mut conn)
            .await
            .unwrap();
        if !keys.is_empty() {
            let _: i64 = redis::cmd("DEL")
                .arg(&keys)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    });
}
