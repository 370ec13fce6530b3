//! The 31 AG-UI 1.0 event types, as serde types that serialize to exactly what
//! `@ag-ui/core` 1.0 accepts.
//!
//! Serde policy (see the crate docs for the reasoning):
//! - camelCase fields, `type` discriminator in SCREAMING_SNAKE_CASE;
//! - an absent optional is *absent*, never `null` (`skip_serializing_if` on every `Option`):
//!   both reference clients reject `"name": null`;
//! - `timestamp` is integer milliseconds since the epoch (`i64`): a float is fatal in 1.0;
//! - fields that are "any JSON" but required (`STATE_SNAPSHOT.snapshot`, `CUSTOM.value`,
//!   `RAW.event`) may hold `null`; optional "any JSON" fields (`rawEvent`, `result`) never do.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::input::{Interrupt, Message, ToolResultContent};

/// One event on the wire: the typed body plus the base fields every event may carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    #[serde(flatten)]
    pub body: EventBody,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_event: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// The event types of `@ag-ui/core` 1.0 `EventType`, all 31 of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventBody {
    RunStarted(RunStarted),
    RunFinished(RunFinished),
    RunError(RunError),
    StepStarted(Step),
    StepFinished(Step),
    TextMessageStart(TextMessageStart),
    TextMessageContent(TextMessageContent),
    TextMessageEnd(MessageRef),
    TextMessageChunk(TextMessageChunk),
    ToolCallStart(ToolCallStart),
    ToolCallArgs(ToolCallArgs),
    ToolCallEnd(ToolCallRef),
    ToolCallChunk(ToolCallChunk),
    ToolCallResult(ToolCallResult),
    StateSnapshot(StateSnapshot),
    StateDelta(StateDelta),
    MessagesSnapshot(MessagesSnapshot),
    ActivitySnapshot(ActivitySnapshot),
    ActivityDelta(ActivityDelta),
    Raw(Raw),
    Custom(Custom),
    ReasoningStart(MessageRef),
    ReasoningMessageStart(ReasoningMessageStart),
    ReasoningMessageContent(TextMessageContent),
    ReasoningMessageEnd(MessageRef),
    ReasoningMessageChunk(ReasoningMessageChunk),
    ReasoningEnd(MessageRef),
    ReasoningEncryptedValue(ReasoningEncryptedValue),
    SubagentStarted(SubagentStarted),
    SubagentFinished(SubagentFinished),
    SubagentError(SubagentError),
}

impl EventBody {
    /// The wire name of this event's `type`.
    pub fn type_name(&self) -> &'static str {
        match self {
            EventBody::RunStarted(_) => "RUN_STARTED",
            EventBody::RunFinished(_) => "RUN_FINISHED",
            EventBody::RunError(_) => "RUN_ERROR",
            EventBody::StepStarted(_) => "STEP_STARTED",
            EventBody::StepFinished(_) => "STEP_FINISHED",
            EventBody::TextMessageStart(_) => "TEXT_MESSAGE_START",
            EventBody::TextMessageContent(_) => "TEXT_MESSAGE_CONTENT",
            EventBody::TextMessageEnd(_) => "TEXT_MESSAGE_END",
            EventBody::TextMessageChunk(_) => "TEXT_MESSAGE_CHUNK",
            EventBody::ToolCallStart(_) => "TOOL_CALL_START",
            EventBody::ToolCallArgs(_) => "TOOL_CALL_ARGS",
            EventBody::ToolCallEnd(_) => "TOOL_CALL_END",
            EventBody::ToolCallChunk(_) => "TOOL_CALL_CHUNK",
            EventBody::ToolCallResult(_) => "TOOL_CALL_RESULT",
            EventBody::StateSnapshot(_) => "STATE_SNAPSHOT",
            EventBody::StateDelta(_) => "STATE_DELTA",
            EventBody::MessagesSnapshot(_) => "MESSAGES_SNAPSHOT",
            EventBody::ActivitySnapshot(_) => "ACTIVITY_SNAPSHOT",
            EventBody::ActivityDelta(_) => "ACTIVITY_DELTA",
            EventBody::Raw(_) => "RAW",
            EventBody::Custom(_) => "CUSTOM",
            EventBody::ReasoningStart(_) => "REASONING_START",
            EventBody::ReasoningMessageStart(_) => "REASONING_MESSAGE_START",
            EventBody::ReasoningMessageContent(_) => "REASONING_MESSAGE_CONTENT",
            EventBody::ReasoningMessageEnd(_) => "REASONING_MESSAGE_END",
            EventBody::ReasoningMessageChunk(_) => "REASONING_MESSAGE_CHUNK",
            EventBody::ReasoningEnd(_) => "REASONING_END",
            EventBody::ReasoningEncryptedValue(_) => "REASONING_ENCRYPTED_VALUE",
            EventBody::SubagentStarted(_) => "SUBAGENT_STARTED",
            EventBody::SubagentFinished(_) => "SUBAGENT_FINISHED",
            EventBody::SubagentError(_) => "SUBAGENT_ERROR",
        }
    }
}

/// Constructors for the events an agent emits about its own run (no `subagentRunId`), so agent
/// code says what it emits in one line.
impl EventBody {
    /// `TEXT_MESSAGE_START` of an assistant message.
    pub fn text_start(message_id: impl Into<String>) -> Self {
        EventBody::TextMessageStart(TextMessageStart {
            message_id: message_id.into(),
            role: Some(TextRole::Assistant),
            name: None,
            subagent_run_id: None,
        })
    }

    pub fn text_content(message_id: impl Into<String>, delta: impl Into<String>) -> Self {
        EventBody::TextMessageContent(TextMessageContent::new(message_id, delta))
    }

    pub fn text_end(message_id: impl Into<String>) -> Self {
        EventBody::TextMessageEnd(MessageRef::new(message_id))
    }

    pub fn tool_call_start(
        tool_call_id: impl Into<String>,
        tool_call_name: impl Into<String>,
        parent_message_id: Option<String>,
    ) -> Self {
        EventBody::ToolCallStart(ToolCallStart {
            tool_call_id: tool_call_id.into(),
            tool_call_name: tool_call_name.into(),
            parent_message_id,
            subagent_run_id: None,
        })
    }

    pub fn tool_call_args(tool_call_id: impl Into<String>, delta: impl Into<String>) -> Self {
        EventBody::ToolCallArgs(ToolCallArgs {
            tool_call_id: tool_call_id.into(),
            delta: delta.into(),
            subagent_run_id: None,
        })
    }

    pub fn tool_call_end(tool_call_id: impl Into<String>) -> Self {
        EventBody::ToolCallEnd(ToolCallRef {
            tool_call_id: tool_call_id.into(),
            subagent_run_id: None,
        })
    }

    /// `TOOL_CALL_RESULT` with the `tool` role.
    pub fn tool_call_result(
        message_id: impl Into<String>,
        tool_call_id: impl Into<String>,
        content: impl Into<ToolResultContent>,
    ) -> Self {
        EventBody::ToolCallResult(ToolCallResult {
            message_id: message_id.into(),
            tool_call_id: tool_call_id.into(),
            content: content.into(),
            role: Some(ToolRole::Tool),
            subagent_run_id: None,
        })
    }

    pub fn state_snapshot(snapshot: Value) -> Self {
        EventBody::StateSnapshot(StateSnapshot {
            snapshot,
            subagent_run_id: None,
        })
    }

    pub fn state_delta(delta: json_patch::Patch) -> Self {
        EventBody::StateDelta(StateDelta {
            delta,
            subagent_run_id: None,
        })
    }

    pub fn custom(name: impl Into<String>, value: Value) -> Self {
        EventBody::Custom(Custom {
            name: name.into(),
            value,
            subagent_run_id: None,
        })
    }
}

impl TextMessageContent {
    /// A delta of text (or of reasoning, which shares the shape) of the message `message_id`.
    pub fn new(message_id: impl Into<String>, delta: impl Into<String>) -> Self {
        TextMessageContent {
            message_id: message_id.into(),
            delta: delta.into(),
            subagent_run_id: None,
        }
    }
}

impl MessageRef {
    pub fn new(message_id: impl Into<String>) -> Self {
        MessageRef {
            message_id: message_id.into(),
            subagent_run_id: None,
        }
    }
}

impl From<EventBody> for Event {
    fn from(body: EventBody) -> Self {
        Event {
            body,
            timestamp: None,
            raw_event: None,
            metadata: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunStarted {
    pub thread_id: String,
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// Optional echo of the request; the client merges its messages by id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input: Option<Box<super::input::RunAgentInput>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunFinished {
    pub thread_id: String,
    pub run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<RunOutcome>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Vec<TokenUsage>>,
}

/// `RunFinishedOutcome`: why the run stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RunOutcome {
    #[serde(rename_all = "camelCase")]
    Success {
        /// Frontend tool calls this run opened and left unanswered, in call order.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pending_tool_call_ids: Option<Vec<String>>,
    },
    /// At least one interrupt; an empty list is fatal in both clients.
    Interrupt {
        interrupts: Vec<Interrupt>,
    },
    Cancelled,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunError {
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Vec<TokenUsage>>,
}

/// `TokenUsage`: one entry per provider and model. `inputTokens` and `outputTokens` are totals;
/// `reasoningTokens` is part of `outputTokens`; cached counts are parts of `inputTokens`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_input_tokens: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    pub step_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

/// Role of a text message. `tool` is deliberately absent: it is invalid on `TEXT_MESSAGE_START`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TextRole {
    Developer,
    System,
    Assistant,
    User,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextMessageStart {
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<TextRole>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

/// `TEXT_MESSAGE_CONTENT` and `REASONING_MESSAGE_CONTENT`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextMessageContent {
    pub message_id: String,
    pub delta: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

/// Events that only name a message (or a reasoning span): `*_END`, `REASONING_START`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageRef {
    pub message_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextMessageChunk {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<TextRole>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallStart {
    pub tool_call_id: String,
    pub tool_call_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallArgs {
    pub tool_call_id: String,
    pub delta: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallRef {
    pub tool_call_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallChunk {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

/// The only role a tool result may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolRole {
    Tool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallResult {
    /// Id of the tool message this result mints on the client.
    pub message_id: String,
    pub tool_call_id: String,
    pub content: ToolResultContent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<ToolRole>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateSnapshot {
    /// Any JSON value, `null` included.
    pub snapshot: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateDelta {
    /// An RFC 6902 patch, applied atomically by the client.
    pub delta: json_patch::Patch,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessagesSnapshot {
    /// The whole conversation: the client removes messages missing from it.
    pub messages: Vec<Message>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivitySnapshot {
    pub message_id: String,
    pub activity_type: String,
    pub content: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityDelta {
    pub message_id: String,
    pub activity_type: String,
    pub patch: json_patch::Patch,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Raw {
    pub event: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Custom {
    pub name: String,
    /// Required, `null` allowed.
    pub value: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

/// The only role a reasoning message may carry; required on the wire (fatal if missing).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningRole {
    #[default]
    Reasoning,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningMessageStart {
    pub message_id: String,
    pub role: ReasoningRole,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningMessageChunk {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EncryptedValueSubtype {
    ToolCall,
    Message,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningEncryptedValue {
    pub subtype: EncryptedValueSubtype,
    pub entity_id: String,
    pub encrypted_value: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentStarted {
    pub subagent_run_id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_subagent_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_message_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentFinished {
    pub subagent_run_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<SubagentOutcome>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum SubagentOutcome {
    Success,
    #[serde(rename_all = "camelCase")]
    Suspended {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        interrupt_ids: Option<Vec<String>>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubagentError {
    pub subagent_run_id: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}
