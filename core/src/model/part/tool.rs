//! Tool parts: the call, its state (`pending` → `running` → `completed` | `error`)
//! and the state's times.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::super::JsonMap;

/// A tool call and its result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolPart {
    /// The model's tool-call id.
    #[serde(rename = "callID")]
    pub call_id: String,
    /// Tool name.
    pub tool: String,
    /// Where the call is in its life.
    pub state: ToolState,
    /// Free-form metadata; `interrupted: true` after finalize/recover closed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl ToolPart {
    /// Whether the call waits for the user's approval: `running` with
    /// `metadata.approval.status == "requested"` (see [`ToolPart::request_approval`]).
    /// Such a tool is not open work: finalize and recover leave it waiting.
    pub fn awaits_approval(&self) -> bool {
        match &self.state {
            ToolState::Running(r) => r
                .metadata
                .as_ref()
                .and_then(|m| m.get("approval"))
                .and_then(|a| a.get("status"))
                .and_then(Value::as_str)
                .is_some_and(|s| s == APPROVAL_REQUESTED),
            _ => false,
        }
    }

    /// Marks a running call as waiting for approval `id` (with the producer's reason):
    /// `metadata.approval = {id, status: "requested", reason?}` on the running state.
    /// Returns false (and changes nothing) unless the tool is running.
    pub fn request_approval(&mut self, id: &str, reason: Option<&str>) -> bool {
        let ToolState::Running(r) = &mut self.state else {
            return false;
        };
        r.request_approval(id, reason);
        true
    }

    /// The approval record of a running call (`metadata.approval`), if any.
    pub fn approval(&self) -> Option<&Value> {
        match &self.state {
            ToolState::Running(r) => r.metadata.as_ref().and_then(|m| m.get("approval")),
            _ => None,
        }
    }
}

/// `metadata.approval.status` of a tool waiting for the user's approval.
pub const APPROVAL_REQUESTED: &str = "requested";

/// The state of a tool call, tagged by `status`:
/// `pending` → `running` → `completed` | `error`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "lowercase")]
pub enum ToolState {
    /// Input is streaming.
    Pending(ToolPending),
    /// The call was made and is executing.
    Running(ToolRunning),
    /// It returned.
    Completed(ToolCompleted),
    /// It failed (or was interrupted).
    Error(ToolError),
}

/// `status: "pending"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolPending {
    /// Input parsed so far.
    #[serde(default)]
    pub input: Value,
    /// Raw input text.
    #[serde(default)]
    pub raw: String,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `status: "running"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolRunning {
    /// The call's arguments.
    pub input: Value,
    /// Progress title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Progress metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// `{start}`.
    pub time: ToolTime,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

impl ToolRunning {
    /// Marks the call as waiting for approval `id` (with the producer's reason):
    /// `metadata.approval = {id, status: "requested", reason?}`, other metadata kept.
    pub fn request_approval(&mut self, id: &str, reason: Option<&str>) {
        let mut approval = JsonMap::new();
        approval.insert("id".into(), Value::String(id.to_owned()));
        approval.insert("status".into(), Value::String(APPROVAL_REQUESTED.into()));
        if let Some(reason) = reason {
            approval.insert("reason".into(), Value::String(reason.to_owned()));
        }
        let mut meta = match self.metadata.take() {
            Some(Value::Object(m)) => m,
            _ => JsonMap::new(),
        };
        meta.insert("approval".into(), Value::Object(approval));
        self.metadata = Some(Value::Object(meta));
    }
}

/// `status: "completed"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCompleted {
    /// The call's arguments.
    pub input: Value,
    /// What the tool returned.
    pub output: String,
    /// Title.
    #[serde(default)]
    pub title: String,
    /// Result metadata.
    #[serde(default)]
    pub metadata: Value,
    /// `{start, end, compacted?}`.
    pub time: ToolTimeEnded,
    /// Attached file parts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attachments: Option<Vec<Value>>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `status: "error"`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolError {
    /// The call's arguments.
    pub input: Value,
    /// What went wrong.
    pub error: String,
    /// Metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
    /// `{start, end}`.
    pub time: ToolTimeEnded,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `{start}` of a running tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolTime {
    /// Unix milliseconds.
    #[serde(deserialize_with = "crate::model::num::whole_i64")]
    pub start: i64,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}

/// `{start, end, compacted?}` of a finished tool.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolTimeEnded {
    /// Unix milliseconds.
    #[serde(deserialize_with = "crate::model::num::whole_i64")]
    pub start: i64,
    /// Unix milliseconds.
    #[serde(deserialize_with = "crate::model::num::whole_i64")]
    pub end: i64,
    /// When the output was pruned from the model's view.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::model::num::whole_i64_opt"
    )]
    pub compacted: Option<i64>,
    /// Unknown fields, kept.
    #[serde(flatten)]
    pub extra: JsonMap,
}
