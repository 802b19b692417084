//! Options of a [`crate::RedbStore`] and their URL-query form.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use forge_core::{Error, Result};

/// When a committed batch reaches the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Every `apply` is a durable commit: when it returns, the batch survives a crash.
    /// The default.
    #[default]
    Immediate,
    /// Commits are not flushed: a crash loses them until a later durable commit (a clean
    /// close of the store makes them durable). Readers in this process see them at once.
    None,
}

impl Durability {
    /// The query-string value: `immediate` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Immediate => "immediate",
            Self::None => "none",
        }
    }

    pub(crate) fn to_redb(self) -> redb::Durability {
        match self {
            Self::Immediate => redb::Durability::Immediate,
            Self::None => redb::Durability::None,
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Durability {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "immediate" => Ok(Self::Immediate),
            "none" => Ok(Self::None),
            _ => Err(Error::invalid(format!(
                "redb option durability={s:?} is not known; use durability=immediate or durability=none"
            ))),
        }
    }
}

/// Journal bytes after which a checkpoint makes the journaled batches durable in the
/// database file and the journal starts over: 16 MiB.
pub const DEFAULT_CHECKPOINT_BYTES: u64 = 16 << 20;

/// How a [`crate::RedbStore`] is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RedbOptions {
    /// Durability of every `apply`.
    pub durability: Durability,
    /// With [`Durability::Immediate`]: make a batch durable by appending it to the
    /// write-ahead journal (`<file>-journal`, one `fdatasync` of about one page) and
    /// checkpointing the database every [`RedbOptions::checkpoint_bytes`] of journal
    /// (`true`, the default), or by a durable redb commit per batch (`false`: tens of
    /// kilobytes written per commit). Ignored with [`Durability::None`].
    pub journal: bool,
    /// Journal bytes between two checkpoints. A larger value writes fewer bytes in all
    /// and holds more uncheckpointed pages in memory; opening after a crash replays at
    /// most this much.
    pub checkpoint_bytes: u64,
    /// How long opening waits for another process that has the file open (retrying
    /// every 50 ms) before it fails with a retryable error naming the situation.
    /// Default: no wait.
    pub wait: Duration,
    /// Verify the checksum of every page of the committed trees when the file is
    /// opened (`true`, the default): a damaged file then fails to open with
    /// `Error::Corrupted`. It reads the whole file once per open; `false` skips it,
    /// and damage shows (if at all) when a read reaches it.
    pub check: bool,
    /// redb's page cache, in bytes (default [`DEFAULT_CACHE_BYTES`], redb's own
    /// default). The cache fills as the file grows, so this bounds the memory a
    /// long-running process spends on it.
    pub cache_bytes: usize,
    /// Keep the full-text search index (`true`, the default): every part upsert and
    /// removal maintains it in the transaction that writes the rows, and [`forge_core::Store::search`]
    /// answers from it. `false` keeps no index (a part write costs nothing more) and
    /// `search` fails with `Error::Unsupported`. The file records which: opening with
    /// `true` a file without the index builds it from the part rows, opening with
    /// `false` a file with one drops it.
    pub search: bool,
}

/// redb's own default page cache: 1 GiB.
pub const DEFAULT_CACHE_BYTES: usize = 1024 * 1024 * 1024;

impl Default for RedbOptions {
    fn default() -> Self {
        Self {
            durability: Durability::Immediate,
            journal: true,
            checkpoint_bytes: DEFAULT_CHECKPOINT_BYTES,
            wait: Duration::ZERO,
            check: true,
            cache_bytes: DEFAULT_CACHE_BYTES,
            search: true,
        }
    }
}

impl RedbOptions {
    /// Whether batches go through the journal.
    pub fn journaled(&self) -> bool {
        self.journal && self.durability == Durability::Immediate
    }
}

fn parse_bool(key: &str, value: &str) -> Result<bool> {
    match value.to_ascii_lowercase().as_str() {
        "on" | "true" | "1" => Ok(true),
        "off" | "false" | "0" => Ok(false),
        _ => Err(Error::invalid(format!(
            "redb option {key}={value:?} is not known; use {key}=on or {key}=off"
        ))),
    }
}

impl RedbOptions {
    /// Parses the query part of a `redb://` URL, e.g. `durability=none`.
    ///
    /// A leading `?` is allowed and an empty query gives the defaults. Keys are
    /// `durability` (`immediate` | `none`), `journal` (`on` | `off`),
    /// `checkpoint_bytes` (a positive number of bytes), `wait_ms` (see
    /// [`RedbOptions::wait`]), `check` (`on` | `off`, see [`RedbOptions::check`]),
    /// `cache_mib` (see [`RedbOptions::cache_bytes`]) and `search` (`on` | `off`, see
    /// [`RedbOptions::search`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the unknown key, the unknown value, a pair without
    /// `=`, or a key given twice.
    pub fn from_query(query: &str) -> Result<Self> {
        let mut out = Self::default();
        let mut seen: Vec<&str> = Vec::new();
        for pair in query.strip_prefix('?').unwrap_or(query).split('&') {
            if pair.is_empty() {
                continue;
            }
            let (key, value) = pair.split_once('=').ok_or_else(|| {
                Error::invalid(format!(
                    "redb option {pair:?} has no value; expected key=value, e.g. durability=none"
                ))
            })?;
            if seen.contains(&key) {
                return Err(Error::invalid(format!("redb option {key} is given twice")));
            }
            match key {
                "durability" => out.durability = value.parse()?,
                "journal" => out.journal = parse_bool(key, value)?,
                "checkpoint_bytes" => {
                    out.checkpoint_bytes = match value.parse::<u64>() {
                        Ok(n) if n > 0 => n,
                        _ => {
                            return Err(Error::invalid(format!(
                                "redb option checkpoint_bytes={value:?} is not a positive \
                                 number of bytes"
                            )))
                        }
                    }
                }
                "check" => out.check = parse_bool(key, value)?,
                "search" => out.search = parse_bool(key, value)?,
                "cache_mib" => {
                    out.cache_bytes = value
                        .parse::<usize>()
                        .ok()
                        .and_then(|mib| mib.checked_mul(1024 * 1024))
                        .ok_or_else(|| {
                            Error::invalid(format!(
                                "redb option cache_mib={value:?} is not a whole number of \
                                 MiB"
                            ))
                        })?;
                }
                "wait_ms" => {
                    out.wait = value
                        .parse::<u64>()
                        .map(Duration::from_millis)
                        .map_err(|_| {
                            Error::invalid(format!(
                                "redb option wait_ms={value:?} is not a whole number of \
                             milliseconds"
                            ))
                        })?;
                }
                _ => {
                    return Err(Error::invalid(format!(
                        "redb option {key:?} is not known; the known options are \
                         durability, journal, checkpoint_bytes, wait_ms, check, cache_mib \
                         and search"
                    )))
                }
            }
            seen.push(key);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_known_options_and_names_unknown_ones() {
        assert_eq!(RedbOptions::from_query("").unwrap(), RedbOptions::default());
        assert_eq!(RedbOptions::default().durability, Durability::Immediate);
        assert!(RedbOptions::default().journaled());
        let o = RedbOptions::from_query("journal=off&checkpoint_bytes=4096").unwrap();
        assert!(!o.journal && !o.journaled());
        assert_eq!(o.checkpoint_bytes, 4096);
        assert_eq!(
            RedbOptions::from_query("wait_ms=1500").unwrap().wait,
            Duration::from_millis(1500)
        );
        assert!(RedbOptions::default().check);
        assert!(!RedbOptions::from_query("check=off").unwrap().check);
        assert!(RedbOptions::default().search);
        assert!(!RedbOptions::from_query("search=off").unwrap().search);
        assert!(RedbOptions::from_query("search=ON").unwrap().search);
        assert_eq!(
            RedbOptions::from_query("cache_mib=64").unwrap().cache_bytes,
            64 << 20
        );
        assert!(!RedbOptions::from_query("durability=none")
            .unwrap()
            .journaled());
        assert_eq!(
            RedbOptions::from_query("?durability=none")
                .unwrap()
                .durability,
            Durability::None
        );
        assert_eq!(
            RedbOptions::from_query("durability=Immediate&")
                .unwrap()
                .durability,
            Durability::Immediate
        );
        for (bad, needle) in [
            ("durability=eventual", "\"eventual\""),
            ("cache=1", "\"cache\""),
            ("durability", "\"durability\""),
            ("durability=none&durability=none", "twice"),
            ("journal=maybe", "\"maybe\""),
            ("search=fast", "use search=on or search=off"),
            ("checkpoint_bytes=0", "positive"),
            ("checkpoint_bytes=-1", "positive"),
            ("wait_ms=soon", "milliseconds"),
            ("cache_mib=lots", "MiB"),
            ("cache_mib=99999999999999999", "MiB"),
        ] {
            let err = RedbOptions::from_query(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidInput(_)), "{bad}: {err:?}");
            assert!(err.to_string().contains(needle), "{bad}: {err}");
        }
    }
}
