//! The factory hooks: every store the suite gets is torn down exactly once — after
//! passing, failing and panicking cases, after a reopen, and after the capability
//! probes — and a failing teardown fails the case.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use forge_conformance::{
    guarded, BackendFactory, Config, Outcome, Property, PropertyResult, Report, StoreMap,
};
use forge_core::{Bus, Forward, LocalBus, MemoryStore, Result, SessionState, Store, TenantId};
use parking_lot::Mutex;

/// A store that panics on every `sessions` call: every case that lists sessions panics.
#[derive(Debug)]
struct Panics(MemoryStore);

#[async_trait]
impl Forward for Panics {
    fn inner(&self) -> &dyn Store {
        &self.0
    }
    async fn sessions(&self, _: &TenantId) -> Result<Vec<SessionState>> {
        panic!("sessions() of a store that panics")
    }
}

/// A backend whose data outlives its handles (a `MemoryStore` per "disk", a reopen is a
/// new handle on it) that checks the suite's use of the hooks: it counts them, and
/// records every teardown or reopen of a store it did not hand out (or no longer has
/// out).
#[derive(Default)]
struct Checked {
    panics: bool,
    failing_teardown: bool,
    out: StoreMap<Arc<MemoryStore>>,
    opened: AtomicUsize,
    reopened: AtomicUsize,
    torn_down: AtomicUsize,
    misuse: Mutex<Vec<String>>,
}

impl Checked {
    fn handle(&self, disk: Arc<MemoryStore>) -> Arc<dyn Store> {
        let store = if self.panics {
            Arc::new(Panics(MemoryStore::new())) as Arc<dyn Store>
        } else {
            // A new handle on the same disk.
            guarded(Arc::clone(&disk) as Arc<dyn Store>, ())
        };
        self.out.insert(&store, disk);
        store
    }

    fn take(&self, store: &Arc<dyn Store>, hook: &str) -> Option<Arc<MemoryStore>> {
        let disk = self.out.remove(store);
        if disk.is_none() {
            self.misuse
                .lock()
                .push(format!("{hook} of a store not handed out"));
        }
        disk
    }

    fn counts(&self) -> (usize, usize, usize) {
        (
            self.opened.load(Ordering::SeqCst),
            self.reopened.load(Ordering::SeqCst),
            self.torn_down.load(Ordering::SeqCst),
        )
    }

    /// Every store handed out was torn down, once, and no hook saw a store it did not
    /// hand out.
    #[track_caller]
    fn assert_each_torn_down_once(&self) {
        let (opened, _, torn_down) = self.counts();
        assert_eq!(
            torn_down, opened,
            "stores opened {opened}, torn down {torn_down}"
        );
        assert!(self.misuse.lock().is_empty(), "{:?}", self.misuse.lock());
        assert!(
            self.out.is_empty(),
            "{} stores never torn down",
            self.out.len()
        );
    }
}

#[async_trait]
impl BackendFactory for Checked {
    fn name(&self) -> &'static str {
        "checked"
    }
    async fn store(&self) -> Result<Arc<dyn Store>> {
        self.opened.fetch_add(1, Ordering::SeqCst);
        Ok(self.handle(Arc::new(MemoryStore::new())))
    }
    async fn bus(&self) -> Result<Option<Arc<dyn Bus>>> {
        Ok(Some(Arc::new(LocalBus::with_replay(10_000))))
    }
    async fn reopen(&self, store: Arc<dyn Store>) -> Result<Option<Arc<dyn Store>>> {
        self.reopened.fetch_add(1, Ordering::SeqCst);
        Ok(self.take(&store, "reopen").map(|disk| self.handle(disk)))
    }
    async fn teardown(&self, store: Arc<dyn Store>) -> Result<()> {
        self.torn_down.fetch_add(1, Ordering::SeqCst);
        self.take(&store, "teardown");
        if self.failing_teardown {
            return Err(forge_core::Error::invalid("the key prefix would not go"));
        }
        Ok(())
    }
}

fn config() -> Config {
    Config::default().with_cases(4)
}

/// Runs only `property` on `factory`: its result (it must have run) and the report.
fn run_only(factory: &Checked, property: Property) -> (PropertyResult, Report) {
    let report = forge_conformance::run(factory, &config().with_only(property.name()));
    let result = report
        .result(property)
        .cloned()
        .unwrap_or_else(|| panic!("{property} did not run: {report}"));
    (result, report)
}

#[test]
fn every_store_is_torn_down_once_also_after_a_reopen() {
    let factory = Checked::default();
    let report = forge_conformance::run(&factory, &config());
    assert!(report.is_success(), "{report}");
    let (_, reopened, _) = factory.counts();
    assert!(reopened > 0, "the reopen property never reopened");
    factory.assert_each_torn_down_once();
}

#[test]
fn a_panicking_case_is_torn_down_too() {
    let factory = Checked {
        panics: true,
        ..Checked::default()
    };
    let (result, report) = run_only(&factory, Property::Upsert);
    assert!(
        result
            .failure_text()
            .contains("panicked: sessions() of a store that panics"),
        "{report}"
    );
    factory.assert_each_torn_down_once();
}

#[test]
fn a_failing_teardown_fails_the_case() {
    let factory = Checked {
        failing_teardown: true,
        ..Checked::default()
    };
    let (result, report) = run_only(&factory, Property::RoundTrip);
    let Outcome::Failed { message, .. } = &result.outcome else {
        panic!("a failing teardown passed: {report}");
    };
    assert!(
        message.contains("teardown after the case failed")
            && message.contains("the key prefix would not go"),
        "{message}"
    );
}
