//! `SubagentView`: what a client is shown of the subagents a run calls, by the agent's
//! `subagent_visibility` and the client's generation (`SubagentVisibility::for_client`).
//!
//! A subagent tool (`agent::subagent`) always puts the child's work on the stream fully
//! attributed; this layer, right above the base agent, shapes it per run:
//! - `attributed` passes it on, filling in `SUBAGENT_STARTED.parentMessageId` from the parent's
//!   `TOOL_CALL_START` of the call (the tool knows the call's id, not its message);
//! - `inline` folds each direct child into one `agui-host.subagent` activity (its name, its status and
//!   its latest text message, bounded), updated when one of its messages ends, and drops
//!   everything else the child sent: a 0.x client can show an activity, and no message of the
//!   child lands in the client's history (activities are never sent back to the model);
//! - `hidden` drops it all: the call's `TOOL_CALL_RESULT` is all there is.
//!
//! The children's state events (changes of their keys of the run's state) reach the client in
//! every case: the state is real whatever is shown of the work. They stay attributed when the
//! rest is, and lose their attribution otherwise.
//!
//! The children's token usage, which their tools put aside, is reported here as the run's own
//! (`AgentUpdate::Usage`), after each call's result.
//!
//! A child whose call ended without its end (its timeout dropped it) is closed here, before the
//! call's result, as clients require of an open subagent.
//!
//! A child that stopped to ask a person ends `suspended`; `inline` shows it `waiting`. A client
//! not shown subagents (`inline`, `hidden`) is asked their questions as the parent's call's: the
//! questions lose their subagent run ids and the child's call id on their way up.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::agent::subagent::state::{is_state_event, unattributed};
use crate::agent::subagent::{SubagentRuns, SubagentVisibility};
use crate::agent::{
    map_updates, Agent, AgentError, AgentStream, AgentUpdate, RunRequest, UpdateMapper, Updates,
};
use crate::protocol::{ActivitySnapshot, EventBody, OpenEnds, SubagentError, SubagentOutcome};

/// The `activityType` of an inline subagent.
pub const ACTIVITY_TYPE: &str = "agui-host.subagent";

/// Characters of a child's latest message an inline activity shows.
const INLINE_TEXT_CHARS: usize = 2_000;

pub struct SubagentView {
    inner: Arc<dyn Agent>,
    visibility: SubagentVisibility,
    runs: SubagentRuns,
}

impl std::fmt::Debug for SubagentView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubagentView")
            .field("visibility", &self.visibility)
            .finish_non_exhaustive()
    }
}

impl SubagentView {
    /// `runs` is what the agent's subagent tools share (their children's usage, reported here).
    pub fn new(inner: Arc<dyn Agent>, visibility: SubagentVisibility, runs: SubagentRuns) -> Self {
        SubagentView {
            inner,
            visibility,
            runs,
        }
    }
}

impl Agent for SubagentView {
    fn run(&self, mut request: RunRequest) -> Result<AgentStream, AgentError> {
        let visibility = self.visibility.for_client(request.version);
        let run_id = request.run_id.clone();
        // Children that waited for the client's tools go on when their results are here.
        let resumed = self.runs.resumptions(&request);
        request.decisions.extend(resumed);
        // What the children are shown of this run, held while it lasts (dropped with the
        // mapper). The client's tools only when it sees the children's calls, to run them,
        // and to direct children only: a run's answers reach only its own children.
        let client_tools = visibility == SubagentVisibility::Attributed && !request.delegated;
        self.runs.note_parent(&request, client_tools);
        let inner = self.inner.run(request).inspect_err(|_| {
            self.runs.forget_parent(&run_id);
        })?;
        Ok(map_updates(
            inner,
            ViewMapper {
                visibility,
                call_messages: HashMap::new(),
                open: Vec::new(),
                runs: self.runs.clone(),
                run_id,
                opened: Vec::new(),
            },
        ))
    }
}

struct ViewMapper {
    visibility: SubagentVisibility,
    /// The parent's calls: tool call id to its assistant message id.
    call_messages: HashMap<String, String>,
    /// The direct children running.
    open: Vec<Child>,
    /// Where the children's usage waits for this run to report it.
    runs: SubagentRuns,
    run_id: String,
    /// Attributed only: every subagent started and not ended (children and deeper), with what
    /// it has open, so that one cut off is closed whole.
    opened: Vec<Opened>,
}

/// A subagent on the stream, its parent subagent, and the ends of what it has open.
struct Opened {
    subagent_run_id: String,
    parent: Option<String>,
    ends: OpenEnds,
}

impl Drop for ViewMapper {
    /// A run that ends (or is dropped) leaves nothing behind it.
    fn drop(&mut self) {
        self.runs.take_usage(&self.run_id);
        self.runs.forget_parent(&self.run_id);
    }
}

struct Child {
    subagent_run_id: String,
    name: String,
    parent_tool_call_id: Option<String>,
    /// The text of the child's message streaming now, and of its last finished one.
    streaming: String,
    latest: String,
}

impl ViewMapper {
    fn child(&mut self, subagent_run_id: &str) -> Option<&mut Child> {
        self.open
            .iter_mut()
            .find(|child| child.subagent_run_id == subagent_run_id)
    }

    /// The inline activity of `child` with `status` (and an error message).
    fn activity(child: &Child, status: &str, error: Option<&str>) -> EventBody {
        let mut content = Map::new();
        content.insert("agent".into(), json!(child.name));
        content.insert("status".into(), json!(status));
        content.insert(
            "text".into(),
            json!(crate::text::truncate_chars(
                &child.latest,
                INLINE_TEXT_CHARS
            )),
        );
        if let Some(error) = error {
            content.insert("error".into(), json!(error));
        }
        if let Some(call) = &child.parent_tool_call_id {
            content.insert("toolCallId".into(), Value::String(call.clone()));
        }
        EventBody::ActivitySnapshot(ActivitySnapshot {
            message_id: format!("activity_{}", child.subagent_run_id),
            activity_type: ACTIVITY_TYPE.to_owned(),
            content,
            replace: Some(true),
            subagent_run_id: None,
        })
    }

    /// A direct child ended: its end as the client is shown it.
    fn ended(&mut self, subagent_run_id: &str, end: EventBody, out: &mut Updates) {
        let Some(at) = self
            .open
            .iter()
            .position(|child| child.subagent_run_id == subagent_run_id)
        else {
            // Not a direct child's: a grandchild's, shown only when attributed.
            if self.visibility == SubagentVisibility::Attributed {
                out.push(end.into());
            }
            return;
        };
        let child = self.open.remove(at);
        match (self.visibility, &end) {
            (SubagentVisibility::Attributed, _) => out.push(end.into()),
            (SubagentVisibility::Inline, EventBody::SubagentFinished(e))
                if matches!(e.outcome, Some(SubagentOutcome::Suspended { .. })) =>
            {
                out.push(Self::activity(&child, "waiting", None).into())
            }
            (SubagentVisibility::Inline, EventBody::SubagentError(e)) => {
                out.push(Self::activity(&child, "failed", Some(&e.message)).into())
            }
            (SubagentVisibility::Inline, _) => {
                out.push(Self::activity(&child, "finished", None).into())
            }
            (SubagentVisibility::Hidden, _) => {}
        }
    }

    /// A client not shown subagents is asked their questions as questions of the parent's
    /// call: no subagent run id, and the parent's call id.
    fn unattribute_questions(&self, request: &mut crate::agent::ApprovalRequest) {
        if self.visibility == SubagentVisibility::Attributed {
            return;
        }
        let questions = request
            .input
            .iter_mut()
            .flat_map(|asked| &mut asked.questions);
        for forwarded in questions.filter_map(|q| q.forwarded.as_mut()) {
            forwarded.tool_call_id = None;
            forwarded.subagent_run_ids.clear();
        }
    }

    /// Notes what an attributed event opens or closes for its subagent.
    fn note(&mut self, body: &EventBody) {
        let Some(owner) = body.subagent_run_id() else {
            return;
        };
        if let Some(opened) = self.opened.iter_mut().find(|o| o.subagent_run_id == owner) {
            opened.ends.observe(body);
        }
    }

    /// Closes the subagent `id` cut off, and every subagent under it, deepest first: what each
    /// left open, then its `SUBAGENT_ERROR` (`id`'s own goes out through [`Self::ended`]).
    fn cut_off(&mut self, id: &str, out: &mut Updates) {
        let mut order = Vec::new();
        self.below(id, &mut order);
        order.push(id.to_owned());
        for each in order {
            let Some(at) = self.opened.iter().position(|o| o.subagent_run_id == each) else {
                continue;
            };
            let mut opened = self.opened.remove(at);
            out.extend(opened.ends.take().into_iter().rev().map(AgentUpdate::from));
            let error = EventBody::SubagentError(SubagentError {
                subagent_run_id: each.clone(),
                message: "The call ended before the subagent finished.".to_owned(),
                code: Some("subagent_cut_off".to_owned()),
            });
            self.ended(&each, error, out);
        }
    }

    /// The open subagents under `id`, deepest first.
    fn below(&self, id: &str, order: &mut Vec<String>) {
        for opened in &self.opened {
            if opened.parent.as_deref() == Some(id) {
                self.below(&opened.subagent_run_id, order);
                order.push(opened.subagent_run_id.clone());
            }
        }
    }

    /// A child event other than a start or an end.
    fn child_event(&mut self, body: EventBody, out: &mut Updates) {
        if is_state_event(&body) && self.visibility != SubagentVisibility::Attributed {
            out.push(unattributed(body).into());
            return;
        }
        match self.visibility {
            SubagentVisibility::Attributed => {
                self.note(&body);
                out.push(body.into());
            }
            SubagentVisibility::Hidden => {}
            SubagentVisibility::Inline => {
                let Some(owner) = body.subagent_run_id().map(str::to_owned) else {
                    return;
                };
                let Some(child) = self.child(&owner) else {
                    return; // a grandchild's: folded into its parent's answer
                };
                match &body {
                    EventBody::TextMessageStart(_) => child.streaming.clear(),
                    EventBody::TextMessageContent(e) => child.streaming.push_str(&e.delta),
                    EventBody::TextMessageEnd(_) if !child.streaming.trim().is_empty() => {
                        child.latest = std::mem::take(&mut child.streaming);
                        let child = &*child;
                        out.push(Self::activity(child, "running", None).into());
                    }
                    _ => {}
                }
            }
        }
    }
}

impl UpdateMapper for ViewMapper {
    fn on_update(&mut self, update: AgentUpdate, out: &mut Updates) -> Result<(), AgentError> {
        let body = match update {
            AgentUpdate::Event(body) => body,
            AgentUpdate::ApprovalRequest(mut request) => {
                self.unattribute_questions(&mut request);
                out.push(AgentUpdate::ApprovalRequest(request));
                return Ok(());
            }
            update => {
                out.push(update);
                return Ok(());
            }
        };
        match body {
            EventBody::SubagentStarted(mut start) => {
                if self.visibility == SubagentVisibility::Attributed {
                    self.opened.push(Opened {
                        subagent_run_id: start.subagent_run_id.clone(),
                        parent: start.parent_subagent_run_id.clone(),
                        ends: OpenEnds::default(),
                    });
                }
                if start.parent_subagent_run_id.is_some() {
                    if self.visibility == SubagentVisibility::Attributed {
                        out.push(EventBody::SubagentStarted(start).into());
                    }
                    return Ok(());
                }
                if start.parent_message_id.is_none() {
                    start.parent_message_id = start
                        .parent_tool_call_id
                        .as_ref()
                        .and_then(|call| self.call_messages.get(call))
                        .cloned();
                }
                let child = Child {
                    subagent_run_id: start.subagent_run_id.clone(),
                    name: start.name.clone(),
                    parent_tool_call_id: start.parent_tool_call_id.clone(),
                    streaming: String::new(),
                    latest: String::new(),
                };
                match self.visibility {
                    SubagentVisibility::Attributed => {
                        out.push(EventBody::SubagentStarted(start).into())
                    }
                    SubagentVisibility::Inline => {
                        out.push(Self::activity(&child, "running", None).into())
                    }
                    SubagentVisibility::Hidden => {}
                }
                self.open.push(child);
            }
            EventBody::SubagentFinished(ref e) => {
                let id = e.subagent_run_id.clone();
                self.opened.retain(|o| o.subagent_run_id != id);
                self.ended(&id, body, out);
            }
            EventBody::SubagentError(ref e) => {
                let id = e.subagent_run_id.clone();
                self.opened.retain(|o| o.subagent_run_id != id);
                self.ended(&id, body, out);
            }
            body if body.subagent_run_id().is_some() => self.child_event(body, out),
            EventBody::ToolCallStart(ref start) => {
                if let Some(message) = &start.parent_message_id {
                    self.call_messages
                        .insert(start.tool_call_id.clone(), message.clone());
                }
                out.push(body.into());
            }
            EventBody::ToolCallResult(ref result) => {
                // A child still open here was cut off (its call timed out or panicked).
                let cut: Vec<String> = self
                    .open
                    .iter()
                    .filter(|c| c.parent_tool_call_id.as_deref() == Some(&result.tool_call_id))
                    .map(|c| c.subagent_run_id.clone())
                    .collect();
                for id in cut {
                    self.cut_off(&id, out);
                }
                out.push(body.into());
                // The children's tokens are the run's: reported with the result of the call
                // (any call: they were all recorded before their call's result).
                let usage = self.runs.take_usage(&self.run_id);
                out.extend(usage.into_iter().map(AgentUpdate::Usage));
            }
            body => out.push(body.into()),
        }
        Ok(())
    }

    fn on_end(&mut self, out: &mut Updates) -> Result<(), AgentError> {
        let usage = self.runs.take_usage(&self.run_id);
        out.extend(usage.into_iter().map(AgentUpdate::Usage));
        Ok(())
    }
}

#[cfg(test)]
mod tests;
