//! Hostile inputs for the fuzz tests: arbitrary bytes, byte-level mutations of valid
//! inputs, and JSON-aware edits (a value swapped for another type, a huge number, deep
//! nesting, a long string, NUL, invalid UTF-8).

use std::fmt::Write as _;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use serde_json::Value;

/// Inputs per decoder: `FORGE_FUZZ_CASES` when set, else `default`.
pub fn budget(default: u32) -> u32 {
    forge_testkit::env_number("FORGE_FUZZ_CASES", default)
}

/// Runs `check` on `cases` inputs from `strategy`; a panic inside `check` is a failure
/// naming the input (proptest then shrinks it). Prints the count on success.
pub fn fuzz<S: Strategy>(
    name: &str,
    cases: u32,
    strategy: S,
    check: impl Fn(S::Value) -> Result<(), String>,
) where
    S::Value: std::fmt::Debug,
{
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 2_000,
        ..Config::default()
    });
    let count = std::sync::atomic::AtomicU64::new(0);
    let start = std::time::Instant::now();
    let result = runner.run(&strategy, |input| {
        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(input))) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(TestCaseError::fail(why)),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                    .unwrap_or_default();
                Err(TestCaseError::fail(format!("panicked: {msg}")))
            }
        }
    });
    if let Err(e) = result {
        panic!("fuzz {name}: {e}");
    }
    eprintln!(
        "fuzz {name}: {} inputs, 0 panics, 0 unclear errors, {:.1} s",
        count.load(std::sync::atomic::Ordering::Relaxed),
        start.elapsed().as_secs_f64()
    );
}

/// Byte strings that break parsers: NUL, invalid and overlong UTF-8, a lone
/// surrogate, escapes of both, numbers out of every range, JSON punctuation, line
/// breaks and separators.
pub const TOKENS: &[&[u8]] = &[
    b"\0",
    b"\xff",
    b"\xc3",
    b"\xc0\x80",
    b"\xed\xa0\x80",
    b"\\u0000",
    b"\\ud800",
    b"\\",
    b"\"",
    b"1e400",
    b"-1e400",
    b"1e-400",
    b"-0",
    b"-1",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"340282366920938463463374607431768211456",
    b"0.1",
    b"NaN",
    b"null",
    b"true",
    b"[]",
    b"{}",
    b",",
    b":",
    b"}",
    b"]",
    b"\"\":1,",
    b"\n",
    b"\r",
    b"\t",
    "\u{2028}".as_bytes(),
    "\u{feff}".as_bytes(),
    "é".as_bytes(),
    "\u{10ffff}".as_bytes(),
    b"%00",
    b"%zz",
    b"@",
    b"://",
    b"?",
    b"&",
    b"=",
    b"#",
    b"..",
    b"/",
];

/// Runs repeated by [`ByteEdit::Repeat`]: nesting, long strings and numbers.
const RUNS: &[&[u8]] = &[b"[", b"{\"a\":", b"A", b"\\n", b"\0", b"9"];

/// One edit of a byte string; positions are taken modulo the length.
#[derive(Clone, Debug)]
pub enum ByteEdit {
    Flip { at: usize, bit: u8 },
    Set { at: usize, byte: u8 },
    Insert { at: usize, bytes: Vec<u8> },
    Delete { at: usize, len: usize },
    Truncate { at: usize },
    Duplicate { at: usize, len: usize },
    Repeat { bytes: Vec<u8>, times: usize },
}

pub fn byte_edit() -> impl Strategy<Value = ByteEdit> {
    let at = any::<usize>();
    prop_oneof![
        3 => (at, 0u8..8).prop_map(|(at, bit)| ByteEdit::Flip { at, bit }),
        2 => (at, any::<u8>()).prop_map(|(at, byte)| ByteEdit::Set { at, byte }),
        3 => (at, prop::sample::select(TOKENS)).prop_map(|(at, t)| ByteEdit::Insert {
            at,
            bytes: t.to_vec()
        }),
        1 => (at, prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(at, bytes)| ByteEdit::Insert { at, bytes }),
        2 => (at, 1usize..16).prop_map(|(at, len)| ByteEdit::Delete { at, len }),
        1 => at.prop_map(|at| ByteEdit::Truncate { at }),
        1 => (at, 1usize..64).prop_map(|(at, len)| ByteEdit::Duplicate { at, len }),
        1 => (
            prop::sample::select(RUNS),
            prop::sample::select(&[100usize, 129, 1_000, 70_000][..])
        )
            .prop_map(|(t, times)| ByteEdit::Repeat {
                bytes: t.to_vec(),
                times
            }),
    ]
}

/// `input` with `edits` applied in order.
pub fn apply(input: &[u8], edits: &[ByteEdit]) -> Vec<u8> {
    let mut v = input.to_vec();
    for e in edits {
        let pos = |at: usize, len: usize| if len == 0 { 0 } else { at % (len + 1) };
        match e {
            ByteEdit::Flip { at, bit } if !v.is_empty() => {
                let i = at % v.len();
                v[i] ^= 1 << bit;
            }
            ByteEdit::Set { at, byte } if !v.is_empty() => {
                let i = at % v.len();
                v[i] = *byte;
            }
            ByteEdit::Insert { at, bytes } => {
                let i = pos(*at, v.len());
                v.splice(i..i, bytes.iter().copied());
            }
            ByteEdit::Delete { at, len } => {
                let i = pos(*at, v.len());
                let end = (i + len).min(v.len());
                v.drain(i..end);
            }
            ByteEdit::Truncate { at } => {
                let i = pos(*at, v.len());
                v.truncate(i);
            }
            ByteEdit::Duplicate { at, len } => {
                let i = pos(*at, v.len());
                let end = (i + len).min(v.len());
                let copy = v[i..end].to_vec();
                v.splice(end..end, copy);
            }
            ByteEdit::Repeat { bytes, times } => {
                let i = pos(bytes.len(), v.len());
                let run = bytes.repeat(*times);
                v.splice(i..i, run);
            }
            _ => {}
        }
    }
    v
}

/// A JSON value an edit puts in place of another.
#[derive(Clone, Debug)]
pub enum Hostile {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    /// Number text that no Rust integer or float holds exactly.
    BigNumber(&'static str),
    Str(String),
    /// A string of this many bytes.
    Long(usize),
    /// Arrays nested this deep.
    Deep(usize),
    Array,
    Object,
}

pub fn hostile() -> impl Strategy<Value = Hostile> {
    prop_oneof![
        Just(Hostile::Null),
        any::<bool>().prop_map(Hostile::Bool),
        prop_oneof![
            Just(i64::MIN),
            Just(-1i64),
            Just(0),
            Just(i64::MAX),
            any::<i64>()
        ]
        .prop_map(Hostile::Int),
        prop_oneof![
            Just(-0.0f64),
            Just(0.5),
            Just(f64::MAX),
            Just(f64::MIN_POSITIVE),
            Just(1e300),
            any::<f64>().prop_filter("finite", |f| f.is_finite())
        ]
        .prop_map(Hostile::Float),
        prop::sample::select(
            &[
                "1e400",
                "-1e400",
                "18446744073709551616",
                "-9223372036854775809",
                "123456789012345678901234567890",
                "-0",
                "0.000000000000000000000000000001",
            ][..]
        )
        .prop_map(Hostile::BigNumber),
        prop_oneof![
            Just(String::new()),
            Just("\0".to_owned()),
            Just("a\0b".to_owned()),
            Just("\u{feff}\u{2028}\u{10ffff}".to_owned()),
            Just("ses_\nx".to_owned()),
            Just("msg_ \t".to_owned()),
            ".{0,24}"
        ]
        .prop_map(Hostile::Str),
        prop::sample::select(&[300usize, 5_000, 1 << 20][..]).prop_map(Hostile::Long),
        prop::sample::select(&[64usize, 127, 128, 129, 500, 100_000][..]).prop_map(Hostile::Deep),
        Just(Hostile::Array),
        Just(Hostile::Object),
    ]
}

/// Marker strings replaced after serialization (deep nesting and big numbers cannot be
/// `Value`s, or would need deep recursion to print).
const MARK: &str = "\u{1}fuzz-mark-";

fn hostile_value(h: &Hostile, marks: &mut Vec<String>) -> Value {
    let mut mark = |text: String| {
        marks.push(text);
        Value::String(format!("{MARK}{}", marks.len() - 1))
    };
    match h {
        Hostile::Null => Value::Null,
        Hostile::Bool(b) => Value::Bool(*b),
        Hostile::Int(i) => Value::from(*i),
        Hostile::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Hostile::BigNumber(n) => mark((*n).to_owned()),
        Hostile::Str(s) => Value::String(s.clone()),
        Hostile::Long(n) => Value::String("x".repeat(*n)),
        Hostile::Deep(n) => mark(format!("{}{}", "[".repeat(*n), "]".repeat(*n))),
        Hostile::Array => Value::Array(vec![Value::from(1), Value::Null]),
        Hostile::Object => serde_json::json!({"unknown": {"nested": [1, "two"]}}),
    }
}

/// One structural edit of a JSON document: `path` picks a node (each step an index
/// taken modulo the node's children).
#[derive(Clone, Debug)]
pub enum JsonEdit {
    Replace {
        path: Vec<usize>,
        with: Hostile,
    },
    Remove {
        path: Vec<usize>,
    },
    Add {
        path: Vec<usize>,
        key: String,
        with: Hostile,
    },
}

pub fn json_edit() -> impl Strategy<Value = JsonEdit> {
    let path = prop::collection::vec(any::<usize>(), 0..8);
    let key = prop_oneof![
        Just("id".to_owned()),
        Just("type".to_owned()),
        Just("time".to_owned()),
        Just("sessionID".to_owned()),
        Just("messageID".to_owned()),
        Just("role".to_owned()),
        Just("status".to_owned()),
        Just("parts".to_owned()),
        Just("t".to_owned()),
        "[a-zA-Z]{1,8}",
    ];
    prop_oneof![
        4 => (path.clone(), hostile()).prop_map(|(path, with)| JsonEdit::Replace { path, with }),
        2 => path.clone().prop_map(|path| JsonEdit::Remove { path }),
        2 => (path, key, hostile()).prop_map(|(path, key, with)| JsonEdit::Add { path, key, with }),
    ]
}

fn node<'a>(v: &'a mut Value, path: &[usize]) -> (&'a mut Value, usize) {
    let mut cur = v;
    let mut depth = 0;
    for step in path {
        let len = match &*cur {
            Value::Array(a) => a.len(),
            Value::Object(o) => o.len(),
            _ => 0,
        };
        if len == 0 {
            break;
        }
        let i = step % len;
        cur = match cur {
            Value::Array(a) => &mut a[i],
            Value::Object(o) => o.values_mut().nth(i).unwrap(),
            _ => unreachable!(),
        };
        depth += 1;
    }
    (cur, depth)
}

/// `doc` with `edits` applied, serialized (markers expanded).
pub fn edit_json(doc: &Value, edits: &[JsonEdit]) -> Vec<u8> {
    let mut doc = doc.clone();
    let mut marks = Vec::new();
    for e in edits {
        match e {
            JsonEdit::Replace { path, with } => {
                let v = hostile_value(with, &mut marks);
                *node(&mut doc, path).0 = v;
            }
            JsonEdit::Remove { path } => {
                let Some((last, parent)) = path.split_last() else {
                    continue;
                };
                let (n, depth) = node(&mut doc, parent);
                if depth < parent.len() {
                    continue;
                }
                match n {
                    Value::Array(a) if !a.is_empty() => {
                        let i = last % a.len();
                        a.remove(i);
                    }
                    Value::Object(o) if !o.is_empty() => {
                        let k = o.keys().nth(last % o.len()).unwrap().clone();
                        o.remove(&k);
                    }
                    _ => {}
                }
            }
            JsonEdit::Add { path, key, with } => {
                let v = hostile_value(with, &mut marks);
                match node(&mut doc, path).0 {
                    Value::Object(o) => {
                        o.insert(key.clone(), v);
                    }
                    Value::Array(a) => a.push(v),
                    other => *other = v,
                }
            }
        }
    }
    let mut text = serde_json::to_string(&doc).unwrap();
    for (i, m) in marks.iter().enumerate() {
        let mut quoted = String::new();
        let _ = write!(quoted, "\"{}{i}\"", MARK.replace('\u{1}', "\\u0001"));
        text = text.replace(&quoted, m);
    }
    text.into_bytes()
}

/// An input from a corpus of valid ones, edited structurally and then byte-wise; or
/// arbitrary bytes.
#[derive(Clone, Debug)]
pub enum Input {
    Bytes(Vec<u8>),
    Mutated {
        seed: usize,
        json: Vec<JsonEdit>,
        bytes: Vec<ByteEdit>,
    },
}

pub fn input(max_bytes: usize) -> impl Strategy<Value = Input> {
    prop_oneof![
        1 => prop::collection::vec(any::<u8>(), 0..max_bytes).prop_map(Input::Bytes),
        2 => (
            any::<usize>(),
            prop::collection::vec(json_edit(), 0..4),
            prop::collection::vec(byte_edit(), 0..2)
        )
            .prop_map(|(seed, json, bytes)| Input::Mutated { seed, json, bytes }),
        2 => (any::<usize>(), prop::collection::vec(byte_edit(), 1..4)).prop_map(
            |(seed, bytes)| Input::Mutated {
                seed,
                json: Vec::new(),
                bytes
            }
        ),
    ]
}

/// The bytes of `input` over `corpus` (valid inputs; JSON ones are edited as JSON).
pub fn realize(input: &Input, corpus: &[Vec<u8>]) -> Vec<u8> {
    match input {
        Input::Bytes(b) => b.clone(),
        Input::Mutated { seed, json, bytes } => {
            let base = &corpus[seed % corpus.len()];
            let edited = if json.is_empty() {
                base.clone()
            } else {
                match serde_json::from_slice::<Value>(base) {
                    Ok(doc) => edit_json(&doc, json),
                    Err(_) => base.clone(),
                }
            };
            apply(&edited, bytes)
        }
    }
}

/// An error message is clear: not empty, one line, not a bare debug dump.
pub fn clear(what: &str, msg: &str) -> Result<(), String> {
    let trimmed = msg.trim();
    if trimmed.is_empty() {
        return Err(format!("{what}: empty error message"));
    }
    if trimmed.contains('\n') {
        return Err(format!("{what}: error on several lines: {msg:?}"));
    }
    if trimmed.len() > 4_000 {
        return Err(format!(
            "{what}: error of {} bytes: {:?}…",
            trimmed.len(),
            trimmed.chars().take(200).collect::<String>()
        ));
    }
    Ok(())
}

/// As [`clear`], for a parser's own message (kept as an error's source), which may
/// quote the input at any length.
pub fn clear_unbounded(what: &str, msg: &str) -> Result<(), String> {
    let trimmed = msg.trim();
    if trimmed.is_empty() {
        return Err(format!("{what}: empty error message"));
    }
    Ok(())
}

/// As [`clear`], for an error that may quote `input` (or part of it) once: one line,
/// not empty, at most the input's length plus a sentence. (Only the backends' URL
/// parsers quote their input: unused in a build without any.)
#[cfg_attr(
    not(any(
        feature = "redb",
        feature = "sqlite",
        feature = "postgres",
        feature = "redis"
    )),
    allow(dead_code)
)]
pub fn clear_quoting(input: &str, what: &str, msg: &str) -> Result<(), String> {
    clear_unbounded(what, msg)?;
    if msg.trim().contains('\n') {
        return Err(format!("{what}: error on several lines: {msg:?}"));
    }
    if msg.len() > input.len() * 2 + 1_000 {
        return Err(format!(
            "{what}: error of {} bytes for an input of {}",
            msg.len(),
            input.len()
        ));
    }
    Ok(())
}
