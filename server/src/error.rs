//! Errors as the API returns them: a status code and
//! `{"name": …, "message": …, "data": {"message": …}}`.
//!
//! `name` is stable (clients match on it); `data.message` repeats the message in the
//! place opencode's own errors keep it, so opencode's clients show it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use forge_store::ErrorKind;

/// An API error.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// Stable name: `BadRequest`, `Unauthorized`, `NotFoundError`, `Conflict`,
    /// `PayloadTooLarge`, `BackendUnavailable`, `StorageError`.
    pub name: &'static str,
    /// What went wrong, for a person.
    pub message: String,
}

impl ApiError {
    /// 400 `BadRequest`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "BadRequest", message)
    }

    /// 401 `Unauthorized`.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "Unauthorized", message)
    }

    /// 404 `NotFoundError` (opencode's name for it).
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NotFoundError", message)
    }

    /// 409 `Conflict`: the session exists already, or another writer holds it (or took
    /// it over); the message names the session and, for a held one, its holder.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, "Conflict", message)
    }

    /// 413 `PayloadTooLarge`.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(StatusCode::PAYLOAD_TOO_LARGE, "PayloadTooLarge", message)
    }

    /// 503 `BackendUnavailable`: the backend is down or busy; retrying may succeed.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "BackendUnavailable",
            message,
        )
    }

    /// 501 `NotImplemented`: the backend does not do what was asked.
    pub fn not_implemented(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_IMPLEMENTED, "NotImplemented", message)
    }

    /// 500 `StorageError`: the backend failed in a way a retry does not fix.
    pub fn storage(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "StorageError", message)
    }

    fn new(status: StatusCode, name: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            name,
            message: message.into(),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> serde_json::Value {
        serde_json::json!({
            "name": self.name,
            "message": self.message,
            "data": {"message": self.message},
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(status = %self.status, name = self.name, message = %self.message, "request failed");
        }
        (self.status, Json(self.body())).into_response()
    }
}

impl From<forge_store::Error> for ApiError {
    fn from(e: forge_store::Error) -> Self {
        use forge_store::Error as E;
        let message = e.to_string();
        match &e {
            E::Input { .. } | E::Url { .. } | E::FeatureDisabled { .. } => {
                Self::bad_request(message)
            }
            E::SessionNotFound { .. } | E::MessageNotFound { .. } => Self::not_found(message),
            E::Store { source, .. } | E::Open { source, .. } => from_core(source, message),
            _ => Self::storage(message),
        }
    }
}

/// The status of an engine error, with `message` (which carries more context).
pub(crate) fn from_core(source: &forge_store::CoreError, message: String) -> ApiError {
    if source.is_retryable() {
        return ApiError::unavailable(message);
    }
    match source.kind() {
        // Another writer holds the session, or took it over from this one: the message
        // names the holder.
        ErrorKind::Conflict | ErrorKind::Held | ErrorKind::Fenced => ApiError::conflict(message),
        ErrorKind::InvalidInput => ApiError::bad_request(message),
        ErrorKind::NotFound => ApiError::not_found(message),
        // The backend does not do it (search on a database opened with `search=off`).
        ErrorKind::Unsupported => ApiError::not_implemented(message),
        _ => ApiError::storage(message),
    }
}
