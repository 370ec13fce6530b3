//! What one `RunAgentInput` may carry (`server.input_limits`): counts, sizes and ids (media
//! parts are `media`'s). Checked on the decoded input, before the run takes a concurrency slot or
//! any middleware does work in proportion to the input; a refusal names the limit broken,
//! with a stable code the HTTP edge answers with.

use serde::Deserialize;

use super::{Content, ContentPart, Message, RunAgentInput, ToolCall};

/// Declares [`InputCode`], each variant with its wire name.
macro_rules! input_codes {
    ($($variant:ident => $name:literal,)*) => {
        /// Which limit an input broke.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum InputCode {
            $($variant,)*
        }

        impl InputCode {
            /// The code as clients read it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(InputCode::$variant => $name,)*
                }
            }
        }
    };
}

input_codes! {
    TooManyMessages => "too_many_messages",
    ContentTooLarge => "content_too_large",
    TooManyTools => "too_many_tools",
    TooManyContextEntries => "too_many_context_entries",
    ContextTooLarge => "context_too_large",
    IdTooLong => "id_too_long",
    InvalidId => "invalid_id",
    TooManyToolCalls => "too_many_tool_calls",
    MetadataTooLarge => "metadata_too_large",
    ForwardedPropsTooLarge => "forwarded_props_too_large",
    TooManyResumeEntries => "too_many_resume_entries",
    ResumeTooLarge => "resume_too_large",
    TooManyMediaParts => "too_many_media_parts",
    MediaTooLarge => "media_too_large",
    InvalidMedia => "invalid_media",
    UnsupportedImageType => "unsupported_image_type",
    MediaUrlNotAllowed => "media_url_not_allowed",
}

/// An input refused: which limit, and a message naming it for the client.
pub struct InputRefusal {
    pub code: InputCode,
    pub message: String,
}

impl InputRefusal {
    pub(super) fn new(code: InputCode, message: impl Into<String>) -> Self {
        InputRefusal {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Debug for InputRefusal {
    /// The code as clients read it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InputRefusal")
            .field("code", &self.code.as_str())
            .field("message", &self.message)
            .finish()
    }
}

/// Limits on one request's content, each refused before any stream with a 422 naming it.
/// `server.body_limit_bytes` bounds the bytes parsed; these bound what a run then works on.
#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct InputLimits {
    /// Most messages in `messages` (`too_many_messages`).
    pub max_messages: usize,
    /// Most bytes of text across all messages: text content and text parts, tool-call names and
    /// arguments, tool results, reasoning (`content_too_large`). Media data is bounded by
    /// `max_media_parts` and `max_media_bytes`.
    pub max_content_bytes: usize,
    /// Most client tools in `tools` (`too_many_tools`).
    pub max_tools: usize,
    /// Most entries in `context` (`too_many_context_entries`).
    pub max_context_entries: usize,
    /// Most bytes of `context` descriptions and values together (`context_too_large`).
    pub max_context_bytes: usize,
    /// Longest id in bytes (`id_too_long`): `threadId`, `runId`, `parentRunId`, every
    /// message's `id`, every tool call's `id` and every tool message's `toolCallId`. They go on
    /// log lines, into tool requests and into the stored thread.
    pub max_id_bytes: usize,
    /// Most tool calls in one assistant message (`too_many_tool_calls`).
    pub max_tool_calls_per_message: usize,
    /// Most bytes of `metadata` (as JSON) across all messages, their tool calls and content
    /// parts (`metadata_too_large`): stored with the thread, never sent to the model.
    pub max_metadata_bytes: usize,
    /// Most bytes of `forwardedProps` as JSON (`forwarded_props_too_large`).
    pub max_forwarded_props_bytes: usize,
    /// Most entries in `resume` (`too_many_resume_entries`).
    pub max_resume_entries: usize,
    /// Most bytes of `resume` interrupt ids and payloads together (`resume_too_large`).
    pub max_resume_bytes: usize,
    /// Most media parts (images, audio, video, documents) across all messages
    /// (`too_many_media_parts`).
    pub max_media_parts: usize,
    /// Most decoded bytes of one media part's inline base64 data (`media_too_large`).
    pub max_media_bytes: usize,
    /// Accept media parts that name an `http(s)` URL, which the model server then fetches. Off:
    /// inline data only (`media_url_not_allowed`), for a model server that can reach addresses
    /// clients should not.
    pub allow_media_urls: bool,
}

impl Default for InputLimits {
    fn default() -> Self {
        InputLimits {
            max_messages: 1000,
            max_content_bytes: 2 * 1024 * 1024,
            max_tools: 128,
            max_context_entries: 100,
            max_context_bytes: 256 * 1024,
            max_id_bytes: 256,
            max_tool_calls_per_message: 128,
            max_metadata_bytes: 256 * 1024,
            max_forwarded_props_bytes: 64 * 1024,
            max_resume_entries: 64,
            max_resume_bytes: 256 * 1024,
            max_media_parts: 32,
            max_media_bytes: 20 * 1024 * 1024,
            allow_media_urls: true,
        }
    }
}

/// Refuses an input over one of `server.input_limits`, naming the limit (the first one
/// exceeded, in this order).
pub(super) fn check_limits(
    input: &RunAgentInput,
    limits: &InputLimits,
) -> Result<(), InputRefusal> {
    let context_bytes: usize = input
        .context
        .iter()
        .map(|entry| entry.description.len() + entry.value.len())
        .sum();
    // (code, what is counted, how many, the setting, its limit)
    let checks = [
        (
            InputCode::TooManyMessages,
            "messages",
            input.messages.len(),
            "max_messages",
            limits.max_messages,
        ),
        (
            InputCode::ContentTooLarge,
            "bytes of message content",
            content_bytes(&input.messages),
            "max_content_bytes",
            limits.max_content_bytes,
        ),
        (
            InputCode::TooManyTools,
            "client tools",
            input.tools.len(),
            "max_tools",
            limits.max_tools,
        ),
        (
            InputCode::TooManyContextEntries,
            "context entries",
            input.context.len(),
            "max_context_entries",
            limits.max_context_entries,
        ),
        (
            InputCode::ContextTooLarge,
            "bytes of context",
            context_bytes,
            "max_context_bytes",
            limits.max_context_bytes,
        ),
        (
            InputCode::IdTooLong,
            "bytes in its longest id (threadId, runId, parentRunId)",
            ids(input).map(str::len).max().unwrap_or(0),
            "max_id_bytes",
            limits.max_id_bytes,
        ),
        (
            InputCode::IdTooLong,
            "bytes in its longest message id, tool-call id or toolCallId",
            message_ids(&input.messages)
                .map(str::len)
                .max()
                .unwrap_or(0),
            "max_id_bytes",
            limits.max_id_bytes,
        ),
        (
            InputCode::TooManyToolCalls,
            "tool calls in one message",
            input
                .messages
                .iter()
                .map(|message| match message {
                    Message::Assistant(m) => m.tool_calls.len(),
                    _ => 0,
                })
                .max()
                .unwrap_or(0),
            "max_tool_calls_per_message",
            limits.max_tool_calls_per_message,
        ),
        (
            InputCode::MetadataTooLarge,
            "bytes of message, tool-call and content-part metadata",
            metadata_bytes(&input.messages),
            "max_metadata_bytes",
            limits.max_metadata_bytes,
        ),
        (
            InputCode::ForwardedPropsTooLarge,
            "bytes of forwardedProps",
            input.forwarded_props.as_ref().map_or(0, json_len),
            "max_forwarded_props_bytes",
            limits.max_forwarded_props_bytes,
        ),
        (
            InputCode::TooManyResumeEntries,
            "resume entries",
            input.resume.len(),
            "max_resume_entries",
            limits.max_resume_entries,
        ),
        (
            InputCode::ResumeTooLarge,
            "bytes of resume interrupt ids and payloads",
            resume_bytes(input),
            "max_resume_bytes",
            limits.max_resume_bytes,
        ),
    ];
    match checks
        .into_iter()
        .find(|&(_, _, actual, _, limit)| actual > limit)
    {
        Some((code, what, actual, key, limit)) => Err(InputRefusal::new(
            code,
            format!(
                "the request has {actual} {what}, over this server's limit of {limit} \
                 (server.input_limits.{key})"
            ),
        )),
        None => check_ids(input),
    }
}

fn ids(input: &RunAgentInput) -> impl Iterator<Item = &str> {
    [&input.thread_id, &input.run_id, &input.parent_run_id]
        .into_iter()
        .filter_map(|id| id.as_deref())
}

/// Every message's id, its tool calls' ids, and a tool message's `toolCallId`.
fn message_ids(messages: &[Message]) -> impl Iterator<Item = &str> {
    messages.iter().flat_map(|message| {
        let (calls, answered): (&[ToolCall], _) = match message {
            Message::Assistant(m) => (&m.tool_calls, None),
            Message::Tool(m) => (&[], Some(m.tool_call_id.as_str())),
            _ => (&[], None),
        };
        std::iter::once(message.id())
            .chain(calls.iter().map(|call| call.id.as_str()))
            .chain(answered)
    })
}

/// Ids go on log lines as they are (the run's on every line, a tool call's on its span and on
/// history repairs): a control character (a newline) could forge one.
fn check_ids(input: &RunAgentInput) -> Result<(), InputRefusal> {
    let has_control = |id: &str| id.chars().any(char::is_control);
    let refuse = |which: &str| {
        Err(InputRefusal::new(
            InputCode::InvalidId,
            format!("{which} must not contain control characters"),
        ))
    };
    if ids(input).any(has_control) {
        return refuse("threadId, runId and parentRunId");
    }
    if message_ids(&input.messages).any(has_control) {
        return refuse("message ids, tool-call ids and toolCallId");
    }
    Ok(())
}

/// Bytes of `value` written as compact JSON, counted without building the text.
fn json_len(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 = self.0.saturating_add(bytes.len());
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Serializing a `Value` into a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Bytes of `metadata` as JSON across the messages, their tool calls and their content parts:
/// none of it reaches the model (so `content_bytes` leaves it out), all of it is stored with
/// the thread.
fn metadata_bytes(messages: &[Message]) -> usize {
    fn parts(content: &Content) -> usize {
        match content {
            Content::Text(_) => 0,
            Content::Parts(parts) => parts
                .iter()
                .map(|part| match part {
                    ContentPart::Text { metadata, .. } => metadata.as_ref().map_or(0, json_len),
                    ContentPart::Image(media)
                    | ContentPart::Audio(media)
                    | ContentPart::Video(media)
                    | ContentPart::Document(media) => media.metadata.as_ref().map_or(0, json_len),
                    ContentPart::Binary { .. } | ContentPart::Unknown => 0,
                })
                .fold(0, usize::saturating_add),
        }
    }
    messages
        .iter()
        .map(|message| {
            let own = message.metadata().map_or(0, json_len);
            let inner = match message {
                Message::Assistant(m) => m
                    .tool_calls
                    .iter()
                    .map(|call| call.metadata.as_ref().map_or(0, json_len))
                    .fold(0, usize::saturating_add),
                Message::User(m) => parts(&m.content),
                Message::Tool(m) => parts(&m.content),
                _ => 0,
            };
            own.saturating_add(inner)
        })
        .fold(0, usize::saturating_add)
}

fn resume_bytes(input: &RunAgentInput) -> usize {
    input
        .resume
        .iter()
        .map(|entry| {
            entry.interrupt_id.len()
                + entry
                    .payload
                    .as_ref()
                    .map_or(0, |payload| payload.to_string().len())
        })
        .fold(0, usize::saturating_add)
}

/// Bytes of text across the messages: what reaches the model's prompt. Media data is not
/// counted (the media limits bound it); activity messages never reach the model.
fn content_bytes(messages: &[Message]) -> usize {
    fn content(content: &Content) -> usize {
        match content {
            Content::Text(text) => text.len(),
            Content::Parts(parts) => parts
                .iter()
                .map(|part| match part {
                    ContentPart::Text { text, .. } => text.len(),
                    _ => 0,
                })
                .sum(),
        }
    }
    messages
        .iter()
        .map(|message| match message {
            Message::Developer(m) | Message::System(m) => m.content.len(),
            Message::Assistant(m) => {
                m.content.as_ref().map_or(0, String::len)
                    + m.tool_calls
                        .iter()
                        .map(|call| call.function.name.len() + call.function.arguments.len())
                        .sum::<usize>()
            }
            Message::User(m) => content(&m.content),
            Message::Tool(m) => content(&m.content) + m.error.as_ref().map_or(0, String::len),
            Message::Reasoning(m) => m.content.len(),
            Message::Activity(_) => 0,
        })
        .fold(0, usize::saturating_add)
}
