//! Where each run writes: a fresh file (redb, SQLite), a fresh tenant in a schema made
//! for this test (Postgres), a fresh tenant under a key prefix made for this test
//! (Redis). Everything is removed when the value is dropped.

use std::path::Path;

use forge_store::sql::postgres::testing::TestSchema;

use crate::common::{delete_keys, postgres_url, redis_url, with_param};

/// A backend under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Redb,
    Sqlite,
    Postgres,
    Redis,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Self::Redb => "redb",
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::Redis => "redis",
        }
    }
}

/// A Postgres schema made for this test, dropped at the end, and the schemas of the
/// creation runs (each made by the process under test).
pub struct Pg {
    base: String,
    schema: Option<TestSchema>,
    made: std::sync::Mutex<Vec<TestSchema>>,
    rt: tokio::runtime::Runtime,
}

impl Pg {
    pub fn create(base: &str) -> Self {
        let rt = runtime();
        let schema = rt
            .block_on(TestSchema::create(base))
            .expect("create a test schema");
        Self {
            base: base.to_owned(),
            schema: Some(schema),
            made: std::sync::Mutex::default(),
            rt,
        }
    }

    /// The URL of a schema that does not exist yet, for run `run`: its writer creates it.
    pub fn fresh_url(&self, run: &str) -> String {
        let schema =
            TestSchema::to_be_made(&self.base, &run.to_lowercase()).expect("a test schema name");
        let url = schema.url();
        self.made.lock().expect("schemas").push(schema);
        url
    }

    pub fn url(&self) -> String {
        self.schema.as_ref().expect("schema").url()
    }
}

impl Drop for Pg {
    fn drop(&mut self) {
        for s in std::mem::take(&mut *self.made.lock().expect("schemas")) {
            if let Err(e) = self.rt.block_on(s.drop()) {
                eprintln!("note: could not drop a creation run's schema: {e}");
            }
        }
        if let Some(s) = self.schema.take() {
            if let Err(e) = self.rt.block_on(s.drop()) {
                eprintln!("note: could not drop the test schema: {e}");
            }
        }
    }
}

/// A Redis key prefix made for this test; its keys are deleted at the end.
pub struct RedisPrefix {
    pub base: String,
    pub prefix: String,
    /// The store's `fsync=` (the weakest server durability it accepts); `None`: the
    /// default, `always`.
    pub fsync: Option<&'static str>,
}

impl RedisPrefix {
    pub fn new(base: &str, name: &str) -> Self {
        Self {
            base: base.to_owned(),
            prefix: format!("forge-kill-{name}-{}-{}", std::process::id(), nanos()),
            fsync: None,
        }
    }

    /// The same, with `fsync=VALUE` on its URLs (a server that syncs less than every
    /// write is refused otherwise). Used by the power-cut campaign.
    #[allow(dead_code)]
    pub fn accepting(mut self, fsync: &'static str) -> Self {
        self.fsync = Some(fsync);
        self
    }

    /// The URL of this prefix (or of a sub-prefix `sub`).
    pub fn url(&self, sub: &str) -> String {
        let url = with_param(&self.base, "prefix", &format!("{}{sub}", self.prefix));
        match self.fsync {
            Some(v) => with_param(&url, "fsync", v),
            None => url,
        }
    }
}

impl Drop for RedisPrefix {
    fn drop(&mut self) {
        delete_keys(&self.base, &self.prefix);
    }
}

/// The store of one backend for the whole test: each run gets its own URL and tenant.
pub enum Place {
    File(Backend, tempfile::TempDir),
    /// A file store whose URLs carry `?QUERY` (e.g. `synchronous=normal`; the power-cut
    /// campaign's weaker settings).
    #[allow(dead_code)]
    FileWith(Backend, tempfile::TempDir, String),
    Postgres(Pg),
    Redis(RedisPrefix),
}

impl Place {
    /// `None` when the backend's server is not configured (said loudly).
    pub fn new(backend: Backend, what: &str) -> Option<Self> {
        Some(match backend {
            Backend::Redb | Backend::Sqlite => {
                Self::File(backend, tempfile::tempdir().expect("temp dir"))
            }
            Backend::Postgres => Self::Postgres(Pg::create(&postgres_url(what)?)),
            Backend::Redis => Self::Redis(RedisPrefix::new(&redis_url(what)?, "store")),
        })
    }

    /// The backend URL of run `run` (runs on servers share the URL and differ by tenant).
    pub fn url(&self, run: &str) -> String {
        match self {
            Self::File(Backend::Redb, dir) => format!("redb://{}", file(dir.path(), run, "redb")),
            Self::File(_, dir) => format!("sqlite://{}", file(dir.path(), run, "db")),
            Self::FileWith(Backend::Redb, dir, q) => {
                format!("redb://{}?{q}", file(dir.path(), run, "redb"))
            }
            Self::FileWith(_, dir, q) => format!("sqlite://{}?{q}", file(dir.path(), run, "db")),
            Self::Postgres(pg) => pg.url(),
            Self::Redis(r) => r.url(""),
        }
    }

    /// The URL of a store that does not exist yet, for run `run` (a new file, or a new
    /// Postgres schema); `None` on Redis, whose stores are key prefixes made on first
    /// write with nothing to set up.
    pub fn fresh_url(&self, run: &str) -> Option<String> {
        match self {
            Self::File(..) | Self::FileWith(..) => Some(self.url(run)),
            Self::Postgres(pg) => Some(pg.fresh_url(run)),
            Self::Redis(_) => None,
        }
    }
}

fn file(dir: &Path, run: &str, ext: &str) -> String {
    dir.join(format!("{run}.{ext}")).display().to_string()
}

pub use forge_testkit::runtime;

pub fn nanos() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}
