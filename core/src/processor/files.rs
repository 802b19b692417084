//! Generated files (`file`, `reasoning-file`) and cited sources (`source`): one closed
//! part each.

use super::machine::Machine;
use crate::model::{FilePart, JsonMap, PartBody, SourcePart};
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
}
