//! The model's stream events: the AI SDK v5 `fullStream` vocabulary.
//!
//! One JSON object per event, tagged by `type`, with the AI SDK's field names
//! (`text-delta {id, text}`, `tool-call {toolCallId, toolName, input}`, …). Fields the
//! Processor does not use are accepted and ignored. An unknown `type` is an error that
//! names it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Token usage as the AI SDK reports it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Total tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Reasoning tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Prompt tokens served from the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
}

/// Files changed by a step, attached to `finish-step` (a forge-store extension field:
/// the AI SDK has no such event; the agent computes it from workspace snapshots).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepPatch {
    /// Snapshot hash.
    pub hash: String,
    /// Changed paths.
    #[serde(default)]
    pub files: Vec<String>,
}

/// A generated file as the AI SDK streams it: `{mediaType, base64}` (other fields, such
/// as `providerMetadata`, are ignored).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GeneratedFile {
    /// MIME type.
    pub media_type: String,
    /// The content, base64-encoded.
    pub base64: String,
    /// A file name, when the producer gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
}

/// One event of the model's stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum StreamEvent {
    /// The stream started.
    Start {},
    /// A model step started.
    StartStep {},
    /// A text block opens.
    TextStart {
        /// Block id, unique among open blocks.
        id: String,
    },
    /// Text appended to an open block.
    TextDelta {
        /// Block id.
        id: String,
        /// The appended text.
        text: String,
    },
    /// A text block closes.
    TextEnd {
        /// Block id.
        id: String,
    },
    /// A reasoning block opens.
    ReasoningStart {
        /// Block id.
        id: String,
    },
    /// Reasoning text appended.
    ReasoningDelta {
        /// Block id.
        id: String,
        /// The appended text.
        text: String,
    },
    /// A reasoning block closes.
    ReasoningEnd {
        /// Block id.
        id: String,
    },
    /// Tool input starts streaming.
    #[serde(rename_all = "camelCase")]
    ToolInputStart {
        /// The tool call id.
        id: String,
        /// Tool name.
        tool_name: String,
    },
    /// A piece of tool input (neither persisted nor broadcast).
    ToolInputDelta {
        /// The tool call id.
        id: String,
        /// Raw input text.
        #[serde(default)]
        delta: String,
    },
    /// Tool input complete (neither persisted nor broadcast).
    ToolInputEnd {
        /// The tool call id.
        id: String,
    },
    /// The model called a tool.
    #[serde(rename_all = "camelCase")]
    ToolCall {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        tool_name: String,
        /// Arguments.
        #[serde(default)]
        input: Value,
    },
    /// A tool returned.
    #[serde(rename_all = "camelCase")]
    ToolResult {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        #[serde(default)]
        tool_name: String,
        /// A string, or `{output, title?, metadata?}`, or any JSON (stored as its text).
        #[serde(default)]
        output: Value,
        /// A progress value of a tool written as an async generator: the tool keeps
        /// running; only a result without it completes the tool.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        preliminary: bool,
    },
    /// A tool failed.
    #[serde(rename_all = "camelCase")]
    ToolError {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        #[serde(default)]
        tool_name: String,
        /// A string, or `{message}`, or any JSON.
        #[serde(default)]
        error: Value,
    },
    /// A model step finished.
    #[serde(rename_all = "camelCase")]
    FinishStep {
        /// Why the step ended.
        #[serde(default = "unknown_reason")]
        finish_reason: String,
        /// Usage of the step.
        #[serde(default)]
        usage: Usage,
        /// Cost of the step (extension; the AI SDK does not price).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cost: Option<f64>,
        /// Workspace snapshot after the step (extension).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        snapshot: Option<String>,
        /// Files the step changed (extension).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        patch: Option<StepPatch>,
    },
    /// The stream finished.
    #[serde(rename_all = "camelCase")]
    Finish {
        /// Why it ended.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
    },
    /// The stream failed.
    Error {
        /// The error: a string, `{message}`, or `{name, data}`.
        #[serde(default)]
        error: Value,
    },
    /// The stream was aborted.
    Abort {},
    /// A file the model generated: stored as a `file` part with a `data:` URL.
    File {
        /// The file.
        file: GeneratedFile,
    },
    /// A file generated as part of the model's reasoning (AI SDK 6+): stored as a
    /// `file` part marked `"reasoning": true`.
    ReasoningFile {
        /// The file.
        file: GeneratedFile,
    },
    /// Provider raw chunk: accepted, not persisted.
    Raw {},
    /// A source citation: accepted, not persisted.
    Source {},
}

fn unknown_reason() -> String {
    "unknown".to_owned()
}

impl StreamEvent {
    /// Every `type` this version understands.
    pub const KINDS: &'static [&'static str] = &[
        "start",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "reasoning-start",
        "reasoning-delta",
        "reasoning-end",
        "tool-input-start",
        "tool-input-delta",
        "tool-input-end",
        "tool-call",
        "tool-result",
        "tool-error",
        "finish-step",
        "finish",
        "error",
        "abort",
        "file",
        "reasoning-file",
        "raw",
        "source",
    ];

    /// Whether `kind` is a `type` this version understands.
    pub fn is_known_kind(kind: &str) -> bool {
        Self::KINDS.contains(&kind)
    }

    /// Parses one JSON line, with an error that names the problem.
    pub fn from_json(line: &str) -> crate::Result<Self> {
        serde_json::from_str(line).map_err(crate::Error::invalid)
    }

    /// The event's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Start {} => "start",
            Self::StartStep {} => "start-step",
            Self::TextStart { .. } => "text-start",
            Self::TextDelta { .. } => "text-delta",
            Self::TextEnd { .. } => "text-end",
            Self::ReasoningStart { .. } => "reasoning-start",
            Self::ReasoningDelta { .. } => "reasoning-delta",
            Self::ReasoningEnd { .. } => "reasoning-end",
            Self::ToolInputStart { .. } => "tool-input-start",
            Self::ToolInputDelta { .. } => "tool-input-delta",
            Self::ToolInputEnd { .. } => "tool-input-end",
            Self::ToolCall { .. } => "tool-call",
            Self::ToolResult { .. } => "tool-result",
            Self::ToolError { .. } => "tool-error",
            Self::FinishStep { .. } => "finish-step",
            Self::Finish { .. } => "finish",
            Self::Error { .. } => "error",
            Self::Abort {} => "abort",
            Self::File { .. } => "file",
            Self::ReasoningFile { .. } => "reasoning-file",
            Self::Raw {} => "raw",
            Self::Source {} => "source",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ai_sdk_field_names() {
        let e = StreamEvent::from_json(r#"{"type":"text-delta","id":"0","text":"hi"}"#).unwrap();
        assert_eq!(
            e,
            StreamEvent::TextDelta {
                id: "0".into(),
                text: "hi".into()
            }
        );
        let e = StreamEvent::from_json(
            r#"{"type":"tool-call","toolCallId":"c1","toolName":"bash","input":{"cmd":"ls"},"providerExecuted":false}"#,
        )
        .unwrap();
        assert!(matches!(e, StreamEvent::ToolCall { ref tool_name, .. } if tool_name == "bash"));
        let e = StreamEvent::from_json(
            r#"{"type":"finish-step","finishReason":"stop","usage":{"inputTokens":10,"outputTokens":5,"reasoningTokens":2,"cachedInputTokens":1},"response":{"id":"r"}}"#,
        )
        .unwrap();
        let StreamEvent::FinishStep { usage, .. } = e else {
            panic!("not finish-step")
        };
        assert_eq!(usage.cached_input_tokens, Some(1));
        assert!(
            StreamEvent::from_json(r#"{"type":"start-step","request":{},"warnings":[]}"#).is_ok()
        );
    }

    #[test]
    fn unknown_type_is_named_in_the_error() {
        let err = StreamEvent::from_json(r#"{"type":"text-delat","id":"0"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("text-delat"), "{err}");
    }

    #[test]
    fn missing_field_is_named_in_the_error() {
        let err = StreamEvent::from_json(r#"{"type":"text-delta","id":"0"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("text"), "{err}");
    }
}
