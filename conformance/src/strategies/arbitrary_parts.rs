//! Arbitrary parts: every kind with every optional field, tools in every state, an
//! unknown kind, and unknown fields at every level.

use forge_core::model::{
    AgentPart, CompactionPart, FilePart, PartBody, PartTime, PatchPart, ReasoningPart, RetryPart,
    RetryTime, SnapshotPart, StepFinishPart, StepStartPart, SubtaskPart, TextPart, ToolCompleted,
    ToolError, ToolPart, ToolPending, ToolRunning, ToolState, ToolTime, ToolTimeEnded,
    KNOWN_PART_KINDS,
};
use forge_core::{MessageId, Part, PartId, SessionId};
use proptest::collection::vec;
use proptest::option::of;
use proptest::prelude::*;

use super::arbitrary::{
    arb_json, arb_message_error, arb_text, arb_unknown_fields, cost, json_some, model_ref, time,
    tokens,
};

fn part_time() -> impl Strategy<Value = PartTime> {
    (time(), of(time()), arb_unknown_fields()).prop_map(|(start, end, extra)| PartTime {
        start,
        end,
        extra,
    })
}

fn ended() -> impl Strategy<Value = ToolTimeEnded> {
    (time(), time(), of(time()), arb_unknown_fields()).prop_map(|(start, end, compacted, extra)| {
        ToolTimeEnded {
            start,
            end,
            compacted,
            extra,
        }
    })
}

fn tool_state() -> impl Strategy<Value = ToolState> {
    let x = arb_unknown_fields;
    prop_oneof![
        (arb_json(), arb_text(), x()).prop_map(|(input, raw, extra)| {
            ToolState::Pending(ToolPending { input, raw, extra })
        }),
        (
            arb_json(),
            of(arb_text()),
            of(json_some()),
            time(),
            x(),
            x()
        )
            .prop_map(|(input, title, metadata, start, time_extra, extra)| {
                ToolState::Running(ToolRunning {
                    input,
                    title,
                    metadata,
                    time: ToolTime {
                        start,
                        extra: time_extra,
                    },
                    extra,
                })
            }),
        (
            (arb_json(), arb_text(), arb_text(), arb_json()),
            (ended(), of(vec(arb_json(), 0..3)), x())
        )
            .prop_map(
                |((input, output, title, metadata), (time, attachments, extra))| {
                    ToolState::Completed(ToolCompleted {
                        input,
                        output,
                        title,
                        metadata,
                        time,
                        attachments,
                        extra,
                    })
                }
            ),
        (arb_json(), arb_text(), of(json_some()), ended(), x()).prop_map(
            |(input, error, metadata, time, extra)| {
                ToolState::Error(ToolError {
                    input,
                    error,
                    metadata,
                    time,
                    extra,
                })
            }
        ),
    ]
}

fn part_body() -> impl Strategy<Value = PartBody> {
    let x = arb_unknown_fields;
    let t = arb_text;
    prop_oneof![
        (
            t(),
            of(any::<bool>()),
            of(any::<bool>()),
            of(part_time()),
            of(json_some()),
            x()
        )
            .prop_map(|(text, synthetic, ignored, time, metadata, extra)| {
                PartBody::Text(TextPart {
                    text,
                    synthetic,
                    ignored,
                    time,
                    metadata,
                    extra,
                })
            }),
        (t(), of(json_some()), part_time(), x()).prop_map(|(text, metadata, time, extra)| {
            PartBody::Reasoning(ReasoningPart {
                text,
                metadata,
                time,
                extra,
            })
        }),
        (t(), t(), tool_state(), of(json_some()), x()).prop_map(
            |(call_id, tool, state, metadata, extra)| {
                PartBody::Tool(ToolPart {
                    call_id,
                    tool,
                    state,
                    metadata,
                    extra,
                })
            }
        ),
        (t(), of(t()), t(), of(json_some()), x()).prop_map(
            |(mime, filename, url, source, extra)| {
                PartBody::File(FilePart {
                    mime,
                    filename,
                    url,
                    source,
                    extra,
                })
            }
        ),
        (t(), of(json_some()), x()).prop_map(|(name, source, extra)| PartBody::Agent(AgentPart {
            name,
            source,
            extra
        })),
        (
            any::<bool>(),
            of(any::<bool>()),
            of(prop_oneof![
                "msg_[a-z0-9]{1,8}".boxed(),
                super::scaled::unicode(8).boxed()
            ]),
            x()
        )
            .prop_map(|(auto, overflow, tail, extra)| {
                PartBody::Compaction(CompactionPart {
                    auto,
                    overflow,
                    tail_start_id: tail.map(MessageId::from),
                    extra,
                })
            }),
        (t(), t(), t(), of(model_ref()), x()).prop_map(
            |(prompt, description, agent, model, extra)| {
                PartBody::Subtask(SubtaskPart {
                    prompt,
                    description,
                    agent,
                    model,
                    extra,
                })
            }
        ),
        (of(t()), x()).prop_map(|(snapshot, extra)| {
            PartBody::StepStart(StepStartPart { snapshot, extra })
        }),
        (t(), of(t()), cost(), tokens(), x()).prop_map(
            |(reason, snapshot, cost, tokens, extra)| {
                PartBody::StepFinish(StepFinishPart {
                    reason,
                    snapshot,
                    cost,
                    tokens,
                    extra,
                })
            }
        ),
        (t(), x())
            .prop_map(|(snapshot, extra)| PartBody::Snapshot(SnapshotPart { snapshot, extra })),
        (t(), vec(t(), 0..3), x()).prop_map(|(hash, files, extra)| PartBody::Patch(PatchPart {
            hash,
            files,
            extra
        })),
        (any::<u32>(), arb_message_error(), time(), x(), x()).prop_map(
            |(attempt, error, created, time_extra, extra)| {
                PartBody::Retry(RetryPart {
                    attempt,
                    error,
                    time: RetryTime {
                        created,
                        extra: time_extra,
                    },
                    extra,
                })
            }
        ),
        (
            "[a-z][a-z-]{0,11}".prop_filter("an unknown kind", |k| {
                !KNOWN_PART_KINDS.contains(&k.as_str())
            }),
            x()
        )
            .prop_map(|(kind, fields)| PartBody::Unknown { kind, fields }),
    ]
}

/// Any part of any kind (including an unknown one) with the given ids.
pub fn arb_part(session: SessionId, message: MessageId, id: PartId) -> impl Strategy<Value = Part> {
    part_body().prop_map(move |body| Part {
        id: id.clone(),
        session_id: session.clone(),
        message_id: message.clone(),
        body,
    })
}
