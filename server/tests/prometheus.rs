//! A real Prometheus server (Debian's `prometheus`) scrapes a running `serve` on
//! loopback and answers a query for a metric the test moved: the store commits of an
//! upload. Says `SKIPPED` without the `prometheus` binary (a failure under
//! `FORGE_TEST_REQUIRE_PROMETHEUS=1`, which `.ci/run` sets).

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use forge_server::ServerOptions;
use forge_store::OpenOptions;
use serde_json::Value;

/// Kills the Prometheus server when the test ends, passing or not.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The value of an instant query's single sample; `None` while Prometheus has none.
async fn query(http: &reqwest::Client, prom: &str, q: &str) -> Option<f64> {
    let body: Value = http
        .get(format!("{prom}/api/v1/query"))
        .query(&[("query", q)])
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    let v = body["data"]["result"].get(0)?["value"].get(1)?.as_str()?;
    v.parse().ok()
}

#[tokio::test]
async fn a_real_prometheus_scrapes_serve_and_sees_the_commits_of_an_upload() {
    let test = "prometheus scrape test";
    if Command::new("prometheus")
        .arg("--version")
        .output()
        .is_err()
    {
        forge_testkit::skip_unless(
            "FORGE_TEST_REQUIRE_PROMETHEUS",
            test,
            "no `prometheus` binary (Debian: apt-get install prometheus)",
        );
        return;
    }
    let s = redb_server(
        ServerOptions::new(two_tenants()),
        OpenOptions::new().metrics(true),
    )
    .await;
    let target = s.base.trim_start_matches("http://").to_owned();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: forge\n    \
             metrics_path: /metrics\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let prom = format!("http://127.0.0.1:{port}");
    let _server = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );
    let http = reqwest::Client::new();
    let commits = r#"sum(forge_store_commits_total{job="forge"})"#;
    // Up and scraping: the target is healthy before anything is written.
    let deadline = tokio::time::Instant::now() + Duration::from_mins(1);
    loop {
        if query(&http, &prom, r#"up{job="forge"}"#).await == Some(1.0) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "prometheus never scraped {target}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let before = query(&http, &prom, commits).await.unwrap_or(0.0);
    s.create(TOKEN_A, "ses_scraped").await;
    let (status, _) = s
        .upload(TOKEN_A, "ses_scraped", ndjson(&turn("hi", 3, "a ")))
        .await;
    assert_eq!(status, 200);
    // What the server itself says it committed since.
    let text = s
        .http
        .get(format!("{}/metrics", s.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let exposed: f64 = text
        .lines()
        .filter(|l| l.starts_with("forge_store_commits_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        exposed > before,
        "the exposition shows {exposed} commits:\n{text}"
    );
    // Prometheus sees them at its next scrape.
    loop {
        let now = query(&http, &prom, commits).await.unwrap_or(0.0);
        if now >= exposed {
            assert!(now > before);
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "prometheus reports {now} commits, the server exposed {exposed}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let latency = query(
        &http,
        &prom,
        r#"sum(forge_store_commit_seconds_count{job="forge"})"#,
    )
    .await;
    assert!(latency.is_some_and(|n| n > 0.0), "{latency:?}");
    s.stop().await;
}
