//! The redb driver: `redb://PATH[?options]`, and a fresh temporary file per throwaway
//! instance.

use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use forge_core::driver::{
    guarded, last_handle, parts, temp_dir, Backend, Driver, DriverInfo, DriverOptions,
    InstanceOptions, Instances, Kind, ProbeRun, StoreMap, WriteProbe, Written,
};
use forge_core::{Error, Result, Store};
use tempfile::TempDir;

use crate::{IoCounters, IoCounts, RedbOptions, RedbStore};

/// The driver of [`RedbStore`].
pub static DRIVER: RedbDriver = RedbDriver;

/// See [`DRIVER`].
#[derive(Debug)]
pub struct RedbDriver;

/// The path and options of a `redb://` URL.
fn parse(url: &str) -> Result<(PathBuf, RedbOptions)> {
    let (scheme, path, query) = parts(url)?;
    if !scheme.eq_ignore_ascii_case("redb") {
        return Err(Error::invalid(format!(
            "{} is not a redb:// URL",
            forge_core::url::quoted(url)
        )));
    }
    Ok((PathBuf::from(path), RedbOptions::from_query(query)?))
}

fn join(e: tokio::task::JoinError) -> Error {
    Error::backend("redb", false, e)
}

#[async_trait]
impl Driver for RedbDriver {
    fn info(&self) -> DriverInfo {
        DriverInfo {
            name: "redb",
            schemes: &["redb"],
            shape: "redb://PATH[?durability=immediate|none&journal=on|off&check=on|off&wait_ms=N&cache_mib=N&search=on|off]",
            kind: Kind::File,
        }
    }

    async fn open_store(&self, url: &str, _: &DriverOptions) -> Result<Arc<dyn Store>> {
        let (path, options) = parse(url)?;
        if path.as_os_str().is_empty() {
            return Err(Error::invalid(
                "redb:// needs a file path, e.g. redb://./forge.redb",
            ));
        }
        let store = tokio::task::spawn_blocking(move || RedbStore::open_with(path, options))
            .await
            .map_err(join)??;
        Ok(Arc::new(store))
    }

    async fn instances(&self, url: &str, options: &InstanceOptions) -> Result<Arc<dyn Instances>> {
        let (_, redb) = parse(url)?;
        Ok(Arc::new(TempFiles {
            options: redb,
            dir: options.dir.clone(),
            opened: StoreMap::new(),
        }))
    }
}

/// An instance's file and what counts its writes.
#[derive(Clone)]
struct Opened {
    dir: Arc<TempDir>,
    store: Arc<RedbStore>,
    counters: Option<IoCounters>,
}

/// A fresh file per instance, in a temporary directory removed with the store.
struct TempFiles {
    options: RedbOptions,
    dir: Option<PathBuf>,
    opened: StoreMap<Opened>,
}

impl TempFiles {
    fn remember(&self, opened: Opened) -> Arc<dyn Store> {
        let store = guarded(
            Arc::clone(&opened.store) as Arc<dyn Store>,
            Arc::clone(&opened.dir),
        );
        self.opened.insert(&store, opened);
        store
    }
}

fn file_in(dir: &TempDir) -> PathBuf {
    dir.path().join("instance.redb")
}

#[async_trait]
impl Instances for TempFiles {
    fn how(&self) -> String {
        "fresh temporary file per instance".to_owned()
    }

    async fn fresh(&self) -> Result<Backend> {
        let dir = temp_dir("redb", self.dir.as_deref())?;
        let path = file_in(&dir);
        let options = self.options;
        let (store, counters) =
            tokio::task::spawn_blocking(move || RedbStore::open_counted(path, options))
                .await
                .map_err(join)??;
        let store = self.remember(Opened {
            dir,
            store: Arc::new(store),
            counters: Some(counters),
        });
        Ok(Backend { store, bus: None })
    }

    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        let opened = self
            .opened
            .remove(&store)
            .ok_or_else(|| Error::invalid("reopen: not a store of these instances"))?;
        last_handle(&store)?;
        drop(store);
        let Opened { dir, store, .. } = opened;
        match Arc::try_unwrap(store) {
            Ok(redb) => redb.close().await?,
            Err(_) => return Err(Error::invalid("the redb store is still in use")),
        }
        let path = file_in(&dir);
        let options = self.options;
        let store = tokio::task::spawn_blocking(move || RedbStore::open_with(path, options))
            .await
            .map_err(join)??;
        Ok(Some(self.remember(Opened {
            dir,
            store: Arc::new(store),
            counters: None,
        })))
    }

    fn probe(&self, store: &Arc<dyn Store>) -> Option<Box<dyn WriteProbe>> {
        let opened = self.opened.get(store)?;
        let counters = opened.counters.clone()?;
        Some(Box::new(Probe {
            store: opened.store,
            counters,
        }))
    }

    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        let Some(opened) = self.opened.remove(&store) else {
            return Ok(());
        };
        drop(store);
        // The last handle closes the file; one a task still holds closes it when that
        // task lets go, and the directory goes with it.
        if let Ok(redb) = Arc::try_unwrap(opened.store) {
            redb.close().await?;
        }
        Ok(())
    }
}

/// Counts what redb hands its storage backend, the journal's synced pages included.
struct Probe {
    store: Arc<RedbStore>,
    counters: IoCounters,
}

struct Started {
    store: Arc<RedbStore>,
    counters: IoCounters,
    start: IoCounts,
}

#[async_trait]
impl WriteProbe for Probe {
    async fn start(&self) -> Result<Box<dyn ProbeRun>> {
        Ok(Box::new(Started {
            store: Arc::clone(&self.store),
            counters: self.counters.clone(),
            start: self.counters.snapshot(),
        }))
    }
}

#[async_trait]
impl ProbeRun for Started {
    async fn finish(self: Box<Self>) -> Result<Written> {
        // What a run wrote includes the checkpoint that copies its journal into the file.
        self.store.checkpoint().await?;
        let run = self.counters.snapshot().since(self.start);
        tracing::info!(
            file_write_bytes = run.write_bytes,
            file_syncs = run.syncs,
            journal_page_bytes = run.journal_write_bytes,
            journal_syncs = run.journal_syncs,
            "redb: what the run wrote, by cause"
        );
        Ok(Written {
            bytes: Some(run.total_write_bytes()),
            source: "redb storage backend writes + journal pages synced".to_owned(),
            syncs: Some(run.total_syncs()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_url_of_another_scheme_or_with_an_unknown_option_is_refused() {
        let o = DriverOptions::default();
        assert!(DRIVER.open_store("sqlite://x", &o).await.is_err());
        let err = DRIVER
            .open_store("redb:///tmp/x.redb?colour=red", &o)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("colour"), "{err}");
        assert!(DRIVER.open_store("redb://", &o).await.is_err());
    }

    #[tokio::test]
    async fn an_instance_reopens_on_its_file_and_counts_its_writes() {
        let set = DRIVER
            .instances("redb://ignored", &InstanceOptions::default())
            .await
            .unwrap();
        let store = set.fresh().await.unwrap().store;
        let probe = set.probe(&store).expect("a fresh instance is counted");
        let run = probe.start().await.unwrap();
        let tenant = forge_core::TenantId::default();
        let session = forge_core::Session::new("t", 1);
        let id = session.id.clone();
        store
            .apply(&[forge_core::Envelope {
                tenant: tenant.clone(),
                session_id: id.clone(),
                seq: 1,
                epoch: None,
                event: forge_core::SyncEvent::SessionUpdated { info: session },
            }])
            .await
            .unwrap();
        let written = run.finish().await.unwrap();
        assert!(written.bytes.unwrap_or(0) > 0, "{written:?}");
        // The probe holds the store: the file closes for the reopen once it is gone.
        drop(probe);
        let store = set.reopen(store).await.unwrap().expect("a file reopens");
        assert!(store.session(&tenant, &id).await.unwrap().is_some());
        set.teardown(store).await.unwrap();
    }
}
