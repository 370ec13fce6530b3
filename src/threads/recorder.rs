//! Follows a run's events the way a client applies them, so that what is saved at the end of
//! the run is the conversation and state the client holds then: the request's history, plus
//! the messages, tool calls and results the run streamed, the state after its snapshots and
//! deltas, and the interrupts it ended with.

use std::collections::BTreeSet;

use serde_json::Value;

use super::{Lineage, RunMark, ThreadRecord};
use crate::protocol::{
    now_millis, ActivityMessage, ActivitySnapshot, AssistantMessage, Content, EventBody, Interrupt,
    Message, TextRole, ToolCall, ToolMessage, UserMessage,
};

/// See the module docs.
#[derive(Debug)]
pub struct ThreadRecorder {
    agent: String,
    run_id: String,
    created_at: i64,
    messages: Vec<Message>,
    state: Option<Value>,
    interrupts: Vec<Interrupt>,
    server_results: BTreeSet<String>,
    /// Kept from the previous record: a run neither renames nor unarchives its thread.
    title: Option<String>,
    archived: bool,
    /// The thread's runs and branches with this run on its branch (its message count set at
    /// the end).
    lineage: Lineage,
}

/// Which run a recorder follows: its id and the run it names as its parent.
#[derive(Debug, Clone, Copy)]
pub struct RecordedRun<'a> {
    pub agent: &'a str,
    pub run_id: &'a str,
    pub parent_run_id: Option<&'a str>,
}

impl ThreadRecorder {
    /// Starts from the request: its history and state, what the previous record knew of the
    /// results the server produced, and its runs and branches, with this run placed on the
    /// branch its history continues (`lineage`; the history decides it, the run only adds to
    /// it).
    pub fn new(
        previous: Option<ThreadRecord>,
        run: RecordedRun<'_>,
        messages: Vec<Message>,
        state: Option<Value>,
    ) -> ThreadRecorder {
        let mark = RunMark {
            run_id: run.run_id.to_owned(),
            parent_run_id: run.parent_run_id.map(str::to_owned),
            messages: 0,
        };
        let mut messages = messages;
        if let Some(record) = &previous {
            keep_activities(&record.messages, &mut messages);
        }
        // A run neither renames nor unarchives its thread: both are kept from the record.
        let (created_at, server_results, (title, archived), lineage) = match previous {
            Some(record) => (
                record.created_at,
                record.server_results,
                (record.title, record.archived),
                record.lineage.after_run(record.messages, mark, &messages),
            ),
            None => (
                now_millis(),
                BTreeSet::new(),
                (None, false),
                Lineage::default().after_run(Vec::new(), mark, &messages),
            ),
        };
        ThreadRecorder {
            agent: run.agent.to_owned(),
            run_id: run.run_id.to_owned(),
            created_at,
            server_results,
            title,
            archived,
            messages,
            state,
            interrupts: Vec::new(),
            lineage,
        }
    }

    /// Applies one event the run sent.
    pub fn observe(&mut self, event: &EventBody) {
        match event {
            EventBody::TextMessageStart(start) => {
                self.text_message(&start.message_id, start.role);
                self.attribute(&start.message_id, start.subagent_run_id.as_deref());
            }
            EventBody::TextMessageContent(content) => {
                self.append_text(&content.message_id, &content.delta);
            }
            EventBody::TextMessageChunk(chunk) => {
                if let Some(id) = &chunk.message_id {
                    self.text_message(id, chunk.role);
                    if let Some(delta) = &chunk.delta {
                        self.append_text(id, delta);
                    }
                }
            }
            EventBody::ToolCallStart(start) => {
                self.tool_call(
                    &start.tool_call_id,
                    &start.tool_call_name,
                    start.parent_message_id.as_deref(),
                );
                let parent = start.parent_message_id.as_deref();
                let parent = parent.unwrap_or(&start.tool_call_id);
                self.attribute(parent, start.subagent_run_id.as_deref());
            }
            EventBody::ToolCallArgs(args) => self.append_arguments(&args.tool_call_id, &args.delta),
            EventBody::ToolCallChunk(chunk) => {
                if let Some(id) = &chunk.tool_call_id {
                    if let Some(name) = &chunk.tool_call_name {
                        self.tool_call(id, name, chunk.parent_message_id.as_deref());
                    }
                    if let Some(delta) = &chunk.delta {
                        self.append_arguments(id, delta);
                    }
                }
            }
            EventBody::ToolCallResult(result) => {
                self.server_results.insert(result.tool_call_id.clone());
                let mut message = ToolMessage::answering(result);
                message.subagent_run_id.clone_from(&result.subagent_run_id);
                self.add(Message::Tool(message));
            }
            EventBody::StateSnapshot(snapshot) => self.state = Some(snapshot.snapshot.clone()),
            EventBody::StateDelta(delta) => {
                let state = self
                    .state
                    .get_or_insert_with(|| Value::Object(serde_json::Map::new()));
                // A patch is atomic on the client too: one that fails leaves the state as is,
                // which state::patch::apply guarantees without a copy of the state per delta (a
                // predictive run sends one per argument fragment).
                let _ = crate::state::patch::apply(state, &delta.delta);
            }
            EventBody::MessagesSnapshot(snapshot) => self.messages = snapshot.messages.clone(),
            EventBody::ActivitySnapshot(snapshot) => self.activity_snapshot(snapshot),
            EventBody::ActivityDelta(delta) => {
                let content = self.messages.iter_mut().rev().find_map(|m| match m {
                    Message::Activity(a) if a.id == delta.message_id => Some(&mut a.content),
                    _ => None,
                });
                if let Some(content) = content {
                    // As the client: a patch that fails leaves the content as it was.
                    let mut patched = Value::Object(std::mem::take(content));
                    let before = patched.clone();
                    if json_patch::patch(&mut patched, &delta.patch).is_err() {
                        patched = before;
                    }
                    if let Value::Object(object) = patched {
                        *content = object;
                    }
                }
            }
            // Every other event is listed, so that a new one is a decision here rather than
            // silently left out of the record. Ends and lifecycle events change no message the
            // client keeps; reasoning, steps and subagent lifecycle are not kept in a thread's
            // record (the client shows them for the run); raw and custom events are the
            // application's.
            EventBody::RunStarted(_)
            | EventBody::RunFinished(_)
            | EventBody::RunError(_)
            | EventBody::StepStarted(_)
            | EventBody::StepFinished(_)
            | EventBody::TextMessageEnd(_)
            | EventBody::ToolCallEnd(_)
            | EventBody::Raw(_)
            | EventBody::Custom(_)
            | EventBody::ReasoningStart(_)
            | EventBody::ReasoningMessageStart(_)
            | EventBody::ReasoningMessageContent(_)
            | EventBody::ReasoningMessageEnd(_)
            | EventBody::ReasoningMessageChunk(_)
            | EventBody::ReasoningEnd(_)
            | EventBody::ReasoningEncryptedValue(_)
            | EventBody::SubagentStarted(_)
            | EventBody::SubagentFinished(_)
            | EventBody::SubagentError(_) => {}
        }
    }

    /// An activity as the client holds it: new, or its content replaced.
    fn activity_snapshot(&mut self, snapshot: &ActivitySnapshot) {
        let held = self.messages.iter_mut().rev().find_map(|m| match m {
            Message::Activity(a) if a.id == snapshot.message_id => Some(a),
            _ => None,
        });
        match held {
            Some(activity) => activity.content = snapshot.content.clone(),
            None => self.add(Message::Activity(ActivityMessage {
                id: snapshot.message_id.clone(),
                activity_type: snapshot.activity_type.clone(),
                content: snapshot.content.clone(),
                subagent_run_id: snapshot.subagent_run_id.clone(),
                metadata: None,
            })),
        }
    }

    /// Adds a message the run produced. Exactly: a run adds a few messages to a history that
    /// may be long, and a doubled vector's slack would be held for the whole stream.
    fn add(&mut self, message: Message) {
        self.messages.reserve_exact(1);
        self.messages.push(message);
    }

    /// Notes an interrupt the run ends with.
    pub fn interrupt(&mut self, interrupt: &Interrupt) {
        self.interrupts.push(interrupt.clone());
    }

    /// The record to save.
    pub fn finish(mut self) -> ThreadRecord {
        if let Some(run) = self.lineage.runs.last_mut() {
            run.messages = self.messages.len();
        }
        ThreadRecord {
            agent: self.agent,
            messages: self.messages,
            state: self.state,
            interrupts: self.interrupts,
            server_results: self.server_results,
            last_run_id: self.run_id,
            created_at: self.created_at,
            updated_at: now_millis(),
            lineage: self.lineage,
            title: self.title,
            archived: self.archived,
        }
    }

    fn text_message(&mut self, id: &str, role: Option<TextRole>) {
        if self.messages.iter().any(|message| message.id() == id) {
            return;
        }
        let message = match role {
            Some(TextRole::User) => Message::User(UserMessage::text(id, "")),
            _ => Message::Assistant(AssistantMessage::empty(id)),
        };
        self.add(message);
    }

    /// Keeps a subagent's attribution on the message it wrote, as the client does, so that a
    /// history from the record shows whose it is (and the parent's model never reads it).
    fn attribute(&mut self, id: &str, subagent_run_id: Option<&str>) {
        let Some(owner) = subagent_run_id else {
            return;
        };
        if let Some(Message::Assistant(message)) =
            self.messages.iter_mut().rev().find(|m| m.id() == id)
        {
            if message.subagent_run_id.is_none() {
                message.subagent_run_id = Some(owner.to_owned());
            }
        }
    }

    fn append_text(&mut self, id: &str, delta: &str) {
        match self.messages.iter_mut().rev().find(|m| m.id() == id) {
            Some(Message::Assistant(message)) => {
                // Grown by a quarter, not doubled: the reply is held until the run's save.
                crate::text::push_growing(message.content.get_or_insert_with(String::new), delta);
            }
            Some(Message::User(message)) => {
                if let Content::Text(text) = &mut message.content {
                    text.push_str(delta);
                }
            }
            _ => {}
        }
    }

    /// A tool call joins the assistant message it names (created when absent), as the
    /// reference client does.
    fn tool_call(&mut self, id: &str, name: &str, parent_message_id: Option<&str>) {
        let parent = parent_message_id.unwrap_or(id);
        let position = self
            .messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant(a) if a.id == parent));
        let position = position.unwrap_or_else(|| {
            self.messages
                .push(Message::Assistant(AssistantMessage::empty(parent)));
            self.messages.len() - 1
        });
        if let Message::Assistant(message) = &mut self.messages[position] {
            message.tool_calls.push(ToolCall::started(id, name));
        }
    }

    fn append_arguments(&mut self, id: &str, delta: &str) {
        let call = self.messages.iter_mut().rev().find_map(|m| match m {
            Message::Assistant(a) => a.tool_calls.iter_mut().find(|c| c.id == id),
            _ => None,
        });
        if let Some(call) = call {
            crate::text::push_growing(&mut call.function.arguments, delta);
        }
    }
}

/// Puts back the activities of tool calls the history still holds, each right after the
/// assistant message with its call: a 1.0 client never sends activity messages, so without
/// this a thread would lose them on its next run. An activity names its call in its content
/// (`toolCallId`); one the history already holds, or whose call is gone (another branch), is
/// left out.
fn keep_activities(recorded: &[Message], messages: &mut Vec<Message>) {
    for message in recorded {
        let Message::Activity(activity) = message else {
            continue;
        };
        if messages.iter().any(|m| m.id() == activity.id) {
            continue;
        }
        let Some(call_id) = activity.content.get("toolCallId").and_then(Value::as_str) else {
            continue;
        };
        let holder = messages.iter().position(
            |m| matches!(m, Message::Assistant(a) if a.tool_calls.iter().any(|c| c.id == call_id)),
        );
        if let Some(at) = holder {
            messages.insert(at + 1, message.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(value: Value) -> EventBody {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_subagents_messages_keep_their_attribution() {
        let run = RecordedRun {
            agent: "a",
            run_id: "r1",
            parent_run_id: None,
        };
        let mut recorder = ThreadRecorder::new(None, run, Vec::new(), None);
        for value in [
            json!({"type": "TOOL_CALL_START", "toolCallId": "sa.c1", "toolCallName": "w", "parentMessageId": "m1", "subagentRunId": "sa"}),
            json!({"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "sa.c1", "content": "x", "subagentRunId": "sa"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m2", "role": "assistant", "subagentRunId": "sa"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m3", "role": "assistant"}),
        ] {
            recorder.observe(&event(value));
        }
        let owners: Vec<Option<&str>> = recorder
            .messages
            .iter()
            .map(Message::subagent_run_id)
            .collect();
        assert_eq!(owners, [Some("sa"), Some("sa"), Some("sa"), None]);
    }

    #[test]
    fn a_run_with_a_server_tool_and_a_reply_is_recorded_as_the_client_holds_it() {
        let user: Message =
            serde_json::from_value(json!({"role": "user", "id": "u1", "content": "hi"})).unwrap();
        let run = RecordedRun {
            agent: "a",
            run_id: "r1",
            parent_run_id: None,
        };
        let mut recorder =
            ThreadRecorder::new(None, run, vec![user.clone()], Some(json!({"n": 1})));
        for value in [
            json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "w", "parentMessageId": "m1"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"a\":"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "1}"}),
            json!({"type": "TOOL_CALL_END", "toolCallId": "c1"}),
            json!({"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "c1", "content": "sunny"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m2", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m2", "delta": "It is "}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m2", "delta": "sunny."}),
            json!({"type": "TEXT_MESSAGE_END", "messageId": "m2"}),
            json!({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/n", "value": 2}]}),
            json!({"type": "STATE_DELTA", "delta": [{"op": "remove", "path": "/missing"}]}),
        ] {
            recorder.observe(&event(value));
        }
        let record = recorder.finish();
        let expected: Vec<Message> = serde_json::from_value(json!([
            {"role": "user", "id": "u1", "content": "hi"},
            {"role": "assistant", "id": "m1", "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "w", "arguments": "{\"a\":1}"}}
            ]},
            {"role": "tool", "id": "t1", "toolCallId": "c1", "content": "sunny"},
            {"role": "assistant", "id": "m2", "content": "It is sunny."},
        ]))
        .unwrap();
        assert_eq!(record.messages, expected);
        assert_eq!(
            record.state,
            Some(json!({"n": 2})),
            "a failing patch changes nothing"
        );
        assert_eq!(record.server_results, BTreeSet::from(["c1".to_owned()]));
        assert_eq!(record.last_run_id, "r1");
    }
}
