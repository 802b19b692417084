//! The lines of a replay file: framing lines (`session`, `user`, `assistant`, `crash`)
//! and AI SDK stream events, parsed with errors that say what is wrong, into the core's
//! items ([`forge_core::turn::Item`]).
//!
//! A `type` that is neither a framing line nor in [`StreamEvent::KINDS`] parses as
//! [`Line::Unknown`]: a producer newer than this version is not bad input (counted in
//! the report and skipped, or an error with
//! [`ReplayOptions::strict()`](crate::ReplayOptions::strict())). A known type with bad
//! fields is an error naming the type and the field.

use forge_core::model::{JsonMap, PartBody};
use forge_core::turn::{Item, Timed};
use forge_core::{MessageId, StreamEvent};
use serde_json::Value;

use super::surrogates;
use crate::clip::clip;

pub use forge_core::turn::{
    AssistantItem as AssistantLine, CompactionItem as CompactionLine, Item as Line,
    SessionItem as SessionLine, UserItem as UserLine,
};

/// The `type`s of the framing lines; every other `type` is a stream event.
pub const LINE_KINDS: &[&str] = Item::FRAMING_KINDS;

/// Parses one line into its item at its event time (`t`, ms since the start of the
/// file, if given); `None` for blank lines and `#` comments. The error says what is
/// wrong, without a position (the caller adds the line number), [`clip`]ped to one
/// short line.
///
/// A lone UTF-16 surrogate half (`"\ud83d"`, which strict JSON refuses) becomes U+FFFD;
/// a replay joins a pair split between two deltas instead (see
/// [`ReplayOptions`](crate::ReplayOptions)).
pub fn parse_line(text: &str) -> std::result::Result<Option<Timed>, String> {
    let Some(mut parsed) = parse(text).map_err(|e| clip(&e))? else {
        return Ok(None);
    };
    if parsed.marked {
        // One line alone: a half can only be replaced, not joined.
        surrogates::replace_in_delta(&mut parsed.timed.item);
    }
    Ok(Some(parsed.timed))
}

/// A line as a replay reads it: its item, whether lone surrogate halves in it were
/// marked for the replay's [`Joiner`](surrogates::Joiner), and how many halves outside
/// a delta's text became U+FFFD.
#[derive(Debug)]
pub(crate) struct ParsedLine {
    pub timed: Timed,
    pub marked: bool,
    pub replaced: usize,
}

/// [`parse_line`] for a replay, with lone surrogate halves left marked in the text of
/// deltas.
pub(crate) fn parse_marked(text: &str) -> std::result::Result<Option<ParsedLine>, String> {
    parse(text).map_err(|e| clip(&e))
}

fn parse(text: &str) -> std::result::Result<Option<ParsedLine>, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return Ok(None);
    }
    let (value, marked) = match serde_json::from_str::<Value>(trimmed) {
        Ok(v) => (v, false),
        Err(e) => {
            // Lone surrogate halves: a provider's pair split between two deltas.
            let marked = surrogates::has_surrogate_escape(trimmed)
                .then(|| surrogates::mark(trimmed))
                .flatten()
                .and_then(|m| serde_json::from_str::<Value>(&m).ok());
            match marked {
                Some(v) => (v, true),
                None => {
                    let msg = e.to_string();
                    let msg = msg.split(" at line ").next().unwrap_or(&msg).to_owned();
                    return Err(format!("malformed JSON at column {}: {msg}", e.column()));
                }
            }
        }
    };
    let Value::Object(mut map) = value else {
        return Err(format!("expected a JSON object, got {}", json_text(&value)));
    };
    let kind = match map.get("type") {
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(format!("`type` must be a string, got {}", json_text(other))),
        None => return Err("missing `type`".to_owned()),
    };
    let replaced = if marked {
        surrogates::replace_outside_deltas(&kind, &mut map)
    } else {
        0
    };
    // `t` is allowed on every kind of line; it is not part of what it describes.
    let t = match map.remove("t") {
        None => None,
        Some(v) => {
            Some(integer(&v).map_err(|why| format!("`t` (event time in ms) must be {why}"))?)
        }
    };
    parse_untimed(&kind, map).map(|item| {
        Some(ParsedLine {
            timed: Timed { t_ms: t, item },
            marked,
            replaced,
        })
    })
}

/// A JSON value as it would be quoted in an error: a string as `"…"` (escaped, so
/// [`clip`] can find its end), anything else as JSON text.
fn json_text(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => format!("`{other}`"),
    }
}

/// 2^64, the first integral value out of `u64`'s range.
const U64_END: f64 = 18_446_744_073_709_551_616.0;

/// A JSON number where the format wants a non-negative integer: any spelling of an
/// integral value in range is taken (`-0`, `0.0`, `1e3`, `20.000`). The error says
/// what is wanted and what came (without the field's name, which the caller adds).
pub fn integer(v: &Value) -> std::result::Result<u64, String> {
    let Value::Number(n) = v else {
        return Err(format!(
            "a non-negative integer, got {} {}",
            json_kind(v),
            json_text(v)
        ));
    };
    if let Some(u) = n.as_u64() {
        return Ok(u);
    }
    match n.as_f64() {
        // `-0.0 >= 0.0`: a negative zero is zero.
        Some(f) if f.fract() == 0.0 && (0.0..U64_END).contains(&f) => Ok(f as u64),
        Some(f) if f.is_finite() && f.fract() != 0.0 => {
            Err(format!("a non-negative integer, got the fraction {n}"))
        }
        _ => Err(format!(
            "a non-negative integer of at most {}, got {n} (out of range)",
            u64::MAX
        )),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "the string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A line without `t`, its `type` read as `kind`.
fn parse_untimed(kind: &str, mut map: JsonMap) -> std::result::Result<Line, String> {
    let framing = |map: JsonMap| -> std::result::Result<Line, serde_json::Error> {
        let mut map = map;
        map.remove("type");
        let v = Value::Object(map);
        Ok(match kind {
            "session" => Line::Session(serde_json::from_value(v)?),
            "user" => Line::User(serde_json::from_value(v)?),
            _ => Line::Assistant(serde_json::from_value(v)?),
        })
    };
    match kind {
        "session" | "user" | "assistant" => framing(map).map_err(|e| format!("{kind} line: {e}")),
        _ if !LINE_KINDS.contains(&kind) && !StreamEvent::is_known_kind(kind) => {
            Ok(Line::Unknown {
                kind: kind.to_owned(),
            })
        }
        "crash" => {
            map.remove("type");
            if let Some(k) = map.keys().next() {
                return Err(format!("crash line: unknown field `{k}`"));
            }
            Ok(Line::Crash)
        }
        _ => serde_json::from_value::<StreamEvent>(Value::Object(map))
            .map(Line::Stream)
            .map_err(|e| format!("{kind} event: {e}")),
    }
}

/// The parts of a user line, in order: its `text`, its `parts`, then a `compaction` part
/// (with `tail_start_id`, resolved by the caller). Takes them out of `u`.
///
/// # Errors
/// A part carrying an id (replay assigns them) or no string `type`, a part that is not
/// a part, or a line with none of the three; the message names the part and is
/// [`clip`]ped.
pub fn user_part_bodies(
    u: &mut UserLine,
    tail_start_id: Option<MessageId>,
) -> std::result::Result<Vec<PartBody>, String> {
    u.take_part_bodies(tail_start_id).map_err(|e| clip(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> std::result::Result<Option<(Line, Option<u64>)>, String> {
        parse_line(text).map(|l| l.map(|t| (t.item, t.t_ms)))
    }

    fn err(line: &str) -> String {
        match parsed(line) {
            Err(e) => e,
            Ok(l) => panic!("{line} parsed as {l:?}"),
        }
    }

    #[test]
    fn blank_and_comment_lines_are_skipped() {
        assert!(parsed("").unwrap().is_none());
        assert!(parsed("   ").unwrap().is_none());
        assert!(parsed("# a comment").unwrap().is_none());
    }

    #[test]
    fn replay_lines_and_stream_events_parse() {
        assert!(matches!(
            parsed(r#"{"type":"session","title":"t"}"#),
            Ok(Some((Line::Session(_), None)))
        ));
        assert!(matches!(
            parsed(r#"{"type":"user","text":"hi","compaction":{"auto":true}}"#),
            Ok(Some((Line::User(_), None)))
        ));
        assert!(matches!(
            parsed(r#"{"type":"assistant","summary":true}"#),
            Ok(Some((Line::Assistant(_), None)))
        ));
        assert!(matches!(
            parsed(r#"{"type":"crash"}"#),
            Ok(Some((Line::Crash, None)))
        ));
        assert!(matches!(
            parsed(r#"{"type":"text-delta","id":"t","text":"x"}"#),
            Ok(Some((Line::Stream(StreamEvent::TextDelta { .. }), None)))
        ));
    }

    #[test]
    fn t_is_taken_from_framing_lines() {
        assert!(matches!(
            parsed(r#"{"type":"session","title":"s","t":0}"#),
            Ok(Some((Line::Session(_), Some(0))))
        ));
        let Ok(Some((Line::User(u), Some(1250)))) =
            parsed(r#"{"type":"user","t":1250,"text":"hi"}"#)
        else {
            panic!("user line with t")
        };
        assert_eq!(u.text.as_deref(), Some("hi"));
        assert!(matches!(
            parsed(r#"{"type":"assistant","summary":true,"t":1300}"#),
            Ok(Some((Line::Assistant(_), Some(1300))))
        ));
        assert!(matches!(
            parsed(r#"{"type":"crash","t":9007199254740993}"#),
            Ok(Some((Line::Crash, Some(9_007_199_254_740_993))))
        ));
    }

    #[test]
    fn t_is_taken_from_stream_events() {
        let Ok(Some((Line::Stream(e), Some(20)))) =
            parsed(r#"{"type":"text-delta","id":"t","text":"x","t":20}"#)
        else {
            panic!("stream event with t")
        };
        assert_eq!(
            e,
            StreamEvent::TextDelta {
                id: "t".into(),
                text: "x".into(),
                provider_metadata: None
            }
        );
        assert!(matches!(
            parsed(r#"{"type":"finish","t":14900}"#),
            Ok(Some((
                Line::Stream(StreamEvent::Finish { .. }),
                Some(14_900)
            )))
        ));
    }

    #[test]
    fn bad_t_is_an_error_naming_it() {
        for bad in [
            r#""5""#,
            "-1",
            "1.5",
            "-0.5",
            "null",
            "[1]",
            "1e30",
            "18446744073709551616",
            "-9223372036854775809",
        ] {
            for line in [
                format!(r#"{{"type":"user","text":"hi","t":{bad}}}"#),
                format!(r#"{{"type":"text-end","id":"t","t":{bad}}}"#),
                format!(r#"{{"type":"crash","t":{bad}}}"#),
                format!(r#"{{"type":"no-such-type","t":{bad}}}"#),
            ] {
                let e = err(&line);
                assert!(
                    e.starts_with("`t` (event time in ms) must be a non-negative integer"),
                    "{e}"
                );
            }
        }
        assert!(err(r#"{"type":"crash","t":1.5}"#).ends_with("got the fraction 1.5"));
        assert!(err(r#"{"type":"crash","t":-1}"#).ends_with("got -1 (out of range)"));
        assert!(err(r#"{"type":"crash","t":"5"}"#).ends_with(r#"got the string "5""#));
    }

    #[test]
    fn t_takes_any_spelling_of_an_integer() {
        for (spelled, want) in [
            ("-0", 0),
            ("-0.0", 0),
            ("0.0", 0),
            ("1e3", 1000),
            ("1E3", 1000),
            ("2.5e1", 25),
            ("20.000", 20),
            ("1e19", 10_000_000_000_000_000_000),
            ("18446744073709551615", u64::MAX),
        ] {
            let line = format!(r#"{{"type":"crash","t":{spelled}}}"#);
            match parsed(&line) {
                Ok(Some((Line::Crash, Some(t)))) => assert_eq!(t, want, "{spelled}"),
                other => panic!("{spelled}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_unknown_type_is_a_line_of_its_own_and_a_known_one_must_be_well_formed() {
        for kind in [
            "tool-input-available",
            "data-progress",
            "heartbeat",
            "text-delat",
            "",
        ] {
            let line = format!(r#"{{"type":"{kind}","whatever":[1,{{"x":null}}],"t":5}}"#);
            match parsed(&line) {
                Ok(Some((Line::Unknown { kind: k }, Some(5)))) => assert_eq!(k, kind),
                other => panic!("{kind}: {other:?}"),
            }
        }
        for kind in StreamEvent::KINDS {
            let e = parsed(&format!(r#"{{"type":"{kind}","id":7,"toolCallId":[]}}"#));
            if let Ok(Some((Line::Unknown { .. }, _))) = e {
                panic!("{kind} is known")
            }
        }
        let e = err(r#"{"type":"tool-call","toolCallId":"c","toolName":5}"#);
        assert!(
            e.starts_with("tool-call event: invalid type: integer `5`"),
            "{e}"
        );
    }

    #[test]
    fn errors_quote_a_short_prefix_on_one_line() {
        let big = "x".repeat(5 << 20);
        for line in [
            format!(r#"{{"type":"text-delta","id":"t","text":{{"a":"{big}"}}}}"#),
            format!(r#"{{"type":"user","text":"hi","t":"{big}"}}"#),
            format!(r#"{{"type":"user","text":"hi","agent":"a","{big}":1}}"#),
            format!(r#"["{big}"]"#),
            format!(r#"{{"type":["{big}"]}}"#),
            format!(
                r#"{{"type":"text-delta","id":"t","text":"x
{big}"#
            ),
            format!(r#"{{"type":"user","te\nxt":"{big}"}}"#),
        ] {
            let e = err(&line);
            assert!(
                e.len() <= 2 * crate::text::QUOTE_MAX,
                "{} bytes: {}",
                e.len(),
                &e[..200]
            );
            assert!(!e.contains('\n'), "{e}");
        }
        let e = err(&format!(r#"{{"type":"user","{big}":1}}"#));
        assert!(e.contains(&format!("({} bytes)", big.len())), "{e}");
    }

    #[test]
    fn part_errors_quote_a_short_prefix_on_one_line() {
        let big = "y".repeat(1 << 20);
        for part in [
            format!(r#"{{"type":"file","mime":["{big}"]}}"#),
            format!(r#"{{"type":"text","text":{{"{big}\n":1}}}}"#),
            format!(r#"{{"type":"text","text":"a","synthetic":"line\nbreak{big}"}}"#),
        ] {
            let line = format!(r#"{{"type":"user","parts":[{part}]}}"#);
            let Ok(Some((Line::User(mut u), _))) = parsed(&line) else {
                panic!("a user line")
            };
            let e = match user_part_bodies(&mut u, None) {
                Err(e) => e,
                Ok(p) => panic!("{p:?}"),
            };
            assert!(e.starts_with("parts[0]: "), "{e}");
            assert!(e.len() <= 2 * crate::text::QUOTE_MAX, "{} bytes", e.len());
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn errors_say_what_is_wrong() {
        assert!(err("{not json").contains("malformed JSON at column"));
        assert!(err("[1,2]").contains("expected a JSON object"));
        assert!(err(r#"{"id":"x"}"#).contains("missing `type`"));
        assert!(err(r#"{"type":"user","txt":"hi"}"#).contains("unknown field `txt`"));
        let e = err(r#"{"type":"text-delta","id":"t"}"#);
        assert!(e.contains("text-delta event") && e.contains("text"), "{e}");
        assert!(err(r#"{"type":"crash","why":1}"#).contains("unknown field `why`"));
    }
}
