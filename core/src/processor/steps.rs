//! Steps: a step-finish with its usage and cost, and the patch of the files it changed,
//! committed with the assistant message in one batch.

use super::Processor;
use crate::error::Result;
use crate::event::SyncEvent;
use crate::model::{JsonMap, PartBody, PatchPart, StepFinishPart, Tokens};
use crate::stream::{StepPatch, Usage};

fn tokens_from(usage: &Usage) -> Tokens {
    let mut t = Tokens {
        input: usage.input_tokens.unwrap_or(0),
        output: usage.output_tokens.unwrap_or(0),
        reasoning: usage.reasoning_tokens.unwrap_or(0),
        ..Tokens::default()
    };
    t.cache.read = usage.cached_input_tokens.unwrap_or(0);
    t
}

impl Processor {
    pub(super) async fn finish_step(
        &mut self,
        reason: String,
        usage: &Usage,
        cost: f64,
        snapshot: Option<String>,
        patch: Option<StepPatch>,
    ) -> Result<()> {
        let tokens = tokens_from(usage);
        let mut events = vec![SyncEvent::PartUpdated {
            part: self.new_part(PartBody::StepFinish(StepFinishPart {
                reason: reason.clone(),
                snapshot,
                cost,
                tokens: tokens.clone(),
                extra: JsonMap::new(),
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
        self.commit(events).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_maps_to_tokens_with_missing_counts_as_zero() {
        let usage = Usage {
            input_tokens: Some(3),
            output_tokens: Some(5),
            reasoning_tokens: None,
            cached_input_tokens: Some(2),
            ..Usage::default()
        };
        let t = tokens_from(&usage);
        assert_eq!((t.input, t.output, t.reasoning, t.cache.read), (3, 5, 0, 2));
    }
}
