//! Generated files (`file`, `reasoning-file`), cited sources (`source`) and steering
//! messages (`steering-message`): one closed part each.

use serde_json::Value;

use super::machine::Machine;
use crate::error::{Error, Result};
use crate::model::{FilePart, JsonMap, PartBody, SourcePart, SteeringPart};
use crate::stream::{GeneratedFile, Source};

impl Machine {
    /// A generated file: one closed `file` part, its content as a `data:` URL, the
    /// provider's metadata as its `metadata`.
    pub(super) fn file(
        &mut self,
        file: GeneratedFile,
        provider_metadata: Option<serde_json::Value>,
        reasoning: bool,
    ) {
        let mut extra = JsonMap::new();
        if reasoning {
            extra.insert("reasoning".into(), serde_json::Value::Bool(true));
        }
        if let Some(m) = provider_metadata {
            extra.insert("metadata".into(), m);
        }
        let url = format!("data:{};base64,{}", file.media_type, file.base64);
        let part = self.new_part(PartBody::File(FilePart {
            mime: file.media_type,
            filename: file.filename,
            url,
            source: None,
            extra,
        }));
        self.commit_part(part);
    }
}

impl Machine {
    /// A cited source: one closed `source` part with the SDK's fields.
    pub(super) fn source(&mut self, source: Source) {
        let part = self.new_part(PartBody::Source(SourcePart {
            source_type: source.source_type,
            source_id: source.id,
            url: source.url,
            title: source.title,
            media_type: source.media_type,
            filename: source.filename,
            metadata: source.provider_metadata,
            extra: JsonMap::new(),
        }));
        self.commit_part(part);
    }

    /// `steering-message`: a user message the next step received, kept where it came.
    pub(super) fn steering(
        &mut self,
        id: String,
        message: Value,
        step_number: Option<u64>,
    ) -> Result<()> {
        if message.get("role").and_then(Value::as_str) != Some("user") {
            return Err(Error::invalid(format!(
                "steering-message {id}: its message is not a user message ({{role: \"user\", content}})"
            )));
        }
        let part = self.new_part(PartBody::Steering(SteeringPart {
            steering_id: id,
            message,
            step_number,
            extra: JsonMap::new(),
        }));
        self.commit_part(part);
        Ok(())
    }
}
