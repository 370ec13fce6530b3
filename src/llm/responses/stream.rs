//! Streamed Responses events → [`LlmEvent`]s: `response.output_item.added`/`.done` (messages,
//! function calls, reasoning items with their encrypted content),
//! `response.output_text.delta`, `response.refusal.delta`,
//! `response.function_call_arguments.delta`/`.done`, `response.reasoning_summary_text.delta`
//! and `response.reasoning_text.delta`, the terminal `response.completed`,
//! `response.incomplete` and `response.failed`, and `error` frames.
//!
//! Events name their item by `output_index`; function calls get our own per-reply sequence
//! (0, 1, ...) as the chat-completions parser gives them.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::seal;
use crate::llm::decoder::{EventParser, Flow};
use crate::llm::error::{LlmError, Redactor};
use crate::llm::sse::SseEvent;
use crate::llm::{FinishReason, LlmEvent, Usage};

/// How much of an offending payload goes into a log detail.
const DETAIL_MAX_CHARS: usize = 300;

#[derive(Debug, Deserialize)]
struct WireEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    output_index: Option<usize>,
    #[serde(default)]
    summary_index: Option<usize>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    item: Option<WireItem>,
    #[serde(default)]
    response: Option<WireResponse>,
    /// An `error` event's fields.
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireItem {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    call_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default)]
    encrypted_content: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireResponse {
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    incomplete_details: Option<WireIncomplete>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct WireIncomplete {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<WireDetails>,
    #[serde(default)]
    output_tokens_details: Option<WireDetails>,
}

#[derive(Debug, Deserialize)]
struct WireDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

/// A function call of this reply: where the API puts it, our sequence number, and whether
/// its arguments streamed (a server that sends only `.done` has them there).
#[derive(Debug)]
struct Call {
    output_index: usize,
    index: usize,
    streamed: bool,
}

/// Parses one Responses reply.
#[derive(Debug, Default)]
pub(crate) struct ResponsesParser {
    redactor: Redactor,
    calls: Vec<Call>,
    /// The summary part being streamed (a new one starts a new paragraph).
    summary_index: Option<(usize, usize)>,
    finished: bool,
}

impl ResponsesParser {
    pub(crate) fn new(redactor: Redactor) -> Self {
        Self {
            redactor,
            ..Self::default()
        }
    }

    fn call_mut(&mut self, output_index: Option<usize>) -> Option<&mut Call> {
        let at = output_index?;
        self.calls.iter_mut().find(|c| c.output_index == at)
    }

    fn upstream_error(&self, data: &str, code: Option<&Value>, message: Option<&str>) -> LlmError {
        LlmError::Upstream {
            upstream_message: message.and_then(|m| self.redactor.public_snippet(m)),
            code: code.and_then(|c| match c {
                Value::String(code) => Some(code.clone()),
                Value::Number(code) => Some(code.to_string()),
                _ => None,
            }),
            detail: self.redactor.log_prefix(data, DETAIL_MAX_CHARS),
        }
    }

    fn item_added(&mut self, output_index: Option<usize>, item: WireItem, out: &mut Vec<LlmEvent>) {
        if item.kind != "function_call" {
            return;
        }
        let index = self.calls.len();
        let arguments = item.arguments.unwrap_or_default();
        self.calls.push(Call {
            output_index: output_index.unwrap_or(usize::MAX - index),
            index,
            streamed: !arguments.is_empty(),
        });
        out.push(LlmEvent::ToolCallDelta {
            index,
            id: item.call_id.or(item.id).filter(|id| !id.is_empty()),
            name: item.name,
            arguments,
        });
    }

    fn item_done(&mut self, output_index: Option<usize>, item: WireItem, out: &mut Vec<LlmEvent>) {
        match item.kind.as_str() {
            "reasoning" => {
                if let (Some(id), Some(encrypted)) = (item.id, item.encrypted_content) {
                    if !encrypted.is_empty() {
                        out.push(LlmEvent::ReasoningEncrypted(seal(&id, &encrypted)));
                    }
                }
            }
            "function_call" => self.arguments_done(output_index, item.arguments, out),
            _ => {}
        }
    }

    /// The whole arguments, sent only when none streamed (else they would be doubled).
    fn arguments_done(
        &mut self,
        output_index: Option<usize>,
        arguments: Option<String>,
        out: &mut Vec<LlmEvent>,
    ) {
        let Some(call) = self.call_mut(output_index) else {
            return;
        };
        if call.streamed {
            return;
        }
        if let Some(arguments) = arguments.filter(|a| !a.is_empty()) {
            call.streamed = true;
            out.push(LlmEvent::ToolCallDelta {
                index: call.index,
                id: None,
                name: None,
                arguments,
            });
        }
    }

    fn finish(&mut self, reason: FinishReason, usage: Option<WireUsage>, out: &mut Vec<LlmEvent>) {
        if self.finished {
            return;
        }
        self.finished = true;
        out.push(LlmEvent::Finished { reason });
        if let Some(usage) = usage {
            out.push(LlmEvent::Usage(Usage {
                input_tokens: usage.input_tokens,
                output_tokens: usage.output_tokens,
                reasoning_tokens: usage.output_tokens_details.and_then(|d| d.reasoning_tokens),
                cached_input_tokens: usage.input_tokens_details.and_then(|d| d.cached_tokens),
            }));
        }
    }

    fn stop_reason(&self) -> FinishReason {
        if self.calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        }
    }
}

impl EventParser for ResponsesParser {
    fn on_event(&mut self, event: &SseEvent, out: &mut Vec<LlmEvent>) -> Result<Flow, LlmError> {
        let data = event.data.trim();
        if data.is_empty() || data == "[DONE]" {
            return Ok(Flow::Continue);
        }
        let wire: WireEvent<'_> = serde_json::from_str(data).map_err(|e| LlmError::Malformed {
            detail: format!(
                "not a Responses event: {e}; payload: {}",
                self.redactor.log_prefix(data, DETAIL_MAX_CHARS)
            ),
        })?;
        match wire.kind.as_ref() {
            "response.output_text.delta" | "response.refusal.delta" => {
                if let Some(delta) = wire.delta.filter(|d| !d.is_empty()) {
                    out.push(LlmEvent::TextDelta(delta.into_owned()));
                }
            }
            "response.function_call_arguments.delta" => {
                let delta = wire.delta.filter(|d| !d.is_empty());
                if let (Some(call), Some(delta)) = (self.call_mut(wire.output_index), delta) {
                    call.streamed = true;
                    let index = call.index;
                    out.push(LlmEvent::ToolCallDelta {
                        index,
                        id: None,
                        name: None,
                        arguments: delta.into_owned(),
                    });
                }
            }
            "response.function_call_arguments.done" => {
                self.arguments_done(wire.output_index, wire.arguments, out);
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                if let Some(delta) = wire.delta.filter(|d| !d.is_empty()) {
                    // A new summary part of the same item is a new paragraph.
                    let part = (
                        wire.output_index.unwrap_or(0),
                        wire.summary_index.unwrap_or(0),
                    );
                    if self
                        .summary_index
                        .is_some_and(|(item, at)| item == part.0 && at != part.1)
                    {
                        out.push(LlmEvent::ReasoningDelta("\n\n".to_owned()));
                    }
                    self.summary_index = Some(part);
                    out.push(LlmEvent::ReasoningDelta(delta.into_owned()));
                }
            }
            "response.output_item.added" => {
                if let Some(item) = wire.item {
                    self.item_added(wire.output_index, item, out);
                }
            }
            "response.output_item.done" => {
                if let Some(item) = wire.item {
                    self.item_done(wire.output_index, item, out);
                }
            }
            "response.completed" => {
                let usage = wire.response.and_then(|r| r.usage);
                let reason = self.stop_reason();
                self.finish(reason, usage, out);
                return Ok(Flow::Stop);
            }
            "response.incomplete" => {
                let response = wire.response.unwrap_or_default();
                let reason = match response
                    .incomplete_details
                    .and_then(|d| d.reason)
                    .as_deref()
                {
                    // No reason given: the one limit every response has.
                    Some("max_output_tokens") | None => FinishReason::Length,
                    Some("content_filter") => FinishReason::ContentFilter,
                    Some(other) => FinishReason::Other(other.to_owned()),
                };
                self.finish(reason, response.usage, out);
                return Ok(Flow::Stop);
            }
            "response.failed" => {
                let error = wire.response.and_then(|r| r.error);
                let field = |name: &str| error.as_ref().and_then(|e| e.get(name)).cloned();
                let message = field("message");
                return Err(self.upstream_error(
                    data,
                    field("code").as_ref(),
                    message.as_ref().and_then(Value::as_str),
                ));
            }
            "error" => {
                return Err(self.upstream_error(data, wire.code.as_ref(), wire.message.as_deref()))
            }
            // `response.created`, `.in_progress`, content parts, `.done` events of text, and
            // event types added later.
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn saw_finish(&self) -> bool {
        self.finished
    }

    fn on_done(&mut self, out: &mut Vec<LlmEvent>) {
        let reason = self.stop_reason();
        self.finish(reason, None, out);
    }
}
