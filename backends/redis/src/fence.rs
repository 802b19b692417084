//! Fence records on Redis ([`forge_core::fence`]): one hash per session,
//! [`Keys::fence`](crate::Keys::fence), in the session's slot next to its rows but not
//! one of them (deleting the session keeps it, so epochs never go back).
//!
//! A claim and a release are each one Lua script that reads the record, decides and
//! writes it, so concurrent claims of a session, from any number of store handles or
//! processes, get distinct epochs; the apply script reads the record of every session
//! it writes, so a batch sees every claim that returned before it ran. The record is
//! written as rows are: the server's `appendfsync always`, checked on connect (see
//! [`crate::Fsync`]), puts a claim on disk before the server answers it.
//!
//! Inside the scripts epochs are Lua numbers (doubles), compared with `tonumber`, never
//! as strings; they are exact up to 2^53 ([`MAX_EPOCH`]), the last epoch a session is
//! granted here. An epoch above it travels as `-1`, which matches no record.

use forge_core::{Claim, ClaimMode, ClaimRequest, Error, Result, SessionId};
use redis::Script;

use crate::conn::Conn;
use crate::error::{map, BACKEND};

/// The last epoch granted: 2^53, the last integer a Lua number holds exactly.
pub(crate) const MAX_EPOCH: u64 = 1 << 53;

/// `epoch` as the scripts compare it: its decimal, or `-1` (no record holds it) above
/// [`MAX_EPOCH`], where a double would round it onto a neighbour.
pub(crate) fn epoch_arg(epoch: u64) -> String {
    if epoch <= MAX_EPOCH {
        epoch.to_string()
    } else {
        "-1".to_owned()
    }
}

/// A fence record as the scripts return it (`epoch`, `holder`, `expires`; all empty:
/// none), read from `key`.
///
/// # Errors
/// [`Error::Corrupted`] naming the key when a field is missing or not a number.
pub(crate) fn record(key: &str, epoch: &str, holder: &str, expires: &str) -> Result<Option<Claim>> {
    if epoch.is_empty() && holder.is_empty() && expires.is_empty() {
        return Ok(None);
    }
    let unreadable = || {
        format!(
            "fence record is unreadable: epoch {epoch:?}, holder {holder:?}, expires {expires:?}"
        )
    };
    if holder.is_empty() {
        return Err(Error::corrupted(key, unreadable()));
    }
    let epoch = epoch
        .parse()
        .map_err(|e| Error::corrupted_with(key, unreadable(), e))?;
    let expires_ms = expires
        .parse()
        .map_err(|e| Error::corrupted_with(key, unreadable(), e))?;
    Ok(Some(Claim {
        epoch,
        holder: holder.to_owned(),
        expires_ms,
    }))
}

/// The claim and release scripts.
#[derive(Clone)]
pub(crate) struct Fences {
    claim: Script,
    release: Script,
}

impl Fences {
    pub(crate) fn new() -> Self {
        Self {
            claim: Script::new(include_str!("fence_claim.lua")),
            release: Script::new(include_str!("fence_release.lua")),
        }
    }

    /// Claims `session`, whose record is `key` ([`forge_core::Store::claim`]).
    pub(crate) async fn claim(
        &self,
        conn: &mut Conn,
        key: &str,
        session: &SessionId,
        req: &ClaimRequest,
    ) -> Result<Claim> {
        req.validate()?;
        let expires_ms = req.now_ms.saturating_add(req.lease_ms);
        let (mode, renew) = match req.mode {
            ClaimMode::Free => ("free", String::new()),
            ClaimMode::TakeOver => ("takeover", String::new()),
            ClaimMode::Renew(e) => ("renew", epoch_arg(e)),
        };
        let reply: Vec<String> = self
            .claim
            .key(key)
            .arg(mode)
            .arg(&req.holder)
            .arg(req.now_ms)
            .arg(expires_ms)
            .arg(renew)
            .invoke_async(conn)
            .await
            .map_err(map)?;
        let [verdict, epoch, holder, expires] = reply.as_slice() else {
            return Err(unexpected("claim", &reply));
        };
        if verdict == "corrupt" {
            return Err(Error::corrupted(
                key,
                format!(
                    "fence record is unreadable: epoch {epoch:?}, holder {holder:?}, \
                     expires {expires:?}"
                ),
            ));
        }
        let current = record(key, epoch, holder, expires)?;
        match (verdict.as_str(), current) {
            ("ok", Some(granted)) => Ok(granted),
            ("held", Some(c)) => Err(Error::Held {
                session: session.to_string(),
                holder: c.holder,
                epoch: c.epoch,
                expires_ms: c.expires_ms,
            }),
            ("fenced", current) => {
                let asked = match req.mode {
                    ClaimMode::Renew(e) => Some(e),
                    ClaimMode::Free | ClaimMode::TakeOver => None,
                };
                Err(Error::fenced(session, asked, current.as_ref()))
            }
            ("exhausted", Some(c)) => Err(Error::invalid(format!(
                "session {session} has used every epoch: it holds epoch {}, and {MAX_EPOCH} \
                 (2^53) is the last one the Redis backend grants",
                c.epoch
            ))),
            _ => Err(unexpected("claim", &reply)),
        }
    }

    /// Ends the lease of the claim with `epoch` of the record `key`, if it is current
    /// ([`forge_core::Store::release`]).
    pub(crate) async fn release(&self, conn: &mut Conn, key: &str, epoch: u64) -> Result<()> {
        let _released: i64 = self
            .release
            .key(key)
            .arg(epoch_arg(epoch))
            .invoke_async(conn)
            .await
            .map_err(map)?;
        Ok(())
    }
}

/// The record `key`, or `None` ([`forge_core::Store::claimed`]).
pub(crate) async fn claimed(conn: &mut Conn, key: &str) -> Result<Option<Claim>> {
    let (epoch, holder, expires): (Option<String>, Option<String>, Option<String>) =
        redis::cmd("HMGET")
            .arg(key)
            .arg("epoch")
            .arg("holder")
            .arg("expires")
            .query_async(conn)
            .await
            .map_err(map)?;
    record(
        key,
        epoch.as_deref().unwrap_or_default(),
        holder.as_deref().unwrap_or_default(),
        expires.as_deref().unwrap_or_default(),
    )
}

/// A backend error for a script reply the backend does not know.
pub(crate) fn unexpected(script: &str, reply: &[String]) -> Error {
    Error::backend(
        BACKEND,
        false,
        format!("unexpected {script} script reply {reply:?}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_core::ErrorKind;

    #[test]
    fn records_parse_and_unreadable_ones_are_corrupted() {
        assert_eq!(record("k", "", "", "").unwrap(), None);
        let c = record("k", "10", "a", "-5").unwrap().unwrap();
        assert_eq!((c.epoch, c.holder.as_str(), c.expires_ms), (10, "a", -5));
        for (e, h, x) in [
            ("1e+14", "a", "0"),
            ("1", "", "0"),
            ("1", "a", ""),
            ("", "a", "0"),
        ] {
            let err = record("the-key", e, h, x).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Corrupted, "{e:?} {h:?} {x:?}");
            assert!(err.to_string().contains("the-key"), "{err}");
        }
    }

    #[test]
    fn epochs_past_two_to_the_53_match_no_record() {
        assert_eq!(epoch_arg(9), "9");
        assert_eq!(epoch_arg(10), "10");
        assert_eq!(epoch_arg(MAX_EPOCH), "9007199254740992");
        assert_eq!(epoch_arg(MAX_EPOCH + 1), "-1");
        assert_eq!(epoch_arg(u64::MAX), "-1");
    }
}
