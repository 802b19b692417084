//! The model's stream events: the AI SDK `fullStream` vocabulary of v5 through v7.
//!
//! One JSON object per event, tagged by `type`, with the AI SDK's field names
//! (`text-delta {id, text}`, `tool-call {toolCallId, toolName, input}`, …). Fields the
//! Processor does not use are accepted and ignored. An unknown `type` is an error that
//! names it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Token usage as the AI SDK reports it, in either shape: v5's flat counts
/// (`reasoningTokens`, `cachedInputTokens`) or v6+'s `inputTokenDetails` /
/// `outputTokenDetails`. [`Usage::tokens`] maps both to opencode's `tokens`. Every
/// field may be absent (as in these structs' `Default`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "count")]
    pub input_tokens: Option<u64>,
    /// Completion tokens, reasoning included.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "count")]
    pub output_tokens: Option<u64>,
    /// Total tokens.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "count")]
    pub total_tokens: Option<u64>,
    /// Reasoning tokens (v5).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "count")]
    pub reasoning_tokens: Option<u64>,
    /// Prompt tokens served from the provider's cache (v5).
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "count")]
    pub cached_input_tokens: Option<u64>,
    /// The split of the prompt tokens (v6+).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_token_details: Option<InputTokenDetails>,
    /// The split of the completion tokens (v6+).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_token_details: Option<OutputTokenDetails>,
}

/// `inputTokenDetails` of a v6+ usage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct InputTokenDetails {
    /// Prompt tokens neither read from nor written to the cache.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "count")]
    pub no_cache_tokens: Option<u64>,
    /// Prompt tokens read from the cache.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "count")]
    pub cache_read_tokens: Option<u64>,
    /// Prompt tokens written to the cache.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "count")]
    pub cache_write_tokens: Option<u64>,
}

/// `outputTokenDetails` of a v6+ usage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct OutputTokenDetails {
    /// Completion tokens of visible text.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "count")]
    pub text_tokens: Option<u64>,
    /// Completion tokens spent reasoning.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "count")]
    pub reasoning_tokens: Option<u64>,
}

/// A token count: any JSON number that is a whole number ≥ 0 (`-0`, `12.0` and `1e3`
/// included), or `null`.
fn count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    crate::model::whole_u64_opt(d)
}

impl Usage {
    /// opencode's `tokens`: `input` without the cached prompt tokens, `output` without
    /// the reasoning tokens, `reasoning`, `cache {read, write}`, and `total` when the
    /// producer gave it. Nothing is lost: `input + cache.read + cache.write` is the
    /// prompt and `output + reasoning` the completion. The v6+ details win over the v5
    /// fields when both are present.
    pub fn tokens(&self) -> crate::model::Tokens {
        let input_details = self.input_token_details.clone().unwrap_or_default();
        let output_details = self.output_token_details.clone().unwrap_or_default();
        let read = input_details
            .cache_read_tokens
            .or(self.cached_input_tokens)
            .unwrap_or(0);
        let write = input_details.cache_write_tokens.unwrap_or(0);
        let input = input_details.no_cache_tokens.unwrap_or_else(|| {
            self.input_tokens
                .unwrap_or(0)
                .saturating_sub(read)
                .saturating_sub(write)
        });
        let reasoning = output_details
            .reasoning_tokens
            .or(self.reasoning_tokens)
            .unwrap_or(0);
        let output = output_details
            .text_tokens
            .unwrap_or_else(|| self.output_tokens.unwrap_or(0).saturating_sub(reasoning));
        let mut t = crate::model::Tokens {
            input,
            output,
            reasoning,
            ..crate::model::Tokens::default()
        };
        t.cache.read = read;
        t.cache.write = write;
        if let Some(total) = self.total_tokens {
            t.extra.insert("total".into(), Value::from(total));
        }
        t
    }
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
        /// The provider's metadata (`providerMetadata`: Anthropic's thinking
        /// `signature`, OpenAI's item ids, …), kept on the part: the part's `metadata` from the start on.
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
    },
    /// Text appended to an open block.
    TextDelta {
        /// Block id.
        id: String,
        /// The appended text.
        text: String,
        /// The provider's metadata (`providerMetadata`: Anthropic's thinking
        /// `signature`, OpenAI's item ids, …), kept on the part: when given, it replaces the block's.
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
    },
    /// A text block closes.
    TextEnd {
        /// Block id.
        id: String,
        /// The provider's metadata (`providerMetadata`: Anthropic's thinking
        /// `signature`, OpenAI's item ids, …), kept on the part: when given, it replaces the block's.
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
        /// The sources supporting the block (AI SDK 7: `{source, startIndex?,
        /// endIndex?, citedText?}` each), kept on the text part as `citations`, as
        /// given: a document cited only here is kept with them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        citations: Option<Value>,
    },
    /// A reasoning block opens.
    ReasoningStart {
        /// Block id.
        id: String,
        /// The provider's metadata (`providerMetadata`: Anthropic's thinking
        /// `signature`, OpenAI's item ids, …), kept on the part: the part's `metadata` from the start on.
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
    },
    /// Reasoning text appended.
    ReasoningDelta {
        /// Block id.
        id: String,
        /// The appended text.
        text: String,
        /// The provider's metadata (`providerMetadata`: Anthropic's thinking
        /// `signature`, OpenAI's item ids, …), kept on the part: when given, it replaces the block's (Anthropic sends the signature on a delta).
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
    },
    /// A reasoning block closes.
    ReasoningEnd {
        /// Block id.
        id: String,
        /// The provider's metadata (`providerMetadata`: Anthropic's thinking
        /// `signature`, OpenAI's item ids, …), kept on the part: when given, it replaces the block's.
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
    },
    /// Tool input starts streaming.
    #[serde(rename_all = "camelCase")]
    ToolInputStart {
        /// The tool call id.
        id: String,
        /// Tool name.
        tool_name: String,
        /// The provider's metadata (`providerMetadata`: Anthropic's thinking
        /// `signature`, OpenAI's item ids, …), kept on the part: the tool part's `metadata`.
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
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
        /// The provider's metadata (`providerMetadata`: Anthropic's thinking
        /// `signature`, OpenAI's item ids, …), kept on the part: when given, it replaces the tool part's `metadata`.
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
        /// The provider ran the tool itself (a web search, a code interpreter): its
        /// result comes in the same stream. Kept on the part as `providerExecuted: true`.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        provider_executed: bool,
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
        /// The provider's metadata of the result, kept on the tool part as
        /// `resultMetadata` where it is not the call's.
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
    },
    /// The tool call needs the user's approval before it runs (AI SDK 6+). The tool
    /// waits: finalize and recover leave it as it is until a later `tool-result`,
    /// `tool-error` or `tool-output-denied`, possibly in a later message.
    #[serde(rename_all = "camelCase")]
    ToolApprovalRequest {
        /// The approval request's id.
        approval_id: String,
        /// The call it is for (`toolCallId` is read).
        tool_call: ToolCallRef,
        /// Why approval is needed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The user's answer to an approval request (AI SDK 6+).
    #[serde(rename_all = "camelCase")]
    ToolApprovalResponse {
        /// The approval request's id.
        approval_id: String,
        /// Whether the call may run.
        approved: bool,
        /// The call it is for, when the producer names it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_call: Option<ToolCallRef>,
        /// Why it was approved or denied.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The user denied the call: the tool closes as an error saying so.
    #[serde(rename_all = "camelCase")]
    ToolOutputDenied {
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        #[serde(default)]
        tool_name: String,
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
        /// The provider's metadata of the result, kept as on `tool-result`.
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
    },
    /// A model step finished.
    #[serde(rename_all = "camelCase")]
    FinishStep {
        /// Why the step ended.
        #[serde(default = "unknown_reason")]
        finish_reason: String,
        /// The provider's own finish reason (AI SDK 6+), kept on the step-finish part.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raw_finish_reason: Option<String>,
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
        /// The provider's metadata of the step (cache usage, response ids, …), kept on
        /// the step-finish part as `metadata`.
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
        /// The step's response (`{id, modelId, timestamp, headers?}`), kept on the
        /// step-finish part as `response`, less its HTTP `headers`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        response: Option<Value>,
    },
    /// The stream finished.
    #[serde(rename_all = "camelCase")]
    Finish {
        /// Why it ended.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        finish_reason: Option<String>,
        /// The provider's own finish reason (AI SDK 6+).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        raw_finish_reason: Option<String>,
        /// Usage summed over all steps, kept on the message as `totalTokens` (opencode
        /// has no field for it: its `tokens` are the last step's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        total_usage: Option<Usage>,
    },
    /// The stream failed.
    Error {
        /// The error: a string, `{message}`, or `{name, data}`.
        #[serde(default)]
        error: Value,
    },
    /// The stream was aborted.
    Abort {
        /// Why (AI SDK 6+), recorded as the abort error's message.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// A file the model generated: stored as a `file` part with a `data:` URL.
    File {
        /// The file.
        file: GeneratedFile,
        /// The provider's metadata (`providerMetadata`: Anthropic's thinking
        /// `signature`, OpenAI's item ids, …), kept on the part: the file part's `metadata`.
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
    },
    /// A file generated as part of the model's reasoning (AI SDK 6+): stored as a
    /// `file` part marked `"reasoning": true`.
    ReasoningFile {
        /// The file.
        file: GeneratedFile,
        /// The provider's metadata (`providerMetadata`: Anthropic's thinking
        /// `signature`, OpenAI's item ids, …), kept on the part: the file part's `metadata`.
        #[serde(
            default,
            rename = "providerMetadata",
            skip_serializing_if = "Option::is_none"
        )]
        provider_metadata: Option<Value>,
    },
    /// A source the model cited (a URL or a document): stored as a `source` part.
    Source(Source),
    /// A provider's raw chunk (`includeRawChunks`): counted, not persisted.
    Raw {},
    /// A provider-specific event (`kind` like `openai.compaction`, AI SDK 7): counted,
    /// not persisted.
    Custom {
        /// `provider.name`.
        #[serde(default)]
        kind: String,
    },
    /// A keep-alive (AI SDK 7): counted, not persisted.
    Ping {},
    /// A user message added to the run between two steps (AI SDK 7, experimental): a
    /// closed `steering-message` part where it came, holding the message.
    #[serde(rename_all = "camelCase")]
    SteeringMessage {
        /// The producer's id of the message.
        #[serde(default)]
        id: String,
        /// The user message (`{role: "user", content}`).
        message: Value,
        /// The step whose model call received it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        step_number: Option<u64>,
    },
}

/// The call an approval request or response is about.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRef {
    /// Call id.
    pub tool_call_id: String,
    /// Tool name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub tool_name: String,
}

/// A `source` event: `{sourceType: "url", id, url, title?}` or
/// `{sourceType: "document", id, mediaType, title, filename?}`, with
/// `providerMetadata`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    /// `url` or `document`.
    pub source_type: String,
    /// The source's id, as the provider gave it.
    pub id: String,
    /// The URL (url sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// MIME type (document sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// File name (document sources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    /// Provider metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_metadata: Option<Value>,
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
        "tool-approval-request",
        "tool-approval-response",
        "tool-output-denied",
        "tool-error",
        "finish-step",
        "finish",
        "error",
        "abort",
        "file",
        "reasoning-file",
        "raw",
        "source",
        "custom",
        "ping",
        "steering-message",
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
            Self::ToolApprovalRequest { .. } => "tool-approval-request",
            Self::ToolApprovalResponse { .. } => "tool-approval-response",
            Self::ToolOutputDenied { .. } => "tool-output-denied",
            Self::ToolError { .. } => "tool-error",
            Self::FinishStep { .. } => "finish-step",
            Self::Finish { .. } => "finish",
            Self::Error { .. } => "error",
            Self::Abort { .. } => "abort",
            Self::File { .. } => "file",
            Self::ReasoningFile { .. } => "reasoning-file",
            Self::Raw {} => "raw",
            Self::Source(_) => "source",
            Self::Custom { .. } => "custom",
            Self::Ping {} => "ping",
            Self::SteeringMessage { .. } => "steering-message",
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
                text: "hi".into(),
                provider_metadata: None,
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

    /// `KINDS` is kept by hand; serde's own list of the enum's tags is the truth. A
    /// variant missing from `KINDS` would be skipped as unknown by a lenient reader.
    #[test]
    fn kinds_lists_exactly_the_types_the_enum_accepts() {
        let err = StreamEvent::from_json(r#"{"type":"no-such-kind"}"#)
            .unwrap_err()
            .to_string();
        let (_, expected) = err
            .split_once("expected one of ")
            .unwrap_or_else(|| panic!("serde's error lists the variants: {err}"));
        let expected = expected.split(" at line").next().unwrap_or(expected);
        let accepted: std::collections::BTreeSet<&str> = expected
            .split(", ")
            .map(|k| k.trim().trim_matches('`'))
            .collect();
        let listed: std::collections::BTreeSet<&str> = StreamEvent::KINDS.iter().copied().collect();
        assert_eq!(
            listed, accepted,
            "StreamEvent::KINDS against the enum's tags"
        );
        assert_eq!(
            listed.len(),
            StreamEvent::KINDS.len(),
            "no kind listed twice"
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
