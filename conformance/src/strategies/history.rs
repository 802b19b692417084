//! Histories with successful, failed, nested and tailed compactions.

use forge_core::model::{CompactionPart, ErrorName, JsonMap, MessageError, PartBody};
use forge_core::{MessageId, MessageWithParts, Part, PartId, SessionId};
use proptest::prelude::*;
use serde::{Deserialize, Serialize};

use super::model::{self, MessageKind, PartKind};

/// One message of a generated history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Turn {
    /// A user message with a text part.
    User,
    /// An assistant answer with text and a step-finish.
    Assistant,
    /// A user message asking for compaction. With `Some(n)` the summary keeps a tail
    /// starting `n` messages back (beyond the start: from before the first message).
    Compaction(Option<u8>),
    /// A summary answering the `answers`-th most recent compaction request (0: the
    /// latest; older ones make nested compactions), successful only with `finish` and
    /// without `error`.
    Summary {
        /// Which compaction request, counting back.
        answers: u8,
        /// `finish` is set.
        finish: bool,
        /// `error` is set.
        error: bool,
    },
}

/// Any turn; compactions and summaries are frequent enough to nest.
pub fn turn() -> impl Strategy<Value = Turn> {
    prop_oneof![
        4 => Just(Turn::User),
        4 => Just(Turn::Assistant),
        2 => proptest::option::of(0u8..10).prop_map(Turn::Compaction),
        3 => (0u8..3, proptest::bool::weighted(0.8), proptest::bool::weighted(0.2))
            .prop_map(|(answers, finish, error)| Turn::Summary { answers, finish, error }),
    ]
}

/// A history of up to `max` turns.
pub fn turns(max: usize) -> impl Strategy<Value = Vec<Turn>> {
    proptest::collection::vec(turn(), 0..=max)
}

/// The id of the `i`-th message of a built history (ids sort in history order).
pub fn message_id(i: usize) -> MessageId {
    MessageId::from(format!("msg_{i:05}"))
}

fn part_id(i: usize, j: usize) -> PartId {
    PartId::from(format!("prt_{i:05}_{j}"))
}

/// Builds the messages of `turns` in `session`, oldest first.
pub fn build(session: &SessionId, turns: &[Turn]) -> Vec<MessageWithParts> {
    let mut out: Vec<MessageWithParts> = Vec::new();
    let mut last_user = MessageId::from("msg_none");
    let mut requests: Vec<MessageId> = Vec::new();
    for (i, turn) in turns.iter().enumerate() {
        let id = message_id(i);
        let version = (i % 250) as u8;
        let part = |j, kind| model::part(session, &id, &part_id(i, j), kind, version);
        let msg = match turn {
            Turn::User => MessageWithParts {
                info: model::message(session, &id, MessageKind::User, version),
                parts: vec![part(0, PartKind::Text)],
            },
            Turn::Compaction(tail_back) => {
                let tail = tail_back.map(|n| {
                    out.len()
                        .checked_sub(usize::from(n))
                        .and_then(|k| out.get(k))
                        .map_or_else(|| MessageId::from("msg_"), |m| m.info.id.clone())
                });
                let compaction = Part {
                    id: part_id(i, 0),
                    session_id: session.clone(),
                    message_id: id.clone(),
                    body: PartBody::Compaction(CompactionPart {
                        auto: true,
                        overflow: None,
                        tail_start_id: tail,
                        extra: JsonMap::new(),
                    }),
                };
                requests.push(id.clone());
                MessageWithParts {
                    info: model::message(session, &id, MessageKind::User, version),
                    parts: vec![compaction, part(1, PartKind::Text)],
                }
            }
            Turn::Assistant | Turn::Summary { .. } => {
                let mut m = model::assistant(session, &id, &last_user, false);
                if let (
                    Turn::Summary {
                        answers,
                        finish,
                        error,
                    },
                    Some(a),
                ) = (turn, m.as_assistant_mut())
                {
                    let target = requests
                        .len()
                        .checked_sub(usize::from(*answers) + 1)
                        .and_then(|k| requests.get(k));
                    a.parent_id = target.cloned().unwrap_or_else(|| last_user.clone());
                    a.summary = Some(true);
                    a.finish = finish.then(|| "stop".to_owned());
                    a.error = error.then(|| MessageError::new(ErrorName::Api, "overloaded"));
                }
                MessageWithParts {
                    info: m,
                    parts: vec![part(0, PartKind::Text), part(1, PartKind::StepFinish)],
                }
            }
        };
        if msg.info.is_user() {
            last_user = id.clone();
        }
        out.push(msg);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::filter_compacted;

    fn positions(h: &[MessageWithParts], view: &[MessageWithParts]) -> Vec<usize> {
        view.iter()
            .map(|v| h.iter().position(|m| m.info.id == v.info.id).unwrap())
            .collect()
    }

    #[test]
    fn nested_failed_and_tailed_compactions_build_the_expected_views() {
        use Turn::{Assistant, Compaction, User};
        let s = SessionId::from("ses_x");
        let ok = Turn::Summary {
            answers: 0,
            finish: true,
            error: false,
        };
        let failed = Turn::Summary {
            answers: 0,
            finish: true,
            error: true,
        };
        let h = build(&s, &[User, Assistant, Compaction(None), ok.clone(), User]);
        assert_eq!(positions(&h, &filter_compacted(&h).messages), [2, 3, 4]);
        let h = build(&s, &[User, Compaction(None), failed, User]);
        assert_eq!(positions(&h, &filter_compacted(&h).messages), [0, 1, 2, 3]);
        let h = build(&s, &[User, Assistant, Compaction(Some(2)), ok, User]);
        assert_eq!(
            positions(&h, &filter_compacted(&h).messages),
            [2, 3, 0, 1, 4]
        );
        // A summary answering the older of two requests: nested.
        let nested = Turn::Summary {
            answers: 1,
            finish: true,
            error: false,
        };
        let h = build(
            &s,
            &[User, Compaction(None), User, Compaction(None), nested],
        );
        assert_eq!(positions(&h, &filter_compacted(&h).messages), [1, 2, 3, 4]);
    }
}
