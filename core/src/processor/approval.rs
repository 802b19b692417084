//! The wait for the user's approval: a running call asks (`tool-approval-request`)
//! and waits, not open work; the answer (`tool-approval-response`) finds it in this
//! message or, through the store, in an earlier one, and makes it open work again.

use serde_json::Value;

use super::inflight::{approval_id, Call, CallState, ToolHead};
use super::machine::Machine;
use crate::error::{Error, Result};
use crate::model::{Part, ToolRunning};

impl Machine {
    /// The call id of this message's call waiting for approval `approval_id` (and, if
    /// named, being `call_id`).
    pub(super) fn awaiting_with(&self, approval_id: &str, call_id: Option<&str>) -> Option<&str> {
        self.tools
            .iter()
            .find(|(id, c)| {
                call_id.is_none_or(|want| id.as_str() == want)
                    && c.approval_id() == Some(approval_id)
            })
            .map(|(id, _)| id.as_str())
    }

    /// Takes call `id` out of the machine if it waits for approval.
    fn take_awaiting(&mut self, id: &str) -> Option<(ToolHead, ToolRunning)> {
        match self.tools.remove(id)? {
            Call {
                head,
                state: CallState::Awaiting(r),
            } => Some((head, r)),
            other => {
                self.tools.insert(id.to_owned(), other);
                None
            }
        }
    }

    /// `tool-approval-request`: the running call waits for the user. It is no longer
    /// open work, so finalize does not close it; [`Part::is_open`] is false for it, so
    /// recover does not either.
    pub(super) fn approval_request(
        &mut self,
        call_id: &str,
        approval_id: &str,
        reason: Option<&str>,
    ) -> Result<()> {
        let call = match self.tools.remove(call_id) {
            Some(Call {
                head,
                state: CallState::Running(mut r),
            }) => {
                r.request_approval(approval_id, reason);
                Call {
                    head,
                    state: CallState::Awaiting(r),
                }
            }
            Some(call) => {
                let pending = matches!(call.state, CallState::Pending(_));
                self.tools.insert(call_id.to_owned(), call);
                if pending {
                    return Err(Error::invalid(format!(
                        "tool-approval-request for call {call_id}, which is pending, not running"
                    )));
                }
                return Err(not_running_here(call_id));
            }
            None => return Err(not_running_here(call_id)),
        };
        let part = call.to_part();
        self.tools.insert(call_id.to_owned(), call);
        self.commit_part(part);
        Ok(())
    }

    /// `tool-approval-response`: the decision is recorded on the waiting call. Approved,
    /// the call is open work again (it runs next); denied, it stays open until its
    /// `tool-output-denied`. Either way finalize and recover close it if nothing follows.
    pub(super) fn approval_response(
        &mut self,
        approval: &str,
        call_id: Option<&str>,
        approved: bool,
        reason: Option<&str>,
        waiting: Option<Part>,
    ) -> Result<()> {
        let found = match self.awaiting_with(approval, call_id).map(str::to_owned) {
            Some(id) => self.take_awaiting(&id),
            None => match call_id {
                Some(c) if !self.calls.contains(c) => waiting
                    .and_then(ToolHead::waiting)
                    .filter(|(head, r)| head.call_id == c && approval_id(r) == Some(approval)),
                _ => None,
            },
        };
        let Some((head, mut running)) = found else {
            return Err(Error::invalid(format!(
                "tool-approval-response for approval {approval}, which no call waiting \
                 for approval has"
            )));
        };
        if let Some(a) = running
            .metadata
            .as_mut()
            .and_then(|m| m.get_mut("approval"))
            .and_then(Value::as_object_mut)
        {
            let status = if approved { "approved" } else { "denied" };
            a.insert("status".into(), Value::String(status.into()));
            if let Some(reason) = reason {
                a.insert("reason".into(), Value::String(reason.to_owned()));
            }
        }
        let id = head.call_id.clone();
        self.calls.insert(id.clone());
        let call = Call {
            head,
            state: CallState::Running(running),
        };
        let part = call.to_part();
        self.tools.insert(id, call);
        self.commit_part(part);
        Ok(())
    }
}

fn not_running_here(call_id: &str) -> Error {
    Error::invalid(format!(
        "tool-approval-request for call {call_id}, which is not running in this message"
    ))
}
