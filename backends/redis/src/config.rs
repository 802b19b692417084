//! Connection URL and options.

use std::time::Duration;

use forge_core::{Error, Result, RetryPolicy};

use crate::conn::Conn;
use crate::durability::{self, Fsync};
use crate::keys::{KeyLayout, Keys};

/// Default key prefix.
pub const DEFAULT_PREFIX: &str = "forge";
/// Most work shards per tenant.
pub const MAX_SHARDS: usize = 1024;
/// Default approximate retention of each stream, in entries.
pub const DEFAULT_MAXLEN: usize = 100_000;

/// Options of a Redis backend, parsed from its URL. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisOptions {
    /// The server URL without forge's own query parameters, handed to the redis client.
    pub server: String,
    /// Every key starts with `prefix:`.
    pub prefix: String,
    /// Approximate (`MAXLEN ~`) retention of each session and tenant stream. A stream
    /// projector workers consume (the work streams, and the tenant stream when it is
    /// the work stream) is trimmed by it only while it has no consumer group; once a
    /// group exists, only below what every group acknowledged (see
    /// [`ProjectorWorker`](crate::ProjectorWorker)).
    pub maxlen: usize,
    /// Opt-in bound on each work stream (`work_maxlen=N`): publishing trims it to about
    /// N entries (the tenant stream, when it is the work stream, to about
    /// `max(maxlen, N)`) even when consumer groups have not acknowledged them. What
    /// goes before a worker applied it is recorded in the dead-letter stream. `None`
    /// (the default): work streams are trimmed only below what every group acknowledged.
    pub work_maxlen: Option<usize>,
    /// Work shards per tenant (`shards=K`, default 1): with K > 1 the bus also writes
    /// each sync event (not deltas) to one of K work streams of its tenant, chosen by
    /// the session id,
    /// and up to K projector workers of one consumer group share the tenant, one per
    /// shard at a time. Every bus and worker of a prefix must use the same K (it is
    /// recorded under `PREFIX:shards` and checked on connect).
    pub shards: usize,
    /// The weakest durability a server may have (`fsync=always|everysec|off`, default
    /// `always`): checked on connect against every master's `appendonly` and
    /// `appendfsync`, so that a confirmed boundary survives a power cut unless a weaker
    /// server is accepted here knowingly.
    pub fsync: Fsync,
    /// How long a deleted session's event stream stays after its `session.deleted` is
    /// published, for subscribers to read it (`deleted_stream_ttl_ms=N`, default one
    /// hour); then it expires with the session's other keys gone.
    pub deleted_stream_ttl: Duration,
    /// Whether the store keeps a full-text index (`search=on|off`, default `on`): with
    /// `on`, every part upsert is indexed in the script that writes it, and connecting
    /// builds the index of every tenant that lacks one; with `off`, nothing is indexed,
    /// connecting drops every tenant's index, and a search fails with
    /// [`Error::Unsupported`]. The state is recorded per tenant in Redis, so an index
    /// is never read stale (see the crate docs, "Full-text index").
    pub search: bool,
    /// Response timeout of ordinary (non-blocking) commands.
    pub response_timeout: Duration,
    /// How long one blocking `XREAD` of a subscription waits before asking again.
    pub block: Duration,
    /// How the bus's publishing task and the projector worker ride out a restart of
    /// the server (the store is wrapped by the facade's
    /// [`RetryStore`](forge_core::RetryStore)).
    pub retry: RetryPolicy,
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOptions")
            .field("server", &forge_core::url::redact(&self.server))
            .field("prefix", &self.prefix)
            .field("maxlen", &self.maxlen)
            .field("work_maxlen", &self.work_maxlen)
            .field("shards", &self.shards)
            .field("fsync", &self.fsync)
            .field("deleted_stream_ttl", &self.deleted_stream_ttl)
            .field("search", &self.search)
            .field("response_timeout", &self.response_timeout)
            .field("block", &self.block)
            .field("retry", &self.retry)
            .finish()
    }
}

/// `url` as an error may quote it: password hidden, at most 200 characters.
fn shown(url: &str) -> String {
    forge_core::url::quoted(url)
}

impl RedisOptions {
    /// Parses `redis://host:port[/db][?prefix=…&maxlen=…&shards=…&work_maxlen=…&fsync=…&search=…]`.
    ///
    /// Other query parameters (e.g. `protocol`) are passed on to the redis client.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a URL that is not `redis://` / `rediss://` /
    /// `redis+unix://`, a bad prefix, a `maxlen`, `work_maxlen` or `shards` that is not
    /// a positive number (`shards` at most 1024), an `fsync` that is not
    /// `always`, `everysec` or `off`, or a `search` that is not `on` or `off`.
    pub fn from_url(url: &str) -> Result<Self> {
        if !["redis://", "rediss://", "redis+unix://", "unix://"]
            .iter()
            .any(|s| url.starts_with(s))
        {
            return Err(Error::invalid(format!(
                "not a redis URL: {} (expected redis://host:port[/db][?prefix=…&maxlen=…])",
                shown(url)
            )));
        }
        let (base, query) = url.split_once('?').unwrap_or((url, ""));
        let mut opts = Self {
            server: base.to_owned(),
            prefix: DEFAULT_PREFIX.to_owned(),
            maxlen: DEFAULT_MAXLEN,
            work_maxlen: None,
            fsync: Fsync::default(),
            shards: 1,
            deleted_stream_ttl: Duration::from_hours(1),
            search: true,
            response_timeout: Duration::from_secs(10),
            block: Duration::from_secs(2),
            retry: RetryPolicy::default(),
        };
        let mut passed = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            match k {
                "prefix" => v.clone_into(&mut opts.prefix),
                "maxlen" => {
                    opts.maxlen = v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                        Error::invalid(format!(
                            "maxlen={v:?} in {} is not a positive number",
                            shown(url)
                        ))
                    })?;
                }
                "work_maxlen" => {
                    opts.work_maxlen =
                        Some(v.parse().ok().filter(|n| *n > 0).ok_or_else(|| {
                            Error::invalid(format!(
                                "work_maxlen={v:?} in {} is not a positive number",
                                shown(url)
                            ))
                        })?);
                }
                "fsync" => {
                    opts.fsync = Fsync::parse(v).ok_or_else(|| {
                        Error::invalid(format!(
                            "fsync={v:?} in {} is not one of always, everysec, off",
                            shown(url)
                        ))
                    })?;
                }
                "search" => {
                    opts.search = match v {
                        "on" => true,
                        "off" => false,
                        _ => {
                            return Err(Error::invalid(format!(
                                "search={v:?} in {} is not one of on, off",
                                shown(url)
                            )))
                        }
                    };
                }
                "shards" => {
                    opts.shards = v
                        .parse()
                        .ok()
                        .filter(|n| (1..=MAX_SHARDS).contains(n))
                        .ok_or_else(|| {
                            Error::invalid(format!(
                                "shards={v:?} in {} is not a number from 1 to {MAX_SHARDS}",
                                shown(url)
                            ))
                        })?;
                }
                "deleted_stream_ttl_ms" => {
                    opts.deleted_stream_ttl = v
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .map(Duration::from_millis)
                        .ok_or_else(|| {
                            Error::invalid(format!(
                                "deleted_stream_ttl_ms={v:?} in {} is not a positive number",
                                shown(url)
                            ))
                        })?;
                }
                _ => passed.push(pair),
            }
        }
        Keys::new(&opts.prefix)?;
        if !passed.is_empty() {
            opts.server = format!("{base}?{}", passed.join("&"));
        }
        Ok(opts)
    }

    /// These options with `retry`.
    #[must_use]
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// Checks that the prefix is set up for [`RedisOptions::shards`] work shards (and
    /// records it when nothing is recorded yet).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming both counts when another K is recorded.
    pub(crate) async fn check_shards(&self, conn: &mut Conn) -> Result<()> {
        let key = format!("{}:shards", self.prefix);
        let () = redis::cmd("SET")
            .arg(&key)
            .arg(self.shards)
            .arg("NX")
            .query_async(&mut *conn)
            .await
            .map_err(crate::error::map)?;
        let recorded: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(&mut *conn)
            .await
            .map_err(crate::error::map)?;
        match recorded.as_deref().map(str::parse::<usize>) {
            Some(Ok(k)) if k == self.shards => Ok(()),
            Some(Ok(k)) => Err(Error::invalid(format!(
                "prefix {:?} is set up for shards={k}, this process asks for shards={}; every \
                 bus and projector worker of a prefix must use the same count",
                self.prefix, self.shards
            ))),
            _ => Err(Error::invalid(format!(
                "{key} holds {recorded:?}, not a shard count"
            ))),
        }
    }

    /// `server HOST:PORT`, for errors (never the password).
    pub fn server_label(&self) -> String {
        forge_core::url::server_label(&self.server)
    }

    pub(crate) fn client(&self) -> Result<redis::Client> {
        redis::Client::open(self.server.as_str())
            .map_err(|e| Error::InvalidInput(format!("bad redis URL {:?}: {e}", self.server)))
    }

    /// Connects: to a Redis Cluster when the server says it is one (`INFO cluster`),
    /// else to the single server; then finds the key layout of the prefix (see
    /// [`KeyLayout`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a database number other than 0 on a cluster, or a
    /// prefix in the [`KeyLayout::Flat`] layout on a cluster; [`Error::Backend`] when
    /// the server fails.
    pub(crate) async fn connect(&self) -> Result<(Conn, Keys)> {
        let (conn, keys, _) = self.open().await?;
        Ok((conn, keys))
    }

    /// [`RedisOptions::connect`], also telling whether the prefix is new (see
    /// [`KeyLayout::detect`]).
    pub(crate) async fn open(&self) -> Result<(Conn, Keys, bool)> {
        let config = redis::aio::ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.response_timeout))
            .set_connection_timeout(Some(Duration::from_secs(5)))
            .set_number_of_retries(2);
        let client = self.client()?;
        let db = client.get_connection_info().redis_settings().db();
        let only_db0 = || {
            Error::invalid(format!(
                "{} is a Redis Cluster, which has only database 0; remove the /{db} from the URL",
                self.server_label()
            ))
        };
        let mut single = match client.get_connection_manager_with_config(config).await {
            Ok(c) => c,
            // The connection selects the database first, which a cluster node refuses.
            Err(e) if db != 0 && e.to_string().contains("cluster mode") => return Err(only_db0()),
            Err(e) => return Err(crate::error::map(e)),
        };
        let info: String = redis::cmd("INFO")
            .arg("cluster")
            .query_async(&mut single)
            .await
            .map_err(crate::error::map)?;
        let mut conn = if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
            if db != 0 {
                return Err(only_db0());
            }
            Conn::Cluster(self.cluster(Some(self.response_timeout)).await?)
        } else {
            Conn::Single(single)
        };
        durability::check(&mut conn, self.fsync, &self.server_label()).await?;
        let (layout, fresh) = KeyLayout::detect(&mut conn, &self.prefix).await?;
        if conn.is_cluster() && layout == KeyLayout::Flat {
            return Err(Error::invalid(format!(
                "the keys under prefix {:?} use the flat layout of single servers, which a \
                 Redis Cluster cannot serve (a batch spans slots); use a new prefix on the \
                 cluster and import the sessions there",
                self.prefix
            )));
        }
        Ok((conn, Keys::with_layout(&self.prefix, layout)?, fresh))
    }

    async fn cluster(
        &self,
        response_timeout: Option<Duration>,
    ) -> Result<redis::cluster_async::ClusterConnection> {
        let mut builder = redis::cluster::ClusterClientBuilder::new(vec![self.server.as_str()])
            .connection_timeout(Duration::from_secs(5))
            .retries(3);
        if let Some(t) = response_timeout {
            builder = builder.response_timeout(t);
        }
        builder
            .build()
            .map_err(|e| {
                Error::InvalidInput(format!(
                    "bad redis cluster URL {}: {e}",
                    self.server_label()
                ))
            })?
            .get_async_connection()
            .await
            .map_err(crate::error::map)
    }

    /// A connection of its own for blocking reads, of the same kind as `like`: no
    /// response timeout, so a `BLOCK` longer than the default 500 ms is not cut off,
    /// and it never stalls shared traffic.
    pub(crate) async fn dedicated(&self, like: &Conn) -> Result<Conn> {
        if like.is_cluster() {
            return Ok(Conn::Cluster(self.cluster(None).await?));
        }
        let config = redis::AsyncConnectionConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(Duration::from_secs(5)));
        self.client()?
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map(Conn::Dedicated)
            .map_err(crate::error::map)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_prefix_and_maxlen_and_passes_the_rest_on() {
        let o =
            RedisOptions::from_url("redis://h:1/2?prefix=app:x&maxlen=5&protocol=resp3").unwrap();
        assert_eq!(o.server, "redis://h:1/2?protocol=resp3");
        assert_eq!(o.prefix, "app:x");
        assert_eq!(o.maxlen, 5);
        let d = RedisOptions::from_url("redis://h").unwrap();
        assert_eq!(
            (d.prefix.as_str(), d.maxlen),
            (DEFAULT_PREFIX, DEFAULT_MAXLEN)
        );
        assert!(RedisOptions::from_url("http://h").is_err());
        assert!(RedisOptions::from_url("redis://h?maxlen=0").is_err());
        assert_eq!(
            RedisOptions::from_url("redis://h?shards=6").unwrap().shards,
            6
        );
        assert_eq!(d.shards, 1);
        assert_eq!(d.work_maxlen, None);
        assert_eq!(
            RedisOptions::from_url("redis://h?work_maxlen=500")
                .unwrap()
                .work_maxlen,
            Some(500)
        );
        assert!(RedisOptions::from_url("redis://h?work_maxlen=0").is_err());
        for bad in ["0", "x", "1025"] {
            let err = RedisOptions::from_url(&format!("redis://h?shards={bad}")).unwrap_err();
            assert!(err.to_string().contains("shards="), "{err}");
        }
        assert!(RedisOptions::from_url("redis://h?prefix=a*b").is_err());
        assert!(d.search);
        assert!(
            !RedisOptions::from_url("redis://h?search=off")
                .unwrap()
                .search
        );
        assert!(
            RedisOptions::from_url("redis://h?search=on")
                .unwrap()
                .search
        );
        let err = RedisOptions::from_url("redis://h?search=yes").unwrap_err();
        assert!(
            err.to_string().contains("search=") && err.to_string().contains("on, off"),
            "{err}"
        );
    }

    #[test]
    fn errors_and_debug_output_hide_the_password() {
        // Found by fuzzing: both errors quoted the URL as given, password included, and
        // the derived `Debug` showed it too.
        for url in [
            "redis://:s3cretPw@h:6379?maxlen=x",
            "postgres://u:s3cretPw@h/db",
        ] {
            let err = RedisOptions::from_url(url).unwrap_err().to_string();
            assert!(!err.contains("s3cretPw") && err.contains("***"), "{err}");
        }
        let o = RedisOptions::from_url("redis://:s3cretPw@h:6379/0").unwrap();
        assert!(!format!("{o:?}").contains("s3cretPw"), "{o:?}");
        let long = format!("redis://h?maxlen=x&{}", "a".repeat(10_000));
        assert!(RedisOptions::from_url(&long).unwrap_err().to_string().len() < 400);
    }
}
