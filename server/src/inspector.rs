//! The inspector page: sessions, one session's timeline, the compacted view beside the
//! full history, and live deltas. One HTML file with its script and style, embedded in
//! the binary.

use std::sync::Arc;

use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use crate::AppState;

const PAGE: &str = include_str!("inspector/index.html");

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new().route("/", get(page))
}

async fn page() -> impl IntoResponse {
    (
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CACHE_CONTROL, "no-cache"),
        ],
        PAGE,
    )
}
