//! Deterministic builders for every message and part kind, from a kind and a version.
//!
//! The same `(kind, version)` always builds the same value, and different versions
//! differ in a field a store must keep, so an overwrite that was dropped is visible.

use forge_core::model::{
    AgentPart, AssistantMessage, AssistantTime, CompactionPart, ErrorName, FilePart, JsonMap,
    MessageBody, MessageError, ModelRef, PartBody, PartTime, PatchPart, ReasoningPart, RetryPart,
    RetryTime, SessionTime, SnapshotPart, StepFinishPart, StepStartPart, SubtaskPart, TextPart,
    Tokens, ToolCompleted, ToolError, ToolPart, ToolPending, ToolRunning, ToolState, ToolTime,
    ToolTimeEnded, UserMessage, UserTime,
};
use forge_core::{Message, MessageId, Part, PartId, Session, SessionId};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub use super::arbitrary::{
    arb_json, arb_message, arb_message_error, arb_session, arb_text, arb_unknown_fields,
};
pub use super::arbitrary_parts::arb_part;

/// A fixed base time (Unix ms) so built values are reproducible.
pub const T0: i64 = 1_700_000_000_000;

/// Message kinds the builders make.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MessageKind {
    /// A user message.
    User,
    /// A completed assistant message.
    Assistant,
    /// An assistant message without `time.completed`.
    OpenAssistant,
    /// A successful compaction summary.
    Summary,
    /// A summary that failed (error set).
    FailedSummary,
    /// A role this version does not know, with unknown fields.
    UnknownRole,
}

/// Every message kind.
pub const MESSAGE_KINDS: [MessageKind; 6] = [
    MessageKind::User,
    MessageKind::Assistant,
    MessageKind::OpenAssistant,
    MessageKind::Summary,
    MessageKind::FailedSummary,
    MessageKind::UnknownRole,
];

/// Part kinds the builders make: every kind of the model, open and closed variants of
/// the ones that can be open, and an unknown kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PartKind {
    /// Closed text.
    Text,
    /// Streaming text (no `time.end`).
    OpenText,
    /// Closed reasoning.
    Reasoning,
    /// Streaming reasoning.
    OpenReasoning,
    /// Tool `pending`.
    ToolPending,
    /// Tool `running`.
    ToolRunning,
    /// Tool `completed`.
    ToolCompleted,
    /// Tool `error`.
    ToolError,
    /// `file`.
    File,
    /// `agent`.
    Agent,
    /// `compaction`.
    Compaction,
    /// `subtask`.
    Subtask,
    /// `step-start`.
    StepStart,
    /// `step-finish`.
    StepFinish,
    /// `snapshot`.
    Snapshot,
    /// `patch`.
    Patch,
    /// `retry`.
    Retry,
    /// A kind this version does not know.
    Unknown,
    /// Text without `time` (a user's text): not open, though it has no `time.end`.
    UntimedText,
    /// Tool `running`, waiting for the user's approval: not open work.
    ToolAwaitingApproval,
    /// Tool `running` whose approval was given: open again.
    ToolApproved,
}

/// Every part kind.
pub const PART_KINDS: [PartKind; 21] = [
    PartKind::Text,
    PartKind::OpenText,
    PartKind::Reasoning,
    PartKind::OpenReasoning,
    PartKind::ToolPending,
    PartKind::ToolRunning,
    PartKind::ToolCompleted,
    PartKind::ToolError,
    PartKind::File,
    PartKind::Agent,
    PartKind::Compaction,
    PartKind::Subtask,
    PartKind::StepStart,
    PartKind::StepFinish,
    PartKind::Snapshot,
    PartKind::Patch,
    PartKind::Retry,
    PartKind::Unknown,
    PartKind::UntimedText,
    PartKind::ToolAwaitingApproval,
    PartKind::ToolApproved,
];

/// Any message kind.
pub fn message_kind() -> impl Strategy<Value = MessageKind> {
    proptest::sample::select(MESSAGE_KINDS.to_vec())
}

/// Any part kind.
pub fn part_kind() -> impl Strategy<Value = PartKind> {
    proptest::sample::select(PART_KINDS.to_vec())
}

fn extra(pairs: Value) -> JsonMap {
    match pairs {
        Value::Object(m) => m,
        _ => JsonMap::new(),
    }
}

/// A session; `version` shows in the title.
pub fn session(id: &SessionId, version: u8) -> Session {
    Session {
        id: id.clone(),
        parent_id: None,
        title: format!("session v{version}"),
        time: SessionTime {
            created: T0,
            updated: T0 + i64::from(version),
            extra: JsonMap::new(),
        },
        extra: extra(json!({"projectID": "p1", "version": "1.0.0"})),
    }
}

/// An assistant message answering `parent`, closed unless `open`.
pub fn assistant(session: &SessionId, id: &MessageId, parent: &MessageId, open: bool) -> Message {
    Message {
        id: id.clone(),
        session_id: session.clone(),
        body: MessageBody::Assistant(AssistantMessage {
            time: AssistantTime {
                created: T0,
                completed: (!open).then_some(T0 + 1),
                extra: JsonMap::new(),
            },
            error: None,
            parent_id: parent.clone(),
            model_id: "model".into(),
            provider_id: "provider".into(),
            agent: Some("build".into()),
            path: None,
            summary: None,
            cost: 0.0,
            tokens: Tokens::default(),
            finish: (!open).then(|| "stop".to_owned()),
            extra: extra(json!({"mode": "build"})),
        }),
    }
}

/// A message of `kind`; `version` shows in a field every kind has.
pub fn message(session: &SessionId, id: &MessageId, kind: MessageKind, version: u8) -> Message {
    let v = i64::from(version);
    let parent = MessageId::from("msg_parent");
    let mut m = match kind {
        MessageKind::User => Message {
            id: id.clone(),
            session_id: session.clone(),
            body: MessageBody::User(UserMessage {
                time: UserTime {
                    created: T0 + v,
                    extra: JsonMap::new(),
                },
                agent: format!("agent-v{version}"),
                model: Some(ModelRef {
                    provider_id: "provider".into(),
                    model_id: "model".into(),
                    extra: JsonMap::new(),
                }),
                system: None,
                tools: None,
                extra: JsonMap::new(),
            }),
        },
        MessageKind::Assistant | MessageKind::Summary | MessageKind::FailedSummary => {
            assistant(session, id, &parent, false)
        }
        MessageKind::OpenAssistant => assistant(session, id, &parent, true),
        MessageKind::UnknownRole => Message {
            id: id.clone(),
            session_id: session.clone(),
            body: MessageBody::Unknown {
                role: "system-note".into(),
                fields: extra(json!({"time": {"created": T0 + v}, "xFuture": {"v": version}})),
            },
        },
    };
    if let Some(a) = m.as_assistant_mut() {
        a.cost = f64::from(version) / 4.0;
        a.time.created = T0 + v;
        if matches!(kind, MessageKind::Summary | MessageKind::FailedSummary) {
            a.summary = Some(true);
        }
        if kind == MessageKind::FailedSummary {
            a.error = Some(MessageError::new(ErrorName::Api, "overloaded"));
        }
    }
    m
}

fn ended(v: i64) -> ToolTimeEnded {
    ToolTimeEnded {
        start: T0,
        end: T0 + v + 1,
        compacted: None,
        extra: JsonMap::new(),
    }
}

/// A part of `kind`; `version` shows in a field every kind has.
pub fn part(
    session: &SessionId,
    message: &MessageId,
    id: &PartId,
    kind: PartKind,
    version: u8,
) -> Part {
    let v = i64::from(version);
    let text = format!("text v{version}");
    let tool = |state| {
        PartBody::Tool(ToolPart {
            call_id: format!("call_{id}"),
            tool: "bash".into(),
            state,
            metadata: None,
            extra: JsonMap::new(),
        })
    };
    let input = json!({"cmd": format!("echo {version}")});
    let body = match kind {
        PartKind::UntimedText => PartBody::Text(TextPart {
            text,
            synthetic: None,
            ignored: None,
            time: None,
            metadata: None,
            extra: JsonMap::new(),
        }),
        PartKind::Text | PartKind::OpenText => PartBody::Text(TextPart {
            text,
            synthetic: None,
            ignored: None,
            time: Some(PartTime {
                start: T0,
                end: (kind == PartKind::Text).then_some(T0 + v + 1),
                extra: JsonMap::new(),
            }),
            metadata: None,
            extra: JsonMap::new(),
        }),
        PartKind::Reasoning | PartKind::OpenReasoning => PartBody::Reasoning(ReasoningPart {
            text,
            metadata: None,
            time: PartTime {
                start: T0,
                end: (kind == PartKind::Reasoning).then_some(T0 + v + 1),
                extra: JsonMap::new(),
            },
            extra: JsonMap::new(),
        }),
        PartKind::ToolPending => tool(ToolState::Pending(ToolPending {
            input,
            raw: text,
            extra: JsonMap::new(),
        })),
        PartKind::ToolRunning | PartKind::ToolAwaitingApproval | PartKind::ToolApproved => {
            let status = match kind {
                PartKind::ToolAwaitingApproval => "requested",
                _ => "approved",
            };
            let metadata = (kind != PartKind::ToolRunning)
                .then(|| json!({"approval": {"id": format!("ap_{id}"), "status": status}}));
            tool(ToolState::Running(ToolRunning {
                input,
                title: Some(text),
                metadata,
                time: ToolTime {
                    start: T0 + v,
                    extra: JsonMap::new(),
                },
                extra: JsonMap::new(),
            }))
        }
        PartKind::ToolCompleted => tool(ToolState::Completed(ToolCompleted {
            input,
            output: text,
            title: "t".into(),
            metadata: json!({"exit": 0}),
            time: ended(v),
            attachments: None,
            extra: JsonMap::new(),
        })),
        PartKind::ToolError => tool(ToolState::Error(ToolError {
            input,
            error: text,
            metadata: None,
            time: ended(v),
            extra: JsonMap::new(),
        })),
        PartKind::File => PartBody::File(FilePart {
            mime: "text/plain".into(),
            filename: Some(format!("f{version}.txt")),
            url: format!("file:///tmp/f{version}.txt"),
            source: None,
            extra: JsonMap::new(),
        }),
        PartKind::Agent => PartBody::Agent(AgentPart {
            name: format!("agent{version}"),
            source: None,
            extra: JsonMap::new(),
        }),
        PartKind::Compaction => PartBody::Compaction(CompactionPart {
            auto: version.is_multiple_of(2),
            overflow: None,
            tail_start_id: None,
            extra: JsonMap::new(),
        }),
        PartKind::Subtask => PartBody::Subtask(SubtaskPart {
            prompt: text,
            description: "d".into(),
            agent: "general".into(),
            model: None,
            extra: JsonMap::new(),
        }),
        PartKind::StepStart => PartBody::StepStart(StepStartPart {
            snapshot: Some(format!("snap{version}")),
            extra: JsonMap::new(),
        }),
        PartKind::StepFinish => PartBody::StepFinish(StepFinishPart {
            reason: "stop".into(),
            snapshot: None,
            cost: f64::from(version) / 8.0,
            tokens: Tokens {
                input: u64::from(version),
                ..Tokens::default()
            },
            extra: JsonMap::new(),
        }),
        PartKind::Snapshot => PartBody::Snapshot(SnapshotPart {
            snapshot: format!("snap{version}"),
            extra: JsonMap::new(),
        }),
        PartKind::Patch => PartBody::Patch(PatchPart {
            hash: format!("h{version}"),
            files: vec!["src/lib.rs".into()],
            extra: JsonMap::new(),
        }),
        PartKind::Retry => PartBody::Retry(RetryPart {
            attempt: u32::from(version) + 1,
            error: MessageError::new(ErrorName::Api, "rate limited"),
            time: RetryTime {
                created: T0 + v,
                extra: JsonMap::new(),
            },
            extra: JsonMap::new(),
        }),
        PartKind::Unknown => PartBody::Unknown {
            kind: "x-future-kind".into(),
            fields: extra(json!({"payload": {"v": version, "list": [1, "two", null]}})),
        },
    };
    Part {
        id: id.clone(),
        session_id: session.clone(),
        message_id: message.clone(),
        body,
    }
}
