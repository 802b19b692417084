//! What a confirmation is worth on Redis: the server answers a write once it has
//! applied it in memory, and it is on disk only as its `appendonly` / `appendfsync`
//! settings say. A confirmed boundary survives a power cut only when every master
//! appends each write to its AOF and syncs it before it answers (`appendonly yes`,
//! `appendfsync always`). The store checks this on connect, by default, and refuses a
//! server that would lose confirmed boundaries; `fsync=everysec` or `fsync=off` on the
//! URL accepts a weaker server knowingly.

use std::collections::HashMap;

use forge_core::{Error, Result};

use crate::conn::Conn;

/// The weakest server durability a connection accepts (`fsync=` on the URL).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fsync {
    /// `appendonly yes` and `appendfsync always` on every master: a confirmed write
    /// survives a power cut (the default).
    #[default]
    Always,
    /// `appendonly yes` and `appendfsync everysec` (or `always`): a power cut can take
    /// about the last second of confirmed writes, more while a sync stalls.
    Everysec,
    /// No check: a server without AOF loses everything since its last snapshot.
    Off,
}

impl Fsync {
    /// Parses the URL value: `always`, `everysec` or `off`.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "always" => Some(Self::Always),
            "everysec" => Some(Self::Everysec),
            "off" => Some(Self::Off),
            _ => None,
        }
    }

    /// The URL value.
    pub fn name(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::Everysec => "everysec",
            Self::Off => "off",
        }
    }

    /// Whether a server with these settings gives at least this durability.
    fn accepts(self, appendonly: &str, appendfsync: &str) -> bool {
        let aof = appendonly.eq_ignore_ascii_case("yes");
        match self {
            Self::Always => aof && appendfsync.eq_ignore_ascii_case("always"),
            Self::Everysec => {
                aof && ["always", "everysec"]
                    .iter()
                    .any(|p| appendfsync.eq_ignore_ascii_case(p))
            }
            Self::Off => true,
        }
    }
}

/// Checks that the server (every master of a cluster) gives `required`; `label` names
/// the server in errors.
///
/// # Errors
/// [`Error::Unsupported`] naming the server, its settings and the two ways out when it
/// syncs less than `required`, or when its settings cannot be read (`CONFIG GET`
/// refused); a backend error when the server cannot be reached.
pub(crate) async fn check(conn: &mut Conn, required: Fsync, label: &str) -> Result<()> {
    if required == Fsync::Off {
        return Ok(());
    }
    let masters = conn.masters().await?;
    let nodes: Vec<Option<&(String, u16)>> = if masters.is_empty() {
        vec![None]
    } else {
        masters.iter().map(Some).collect()
    };
    for node in nodes {
        let server = node.map_or_else(|| label.to_owned(), |(h, p)| format!("{h}:{p}"));
        let settings: HashMap<String, String> = match conn
            .on_node(node, redis::cmd("CONFIG").arg("GET").arg("append*"))
            .await
        {
            Ok(s) => s,
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) => {
                return Err(Error::Unsupported(format!(
                    "cannot tell whether redis server {server} syncs each write before it \
                     answers: CONFIG GET appendonly/appendfsync failed ({e}); allow CONFIG \
                     GET for this user, or open with fsync=off on the URL if the server's \
                     durability is known and managed elsewhere"
                )))
            }
        };
        let get = |k: &str| settings.get(k).map_or("(unset)", String::as_str);
        let (appendonly, appendfsync) = (get("appendonly"), get("appendfsync"));
        if !required.accepts(appendonly, appendfsync) {
            return Err(Error::Unsupported(format!(
                "redis server {server} runs appendonly {appendonly}, appendfsync \
                 {appendfsync}: it answers before a write is synced, so a confirmed \
                 boundary would not survive a power cut. Set `appendonly yes` and \
                 `appendfsync always` on the server (CONFIG SET, or redis.conf), or accept \
                 the loss with fsync=everysec (about the last second) or fsync=off on the \
                 URL (fsync={} is the default)",
                required.name()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_level_accepts_exactly_the_servers_that_sync_as_much() {
        let servers = [
            ("yes", "always"),
            ("yes", "everysec"),
            ("yes", "no"),
            ("no", "always"),
            ("no", "everysec"),
        ];
        let accepted = |f: Fsync| -> Vec<bool> {
            servers
                .iter()
                .map(|(aof, sync)| f.accepts(aof, sync))
                .collect()
        };
        assert_eq!(accepted(Fsync::Always), [true, false, false, false, false]);
        assert_eq!(accepted(Fsync::Everysec), [true, true, false, false, false]);
        assert_eq!(accepted(Fsync::Off), [true; 5]);
        assert!(Fsync::Always.accepts("YES", "Always"));
    }

    #[test]
    fn the_url_values_parse_and_name_back() {
        for f in [Fsync::Always, Fsync::Everysec, Fsync::Off] {
            assert_eq!(Fsync::parse(f.name()), Some(f));
        }
        assert_eq!(Fsync::parse("no"), None);
        assert_eq!(Fsync::default(), Fsync::Always);
    }
}
