//! Tenant identifiers.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The tenant every row belongs to: 1–64 characters of `[A-Za-z0-9._-]`, not made only
/// of dots (`.` and `..` would read as path components).
///
/// Validation happens on construction, so a `TenantId` in hand is always valid and
/// safe to embed in keys, paths and SQL settings. Cloning is a reference-count bump.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct TenantId(Arc<str>);

impl TenantId {
    /// The tenant used by the embedded default and the CLI: `default`.
    pub const DEFAULT: &'static str = "default";

    /// Maximum length in characters.
    pub const MAX_LEN: usize = 64;

    /// Validates `s` and makes a tenant id of it.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the offending value when it is empty, longer than
    /// 64 characters, or contains a character outside `[A-Za-z0-9._-]`.
    pub fn new(s: &str) -> Result<Self> {
        if s.is_empty() {
            return Err(Error::invalid("tenant id is empty"));
        }
        if s.len() > Self::MAX_LEN {
            return Err(Error::invalid(format!(
                "tenant id {:?}… is {} characters long; at most {} are allowed",
                s.chars().take(16).collect::<String>(),
                s.chars().count(),
                Self::MAX_LEN
            )));
        }
        if s.bytes().all(|b| b == b'.') {
            return Err(Error::invalid(format!(
                "tenant id {s:?} is made only of dots; it would read as a path component"
            )));
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        {
            return Err(Error::invalid(format!(
                "tenant id {s:?} contains {c:?}; only A-Z a-z 0-9 . _ - are allowed"
            )));
        }
        Ok(Self(Arc::from(s)))
    }

    /// The tenant `default`.
    pub fn default_tenant() -> Self {
        Self(Arc::from(Self::DEFAULT))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for TenantId {
    fn default() -> Self {
        Self::default_tenant()
    }
}

impl FromStr for TenantId {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

impl<'de> Deserialize<'de> for TenantId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::new(&s).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for TenantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TenantId({:?})", &*self.0)
    }
}

impl AsRef<str> for TenantId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_allowed_alphabet() {
        for ok in ["default", "a", "Team-1.prod_eu", &"x".repeat(64)] {
            assert_eq!(TenantId::new(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn rejects_hostile_or_malformed_ids_with_a_named_reason() {
        let cases = [
            ("", "empty"),
            (&"x".repeat(65) as &str, "65 characters"),
            ("a/b", "'/'"),
            ("a b", "' '"),
            ("t'; DROP TABLE parts;--", "'\\''"),
            ("ä", "'ä'"),
            ("a\0", "'\\0'"),
            ("a:b", "':'"),
            (".", "only of dots"),
            ("..", "only of dots"),
        ];
        for (bad, needle) in cases {
            let err = TenantId::new(bad).unwrap_err().to_string();
            assert!(err.contains(needle), "{bad:?}: {err}");
        }
    }

    #[test]
    fn deserialize_validates() {
        assert!(serde_json::from_str::<TenantId>("\"ok\"").is_ok());
        assert!(serde_json::from_str::<TenantId>("\"no/slash\"").is_err());
    }
}
