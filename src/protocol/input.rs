//! `RunAgentInput` (the POST body) and the types it shares with events: messages, content parts,
//! tools, context, interrupts and resume entries.
//!
//! Input is parsed tolerantly, as `@ag-ui/core` 1.0 advises: unknown fields are ignored, absent
//! collections default to empty, and the legacy nulls the TypeScript normalizer lists
//! (`forwardedProps`, `Tool.parameters`, `ResumeEntry.payload`, media `metadata`) read as absent.
//! An unknown message *role* is still an error: a message we cannot classify cannot be sent to a
//! model safely, and silently dropping it would change the conversation.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// Reads `null` as the type's default (for collections a client may send as `null`).
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

/// Reads a JSON `null` as `None` for an "any JSON except null" optional field.
fn null_as_none<'de, D>(deserializer: D) -> Result<Option<Value>, D::Error>
where
    D: Deserializer<'de>,
{
    Ok(Option::<Value>::deserialize(deserializer)?.filter(|v| !v.is_null()))
}

/// The body of `POST /<agent>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunAgentInput {
    /// Required by the spec; generated when a lenient client omits it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// `"1.0"` from 1.0 clients; absent from 0.x clients (CopilotKit 1.75 ships 0.0.59).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// The run's starting state; `null` means none.
    #[serde(
        default,
        deserialize_with = "null_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub state: Option<Value>,
    /// The whole history, in order. Required.
    pub messages: Vec<Message>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub tools: Vec<Tool>,
    #[serde(default, deserialize_with = "null_as_default")]
    pub context: Vec<Context>,
    #[serde(
        default,
        deserialize_with = "null_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub forwarded_props: Option<Value>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub resume: Vec<ResumeEntry>,
}

/// A message of the conversation, discriminated by `role`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum Message {
    Developer(TextMessage),
    System(TextMessage),
    Assistant(AssistantMessage),
    User(UserMessage),
    Tool(ToolMessage),
    Activity(ActivityMessage),
    Reasoning(ReasoningMessage),
}

impl Message {
    pub fn id(&self) -> &str {
        match self {
            Message::Developer(m) | Message::System(m) => &m.id,
            Message::Assistant(m) => &m.id,
            Message::User(m) => &m.id,
            Message::Tool(m) => &m.id,
            Message::Activity(m) => &m.id,
            Message::Reasoning(m) => &m.id,
        }
    }

    /// The message's own `metadata` (not its tool calls' or content parts').
    pub fn metadata(&self) -> Option<&Map<String, Value>> {
        match self {
            Message::Developer(m) | Message::System(m) => m.metadata.as_ref(),
            Message::Assistant(m) => m.metadata.as_ref(),
            Message::User(m) => m.metadata.as_ref(),
            Message::Tool(m) => m.metadata.as_ref(),
            Message::Activity(m) => m.metadata.as_ref(),
            Message::Reasoning(m) => m.metadata.as_ref(),
        }
    }
}

/// `developer` and `system` messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextMessage {
    pub id: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssistantMessage {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(
        default,
        deserialize_with = "null_as_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserMessage {
    pub id: String,
    pub content: Content,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolMessage {
    pub id: String,
    pub content: Content,
    pub tool_call_id: String,
    /// Present *alongside* content when the tool failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActivityMessage {
    pub id: String,
    pub activity_type: String,
    pub content: Map<String, Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReasoningMessage {
    pub id: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// `{ id, type: "function", function: { name, arguments } }`; `arguments` is JSON *text*.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type", default = "function_type")]
    pub call_type: String,
    pub function: FunctionCall,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

fn function_type() -> String {
    "function".to_owned()
}

impl ToolCall {
    /// A function call whose arguments are still to come, as a client records a
    /// `TOOL_CALL_START`.
    pub fn started(id: &str, name: &str) -> Self {
        ToolCall {
            id: id.to_owned(),
            call_type: function_type(),
            function: FunctionCall {
                name: name.to_owned(),
                arguments: String::new(),
            },
            encrypted_value: None,
            metadata: None,
        }
    }
}

/// Constructors for messages a server or client records from the events of a run (no
/// `subagentRunId`, no metadata), so that code says what it records in one line.
impl AssistantMessage {
    /// An assistant message with no text and no calls yet, as a `TEXT_MESSAGE_START` or the
    /// first `TOOL_CALL_START` under it opens one.
    pub fn empty(id: impl Into<String>) -> Self {
        AssistantMessage {
            id: id.into(),
            content: None,
            tool_calls: Vec::new(),
            name: None,
            encrypted_value: None,
            subagent_run_id: None,
            metadata: None,
        }
    }
}

impl TextMessage {
    pub fn new(id: impl Into<String>, content: impl Into<String>) -> Self {
        TextMessage {
            id: id.into(),
            content: content.into(),
            name: None,
            encrypted_value: None,
            subagent_run_id: None,
            metadata: None,
        }
    }
}

impl UserMessage {
    pub fn text(id: impl Into<String>, text: impl Into<String>) -> Self {
        UserMessage {
            id: id.into(),
            content: Content::Text(text.into()),
            name: None,
            encrypted_value: None,
            subagent_run_id: None,
            metadata: None,
        }
    }
}

impl ToolMessage {
    /// The tool message a client records for a `TOOL_CALL_RESULT`.
    pub fn answering(result: &super::ToolCallResult) -> Self {
        let content = match &result.content {
            super::ToolResultContent::Text(text) => Content::Text(text.clone()),
            super::ToolResultContent::Parts(parts) => Content::Parts(parts.clone()),
        };
        ToolMessage::new(
            result.message_id.clone(),
            result.tool_call_id.clone(),
            content,
        )
    }

    /// A tool's answer to the call `tool_call_id`.
    pub fn new(id: impl Into<String>, tool_call_id: impl Into<String>, content: Content) -> Self {
        ToolMessage {
            id: id.into(),
            content,
            tool_call_id: tool_call_id.into(),
            error: None,
            encrypted_value: None,
            subagent_run_id: None,
            metadata: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    pub name: String,
    #[serde(default)]
    pub arguments: String,
}

/// User and tool message content: a string or a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl Content {
    /// The text of the content: the string itself, or the text parts joined by newlines.
    pub fn text(&self) -> String {
        match self {
            Content::Text(text) => text.clone(),
            Content::Parts(parts) => {
                let texts: Vec<&str> = parts
                    .iter()
                    .filter_map(|part| match part {
                        ContentPart::Text { text, .. } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                texts.join("\n")
            }
        }
    }
}

/// A content part. Media parts share one shape; `binary` is the legacy (pre-1.0) part, accepted
/// on input only; an unknown part type is kept as `Unknown` rather than failing the request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ContentPart {
    Text {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[serde(
            default,
            deserialize_with = "null_as_none",
            skip_serializing_if = "Option::is_none"
        )]
        metadata: Option<Value>,
    },
    Image(MediaPart),
    Audio(MediaPart),
    Video(MediaPart),
    Document(MediaPart),
    #[serde(rename_all = "camelCase")]
    Binary {
        mime_type: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        url: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        filename: Option<String>,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MediaPart {
    pub source: PartSource,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(
        default,
        deserialize_with = "null_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub metadata: Option<Value>,
}

/// Where a media part's bytes are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum PartSource {
    /// Base64 bytes.
    #[serde(rename_all = "camelCase")]
    Data { value: String, mime_type: String },
    #[serde(rename_all = "camelCase")]
    Url {
        value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
    /// A provider-issued file handle (new in 1.0; fatal on 0.0.59 clients).
    #[serde(rename_all = "camelCase")]
    File {
        value: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        provider: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
}

/// Content of `TOOL_CALL_RESULT`: a string, or (1.0 only) a list of parts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolResultContent {
    Text(String),
    Parts(Vec<ContentPart>),
}

impl From<String> for ToolResultContent {
    fn from(text: String) -> Self {
        ToolResultContent::Text(text)
    }
}

/// A frontend tool the agent may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Tool {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// An opaque JSON Schema; absent, `null` and `{}` mean the same.
    #[serde(
        default,
        deserialize_with = "null_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// Application context the frontend shares with the agent (`useAgentContext`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Context {
    pub description: String,
    pub value: String,
}

/// An answer to an interrupt that ended the previous run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResumeEntry {
    pub interrupt_id: String,
    pub status: ResumeStatus,
    #[serde(
        default,
        deserialize_with = "null_as_none",
        skip_serializing_if = "Option::is_none"
    )]
    pub payload: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResumeStatus {
    Resolved,
    Cancelled,
}

/// A request for input that ends a run with `outcome: {type: "interrupt"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interrupt {
    pub id: String,
    /// `tool_call`, `input_required`, `confirmation`, or a namespaced `framework:name`.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// A JSON Schema object (boolean schemas are not allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_schema: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent_run_id: Option<String>,
}
