use serde::{Deserialize, Serialize};

use super::JsonMap;
use crate::id::SessionId;

/// A conversation. Sub-tasks run in child sessions (`parent_id`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// Session id (`ses_…`).
    pub id: SessionId,
    /// The session this one is a sub-task of.
    #[serde(rename = "parentID", default, skip_serializing_if = "Option::is_none")]
    pub parent_id: Option<SessionId>,
    /// Human-readable title.
    #[serde(default)]
    pub title: String,
    /// Creation and update times.
    pub time: SessionTime,
    /// Fields this version does not model (`projectID`, `directory`, `version`, …).
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// Session times in Unix milliseconds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionTime {
    /// When the session was created.
    #[serde(deserialize_with = "crate::model::num::whole_i64")]
    pub created: i64,
    /// When the session was last changed.
    #[serde(deserialize_with = "crate::model::num::whole_i64")]
    pub updated: i64,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl Session {
    /// A new session with a generated id, created now.
    pub fn new(title: impl Into<String>, now_ms: i64) -> Self {
        Self {
            id: SessionId::generate(),
            parent_id: None,
            title: title.into(),
            time: SessionTime {
                created: now_ms,
                updated: now_ms,
                extra: JsonMap::new(),
            },
            extra: JsonMap::new(),
        }
    }
}
