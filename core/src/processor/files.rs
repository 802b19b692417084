//! Generated files (`file`, `reasoning-file`): one closed `file` part each.

use super::Processor;
use crate::error::Result;
use crate::model::{FilePart, JsonMap, PartBody};
use crate::stream::GeneratedFile;

impl Processor {
    /// A generated file: one closed `file` part, its content as a `data:` URL.
    pub(super) async fn file(&mut self, file: GeneratedFile, reasoning: bool) -> Result<()> {
        let mut extra = JsonMap::new();
        if reasoning {
            extra.insert("reasoning".into(), serde_json::Value::Bool(true));
        }
        let url = format!("data:{};base64,{}", file.media_type, file.base64);
        let part = self.new_part(PartBody::File(FilePart {
            mime: file.media_type,
            filename: file.filename,
            url,
            source: None,
            extra,
        }));
        self.commit_part(part).await
    }
}
