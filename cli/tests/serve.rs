//! `forge-store serve` as a process: tokens from a file made by `forge-store token`,
//! refusal to start without any, and SIGTERM ending it with exit 0 after committing.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_forge-store"))
}

/// `forge-store --backend BACKEND ARGS…`.
fn on(backend: &str, args: &[&str]) -> Command {
    let mut cmd = bin();
    cmd.args(["--backend", backend]).args(args);
    cmd
}

#[test]
fn serve_runs_on_made_tokens_and_stops_cleanly_on_sigterm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = format!("redb://{}", dir.path().join("s.redb").display());
    // Without tokens it refuses, saying how to make one.
    let out = on(&backend, &["serve", "--listen", "127.0.0.1:0"])
        .env_remove("FORGE_TOKENS")
        .env_remove("FORGE_TOKENS_FILE")
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("forge-store token"), "{err}");
    // --no-auth is for loopback only.
    let out = on(&backend, &["serve", "--no-auth", "--listen", "0.0.0.0:0"])
        .output()
        .expect("runs");
    assert!(!out.status.success());
    // A token, its line in a tokens file.
    let made = bin()
        .args(["--tenant", "acme", "token"])
        .output()
        .expect("runs");
    let made = String::from_utf8_lossy(&made.stdout).to_string();
    let token = made
        .lines()
        .find_map(|l| l.split("fst_").nth(1))
        .map(|t| format!("fst_{}", t.trim()))
        .expect("a token");
    let entry = made
        .lines()
        .find(|l| l.starts_with("tokens file line"))
        .and_then(|l| l.split(':').nth(1))
        .map(str::trim)
        .expect("an entry")
        .to_owned();
    assert!(!entry.contains(&token));
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, format!("# acme\n{entry}\n")).expect("write");
    let mut child = on(&backend, &["serve", "--listen", "127.0.0.1:0", "--tokens"])
        .arg(&tokens)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("starts");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("the listening line");
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .expect("an address")
        .to_owned();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let http = reqwest::Client::new();
        let r = http
            .post(format!("http://{addr}/session"))
            .bearer_auth(&token)
            .json(&serde_json::json!({"id": "ses_cli"}))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status().as_u16(), 200);
        let r = http
            .get(format!("http://{addr}/session"))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status().as_u16(), 401);
    });
    let pid = child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = child.wait().expect("exits");
    assert!(status.success(), "{status}");
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).expect("read");
    assert!(rest.contains("stopped"), "{rest}");
    // What was written is in the file, for the tenant of the token.
    let listed = on(&backend, &["--tenant", "acme", "sessions", "--json"])
        .output()
        .expect("runs");
    assert!(String::from_utf8_lossy(&listed.stdout).contains("ses_cli"));
}
