//! A third-party forge-store backend: one JSON file per session.
//!
//! It exists to show (and to keep honest) the way a platform team plugs its own storage
//! into forge-store: implement [`forge_core::Store`], describe the backend once in a
//! [`forge_core::driver::Driver`] ([`DRIVER`]), install it (`forge_store::install`) so
//! `forge_store::open("jsonfiles://DIR")` opens it, and run the conformance suite on the
//! driver from `tests/conformance.rs` with one macro call.
//!
//! Layout: `<root>/t-<hex tenant>/s-<hex session>.json`, each file holding the session,
//! its seq, and its messages with their parts; beside it `s-<hex session>.fence`, the
//! session's fence record (its writers' claims), which outlives the session. Ids are
//! hex-encoded, so no id (`../x`, `a\0b`, `..`) can name another file; a session id
//! longer than fits one file name (120 bytes) is split into directories of 240 hex
//! digits each (`s-<hex>/<hex>/<hex>.json`), so every id of up to 256 bytes is stored.
//! Writes are serialized by a mutex; each batch is applied in memory first and only
//! written (temp file + rename) when every event of it succeeded, so a failing batch
//! leaves nothing behind and readers never see a half-written file. It is an example:
//! it does blocking file I/O on the async caller's thread and does not fsync.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use forge_core::fence::{self, Claim, ClaimRequest};
use forge_core::id::MAX_EXTERNAL_ID_LEN;
use forge_core::store::clamp_limit;
use forge_core::{
    Capabilities, Cursor, Envelope, Error, MessageId, MessageWithParts, OpenItems, Page, Part,
    PartId, Result, Session, SessionId, SessionState, Store, SyncEvent, TenantId,
};
use serde::{Deserialize, Serialize};

mod driver;

pub use driver::{JsonFilesDriver, DRIVER};

const NAME: &str = "json-files";
/// Hex digits of a session id per file or directory name (`s-` + 240 + `.fence` fits
/// the 255 bytes of a name).
const NAME_HEX: usize = 240;

#[derive(Clone, Debug, Serialize, Deserialize)]
struct SessionFile {
    info: Session,
    seq: u64,
    /// Each message with its parts, kept in part-id order as pages return them.
    messages: BTreeMap<MessageId, MessageWithParts>,
}

impl SessionFile {
    fn state(self) -> SessionState {
        SessionState {
            info: self.info,
            seq: self.seq,
        }
    }

    /// Upserts `part` under its message, which must exist. A part id is unique within
    /// its session: an upsert under another message moves the part (a scan of the
    /// session's messages; fine for a file a session).
    fn put_part(&mut self, part: &Part) -> Result<()> {
        if !self.messages.contains_key(&part.message_id) {
            return Err(Error::not_found("message", &part.message_id));
        }
        for m in self.messages.values_mut() {
            remove_part(m, &part.id);
        }
        let parts = &mut self
            .messages
            .get_mut(&part.message_id)
            .expect("checked above")
            .parts;
        let at = parts.partition_point(|p| p.id < part.id);
        parts.insert(at, part.clone());
        Ok(())
    }
}

fn remove_part(message: &mut MessageWithParts, id: &PartId) {
    message.parts.retain(|p| p.id != *id);
}

/// A page of `older` (a session's messages before the cursor, oldest first): its
/// newest `limit`, and the cursor of the page before them if there is one.
fn page(older: &[&MessageWithParts], limit: usize) -> Page {
    let start = older.len().saturating_sub(clamp_limit(limit));
    let messages: Vec<MessageWithParts> = older[start..].iter().map(|&m| m.clone()).collect();
    let next = (start > 0)
        .then(|| messages.first().map(|m| Cursor::before(m.info.id.clone())))
        .flatten();
    Page { messages, next }
}

/// A [`Store`] keeping one JSON file per session under a root directory.
#[derive(Debug)]
pub struct JsonFilesStore {
    root: PathBuf,
    writer: tokio::sync::Mutex<()>,
}

fn hex(s: &str) -> String {
    s.bytes()
        .fold(String::with_capacity(s.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

fn io_error(e: io::Error) -> Error {
    Error::backend(NAME, false, e)
}

impl JsonFilesStore {
    /// A store rooted at `root` (created if missing).
    ///
    /// # Errors
    /// [`Error::Backend`] if the directory cannot be created.
    pub fn open(root: impl AsRef<Path>) -> Result<Self> {
        std::fs::create_dir_all(root.as_ref()).map_err(io_error)?;
        Ok(Self {
            root: root.as_ref().to_path_buf(),
            writer: tokio::sync::Mutex::new(()),
        })
    }

    fn tenant_dir(&self, tenant: &TenantId) -> PathBuf {
        self.root.join(format!("t-{}", hex(tenant.as_str())))
    }

    fn path(&self, tenant: &TenantId, session: &SessionId) -> Result<PathBuf> {
        if session.as_str().len() > MAX_EXTERNAL_ID_LEN {
            return Err(Error::invalid(format!(
                "session id of {} bytes: ids are at most {MAX_EXTERNAL_ID_LEN}",
                session.as_str().len()
            )));
        }
        let hex = hex(session.as_str());
        let mut path = self.tenant_dir(tenant);
        let mut rest = hex.as_str();
        let mut name = String::from("s-");
        while rest.len() > NAME_HEX {
            let (head, tail) = rest.split_at(NAME_HEX);
            name.push_str(head);
            path.push(std::mem::take(&mut name));
            rest = tail;
        }
        name.push_str(rest);
        name.push_str(".json");
        path.push(name);
        Ok(path)
    }

    fn load(path: &Path) -> Result<Option<SessionFile>> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(e)),
        }
    }

    fn save(path: &Path, file: Option<&SessionFile>) -> Result<()> {
        let Some(file) = file else {
            return match std::fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_error(e)),
                _ => Ok(()),
            };
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_error)?;
        }
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec(file)?).map_err(io_error)?;
        std::fs::rename(&tmp, path).map_err(io_error)
    }

    /// The session's fence record: beside its file, named apart from session files.
    fn fence_path(&self, tenant: &TenantId, session: &SessionId) -> Result<PathBuf> {
        Ok(self.path(tenant, session)?.with_extension("fence"))
    }

    fn load_fence(path: &Path) -> Result<Option<Claim>> {
        match std::fs::read(path) {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes)?)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(e)),
        }
    }

    fn save_fence(path: &Path, claim: &Claim) -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io_error)?;
        }
        let tmp = path.with_extension("fence.tmp");
        std::fs::write(&tmp, serde_json::to_vec(claim)?).map_err(io_error)?;
        std::fs::rename(&tmp, path).map_err(io_error)
    }

    fn session_file(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<SessionFile>> {
        match self.path(tenant, session) {
            Ok(p) => Self::load(&p),
            // An id no store may hold was never stored.
            Err(_) => Ok(None),
        }
    }

    fn all_sessions(&self, tenant: &TenantId) -> Result<Vec<SessionFile>> {
        let mut out = Vec::new();
        Self::collect(&self.tenant_dir(tenant), &mut out)?;
        out.sort_by(|a, b| a.info.id.cmp(&b.info.id));
        Ok(out)
    }

    /// Every session file under `dir`, also in the directories of long ids.
    fn collect(dir: &Path, out: &mut Vec<SessionFile>) -> Result<()> {
        let entries = match std::fs::read_dir(dir) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error(e)),
        };
        for entry in entries {
            let entry = entry.map_err(io_error)?;
            let path = entry.path();
            if entry.file_type().map_err(io_error)?.is_dir() {
                Self::collect(&path, out)?;
            } else if path.extension().is_some_and(|e| e == "json") {
                out.extend(Self::load(&path)?);
            }
        }
        Ok(())
    }
}

/// Applies one event to the in-memory copy of its session file.
fn apply_one(file: &mut Option<SessionFile>, event: &SyncEvent) -> Result<()> {
    match event {
        SyncEvent::SessionUpdated { info } => match file {
            Some(f) => f.info = info.clone(),
            None => {
                *file = Some(SessionFile {
                    info: info.clone(),
                    seq: 0,
                    messages: BTreeMap::new(),
                });
            }
        },
        SyncEvent::SessionDeleted { .. } => *file = None,
        SyncEvent::MessageUpdated { info } => {
            let f = file
                .as_mut()
                .ok_or_else(|| Error::not_found("session", &info.session_id))?;
            f.messages
                .entry(info.id.clone())
                .and_modify(|m| m.info = info.clone())
                .or_insert_with(|| MessageWithParts {
                    info: info.clone(),
                    parts: Vec::new(),
                });
        }
        SyncEvent::MessageRemoved { message_id, .. } => {
            if let Some(f) = file {
                f.messages.remove(message_id);
            }
        }
        SyncEvent::PartUpdated { part } => file
            .as_mut()
            .ok_or_else(|| Error::not_found("message", &part.message_id))?
            .put_part(part)?,
        SyncEvent::PartRemoved {
            message_id,
            part_id,
            ..
        } => {
            if let Some(m) = file.as_mut().and_then(|f| f.messages.get_mut(message_id)) {
                remove_part(m, part_id);
            }
        }
    }
    Ok(())
}

#[async_trait]
impl Store for JsonFilesStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities::new(NAME)
    }

    async fn claim(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        request: &ClaimRequest,
    ) -> Result<Claim> {
        let _writer = self.writer.lock().await;
        let path = self.fence_path(tenant, session)?;
        let claim = fence::decide(session, Self::load_fence(&path)?.as_ref(), request)?;
        Self::save_fence(&path, &claim)?;
        Ok(claim)
    }

    async fn release(&self, tenant: &TenantId, session: &SessionId, epoch: u64) -> Result<()> {
        let _writer = self.writer.lock().await;
        let path = self.fence_path(tenant, session)?;
        if let Some(released) = fence::released(Self::load_fence(&path)?.as_ref(), epoch) {
            Self::save_fence(&path, &released)?;
        }
        Ok(())
    }

    async fn claimed(&self, tenant: &TenantId, session: &SessionId) -> Result<Option<Claim>> {
        match self.fence_path(tenant, session) {
            Ok(p) => Self::load_fence(&p),
            Err(_) => Ok(None),
        }
    }

    async fn apply(&self, batch: &[Envelope<SyncEvent>]) -> Result<()> {
        let _writer = self.writer.lock().await;
        let mut touched: BTreeMap<PathBuf, Option<SessionFile>> = BTreeMap::new();
        let mut fences: BTreeMap<PathBuf, Option<Claim>> = BTreeMap::new();
        for env in batch {
            if env.event.session_id() != &env.session_id {
                return Err(Error::invalid("event and envelope name different sessions"));
            }
            let path = self.path(&env.tenant, &env.session_id)?;
            if !touched.contains_key(&path) {
                // Under the writer lock, as claims are: none is granted until the batch
                // is written.
                let record = Self::load_fence(&self.fence_path(&env.tenant, &env.session_id)?)?;
                fences.insert(path.clone(), record);
                let loaded = Self::load(&path)?;
                touched.insert(path.clone(), loaded);
            }
            fence::check(
                &env.session_id,
                fences.get(&path).and_then(Option::as_ref),
                env.epoch,
            )?;
            let file = touched.entry(path).or_default();
            apply_one(file, &env.event)?;
            if let Some(f) = file {
                f.seq = f.seq.max(env.seq);
            }
        }
        for (path, file) in &touched {
            Self::save(path, file.as_ref())?;
        }
        Ok(())
    }

    async fn session(&self, tenant: &TenantId, id: &SessionId) -> Result<Option<SessionState>> {
        Ok(self.session_file(tenant, id)?.map(SessionFile::state))
    }

    async fn sessions(&self, tenant: &TenantId) -> Result<Vec<SessionState>> {
        Ok(self
            .all_sessions(tenant)?
            .into_iter()
            .map(SessionFile::state)
            .collect())
    }

    async fn message(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        id: &MessageId,
    ) -> Result<Option<MessageWithParts>> {
        Ok(self
            .session_file(tenant, session)?
            .and_then(|mut f| f.messages.remove(id)))
    }

    async fn messages(
        &self,
        tenant: &TenantId,
        session: &SessionId,
        before: Option<&Cursor>,
        limit: usize,
    ) -> Result<Page> {
        let Some(f) = self.session_file(tenant, session)? else {
            return Ok(page(&[], limit));
        };
        let older: Vec<&MessageWithParts> = match before {
            Some(c) => f
                .messages
                .range(..c.message_id().clone())
                .map(|(_, m)| m)
                .collect(),
            None => f.messages.values().collect(),
        };
        Ok(page(&older, limit))
    }

    async fn open_items(
        &self,
        tenant: &TenantId,
        session: Option<&SessionId>,
    ) -> Result<OpenItems> {
        let files = match session {
            Some(s) => self.session_file(tenant, s)?.into_iter().collect(),
            None => self.all_sessions(tenant)?,
        };
        let mut out = OpenItems::default();
        for m in files.iter().flat_map(|f| f.messages.values()) {
            out.add(&m.info, &m.parts);
        }
        Ok(out)
    }
}
