//! Arbitrary sessions, messages and parts: every field of every kind, unknown roles,
//! unknown part kinds and unknown fields at every level.
//!
//! Strings range over all of Unicode (NUL and other controls, astral characters,
//! combining marks; see [`super::scaled::TRICKY`]), numbers over their whole range: times
//! any `i64`, token counts any `u64`, costs any finite `f64` (subnormals, the largest
//! magnitudes, values JavaScript would round).
//!
//! What the JSON model itself cannot carry is not generated, whatever the backend:
//! `Some(null)` in an optional JSON field (it reads back as `None`), a cost of `-0.0`
//! (written as `0`, as JavaScript writes it), NaN and infinities (JSON has no spelling
//! for them).

use forge_core::model::{
    AssistantMessage, AssistantTime, CacheTokens, ErrorData, ErrorName, JsonMap, MessageBody,
    MessageError, ModelRef, PathInfo, SessionTime, Tokens, UserMessage, UserTime,
};
use forge_core::{Message, MessageId, Session, SessionId};
use proptest::collection::vec;
use proptest::option::of;
use proptest::prelude::*;
use serde_json::Value;

/// Text of every shape: plain, empty, whitespace, multi-line, any Unicode.
pub fn arb_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-zA-Z0-9 .,:]{0,24}",
        2 => "\\PC{0,16}",
        3 => super::scaled::unicode(16),
        1 => prop::sample::select(vec![
            String::new(),
            "  trailing space  ".to_owned(),
            "line\nbreak\r\n".to_owned(),
            "tab\tand \"quotes\" and \\backslash".to_owned(),
            "emoji 🦀 and ñ, 中文".to_owned(),
            "\u{7f}\u{200b}\u{feff}".to_owned(),
        ]),
    ]
}

/// A time in Unix ms: mostly plausible, also anywhere in `i64`.
pub(super) fn time() -> impl Strategy<Value = i64> {
    prop_oneof![
        4 => 0i64..4_102_444_800_000,
        1 => any::<i64>(),
        1 => proptest::sample::select(vec![i64::MIN, i64::MAX, -1, 0, (1 << 53) + 1, -(1 << 53) - 1]),
    ]
}

pub(super) fn small_f64() -> impl Strategy<Value = f64> {
    (-1_000_000i64..1_000_000, 0u32..4).prop_map(|(n, scale)| n as f64 / 10f64.powi(scale as i32))
}

/// Any `f64` JSON carries exactly: finite, not `-0.0`.
pub(super) fn exact_f64() -> impl Strategy<Value = f64> {
    use proptest::num::f64::{NEGATIVE, NORMAL, POSITIVE, SUBNORMAL};
    prop_oneof![
        3 => small_f64(),
        3 => NORMAL | SUBNORMAL | POSITIVE | NEGATIVE,
        1 => proptest::sample::select(vec![
            0.0,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            5e-324,
            0.1 + 0.2,
            9_007_199_254_740_993.0,
            1e21,
            123_456_789.123_456_79,
        ]),
    ]
    .prop_filter("JSON has no NaN, infinities or -0", |f| {
        f.is_finite() && !(*f == 0.0 && f.is_sign_negative())
    })
}

/// A cost: any finite `f64`, mostly short decimals.
pub(super) fn cost() -> impl Strategy<Value = f64> {
    exact_f64()
}

/// A token count: any `u64`, also past 2^53.
pub(super) fn count() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0u64..(1 << 53),
        1 => any::<u64>(),
        1 => proptest::sample::select(vec![u64::MAX, (1 << 53) + 1, 1 << 63, (1 << 63) - 1]),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "x[a-zA-Z0-9_]{0,8}",
        1 => super::scaled::unicode(6).prop_map(|k| format!("x{k}")),
    ]
}

/// Any JSON value (bounded depth), numbers that round-trip through text.
pub fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        small_f64().prop_map(Value::from),
        exact_f64().prop_map(Value::from),
        arb_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..4).prop_map(Value::Array),
            vec((prop_oneof![3 => "[a-zA-Z0-9_ -]{0,6}".boxed(), 1 => super::scaled::unicode(6).boxed()], inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

pub(super) fn json_some() -> impl Strategy<Value = Value> {
    arb_json().prop_filter("null in an optional field reads back as None", |v| {
        !v.is_null()
    })
}

/// Unknown fields: keys no version of the model uses (they start with `x`).
pub fn arb_unknown_fields() -> impl Strategy<Value = JsonMap> {
    vec((key(), arb_json()), 0..3).prop_map(|kv| kv.into_iter().collect())
}

pub(super) fn model_ref() -> impl Strategy<Value = ModelRef> {
    (arb_text(), arb_text(), arb_unknown_fields()).prop_map(|(provider_id, model_id, extra)| {
        ModelRef {
            provider_id,
            model_id,
            extra,
        }
    })
}

pub(super) fn tokens() -> impl Strategy<Value = Tokens> {
    let n = count;
    (
        n(),
        n(),
        n(),
        n(),
        n(),
        arb_unknown_fields(),
        arb_unknown_fields(),
    )
        .prop_map(
            |(input, output, reasoning, read, write, extra, cache_extra)| Tokens {
                input,
                output,
                reasoning,
                cache: CacheTokens {
                    read,
                    write,
                    extra: cache_extra,
                },
                extra,
            },
        )
}

/// Any message error, including a name this version does not know.
pub fn arb_message_error() -> impl Strategy<Value = MessageError> {
    let name = prop_oneof![
        Just(ErrorName::Aborted),
        Just(ErrorName::OutputLength),
        Just(ErrorName::Api),
        Just(ErrorName::Auth),
        Just(ErrorName::ContextOverflow),
        Just(ErrorName::Unknown),
        "X[a-zA-Z]{0,10}Error".prop_map(ErrorName::Other),
    ];
    (name, of(arb_text()), arb_unknown_fields()).prop_map(|(name, message, extra)| MessageError {
        name,
        data: ErrorData { message, extra },
    })
}

/// Any session with the given id.
pub fn arb_session(id: SessionId) -> impl Strategy<Value = Session> {
    (
        of(prop_oneof![
            "ses_[a-z0-9]{1,8}".boxed(),
            super::scaled::unicode(8).boxed()
        ]),
        arb_text(),
        time(),
        time(),
        arb_unknown_fields(),
        arb_unknown_fields(),
    )
        .prop_map(
            move |(parent, title, created, updated, time_extra, extra)| Session {
                id: id.clone(),
                parent_id: parent.map(SessionId::from),
                title,
                time: SessionTime {
                    created,
                    updated,
                    extra: time_extra,
                },
                extra,
            },
        )
}

fn user() -> impl Strategy<Value = MessageBody> {
    (
        time(),
        arb_unknown_fields(),
        arb_text(),
        of(model_ref()),
        of(arb_text()),
        of(vec((key(), any::<bool>().prop_map(Value::Bool)), 0..3)),
        arb_unknown_fields(),
    )
        .prop_map(
            |(created, time_extra, agent, model, system, tools, extra)| {
                MessageBody::User(UserMessage {
                    time: UserTime {
                        created,
                        extra: time_extra,
                    },
                    agent,
                    model,
                    system,
                    tools: tools.map(|t| t.into_iter().collect()),
                    extra,
                })
            },
        )
}

fn assistant(parent: MessageId) -> impl Strategy<Value = MessageBody> {
    let time =
        (time(), of(time()), arb_unknown_fields()).prop_map(|(created, completed, extra)| {
            AssistantTime {
                created,
                completed,
                extra,
            }
        });
    let path = of((arb_text(), arb_text(), arb_unknown_fields())
        .prop_map(|(cwd, root, extra)| PathInfo { cwd, root, extra }));
    (
        (time, of(arb_message_error()), arb_text(), arb_text()),
        (of(arb_text()), path, of(any::<bool>()), cost()),
        (tokens(), of(arb_text()), arb_unknown_fields()),
    )
        .prop_map(
            move |(
                (time, error, model_id, provider_id),
                (agent, path, summary, cost),
                (tokens, finish, extra),
            )| {
                MessageBody::Assistant(AssistantMessage {
                    time,
                    error,
                    parent_id: parent.clone(),
                    model_id,
                    provider_id,
                    agent,
                    path,
                    summary,
                    cost,
                    tokens,
                    finish,
                    extra,
                })
            },
        )
}

fn unknown_role() -> impl Strategy<Value = MessageBody> {
    (
        "[a-z]{1,10}".prop_filter("an unknown role", |r| r != "user" && r != "assistant"),
        arb_unknown_fields(),
    )
        .prop_map(|(role, fields)| MessageBody::Unknown { role, fields })
}

/// Any message of any role (including an unknown one) with the given ids.
pub fn arb_message(session: SessionId, id: MessageId) -> impl Strategy<Value = Message> {
    let parent = MessageId::from("msg_parent");
    prop_oneof![
        2 => user(),
        3 => assistant(parent),
        1 => unknown_role(),
    ]
    .prop_map(move |body| Message {
        id: id.clone(),
        session_id: session.clone(),
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategies::arbitrary_parts::arb_part;
    use forge_core::{Part, PartId};
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    /// A value `strategy` generates reads back from its JSON unchanged.
    fn survives_json<T>(strategy: impl Strategy<Value = T>, runner: &mut TestRunner)
    where
        T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
    {
        let value = strategy.new_tree(runner).unwrap().current();
        let back: T = serde_json::from_str(&serde_json::to_string(&value).unwrap()).unwrap();
        assert_eq!(back, value);
    }

    /// What the generators make must survive JSON itself, or a backend could not be
    /// blamed for losing it.
    #[test]
    fn generated_values_survive_json() {
        let mut runner = TestRunner::deterministic();
        let s = SessionId::from("ses_1");
        let m = MessageId::from("msg_1");
        for _ in 0..500 {
            survives_json::<Part>(
                arb_part(s.clone(), m.clone(), PartId::from("prt_1")),
                &mut runner,
            );
            survives_json::<Message>(arb_message(s.clone(), m.clone()), &mut runner);
            survives_json::<Session>(arb_session(s.clone()), &mut runner);
        }
    }
}
