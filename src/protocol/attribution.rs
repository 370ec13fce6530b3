//! Attribution of events and messages to a subagent (`subagentRunId`): which events carry it,
//! and tagging an event a child agent produced with the child's run id on its way up to the
//! parent's stream.
//!
//! A tag already present is kept: a grandchild's events reach the parent through the child,
//! and must stay the grandchild's. A `SUBAGENT_*` event's `subagentRunId` is its identity, not
//! an attribution, so a nested start gets the child as its `parentSubagentRunId` instead.
//!
//! Also what a subagent has open ([`OpenEnds`]), to close it whole when it is cut off.

use super::events::{EventBody, MessageRef};
use super::input::Message;

/// The ends of the texts, tool calls and reasoning a subagent's events opened and have not
/// closed, each attributed as its start was: what must go out, in reverse, to close them when
/// the subagent is cut off.
#[derive(Debug, Default, Clone)]
pub struct OpenEnds {
    ends: Vec<EventBody>,
}

impl OpenEnds {
    /// Notes what `body` opens or closes.
    pub fn observe(&mut self, body: &EventBody) {
        let mut end = match body {
            EventBody::TextMessageStart(e) => EventBody::text_end(e.message_id.clone()),
            EventBody::ToolCallStart(e) => EventBody::tool_call_end(e.tool_call_id.clone()),
            EventBody::ReasoningStart(e) => EventBody::ReasoningEnd(MessageRef::new(&e.message_id)),
            EventBody::ReasoningMessageStart(e) => {
                EventBody::ReasoningMessageEnd(MessageRef::new(&e.message_id))
            }
            EventBody::TextMessageEnd(_)
            | EventBody::ToolCallEnd(_)
            | EventBody::ReasoningEnd(_)
            | EventBody::ReasoningMessageEnd(_) => {
                self.ends.retain(|open| !closes(body, open));
                return;
            }
            _ => return,
        };
        if let Some(owner) = body.subagent_run_id() {
            end.attribute_to(owner);
        }
        self.ends.push(end);
    }

    /// The ends still open, in the order their starts came.
    pub fn take(&mut self) -> Vec<EventBody> {
        std::mem::take(&mut self.ends)
    }
}

/// Whether `body` is the end `open` stands for (whoever it is attributed to).
fn closes(body: &EventBody, open: &EventBody) -> bool {
    match (body, open) {
        (EventBody::TextMessageEnd(a), EventBody::TextMessageEnd(b))
        | (EventBody::ReasoningEnd(a), EventBody::ReasoningEnd(b))
        | (EventBody::ReasoningMessageEnd(a), EventBody::ReasoningMessageEnd(b)) => {
            a.message_id == b.message_id
        }
        (EventBody::ToolCallEnd(a), EventBody::ToolCallEnd(b)) => a.tool_call_id == b.tool_call_id,
        _ => false,
    }
}

impl EventBody {
    /// The subagent this event is attributed to (for `SUBAGENT_*`: the subagent it is about).
    pub fn subagent_run_id(&self) -> Option<&str> {
        match self {
            EventBody::RunStarted(_)
            | EventBody::RunFinished(_)
            | EventBody::RunError(_)
            | EventBody::MessagesSnapshot(_) => None,
            EventBody::StepStarted(e) | EventBody::StepFinished(e) => e.subagent_run_id.as_deref(),
            EventBody::TextMessageStart(e) => e.subagent_run_id.as_deref(),
            EventBody::TextMessageContent(e) | EventBody::ReasoningMessageContent(e) => {
                e.subagent_run_id.as_deref()
            }
            EventBody::TextMessageEnd(e)
            | EventBody::ReasoningStart(e)
            | EventBody::ReasoningMessageEnd(e)
            | EventBody::ReasoningEnd(e) => e.subagent_run_id.as_deref(),
            EventBody::TextMessageChunk(e) => e.subagent_run_id.as_deref(),
            EventBody::ToolCallStart(e) => e.subagent_run_id.as_deref(),
            EventBody::ToolCallArgs(e) => e.subagent_run_id.as_deref(),
            EventBody::ToolCallEnd(e) => e.subagent_run_id.as_deref(),
            EventBody::ToolCallChunk(e) => e.subagent_run_id.as_deref(),
            EventBody::ToolCallResult(e) => e.subagent_run_id.as_deref(),
            EventBody::StateSnapshot(e) => e.subagent_run_id.as_deref(),
            EventBody::StateDelta(e) => e.subagent_run_id.as_deref(),
            EventBody::ActivitySnapshot(e) => e.subagent_run_id.as_deref(),
            EventBody::ActivityDelta(e) => e.subagent_run_id.as_deref(),
            EventBody::Raw(e) => e.subagent_run_id.as_deref(),
            EventBody::Custom(e) => e.subagent_run_id.as_deref(),
            EventBody::ReasoningMessageStart(e) => e.subagent_run_id.as_deref(),
            EventBody::ReasoningMessageChunk(e) => e.subagent_run_id.as_deref(),
            EventBody::ReasoningEncryptedValue(e) => e.subagent_run_id.as_deref(),
            EventBody::SubagentStarted(e) => Some(&e.subagent_run_id),
            EventBody::SubagentFinished(e) => Some(&e.subagent_run_id),
            EventBody::SubagentError(e) => Some(&e.subagent_run_id),
        }
    }

    /// Attributes an event a child produced to the child `subagent_run_id`, unless it is
    /// attributed already (a grandchild's). A nested `SUBAGENT_STARTED` gets the child as its
    /// parent subagent instead. Lifecycle events and `MESSAGES_SNAPSHOT` carry no attribution
    /// and are left as they are.
    pub fn attribute_to(&mut self, subagent_run_id: &str) {
        fn tag(field: &mut Option<String>, id: &str) {
            if field.is_none() {
                *field = Some(id.to_owned());
            }
        }
        let id = subagent_run_id;
        match self {
            EventBody::RunStarted(_)
            | EventBody::RunFinished(_)
            | EventBody::RunError(_)
            | EventBody::MessagesSnapshot(_)
            | EventBody::SubagentFinished(_)
            | EventBody::SubagentError(_) => {}
            EventBody::SubagentStarted(e) => tag(&mut e.parent_subagent_run_id, id),
            EventBody::StepStarted(e) | EventBody::StepFinished(e) => {
                tag(&mut e.subagent_run_id, id)
            }
            EventBody::TextMessageStart(e) => tag(&mut e.subagent_run_id, id),
            EventBody::TextMessageContent(e) | EventBody::ReasoningMessageContent(e) => {
                tag(&mut e.subagent_run_id, id)
            }
            EventBody::TextMessageEnd(e)
            | EventBody::ReasoningStart(e)
            | EventBody::ReasoningMessageEnd(e)
            | EventBody::ReasoningEnd(e) => tag(&mut e.subagent_run_id, id),
            EventBody::TextMessageChunk(e) => tag(&mut e.subagent_run_id, id),
            EventBody::ToolCallStart(e) => tag(&mut e.subagent_run_id, id),
            EventBody::ToolCallArgs(e) => tag(&mut e.subagent_run_id, id),
            EventBody::ToolCallEnd(e) => tag(&mut e.subagent_run_id, id),
            EventBody::ToolCallChunk(e) => tag(&mut e.subagent_run_id, id),
            EventBody::ToolCallResult(e) => tag(&mut e.subagent_run_id, id),
            EventBody::StateSnapshot(e) => tag(&mut e.subagent_run_id, id),
            EventBody::StateDelta(e) => tag(&mut e.subagent_run_id, id),
            EventBody::ActivitySnapshot(e) => tag(&mut e.subagent_run_id, id),
            EventBody::ActivityDelta(e) => tag(&mut e.subagent_run_id, id),
            EventBody::Raw(e) => tag(&mut e.subagent_run_id, id),
            EventBody::Custom(e) => tag(&mut e.subagent_run_id, id),
            EventBody::ReasoningMessageStart(e) => tag(&mut e.subagent_run_id, id),
            EventBody::ReasoningMessageChunk(e) => tag(&mut e.subagent_run_id, id),
            EventBody::ReasoningEncryptedValue(e) => tag(&mut e.subagent_run_id, id),
        }
    }
}

impl Message {
    /// The subagent that wrote this message, when a subagent did: such a message is the
    /// child's own transcript, shown to the person, never the parent's conversation.
    pub fn subagent_run_id(&self) -> Option<&str> {
        match self {
            Message::Developer(m) | Message::System(m) => m.subagent_run_id.as_deref(),
            Message::Assistant(m) => m.subagent_run_id.as_deref(),
            Message::User(m) => m.subagent_run_id.as_deref(),
            Message::Tool(m) => m.subagent_run_id.as_deref(),
            Message::Activity(m) => m.subagent_run_id.as_deref(),
            Message::Reasoning(m) => m.subagent_run_id.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_tag_never_overwrites_a_grandchild_tag() {
        let mut own = EventBody::text_start("m1");
        own.attribute_to("sa_child");
        assert_eq!(own.subagent_run_id(), Some("sa_child"));
        own.attribute_to("sa_parent");
        assert_eq!(own.subagent_run_id(), Some("sa_child"));
    }

    #[test]
    fn a_nested_start_gets_the_child_as_its_parent() {
        let mut start = EventBody::SubagentStarted(crate::protocol::SubagentStarted {
            subagent_run_id: "sa_grandchild".into(),
            name: "hotels".into(),
            description: None,
            parent_subagent_run_id: None,
            parent_tool_call_id: Some("c1".into()),
            parent_message_id: None,
        });
        start.attribute_to("sa_child");
        let EventBody::SubagentStarted(start) = start else {
            unreachable!()
        };
        assert_eq!(start.subagent_run_id, "sa_grandchild");
        assert_eq!(start.parent_subagent_run_id.as_deref(), Some("sa_child"));
    }
}
