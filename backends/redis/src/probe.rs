//! Redis: `INFO persistence` and `MEMORY USAGE` of a store's keys: what the driver's
//! write probe reads.

use std::collections::BTreeMap;
use std::time::Duration;

use forge_core::driver::probe_error;
use forge_core::url::redact;
use forge_core::Result;

use crate::{Keys, RedisOptions, RedisStore};

/// What `INFO persistence` says about the server's disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RedisDisk {
    /// Whether the append-only file is on.
    pub aof_enabled: bool,
    /// Size of the AOF in bytes, when it is on.
    pub aof_current_size: Option<u64>,
    /// AOF rewrites since the server started (Redis 7+); a rewrite shrinks the file, so
    /// AOF growth is meaningful only while this stays put.
    pub aof_rewrites: Option<u64>,
    /// Whether an AOF rewrite is running.
    pub aof_rewrite_in_progress: bool,
    /// Writes since the last RDB snapshot.
    pub rdb_changes_since_last_save: Option<u64>,
}

/// The server URL of a Redis URL as forge-store takes it (without `prefix`, `maxlen`).
fn redis_server(url: &str) -> Result<String> {
    Ok(RedisOptions::from_url(url)
        .map_err(|e| probe_error("redis", format!("parsing the Redis URL {}", redact(url)), e))?
        .server)
}

async fn redis_connect(url: &str) -> Result<redis::aio::MultiplexedConnection> {
    let server = redis_server(url)?;
    let client = redis::Client::open(server.as_str())
        .map_err(|e| probe_error("redis", format!("parsing the Redis URL {}", redact(url)), e))?;
    // A SCAN + MEMORY USAGE round over many keys can take longer than the default 500 ms.
    let config = redis::AsyncConnectionConfig::new()
        .set_response_timeout(Some(Duration::from_mins(1)))
        .set_connection_timeout(Some(Duration::from_secs(5)));
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| {
            probe_error(
                "redis",
                format!("connecting to Redis at {}", redact(url)),
                e,
            )
        })
}

/// The server's `appendfsync` policy (`always`, `everysec`, `no`), or `None` where
/// `CONFIG GET` is refused (managed servers often rename or disable it).
pub async fn redis_appendfsync(url: &str) -> Option<String> {
    let mut conn = redis_connect(url).await.ok()?;
    let reply: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("appendfsync")
        .query_async(&mut conn)
        .await
        .ok()?;
    reply.get(1).cloned()
}

/// Reads `INFO persistence`.
///
/// # Errors
/// When the server cannot be reached or the reply lacks `aof_enabled`.
pub async fn redis_persistence(url: &str) -> Result<RedisDisk> {
    let mut conn = redis_connect(url).await?;
    let info: String = redis::cmd("INFO")
        .arg("persistence")
        .query_async(&mut conn)
        .await
        .map_err(|e| probe_error("redis", "Redis INFO persistence", e))?;
    parse_persistence(&info)
}

fn parse_persistence(info: &str) -> Result<RedisDisk> {
    let fields: BTreeMap<&str, &str> = info
        .lines()
        .filter_map(|line| line.trim().split_once(':'))
        .collect();
    let number = |key: &str| -> Result<Option<u64>> {
        fields
            .get(key)
            .map(|v| {
                v.parse().map_err(|e| {
                    probe_error("redis", format!("Redis INFO {key}:{v} is not a number"), e)
                })
            })
            .transpose()
    };
    let aof_enabled = match fields.get("aof_enabled") {
        Some(&"1") => true,
        Some(&"0") => false,
        other => {
            return Err(probe_error(
                "redis",
                format!("Redis INFO persistence has aof_enabled {other:?}; expected 0 or 1"),
                "an unexpected reply",
            ))
        }
    };
    Ok(RedisDisk {
        aof_enabled,
        aof_current_size: if aof_enabled {
            number("aof_current_size")?
        } else {
            None
        },
        aof_rewrites: number("aof_rewrites")?,
        aof_rewrite_in_progress: fields.get("aof_rewrite_in_progress") == Some(&"1"),
        rdb_changes_since_last_save: number("rdb_changes_since_last_save")?,
    })
}

/// The sum of `MEMORY USAGE key SAMPLES 0` (every element of a collection counted) over
/// the keys `SCAN MATCH pattern` finds; keys deleted meanwhile count 0.
///
/// # Errors
/// When the server cannot be reached or a reply is not what these commands return.
pub async fn redis_memory_usage(url: &str, pattern: &str) -> Result<u64> {
    let mut conn = redis_connect(url).await?;
    let mut cursor = 0u64;
    let mut total = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .cursor_arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1_000)
            .query_async(&mut conn)
            .await
            .map_err(|e| probe_error("redis", format!("Redis SCAN MATCH {pattern}"), e))?;
        if !keys.is_empty() {
            let mut pipe = redis::pipe();
            for key in &keys {
                pipe.cmd("MEMORY")
                    .arg("USAGE")
                    .arg(key)
                    .arg("SAMPLES")
                    .arg(0);
            }
            let sizes: Vec<Option<u64>> = pipe.query_async(&mut conn).await.map_err(|e| {
                probe_error(
                    "redis",
                    format!("Redis MEMORY USAGE of keys matching {pattern}"),
                    e,
                )
            })?;
            total += sizes.into_iter().flatten().sum::<u64>();
        }
        if next == 0 {
            return Ok(total);
        }
        cursor = next;
    }
}

/// The `SCAN MATCH` pattern of every key `store` writes (`prefix:*`). A [`RedisBus`]
/// with the same prefix writes its streams under it too.
///
/// [`RedisBus`]: crate::RedisBus
pub fn redis_store_pattern(store: &RedisStore) -> String {
    store.keys().pattern()
}

/// The `SCAN MATCH` pattern of the keys a store opened with `url` writes (its `prefix`
/// parameter, or the default prefix).
///
/// # Errors
/// When `url` is not a Redis URL forge-store accepts.
pub fn redis_url_pattern(url: &str) -> Result<String> {
    let opts = RedisOptions::from_url(url)
        .map_err(|e| probe_error("redis", format!("parsing the Redis URL {}", redact(url)), e))?;
    Ok(Keys::new(&opts.prefix)?.pattern())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_redis_info_persistence() {
        let on = parse_persistence(
            "# Persistence\r\naof_enabled:1\r\naof_rewrite_in_progress:0\r\naof_rewrites:2\r\n\
             aof_current_size:1234\r\n",
        )
        .unwrap();
        assert_eq!(
            (on.aof_enabled, on.aof_current_size, on.aof_rewrites),
            (true, Some(1234), Some(2))
        );
        let off = parse_persistence("aof_enabled:0\r\nrdb_changes_since_last_save:7\r\n").unwrap();
        assert_eq!(
            (off.aof_current_size, off.rdb_changes_since_last_save),
            (None, Some(7))
        );
        assert!(parse_persistence("loading:0\r\n").is_err());
    }
}
