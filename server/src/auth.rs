//! Bearer tokens mapped to tenants, kept as SHA-256 hashes.
//!
//! A token is a random string the operator hands to a client; the server keeps only
//! `sha256(token)` in hex, with the tenant it opens. The tokens file holds one entry per
//! line, `TENANT SHA256-HEX`; blank lines and lines starting with `#` are skipped. The
//! same entries, separated by commas or newlines, may come from the environment
//! (`FORGE_TOKENS`). [`new_token`] makes a token and its entry.

use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::path::Path;

use forge_store::TenantId;
use rand::RngCore;
use sha2::{Digest, Sha256};

/// Why a tokens file or variable was refused.
#[derive(Debug, thiserror::Error)]
#[error("{at}: {message}")]
pub struct TokensError {
    /// Where: `FILE line N` or `FORGE_TOKENS entry N`.
    pub at: String,
    /// What is wrong.
    pub message: String,
}

/// Which tenant each token hash opens.
#[derive(Clone, Default)]
pub struct Tokens {
    by_hash: HashMap<[u8; 32], TenantId>,
}

impl fmt::Debug for Tokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Hashes are not secrets, but there is no reason to print them.
        f.debug_struct("Tokens")
            .field("entries", &self.by_hash.len())
            .finish()
    }
}

impl Tokens {
    /// No token: every request is refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a token by its plain text (for tests and embedding programs).
    pub fn insert_plain(&mut self, token: &str, tenant: TenantId) {
        self.by_hash.insert(hash(token), tenant);
    }

    /// Reads a tokens file.
    ///
    /// # Errors
    /// The file cannot be read, or a line is not `TENANT SHA256-HEX`.
    pub fn from_file(path: &Path) -> Result<Self, TokensError> {
        let text = std::fs::read_to_string(path).map_err(|e| TokensError {
            at: path.display().to_string(),
            message: format!("cannot read the tokens file: {e}"),
        })?;
        let mut tokens = Self::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            tokens.add_entry(line).map_err(|message| TokensError {
                at: format!("{} line {}", path.display(), i + 1),
                message,
            })?;
        }
        Ok(tokens)
    }

    /// Reads entries separated by commas or newlines (the `FORGE_TOKENS` variable).
    ///
    /// # Errors
    /// An entry is not `TENANT SHA256-HEX` (or `TENANT:SHA256-HEX`).
    pub fn from_entries(text: &str, source: &str) -> Result<Self, TokensError> {
        let mut tokens = Self::new();
        for (i, entry) in text
            .split([',', '\n'])
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .enumerate()
        {
            tokens
                .add_entry(&entry.replacen(':', " ", 1))
                .map_err(|message| TokensError {
                    at: format!("{source} entry {}", i + 1),
                    message,
                })?;
        }
        Ok(tokens)
    }

    /// Adds the entries of `other`.
    pub fn extend(&mut self, other: Tokens) {
        self.by_hash.extend(other.by_hash);
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// The tenant `token` opens, if any.
    pub fn tenant(&self, token: &str) -> Option<&TenantId> {
        self.by_hash.get(&hash(token))
    }

    /// Every tenant a token opens, once each, in order.
    pub fn tenants(&self) -> Vec<TenantId> {
        let set: std::collections::BTreeSet<&TenantId> = self.by_hash.values().collect();
        set.into_iter().cloned().collect()
    }

    fn add_entry(&mut self, line: &str) -> Result<(), String> {
        let mut fields = line.split_whitespace();
        let (Some(tenant), Some(digest), None) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(
                "expected `TENANT SHA256-HEX` (make one with `forge-store token --tenant T`)"
                    .to_owned(),
            );
        };
        let tenant = TenantId::new(tenant).map_err(|e| format!("tenant: {e}"))?;
        let digest = digest.strip_prefix("sha256:").unwrap_or(digest);
        let bytes = decode_hex(digest).ok_or_else(|| {
            format!(
                "the hash is not 64 hex digits (the file keeps sha256(token), never the \
                 token): {}",
                forge_store::text::clip(digest)
            )
        })?;
        self.by_hash.insert(bytes, tenant);
        Ok(())
    }
}

/// SHA-256 of a token.
pub fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// SHA-256 of a token in lower-case hex, as the tokens file keeps it.
pub fn hash_hex(token: &str) -> String {
    hash(token)
        .iter()
        .fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

/// A new random token (`fst_` and 43 characters of base64url: 256 bits) and its
/// tokens-file entry for `tenant`.
pub fn new_token(tenant: &TenantId) -> (String, String) {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bytes = [0u8; 43];
    rand::rng().fill_bytes(&mut bytes);
    let token: String = std::iter::once("fst_")
        .map(str::to_owned)
        .chain(
            bytes
                .iter()
                .map(|b| char::from(ALPHABET[usize::from(b & 63)]).to_string()),
        )
        .collect();
    let entry = format!("{tenant} {}", hash_hex(&token));
    (token, entry)
}

fn decode_hex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_token_opens_its_tenant_through_its_entry_only() {
        let tenant = TenantId::new("acme").expect("valid");
        let (token, entry) = new_token(&tenant);
        assert!(token.starts_with("fst_") && token.len() == 47, "{token}");
        assert!(
            !entry.contains(&token),
            "the entry keeps the hash, not the token"
        );
        let tokens = Tokens::from_entries(&entry, "FORGE_TOKENS").expect("own entry parses");
        assert_eq!(tokens.tenant(&token), Some(&tenant));
        assert_eq!(tokens.tenant(&format!("{token}x")), None);
        assert_eq!(
            tokens.tenant(&hash_hex(&token)),
            None,
            "the hash is no token"
        );
        let (other, _) = new_token(&tenant);
        assert_ne!(token, other);
    }

    #[test]
    fn bad_entries_are_named() {
        let e = Tokens::from_entries("acme 1234", "FORGE_TOKENS").expect_err("short hash");
        assert!(
            e.to_string().starts_with("FORGE_TOKENS entry 1: the hash"),
            "{e}"
        );
        let good = hash_hex("t");
        let e = Tokens::from_entries(&format!("acme:{good},bad/tenant {good}"), "env")
            .expect_err("bad tenant");
        assert!(e.to_string().starts_with("env entry 2: tenant"), "{e}");
        let e = Tokens::from_entries("acme", "env").expect_err("no hash");
        assert!(e.to_string().contains("TENANT SHA256-HEX"), "{e}");
    }

    #[test]
    fn a_tokens_file_skips_comments_and_names_its_bad_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tokens");
        let a = hash_hex("token-a");
        std::fs::write(&path, format!("# tenants\n\nacme {a}\nbeta sha256:{a}x\n")).expect("write");
        let e = Tokens::from_file(&path).expect_err("line 4 is bad");
        assert!(e.to_string().contains("tokens line 4"), "{e}");
        std::fs::write(&path, format!("# tenants\n\nacme {a}\n")).expect("write");
        let tokens = Tokens::from_file(&path).expect("parses");
        assert_eq!(tokens.len(), 1);
        assert_eq!(tokens.tenant("token-a").map(TenantId::as_str), Some("acme"));
    }
}
