//! Scripts in the replay format (docs/replay-format.md).

use std::io::{self, Write};

use forge_core::model::{JsonMap, PartBody, TextPart};
use forge_core::Part;
use serde_json::Value;

use super::{Item, Script};

/// Writes the script in the replay format (docs/replay-format.md), one line per item,
/// each with its event time as `"t"`.
pub fn write_jsonl(script: &Script, out: &mut impl Write) -> io::Result<()> {
    for timed in &script.items {
        let mut line = item_json(&timed.item)?;
        line.insert("t".to_owned(), Value::from(timed.t_ms));
        serde_json::to_writer(&mut *out, &line)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

/// The replay line of an item, without `t`.
fn item_json(item: &Item) -> io::Result<JsonMap> {
    let mut line = JsonMap::new();
    match item {
        Item::User { parts } => {
            line.insert("type".to_owned(), "user".into());
            let mut rest = parts.as_slice();
            if let Some((PartBody::Text(t), tail)) = rest.split_first() {
                if is_plain_text(t) {
                    line.insert("text".to_owned(), t.text.clone().into());
                    rest = tail;
                }
            }
            if !rest.is_empty() {
                let parts = rest.iter().map(part_json).collect::<io::Result<Vec<_>>>()?;
                line.insert("parts".to_owned(), Value::Array(parts));
            }
        }
        Item::Assistant { summary } => {
            line.insert("type".to_owned(), "assistant".into());
            if *summary {
                line.insert("summary".to_owned(), true.into());
            }
        }
        Item::Stream(e) => match serde_json::to_value(e)? {
            Value::Object(m) => line = m,
            other => {
                return Err(io::Error::other(format!(
                    "stream event serialized as {other}, not an object"
                )))
            }
        },
    }
    Ok(line)
}

/// A text part with nothing but its text: the `text` field of a user line.
fn is_plain_text(t: &TextPart) -> bool {
    t.synthetic.is_none()
        && t.ignored.is_none()
        && t.time.is_none()
        && t.metadata.is_none()
        && t.extra.is_empty()
}

/// A part in the opencode shape without `id`, `sessionID` and `messageID`.
fn part_json(body: &PartBody) -> io::Result<Value> {
    let part = Part {
        id: "prt".into(),
        session_id: "ses".into(),
        message_id: "msg".into(),
        body: body.clone(),
    };
    let mut v = serde_json::to_value(part)?;
    if let Value::Object(m) = &mut v {
        for key in ["id", "sessionID", "messageID"] {
            m.remove(key);
        }
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
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
            assert_eq!(v.remove("t"), Some(Value::from(timed.t_ms)), "{line}");
            match &timed.item {
                Item::User { parts } => {
                    let [PartBody::Text(t)] = parts.as_slice() else {
                        panic!("one text part")
                    };
                    assert_eq!(v["type"], "user");
                    assert_eq!(v["text"], t.text.as_str());
                    assert_eq!(v.len(), 2, "{line}");
                }
                Item::Assistant { .. } => {
                    assert_eq!(Value::Object(v), serde_json::json!({"type": "assistant"}));
                }
                Item::Stream(e) => {
                    let back: StreamEvent = serde_json::from_value(Value::Object(v)).unwrap();
                    assert_eq!(&back, e);
                }
            }
        }
    }

    #[test]
    fn jsonl_writes_other_user_parts_without_ids() {
        let s = Script {
            items: vec![Timed {
                t_ms: 5,
                item: Item::User {
                    parts: vec![PartBody::Agent(
                        serde_json::from_value(serde_json::json!({"name": "explore"})).unwrap(),
                    )],
                },
            }],
        };
        let mut buf = Vec::new();
        write_jsonl(&s, &mut buf).unwrap();
        let v: Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "user", "parts": [{"type": "agent", "name": "explore"}], "t": 5})
        );
    }
}
