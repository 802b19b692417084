//! Messages around a turn: the user message, the open assistant message, and the
//! message error of a failed stream.

use serde_json::Value;

use crate::id::{MessageId, SessionId};
use crate::model::{
    AssistantMessage, AssistantTime, ErrorName, JsonMap, Message, MessageBody, MessageError,
    Tokens, UserMessage, UserTime,
};

/// Turns a stream `error` value into a message error.
pub fn message_error_from(value: &Value) -> MessageError {
    if value.get("name").is_some() && value.get("data").is_some() {
        if let Ok(e) = serde_json::from_value::<MessageError>(value.clone()) {
            return e;
        }
    }
    let text = match value {
        Value::String(s) => s.clone(),
        Value::Object(m) => m
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| value.to_string(), str::to_owned),
        Value::Null => "unknown error".to_owned(),
        other => other.to_string(),
    };
    let kind = if value.get("statusCode").is_some() {
        ErrorName::Api
    } else {
        ErrorName::Unknown
    };
    MessageError::new(kind, text)
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
        // Already a message error: kept as it is.
        let aborted = MessageError::aborted("stop");
        let kept = message_error_from(&serde_json::to_value(&aborted).unwrap());
        assert_eq!(kept, aborted);
    }
}
