//! Key names. See the key layout in the crate docs.

use forge_core::{Error, MessageId, Result, SessionId, TenantId};

/// Builds every key of the backend under one prefix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keys {
    prefix: String,
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
        })
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
        format!("{}:t:{tenant}:sessions", self.prefix)
    }

    /// The common start of a session's row keys (`…:info`, `…:m`, …).
    pub fn session_base(&self, tenant: &TenantId, session: &SessionId) -> String {
        format!("{}:t:{tenant}:s:{}", self.prefix, hex(session.as_str()))
    }

    /// The hash of a message's parts.
    pub fn parts(&self, base: &str, message: &MessageId) -> String {
        format!("{base}:p:{}", hex(message.as_str()))
    }

    /// The stream of a session's events.
    pub fn session_stream(&self, tenant: &TenantId, session: &SessionId) -> String {
        format!("{}:t:{tenant}:bus:{}", self.prefix, hex(session.as_str()))
    }

    /// The stream of all events of a tenant.
    pub fn tenant_stream(&self, tenant: &TenantId) -> String {
        format!("{}:t:{tenant}:bus", self.prefix)
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
        assert!(Keys::new("").is_err());
    }
}
