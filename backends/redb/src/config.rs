//! Options of a [`crate::RedbStore`] and their URL-query form.

use std::fmt;
use std::str::FromStr;

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

/// How a [`crate::RedbStore`] is opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RedbOptions {
    /// Durability of every commit.
    pub durability: Durability,
}

impl RedbOptions {
    /// Parses the query part of a `redb://` URL, e.g. `durability=none`.
    ///
    /// A leading `?` is allowed and an empty query gives the defaults. Keys are
    /// `durability` (`immediate` | `none`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the unknown key, the unknown value, a pair without
    /// `=`, or a key given twice.
    pub fn from_query(query: &str) -> Result<Self> {
        let mut out = Self::default();
        let mut seen_durability = false;
        for pair in query.strip_prefix('?').unwrap_or(query).split('&') {
            if pair.is_empty() {
                continue;
            }
            let (key, value) = pair.split_once('=').ok_or_else(|| {
                Error::invalid(format!(
                    "redb option {pair:?} has no value; expected key=value, e.g. durability=none"
                ))
            })?;
            match key {
                "durability" => {
                    if seen_durability {
                        return Err(Error::invalid("redb option durability is given twice"));
                    }
                    seen_durability = true;
                    out.durability = value.parse()?;
                }
                _ => {
                    return Err(Error::invalid(format!(
                        "redb option {key:?} is not known; the known option is durability"
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
    fn parses_known_options_and_names_unknown_ones() {
        assert_eq!(RedbOptions::from_query("").unwrap(), RedbOptions::default());
        assert_eq!(RedbOptions::default().durability, Durability::Immediate);
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
        ] {
            let err = RedbOptions::from_query(bad).unwrap_err();
            assert!(matches!(err, Error::InvalidInput(_)), "{bad}: {err:?}");
            assert!(err.to_string().contains(needle), "{bad}: {err}");
        }
    }
}
