//! What a session does at one moment ([`Item`]), at its event time ([`Timed`]).
//!
//! The framing items (`session`, `user`, `assistant`, `crash`) deserialize from (and
//! serialize to, without `type`) the replay format's lines (`docs/replay-format.md`, field names as written there, unknown
//! fields refused); every other item is a model [`StreamEvent`].

use std::collections::HashMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::{Error, Result};
use crate::id::{MessageId, PartId, SessionId};
use crate::model::{CompactionPart, JsonMap, ModelRef, Part, PartBody, TextPart};
use crate::stream::StreamEvent;

/// `{"type":"session", "title"?, "id"?}`: names or creates the session.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionItem {
    /// Title of a new session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Session id (created if missing, continued if it exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// `{"type":"user", "text"?, "parts"?, "agent"?, "model"?, "compaction"?, "ref"?}`: a
/// user message with its parts, written in one batch.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserItem {
    /// The prompt, stored as a text part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Further parts in the opencode shape, without `id`/`sessionID`/`messageID`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<JsonMap>,
    /// The agent (default: the previous user message's, else `build`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `{providerID, modelID}` (default: the previous user message's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<ModelRef>,
    /// A compaction request: adds a `compaction` part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionItem>,
    /// A name later items use as `@name` in place of this message's id.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl UserItem {
    /// A user message of one text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// The parts of the message, in order: its `text`, its `parts`, then a `compaction`
    /// part with `tail_start_id` (resolved by the caller). Takes them out of `self`.
    ///
    /// # Errors
    /// A part carrying an id (ids are assigned when it is written) or no string `type`,
    /// a part that is not a part, or an item with none of the three; the message names
    /// the part.
    pub fn take_part_bodies(
        &mut self,
        tail_start_id: Option<MessageId>,
    ) -> std::result::Result<Vec<PartBody>, String> {
        let mut parts = Vec::new();
        if let Some(text) = self.text.take() {
            parts.push(PartBody::Text(TextPart::plain(text)));
        }
        for (i, fields) in std::mem::take(&mut self.parts).into_iter().enumerate() {
            for key in ["id", "sessionID", "messageID"] {
                if fields.contains_key(key) {
                    return Err(format!("parts[{i}]: remove `{key}`; replay assigns ids"));
                }
            }
            if !fields.get("type").is_some_and(Value::is_string) {
                return Err(format!("parts[{i}]: missing a string `type`"));
            }
            // A part parses with its ids; these placeholders are dropped with it.
            let mut obj = JsonMap::new();
            obj.insert("id".into(), Value::String(PartId::generate().to_string()));
            obj.insert(
                "sessionID".into(),
                Value::String(SessionId::generate().to_string()),
            );
            obj.insert(
                "messageID".into(),
                Value::String(MessageId::generate().to_string()),
            );
            obj.extend(fields);
            let p: Part = serde_json::from_value(Value::Object(obj))
                .map_err(|e| format!("parts[{i}]: {e}"))?;
            parts.push(p.body);
        }
        if let Some(c) = self.compaction.take() {
            parts.push(PartBody::Compaction(CompactionPart {
                auto: c.auto,
                overflow: c.overflow,
                tail_start_id,
                extra: JsonMap::new(),
            }));
        }
        if parts.is_empty() {
            return Err("a user line needs `text`, `parts` or `compaction`".into());
        }
        Ok(parts)
    }
}

/// `compaction` of a user item.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompactionItem {
    /// Requested automatically (context full).
    #[serde(default)]
    pub auto: bool,
    /// Triggered by a context overflow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overflow: Option<bool>,
    /// A message id, or `@ref` of an earlier item: keep messages from there on.
    #[serde(
        default,
        rename = "tail_start_id",
        alias = "tailStartID",
        skip_serializing_if = "Option::is_none"
    )]
    pub tail_start_id: Option<String>,
}

/// `{"type":"assistant", "summary"?, "providerID"?, "modelID"?, "agent"?, "ref"?}`:
/// opens an assistant message answering the last user message.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AssistantItem {
    /// This answer is a compaction summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<bool>,
    /// Provider (default: the answered user message's model).
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,
    /// Model (default: the answered user message's model).
    #[serde(default, rename = "modelID", skip_serializing_if = "Option::is_none")]
    pub model_id: Option<String>,
    /// Agent (default: the answered user message's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// A name for this message, as on user items.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl AssistantItem {
    /// An answer that is (or is not) a compaction summary, every other field default.
    pub fn summary(summary: bool) -> Self {
        Self {
            summary: summary.then_some(true),
            ..Self::default()
        }
    }
}

/// What a session does at one moment.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// Names or creates the session.
    Session(SessionItem),
    /// A user message with its parts.
    User(UserItem),
    /// Opens an assistant message.
    Assistant(AssistantItem),
    /// Stop here without finalize: what is open stays open, as after a process crash.
    Crash,
    /// A model stream event for the open assistant message.
    Stream(StreamEvent),
    /// An event of a `type` this version does not know (neither a framing item nor in
    /// [`StreamEvent::KINDS`]): nothing to do.
    Unknown {
        /// Its `type`.
        kind: String,
    },
}

impl Item {
    /// The `type`s of the framing items; every other `type` is a stream event.
    pub const FRAMING_KINDS: &'static [&'static str] = &["session", "user", "assistant", "crash"];
}

impl From<StreamEvent> for Item {
    fn from(event: StreamEvent) -> Self {
        Self::Stream(event)
    }
}

impl From<UserItem> for Item {
    fn from(user: UserItem) -> Self {
        Self::User(user)
    }
}

impl From<AssistantItem> for Item {
    fn from(assistant: AssistantItem) -> Self {
        Self::Assistant(assistant)
    }
}

/// The names (`ref`) items gave their messages, for `@name` in a compaction's
/// `tail_start_id`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Refs(HashMap<String, MessageId>);

impl Refs {
    /// The message a compaction's `tail_start_id` means: `@name` is the message an
    /// earlier item named, anything else a literal message id.
    ///
    /// # Errors
    /// `InvalidInput` for a `@name` no earlier item gave.
    pub fn resolve(&self, reference: &str) -> Result<MessageId> {
        match reference.strip_prefix('@') {
            Some(name) => self.0.get(name).cloned().ok_or_else(|| {
                Error::invalid(format!(
                    "compaction.tail_start_id: @{name} names no earlier line (give a user line \
                     \"ref\":\"{name}\")"
                ))
            }),
            None => Ok(MessageId::from(reference)),
        }
    }

    /// Fails if `label` names an earlier message already.
    ///
    /// # Errors
    /// `InvalidInput` naming the `ref`.
    pub fn check_free(&self, label: Option<&str>) -> Result<()> {
        match label {
            Some(name) if self.0.contains_key(name) => Err(Error::invalid(format!(
                "ref {name:?} is already used by an earlier line"
            ))),
            _ => Ok(()),
        }
    }

    /// Names `id` `label`, if given.
    pub fn remember(&mut self, label: Option<String>, id: &MessageId) {
        if let Some(name) = label {
            self.0.insert(name, id.clone());
        }
    }
}

/// An item at its event time.
#[derive(Clone, Debug, PartialEq)]
pub struct Timed {
    /// Event time, ms since the start of the stream (or of the workload), if known.
    pub t_ms: Option<u64>,
    /// What happens.
    pub item: Item,
}

impl Timed {
    /// `item` at `t_ms`.
    pub fn at(t_ms: u64, item: impl Into<Item>) -> Self {
        Self {
            t_ms: Some(t_ms),
            item: item.into(),
        }
    }

    /// `item` without an event time.
    pub fn untimed(item: impl Into<Item>) -> Self {
        Self {
            t_ms: None,
            item: item.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_parts_are_text_then_parts_then_compaction() {
        let mut u: UserItem = serde_json::from_value(serde_json::json!({
            "text": "hi",
            "parts": [{"type": "agent", "name": "explore"}],
            "compaction": {"auto": true},
        }))
        .unwrap();
        let tail = MessageId::from("msg_tail");
        let parts = u.take_part_bodies(Some(tail.clone())).unwrap();
        assert!(matches!(&parts[0], PartBody::Text(t) if t.text == "hi"));
        assert!(matches!(&parts[1], PartBody::Agent(_)));
        assert!(
            matches!(&parts[2], PartBody::Compaction(c) if c.auto && c.tail_start_id == Some(tail))
        );
        assert!(u.text.is_none() && u.parts.is_empty() && u.compaction.is_none());
    }

    #[test]
    fn user_parts_refuse_ids_and_an_empty_message() {
        let mut u = UserItem::default();
        assert!(u
            .take_part_bodies(None)
            .unwrap_err()
            .contains("needs `text`"));
        let mut u: UserItem = serde_json::from_value(serde_json::json!({
            "parts": [{"type": "text", "text": "x", "id": "prt_1"}],
        }))
        .unwrap();
        let e = u.take_part_bodies(None).unwrap_err();
        assert!(e.starts_with("parts[0]: remove `id`"), "{e}");
    }

    #[test]
    fn framing_items_refuse_unknown_fields() {
        let e = serde_json::from_value::<AssistantItem>(serde_json::json!({"sumary": true}));
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("unknown field `sumary`"));
        let a: AssistantItem =
            serde_json::from_value(serde_json::json!({"summary": true, "ref": "a"})).unwrap();
        assert_eq!(a.label.as_deref(), Some("a"));
        assert_eq!(AssistantItem::summary(true).summary, Some(true));
        assert_eq!(AssistantItem::summary(false), AssistantItem::default());
    }
}
