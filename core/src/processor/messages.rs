//! Messages around a turn: the user message, the open assistant message, and the
//! message error of a failed stream.

use serde_json::Value;

use crate::id::{MessageId, SessionId};
use crate::model::{
    AssistantMessage, AssistantTime, ErrorName, JsonMap, Message, MessageBody, MessageError,
    Tokens, UserMessage, UserTime,
};

/// Turns a stream `error` value into a message error, in opencode's shapes:
///
/// - a value that already is one (`{name, data}` with an opencode error name) is kept;
/// - an abort (`AbortError`, `ResponseAborted`) becomes `MessageAbortedError`;
/// - an API call error (`AI_APICallError`, any error with a `statusCode`, and the last
///   attempt of an `AI_RetryError`) becomes `APIError {message, statusCode, isRetryable,
///   responseHeaders?, responseBody?, url?}` — `ProviderAuthError` for 401/403 and for
///   `AI_LoadAPIKeyError`, `ContextOverflowError {message, responseBody?}` when the
///   provider says the prompt does not fit;
/// - anything else becomes `UnknownError` with its message (or its JSON text).
pub fn message_error_from(value: &Value) -> MessageError {
    if let Some(name) = value.get("name").and_then(Value::as_str) {
        if !matches!(ErrorName::parse(name.to_owned()), ErrorName::Other(_))
            && value.get("data").is_some()
        {
            if let Ok(e) = serde_json::from_value::<MessageError>(value.clone()) {
                return e;
            }
        }
    }
    let text = error_text(value);
    let Value::Object(m) = value else {
        return MessageError::new(ErrorName::Unknown, text);
    };
    let name = m.get("name").and_then(Value::as_str).unwrap_or("");
    if matches!(name, "AbortError" | "ResponseAborted") {
        return MessageError::aborted(text);
    }
    if name == "AI_LoadAPIKeyError" {
        return MessageError::new(ErrorName::Auth, text);
    }
    // A retry error carries its attempts; the last one says what the provider answered.
    let call = match (name, m.get("errors").and_then(Value::as_array)) {
        ("AI_RetryError", Some(errors)) => errors.last().and_then(Value::as_object).unwrap_or(m),
        _ => m,
    };
    let Some(status) = call.get("statusCode").filter(|s| s.is_number()) else {
        return MessageError::new(ErrorName::Unknown, text);
    };
    let body = call.get("responseBody").and_then(Value::as_str);
    let code = status.as_u64().unwrap_or(0);
    if is_context_overflow(code, &text, body) {
        let mut e = MessageError::new(ErrorName::ContextOverflow, text);
        if let Some(b) = body {
            e.data
                .extra
                .insert("responseBody".into(), Value::String(b.to_owned()));
        }
        return e;
    }
    if code == 401 || code == 403 {
        return MessageError::new(ErrorName::Auth, text);
    }
    let mut e = MessageError::new(ErrorName::Api, text);
    let retryable = call
        .get("isRetryable")
        .and_then(Value::as_bool)
        .unwrap_or(code == 408 || code == 409 || code == 429 || code >= 500);
    e.data.extra.insert("statusCode".into(), status.clone());
    e.data
        .extra
        .insert("isRetryable".into(), Value::Bool(retryable));
    for key in ["responseHeaders", "responseBody", "url"] {
        if let Some(v) = call.get(key).filter(|v| !v.is_null()) {
            e.data.extra.insert(key.into(), v.clone());
        }
    }
    e
}

/// The message of an error value: its `message`, else its text.
fn error_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Object(m) => m
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| value.to_string(), str::to_owned),
        Value::Null => "unknown error".to_owned(),
        other => other.to_string(),
    }
}

/// Whether a provider's answer says the prompt does not fit the model's context: a 413,
/// or the wording the major providers use.
fn is_context_overflow(status: u64, message: &str, body: Option<&str>) -> bool {
    const SIGNS: &[&str] = &[
        "prompt is too long",
        "context length",
        "context_length_exceeded",
        "maximum context",
        "context window",
        "too many tokens",
        "exceeds the context",
        "input is too long",
    ];
    if status == 413 {
        return true;
    }
    let hit = |s: &str| {
        let s = s.to_ascii_lowercase();
        SIGNS.iter().any(|sign| s.contains(sign))
    };
    hit(message) || body.is_some_and(hit)
}

/// A new user message of `agent`, with no model, system prompt or tools set.
pub fn user_message(session_id: SessionId, agent: &str, now: i64) -> Message {
    Message {
        id: MessageId::generate(),
        session_id,
        body: MessageBody::User(UserMessage {
            time: UserTime {
                created: now,
                extra: JsonMap::new(),
            },
            agent: agent.to_owned(),
            model: None,
            system: None,
            tools: None,
            extra: JsonMap::new(),
        }),
    }
}

/// A new open assistant message answering `parent`.
pub fn assistant_message(
    session_id: SessionId,
    parent: MessageId,
    provider_id: &str,
    model_id: &str,
    now: i64,
) -> Message {
    Message {
        id: MessageId::generate(),
        session_id,
        body: MessageBody::Assistant(AssistantMessage {
            time: AssistantTime {
                created: now,
                completed: None,
                extra: JsonMap::new(),
            },
            error: None,
            parent_id: parent,
            model_id: model_id.to_owned(),
            provider_id: provider_id.to_owned(),
            agent: None,
            path: None,
            summary: None,
            cost: 0.0,
            tokens: Tokens::default(),
            finish: None,
            extra: JsonMap::new(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_stream_error_becomes_a_message_error() {
        let api = message_error_from(&json!({"message": "rate limited", "statusCode": 429}));
        assert_eq!(api.name, ErrorName::Api);
        assert_eq!(api.data.message.as_deref(), Some("rate limited"));
        let text = message_error_from(&json!("boom"));
        assert_eq!(text.name, ErrorName::Unknown);
        assert_eq!(text.data.message.as_deref(), Some("boom"));
        let null = message_error_from(&Value::Null);
        assert_eq!(null.data.message.as_deref(), Some("unknown error"));
        let overflow = message_error_from(&json!({"name": "AI_APICallError",
            "message": "Bad Request: prompt is too long", "statusCode": 400,
            "responseBody": "{}", "data": {"type": "error"}}));
        assert_eq!(overflow.name, ErrorName::ContextOverflow);
        assert_eq!(overflow.data.extra["responseBody"], "{}");
        let auth = message_error_from(&json!({"name": "AI_APICallError",
            "message": "invalid x-api-key", "statusCode": 401}));
        assert_eq!(auth.name, ErrorName::Auth);
        let retry = message_error_from(&json!({"name": "AI_RetryError",
            "message": "Failed after 2 attempts", "errors": [
                {"statusCode": 500, "isRetryable": true},
                {"statusCode": 503, "isRetryable": true, "responseHeaders": {"a": "b"}}]}));
        assert_eq!(retry.name, ErrorName::Api);
        assert_eq!(
            retry.data.message.as_deref(),
            Some("Failed after 2 attempts")
        );
        assert_eq!(retry.data.extra["statusCode"], 503);
        assert_eq!(retry.data.extra["responseHeaders"]["a"], "b");
        let aborted = message_error_from(&json!({"name": "AbortError", "message": "x"}));
        assert_eq!(aborted.name, ErrorName::Aborted);
        // Already a message error: kept as it is.
        let aborted = MessageError::aborted("stop");
        let kept = message_error_from(&serde_json::to_value(&aborted).unwrap());
        assert_eq!(kept, aborted);
    }
}
