//! UTF-16 surrogate halves in JSON lines, as providers emit them: a model that chunks
//! its output mid-character splits a surrogate pair between two deltas, and JSON
//! encoders (JavaScript's `JSON.stringify` among them) write each lone half as a
//! `\uD83D` escape. Strict JSON parsers refuse such a line, and a Rust string cannot
//! hold half a character.
//!
//! [`mark`] rewrites each lone half of a line into a marker that parses (the
//! noncharacter U+FDD0, then the half's offset from U+D800 as a private-use character);
//! [`Joiner`] joins a delta that ends with a high half and the next delta of the same
//! block that starts with the low half into the character they make. A half that is
//! never completed, and any half outside a delta's text, becomes U+FFFD (the
//! replacement character), with a warning.

use std::collections::HashMap;

use forge_core::StreamEvent;
use serde_json::Value;

use super::line::Line;

/// Starts a marker; never in a line that is rewritten (such a line is not).
const MARK: char = '\u{FDD0}';
/// The second character of a marker is `BASE` + (half − U+D800).
const BASE: u32 = 0xE000;
const HIGH: std::ops::RangeInclusive<u32> = 0xD800..=0xDBFF;
const LOW: std::ops::RangeInclusive<u32> = 0xDC00..=0xDFFF;
/// What a half that is never completed becomes.
pub(crate) const REPLACEMENT: char = '\u{FFFD}';

/// Whether `line` has a `\u` escape of a surrogate half (paired or not): only such a
/// line can need [`mark`].
pub(crate) fn has_surrogate_escape(line: &str) -> bool {
    let b = line.as_bytes();
    b.windows(4).any(|w| {
        w[0] == b'\\' && w[1] == b'u' && matches!(w[2], b'd' | b'D') && {
            matches!(w[3], b'8'..=b'9' | b'a'..=b'f' | b'A'..=b'F')
        }
    })
}

/// `line` with each lone surrogate half written as a marker, or `None` when it has
/// none (or holds U+FDD0 already, in which case a marker could not be told from text).
/// Escapes are read as JSON reads them: `\\uD83D` is a backslash and text, not a half.
pub(crate) fn mark(line: &str) -> Option<String> {
    if line.contains(MARK) || line.to_ascii_lowercase().contains("\\ufdd0") {
        return None;
    }
    let mut out = String::with_capacity(line.len() + 8);
    let mut rest = line;
    let mut in_string = false;
    let mut marked = false;
    while let Some(c) = rest.chars().next() {
        if !in_string {
            in_string = c == '"';
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        match c {
            '"' => {
                in_string = false;
                out.push(c);
                rest = &rest[1..];
            }
            '\\' => match escaped_unit(rest) {
                Some(unit) if HIGH.contains(&unit) => {
                    match escaped_unit(&rest[6..]).filter(|u| LOW.contains(u)) {
                        // A pair: JSON reads it as one character.
                        Some(_) => {
                            out.push_str(&rest[..12]);
                            rest = &rest[12..];
                        }
                        None => {
                            push_marker(&mut out, unit);
                            marked = true;
                            rest = &rest[6..];
                        }
                    }
                }
                Some(unit) if LOW.contains(&unit) => {
                    push_marker(&mut out, unit);
                    marked = true;
                    rest = &rest[6..];
                }
                // Any other escape: its backslash and the character after it.
                _ => {
                    let end = 1 + rest[1..].chars().next().map_or(0, char::len_utf8);
                    out.push_str(&rest[..end]);
                    rest = &rest[end..];
                }
            },
            _ => {
                out.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
    }
    marked.then_some(out)
}

/// The code unit of a `\uXXXX` escape at the start of `s`.
fn escaped_unit(s: &str) -> Option<u32> {
    let hex = s.strip_prefix("\\u")?.get(..4)?;
    u32::from_str_radix(hex, 16).ok()
}

fn push_marker(out: &mut String, unit: u32) {
    out.push(MARK);
    // `unit - 0xD800` < 0x800: E000..E7FF, all valid characters.
    out.push(char::from_u32(BASE + (unit - 0xD800)).unwrap_or(REPLACEMENT));
}

/// The half a marker at the start of `s` stands for, and the marker's length.
fn marker_at(s: &str) -> Option<(u32, usize)> {
    let mut chars = s.chars();
    if chars.next()? != MARK {
        return None;
    }
    let second = chars.next()?;
    let unit = u32::from(second).checked_sub(BASE)? + 0xD800;
    (HIGH.contains(&unit) || LOW.contains(&unit))
        .then_some((unit, MARK.len_utf8() + second.len_utf8()))
}

/// `s` with every marker replaced by U+FFFD; how many there were.
fn replace_markers(s: &mut String) -> usize {
    if !s.contains(MARK) {
        return 0;
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    let mut n = 0;
    while let Some(at) = rest.find(MARK) {
        out.push_str(&rest[..at]);
        match marker_at(&rest[at..]) {
            Some((_, len)) => {
                out.push(REPLACEMENT);
                n += 1;
                rest = &rest[at + len..];
            }
            None => {
                out.push(MARK);
                rest = &rest[at + MARK.len_utf8()..];
            }
        }
    }
    out.push_str(rest);
    *s = out;
    n
}

/// Replaces the markers of every string of `v` (keys too) by U+FFFD, but for the text
/// of a delta (`text` of `text-delta` / `reasoning-delta`, `delta` of
/// `tool-input-delta`), which the [`Joiner`] reads; how many were replaced.
pub(crate) fn replace_outside_deltas(
    kind: &str,
    map: &mut serde_json::Map<String, Value>,
) -> usize {
    let kept = match kind {
        "text-delta" | "reasoning-delta" => Some("text"),
        "tool-input-delta" => Some("delta"),
        _ => None,
    };
    let mut n = 0;
    let entries = std::mem::take(map);
    for (mut key, mut value) in entries {
        n += replace_markers(&mut key);
        if Some(key.as_str()) != kept || !value.is_string() {
            n += replace_in(&mut value);
        }
        map.insert(key, value);
    }
    n
}

/// Replaces the markers of a delta's text by U+FFFD (a line read alone, with no next
/// delta to join); how many were replaced.
pub(crate) fn replace_in_delta(line: &mut Line) -> usize {
    match line {
        Line::Stream(event) => delta_text(event).map_or(0, |(_, _, text)| replace_markers(text)),
        _ => 0,
    }
}

fn replace_in(v: &mut Value) -> usize {
    match v {
        Value::String(s) => replace_markers(s),
        Value::Array(items) => items.iter_mut().map(replace_in).sum(),
        Value::Object(map) => replace_outside_deltas("", map),
        _ => 0,
    }
}

/// Which delta stream a block's text goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Stream {
    Text,
    Reasoning,
    ToolInput,
}

/// Joins surrogate halves split between the deltas of a block (see the module).
#[derive(Debug, Default)]
pub(crate) struct Joiner {
    /// A high half that ended a block's last delta, waiting for the low half.
    pending: HashMap<(Stream, String), u32>,
}

/// What [`Joiner::push`] makes of a line: deltas of U+FFFD to apply before it (for high
/// halves its line shows will not be completed), the line itself (`None`: its delta
/// held nothing but a high half), and how many halves became U+FFFD.
#[derive(Debug, Default)]
pub(crate) struct Joined {
    pub before: Vec<Line>,
    pub line: Option<Line>,
    pub replaced: usize,
}

impl Joiner {
    /// Whether a high half waits for its low half.
    #[cfg(test)]
    fn is_idle(&self) -> bool {
        self.pending.is_empty()
    }

    /// Takes the next line, `marked` when its text was rewritten by [`mark`].
    pub(crate) fn push(&mut self, line: Line, marked: bool) -> Joined {
        let mut joined = Joined::default();
        let Line::Stream(mut event) = line else {
            // A framing line or a crash ends every block's stream.
            self.flush_all(&mut joined);
            joined.line = Some(line);
            return joined;
        };
        if !marked && self.pending.is_empty() {
            // Nearly every line: nothing to join, nothing held.
            joined.line = Some(Line::Stream(event));
            return joined;
        }
        if let Some((stream, id, text)) = delta_text(&mut event) {
            let key = (stream, id.clone());
            let pending = self.pending.remove(&key);
            if pending.is_none() && !marked {
                // Another block holds a half; this one has nothing to join.
                joined.line = Some(Line::Stream(event));
                return joined;
            }
            let mut out = String::with_capacity(text.len() + 4);
            let mut rest = text.as_str();
            // Markers are read only in a marked line: in any other, U+FDD0 is text.
            if let Some(high) = pending {
                match marker_at(rest).filter(|(u, _)| marked && LOW.contains(u)) {
                    Some((low, len)) => {
                        let c = 0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00);
                        out.push(char::from_u32(c).unwrap_or(REPLACEMENT));
                        rest = &rest[len..];
                    }
                    None => {
                        out.push(REPLACEMENT);
                        joined.replaced += 1;
                    }
                }
            }
            // A high half at the very end waits for the next delta of the block.
            let mut tail = None;
            if let Some(at) = rest.rfind(MARK).filter(|_| marked) {
                if let Some((unit, len)) = marker_at(&rest[at..]) {
                    if HIGH.contains(&unit) && at + len == rest.len() {
                        tail = Some(unit);
                        rest = &rest[..at];
                    }
                }
            }
            out.push_str(rest);
            if marked {
                joined.replaced += replace_markers(&mut out);
            }
            if let Some(high) = tail {
                self.pending.insert(key, high);
            }
            *text = out;
            if !text.is_empty() || tail.is_none() {
                joined.line = Some(Line::Stream(event));
            }
            return joined;
        }
        match ends(&event) {
            Ends::Block(stream, id) => {
                if self.pending.remove(&(stream, id.to_owned())).is_some() {
                    joined.before.push(replacement(stream, id));
                    joined.replaced += 1;
                }
            }
            Ends::All => self.flush_all(&mut joined),
            Ends::Nothing => {}
        }
        joined.line = Some(Line::Stream(event));
        joined
    }

    /// Every pending half as a delta of U+FFFD (the input ended, or its turn did).
    pub(crate) fn flush(&mut self) -> Joined {
        let mut joined = Joined::default();
        self.flush_all(&mut joined);
        joined
    }

    fn flush_all(&mut self, joined: &mut Joined) {
        let mut pending: Vec<_> = self.pending.drain().map(|(k, _)| k).collect();
        pending.sort_by(|a, b| a.1.cmp(&b.1));
        for (stream, id) in pending {
            joined.before.push(replacement(stream, &id));
            joined.replaced += 1;
        }
    }
}

/// The stream, block id and text of a delta event.
fn delta_text(event: &mut StreamEvent) -> Option<(Stream, &String, &mut String)> {
    match event {
        StreamEvent::TextDelta { id, text, .. } => Some((Stream::Text, id, text)),
        StreamEvent::ReasoningDelta { id, text, .. } => Some((Stream::Reasoning, id, text)),
        StreamEvent::ToolInputDelta { id, delta } => Some((Stream::ToolInput, id, delta)),
        _ => None,
    }
}

enum Ends<'a> {
    Block(Stream, &'a str),
    All,
    Nothing,
}

/// Which blocks' delta streams `event` ends.
fn ends(event: &StreamEvent) -> Ends<'_> {
    match event {
        StreamEvent::TextEnd { id, .. } => Ends::Block(Stream::Text, id),
        StreamEvent::ReasoningEnd { id, .. } => Ends::Block(Stream::Reasoning, id),
        StreamEvent::ToolInputEnd { id } => Ends::Block(Stream::ToolInput, id),
        StreamEvent::ToolCall { tool_call_id, .. } => Ends::Block(Stream::ToolInput, tool_call_id),
        StreamEvent::FinishStep { .. }
        | StreamEvent::Finish { .. }
        | StreamEvent::Error { .. }
        | StreamEvent::Abort { .. } => Ends::All,
        _ => Ends::Nothing,
    }
}

/// A delta of U+FFFD for the block.
fn replacement(stream: Stream, id: &str) -> Line {
    let id = id.to_owned();
    let text = REPLACEMENT.to_string();
    Line::Stream(match stream {
        Stream::Text => StreamEvent::TextDelta {
            id,
            text,
            provider_metadata: None,
        },
        Stream::Reasoning => StreamEvent::ReasoningDelta {
            id,
            text,
            provider_metadata: None,
        },
        Stream::ToolInput => StreamEvent::ToolInputDelta { id, delta: text },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delta(text: &str) -> Line {
        Line::Stream(StreamEvent::TextDelta {
            id: "t".into(),
            text: text.into(),
            provider_metadata: None,
        })
    }

    fn text_of(line: Option<&Line>) -> String {
        match line {
            Some(Line::Stream(StreamEvent::TextDelta { text, .. })) => text.clone(),
            other => panic!("not a text delta: {other:?}"),
        }
    }

    /// The text of a line's delta after marking and parsing it as JSON.
    fn marked_text(json_text: &str) -> String {
        let line = format!(r#"{{"text":"{json_text}"}}"#);
        let marked = mark(&line).unwrap_or(line);
        let v: Value = serde_json::from_str(&marked).unwrap();
        v["text"].as_str().unwrap().to_owned()
    }

    #[test]
    fn only_lone_halves_are_marked_and_escaped_backslashes_are_text() {
        assert!(mark(r#"{"text":"\ud83d\ude00 paired"}"#).is_none());
        assert!(mark(r#"{"text":"\\ud83d is text"}"#).is_none());
        assert!(mark(r#"{"text":"plain"}"#).is_none());
        let m = mark(r#"{"text":"a\ud83d","b":"\uDE00 \u00e9 \"q\""}"#).unwrap();
        let v: Value = serde_json::from_str(&m).unwrap();
        assert_eq!(
            marker_at(v["text"].as_str().unwrap().get(1..).unwrap())
                .unwrap()
                .0,
            0xD83D
        );
        assert!(v["b"].as_str().unwrap().ends_with(" é \"q\""));
        // A line holding U+FDD0 already is not rewritten.
        assert!(mark("{\"text\":\"\u{FDD0}\\ud83d\"}").is_none());
        assert!(mark(r#"{"text":"\uFDD0\ud83d"}"#).is_none());
        assert!(has_surrogate_escape(r"\uDbFF") && !has_surrogate_escape(r"\u00e9"));
    }

    #[test]
    fn a_pair_split_between_deltas_is_joined() {
        let mut j = Joiner::default();
        let a = j.push(delta(&marked_text(r"Smile \ud83d")), true);
        assert_eq!(text_of(a.line.as_ref()), "Smile ");
        assert!(!j.is_idle());
        let b = j.push(delta(&marked_text(r"\ude00 and")), true);
        assert_eq!(text_of(b.line.as_ref()), "\u{1F600} and");
        assert_eq!(a.replaced + b.replaced, 0);
        assert!(j.is_idle());
    }

    #[test]
    fn a_half_never_completed_becomes_the_replacement_character() {
        let mut j = Joiner::default();
        // A high half followed by a delta without its low half.
        j.push(delta(&marked_text(r"a\ud83d")), true);
        let b = j.push(delta(" b"), false);
        assert_eq!(text_of(b.line.as_ref()), "\u{FFFD} b");
        assert_eq!(b.replaced, 1);
        // A lone low half, and a high half inside a delta.
        let c = j.push(delta(&marked_text(r"\ude00x\ud83dy")), true);
        assert_eq!(text_of(c.line.as_ref()), "\u{FFFD}x\u{FFFD}y");
        assert_eq!(c.replaced, 2);
        // A high half alone in its delta, then the block ends: a delta of U+FFFD first.
        let d = j.push(delta(&marked_text(r"\ud83d")), true);
        assert!(d.line.is_none());
        let end = Line::Stream(StreamEvent::TextEnd {
            id: "t".into(),
            provider_metadata: None,
            citations: None,
        });
        let e = j.push(end, false);
        assert_eq!(e.before.len(), 1);
        assert_eq!(text_of(Some(&e.before[0])), "\u{FFFD}");
        assert!(matches!(
            e.line,
            Some(Line::Stream(StreamEvent::TextEnd { .. }))
        ));
        // At the end of the input.
        j.push(delta(&marked_text(r"z\ud83d")), true);
        assert_eq!(j.flush().before.len(), 1);
        assert!(j.is_idle());
    }

    #[test]
    fn halves_outside_a_deltas_text_become_the_replacement_character() {
        let line =
            r#"{"type":"tool-result","output":{"note":"x\ud83d","l":["\ude00"]},"text":"\ud83d"}"#;
        let marked = mark(line).unwrap();
        let Value::Object(mut map) = serde_json::from_str(&marked).unwrap() else {
            unreachable!()
        };
        assert_eq!(replace_outside_deltas("tool-result", &mut map), 3);
        assert_eq!(map["output"]["note"], "x\u{FFFD}");
        assert_eq!(map["output"]["l"][0], "\u{FFFD}");
        assert_eq!(map["text"], "\u{FFFD}");
        // A delta's text is left for the joiner.
        let marked = mark(r#"{"type":"text-delta","id":"t","text":"\ud83d"}"#).unwrap();
        let Value::Object(mut map) = serde_json::from_str(&marked).unwrap() else {
            unreachable!()
        };
        assert_eq!(replace_outside_deltas("text-delta", &mut map), 0);
        assert!(map["text"].as_str().unwrap().starts_with(MARK));
    }
}
