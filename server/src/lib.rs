//! forge-store over HTTP.
//!
//! [`router`] serves an opened [`Forge`] (any backend):
//!
//! - the read API in opencode's shapes — `GET /session`, `GET /session/{id}`,
//!   `GET /session/{id}/message`, `GET /session/{id}/message/{messageID}` — so opencode's
//!   clients read it, plus forge-store's own `GET /session/{id}/view` (the compacted view
//!   and what it hides) and `GET /session/{id}/export`;
//! - live events: `GET /event` (every session of the tenant, opencode's wire form) and
//!   `GET /session/{id}/event` (one session, SSE `id:` = the event's `seq`), both
//!   resumable with `Last-Event-ID`;
//! - the write API: `POST /session`, `POST /session/{id}/stream` (a turn as NDJSON stream
//!   events, processed while it uploads), `POST /import`, `DELETE /session/{id}`;
//! - `GET /` the inspector page, `GET /health`.
//!
//! Every route but `/health` and the page needs `Authorization: Bearer TOKEN`; the token
//! names the tenant (see [`auth`]). Errors are [`ApiError`]s. `docs/serve.md` is the
//! reference.

mod api;
pub mod auth;
mod error;
mod events;
pub mod follow;
mod ingest;
mod inspector;
pub mod metrics;
pub mod pruner;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use forge_store::{Forge, TenantId};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use auth::{new_token, Tokens};
pub use error::ApiError;
pub use follow::{follow, FollowOptions, FollowReport};
pub use pruner::Pruning;

/// Who may call the API.
#[derive(Clone, Debug)]
pub enum Access {
    /// Bearer tokens, each opening one tenant.
    Tokens(Tokens),
    /// No authentication: every request is this tenant's (for a loopback-only
    /// development server).
    Open(TenantId),
}

/// What the server accepts and how it streams.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// Who may call the API.
    pub access: Access,
    /// The largest request body (`POST /import`, all lines of one `POST …/stream`), in
    /// bytes.
    pub max_body: usize,
    /// The longest NDJSON line of a stream upload, in bytes.
    pub max_line: usize,
    /// How often an idle SSE connection gets a `server.heartbeat` event.
    pub heartbeat: Duration,
    /// Events of `GET /event` kept per tenant for clients that reconnect with
    /// `Last-Event-ID`.
    pub event_replay: usize,
    /// Events a client of `GET /event` may be behind before it is dropped (a session
    /// stream's limit is its bus's).
    pub client_buffer: usize,
    /// The background pruner: a retention policy applied to every tenant the server
    /// serves, at an interval. `None`: nothing is pruned.
    pub pruning: Option<Pruning>,
    /// `GET /stats` includes what the backend occupies for all tenants (its files,
    /// relations or server memory). Off by default: a tenant then sees only its own
    /// counts.
    pub share_footprint: bool,
}

impl ServerOptions {
    /// Defaults: 64 MiB bodies, 8 MiB lines, a heartbeat every 10 s, 10,000 events kept
    /// per tenant for `/event` resumes, clients dropped 4,096 events behind.
    pub fn new(access: Access) -> Self {
        Self {
            access,
            max_body: 64 << 20,
            max_line: 8 << 20,
            heartbeat: Duration::from_secs(10),
            event_replay: 10_000,
            client_buffer: 4096,
            pruning: None,
            share_footprint: false,
        }
    }
}

/// What every handler shares.
pub(crate) struct AppState {
    pub forge: Forge,
    pub options: ServerOptions,
    /// Flips to `true` when the server starts shutting down: streams end, uploads stop
    /// reading and close their turn.
    pub shutdown: watch::Receiver<bool>,
    pub hubs: events::Hubs,
}

/// A handle that shuts a server down: [`Shutdown::trigger`] stops accepting
/// connections, ends the SSE streams and closes the turns being uploaded.
#[derive(Clone, Debug)]
pub struct Shutdown(Arc<watch::Sender<bool>>);

impl Shutdown {
    /// A handle not triggered yet.
    pub fn new() -> Self {
        Self(Arc::new(watch::channel(false).0))
    }

    /// Starts the shutdown.
    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    /// A receiver that sees the shutdown (for [`follow()`]).
    pub fn subscribe(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

/// Waits until `rx` says the server is shutting down.
pub(crate) async fn shutting_down(mut rx: watch::Receiver<bool>) {
    // An error means the sender is gone: that is a shutdown too.
    let _ = rx.wait_for(|down| *down).await;
}

/// The API and the page, serving `forge`.
pub fn router(forge: Forge, options: ServerOptions, shutdown: &Shutdown) -> Router {
    let state = Arc::new(AppState {
        hubs: events::Hubs::new(
            forge.engine().bus.clone(),
            options.event_replay,
            options.client_buffer,
        ),
        forge,
        options,
        shutdown: shutdown.subscribe(),
    });
    metrics::prometheus();
    api::routes()
        .merge(events::routes())
        .merge(inspector::routes())
        .merge(metrics::routes())
        .with_state(state)
}

/// Serves on `listener` until `shutdown` is triggered, then stops accepting, lets the
/// requests in flight end (uploads close their turn, streams end), commits what the
/// projector holds and returns.
///
/// # Errors
/// The listener's I/O error, or the store's error while committing at the end.
pub async fn serve(
    listener: TcpListener,
    forge: Forge,
    options: ServerOptions,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    let pruner = options.pruning.clone().map(|p| {
        let tenants = match &options.access {
            Access::Open(t) => vec![t.clone()],
            Access::Tokens(tokens) => tokens.tenants(),
        };
        tokio::spawn(pruner::run(forge.clone(), tenants, p, shutdown.subscribe()))
    });
    let app = router(forge.clone(), options, &shutdown);
    let down = shutting_down(shutdown.subscribe());
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(down)
    .await
    .map_err(ServeError::Io)?;
    if let Some(p) = pruner {
        // It stops at the shutdown, between two transactions.
        let _ = p.await;
    }
    forge.flush().await.map_err(ServeError::Flush)
}

/// Why [`serve`] stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Accepting connections failed.
    #[error("serving: {0}")]
    Io(#[source] std::io::Error),
    /// Committing what the projector held at shutdown failed.
    #[error("committing at shutdown: {0}")]
    Flush(#[source] forge_store::Error),
}
