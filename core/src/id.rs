//! Type-prefixed identifiers that sort in creation order.
//!
//! A generated id is `<prefix>_<16 hex digits><10 base62 characters>`. The hex part is
//! `unix_millis * 4096 + counter`, drawn from one process-wide atomic so that ids are
//! strictly ascending across threads, also within one millisecond (up to 4096 ids a
//! millisecond before the counter borrows from the next one). The random tail keeps ids
//! from different processes apart. Imported ids are kept verbatim and need not follow
//! this shape.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rand::Rng;

static LAST: AtomicU64 = AtomicU64::new(0);

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Milliseconds since the Unix epoch, from the system clock.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn next_stamp() -> u64 {
    let now = (now_ms().max(0) as u64).saturating_mul(4096);
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1);
        match LAST.compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// A new ascending id with the given type prefix (`ses`, `msg`, `prt`, …).
pub fn ascending(prefix: &str) -> String {
    use fmt::Write;
    let mut s = String::with_capacity(prefix.len() + 27);
    s.push_str(prefix);
    s.push('_');
    let _ = write!(s, "{:016x}", next_stamp());
    let mut rng = rand::rng();
    for _ in 0..10 {
        s.push(BASE62[rng.random_range(0..62)] as char);
    }
    s
}

/// The longest id accepted from outside, in bytes.
pub const MAX_EXTERNAL_ID_LEN: usize = 256;

/// The rules for ids that come from outside (replay files, imports): 1 to
/// [`MAX_EXTERNAL_ID_LEN`] bytes, and every character printable — no control
/// characters (NUL, newline, ESC, …) and no whitespace. Generated ids always pass.
/// (Tenants have stricter rules: see [`crate::TenantId`].)
///
/// # Errors
/// [`crate::Error::InvalidInput`] naming `what`, the rule broken and a short, escaped
/// prefix of the id.
pub fn check_external(what: &str, id: &str) -> crate::Result<()> {
    let shown = || {
        let prefix: String = id.chars().take(40).collect();
        let more = if prefix.len() < id.len() { "…" } else { "" };
        format!("{prefix:?}{more}")
    };
    if id.is_empty() {
        return Err(crate::Error::invalid(format!("{what} is empty")));
    }
    if id.len() > MAX_EXTERNAL_ID_LEN {
        return Err(crate::Error::invalid(format!(
            "{what} {} is {} bytes long; at most {MAX_EXTERNAL_ID_LEN} are allowed",
            shown(),
            id.len()
        )));
    }
    if let Some(c) = id.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Err(crate::Error::invalid(format!(
            "{what} {} holds {c:?}: ids must be printable, without whitespace",
            shown()
        )));
    }
    Ok(())
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        ///
        /// Cloning is a reference-count bump, so ids travel through the delta path
        /// without allocating.
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// The type prefix of generated ids.
            pub const PREFIX: &'static str = $prefix;

            /// A new id that sorts after every id generated before it in this process.
            pub fn generate() -> Self {
                Self(Arc::from(ascending($prefix)))
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Checks an id that came from outside (a replay file, an import): see
            /// [`check_external`].
            ///
            /// # Errors
            /// [`crate::Error::InvalidInput`] naming the rule broken.
            pub fn check(&self) -> crate::Result<()> {
                check_external(stringify!($name), &self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&*self.0, f)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(Arc::from(s))
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(Arc::from(s))
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }
    };
}

id_type!(
    /// Identifies a session (`ses_…`).
    SessionId,
    "ses"
);
id_type!(
    /// Identifies a message (`msg_…`).
    MessageId,
    "msg"
);
id_type!(
    /// Identifies a part (`prt_…`).
    PartId,
    "prt"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_ids_must_be_printable_and_bounded() {
        assert!(SessionId::from("ses_dc4a4a0b4ffeUXO9o2FN4OAa72")
            .check()
            .is_ok());
        assert!(PartId::generate().check().is_ok());
        for bad in ["", "a\0b", "msg\n1", "m 1", "\u{1b}[31m", &"x".repeat(257)] {
            let e = MessageId::from(bad).check().unwrap_err().to_string();
            assert!(e.contains("MessageId"), "{e}");
            assert!(e.len() < 200, "the message quotes a short prefix: {e}");
        }
    }

    #[test]
    fn ids_ascend_within_one_millisecond() {
        let ids: Vec<String> = (0..10_000).map(|_| ascending("msg")).collect();
        for w in ids.windows(2) {
            assert!(w[0] < w[1], "{} !< {}", w[0], w[1]);
        }
        assert!(ids[0].starts_with("msg_"));
        assert_eq!(ids[0].len(), 4 + 16 + 10);
    }

    #[test]
    fn ids_ascend_across_threads() {
        // Each thread's ids ascend, and all are distinct; the stamps are drawn from
        // one atomic so the union sorted by id equals the union sorted by stamp.
        let handles: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| (0..5_000).map(|_| ascending("prt")).collect::<Vec<_>>())
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            let ids = h.join().unwrap();
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
            all.extend(ids);
        }
        let n = all.len();
        let mut stamps: Vec<&str> = all.iter().map(|s| &s[4..20]).collect();
        stamps.sort_unstable();
        stamps.dedup();
        assert_eq!(stamps.len(), n, "two ids share a stamp");
    }

    #[test]
    fn generated_typed_ids_carry_their_prefix() {
        assert!(SessionId::generate().as_str().starts_with("ses_"));
        assert!(MessageId::generate().as_str().starts_with("msg_"));
        let a = PartId::generate();
        let b = PartId::generate();
        assert!(a < b);
    }
}
