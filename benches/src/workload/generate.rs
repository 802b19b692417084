//! The W1 generator: one session's script turn by turn (see the module docs of
//! [`crate::workload`] for what a turn holds and when), and W1×N.

use forge_core::model::JsonMap;
use forge_core::stream::Usage;
use forge_core::turn::{AssistantItem, UserItem};
use forge_core::StreamEvent;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use super::corpus::{Cursor, Kind};
use super::{Item, Script, Timed};

/// Logical bytes of one W1 turn.
pub const W1_TURN_BYTES: u64 = 17_700;
/// Text and reasoning deltas of one W1 turn.
pub const W1_TURN_DELTAS: u64 = 550;
/// Tool calls of one W1 turn.
pub const W1_TURN_TOOLS: u64 = 3;
/// Event time from the start of one W1 turn to the start of the next, ms.
pub const W1_TURN_MS: u64 = 14_950;

/// Bytes of one text or reasoning delta.
const DELTA_BYTES: usize = 8;
/// Gap before a delta, ms.
const DELTA_GAP_MS: u64 = 20;
/// Gap before every event that is neither a delta nor a tool result, ms.
const EVENT_GAP_MS: u64 = 50;
/// How long a tool runs (`tool-call` to `tool-result`), ms.
const TOOL_MS: u64 = 1_000;
/// Serialized length of a tool call's input JSON.
const TOOL_INPUT_BYTES: usize = 300;
/// Length of a tool's output.
const TOOL_OUTPUT_BYTES: usize = 4_000;
/// `{"path":""}`: the input JSON around the letters.
const TOOL_INPUT_FRAME: &str = r#"{"path":""}"#;

/// What a workload's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Content {
    /// W1: random lowercase letters, which no engine compresses much.
    Letters,
    /// W2: real text (the crate's embedded corpus): prose for the user's messages, the
    /// reasoning and the text; source files for what the tools read.
    Real,
}

impl Content {
    /// `W1` / `W2`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Letters => "W1",
            Self::Real => "W2",
        }
    }
}

/// W1 with `turns` turns, its content drawn from `seed`.
pub fn w1(turns: u32, seed: u64) -> Script {
    script(Content::Letters, turns, seed)
}

/// W2: W1's events, sizes and times with real text, drawn from `seed`.
pub fn w2(turns: u32, seed: u64) -> Script {
    script(Content::Real, turns, seed)
}

/// One session of `content` with `turns` turns, drawn from `seed`.
pub fn script(content: Content, turns: u32, seed: u64) -> Script {
    let mut b = Builder {
        rng: StdRng::seed_from_u64(seed),
        content,
        t: 0,
        context_bytes: 0,
        items: Vec::with_capacity(turns as usize * 575),
    };
    for turn in 0..turns {
        b.turn(turn);
    }
    Script { items: b.items }
}

/// `n` sessions of W1 with `turns` turns each, streaming at once: each has its own
/// content and starts at a random offset in `[0, W1_TURN_MS)`, all drawn from `seed`.
pub fn w1xn(n: u32, turns: u32, seed: u64) -> Vec<Script> {
    sessions(Content::Letters, n, turns, seed)
}

/// [`w1xn`] of `content`.
pub fn sessions(content: Content, n: u32, turns: u32, seed: u64) -> Vec<Script> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let session_seed: u64 = rng.random();
            let offset = rng.random_range(0..W1_TURN_MS);
            let mut script = script(content, turns, session_seed);
            for item in &mut script.items {
                item.t_ms = item.t_ms.map(|t| t + offset);
            }
            script
        })
        .collect()
}

/// Builds one session's items, advancing event time.
struct Builder {
    rng: StdRng,
    content: Content,
    t: u64,
    /// Content so far, for plausible input token counts (4 B a token).
    context_bytes: usize,
    items: Vec<Timed>,
}

enum Block {
    Reasoning,
    Text,
}

impl Builder {
    fn push(&mut self, gap_ms: u64, item: Item) {
        self.t += gap_ms;
        self.items.push(Timed::at(self.t, item));
    }

    fn event(&mut self, gap_ms: u64, e: StreamEvent) {
        self.push(gap_ms, Item::Stream(e));
    }

    fn letters(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| char::from(b'a' + self.rng.random_range(0..26u8)))
            .collect()
    }

    /// A source of `kind` text for one block or tool (`None` for letters), and the
    /// path of its file.
    fn cursor(&mut self, kind: Kind) -> (Option<Cursor>, &'static str) {
        match self.content {
            Content::Letters => (None, ""),
            Content::Real => {
                let (c, path) = Cursor::random(kind, &mut self.rng);
                (Some(c), path)
            }
        }
    }

    /// `n` bytes from `cursor`, or letters.
    fn text(&mut self, cursor: &mut Option<Cursor>, n: usize) -> String {
        match cursor {
            Some(c) => c.take(n),
            None => self.letters(n),
        }
    }

    fn turn(&mut self, turn: u32) {
        let gap = if self.items.is_empty() {
            0
        } else {
            EVENT_GAP_MS
        };
        let (mut prose, _) = self.cursor(Kind::Prose);
        let text = self.text(&mut prose, 400);
        self.context_bytes += text.len();
        self.push(gap, Item::User(UserItem::text(text)));
        self.push(EVENT_GAP_MS, Item::Assistant(AssistantItem::default()));

        let input_tokens = self.context_bytes / 4;
        self.event(EVENT_GAP_MS, StreamEvent::StartStep {});
        self.block(&Block::Reasoning, "r", 2_000);
        self.block(&Block::Text, "t1", 1_600);
        for k in 0..W1_TURN_TOOLS {
            self.tool(&format!("call_{turn}_{k}"));
        }
        // Output tokens: what the model wrote (reasoning, text, tool inputs), 4 B a token.
        let written = 2_000 + 1_600 + W1_TURN_TOOLS as usize * TOOL_INPUT_BYTES;
        self.finish_step("tool-calls", input_tokens, written / 4, 2_000 / 4);

        let input_tokens = self.context_bytes / 4;
        self.event(EVENT_GAP_MS, StreamEvent::StartStep {});
        self.block(&Block::Text, "t2", 800);
        self.finish_step("stop", input_tokens, 800 / 4, 0);
        self.event(
            EVENT_GAP_MS,
            StreamEvent::Finish {
                finish_reason: Some("stop".to_owned()),
                raw_finish_reason: None,
                total_usage: None,
            },
        );
    }

    /// Start, `bytes / 8` deltas, end.
    fn block(&mut self, kind: &Block, id: &str, bytes: usize) {
        let id = id.to_owned();
        self.event(
            EVENT_GAP_MS,
            match kind {
                Block::Reasoning => StreamEvent::ReasoningStart {
                    id: id.clone(),
                    provider_metadata: None,
                },
                Block::Text => StreamEvent::TextStart {
                    id: id.clone(),
                    provider_metadata: None,
                },
            },
        );
        let (mut prose, _) = self.cursor(Kind::Prose);
        for _ in 0..bytes / DELTA_BYTES {
            let text = self.text(&mut prose, DELTA_BYTES);
            let id = id.clone();
            self.event(
                DELTA_GAP_MS,
                match kind {
                    Block::Reasoning => StreamEvent::ReasoningDelta {
                        id,
                        text,
                        provider_metadata: None,
                    },
                    Block::Text => StreamEvent::TextDelta {
                        id,
                        text,
                        provider_metadata: None,
                    },
                },
            );
        }
        self.context_bytes += bytes;
        self.event(
            EVENT_GAP_MS,
            match kind {
                Block::Reasoning => StreamEvent::ReasoningEnd {
                    id,
                    provider_metadata: None,
                },
                Block::Text => StreamEvent::TextEnd {
                    id,
                    provider_metadata: None,
                    citations: None,
                },
            },
        );
    }

    /// `tool-input-start`, `tool-call`, and the result one second later.
    fn tool(&mut self, call_id: &str) {
        let tool_name = "read".to_owned();
        self.event(
            EVENT_GAP_MS,
            StreamEvent::ToolInputStart {
                id: call_id.to_owned(),
                tool_name: tool_name.clone(),
                provider_metadata: None,
            },
        );
        let (mut file, file_path) = self.cursor(Kind::Code);
        let path_bytes = TOOL_INPUT_BYTES - TOOL_INPUT_FRAME.len();
        let path = match file {
            // A real path, then more of them as a reading list would hold, to W1's size.
            Some(_) => {
                let mut list = String::new();
                while list.len() < path_bytes {
                    list.push_str(file_path);
                    list.push(' ');
                }
                list.truncate(path_bytes);
                list
            }
            None => self.letters(path_bytes),
        };
        let mut input = JsonMap::new();
        input.insert("path".to_owned(), Value::String(path));
        self.event(
            EVENT_GAP_MS,
            StreamEvent::ToolCall {
                tool_call_id: call_id.to_owned(),
                tool_name: tool_name.clone(),
                input: Value::Object(input),
                provider_metadata: None,
                provider_executed: false,
            },
        );
        let output = self.text(&mut file, TOOL_OUTPUT_BYTES);
        self.context_bytes += TOOL_INPUT_BYTES + TOOL_OUTPUT_BYTES;
        self.event(
            TOOL_MS,
            StreamEvent::ToolResult {
                tool_call_id: call_id.to_owned(),
                tool_name,
                output: Value::String(output),
                preliminary: false,
                provider_metadata: None,
            },
        );
    }

    fn finish_step(
        &mut self,
        reason: &str,
        input_tokens: usize,
        output_tokens: usize,
        reasoning_tokens: usize,
    ) {
        self.event(
            EVENT_GAP_MS,
            StreamEvent::FinishStep {
                finish_reason: reason.to_owned(),
                raw_finish_reason: None,
                usage: Usage {
                    input_tokens: Some(input_tokens as u64),
                    output_tokens: Some(output_tokens as u64),
                    total_tokens: Some((input_tokens + output_tokens) as u64),
                    reasoning_tokens: (reasoning_tokens > 0).then_some(reasoning_tokens as u64),
                    ..Usage::default()
                },
                cost: None,
                snapshot: None,
                patch: None,
                provider_metadata: None,
                response: None,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{duration_ms, logical_bytes};

    fn events(s: &Script) -> impl Iterator<Item = (u64, &StreamEvent)> {
        s.items.iter().filter_map(|t| match &t.item {
            Item::Stream(e) => Some((t.t_ms.expect("timed"), e)),
            _ => None,
        })
    }

    fn count(s: &Script, kind: &str) -> usize {
        events(s).filter(|(_, e)| e.kind() == kind).count()
    }

    #[test]
    fn per_turn_counts_match_w1() {
        let turns = 4;
        let s = w1(turns, 1);
        let t = turns as usize;
        let deltas = count(&s, "text-delta") + count(&s, "reasoning-delta");
        assert_eq!(deltas as u64, W1_TURN_DELTAS * u64::from(turns));
        assert_eq!(count(&s, "reasoning-delta"), 250 * t);
        assert_eq!(count(&s, "text-delta"), 300 * t);
        for kind in ["tool-input-start", "tool-call", "tool-result"] {
            assert_eq!(count(&s, kind) as u64, W1_TURN_TOOLS * u64::from(turns));
        }
        assert_eq!(count(&s, "start-step"), 2 * t);
        assert_eq!(count(&s, "finish-step"), 2 * t);
        assert_eq!(count(&s, "finish"), t);
        let users = s
            .items
            .iter()
            .filter(|i| matches!(i.item, Item::User(_)))
            .count();
        let assistants = s
            .items
            .iter()
            .filter(|i| i.item == Item::Assistant(AssistantItem::default()))
            .count();
        assert_eq!((users, assistants), (t, t));
    }

    #[test]
    fn sizes_and_content_are_as_specified() {
        let s = w1(2, 3);
        for (_, e) in events(&s) {
            match e {
                StreamEvent::TextDelta { text, .. } | StreamEvent::ReasoningDelta { text, .. } => {
                    assert_eq!(text.len(), DELTA_BYTES);
                    assert!(text.bytes().all(|b| b.is_ascii_lowercase()));
                }
                StreamEvent::ToolCall { input, .. } => {
                    assert_eq!(serde_json::to_string(input).unwrap().len(), 300);
                }
                StreamEvent::ToolResult { output, .. } => {
                    assert_eq!(output.as_str().unwrap().len(), 4_000);
                }
                _ => {}
            }
        }
        let Item::User(u) = &s.items[0].item else {
            panic!("a turn starts with the user message")
        };
        let text = u.text.as_deref().expect("a text part");
        assert!(u.parts.is_empty());
        assert_eq!(text.len(), 400);
        assert!(text.bytes().all(|b| b.is_ascii_lowercase()));
    }

    #[test]
    fn event_times_follow_w1() {
        let s = w1(3, 5);
        assert_eq!(s.items[0].t_ms, Some(0));
        assert!(s.items.windows(2).all(|w| w[0].t_ms <= w[1].t_ms));
        let mut prev: Option<(u64, &StreamEvent)> = None;
        let mut call_at = std::collections::HashMap::new();
        for (t, e) in events(&s) {
            match e {
                StreamEvent::TextDelta { .. } | StreamEvent::ReasoningDelta { .. } => {
                    let (pt, _) = prev.unwrap();
                    assert_eq!(t - pt, DELTA_GAP_MS);
                }
                StreamEvent::ToolCall { tool_call_id, .. } => {
                    call_at.insert(tool_call_id.clone(), t);
                }
                StreamEvent::ToolResult { tool_call_id, .. } => {
                    assert_eq!(t - call_at[tool_call_id], TOOL_MS);
                }
                _ => {}
            }
            prev = Some((t, e));
        }
        // Each turn starts 50 ms after the previous finish.
        let starts: Vec<u64> = s
            .items
            .iter()
            .filter(|i| matches!(i.item, Item::User(_)))
            .filter_map(|i| i.t_ms)
            .collect();
        assert_eq!(starts, [0, W1_TURN_MS, 2 * W1_TURN_MS]);
        let finishes: Vec<u64> = events(&s)
            .filter(|(_, e)| e.kind() == "finish")
            .map(|(t, _)| t)
            .collect();
        assert_eq!(finishes[0] + EVENT_GAP_MS, starts[1]);
        assert_eq!(duration_ms(&s), 3 * W1_TURN_MS - EVENT_GAP_MS);
        assert_eq!(duration_ms(&Script::default()), 0);
    }

    #[test]
    fn same_seed_same_script_other_seed_other_content() {
        assert_eq!(w1(2, 42), w1(2, 42));
        let (a, b) = (w1(2, 42), w1(2, 43));
        assert_ne!(a, b);
        // Only the content differs, not the shape or the times.
        assert_eq!(a.items.len(), b.items.len());
        assert!(a.items.iter().zip(&b.items).all(|(x, y)| x.t_ms == y.t_ms));
        assert_eq!(w1xn(3, 1, 9), w1xn(3, 1, 9));
        assert_ne!(w1xn(3, 1, 9), w1xn(3, 1, 10));
    }

    #[test]
    fn w1xn_sessions_differ_and_start_within_one_turn() {
        let scripts = w1xn(8, 2, 11);
        assert_eq!(scripts.len(), 8);
        for s in &scripts {
            assert!(s.items[0].t_ms < Some(W1_TURN_MS));
            assert_eq!(logical_bytes(s), 2 * W1_TURN_BYTES);
        }
        for (i, a) in scripts.iter().enumerate() {
            for b in &scripts[i + 1..] {
                assert_ne!(a.items[0].item, b.items[0].item, "own content per session");
            }
        }
    }

    #[test]
    fn every_stream_event_round_trips_through_serde() {
        for (_, e) in events(&w1(2, 8)) {
            let json = serde_json::to_string(e).unwrap();
            assert_eq!(&StreamEvent::from_json(&json).unwrap(), e, "{json}");
        }
    }
}
