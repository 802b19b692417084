//! The W1 workload (docs/backends.md, "Workload W1"), with event times, and W1×N; W2,
//! the same with real text.
//!
//! A [`Script`] is one session: what it does at each event time. W1's content is seeded
//! random lowercase letters (incompressible enough that no engine is flattered by
//! compression); W2's is real prose and source files (`corpus`) at seeded places, for
//! what compression buys on a real session. The same seed always gives the same
//! script.
//!
//! One W1 turn, in order (the gap before each event in brackets):
//!
//! - a user message with one 400 B text part (at the turn's start);
//! - an assistant message [50 ms], `start-step` [50 ms];
//! - reasoning: `reasoning-start` [50 ms], 250 deltas of 8 B [20 ms each],
//!   `reasoning-end` [50 ms];
//! - text: `text-start` [50 ms], 200 deltas of 8 B [20 ms each], `text-end` [50 ms];
//! - 3 tools, one after the other: `tool-input-start` [50 ms], `tool-call` with 300 B
//!   of input JSON [50 ms], `tool-result` with a 4,000 B output [1,000 ms: the tool runs];
//! - `finish-step` (`tool-calls`, with usage) [50 ms];
//! - `start-step` [50 ms], text of 100 deltas of 8 B as above, `finish-step` (`stop`)
//!   [50 ms];
//! - `finish` [50 ms].
//!
//! The next turn starts 50 ms after `finish`. Logical bytes per turn:
//! 400 + 2,000 + 1,600 + 3 × (300 + 4,000) + 800 = 17,700.

pub(crate) mod corpus;
mod generate;
mod jsonl;

use forge_core::turn::UserItem;
use forge_core::StreamEvent;
use serde_json::Value;

pub use generate::{
    script, sessions, w1, w1xn, w2, Content, W1_TURN_BYTES, W1_TURN_DELTAS, W1_TURN_MS,
    W1_TURN_TOOLS,
};
pub use jsonl::write_jsonl;

/// What a session does at one moment: the core's item, which a replay file parses into
/// too.
pub use forge_core::turn::Item;
/// An item at its event time (W1's items always carry one).
pub use forge_core::turn::Timed;

/// One session's items, `t_ms` non-decreasing.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Script {
    /// The items in order.
    pub items: Vec<Timed>,
}

/// Every item of every session in event-time order, with its session's index. Ties
/// are broken by session index, then by order within the session (deterministic).
pub fn merge(scripts: &[Script]) -> Vec<(usize, &Timed)> {
    let mut all: Vec<(usize, &Timed)> = scripts
        .iter()
        .enumerate()
        .flat_map(|(i, s)| s.items.iter().map(move |t| (i, t)))
        .collect();
    // Stable: items of one session keep their order among equal times.
    all.sort_by_key(|(i, t)| (t.t_ms, *i));
    all
}

/// Content bytes of a script: user text, reasoning and text deltas, tool input JSON
/// (its serialized length) and tool output.
pub fn logical_bytes(script: &Script) -> u64 {
    script
        .items
        .iter()
        .map(|t| match &t.item {
            Item::User(u) => user_bytes(u),
            Item::Stream(e) => event_bytes(e),
            Item::Session(_) | Item::Assistant(_) | Item::Crash | Item::Unknown { .. } => 0,
        })
        .map(|n| n as u64)
        .sum()
}

/// A user message's text: its `text` and its text parts.
fn user_bytes(u: &UserItem) -> usize {
    let parts = u
        .parts
        .iter()
        .filter(|p| p.get("type") == Some(&Value::from("text")));
    u.text.as_ref().map_or(0, String::len)
        + parts
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .map(str::len)
            .sum::<usize>()
}

fn event_bytes(e: &StreamEvent) -> usize {
    match e {
        StreamEvent::TextDelta { text, .. } | StreamEvent::ReasoningDelta { text, .. } => {
            text.len()
        }
        StreamEvent::ToolCall { input, .. } => json_len(input),
        StreamEvent::ToolResult { output, .. } => match output {
            Value::String(s) => s.len(),
            Value::Object(m) => match m.get("output") {
                Some(Value::String(s)) => s.len(),
                _ => json_len(output),
            },
            other => json_len(other),
        },
        _ => 0,
    }
}

fn json_len(v: &Value) -> usize {
    serde_json::to_string(v).map_or(0, |s| s.len())
}

/// Event time of the last item, ms (0 for an empty script).
pub fn duration_ms(script: &Script) -> u64 {
    script
        .items
        .iter()
        .filter_map(|t| t.t_ms)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_bytes_are_17700_per_turn() {
        for turns in [0, 1, 3, 10] {
            assert_eq!(
                logical_bytes(&w1(turns, 7)),
                W1_TURN_BYTES * u64::from(turns)
            );
            assert_eq!(
                logical_bytes(&w2(turns, 7)),
                W1_TURN_BYTES * u64::from(turns)
            );
        }
    }

    /// W2 is W1 with other bytes: the same events at the same times, each text of the
    /// same length, and real text (spaces, punctuation, newlines), not letters.
    #[test]
    fn w2_has_w1s_shape_and_real_text() {
        let (a, b) = (w1(3, 11), w2(3, 11));
        assert_eq!(a.items.len(), b.items.len());
        let kind = |t: &Timed| match &t.item {
            Item::Stream(e) => serde_json::to_value(e).unwrap()["type"].clone(),
            Item::User(u) => Value::from(format!("user {}", user_bytes(u))),
            _ => Value::from("other"),
        };
        for (x, y) in a.items.iter().zip(&b.items) {
            assert_eq!((x.t_ms, kind(x)), (y.t_ms, kind(y)));
            if let (Item::Stream(e), Item::Stream(f)) = (&x.item, &y.item) {
                assert_eq!(event_bytes(e), event_bytes(f));
            }
        }
        let text: String = b
            .items
            .iter()
            .filter_map(|t| match &t.item {
                Item::Stream(StreamEvent::ToolResult { output, .. }) => {
                    output.as_str().map(str::to_owned)
                }
                _ => None,
            })
            .collect();
        assert!(
            text.contains("fn ") && text.contains('\n'),
            "tools read source files"
        );
        assert_ne!(w2(3, 11), w2(3, 12));
        assert_eq!(w2(3, 11), b);
    }

    #[test]
    fn merge_is_ordered_complete_and_stable() {
        let mut scripts = w1xn(5, 2, 3);
        // Force ties across sessions: two sessions with the same start.
        let base = scripts[0].items[0].t_ms.unwrap();
        let shift = scripts[1].items[0].t_ms.unwrap();
        for t in &mut scripts[1].items {
            t.t_ms = t.t_ms.map(|t| t - shift + base);
        }
        let merged = merge(&scripts);
        let total: usize = scripts.iter().map(|s| s.items.len()).sum();
        assert_eq!(merged.len(), total);
        assert!(merged
            .windows(2)
            .all(|w| (w[0].1.t_ms, w[0].0) <= (w[1].1.t_ms, w[1].0)));
        // Each session's items appear exactly once, in their original order.
        let mut next = vec![0usize; scripts.len()];
        for (i, t) in &merged {
            let expected: &Timed = &scripts[*i].items[next[*i]];
            assert!(std::ptr::eq(*t, expected));
            next[*i] += 1;
        }
        assert!(next.iter().zip(&scripts).all(|(n, s)| *n == s.items.len()));
        assert_eq!(merge(&scripts), merged);
    }
}
