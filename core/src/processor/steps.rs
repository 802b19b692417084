//! Steps: a step-finish with its usage and cost, and the patch of the files it changed,
//! committed with the assistant message in one batch.

use super::machine::Machine;
use crate::error::{Error, Result};
use crate::event::SyncEvent;
use crate::model::{JsonMap, PartBody, PatchPart, StepFinishPart, StepStartPart};
use crate::stream::{StepPatch, Usage};

impl Machine {
    /// `start-step`: a step-start part; steps do not nest.
    pub(super) fn start_step(&mut self) -> Result<()> {
        if self.in_step {
            return Err(Error::invalid(
                "start-step while the previous step is open (no finish-step between two \
                 start-steps)",
            ));
        }
        self.in_step = true;
        let part = self.new_part(PartBody::StepStart(StepStartPart {
            snapshot: None,
            extra: JsonMap::new(),
        }));
        self.commit_part(part);
        Ok(())
    }

    /// `finish-step`: step-finish, patch and the message with the step's usage, one batch.
    pub(super) fn finish_step(
        &mut self,
        reason: String,
        extra: JsonMap,
        usage: &Usage,
        cost: f64,
        snapshot: Option<String>,
        patch: Option<StepPatch>,
    ) {
        let tokens = usage.tokens();
        let mut events = vec![SyncEvent::PartUpdated {
            part: self.new_part(PartBody::StepFinish(StepFinishPart {
                reason: reason.clone(),
                snapshot,
                cost,
                tokens: tokens.clone(),
                extra,
            })),
        }];
        if let Some(p) = patch {
            events.push(SyncEvent::PartUpdated {
                part: self.new_part(PartBody::Patch(PatchPart {
                    hash: p.hash,
                    files: p.files,
                    extra: JsonMap::new(),
                })),
            });
        }
        if let Some(a) = self.message.as_assistant_mut() {
            a.tokens = tokens;
            a.cost += cost;
            a.finish = Some(reason);
        }
        events.push(SyncEvent::MessageUpdated {
            info: self.message.clone(),
        });
        self.commit(events);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(json: &str) -> Usage {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn v5_usage_maps_to_opencode_tokens_without_losing_a_count() {
        let u = usage(
            r#"{"inputTokens":10,"outputTokens":7,"reasoningTokens":3,"cachedInputTokens":4,"totalTokens":17}"#,
        );
        let t = u.tokens();
        // input excludes the cached prompt tokens; output excludes the reasoning.
        assert_eq!((t.input, t.output, t.reasoning), (6, 4, 3));
        assert_eq!((t.cache.read, t.cache.write), (4, 0));
        assert_eq!(t.extra["total"], 17);
        // Missing counts are zero.
        let t = usage(r#"{"inputTokens":3}"#).tokens();
        assert_eq!((t.input, t.output, t.reasoning, t.cache.read), (3, 0, 0, 0));
        assert!(!t.extra.contains_key("total"));
    }

    #[test]
    fn v7_usage_details_map_to_opencode_tokens() {
        let u = usage(
            r#"{"inputTokens":20,"inputTokenDetails":{"noCacheTokens":12,"cacheReadTokens":5,"cacheWriteTokens":3},
                "outputTokens":9,"outputTokenDetails":{"textTokens":7,"reasoningTokens":2},"totalTokens":29,
                "raw":{"anything":1}}"#,
        );
        let t = u.tokens();
        assert_eq!((t.input, t.output, t.reasoning), (12, 7, 2));
        assert_eq!((t.cache.read, t.cache.write), (5, 3));
        assert_eq!(t.extra["total"], 29);
        // Details win over the v5 fields when a producer sends both.
        let u = usage(
            r#"{"inputTokens":20,"cachedInputTokens":1,"inputTokenDetails":{"cacheReadTokens":5},"reasoningTokens":1,
                "outputTokens":9,"outputTokenDetails":{"reasoningTokens":2}}"#,
        );
        let t = u.tokens();
        assert_eq!(
            (t.input, t.cache.read, t.reasoning, t.output),
            (15, 5, 2, 7)
        );
        // -0 and 1e1 are whole numbers too.
        let t = usage(r#"{"inputTokens":-0,"outputTokens":1e1}"#).tokens();
        assert_eq!((t.input, t.output), (0, 10));
    }
}
