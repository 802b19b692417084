//! The read and write API.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::header::{HeaderValue, AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use forge_store::model::Session;
use forge_store::{
    Cursor, MessageId, ReplayOptions, SessionId, SessionState, TenantId, MAX_PAGE_LIMIT,
};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::{ingest, Access, AppState};

type St = State<Arc<AppState>>;

/// The header that carries a session's `seq` with a snapshot: subscribe to the
/// session's events with `Last-Event-ID` set to it to continue without gap or repeat.
pub const SEQ_HEADER: &str = "x-forge-seq";
/// The header that carries the cursor of the next (older) page.
pub const NEXT_HEADER: &str = "x-next-cursor";

pub(crate) fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/health", get(health))
        .route("/session", get(sessions).post(create_session))
        .route("/session/{id}", get(session).delete(delete_session))
        .route("/session/{id}/message", get(messages))
        .route("/session/{id}/message/{message}", get(message))
        .route("/session/{id}/fork", post(fork))
        .route("/session/{id}/revert", post(revert))
        .route("/session/{id}/unrevert", post(unrevert))
        .route("/api/session/{id}/revert/stage", post(revert_stage))
        .route("/api/session/{id}/revert/clear", post(revert_clear))
        .route("/api/session/{id}/revert/commit", post(revert_commit))
        .route("/session/{id}/view", get(view))
        .route("/session/{id}/export", get(export))
        .route("/session/{id}/stream", post(stream))
        .route("/import", post(import))
        .route("/stats", get(stats))
        .route("/find", get(find))
}

/// Query parameters of `GET /find`.
#[derive(Deserialize)]
struct FindQuery {
    /// The words to find.
    query: Option<String>,
    /// Only this session's parts.
    #[serde(rename = "sessionID")]
    session_id: Option<String>,
    /// At most this many hits (default 20, up to 200).
    limit: Option<usize>,
}

/// The caller's tenant's parts holding every word of `query`, best first
/// (`forge_store::search`): `[{sessionID, messageID, partID, type, score, snippet,
/// highlights}]`. A part a revert mark hides is not found.
async fn find(
    State(st): St,
    Tenant(tenant): Tenant,
    Query(q): Query<FindQuery>,
) -> Result<Response, ApiError> {
    let Some(text) = q.query else {
        return Err(ApiError::bad_request(
            "GET /find needs ?query=WORDS (the words to find)",
        ));
    };
    let mut query = forge_store::search::SearchQuery::new(text);
    query.limit = q.limit.unwrap_or(0);
    query.session = q.session_id.map(SessionId::from);
    let hits = st.forge.search(&tenant, &query).await?;
    Ok(Json(hits).into_response())
}

/// The tenant the request's bearer token opens.
pub(crate) struct Tenant(pub TenantId);

impl FromRequestParts<Arc<AppState>> for Tenant {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let tokens = match &state.options.access {
            Access::Open(tenant) => return Ok(Self(tenant.clone())),
            Access::Tokens(tokens) => tokens,
        };
        let refuse = |message: &str| {
            let mut r = ApiError::unauthorized(message).into_response();
            r.headers_mut()
                .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        };
        let Some(value) = parts.headers.get(AUTHORIZATION) else {
            return Err(refuse(
                "this server needs a bearer token: Authorization: Bearer TOKEN",
            ));
        };
        let token = value
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .unwrap_or_default();
        match tokens.tenant(token) {
            Some(tenant) if !token.is_empty() => Ok(Self(tenant.clone())),
            _ => Err(refuse("the bearer token is not one this server knows")),
        }
    }
}

pub(crate) fn session_id(raw: &str) -> Result<SessionId, ApiError> {
    let id = SessionId::from(raw);
    id.check()
        .map_err(|e| ApiError::bad_request(format!("session id: {e}")))?;
    Ok(id)
}

fn message_id(raw: &str) -> Result<MessageId, ApiError> {
    let id = MessageId::from(raw);
    id.check()
        .map_err(|e| ApiError::bad_request(format!("message id: {e}")))?;
    Ok(id)
}

fn with_header(mut response: Response, name: &'static str, value: &str) -> Response {
    if let Ok(v) = HeaderValue::from_str(value) {
        response.headers_mut().insert(name, v);
    }
    response
}

async fn health(State(st): St) -> Json<Value> {
    let caps = st.forge.store().capabilities();
    Json(json!({
        "ok": true,
        "backend": caps.name,
        "bus": st.forge.engine().bus.capabilities().name,
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

/// What the caller's tenant stores: sessions, messages, parts, logical bytes, oldest and
/// newest, the largest sessions; with `share_footprint`, what the backend occupies for
/// all tenants (else `footprint` is `null`).
async fn stats(State(st): St, Tenant(tenant): Tenant) -> Result<Response, ApiError> {
    let stats = st.forge.stats(&tenant).await?;
    let mut body = serde_json::to_value(&stats)
        .map_err(|e| ApiError::storage(format!("encoding the stats: {e}")))?;
    if !st.options.share_footprint {
        body["footprint"] = Value::Null;
    }
    Ok(Json(body).into_response())
}

/// Query parameters of the listings. opencode's clients also send `directory`,
/// `workspace`, `scope`, `path`, `start`: accepted and ignored (a forge-store tenant is
/// not a directory).
#[derive(Deserialize)]
struct ListQuery {
    limit: Option<usize>,
    before: Option<String>,
    /// Sessions only: `true` leaves out sub-task sessions (those with a parent).
    roots: Option<bool>,
    /// Sessions only: titles that contain it (case-insensitive).
    search: Option<String>,
}

/// Sessions, most recently updated first. `limit` pages them; the cursor of the next
/// page comes in `x-next-cursor` (`UPDATED.ID` of the last one listed).
async fn sessions(
    State(st): St,
    Tenant(tenant): Tenant,
    Query(q): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let mut all: Vec<SessionState> = st.forge.sessions(&tenant).await?;
    if q.roots == Some(true) {
        all.retain(|s| s.info.parent_id.is_none());
    }
    if let Some(search) = q.search.as_deref().map(str::to_lowercase) {
        all.retain(|s| s.info.title.to_lowercase().contains(&search));
    }
    all.sort_by(|a, b| {
        (b.info.time.updated, b.info.id.as_str()).cmp(&(a.info.time.updated, a.info.id.as_str()))
    });
    let start = match q.before.as_deref() {
        None => 0,
        Some(cursor) => {
            let (updated, id) = cursor
                .split_once('.')
                .and_then(|(u, id)| Some((u.parse::<i64>().ok()?, id)))
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "before: not a cursor this server gave (UPDATED.ID): {}",
                        forge_store::text::clip(cursor)
                    ))
                })?;
            all.partition_point(|s| (s.info.time.updated, s.info.id.as_str()) >= (updated, id))
        }
    };
    let limit = q.limit.filter(|l| *l > 0).unwrap_or(usize::MAX);
    let page: Vec<&Session> = all[start..].iter().take(limit).map(|s| &s.info).collect();
    let next = (start + page.len() < all.len())
        .then(|| page.last().map(|s| format!("{}.{}", s.time.updated, s.id)))
        .flatten();
    Ok(paged(
        Json(&page).into_response(),
        next.as_deref(),
        "/session",
        &q,
        limit,
    ))
}

/// Adds the next page's cursor as opencode does: `x-next-cursor`, and a `Link` with
/// `rel="next"` (relative to this server).
fn paged(
    response: Response,
    next: Option<&str>,
    path: &str,
    q: &ListQuery,
    limit: usize,
) -> Response {
    let Some(next) = next else {
        return response;
    };
    let mut link = format!("<{path}?before={}", encode_query(next));
    if limit != usize::MAX {
        let _ = write!(link, "&limit={limit}");
    }
    if q.roots == Some(true) {
        link.push_str("&roots=true");
    }
    if let Some(search) = &q.search {
        let _ = write!(link, "&search={}", encode_query(search));
    }
    link.push_str(">; rel=\"next\"");
    let response = with_header(response, NEXT_HEADER, next);
    let response = with_header(response, "link", &link);
    with_header(
        response,
        "access-control-expose-headers",
        "Link, X-Next-Cursor, X-Forge-Seq",
    )
}

/// Percent-encodes a query value (everything but unreserved characters).
pub(crate) fn encode_query(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn session(
    State(st): St,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let state = st.forge.session(&tenant, &session_id(&id)?).await?;
    Ok(with_header(
        Json(&state.info).into_response(),
        SEQ_HEADER,
        &state.seq.to_string(),
    ))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NewSession {
    id: Option<String>,
    title: Option<String>,
    #[serde(rename = "parentID")]
    parent_id: Option<String>,
}

async fn create_session(
    State(st): St,
    Tenant(tenant): Tenant,
    body: Option<Json<NewSession>>,
) -> Result<Response, ApiError> {
    let body = body.map_or(
        NewSession {
            id: None,
            title: None,
            parent_id: None,
        },
        |Json(b)| b,
    );
    let now = forge_store::id::now_ms();
    let mut info = Session::new(body.title.unwrap_or_default(), now);
    if let Some(id) = body.id {
        info.id = session_id(&id)?;
    }
    if let Some(parent) = body.parent_id {
        let parent = session_id(&parent)?;
        st.forge.session(&tenant, &parent).await?;
        info.parent_id = Some(parent);
    }
    if info.title.is_empty() {
        info.title = format!("New session - {}", info.id);
    }
    let state = st.forge.create_session(&tenant, info).await?;
    Ok(with_header(
        Json(&state.info).into_response(),
        SEQ_HEADER,
        &state.seq.to_string(),
    ))
}

#[derive(Deserialize)]
struct ForkBody {
    #[serde(rename = "messageID")]
    message_id: Option<String>,
}

/// opencode's fork: a new session with the messages before `messageID` (all without
/// it), as the new session's info.
async fn fork(
    State(st): St,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    body: Option<Json<ForkBody>>,
) -> Result<Response, ApiError> {
    let source = session_id(&id)?;
    let point = match body.and_then(|Json(b)| b.message_id) {
        Some(m) => forge_store::fork::ForkPoint::Before(message_id(&m)?),
        None => forge_store::fork::ForkPoint::All,
    };
    let forked = st.forge.fork(&tenant, &source, &point).await?;
    Ok(with_header(
        Json(&forked.session.info).into_response(),
        SEQ_HEADER,
        &forked.session.seq.to_string(),
    ))
}

#[derive(Deserialize)]
struct RevertBody {
    #[serde(rename = "messageID")]
    message_id: String,
    #[serde(rename = "partID")]
    part_id: Option<String>,
}

/// opencode's revert: hides `messageID` and what follows (with `partID`, that
/// message's parts from it on) until unrevert, or a new message drops them.
async fn revert(
    State(st): St,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    Json(body): Json<RevertBody>,
) -> Result<Json<Session>, ApiError> {
    let session = session_id(&id)?;
    let message = message_id(&body.message_id)?;
    let part = body.part_id.map(forge_store::id::PartId::from);
    let state = st
        .forge
        .revert(&tenant, &session, &message, part.as_ref())
        .await?;
    Ok(Json(state.info))
}

/// opencode's unrevert: shows everything again.
async fn unrevert(
    State(st): St,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Json<Session>, ApiError> {
    let state = st.forge.unrevert(&tenant, &session_id(&id)?).await?;
    Ok(Json(state.info))
}

/// The body of opencode's v2 `revert/stage`.
#[derive(Deserialize)]
struct StageBody {
    #[serde(rename = "messageID")]
    message_id: String,
    /// Whether opencode also reverts the files the hidden turns changed: accepted and
    /// ignored (forge-store keeps no files).
    #[allow(dead_code)]
    files: Option<bool>,
}

/// opencode's v2 `revert/stage`: marks `messageID` (it and what follows are hidden,
/// as [`revert`]); answers `{data: {messageID}}`, its `RevertState`.
async fn revert_stage(
    State(st): St,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    Json(body): Json<StageBody>,
) -> Result<Json<Value>, ApiError> {
    let session = session_id(&id)?;
    let message = message_id(&body.message_id)?;
    let state = st.forge.revert(&tenant, &session, &message, None).await?;
    let mark = state
        .info
        .extra
        .get("revert")
        .cloned()
        .unwrap_or(Value::Null);
    Ok(Json(json!({ "data": mark })))
}

/// opencode's v2 `revert/clear`: the mark is cleared, everything shows again (204).
async fn revert_clear(
    State(st): St,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    st.forge.unrevert(&tenant, &session_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// opencode's v2 `revert/commit`: what the mark hides is removed and the mark cleared,
/// in one batch; a session without a mark is left as it is (204).
async fn revert_commit(
    State(st): St,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    st.forge.revert_commit(&tenant, &session_id(&id)?).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn delete_session(
    State(st): St,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Json<bool>, ApiError> {
    st.forge.delete_session(&tenant, &session_id(&id)?).await?;
    Ok(Json(true))
}

/// A page of messages with their parts, oldest first: the newest `limit` (all without
/// it, or with 0) before the cursor `before`; the next (older) page's cursor in
/// `x-next-cursor` and `Link`, as opencode pages them.
async fn messages(
    State(st): St,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    Query(q): Query<ListQuery>,
) -> Result<Response, ApiError> {
    let id = session_id(&id)?;
    let state = st.forge.session(&tenant, &id).await?;
    let before = q
        .before
        .as_deref()
        .map(|c| {
            c.parse::<Cursor>().map_err(|e| {
                ApiError::bad_request(format!("before: not a cursor this server gave: {e}"))
            })
        })
        .transpose()?;
    let limit = q.limit.filter(|l| *l > 0);
    let (messages, next) = match limit {
        None if before.is_none() => (st.forge.history_all(&tenant, &id).await?, None),
        limit => {
            let cursor = before;
            // Beyond the store's cap, pages are joined here: opencode's clients ask for
            // any number.
            let mut want = limit.unwrap_or(usize::MAX).max(1);
            let mut out = Vec::new();
            let mut cursor = cursor;
            loop {
                let page = st
                    .forge
                    .history(&tenant, &id, cursor.as_ref(), want.min(MAX_PAGE_LIMIT))
                    .await?;
                want = want.saturating_sub(page.messages.len());
                let mut older = page.messages;
                older.append(&mut out);
                out = older;
                cursor = page.next;
                if want == 0 || cursor.is_none() {
                    break;
                }
            }
            (out, cursor)
        }
    };
    let response = with_header(
        Json(&messages).into_response(),
        SEQ_HEADER,
        &state.seq.to_string(),
    );
    let next = next.map(|c| c.to_string());
    let path = format!("/session/{}/message", encode_query(id.as_str()));
    Ok(paged(
        response,
        next.as_deref(),
        &path,
        &q,
        limit.unwrap_or(usize::MAX),
    ))
}

async fn message(
    State(st): St,
    Tenant(tenant): Tenant,
    Path((id, message)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let m = st
        .forge
        .message(&tenant, &session_id(&id)?, &message_id(&message)?)
        .await?;
    Ok(Json(&m).into_response())
}

#[derive(Deserialize)]
struct ViewQuery {
    /// `model-messages` (the AI SDK's `ModelMessage[]`) or `ui-messages` (`UIMessage[]`);
    /// unset: the view report.
    format: Option<String>,
    /// The AI SDK major of those shapes: 5, 6 or 7 (the default).
    sdk: Option<String>,
}

/// The compacted view: the report (`{session, boundary, tail, stored, hidden, messages}`),
/// or with `?format=model-messages|ui-messages` the next request in the AI SDK's shapes.
async fn view(
    State(st): St,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    Query(q): Query<ViewQuery>,
) -> Result<Response, ApiError> {
    let sid = session_id(&id)?;
    let sdk = match q.sdk.as_deref() {
        None => forge_store::ai_sdk::AiSdk::default(),
        Some(s) => s
            .parse()
            .map_err(|e| ApiError::bad_request(format!("sdk: {e}")))?,
    };
    let messages = match q.format.as_deref() {
        None | Some("view") => {
            let report = st.forge.view_report(&tenant, &sid).await?;
            return Ok(Json(&report).into_response());
        }
        Some("model-messages") => st.forge.model_messages(&tenant, &sid, sdk).await?,
        Some("ui-messages") => st.forge.ui_messages(&tenant, &sid, sdk).await?,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "format: {other:?}: expected view, model-messages or ui-messages"
            )))
        }
    };
    Ok(Json(&messages).into_response())
}

async fn export(
    State(st): St,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let export = st.forge.export(&tenant, &session_id(&id)?).await?;
    Ok(Json(&export).into_response())
}

#[derive(Deserialize)]
struct StreamQuery {
    /// An event of an unknown type is an error rather than skipped.
    #[serde(default)]
    strict: bool,
    /// Bad lines are skipped and reported rather than ending the upload.
    #[serde(default)]
    lenient: bool,
    /// The title of a session this upload creates.
    title: Option<String>,
}

/// A turn (or several) as NDJSON lines of the replay format, processed as they arrive:
/// subscribers see the deltas while the body is still uploading. The session is
/// created when it does not exist. Answers the replay report.
async fn stream(
    State(st): St,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    Query(q): Query<StreamQuery>,
    body: Body,
) -> Result<Response, ApiError> {
    let id = session_id(&id)?;
    let title = q.title.unwrap_or_else(|| format!("upload to {id}"));
    let opts = ReplayOptions::titled(title)
        .session(id)
        .strict(q.strict)
        .lenient(q.lenient);
    let limits = ingest::Limits {
        max_body: st.options.max_body,
        max_line: st.options.max_line,
    };
    let too_large = Arc::new(AtomicBool::new(false));
    let stopped = Arc::new(AtomicBool::new(false));
    let lines = ingest::lines(
        body,
        limits,
        st.shutdown.clone(),
        Arc::clone(&too_large),
        Arc::clone(&stopped),
    );
    let outcome = st.forge.replay_lines(&tenant, lines, opts).await;
    if stopped.load(Ordering::Acquire) {
        let (report, error) = match outcome {
            Ok(report) => (report, None),
            Err(e) => (e.report, Some(e.error.to_string())),
        };
        let e = ApiError::unavailable(format!(
            "the server is shutting down: the upload was read through line {} and its open \
             answer closed (send the rest to a running server){}",
            report.lines,
            error.map(|e| format!("; {e}")).unwrap_or_default()
        ));
        return Ok(error_with_report(&e, &report));
    }
    match outcome {
        Ok(report) => Ok(Json(&report).into_response()),
        Err(e) => {
            let api = if too_large.load(Ordering::Acquire) {
                ApiError::too_large(e.error.to_string())
            } else {
                ApiError::from(e.error)
            };
            Ok(error_with_report(&api, &e.report))
        }
    }
}

fn error_with_report(e: &ApiError, report: &impl serde::Serialize) -> Response {
    let mut body = e.body();
    body["report"] = serde_json::to_value(report).unwrap_or(Value::Null);
    (e.status, Json(body)).into_response()
}

/// Sessions in the opencode export shape (one document, or one `{info, parts}` per
/// line), written all or nothing.
async fn import(State(st): St, Tenant(tenant): Tenant, body: Body) -> Result<Response, ApiError> {
    let bytes: Bytes = axum::body::to_bytes(body, st.options.max_body)
        .await
        .map_err(|e| {
            if std::error::Error::source(&e).is_some_and(|s| s.to_string().contains("length limit"))
                || e.to_string().contains("length limit")
            {
                ApiError::too_large(format!(
                    "the import is larger than this server's limit of {} bytes",
                    st.options.max_body
                ))
            } else {
                ApiError::bad_request(format!("reading the request body: {e}"))
            }
        })?;
    let text = std::str::from_utf8(&bytes)
        .map_err(|e| ApiError::bad_request(format!("the import is not UTF-8: {e}")))?;
    let report = st.forge.import_str(&tenant, text, &|_, _| {}).await?;
    Ok((StatusCode::OK, Json(&report)).into_response())
}
