//! Prometheus exposition of forge-store's metrics ([`forge_store::metrics`]): one
//! recorder per process, installed on first use, rendered by `GET /metrics` on `serve`
//! and by [`listen`] for the commands without an HTTP server of their own (`project`,
//! `follow`).

use std::net::SocketAddr;
use std::sync::OnceLock;

use axum::http::header::CONTENT_TYPE;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio::sync::watch;

use forge_store::metrics as m;

/// The content type of the text exposition format.
const EXPOSITION: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The process's Prometheus recorder, installed on first call. `None` when another
/// recorder was installed first (by a program embedding the server): its owner exports
/// the metrics then.
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), m::LATENCY_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(m::GROUP_BATCHES.into()), m::GROUP_BUCKETS)
                });
            let handle = match builder.and_then(PrometheusBuilder::install_recorder) {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics: no Prometheus recorder (another is installed)");
                    return None;
                }
            };
            m::describe();
            Some(handle)
        })
        .as_ref()
}

/// `GET /metrics`: the exposition, or 503 without a recorder.
pub(crate) async fn render() -> Response {
    match prometheus() {
        Some(h) => {
            h.run_upkeep();
            ([(CONTENT_TYPE, EXPOSITION)], h.render()).into_response()
        }
        None => (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "metrics: another recorder is installed in this process\n",
        )
            .into_response(),
    }
}

/// The route.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route("/metrics", get(render))
}

/// Serves `GET /metrics` alone on `addr` until `shutdown` flips; returns the address it
/// listens on (port 0: any free port).
///
/// # Errors
/// The address cannot be bound.
pub async fn listen(
    addr: SocketAddr,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<SocketAddr> {
    prometheus();
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    tokio::spawn(async move {
        let down = async move {
            let _ = shutdown.wait_for(|d| *d).await;
        };
        if let Err(e) = axum::serve(listener, routes::<()>())
            .with_graceful_shutdown(down)
            .await
        {
            tracing::warn!(error = %e, "metrics listener stopped");
        }
    });
    Ok(bound)
}
