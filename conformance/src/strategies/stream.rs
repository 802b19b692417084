//! Valid model streams (the AI-SDK `fullStream` vocabulary): text, reasoning and tool
//! blocks interleaved inside steps, ending with finish, error, abort or nothing.

use forge_core::stream::{StepPatch, Usage};
use forge_core::StreamEvent;
use proptest::collection::vec;
use proptest::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A model stream: steps, then how it ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamSpec {
    /// The model steps.
    pub steps: Vec<StepSpec>,
    /// The last event.
    pub end: StreamEnd,
}

/// One model step: `start-step`, its blocks (interleaved), `finish-step`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepSpec {
    /// Text, reasoning and tool blocks.
    pub blocks: Vec<BlockSpec>,
    /// How the blocks' events interleave: at each point the next event comes from the
    /// `order[i] % open`-th unfinished block (sequential when empty).
    pub order: Vec<u8>,
    /// The finish reason.
    pub reason: String,
    /// Whether the step reports a patch.
    pub patch: bool,
}

/// A block inside a step.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum BlockSpec {
    /// `text-start`, one `text-delta` per string, `text-end`.
    Text(Vec<String>),
    /// `reasoning-start`, deltas, `reasoning-end`.
    Reasoning(Vec<String>),
    /// A tool call.
    Tool {
        /// Tool name.
        tool: String,
        /// 0: no `tool-input-start`; n: `tool-input-start`, n-1 input deltas and
        /// `tool-input-end` before the `tool-call`.
        streamed_input: u8,
        /// What follows the call.
        outcome: ToolOutcome,
    },
}

/// How a tool call ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ToolOutcome {
    /// `tool-result` with a string output.
    Output(String),
    /// `tool-result` with `{output, title}`.
    Titled(String, String),
    /// `tool-error`.
    Failed(String),
    /// No result before the stream goes on (finalize must close it).
    Unanswered,
}

/// The last event of a stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamEnd {
    /// `finish`.
    Finish,
    /// `error` with a message.
    Error(String),
    /// `abort`.
    Abort,
    /// Nothing: the stream just stops.
    Open,
}

fn delta() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z]{1,5}",
        2 => "[ a-z]{0,3}",
        1 => prop::sample::select(vec![" ", "\n", "  ", "é", "🦀 ", "\t", "\u{3000}"])
            .prop_map(str::to_owned),
    ]
}

fn block() -> impl Strategy<Value = BlockSpec> {
    let outcome = prop_oneof![
        3 => "[a-z ]{0,12}".prop_map(ToolOutcome::Output),
        1 => ("[a-z]{0,8}", "[a-z]{0,8}").prop_map(|(o, t)| ToolOutcome::Titled(o, t)),
        1 => "[a-z ]{1,12}".prop_map(ToolOutcome::Failed),
        1 => Just(ToolOutcome::Unanswered),
    ];
    prop_oneof![
        3 => vec(delta(), 0..6).prop_map(BlockSpec::Text),
        2 => vec(delta(), 0..6).prop_map(BlockSpec::Reasoning),
        2 => (
            prop::sample::select(vec!["bash", "edit", "read", "grep"]),
            0u8..4,
            outcome
        )
            .prop_map(|(tool, streamed_input, outcome)| BlockSpec::Tool {
                tool: tool.to_owned(),
                streamed_input,
                outcome,
            }),
    ]
}

fn step() -> impl Strategy<Value = StepSpec> {
    (
        vec(block(), 0..4),
        vec(any::<u8>(), 0..12),
        prop::sample::select(vec!["stop", "tool-calls", "length"]),
        any::<bool>(),
    )
        .prop_map(|(blocks, order, reason, patch)| StepSpec {
            blocks,
            order,
            reason: reason.to_owned(),
            patch,
        })
}

/// Any valid stream: 1–3 steps of interleaved blocks, ending any way.
pub fn stream_spec() -> impl Strategy<Value = StreamSpec> {
    let end = prop_oneof![
        3 => Just(StreamEnd::Finish),
        1 => "[a-z ]{1,10}".prop_map(StreamEnd::Error),
        1 => Just(StreamEnd::Abort),
        1 => Just(StreamEnd::Open),
    ];
    (vec(step(), 1..4), end).prop_map(|(steps, end)| StreamSpec { steps, end })
}

fn block_events(block: &BlockSpec, n: usize) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    match block {
        BlockSpec::Text(deltas) | BlockSpec::Reasoning(deltas) => {
            let text = matches!(block, BlockSpec::Text(_));
            let id = format!("{}{n}", if text { "t" } else { "r" });
            out.push(if text {
                StreamEvent::TextStart {
                    id: id.clone(),
                    provider_metadata: None,
                }
            } else {
                StreamEvent::ReasoningStart {
                    id: id.clone(),
                    provider_metadata: None,
                }
            });
            for d in deltas {
                let (id, text_) = (id.clone(), d.clone());
                out.push(if text {
                    StreamEvent::TextDelta {
                        id,
                        text: text_,
                        provider_metadata: None,
                    }
                } else {
                    StreamEvent::ReasoningDelta {
                        id,
                        text: text_,
                        provider_metadata: None,
                    }
                });
            }
            out.push(if text {
                StreamEvent::TextEnd {
                    id,
                    provider_metadata: None,
                    citations: None,
                }
            } else {
                StreamEvent::ReasoningEnd {
                    id,
                    provider_metadata: None,
                }
            });
        }
        BlockSpec::Tool {
            tool,
            streamed_input,
            outcome,
        } => {
            let id = format!("call_{n}");
            if *streamed_input > 0 {
                out.push(StreamEvent::ToolInputStart {
                    id: id.clone(),
                    tool_name: tool.clone(),
                    provider_metadata: None,
                });
                for i in 1..*streamed_input {
                    out.push(StreamEvent::ToolInputDelta {
                        id: id.clone(),
                        delta: format!("{{\"n\":{i}"),
                    });
                }
                out.push(StreamEvent::ToolInputEnd { id: id.clone() });
            }
            out.push(StreamEvent::ToolCall {
                tool_call_id: id.clone(),
                tool_name: tool.clone(),
                input: json!({"n": n, "args": ["a", 1]}),
                provider_metadata: None,
                provider_executed: false,
            });
            let (tool_call_id, tool_name) = (id, tool.clone());
            match outcome {
                ToolOutcome::Output(o) => out.push(StreamEvent::ToolResult {
                    tool_call_id,
                    tool_name,
                    output: Value::String(o.clone()),
                    preliminary: false,
                    provider_metadata: None,
                }),
                ToolOutcome::Titled(o, t) => out.push(StreamEvent::ToolResult {
                    tool_call_id,
                    tool_name,
                    output: json!({"output": o, "title": t}),
                    preliminary: false,
                    provider_metadata: None,
                }),
                ToolOutcome::Failed(e) => out.push(StreamEvent::ToolError {
                    tool_call_id,
                    tool_name,
                    error: Value::String(e.clone()),
                    provider_metadata: None,
                }),
                ToolOutcome::Unanswered => {}
            }
        }
    }
    out
}

fn interleave(
    mut seqs: Vec<std::collections::VecDeque<StreamEvent>>,
    order: &[u8],
) -> Vec<StreamEvent> {
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        let open: Vec<usize> = (0..seqs.len()).filter(|&k| !seqs[k].is_empty()).collect();
        if open.is_empty() {
            return out;
        }
        let pick = match order.get(i) {
            Some(b) => open[usize::from(*b) % open.len()],
            None => open[0],
        };
        i += 1;
        if let Some(e) = seqs[pick].pop_front() {
            out.push(e);
        }
    }
}

impl StreamSpec {
    /// The stream's events, in order.
    pub fn events(&self) -> Vec<StreamEvent> {
        let mut out = vec![StreamEvent::Start {}];
        let mut n = 0;
        for (k, step) in self.steps.iter().enumerate() {
            out.push(StreamEvent::StartStep {});
            let seqs = step
                .blocks
                .iter()
                .map(|b| {
                    n += 1;
                    block_events(b, n).into()
                })
                .collect();
            out.extend(interleave(seqs, &step.order));
            let k = k as u64;
            out.push(StreamEvent::FinishStep {
                finish_reason: step.reason.clone(),
                raw_finish_reason: None,
                usage: Usage {
                    input_tokens: Some(100 + k),
                    output_tokens: Some(10 + k),
                    ..Usage::default()
                },
                cost: Some(0.25),
                snapshot: None,
                patch: step.patch.then(|| StepPatch {
                    hash: format!("h{k}"),
                    files: vec![format!("src/f{k}.rs")],
                }),
                provider_metadata: None,
                response: None,
            });
        }
        match &self.end {
            StreamEnd::Finish => out.push(StreamEvent::Finish {
                finish_reason: Some("stop".into()),
                raw_finish_reason: None,
                total_usage: None,
            }),
            StreamEnd::Error(e) => out.push(StreamEvent::Error {
                error: Value::String(e.clone()),
            }),
            StreamEnd::Abort => out.push(StreamEvent::Abort { reason: None }),
            StreamEnd::Open => {}
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategies::expected::{feed, Expected};

    #[test]
    fn blocks_interleave_but_keep_their_own_order() {
        let spec = StreamSpec {
            steps: vec![StepSpec {
                blocks: vec![
                    BlockSpec::Text(vec!["a".into(), "b ".into()]),
                    BlockSpec::Reasoning(vec!["r".into()]),
                ],
                order: vec![0, 1, 1, 0],
                reason: "stop".into(),
                patch: true,
            }],
            end: StreamEnd::Finish,
        };
        let kinds: Vec<&str> = spec.events().iter().map(StreamEvent::kind).collect();
        assert_eq!(
            kinds,
            [
                "start",
                "start-step",
                "text-start",
                "reasoning-start",
                "reasoning-delta",
                "text-delta",
                "text-delta",
                "text-end",
                "reasoning-end",
                "finish-step",
                "finish"
            ]
        );
        let fed = feed(&spec.events());
        assert_eq!(
            fed.parts[1],
            Expected::Block {
                reasoning: false,
                streamed: "ab ".into(),
                closed: Some("ab ".into())
            }
        );
        assert_eq!(fed.parts.last(), Some(&Expected::Patch("h0".into())));
        assert_eq!(fed.ended, Some(StreamEnd::Finish));
    }
}
