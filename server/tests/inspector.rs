//! The inspector page in a real headless browser (Debian's `chromium` driven through
//! `chromedriver` over the WebDriver protocol): the timeline of a session with a
//! compaction boundary, the toggle between the full history and the compacted view,
//! and text growing on the page while a turn uploads.
//!
//! Needs `chromium` and `chromium-driver` (`.ci/run` installs them). Without them the
//! test prints `SKIPPED` — and fails under `FORGE_TEST_REQUIRE_BROWSER=1`. Writes a
//! screenshot to `$CARGO_TARGET_TMPDIR/inspector.png` (and to `FORGE_SCREENSHOT_TO`
//! when set).

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| PathBuf::from(d).join(name))
        .find(|p| p.is_file())
}

/// A script that counts the elements `css` selects.
fn count_of(css: &str) -> String {
    format!("return document.querySelectorAll('{css}').length")
}

/// A WebDriver session on a headless Chromium.
struct Browser {
    http: reqwest::Client,
    base: String,
    _driver: tokio::process::Child,
}

impl Browser {
    async fn start() -> Option<Self> {
        let found = (
            which("chromedriver"),
            which("chromium").or_else(|| which("chromium-browser")),
        );
        let (Some(driver), Some(chromium)) = found else {
            let why = "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)";
            forge_testkit::skip_unless("FORGE_TEST_REQUIRE_BROWSER", "inspector browser test", why);
            return None;
        };
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            l.local_addr().expect("addr").port()
        };
        let child = tokio::process::Command::new(driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver starts");
        let http = reqwest::Client::new();
        let driver_url = format!("http://127.0.0.1:{port}");
        until_up("chromedriver", Duration::from_secs(20), || {
            http.get(format!("{driver_url}/status"))
        })
        .await;
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1400,1000"],
            },
        }}});
        let r: Value = http
            .post(format!("{driver_url}/session"))
            .json(&caps)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("json");
        let id = r["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no WebDriver session: {r}"));
        Some(Self {
            http,
            base: format!("{driver_url}/session/{id}"),
            _driver: child,
        })
    }

    /// A WebDriver command's whole answer (`{"value": …}`, an error or not).
    async fn send(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if !body.is_null() {
            req = req.json(&body);
        }
        req.send()
            .await
            .expect("WebDriver request")
            .json()
            .await
            .expect("json")
    }

    /// A WebDriver command's value; an error fails the test.
    async fn cmd(&self, method: reqwest::Method, path: &str, body: Value) -> Value {
        let r = self.send(method, path, body).await;
        assert!(r["value"].get("error").is_none(), "{path}: {r}");
        r["value"].clone()
    }

    async fn goto(&self, url: &str) {
        self.cmd(reqwest::Method::POST, "/url", json!({"url": url}))
            .await;
    }

    async fn js(&self, script: &str) -> Value {
        self.cmd(
            reqwest::Method::POST,
            "/execute/sync",
            json!({"script": script, "args": []}),
        )
        .await
    }

    /// Clicks the element as a user would (WebDriver element click). The
    /// page re-renders as live events arrive, so an element found a moment
    /// ago may be replaced before the click lands ("stale element
    /// reference"); the click then finds the element again, as a user's
    /// second click would. Any other error fails the test.
    async fn click(&self, css: &str) {
        let start = Instant::now();
        loop {
            let el = self
                .cmd(
                    reqwest::Method::POST,
                    "/element",
                    json!({"using": "css selector", "value": css}),
                )
                .await;
            let id = el
                .as_object()
                .and_then(|o| o.values().next())
                .and_then(Value::as_str)
                .expect("element id")
                .to_owned();
            let r = self
                .send(
                    reqwest::Method::POST,
                    &format!("/element/{id}/click"),
                    json!({}),
                )
                .await;
            match r["value"].get("error").and_then(Value::as_str) {
                None => return,
                Some("stale element reference") if start.elapsed() < Duration::from_secs(10) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Some(_) => panic!("click {css}: {r}"),
            }
        }
    }

    /// How many elements `css` selects.
    async fn count(&self, css: &str) -> Value {
        self.js(&count_of(css)).await
    }

    /// Waits until `css` selects `n` elements.
    async fn until_count(&self, css: &str, n: u64) {
        self.until(&count_of(css), &json!(n)).await;
    }

    /// Waits until `script` returns `want`.
    async fn until(&self, script: &str, want: &Value) {
        let start = Instant::now();
        loop {
            let got = self.js(script).await;
            if &got == want {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{script} gave {got}, waited for {want}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn screenshot(&self) -> Vec<u8> {
        let v = self
            .cmd(reqwest::Method::GET, "/screenshot", Value::Null)
            .await;
        base64_decode(v.as_str().expect("base64"))
    }

    async fn quit(self) {
        let _ = self.http.delete(&self.base).send().await;
    }
}

/// Standard base64, as WebDriver sends screenshots.
fn base64_decode(s: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let bytes: Vec<u8> = s
        .bytes()
        .filter(|c| *c != b'=' && !c.is_ascii_whitespace())
        .collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= value(*c) << (18 - 6 * i);
        }
        let got = chunk.len() * 6 / 8;
        out.extend_from_slice(&n.to_be_bytes()[1..=got]);
    }
    out
}

#[tokio::test]
async fn the_page_shows_history_the_compacted_view_and_live_text() {
    let Some(browser) = Browser::start().await else {
        return;
    };
    let s = session_server("ses_inspect").await;
    let history = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/streams/compaction.jsonl"),
    )
    .expect("the example stream");
    let (status, body) = s.upload(TOKEN_A, "ses_inspect", history).await;
    assert_eq!(status, 200, "{body}");
    let view = s.json("/session/ses_inspect/view", TOKEN_A, 200).await;
    let stored = view["stored"].as_u64().expect("stored");
    let hidden = view["hidden"].as_u64().expect("hidden");
    let in_view = view["messages"].as_array().expect("messages").len() as u64;
    assert!(hidden > 0, "the example hides messages behind its boundary");

    // The token goes where the page keeps it, then the session's page.
    browser.goto(&format!("{}/", s.base)).await;
    browser
        .js(&format!(
            "localStorage.setItem('forge-token', '{TOKEN_A}'); return true;"
        ))
        .await;
    browser
        .goto(&format!("{}/?session=ses_inspect", s.base))
        .await;
    browser.until_count("#timeline .msg", stored).await;
    browser
        .until_count("#timeline .msg.hidden-by-compaction", hidden)
        .await;
    let banner = browser
        .js("return document.querySelector('#banner').textContent")
        .await;
    assert!(
        banner
            .as_str()
            .is_some_and(|b| b.contains("hidden from the model by compaction")),
        "{banner}"
    );
    assert_eq!(
        browser.count("#sessions .item").await,
        json!(1),
        "the token's tenant has one session"
    );

    // The toggle: the compacted view shows exactly the view's messages.
    browser.click("#mode-view").await;
    browser.until_count("#timeline .msg", in_view).await;
    assert_eq!(
        browser.count("#timeline .msg.hidden-by-compaction").await,
        json!(0)
    );
    browser.click("#mode-full").await;
    browser.until_count("#timeline .msg", stored).await;

    // A turn uploads; its text grows on the page while the body is still open.
    let mut lines = vec![
        json!({"type": "user", "text": "Watch this grow."}).to_string(),
        r#"{"type":"start-step"}"#.to_owned(),
        r#"{"type":"text-start","id":"live"}"#.to_owned(),
    ];
    let words = [
        "Deltas ", "reach ", "the ", "page ", "while ", "the ", "upload ", "runs.",
    ];
    lines.extend(
        words
            .iter()
            .map(|w| json!({"type": "text-delta", "id": "live", "text": w}).to_string()),
    );
    let mut upload = s.upload_lines(TOKEN_A, "ses_inspect", 16);
    let text =
        "return [...document.querySelectorAll('#timeline pre.text')].map(p => p.textContent).pop()";
    for l in &lines[..5] {
        upload.line(l).await;
    }
    browser.until(text, &json!("Deltas reach ")).await;
    for l in &lines[5..] {
        upload.line(l).await;
    }
    browser.until(text, &json!(words.concat())).await;
    assert_eq!(
        browser
            .js("return document.querySelectorAll('#timeline .tag.open').length > 0")
            .await,
        json!(true),
        "the streaming part and its message are marked open"
    );
    browser
        .js("const d = document.querySelector('#detail'); d.scrollTop = d.scrollHeight; return true;")
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let png = browser.screenshot().await;
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("inspector.png");
    std::fs::write(&out, &png).expect("write the screenshot");
    if let Some(to) = std::env::var_os("FORGE_SCREENSHOT_TO") {
        std::fs::write(to, &png).expect("write the screenshot");
    }
    assert!(
        !upload.is_finished(),
        "all of it happened during the upload"
    );
    for l in [
        r#"{"type":"text-end","id":"live"}"#,
        r#"{"type":"finish-step","finishReason":"stop","usage":{"inputTokens":3,"outputTokens":8}}"#,
        r#"{"type":"finish","finishReason":"stop"}"#,
    ] {
        upload.line(l).await;
    }
    let r = upload.finish().await;
    assert_eq!(r.status().as_u16(), 200);
    // Closed: no part or message is marked open any more.
    browser.until_count("#timeline .tag.open", 0).await;
    browser.quit().await;
    s.stop().await;
}
