//! Scripts in the replay format (docs/replay-format.md).

use std::io::{self, Write};

use forge_core::model::JsonMap;
use serde::Serialize;
use serde_json::Value;

use super::{Item, Script};

/// Writes the script in the replay format (docs/replay-format.md), one line per item,
/// each with its event time as `"t"` when it has one.
pub fn write_jsonl(script: &Script, out: &mut impl Write) -> io::Result<()> {
    for timed in &script.items {
        let mut line = item_json(&timed.item)?;
        if let Some(t) = timed.t_ms {
            line.insert("t".to_owned(), Value::from(t));
        }
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// The replay line of an item, without `t`.
fn item_json(item: &Item) -> io::Result<JsonMap> {
    match item {
        Item::Session(s) => framing("session", s),
        Item::User(u) => framing("user", u),
        Item::Assistant(a) => framing("assistant", a),
        Item::Crash => Ok(kind_only("crash")),
        Item::Unknown { kind } => Ok(kind_only(kind)),
        Item::Stream(e) => object(e),
    }
}

fn kind_only(kind: &str) -> JsonMap {
    let mut line = JsonMap::new();
    line.insert("type".to_owned(), kind.into());
    line
}

/// `{"type": kind, …fields}`.
fn framing(kind: &str, fields: &impl Serialize) -> io::Result<JsonMap> {
    let mut line = kind_only(kind);
    line.extend(object(fields)?);
    Ok(line)
}

fn object(value: &impl Serialize) -> io::Result<JsonMap> {
    match serde_json::to_value(value)? {
        Value::Object(m) => Ok(m),
        other => Err(io::Error::other(format!(
            "serialized as {other}, not an object"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use forge_core::turn::{AssistantItem, UserItem};
    use forge_core::StreamEvent;

    use super::*;
    use crate::workload::{w1, Timed};

    #[test]
    fn jsonl_has_one_timed_line_per_item() {
        let s = w1(2, 4);
        let mut buf = Vec::new();
        write_jsonl(&s, &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), s.items.len());
        for (line, timed) in lines.iter().zip(&s.items) {
            let mut v: JsonMap = serde_json::from_str(line).unwrap();
            assert_eq!(v.remove("t"), timed.t_ms.map(Value::from), "{line}");
            match &timed.item {
                Item::User(u) => {
                    assert_eq!(v["type"], "user");
                    assert_eq!(v["text"], u.text.as_deref().unwrap());
                    assert_eq!(v.len(), 2, "{line}");
                }
                Item::Assistant(a) => {
                    assert_eq!(a, &AssistantItem::default());
                    assert_eq!(Value::Object(v), serde_json::json!({"type": "assistant"}));
                }
                Item::Stream(e) => {
                    let back: StreamEvent = serde_json::from_value(Value::Object(v)).unwrap();
                    assert_eq!(&back, e);
                }
                other => panic!("W1 holds no {other:?}"),
            }
        }
    }

    #[test]
    fn jsonl_writes_other_user_parts_without_ids() {
        let s = Script {
            items: vec![
                Timed::at(
                    5,
                    UserItem {
                        parts: vec![serde_json::from_value(
                            serde_json::json!({"type": "agent", "name": "explore"}),
                        )
                        .unwrap()],
                        ..UserItem::default()
                    },
                ),
                Timed::untimed(AssistantItem::summary(true)),
            ],
        };
        let mut buf = Vec::new();
        write_jsonl(&s, &mut buf).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            lines,
            [
                serde_json::json!({"type": "user", "parts": [{"type": "agent", "name": "explore"}], "t": 5}),
                serde_json::json!({"type": "assistant", "summary": true}),
            ]
        );
    }
}
