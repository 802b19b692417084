//! Text and reasoning blocks: open, deltas (the hot path: no store I/O, no
//! logging), close.

use std::borrow::Cow;
use std::sync::Arc;

use super::Processor;
use crate::close;
use crate::error::{Error, Result};
use crate::event::{Event, PartDelta};
use crate::model::{Part, PartBody};

fn text_of(part: &mut Part) -> Option<&mut String> {
    match &mut part.body {
        PartBody::Text(t) => Some(&mut t.text),
        PartBody::Reasoning(r) => Some(&mut r.text),
        _ => None,
    }
}

fn trim_end_in_place(s: &mut String) {
    let len = s.trim_end().len();
    s.truncate(len);
}

impl Processor {
    /// The delta path: append to the open block and publish; no store I/O.
    pub(super) fn delta(&mut self, id: &str, text: String, kind: &'static str) -> Result<()> {
        let Some(part) = self.blocks.get_mut(id) else {
            return Err(Error::invalid(format!(
                "{kind}-delta for block {id:?}, which is not open"
            )));
        };
        if part.kind() != kind {
            return Err(Error::invalid(format!(
                "{kind}-delta for block {id:?}, which is a {} block",
                part.kind()
            )));
        }
        if let Some(buf) = text_of(part) {
            buf.push_str(&text);
        }
        let delta = PartDelta {
            session_id: part.session_id.clone(),
            message_id: part.message_id.clone(),
            part_id: part.id.clone(),
            field: Cow::Borrowed("text"),
            delta: text,
        };
        self.projector.emit(&self.scope, Event::PartDelta(delta))?;
        self.stats.deltas += 1;
        Ok(())
    }

    /// With [`ProcessorOptions::persist_every_delta`](super::ProcessorOptions::persist_every_delta): rewrites the block's part.
    pub(super) async fn persist_delta(&mut self, id: &str) -> Result<()> {
        if !self.opts.persist_every_delta {
            return Ok(());
        }
        match self.blocks.get(id) {
            Some(part) => {
                let part = part.clone();
                self.commit_part(part).await
            }
            None => Ok(()),
        }
    }

    pub(super) async fn open_block(&mut self, id: String, body: PartBody) -> Result<()> {
        if self.blocks.contains_key(&id) {
            return Err(Error::invalid(format!(
                "{}-start for block {id:?}, which is already open",
                body.kind()
            )));
        }
        let part = self.new_part(body);
        self.commit_part(part.clone()).await?;
        self.blocks.insert(id, part);
        Ok(())
    }

    pub(super) async fn end_block(&mut self, id: &str, kind: &str) -> Result<()> {
        match self.blocks.get(id) {
            None => {
                return Err(Error::invalid(format!(
                    "{kind}-end for block {id:?}, which is not open"
                )))
            }
            Some(p) if p.kind() != kind => {
                return Err(Error::invalid(format!(
                    "{kind}-end for block {id:?}, which is a {} block",
                    p.kind()
                )))
            }
            Some(_) => {}
        }
        let Some(mut part) = self.blocks.remove(id) else {
            unreachable!("checked above")
        };
        let now = self.now();
        if let Some(text) = text_of(&mut part) {
            trim_end_in_place(text);
            if let (PartBody::Text(_), Some(hook)) = (&part.body, &self.opts.text_hook) {
                let hook = Arc::clone(hook);
                if let Some(text) = text_of(&mut part) {
                    hook(text);
                }
            }
        }
        close::close_block(&mut part, now, None);
        self.commit_part(part).await
    }
}
