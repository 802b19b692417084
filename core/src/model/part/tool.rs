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

/// `outputJSON`: the completed state's `output` is the JSON text of the value the tool
/// returned (a number, an array, an object not of opencode's shape, …), not text.
pub const OUTPUT_JSON: &str = "outputJSON";
/// `outputKeys`: the tool returned an object of opencode's shape, `{output, title?,
/// metadata?}`, unpacked into the state's fields; these are the keys it had.
pub const OUTPUT_KEYS: &str = "outputKeys";

/// The keys of opencode's tool result shape.
const OPENCODE_KEYS: [&str; 3] = ["output", "title", "metadata"];

/// A completed state's `output`, `title`, `metadata` and marks (in `extra`) for the
/// value a tool returned, so that [`ToolCompleted::returned`] gives that value back
/// exactly: a string is the output; an object of opencode's shape (`output` a string,
/// `title` a string if present, no other key) is unpacked, its keys recorded as
/// [`OUTPUT_KEYS`]; any other value is stored as its JSON text, marked
/// [`OUTPUT_JSON`] (so `42` and `"42"` stay apart, and `{output, exitCode}` keeps
/// `exitCode`).
pub fn split_output(value: Value) -> (String, String, Value, JsonMap) {
    let mut marks = JsonMap::new();
    let empty = || Value::Object(JsonMap::new());
    match value {
        Value::String(s) => (s, String::new(), empty(), marks),
        Value::Object(mut m)
            if m.get("output").is_some_and(Value::is_string)
                && m.get("title").is_none_or(Value::is_string)
                && m.keys().all(|k| OPENCODE_KEYS.contains(&k.as_str())) =>
        {
            let keys = OPENCODE_KEYS
                .iter()
                .filter(|k| m.contains_key(**k))
                .map(|k| Value::String((*k).to_owned()))
                .collect();
            marks.insert(OUTPUT_KEYS.into(), Value::Array(keys));
            let text = |v: Option<Value>| match v {
                Some(Value::String(s)) => s,
                _ => String::new(),
            };
            let output = text(m.remove("output"));
            let title = text(m.remove("title"));
            let metadata = m.remove("metadata").unwrap_or_else(empty);
            (output, title, metadata, marks)
        }
        other => {
            marks.insert(OUTPUT_JSON.into(), Value::Bool(true));
            (other.to_string(), String::new(), empty(), marks)
        }
    }
}

impl ToolCompleted {
    /// The value the tool returned, rebuilt from the state as [`split_output`] stored
    /// it. A state without marks (written by opencode, or before the marks existed)
    /// gives its `output` as a string.
    pub fn returned(&self) -> Value {
        if self.extra.get(OUTPUT_JSON) == Some(&Value::Bool(true)) {
            if let Ok(v) = serde_json::from_str(&self.output) {
                return v;
            }
        }
        if let Some(Value::Array(keys)) = self.extra.get(OUTPUT_KEYS) {
            let mut m = JsonMap::new();
            for key in keys.iter().filter_map(Value::as_str) {
                let v = match key {
                    "output" => Value::String(self.output.clone()),
                    "title" => Value::String(self.title.clone()),
                    "metadata" => self.metadata.clone(),
                    _ => continue,
                };
                m.insert(key.to_owned(), v);
            }
            return Value::Object(m);
        }
        Value::String(self.output.clone())
    }
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

#[cfg(test)]
mod output_tests {
    use serde_json::json;

    use super::*;

    fn completed(value: Value) -> ToolCompleted {
        let (output, title, metadata, extra) = split_output(value);
        ToolCompleted {
            input: json!({}),
            output,
            title,
            metadata,
            time: ToolTimeEnded {
                start: 1,
                end: 2,
                compacted: None,
                extra: JsonMap::new(),
            },
            attachments: None,
            extra,
        }
    }

    /// Every value a tool can return comes back exactly, through JSON too (an export
    /// and an import): `42` and `"42"` apart, opencode's shape unpacked with only the
    /// keys it had, and any other object kept whole.
    #[test]
    fn the_returned_value_comes_back_exactly() {
        for value in [
            json!("42"),
            json!(42),
            json!(null),
            json!([1, "a"]),
            json!({"city": "Paris", "temperature": 18}),
            json!({"output": "x"}),
            json!({"output": "x", "title": "t", "metadata": {"exit": 0}}),
            json!({"output": "x", "title": "t", "exitCode": 3}),
            json!({"output": 5}),
            json!({"output": "x", "title": 7}),
            json!({"title": "t"}),
        ] {
            let state = completed(value.clone());
            assert_eq!(state.returned(), value);
            let text = serde_json::to_string(&state).unwrap();
            let back: ToolCompleted = serde_json::from_str(&text).unwrap();
            assert_eq!(back.returned(), value, "{text}");
        }
        // opencode's shape is what opencode readers see: the output text and title.
        let state = completed(json!({"output": "x", "title": "t"}));
        assert_eq!((state.output.as_str(), state.title.as_str()), ("x", "t"));
        // Any other object: its JSON text, marked.
        let state = completed(json!({"output": "x", "exitCode": 3}));
        assert_eq!(state.extra.get(OUTPUT_JSON), Some(&json!(true)));
        // A state opencode wrote (no marks) gives its output text.
        let mut plain = completed(json!("x"));
        plain.output = "42".into();
        assert_eq!(plain.returned(), json!("42"));
    }
}
