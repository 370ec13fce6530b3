//! The thread, history and state, kept as the reference client's reducer keeps them, so that
//! what the next run sends is what a real frontend would send.

use agui_host::protocol::{
    AssistantMessage, Content, EncryptedValueSubtype, Message, ReasoningEncryptedValue,
    ReasoningMessage, ResumeEntry, RunAgentInput, TextMessage, TextRole, Tool, ToolCall,
    ToolCallResult, ToolMessage, UserMessage,
};
use agui_host::text::new_id;
use serde_json::{json, Value};

use super::open_object_schema;

/// One conversation as the client holds it.
#[derive(Debug)]
pub(super) struct Thread {
    pub(super) id: String,
    pub(super) messages: Vec<Message>,
    /// The reference client's default state is `{}`, and the first delta applies to it.
    pub(super) state: Value,
}

impl Thread {
    pub(super) fn new(id: String) -> Thread {
        Thread {
            id,
            messages: Vec::new(),
            state: json!({}),
        }
    }

    /// The body of the next run: a 1.0 input with the whole history and the current state.
    pub(super) fn input(&self, client_tools: &[String], resume: Vec<ResumeEntry>) -> RunAgentInput {
        let tools = client_tools
            .iter()
            .map(|name| Tool {
                name: name.clone(),
                description: format!(
                    "The `{name}` tool: the person at the terminal reads the arguments and types \
                     the result."
                ),
                parameters: Some(open_object_schema()),
                metadata: None,
            })
            .collect();
        RunAgentInput {
            thread_id: Some(self.id.clone()),
            run_id: Some(new_id("run")),
            protocol_version: Some("1.0".to_owned()),
            parent_run_id: None,
            state: Some(self.state.clone()),
            messages: self.messages.clone(),
            tools,
            context: Vec::new(),
            forwarded_props: Some(json!({})),
            resume,
        }
    }

    pub(super) fn position(&self, id: &str) -> Option<usize> {
        self.messages.iter().position(|m| m.id() == id)
    }

    pub(super) fn push_user(&mut self, text: &str) {
        let id = new_id("user");
        self.messages
            .push(Message::User(UserMessage::text(id, text)));
    }

    /// A frontend tool's answer, typed by the person: appended, as CopilotKit appends it.
    pub(super) fn push_tool_answer(&mut self, tool_call_id: &str, text: &str) {
        let id = new_id("tool");
        let message = ToolMessage::new(id, tool_call_id, Content::Text(text.to_owned()));
        self.messages.push(Message::Tool(message));
    }

    /// `TEXT_MESSAGE_START`: a message with this id gets the text appended (it may be the
    /// assistant message a tool call created); otherwise a new, empty one of `role`.
    pub(super) fn start_text(&mut self, id: &str, role: Option<TextRole>) {
        if self.position(id).is_some() {
            return;
        }
        let message = match role.unwrap_or(TextRole::Assistant) {
            TextRole::Assistant => Message::Assistant(AssistantMessage {
                content: Some(String::new()),
                ..AssistantMessage::empty(id)
            }),
            TextRole::User => Message::User(UserMessage::text(id, "")),
            TextRole::System => Message::System(TextMessage::new(id, "")),
            TextRole::Developer => Message::Developer(TextMessage::new(id, "")),
        };
        self.messages.push(message);
    }

    /// `TEXT_MESSAGE_CONTENT`. Content for an unknown id starts an assistant message: the
    /// reference client would fail the run, but a terminal loses nothing by being lenient.
    pub(super) fn append_text(&mut self, id: &str, delta: &str) {
        let at = match self.position(id) {
            Some(at) => at,
            None => {
                self.start_text(id, None);
                self.messages.len() - 1
            }
        };
        match &mut self.messages[at] {
            Message::Assistant(m) => m.content.get_or_insert_with(String::new).push_str(delta),
            Message::Developer(m) | Message::System(m) => m.content.push_str(delta),
            Message::Reasoning(m) => m.content.push_str(delta),
            Message::User(m) => match &mut m.content {
                Content::Text(text) => text.push_str(delta),
                Content::Parts(_) => {}
            },
            Message::Tool(_) | Message::Activity(_) => {}
        }
    }

    /// `TOOL_CALL_START`: the call goes into the assistant message `parentMessageId` names,
    /// created if unknown; without a parent, into a new assistant message whose id is the
    /// call's id (digest §3.3).
    pub(super) fn start_call(&mut self, call_id: &str, name: &str, parent: Option<&str>) {
        let owner = parent.unwrap_or(call_id);
        let at = match self.position(owner) {
            Some(at) if matches!(self.messages[at], Message::Assistant(_)) => at,
            // An id that names a non-assistant message cannot own a call: give the call its own.
            Some(_) => {
                self.messages
                    .push(Message::Assistant(AssistantMessage::empty(call_id)));
                self.messages.len() - 1
            }
            None => {
                self.messages
                    .push(Message::Assistant(AssistantMessage::empty(owner)));
                self.messages.len() - 1
            }
        };
        if let Message::Assistant(message) = &mut self.messages[at] {
            message.tool_calls.push(ToolCall::started(call_id, name));
        }
    }

    /// The assistant message holding the call, and the call's index in it (latest first, as
    /// ids are reused only by broken servers).
    pub(super) fn call_position(&self, call_id: &str) -> Option<(usize, usize)> {
        self.messages
            .iter()
            .enumerate()
            .rev()
            .find_map(|(at, m)| match m {
                Message::Assistant(a) => a
                    .tool_calls
                    .iter()
                    .position(|c| c.id == call_id)
                    .map(|index| (at, index)),
                _ => None,
            })
    }

    pub(super) fn call(&self, call_id: &str) -> Option<&ToolCall> {
        let (at, index) = self.call_position(call_id)?;
        match &self.messages[at] {
            Message::Assistant(a) => a.tool_calls.get(index),
            _ => None,
        }
    }

    pub(super) fn call_mut(&mut self, call_id: &str) -> Option<&mut ToolCall> {
        let (at, index) = self.call_position(call_id)?;
        match &mut self.messages[at] {
            Message::Assistant(a) => a.tool_calls.get_mut(index),
            _ => None,
        }
    }

    pub(super) fn append_args(&mut self, call_id: &str, delta: &str) {
        if let Some(call) = self.call_mut(call_id) {
            call.function.arguments.push_str(delta);
        }
    }

    /// `TOOL_CALL_RESULT` mints a tool message, placed right after the assistant message that
    /// owns the call and the tool results already there; appended when no message owns it.
    pub(super) fn add_result(&mut self, result: &ToolCallResult) {
        let message = Message::Tool(ToolMessage::answering(result));
        match self.call_position(&result.tool_call_id) {
            Some((owner, _)) => {
                let mut at = owner + 1;
                while matches!(self.messages.get(at), Some(Message::Tool(_))) {
                    at += 1;
                }
                self.messages.insert(at, message);
            }
            None => self.messages.push(message),
        }
    }

    /// `REASONING_MESSAGE_START` materializes a `reasoning` message.
    pub(super) fn start_reasoning(&mut self, id: &str) {
        if self.position(id).is_none() {
            self.messages.push(Message::Reasoning(ReasoningMessage {
                id: id.to_owned(),
                content: String::new(),
                encrypted_value: None,
                subagent_run_id: None,
                metadata: None,
            }));
        }
    }

    pub(super) fn append_reasoning(&mut self, id: &str, delta: &str) {
        self.start_reasoning(id);
        self.append_text(id, delta);
    }

    /// Opaque provider artefacts are kept on their message or call and sent back on later runs.
    pub(super) fn store_encrypted(&mut self, event: &ReasoningEncryptedValue) {
        let value = Some(event.encrypted_value.clone());
        match event.subtype {
            EncryptedValueSubtype::ToolCall => {
                if let Some(call) = self.call_mut(&event.entity_id) {
                    call.encrypted_value = value;
                }
            }
            EncryptedValueSubtype::Message => {
                let Some(at) = self.position(&event.entity_id) else {
                    return;
                };
                match &mut self.messages[at] {
                    Message::Assistant(m) => m.encrypted_value = value,
                    Message::Developer(m) | Message::System(m) => m.encrypted_value = value,
                    Message::User(m) => m.encrypted_value = value,
                    Message::Tool(m) => m.encrypted_value = value,
                    Message::Reasoning(m) => m.encrypted_value = value,
                    Message::Activity(_) => {}
                }
            }
        }
    }

    /// `RUN_STARTED.input.messages`: merged by id, new ones appended.
    pub(super) fn merge_input(&mut self, messages: Vec<Message>) {
        for message in messages {
            if self.position(message.id()).is_none() {
                self.messages.push(message);
            }
        }
    }

    /// `MESSAGES_SNAPSHOT` (digest §3.4): known ids are replaced in place, new ones appended,
    /// and messages missing from the snapshot removed, except activity and reasoning messages
    /// when the snapshot carries none of their kind.
    pub(super) fn merge_snapshot(&mut self, snapshot: Vec<Message>) {
        let has_activity = snapshot.iter().any(|m| matches!(m, Message::Activity(_)));
        let has_reasoning = snapshot.iter().any(|m| matches!(m, Message::Reasoning(_)));
        let mut incoming: Vec<Option<Message>> = snapshot.into_iter().map(Some).collect();
        let mut merged = Vec::with_capacity(incoming.len());
        for message in std::mem::take(&mut self.messages) {
            let replacement = incoming
                .iter_mut()
                .find(|m| m.as_ref().is_some_and(|m| m.id() == message.id()))
                .and_then(Option::take);
            match (replacement, &message) {
                (Some(newer), _) => merged.push(newer),
                (None, Message::Activity(_)) if !has_activity => merged.push(message),
                (None, Message::Reasoning(_)) if !has_reasoning => merged.push(message),
                (None, _) => {}
            }
        }
        merged.extend(incoming.into_iter().flatten());
        self.messages = merged;
    }

    /// `STATE_DELTA`: all or nothing, on a copy, so a failing operation leaves the state as it
    /// was (the reference client applies to a clone and keeps the old state on any failure).
    pub(super) fn apply_delta(&mut self, ops: &[json_patch::PatchOperation]) -> Result<(), String> {
        let mut next = self.state.clone();
        json_patch::patch(&mut next, ops).map_err(|e| e.to_string())?;
        self.state = next;
        Ok(())
    }

    /// The calls among `call_ids` that no tool message answers yet: `(id, tool name)`.
    pub(super) fn unanswered(&self, call_ids: &[String]) -> Vec<(String, String)> {
        let answered = |id: &str| {
            self.messages
                .iter()
                .any(|m| matches!(m, Message::Tool(t) if t.tool_call_id == id))
        };
        call_ids
            .iter()
            .filter(|id| !answered(id))
            .filter_map(|id| Some((id.clone(), self.call(id)?.function.name.clone())))
            .collect()
    }
}
