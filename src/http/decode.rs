//! Request decoding: the body's bytes to a `RunAgentInput`, or the 4xx that refuses them.
//!
//! Before any handler, [`read_body_in_time`] refuses a POST that is not
//! `Content-Type: application/json` with 415 (a web page can send a cross-origin `text/plain`
//! POST without a preflight; a JSON one needs a preflight, which a server without CORS refuses,
//! so no page can start a run). That holds for a POST without a body too
//! (`/<agent>/runs/<runId>/stop`): a body-less POST is a "simple request" a page on any origin
//! may send, and could stop anyone's run. It then reads the whole body within
//! `server.body_read_timeout_secs` (408 `body_timeout` otherwise), so a client dribbling its body
//! cannot hold a connection and a task for ever. A JSON syntax error is 400 `invalid_json`, a
//! well-formed body of the wrong shape 422
//! `invalid_request`, a body over `server.body_limit_bytes` 413, and a valid input over one of
//! `server.input_limits` 422 with a code naming that limit; media parts are checked too
//! (`decode/media.rs`).
//!
//! The input limits are checked here, on the decoded input, rather than in `RunRequest`
//! construction or in the agents: they hold for every agent alike, they come before the run
//! takes a concurrency slot (a refused request never holds one), and before any middleware does
//! work in proportion to the input (state validation, history repair, prompt building).
//! `RunRequest::from` stays an infallible conversion. The body limit already bounds the parse
//! itself, and serde_json's recursion limit (128) bounds nesting, so decoding a hostile body is
//! linear in its size.
//!
//! [`decode_run_input`] is a pure function of the bytes, so the property test below
//! (`decode/tests.rs`) can feed it generated inputs by the thousand.

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{FromRequest, Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, Code};
use crate::protocol::{Content, ContentPart, Message, RunAgentInput, ToolCall};
use crate::settings::InputLimitSettings;

mod media;
pub use media::check_media;
#[cfg(test)]
mod tests;

/// The refusal of a body that could not even be read (too large, or a broken transfer).
pub(super) fn body_rejection(rejection: &BytesRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        ApiError::new(
            Code::PayloadTooLarge,
            "the request body is larger than server.body_limit_bytes",
        )
    } else {
        ApiError::new(Code::InvalidBody, rejection.body_text())
    }
}

/// How long a request's body may take to arrive (`server.body_read_timeout_secs`).
#[derive(Debug, Clone, Copy)]
pub(super) struct BodyReadTimeout(pub(super) Duration);

/// The middleware: the content-type check, then the whole body read within the timeout (and
/// within the body limit, which the layer outside this one set). The handler then reads the
/// body from memory.
pub(super) async fn read_body_in_time(
    State(BodyReadTimeout(timeout)): State<BodyReadTimeout>,
    request: Request,
    next: Next,
) -> Response {
    // Every POST, with or without a body: the content type is what makes a browser ask first.
    if request.method() == Method::POST {
        if let Err(refusal) = require_json(request.headers()) {
            return refusal.into_response();
        }
    }
    let (parts, body) = request.into_parts();
    let reading = Bytes::from_request(Request::from_parts(parts.clone(), body), &());
    let bytes = match tokio::time::timeout(timeout, reading).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(rejection)) => return body_rejection(&rejection).into_response(),
        Err(_elapsed) => {
            return ApiError::new(
                Code::BodyTimeout,
                format!(
                    "the request body did not arrive within {} s (server.body_read_timeout_secs)",
                    timeout.as_secs_f64()
                ),
            )
            .into_response()
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// A POST must be declared JSON: `application/json`, parameters (`charset=utf-8`) and letter
/// case aside; a stop without a body too.
fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok());
    let essence = declared
        .and_then(|value| value.split(';').next())
        .map(str::trim);
    if essence.is_some_and(|essence| essence.eq_ignore_ascii_case("application/json")) {
        return Ok(());
    }
    Err(ApiError::new(
        Code::UnsupportedMediaType,
        match declared {
            Some(declared) => format!(
                "POST with `Content-Type: application/json` (a RunAgentInput, or nothing to \
                 stop a run), not `{}`",
                declared.chars().take(64).collect::<String>()
            ),
            None => "POST with `Content-Type: application/json` (a RunAgentInput, or nothing \
                     to stop a run)"
                .to_owned(),
        },
    ))
}

/// Decodes a body and checks it against the input limits.
pub(super) fn decode_run_input(
    bytes: &[u8],
    limits: &InputLimitSettings,
) -> Result<RunAgentInput, ApiError> {
    let input: RunAgentInput = serde_json::from_slice(bytes).map_err(|error| {
        use serde_json::error::Category;
        match error.classify() {
            Category::Syntax | Category::Eof | Category::Io => ApiError::new(
                Code::InvalidJson,
                format!("the body is not valid JSON: {error}"),
            ),
            Category::Data => ApiError::new(
                Code::InvalidRequest,
                format!("the body is not a valid RunAgentInput: {error}"),
            ),
        }
    })?;
    check_input_limits(&input, limits)?;
    media::check_media(&input.messages, limits)?;
    Ok(input)
}

/// Refuses an input over one of `server.input_limits`, naming the limit (the first one
/// exceeded, in this order).
fn check_input_limits(input: &RunAgentInput, limits: &InputLimitSettings) -> Result<(), ApiError> {
    let context_bytes: usize = input
        .context
        .iter()
        .map(|entry| entry.description.len() + entry.value.len())
        .sum();
    // (code, what is counted, how many, the setting, its limit)
    let checks = [
        (
            Code::TooManyMessages,
            "messages",
            input.messages.len(),
            "max_messages",
            limits.max_messages,
        ),
        (
            Code::ContentTooLarge,
            "bytes of message content",
            content_bytes(&input.messages),
            "max_content_bytes",
            limits.max_content_bytes,
        ),
        (
            Code::TooManyTools,
            "client tools",
            input.tools.len(),
            "max_tools",
            limits.max_tools,
        ),
        (
            Code::TooManyContextEntries,
            "context entries",
            input.context.len(),
            "max_context_entries",
            limits.max_context_entries,
        ),
        (
            Code::ContextTooLarge,
            "bytes of context",
            context_bytes,
            "max_context_bytes",
            limits.max_context_bytes,
        ),
        (
            Code::IdTooLong,
            "bytes in its longest id (threadId, runId, parentRunId)",
            ids(input).map(str::len).max().unwrap_or(0),
            "max_id_bytes",
            limits.max_id_bytes,
        ),
        (
            Code::IdTooLong,
            "bytes in its longest message id, tool-call id or toolCallId",
            message_ids(&input.messages)
                .map(str::len)
                .max()
                .unwrap_or(0),
            "max_id_bytes",
            limits.max_id_bytes,
        ),
        (
            Code::TooManyToolCalls,
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
            Code::MetadataTooLarge,
            "bytes of message, tool-call and content-part metadata",
            metadata_bytes(&input.messages),
            "max_metadata_bytes",
            limits.max_metadata_bytes,
        ),
        (
            Code::ForwardedPropsTooLarge,
            "bytes of forwardedProps",
            input.forwarded_props.as_ref().map_or(0, json_len),
            "max_forwarded_props_bytes",
            limits.max_forwarded_props_bytes,
        ),
        (
            Code::TooManyResumeEntries,
            "resume entries",
            input.resume.len(),
            "max_resume_entries",
            limits.max_resume_entries,
        ),
        (
            Code::ResumeTooLarge,
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
        Some((code, what, actual, key, limit)) => Err(ApiError::new(
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
fn check_ids(input: &RunAgentInput) -> Result<(), ApiError> {
    let has_control = |id: &str| id.chars().any(char::is_control);
    let refuse = |which: &str| {
        Err(ApiError::new(
            Code::InvalidId,
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
