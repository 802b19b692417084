//! Writers claim the sessions they write: `replay` into a session a running `serve`
//! holds (an upload still streaming) fails at once naming it, `--wait` waits for it,
//! `--take-over` takes it (and the upload's next write is a 409 naming the new holder);
//! an upload or a command that ends releases what it held, so the next one need not
//! wait.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{text_answer, Env};

const USER: &str = r#"{"type":"user","text":"hi"}"#;

#[test]
fn bad_wait_values_say_what_a_duration_is() {
    let env = Env::new();
    for bad in ["5d", "soon", "-1s", "25h"] {
        let err = env.fails(&[&format!("--wait={bad}"), "sessions"]);
        assert!(
            err.contains("is not a duration") && err.contains("500ms"),
            "{bad}: {err}"
        );
    }
    // Units and plain seconds are accepted.
    for good in ["0", "2", "1.5", "500ms", "3s", "1m", "1h"] {
        env.ok(&["--wait", good, "sessions"]);
    }
}

#[test]
fn a_session_a_server_holds_is_refused_waited_for_or_taken_over() {
    let mut env = Env::new();
    env.url = format!("sqlite://{}", env.dir.path().join("held.sqlite").display());
    let mut server = Command::new(env!("CARGO_BIN_EXE_forge-store"))
        .args(["--backend", &env.url, "serve", "--no-auth"])
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("serve starts");
    let mut lines = BufReader::new(server.stdout.take().expect("stdout"));
    let mut line = String::new();
    lines.read_line(&mut line).expect("the listening line");
    let base = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .map(|a| format!("http://{a}"))
        .expect("an address");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let http = reqwest::Client::new();
    let upload = |text: String| {
        rt.block_on(async {
            let r = http
                .post(format!("{base}/session/ses_held/stream"))
                .body(text)
                .send()
                .await
                .expect("request");
            let status = r.status().as_u16();
            (status, r.text().await.unwrap_or_default())
        })
    };
    let (status, body) = upload(format!("{USER}\n{}", text_answer("from the server")));
    assert_eq!(status, 200, "{body}");
    // The upload ended: the server let go of the session.
    let out = env.run(&["sessions"]);
    assert!(out.status.success(), "{}", common::stderr(&out));

    // An upload still streaming holds the session: its body is chunked and left open.
    let addr = base.trim_start_matches("http://").to_owned();
    let mut open = TcpStream::connect(&addr).expect("connect to the server");
    let head = format!(
        "POST /session/ses_held/stream HTTP/1.1\r\nHost: {addr}\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    );
    let chunk = |w: &mut TcpStream, text: &str| {
        write!(w, "{:x}\r\n{text}\r\n", text.len()).expect("send a chunk");
        w.flush().expect("flush");
    };
    open.write_all(head.as_bytes()).expect("send the head");
    chunk(
        &mut open,
        &format!("{USER}\n{{\"type\":\"text-start\",\"id\":\"t\"}}\n"),
    );
    // The server has claimed the session once the user message is stored (the open
    // answer waits for its first terminal boundary).
    let deadline = Instant::now() + Duration::from_secs(20);
    while env.history("ses_held").len() < 3 {
        assert!(Instant::now() < deadline, "the open upload wrote nothing");
        std::thread::sleep(Duration::from_millis(50));
    }

    let turn = env.file(
        "turn.jsonl",
        &format!("{USER}\n{}", text_answer("from replay")),
    );
    let replay = |extra: &[&str]| {
        let mut args = vec!["replay", "--session", "ses_held"];
        args.extend_from_slice(extra);
        args.push(&turn);
        env.run(&args)
    };

    // By default: at once, naming the holder and what to do.
    let started = Instant::now();
    let out = replay(&[]);
    let err = common::failed(&out);
    assert!(err.contains("held by serve@"), "{err}");
    assert!(
        err.contains("--take-over") && err.contains("--wait"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));

    // --wait waits for the holder that long, then gives up naming it.
    let started = Instant::now();
    let err =
        common::failed(&env.run(&["--wait", "700ms", "replay", "--session", "ses_held", &turn]));
    assert!(err.contains("held by serve@"), "{err}");
    assert!(started.elapsed() >= Duration::from_millis(700));

    // --take-over takes it: the open upload's next write is refused, naming the taker.
    let out = replay(&["--take-over"]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    chunk(
        &mut open,
        "{\"type\":\"text-delta\",\"id\":\"t\",\"text\":\"late\"}\n{\"type\":\"text-end\",\"id\":\"t\"}\n{\"type\":\"finish\"}\n",
    );
    open.write_all(b"0\r\n\r\n").expect("end the body");
    let mut answer = String::new();
    open.read_to_string(&mut answer).expect("the answer");
    assert!(answer.starts_with("HTTP/1.1 409"), "{answer}");
    assert!(answer.contains("replay@"), "{answer}");

    // The replay released its claim when it ended: the next replay need not wait.
    let out = replay(&[]);
    assert!(out.status.success(), "{}", common::stderr(&out));
    let history = env.history("ses_held");
    // Two answered turns of the uploads and replays, and the open upload's user
    // message with its answer left open by the refusal.
    assert!(history.len() >= 6, "{history:?}");

    let pid = server.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status();
    assert!(killed.is_ok_and(|s| s.success()));
    assert!(server.wait().is_ok_and(|s| s.success()));
}
