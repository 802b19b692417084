//! `sqlite://` URLs and the options they carry.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use forge_core::{Error, Result};

/// When a commit reaches the disk (SQLite's `synchronous` in WAL mode).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Synchronous {
    /// `NORMAL` (opt-in, `synchronous=normal`): a commit survives a crash of the process
    /// at once, but reaches the disk only at the next checkpoint's sync of the WAL. A
    /// power loss can take every commit since then (the confirmed boundaries with them)
    /// and never corrupts the file. Fewer syncs, the same bytes written.
    Normal,
    /// `FULL` (the default): every commit syncs the WAL before it returns, so a
    /// confirmed boundary survives a power loss.
    #[default]
    Full,
}

impl Synchronous {
    /// The URL value: `normal` or `full`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Normal => "normal",
            Self::Full => "full",
        }
    }

    pub(crate) fn to_sqlx(self) -> sqlx::sqlite::SqliteSynchronous {
        match self {
            Self::Normal => sqlx::sqlite::SqliteSynchronous::Normal,
            Self::Full => sqlx::sqlite::SqliteSynchronous::Full,
        }
    }
}

impl fmt::Display for Synchronous {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Synchronous {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "normal" => Ok(Self::Normal),
            "full" => Ok(Self::Full),
            _ => Err(Error::invalid(format!(
                "sqlite option synchronous={s:?} is not known; use synchronous=normal or synchronous=full"
            ))),
        }
    }
}

/// What [`crate::SqliteStore::open`] verifies of an existing file before using it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Check {
    /// `PRAGMA quick_check`: the structure of every page of every b-tree (cells, free
    /// lists, records well-formed), reading the whole file once; then `PRAGMA
    /// foreign_key_check`: every message has its session and every part its message (a
    /// damaged key moves a row away from its parent). Not the agreement of indexes with
    /// their tables: a damaged index entry can hide its row from the reads that go
    /// through the index, without a word.
    Quick,
    /// `PRAGMA integrity_check` and `PRAGMA foreign_key_check` (the default): as
    /// `Quick`, and every index entry against its row. About twice `Quick`'s time (0.10
    /// s against 0.05 s on a 37 MB file, from the page cache).
    #[default]
    Full,
    /// No check: a damaged page is found when a read reaches it.
    Off,
}

impl Check {
    /// The URL value: `quick`, `full` or `off`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Quick => "quick",
            Self::Full => "full",
            Self::Off => "off",
        }
    }
}

impl FromStr for Check {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "quick" => Ok(Self::Quick),
            "full" => Ok(Self::Full),
            "off" => Ok(Self::Off),
            _ => Err(Error::invalid(format!(
                "sqlite option check={s:?} is not known; use check=quick, check=full or check=off"
            ))),
        }
    }
}

/// How a [`crate::SqliteStore`] is opened.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// The database file; created if missing.
    pub path: PathBuf,
    /// `synchronous` of the writer connection.
    pub synchronous: Synchronous,
    /// How long a connection waits for another process's lock before failing with a
    /// retryable error (`busy_timeout`). Default 5 s.
    pub busy_timeout: Duration,
    /// Connections of the reader pool. Default 4.
    pub readers: u32,
    /// Page size of a new file (an existing file keeps its own). Default
    /// [`DEFAULT_PAGE_SIZE`].
    pub page_size: u32,
    /// WAL size, in pages, at which a commit copies the WAL into the database
    /// (`wal_autocheckpoint`); 0 turns automatic checkpoints off. Default 1000
    /// (SQLite's). A page changed by many commits between two checkpoints is written
    /// to the database once, so a larger value writes less, for a larger WAL file and
    /// a longer recovery after a crash.
    pub wal_autocheckpoint: u32,
    /// What is verified of an existing file on open. Default [`Check::Full`].
    pub check: Check,
    /// Whether the full-text search index is kept (`search=on`, the default) or not
    /// (`search=off`: nothing is indexed and a search fails as unsupported). Opening
    /// with `on` a file without the index builds it from the rows; opening with `off` a
    /// file with one drops it. Every handle on a file should say the same: the last open
    /// decides.
    pub search: bool,
}

/// Page size of new SQLite files: 1 KiB.
///
/// Every commit writes each page it touches to the WAL and, at the checkpoint, again
/// to the database; boundary commits touch a few rows, so the page size sets their cost.
/// Measured on W1 (`forge-store bench`, one session, terminal commits; bytes SQLite
/// wrote): T = 21, before the final checkpoint: 4 KiB pages 13.9×, 2 KiB 8.7×,
/// 1 KiB 5.9×, 512 B 4.5×; T = 100 with it: 1 KiB 6.7×, 512 B 4.6×. Below 1 KiB the
/// gain shrinks at the block layer, which writes whole 4 KiB pages of the file, and
/// reads walk more pages; `page_size=512` is there for who wants the fewest bytes.
pub const DEFAULT_PAGE_SIZE: u32 = 1024;

/// `url` as an error may quote it: password hidden, at most 200 characters.
fn shown(url: &str) -> String {
    forge_core::url::quoted(url)
}

impl SqliteOptions {
    /// Default options for the file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            synchronous: Synchronous::default(),
            busy_timeout: Duration::from_secs(5),
            readers: 4,
            page_size: DEFAULT_PAGE_SIZE,
            wal_autocheckpoint: 1000,
            check: Check::default(),
            search: true,
        }
    }

    /// Parses `sqlite://PATH[?key=value&…]`.
    ///
    /// `PATH` is taken literally: `sqlite://forge.db` is relative to the working
    /// directory, `sqlite:///var/lib/forge.db` absolute. Keys: `synchronous`
    /// (`normal` | `full`), `busy_timeout_ms`, `readers`, `page_size` (new files only),
    /// `wal_autocheckpoint` (pages; 0 = off), `check` (`quick` | `full` | `off`, see
    /// [`Check`]), `search` (`on` | `off`, see [`SqliteOptions::search`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming what is wrong: another scheme, an empty path, an
    /// in-memory database (the writer and the readers are separate connections, which
    /// cannot share one), an unknown key or value, a key given twice.
    pub fn from_url(url: &str) -> Result<Self> {
        let rest = url.strip_prefix("sqlite://").ok_or_else(|| {
            Error::invalid(format!(
                "{} is not a sqlite URL; expected sqlite://PATH[?synchronous=normal|full]",
                shown(url)
            ))
        })?;
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        if path.is_empty() {
            return Err(Error::invalid(format!(
                "{} names no database file",
                shown(url)
            )));
        }
        if path == ":memory:" || path.starts_with("file:") {
            return Err(Error::invalid(format!(
                "{}: in-memory and URI databases are not supported; name a file",
                shown(url)
            )));
        }
        let mut out = Self::new(path);
        let mut seen: Vec<&str> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| {
                Error::invalid(format!(
                    "sqlite option {pair:?} has no value; expected key=value, e.g. synchronous=full"
                ))
            })?;
            if seen.contains(&key) {
                return Err(Error::invalid(format!(
                    "sqlite option {key} is given twice"
                )));
            }
            seen.push(key);
            let number = |what: &str| {
                value.parse::<u64>().map_err(|_| {
                    Error::invalid(format!(
                        "sqlite option {what}={value:?} is not a whole number"
                    ))
                })
            };
            match key {
                "synchronous" => out.synchronous = value.parse()?,
                "check" => out.check = value.parse()?,
                "search" => out.search = crate::search::parse_switch("sqlite", value)?,
                "busy_timeout_ms" => {
                    out.busy_timeout = Duration::from_millis(number(key)?);
                }
                "page_size" => {
                    out.page_size = u32::try_from(number(key)?)
                        .ok()
                        .filter(|n| n.is_power_of_two() && (512..=65_536).contains(n))
                        .ok_or_else(|| {
                            Error::invalid(format!(
                                "sqlite option page_size={value} must be a power of two \
                                 from 512 to 65536"
                            ))
                        })?;
                }
                "wal_autocheckpoint" => {
                    out.wal_autocheckpoint = u32::try_from(number(key)?).map_err(|_| {
                        Error::invalid(format!(
                            "sqlite option wal_autocheckpoint={value} is too large"
                        ))
                    })?;
                }
                "readers" => {
                    out.readers = u32::try_from(number(key)?)
                        .ok()
                        .filter(|n| (1..=64).contains(n))
                        .ok_or_else(|| {
                            Error::invalid(format!("sqlite option readers={value} must be 1..=64"))
                        })?;
                }
                _ => {
                    return Err(Error::invalid(format!(
                        "sqlite option {key:?} is not known; the known options are \
                         synchronous, busy_timeout_ms, readers, page_size, wal_autocheckpoint, \
                         check and search"
                    )))
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths_and_options_and_names_what_is_wrong() {
        let o = SqliteOptions::from_url("sqlite://data/forge.db").unwrap();
        assert_eq!(o, SqliteOptions::new("data/forge.db"));
        assert_eq!(o.synchronous, Synchronous::Full);
        let o = SqliteOptions::from_url(
            "sqlite:///tmp/x.db?synchronous=NORMAL&busy_timeout_ms=250&readers=2",
        )
        .unwrap();
        assert_eq!(o.path, PathBuf::from("/tmp/x.db"));
        assert_eq!(o.synchronous, Synchronous::Normal);
        assert_eq!(o.busy_timeout, Duration::from_millis(250));
        assert_eq!(o.readers, 2);
        assert_eq!(o.wal_autocheckpoint, 1000);
        let o = SqliteOptions::from_url("sqlite://x?wal_autocheckpoint=0").unwrap();
        assert_eq!(o.wal_autocheckpoint, 0);
        assert_eq!(o.check, Check::Full);
        let o = SqliteOptions::from_url("sqlite://x?check=off").unwrap();
        assert_eq!(o.check, Check::Off);
        assert!(o.search);
        let o = SqliteOptions::from_url("sqlite://x?search=OFF").unwrap();
        assert!(!o.search);
        for (bad, needle) in [
            ("redb://x", "not a sqlite URL"),
            // Another backend's URL is quoted without its password.
            (
                "postgres://u:***@h/d",
                "\"postgres://u:***@h/d\" is not a sqlite URL",
            ),
            (
                "postgres://u:pw@h/d",
                "\"postgres://u:***@h/d\" is not a sqlite URL",
            ),
            ("sqlite://", "no database file"),
            ("sqlite://:memory:", "in-memory"),
            ("sqlite://x?synchronous=off", "\"off\""),
            ("sqlite://x?journal=wal", "\"journal\""),
            ("sqlite://x?synchronous", "no value"),
            ("sqlite://x?readers=0", "1..=64"),
            ("sqlite://x?wal_autocheckpoint=-1", "whole number"),
            ("sqlite://x?wal_autocheckpoint=99999999999", "too large"),
            ("sqlite://x?busy_timeout_ms=soon", "whole number"),
            ("sqlite://x?check=maybe", "check=quick"),
            (
                "sqlite://x?search=maybe",
                "search=\"maybe\" is not known; use search=on or search=off",
            ),
            ("sqlite://x?synchronous=full&synchronous=full", "twice"),
        ] {
            let err = SqliteOptions::from_url(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidInput(_)), "{bad}: {err:?}");
            assert!(err.to_string().contains(needle), "{bad}: {err}");
        }
        // A huge URL is quoted short.
        let huge = format!("redb://{}", "[".repeat(70_000));
        let err = SqliteOptions::from_url(&huge).unwrap_err().to_string();
        assert!(err.len() < 400, "{} bytes", err.len());
    }
}
