//! Key names. See the key layout in the crate docs.

use forge_core::{Error, MessageId, Result, SessionId, TenantId};

use crate::conn::Conn;
use crate::error::map;

/// How key names carry the tenant.
///
/// Every key of a tenant (its session index, every session's rows, its streams, its
/// projector leases) holds the tenant in one place. In the [`KeyLayout::Tagged`]
/// layout it is a Redis Cluster hash tag, `PREFIX:t:{TENANT}:…`, so all of a tenant's
/// keys live in one slot: an `apply` batch, a publish batch and a listing of one
/// tenant each touch one slot, which a cluster requires of a script or a transaction.
/// The price is that one tenant lives on one node (a very hot tenant cannot spread
/// across the cluster); tenants spread over the slots by the hash of their id.
///
/// The [`KeyLayout::Flat`] layout, `PREFIX:t:TENANT:…`, is what prefixes written
/// before hash tags use. It keeps working on a single server, unchanged; a cluster
/// refuses it.
///
/// Which one a prefix uses is recorded in the key `PREFIX:layout` (`1` flat, `2`
/// tagged), written on first connect: a prefix that already holds flat keys is marked
/// flat, any other is marked tagged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyLayout {
    /// `PREFIX:t:TENANT:…` (layout 1): single servers only.
    Flat,
    /// `PREFIX:t:{TENANT}:…` (layout 2): single servers and clusters.
    Tagged,
}

impl KeyLayout {
    fn marker(self) -> &'static str {
        match self {
            Self::Flat => "1",
            Self::Tagged => "2",
        }
    }

    /// Reads (or, on first use, decides and records) the layout of `prefix`, and
    /// whether the prefix is new: no marker was recorded and no flat key found, so it
    /// holds no row (every release that writes tagged keys records the marker first).
    pub(crate) async fn detect(conn: &mut Conn, prefix: &str) -> Result<(Self, bool)> {
        let key = format!("{prefix}:layout");
        let parse = |v: &str| match v {
            "1" => Ok(Self::Flat),
            "2" => Ok(Self::Tagged),
            other => Err(Error::invalid(format!(
                "{key} is {other:?}; forge-store knows key layouts 1 and 2 (a newer \
                 forge-store wrote it?)"
            ))),
        };
        let found: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(conn)
            .await
            .map_err(map)?;
        if let Some(v) = found {
            return Ok((parse(&v)?, false));
        }
        let guess = if !conn.is_cluster() && has_flat_keys(conn, prefix).await? {
            Self::Flat
        } else {
            Self::Tagged
        };
        // Two processes deciding at once agree on what the first one recorded.
        let () = redis::cmd("SET")
            .arg(&key)
            .arg(guess.marker())
            .arg("NX")
            .query_async(conn)
            .await
            .map_err(map)?;
        let recorded: Option<String> = redis::cmd("GET")
            .arg(&key)
            .query_async(conn)
            .await
            .map_err(map)?;
        let layout = recorded.map_or(Ok(guess), |v| parse(&v))?;
        Ok((layout, guess == Self::Tagged))
    }
}

/// Whether a single server holds keys of the flat layout under `prefix` (one `SCAN`
/// pass at most, on the first connect of a prefix).
async fn has_flat_keys(conn: &mut Conn, prefix: &str) -> Result<bool> {
    let pattern = format!("{prefix}:t:[^{{]*");
    let mut cursor: u64 = 0;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .map_err(map)?;
        if !keys.is_empty() {
            return Ok(true);
        }
        if next == 0 {
            return Ok(false);
        }
        cursor = next;
    }
}

/// The work shard of `session` among `shards`: FNV-1a of the id's bytes, modulo.
pub fn shard_of(session: &SessionId, shards: usize) -> usize {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in session.as_str().bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % shards.max(1) as u64) as usize
}

/// Builds every key of the backend under one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
    layout: KeyLayout,
}

/// Lowercase hex of the bytes of `s`: only `[0-9a-f]`, injective.
pub(crate) fn hex(s: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(s.len() * 2);
    for b in s.bytes() {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Inverse of [`hex`].
pub(crate) fn unhex(s: &str) -> Option<String> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    String::from_utf8(bytes).ok()
}

impl Keys {
    /// Keys under `prefix`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when the prefix is empty or has a character outside
    /// `[A-Za-z0-9._:-]` (glob characters would break cleanup by `SCAN MATCH`).
    pub fn new(prefix: &str) -> Result<Self> {
        Self::with_layout(prefix, KeyLayout::Tagged)
    }

    /// Keys under `prefix` in `layout`.
    ///
    /// # Errors
    /// As [`Keys::new`].
    pub fn with_layout(prefix: &str, layout: KeyLayout) -> Result<Self> {
        if prefix.is_empty() {
            return Err(Error::invalid("redis key prefix is empty"));
        }
        if let Some(c) = prefix
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | ':')))
        {
            return Err(Error::invalid(format!(
                "redis key prefix {prefix:?} contains {c:?}; only A-Z a-z 0-9 . _ - : are allowed"
            )));
        }
        Ok(Self {
            prefix: prefix.to_owned(),
            layout,
        })
    }

    /// The layout.
    pub fn layout(&self) -> KeyLayout {
        self.layout
    }

    /// `PREFIX:t:TENANT` or `PREFIX:t:{TENANT}`: the start of every key of a tenant.
    fn tenant(&self, tenant: &TenantId) -> String {
        match self.layout {
            KeyLayout::Flat => format!("{}:t:{tenant}", self.prefix),
            KeyLayout::Tagged => format!("{}:t:{{{tenant}}}", self.prefix),
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The `SCAN MATCH` pattern of every key under the prefix.
    pub fn pattern(&self) -> String {
        format!("{}:*", self.prefix)
    }

    /// The zset of a tenant's session ids.
    pub fn sessions(&self, tenant: &TenantId) -> String {
        format!("{}:sessions", self.tenant(tenant))
    }

    /// The common start of a session's row keys (`…:info`, `…:m`, …).
    pub fn session_base(&self, tenant: &TenantId, session: &SessionId) -> String {
        format!("{}:s:{}", self.tenant(tenant), hex(session.as_str()))
    }

    /// The hash of a session's fence record ([`forge_core::fence::Claim`]: fields
    /// `epoch`, `holder`, `expires`): `session_base` + `:fence`, in the session's slot
    /// (the apply script reads it there, next to the rows it writes) but not one of its
    /// rows, so deleting the session keeps it.
    pub fn fence(&self, tenant: &TenantId, session: &SessionId) -> String {
        format!("{}:fence", self.session_base(tenant, session))
    }

    /// The hash of a message's parts.
    pub fn parts(&self, base: &str, message: &MessageId) -> String {
        format!("{base}:p:{}", hex(message.as_str()))
    }

    /// The stream of a session's events.
    pub fn session_stream(&self, tenant: &TenantId, session: &SessionId) -> String {
        format!("{}:bus:{}", self.tenant(tenant), hex(session.as_str()))
    }

    /// The work stream of shard `shard` of `shards` of a tenant: the tenant stream
    /// itself when there is one shard.
    pub fn work_stream(&self, tenant: &TenantId, shard: usize, shards: usize) -> String {
        if shards <= 1 {
            self.tenant_stream(tenant)
        } else {
            format!("{}:work:{shards}:{shard}", self.tenant(tenant))
        }
    }

    /// The stream of all events of a tenant.
    pub fn tenant_stream(&self, tenant: &TenantId) -> String {
        format!("{}:bus", self.tenant(tenant))
    }

    /// The zset of a tenant's blobs ([`forge_core::blob`]): members are blob ids,
    /// scores when each was last written or refreshed (Unix ms).
    pub fn blobs(&self, tenant: &TenantId) -> String {
        format!("{}:blobs", self.tenant(tenant))
    }

    /// The string holding one blob's value, in the tenant's slot.
    pub fn blob(&self, tenant: &TenantId, id: &str) -> String {
        format!("{}:blob:{id}", self.tenant(tenant))
    }

    /// The string recording what the last store opened on the prefix did with the
    /// full-text index: `on` (every tenant indexed) or `off` (every index dropped).
    pub fn search_marker(&self) -> String {
        format!("{}:search", self.prefix)
    }

    /// The start of every key of a tenant's full-text index (`…:x`): `…:x:s` its state,
    /// `…:x:w:WORD` a word's postings, and so on (see the key layout in the crate docs).
    /// The scripts derive the same names from the tenant's session index key.
    pub fn index(&self, tenant: &TenantId) -> String {
        format!("{}:x", self.tenant(tenant))
    }

    /// The hash of the index's documents of a session's parts: part id → `DOC:LEN`, its
    /// document number and length in words.
    pub fn session_docs(&self, base: &str) -> String {
        format!("{base}:x")
    }

    /// The tenant whose key `key` is, when it is `PREFIX:t:TENANT…` + `suffix` in this
    /// layout (keys of nested prefixes and malformed names give `None`).
    pub(crate) fn tenant_of(&self, key: &str, suffix: &str) -> Option<TenantId> {
        let rest = key
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(":t:")?
            .strip_suffix(suffix)?;
        let name = match self.layout {
            KeyLayout::Flat => rest,
            KeyLayout::Tagged => rest.strip_prefix('{')?.strip_suffix('}')?,
        };
        TenantId::new(name).ok()
    }

    /// The dead-letter stream of a tenant's projector workers: what a target store
    /// refused and what was trimmed from a work stream before it was applied. In the
    /// tenant's slot, like every key of the tenant.
    pub fn dead_letters(&self, tenant: &TenantId) -> String {
        format!("{}:dead", self.tenant(tenant))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips_and_is_injective_on_separators() {
        for s in ["", "a", ":", "a:b", "é\u{0}x", "ses_1"] {
            assert_eq!(unhex(&hex(s)).as_deref(), Some(s));
        }
        let k = Keys::new("p").unwrap();
        let t = TenantId::new("t").unwrap();
        let a = k.session_base(&t, &"a:s:62".into());
        let b = k.session_base(&t, &"a".into());
        assert_ne!(a, b);
        assert!(!a.starts_with(&format!("{b}:")));
        assert!(Keys::new("a*").is_err());
        // Tagged: the tenant is the hash tag of every key of the tenant.
        assert_eq!(k.sessions(&t), "p:t:{t}:sessions");
        assert_eq!(k.tenant_stream(&t), "p:t:{t}:bus");
        assert!(a.starts_with("p:t:{t}:s:"));
        // apply.lua finds the fence record as `base .. ':fence'`.
        assert_eq!(k.fence(&t, &"a".into()), format!("{b}:fence"));
        let flat = Keys::with_layout("p", KeyLayout::Flat).unwrap();
        assert_eq!(flat.sessions(&t), "p:t:t:sessions");
        assert_eq!(flat.session_base(&t, &"a".into()), "p:t:t:s:61");
        assert_eq!(k.dead_letters(&t), "p:t:{t}:dead");
        assert_eq!(flat.dead_letters(&t), "p:t:t:dead");
        assert_eq!(flat.fence(&t, &"a".into()), "p:t:t:s:61:fence");
        assert!(Keys::new("").is_err());
        // The index keys: the scripts build `x:…` names from the session index key.
        assert_eq!(k.index(&t), "p:t:{t}:x");
        assert_eq!(k.sessions(&t).replace(":sessions", ":x"), k.index(&t));
        assert_eq!(k.session_docs(&b), format!("{b}:x"));
        assert_eq!(k.tenant_of("p:t:{t}:x:s", ":x:s"), Some(t.clone()));
        assert_eq!(
            k.tenant_of("p:t:{t}:sessions", ":sessions"),
            Some(t.clone())
        );
        assert_eq!(k.tenant_of("p:t:x:t:{t}:x:s", ":x:s"), None);
        assert_eq!(k.tenant_of("p:t:t:x:s", ":x:s"), None);
        assert_eq!(flat.tenant_of("p:t:t:x:s", ":x:s"), Some(t.clone()));
        assert_eq!(flat.index(&t), "p:t:t:x");
    }
}
