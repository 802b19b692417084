//! The SQLite driver: `sqlite://PATH[?options]`, and a fresh temporary file per
//! throwaway instance.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::driver::proc_io::{thread_growth, thread_io_by_tid, ProcIo};
use forge_core::driver::{
    guarded, last_handle, parts, temp_dir, Backend, Driver, DriverInfo, DriverOptions,
    InstanceOptions, Instances, Kind, ProbeRun, StoreMap, WriteProbe, Written,
};
use forge_core::{Error, Result, Store};
use tempfile::TempDir;

use super::{SqliteOptions, SqliteStore};

/// The driver of [`SqliteStore`].
pub static DRIVER: SqliteDriver = SqliteDriver;

/// See [`DRIVER`].
#[derive(Debug)]
pub struct SqliteDriver;

/// The name sqlx-sqlite 0.9 gives the worker thread of each connection:
/// `sqlx-sqlite-worker-{id}` (the default of `SqliteConnectOptions::thread_name`). Every
/// statement of a connection, checkpoints included, runs on it.
pub const WORKER_THREAD_PREFIX: &str = "sqlx-sqlite-worker-";

fn query_of(url: &str) -> Result<&str> {
    let (scheme, _, query) = parts(url)?;
    if !scheme.eq_ignore_ascii_case("sqlite") {
        return Err(Error::invalid(format!(
            "{} is not a sqlite:// URL",
            forge_core::url::quoted(url)
        )));
    }
    Ok(query)
}

#[async_trait]
impl Driver for SqliteDriver {
    fn info(&self) -> DriverInfo {
        DriverInfo {
            name: "sqlite",
            schemes: &["sqlite"],
            shape: "sqlite://PATH[?synchronous=normal|full&page_size=N&check=quick|full|off&search=on|off]",
            kind: Kind::File,
        }
    }

    async fn open_store(&self, url: &str, _: &DriverOptions) -> Result<Arc<dyn Store>> {
        Ok(Arc::new(SqliteStore::open(url).await?))
    }

    async fn instances(&self, url: &str, options: &InstanceOptions) -> Result<Arc<dyn Instances>> {
        let query = query_of(url)?.to_owned();
        // The options are checked now, on a path that is never opened.
        SqliteOptions::from_url(&instance_url(Path::new("instance.db"), &query))?;
        Ok(Arc::new(TempFiles {
            query,
            dir: options.dir.clone(),
            opened: StoreMap::new(),
        }))
    }
}

fn instance_url(path: &Path, query: &str) -> String {
    let url = format!("sqlite://{}", path.display());
    if query.is_empty() {
        url
    } else {
        format!("{url}?{query}")
    }
}

#[derive(Clone)]
struct Opened {
    dir: Arc<TempDir>,
    store: Arc<SqliteStore>,
}

/// A fresh file per instance, in a temporary directory removed with the store.
struct TempFiles {
    query: String,
    dir: Option<PathBuf>,
    opened: StoreMap<Opened>,
}

impl TempFiles {
    async fn open(&self, dir: Arc<TempDir>) -> Result<Arc<dyn Store>> {
        let url = instance_url(&dir.path().join("instance.db"), &self.query);
        let sqlite = Arc::new(SqliteStore::open(&url).await?);
        let store = guarded(Arc::clone(&sqlite) as Arc<dyn Store>, Arc::clone(&dir));
        self.opened.insert(&store, Opened { dir, store: sqlite });
        Ok(store)
    }
}

#[async_trait]
impl Instances for TempFiles {
    fn how(&self) -> String {
        "fresh temporary file per instance".to_owned()
    }

    async fn fresh(&self) -> Result<Backend> {
        let dir = temp_dir("sqlite", self.dir.as_deref())?;
        Ok(Backend {
            store: self.open(dir).await?,
            bus: None,
        })
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        let opened = self
            .opened
            .remove(&store)
            .ok_or_else(|| Error::invalid("reopen: not a store of these instances"))?;
        last_handle(&store)?;
        drop(store);
        opened.store.close().await;
        let Opened { dir, .. } = opened;
        self.open(dir).await.map(Some)
    }

    fn probe(&self, store: &Arc<dyn Store>) -> Option<Box<dyn WriteProbe>> {
        let opened = self.opened.get(store)?;
        Some(Box::new(Probe {
            store: opened.store,
        }))
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        if let Some(opened) = self.opened.remove(&store) {
            opened.store.close().await;
        }
        Ok(())
    }
}

/// Counts `wchar` of the sqlx-sqlite worker threads of this process: the WAL, and the
/// checkpoints that copy it into the file. Every SQLite store open in the process counts.
struct Probe {
    store: Arc<SqliteStore>,
}

struct Started {
    store: Arc<SqliteStore>,
    start: Option<std::collections::BTreeMap<u32, ProcIo>>,
}

#[async_trait]
impl WriteProbe for Probe {
    async fn start(&self) -> Result<Box<dyn ProbeRun>> {
        Ok(Box::new(Started {
            store: Arc::clone(&self.store),
            start: thread_io_by_tid(WORKER_THREAD_PREFIX),
        }))
    }
}

#[async_trait]
impl ProbeRun for Started {
    async fn finish(self: Box<Self>) -> Result<Written> {
        // What a run wrote includes the checkpoint that copies its WAL into the file.
        // The counts live on the pool's threads: read them before the pool closes.
        self.store.checkpoint().await?;
        let source = "sqlite writer threads' wchar (WAL + checkpoints)".to_owned();
        let bytes = match (self.start, thread_io_by_tid(WORKER_THREAD_PREFIX)) {
            (Some(start), Some(now)) => Some(thread_growth(&start, &now).wchar),
            _ => None,
        };
        Ok(Written {
            bytes,
            source,
            syncs: None,
        })
    }
}
