//! Hostile `Last-Event-ID` headers and session ids, fuzzed against a real server over a
//! real socket: arbitrary header bytes (what HTTP lets through) and mutations of valid
//! ids (seqs, `HUB-N` ids of the tenant stream) on `GET /session/{id}/event` and
//! `GET /event`. Every answer is the stream (200) or a 4xx JSON error whose message is
//! one clear line; never a 5xx, never a dropped connection, and the server still serves
//! afterwards.
//!
//! Default budget small; `FORGE_FUZZ_CASES=N` sends N requests of each kind.

mod common;

use common::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// A header value: arbitrary bytes HTTP can carry, or a mutation of a valid id.
#[derive(Clone, Debug)]
enum Header {
    Bytes(Vec<u8>),
    Seq(String),
    Hub { prefix: usize, n: String },
}

fn header() -> impl Strategy<Value = Header> {
    let number = prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        (0u64..50).prop_map(|n| n.to_string()),
        Just("18446744073709551616".to_owned()),
        Just("-1".to_owned()),
        Just("+3".to_owned()),
        Just("1e3".to_owned()),
        Just("0x10".to_owned()),
        Just(" 7 ".to_owned()),
        Just("9".repeat(400)),
        "[0-9a-z+-.]{0,24}",
    ];
    prop_oneof![
        prop::collection::vec(
            prop_oneof![0x20u8..0x7f, 0x80u8..=0xff, Just(b'\t'), Just(b'-')],
            0..96
        )
        .prop_map(Header::Bytes),
        number.clone().prop_map(Header::Seq),
        (any::<usize>(), number).prop_map(|(prefix, n)| Header::Hub { prefix, n }),
    ]
}

fn value(h: &Header, hub: &str) -> Vec<u8> {
    match h {
        Header::Bytes(b) => b.clone(),
        Header::Seq(s) => s.clone().into_bytes(),
        // A prefix of the real hub id (all of it, most of the time) and a number.
        Header::Hub { prefix, n } => {
            let cut = prefix % (hub.len() + 4);
            let hub = &hub[..cut.min(hub.len())];
            format!("{hub}-{n}").into_bytes()
        }
    }
}

/// The status and body of `GET path` with `Last-Event-ID: value`; the body only for an
/// error (a 200 is an endless event stream).
async fn get(s: &TestServer, path: &str, value: &[u8]) -> Result<(u16, String), String> {
    let r = s
        .get(path, TOKEN_A)
        .header(
            "Last-Event-ID",
            reqwest::header::HeaderValue::from_bytes(value).map_err(|e| e.to_string())?,
        )
        .send()
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    let status = r.status().as_u16();
    if status == 200 {
        return Ok((200, String::new()));
    }
    Ok((status, r.text().await.map_err(|e| e.to_string())?))
}

fn check_answer(path: &str, value: &[u8], status: u16, body: &str) -> Result<(), String> {
    if status == 200 {
        return Ok(());
    }
    if !(400..500).contains(&status) {
        return Err(format!("{path} with {value:?}: status {status}: {body}"));
    }
    let json: serde_json::Value =
        serde_json::from_str(body).map_err(|e| format!("{path}: error body not JSON: {e}"))?;
    let msg = json["message"].as_str().unwrap_or_default();
    if msg.trim().is_empty() || msg.contains('\n') || json["name"].as_str().is_none() {
        return Err(format!("{path} with {value:?}: unclear error {body}"));
    }
    Ok(())
}

#[test]
fn last_event_ids_resume_or_are_refused_clearly() {
    let rt = forge_testkit::runtime();
    let s = rt.block_on(async {
        let s = session_server("ses_fuzz").await;
        let (status, body) = s
            .upload(TOKEN_A, "ses_fuzz", ndjson(&turn("fuzz", 5, "tok ")))
            .await;
        assert_eq!(status, 200, "{body}");
        s
    });
    // The hub id of the tenant stream, from the id of an event it sends.
    let hub = rt.block_on(async {
        let mut sse = SseReader::connect(&s, "/event", TOKEN_A, None).await;
        let e = sse.expect().await;
        let id = e.id.clone().unwrap_or_default();
        id.rsplit_once('-').map(|(h, _)| h.to_owned()).unwrap_or(id)
    });

    let cases = forge_testkit::env_number("FORGE_FUZZ_CASES", 300);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let sent = std::cell::Cell::new(0u64);
    let refused = std::cell::Cell::new(0u64);
    let start = std::time::Instant::now();
    let result = runner.run(&header(), |h| {
        let v = value(&h, &hub);
        for path in ["/session/ses_fuzz/event", "/event"] {
            let (status, body) = rt
                .block_on(get(&s, path, &v))
                .map_err(TestCaseError::fail)?;
            sent.set(sent.get() + 1);
            check_answer(path, &v, status, &body).map_err(TestCaseError::fail)?;
            if status != 200 {
                refused.set(refused.get() + 1);
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("fuzz Last-Event-ID: {e}");
    }
    // Still serving.
    rt.block_on(async {
        s.json("/session/ses_fuzz/message", TOKEN_A, 200).await;
        s.stop().await;
    });
    eprintln!(
        "fuzz Last-Event-ID: {} requests ({} refused with a 4xx, the rest resumed or \
         reloaded), 0 server errors, 0 unclear errors, {:.1} s",
        sent.get(),
        refused.get(),
        start.elapsed().as_secs_f64()
    );
}
