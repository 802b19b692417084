//! Text and reasoning blocks: open, deltas (the hot path: no store I/O, no logging,
//! no allocation beyond the delta's reference-counted ids), close.

use std::borrow::Cow;

use serde_json::Value;

use super::inflight::{BlockBody, OpenBlock};
use super::machine::{Machine, OnCommit};
use crate::close;
use crate::error::{Error, Result};
use crate::event::PartDelta;
use crate::id::PartId;

impl Machine {
    /// The delta path: append to the open block and publish. With
    /// [`ProcessorOptions::persist_every_delta`](super::ProcessorOptions::persist_every_delta)
    /// the block's part is also committed after the publish.
    /// A delta's provider metadata, when it carries any, replaces the block's (it is
    /// stored with the block's next commit, never published).
    pub(super) fn block_delta(
        &mut self,
        id: &str,
        text: String,
        provider_metadata: Option<Value>,
        kind: &'static str,
    ) -> Result<()> {
        let Some(block) = self.blocks.get_mut(id) else {
            return Err(Error::invalid(format!(
                "{kind}-delta for block {id:?}, which is not open"
            )));
        };
        if block.body.kind() != kind {
            return Err(Error::invalid(format!(
                "{kind}-delta for block {id:?}, which is a {} block",
                block.body.kind()
            )));
        }
        block.body.text_mut().push_str(&text);
        if provider_metadata.is_some() {
            *block.body.metadata_mut() = provider_metadata;
        }
        let delta = PartDelta {
            session_id: self.session_id.clone(),
            message_id: self.message.id.clone(),
            part_id: block.id.clone(),
            field: Cow::Borrowed("text"),
            delta: text,
        };
        let persist = self
            .opts
            .persist_every_delta
            .then(|| block.clone().into_part(&self.session_id, &self.message.id));
        self.delta(delta);
        if let Some(part) = persist {
            self.commit_part(part);
        }
        Ok(())
    }

    /// `text-start` / `reasoning-start`: the empty part is committed; the block is
    /// open unless that commit fails.
    pub(super) fn open_block(&mut self, id: String, body: BlockBody) -> Result<()> {
        if self.blocks.contains_key(&id) {
            return Err(Error::invalid(format!(
                "{}-start for block {id:?}, which is already open",
                body.kind()
            )));
        }
        let block = OpenBlock {
            id: PartId::generate(),
            body,
        };
        self.commit_part(block.clone().into_part(&self.session_id, &self.message.id));
        self.blocks.insert(id.clone(), block);
        self.on_commit = Some(OnCommit::Open(id));
        Ok(())
    }

    /// `text-end` / `reasoning-end`: the whole part, trailing whitespace trimmed, the
    /// text hook applied (text only), `time.end` set, the end's provider metadata (when
    /// it carries any) in place of the block's, and a text's `citations` kept as given.
    pub(super) fn end_block(
        &mut self,
        id: &str,
        provider_metadata: Option<Value>,
        citations: Option<Value>,
        kind: &str,
    ) -> Result<()> {
        let mut block = match self.blocks.remove(id) {
            None => {
                return Err(Error::invalid(format!(
                    "{kind}-end for block {id:?}, which is not open"
                )))
            }
            Some(b) if b.body.kind() != kind => {
                let open = b.body.kind();
                self.blocks.insert(id.to_owned(), b);
                return Err(Error::invalid(format!(
                    "{kind}-end for block {id:?}, which is a {open} block"
                )));
            }
            Some(b) => b,
        };
        let now = self.now();
        if provider_metadata.is_some() {
            *block.body.metadata_mut() = provider_metadata;
        }
        if let BlockBody::Text(t) = &mut block.body {
            if let Some(hook) = &self.opts.text_hook {
                hook(&mut t.text);
            }
            if let Some(citations) = citations {
                t.extra.insert("citations".into(), citations);
            }
        }
        let mut part = block.into_part(&self.session_id, &self.message.id);
        close::close_block(&mut part, now, None);
        self.commit_part(part);
        Ok(())
    }
}
