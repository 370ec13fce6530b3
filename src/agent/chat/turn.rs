//! `Turn`: what one model call has produced so far, and the events each model event becomes.
//! Everything a turn produces hangs off one assistant message id; reasoning closes before the
//! answer or a tool call; a call's `TOOL_CALL_START` waits for its name, and its
//! `TOOL_CALL_END` for the end of the turn, when its arguments are known to be complete.

use crate::agent::{new_id, AgentError, AgentUpdate};
use crate::llm::{ChatReasoning, ChatToolCall, LlmEvent};
use crate::protocol::{
    EncryptedValueSubtype, EventBody, MessageRef, ReasoningEncryptedValue, ReasoningMessageStart,
    ReasoningRole, TextMessageContent,
};

/// What one model event becomes, in order: one update nearly always, held inline in the run's
/// state rather than in a heap queue whose first block of four updates is kept for the
/// stream's whole life. The few events that become more (a message's start with its first
/// fragment, a turn's end) spill to the heap until they are handed on (see `RunState::next`).
pub(super) type TurnUpdates = smallvec::SmallVec<[AgentUpdate; 1]>;

pub(super) struct Turn {
    /// The assistant message id shared by this turn's text and tool calls.
    pub(super) message_id: String,
    pub(super) text: String,
    text_open: bool,
    /// The open reasoning span/message id (one id names both).
    reasoning_id: Option<String>,
    /// The text of the open reasoning, kept only for providers that want it back (it is
    /// sealed by an encrypted value, see [`Turn::reasoning_encrypted`]).
    reasoning_text: String,
    /// The sealed stretches of reasoning of this turn, for the history.
    reasoning: Vec<ChatReasoning>,
    pub(super) calls: Vec<TurnCall>,
}

/// What a finished turn said, for the history.
pub(super) struct TurnOutput {
    pub(super) text: Option<String>,
    pub(super) calls: Vec<ChatToolCall>,
    /// The sealed stretches of reasoning, for providers that want them back.
    pub(super) reasoning: Vec<ChatReasoning>,
}

pub(super) struct TurnCall {
    /// The upstream's per-call index within the turn.
    index: usize,
    id: String,
    name: Option<String>,
    arguments: String,
    /// `TOOL_CALL_START` sent (needs the name; fragments before it wait in `arguments`).
    started: bool,
}

impl TurnCall {
    /// Id, name and arguments, for the model call's span.
    pub(super) fn traced(&self) -> (&str, Option<&str>, &str) {
        (&self.id, self.name.as_deref(), &self.arguments)
    }
}

impl Turn {
    pub(super) fn new() -> Self {
        Turn {
            message_id: new_id("msg"),
            text: String::new(),
            text_open: false,
            reasoning_id: None,
            reasoning_text: String::new(),
            reasoning: Vec::new(),
            calls: Vec::new(),
        }
    }

    pub(super) fn apply(&mut self, event: LlmEvent, out: &mut TurnUpdates) {
        match event {
            LlmEvent::TextDelta(delta) => self.text_delta(delta, out),
            LlmEvent::ReasoningDelta(delta) => self.reasoning_delta(delta, out),
            LlmEvent::ReasoningEncrypted(value) => self.reasoning_encrypted(value, out),
            LlmEvent::ToolCallDelta {
                index,
                id,
                name,
                arguments,
            } => self.tool_call_delta(index, id, name, arguments, out),
            LlmEvent::Usage(_) | LlmEvent::Response { .. } | LlmEvent::Finished { .. } => {}
        }
    }

    /// Answer text: the turn's message opens with its first non-empty delta.
    fn text_delta(&mut self, delta: String, out: &mut TurnUpdates) {
        if delta.is_empty() {
            return;
        }
        self.close_reasoning(out);
        if !self.text_open {
            self.text_open = true;
            out.push(EventBody::text_start(self.message_id.clone()).into());
        }
        crate::text::push_growing(&mut self.text, &delta);
        out.push(EventBody::text_content(self.message_id.clone(), delta).into());
    }

    /// Reasoning text: one span and message per stretch of reasoning, under one id.
    fn reasoning_delta(&mut self, delta: String, out: &mut TurnUpdates) {
        if delta.is_empty() {
            return;
        }
        let id = self.open_reasoning(out);
        self.reasoning_text.push_str(&delta);
        out.push(EventBody::ReasoningMessageContent(TextMessageContent::new(id, delta)).into());
    }

    /// The id of the open reasoning, opened now if none is.
    fn open_reasoning(&mut self, out: &mut TurnUpdates) -> String {
        if let Some(id) = &self.reasoning_id {
            return id.clone();
        }
        let id = new_id("reasoning");
        out.push(EventBody::ReasoningStart(MessageRef::new(id.clone())).into());
        out.push(
            EventBody::ReasoningMessageStart(ReasoningMessageStart {
                message_id: id.clone(),
                role: ReasoningRole::Reasoning,
                subagent_run_id: None,
            })
            .into(),
        );
        self.reasoning_id = Some(id.clone());
        id
    }

    /// The value that seals the reasoning so far (a thinking block's signature): the client
    /// stores it on the reasoning message and sends it back, and the next model call of this
    /// run gets the reasoning with it. Reasoning without text (a redacted block) still gets a
    /// message to carry it.
    fn reasoning_encrypted(&mut self, value: String, out: &mut TurnUpdates) {
        if value.is_empty() {
            return;
        }
        let id = self.open_reasoning(out);
        out.push(
            EventBody::ReasoningEncryptedValue(ReasoningEncryptedValue {
                subtype: EncryptedValueSubtype::Message,
                entity_id: id,
                encrypted_value: value.clone(),
                subagent_run_id: None,
            })
            .into(),
        );
        self.reasoning.push(ChatReasoning {
            text: std::mem::take(&mut self.reasoning_text),
            encrypted: Some(value),
        });
        self.close_reasoning(out);
    }

    /// A fragment of the call at `index`: its id and name arrive once, its arguments in pieces.
    fn tool_call_delta(
        &mut self,
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
        out: &mut TurnUpdates,
    ) {
        self.close_reasoning(out);
        let position = self.call_position(index, id);
        let message_id = &self.message_id;
        let call = &mut self.calls[position];
        if call.name.is_none() {
            call.name = name.filter(|n| !n.is_empty());
        }
        call.arguments.push_str(&arguments);
        if call.started {
            if !arguments.is_empty() {
                out.push(EventBody::tool_call_args(call.id.clone(), arguments).into());
            }
            return;
        }
        let Some(name) = &call.name else { return };
        call.started = true;
        out.push(
            EventBody::tool_call_start(call.id.clone(), name.clone(), Some(message_id.clone()))
                .into(),
        );
        // Fragments that arrived before the name are sent now, as one.
        if !call.arguments.is_empty() {
            out.push(EventBody::tool_call_args(call.id.clone(), call.arguments.clone()).into());
        }
    }

    /// Where the call at the upstream's `index` is kept, made on its first fragment (with an id
    /// of our own when the server sent none).
    fn call_position(&mut self, index: usize, id: Option<String>) -> usize {
        if let Some(position) = self.calls.iter().position(|c| c.index == index) {
            return position;
        }
        self.calls.push(TurnCall {
            index,
            id: id
                .filter(|id| !id.is_empty())
                .unwrap_or_else(|| new_id("call")),
            name: None,
            arguments: String::new(),
            started: false,
        });
        self.calls.len() - 1
    }

    fn close_reasoning(&mut self, out: &mut TurnUpdates) {
        if let Some(id) = self.reasoning_id.take() {
            self.reasoning_text.clear();
            out.push(EventBody::ReasoningMessageEnd(MessageRef::new(id.clone())).into());
            out.push(EventBody::ReasoningEnd(MessageRef::new(id)).into());
        }
    }

    /// Closes what the turn opened and returns its text, tool calls and sealed reasoning.
    pub(super) fn finish(mut self, out: &mut TurnUpdates) -> Result<TurnOutput, AgentError> {
        self.close_reasoning(out);
        if self.text_open {
            out.push(EventBody::text_end(self.message_id.clone()).into());
        }
        let mut calls = Vec::with_capacity(self.calls.len());
        for call in self.calls {
            let Some(name) = call.name else {
                return Err(AgentError::MalformedModelOutput(
                    "the model sent a tool call without a name".to_owned(),
                ));
            };
            out.push(EventBody::tool_call_end(call.id.clone()).into());
            calls.push(ChatToolCall {
                id: call.id,
                name,
                arguments: call.arguments,
            });
        }
        let text = (!self.text.is_empty()).then_some(self.text);
        Ok(TurnOutput {
            text,
            calls,
            reasoning: self.reasoning,
        })
    }
}
