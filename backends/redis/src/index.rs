//! The full-text index's upkeep outside `apply`: what a part upsert hands the apply
//! script, building a tenant's index from its rows, dropping it, and what connecting
//! does with `search=on|off` (see the crate docs, "Full-text index").

use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;
use std::sync::LazyLock;
use std::time::Instant;

use forge_core::search::{document, words};
use forge_core::{Error, Part, Result, SessionId, TenantId};
use redis::Script;

use crate::error::map;
use crate::keys::hex;
use crate::store::{decode, RedisStore};

/// Builds a tenant's index a session at a time (`build.lua`).
static BUILD: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("search.lua"),
        include_str!("build.lua")
    ))
});

/// Drops a tenant's index (`drop.lua`).
static DROP: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("search.lua"),
        include_str!("drop.lua")
    ))
});

/// Documents a drop script removes per call (with every posting of their words).
const DROP_CHUNK: usize = 500;
/// Messages whose parts one pipelined read of the builder asks for.
const READ_CHUNK: usize = 256;
/// Reads of one session a build tries before giving up on a session written all along.
const SESSION_ATTEMPTS: usize = 50;
/// Passes over a tenant's sessions before its build gives up.
const TENANT_PASSES: usize = 10;

/// A posting's value holds the word's count in its low 20 bits and the document's
/// length above them, so the postings of a word are all a score needs. A document has
/// at most [`forge_core::search::MAX_DOCUMENT_BYTES`] / 2 = 32,768 words, so a count
/// fits.
const LEN_SHIFT: u32 = 20;

/// The value of the posting of a word occurring `tf` times in a document of `len`
/// words.
pub(crate) fn posting(tf: u32, len: u32) -> u64 {
    u64::from(len) << LEN_SHIFT | u64::from(tf)
}

/// The count and the document length in a posting's value.
#[allow(clippy::cast_possible_truncation)]
pub(crate) fn unposting(v: u64) -> (u32, u32) {
    ((v & ((1 << LEN_SHIFT) - 1)) as u32, (v >> LEN_SHIFT) as u32)
}

/// A part's document as the scripts take it: its length in words, its distinct words
/// and their posting values ([`posting`]), space-separated in the same order
/// (`search.lua`); `None` when the part has no document. The same words and counts as
/// [`forge_core::search::term_frequencies`], without a string per word (a word is
/// copied only when it had capitals to lowercase).
pub(crate) fn doc_args(part: &Part) -> Option<[Vec<u8>; 3]> {
    let doc = document(part)?;
    let mut counts: HashMap<Cow<'_, str>, u32> = HashMap::new();
    let mut len = 0u32;
    for w in words(&doc) {
        len = len.saturating_add(1);
        let n = counts.entry(w).or_insert(0);
        *n = n.saturating_add(1);
    }
    let mut list = Vec::with_capacity(doc.len().min(counts.len() * 12));
    let mut values = Vec::with_capacity(counts.len() * 9);
    for (i, (w, &n)) in counts.iter().enumerate() {
        if i > 0 {
            list.push(b' ');
            values.push(b' ');
        }
        list.extend_from_slice(w.as_bytes());
        let _ = write!(values, "{}", posting(n, len));
    }
    Some([len.to_string().into_bytes(), list, values])
}

/// What a store did to one tenant's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Built {
    /// The index is ready.
    Ready,
    /// A store opened with `search=off` dropped it meanwhile.
    Stopped,
}

impl RedisStore {
    /// Makes the prefix's indexes what `search=` asks for, once per change: with `on`,
    /// builds the index of every tenant lacking one; with `off`, drops every index.
    /// `PREFIX:search` records what was done last, so a store opening with the same
    /// setting does nothing; a new prefix has nothing to build.
    pub(crate) async fn setup_search(&self, fresh: bool) -> Result<()> {
        let marker = self.keys().search_marker();
        let want = if self.search_on() { "on" } else { "off" };
        let mut conn = self.connection();
        let recorded: Option<String> = redis::cmd("GET")
            .arg(&marker)
            .query_async(&mut conn)
            .await
            .map_err(map)?;
        if recorded.as_deref() == Some(want) {
            return Ok(());
        }
        if !fresh {
            let started = Instant::now();
            let mut tenants: BTreeSet<TenantId> = self.tenants_with(":x:s").await?;
            if self.search_on() {
                tenants.extend(self.tenants_with(":sessions").await?);
                for t in &tenants {
                    self.build_index(t).await?;
                }
                tracing::info!(
                    prefix = self.keys().prefix(),
                    tenants = tenants.len(),
                    ms = started.elapsed().as_millis(),
                    "search=on: the full-text index of every tenant is built"
                );
            } else {
                for t in &tenants {
                    self.drop_index(t).await?;
                }
                tracing::info!(
                    prefix = self.keys().prefix(),
                    tenants = tenants.len(),
                    ms = started.elapsed().as_millis(),
                    "search=off: every full-text index of the prefix is dropped"
                );
            }
        }
        let () = redis::cmd("SET")
            .arg(&marker)
            .arg(want)
            .query_async(&mut conn)
            .await
            .map_err(map)?;
        Ok(())
    }

    /// The tenants having a key `PREFIX:t:TENANT…` + `suffix` (a `SCAN` of every
    /// master).
    async fn tenants_with(&self, suffix: &str) -> Result<BTreeSet<TenantId>> {
        let pattern = format!("{}:t:*{suffix}", self.keys().prefix());
        Ok(self
            .scan_keys(&pattern)
            .await?
            .iter()
            .filter_map(|k| self.keys().tenant_of(k, suffix))
            .collect())
    }

    /// Builds `tenant`'s index from its rows, unless it is ready; resumes a build that
    /// stopped half-way. Safe with writers running: sessions are built one script each,
    /// writers keep the index of the sessions built and count changes to the others,
    /// and a session whose count moved since its rows were read is read again.
    pub(crate) async fn build_index(&self, tenant: &TenantId) -> Result<Built> {
        let started = Instant::now();
        loop {
            match self.build_step(tenant, "begin").await?.as_str() {
                "ready" => return Ok(Built::Ready),
                "building" => break,
                // 'off' with keys left by a drop that stopped: finish the drop first.
                "dirty" => {
                    if !self.drop_rest(tenant).await? {
                        return Ok(Built::Stopped);
                    }
                }
                other => return Err(unexpected("build begin", other)),
            }
        }
        let skey = self.keys().sessions(tenant);
        let index = self.keys().index(tenant);
        let mut read = 0usize;
        for _ in 0..TENANT_PASSES {
            let sessions: Vec<String> = redis::cmd("ZRANGE")
                .arg(&skey)
                .arg(0)
                .arg(-1)
                .query_async(&mut self.connection())
                .await
                .map_err(map)?;
            let mut built = Vec::with_capacity(sessions.len());
            for chunk in sessions.chunks(1000) {
                let flags: Vec<bool> = redis::cmd("SMISMEMBER")
                    .arg(format!("{index}:b"))
                    .arg(chunk)
                    .query_async(&mut self.connection())
                    .await
                    .map_err(map)?;
                built.extend(flags);
            }
            for (s, done) in sessions.iter().zip(built) {
                if done {
                    continue;
                }
                if !self
                    .build_session(tenant, &SessionId::from(s.as_str()))
                    .await?
                {
                    return Ok(Built::Stopped);
                }
                read += 1;
            }
            match self.build_step(tenant, "finish").await?.as_str() {
                "ready" => {
                    tracing::info!(
                        tenant = tenant.as_str(),
                        sessions = read,
                        ms = started.elapsed().as_millis(),
                        "full-text index built from the rows"
                    );
                    return Ok(Built::Ready);
                }
                "missing" => {}
                "stopped" => return Ok(Built::Stopped),
                other => return Err(unexpected("build finish", other)),
            }
        }
        Err(Error::conflict(format!(
            "the full-text index of tenant {tenant} was not complete after {TENANT_PASSES} \
             passes over its sessions (sessions written by a release without the index?)"
        )))
    }

    async fn build_step(&self, tenant: &TenantId, step: &str) -> Result<String> {
        let skey = self.keys().sessions(tenant);
        let index = self.keys().index(tenant);
        let tb = index.strip_suffix(":x").unwrap_or(&index);
        BUILD
            .key(&skey)
            .arg(step)
            .arg(tb)
            .arg(&skey)
            .invoke_async(&mut self.connection())
            .await
            .map_err(map)
    }

    /// Indexes one session from its rows; `false` when the build was stopped.
    async fn build_session(&self, tenant: &TenantId, session: &SessionId) -> Result<bool> {
        let skey = self.keys().sessions(tenant);
        let index = self.keys().index(tenant);
        let tb = index.strip_suffix(":x").unwrap_or(&index);
        let base = self.keys().session_base(tenant, session);
        for _ in 0..SESSION_ATTEMPTS {
            // The count first: a change after it, while the rows are read, moves it.
            let (count, mids): (Option<String>, Vec<String>) = redis::pipe()
                .hget(format!("{index}:c"), session.as_str())
                .zrange(format!("{base}:mi"), 0, -1)
                .query_async(&mut self.connection())
                .await
                .map_err(map)?;
            let mut args: Vec<Vec<u8>> = vec![
                b"session".to_vec(),
                tb.as_bytes().to_vec(),
                skey.as_bytes().to_vec(),
                base.as_bytes().to_vec(),
                session.as_str().as_bytes().to_vec(),
                count.unwrap_or_default().into_bytes(),
            ];
            for chunk in mids.chunks(READ_CHUNK) {
                let mut pipe = redis::pipe();
                for m in chunk {
                    pipe.hgetall(format!("{base}:p:{}", hex(m)));
                }
                let rows: Vec<Vec<(Vec<u8>, Vec<u8>)>> = pipe
                    .query_async(&mut self.connection())
                    .await
                    .map_err(map)?;
                for (mid, parts) in chunk.iter().zip(rows) {
                    for (pid, row) in parts {
                        let part: Part = decode(&row, "part")?;
                        if let Some([len, list, values]) = doc_args(&part) {
                            args.extend([mid.as_bytes().to_vec(), pid, len, list, values]);
                        }
                    }
                }
            }
            let mut call = BUILD.key(&skey);
            for a in &args {
                call.arg(a.as_slice());
            }
            let reply: String = call
                .invoke_async(&mut self.connection())
                .await
                .map_err(map)?;
            match reply.as_str() {
                "ok" => return Ok(true),
                "stopped" => return Ok(false),
                "changed" => {}
                other => return Err(unexpected("build session", other)),
            }
        }
        Err(Error::conflict(format!(
            "session {session} of tenant {tenant} changed during each of {SESSION_ATTEMPTS} \
             reads of its rows for the full-text index; open the store again to retry"
        )))
    }

    /// Drops `tenant`'s index: no writer keeps it from the first step on.
    pub(crate) async fn drop_index(&self, tenant: &TenantId) -> Result<()> {
        let skey = self.keys().sessions(tenant);
        let index = self.keys().index(tenant);
        let tb = index.strip_suffix(":x").unwrap_or(&index);
        let reply: String = DROP
            .key(&skey)
            .arg("off")
            .arg(tb)
            .invoke_async(&mut self.connection())
            .await
            .map_err(map)?;
        match reply.as_str() {
            "none" => Ok(()),
            "off" => {
                if !self.drop_rest(tenant).await? {
                    tracing::warn!(
                        tenant = tenant.as_str(),
                        "a store with search=on built the full-text index again while it \
                         was dropped"
                    );
                }
                Ok(())
            }
            other => Err(unexpected("drop", other)),
        }
    }

    /// Removes the keys of an index in state `off`; `false` when another store started
    /// building it meanwhile.
    async fn drop_rest(&self, tenant: &TenantId) -> Result<bool> {
        let skey = self.keys().sessions(tenant);
        let index = self.keys().index(tenant);
        let tb = index.strip_suffix(":x").unwrap_or(&index);
        loop {
            let reply: String = DROP
                .key(&skey)
                .arg("chunk")
                .arg(tb)
                .arg(DROP_CHUNK)
                .invoke_async(&mut self.connection())
                .await
                .map_err(map)?;
            match reply.as_str() {
                "more" => {}
                "done" => return Ok(true),
                "notoff" => return Ok(false),
                other => return Err(unexpected("drop", other)),
            }
        }
    }
}

fn unexpected(what: &str, reply: &str) -> Error {
    crate::fence::unexpected(what, &[reply.to_owned()])
}

#[cfg(test)]
mod tests {
    use super::*;
    use forge_core::search::term_frequencies;

    fn text_part(text: &str) -> Part {
        forge_testkit::user_message_with(&"ses_1".into(), "msg_1".into(), "prt_1".into(), text, 0).1
    }

    #[test]
    fn a_posting_holds_the_count_and_the_length() {
        for (tf, len) in [(1, 1), (3, 40), (32_768, 32_768), (0, 0)] {
            assert_eq!(unposting(posting(tf, len)), (tf, len));
        }
    }

    #[test]
    fn doc_args_hold_the_words_and_counts_of_term_frequencies() {
        for text in [
            "",
            "Fix src/main.rs: E0308 — ÉTÉ_été snake_case fix FIX",
            "a b a  c\nb a",
            &"word ".repeat(1000),
        ] {
            let part = text_part(text);
            let [len, list, values] = doc_args(&part).unwrap();
            let (want, want_len) = term_frequencies(text);
            assert_eq!(len, want_len.to_string().into_bytes());
            let list = String::from_utf8(list).unwrap();
            let values = String::from_utf8(values).unwrap();
            let got: std::collections::BTreeMap<String, u32> = list
                .split(' ')
                .filter(|w| !w.is_empty())
                .zip(values.split(' ').map(|v| unposting(v.parse().unwrap())))
                .map(|(w, (n, len))| {
                    assert_eq!(len, want_len);
                    (w.to_owned(), n)
                })
                .collect();
            assert_eq!(got, want, "{text:?}");
        }
    }
}
