//! Streamed Messages events → [`LlmEvent`]s: `message_start` (input usage),
//! `content_block_start`/`_delta`/`_stop` (text, `tool_use` with `input_json_delta` fragments,
//! `thinking` with its `signature_delta`, `redacted_thinking`), `message_delta` (the stop reason
//! and output usage), `message_stop`, `ping`, and `error` frames mid-stream.
//!
//! Blocks are numbered by the API across kinds (text 0, tool 1, tool 2); tool calls get our
//! own per-reply sequence (0, 1, ...), as the chat-completions parser gives them, so a call's
//! fragments stay apart whatever is interleaved.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::REDACTED_PREFIX;
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
    index: Option<usize>,
    #[serde(default, borrow)]
    delta: Option<WireDelta<'a>>,
    #[serde(default)]
    content_block: Option<WireBlock>,
    #[serde(default)]
    message: Option<WireMessage>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct WireDelta<'a> {
    #[serde(rename = "type", default, borrow)]
    kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    partial_json: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    thinking: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    signature: Option<Cow<'a, str>>,
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireBlock {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    signature: Option<String>,
    #[serde(default)]
    data: Option<String>,
}

#[derive(Debug, Deserialize)]
struct WireMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

/// What the open blocks are, by the API's block index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    /// A tool call, with our sequence number.
    Tool(usize),
    Thinking,
    Other,
}

/// Parses one Messages reply.
#[derive(Debug, Default)]
pub(crate) struct MessagesParser {
    redactor: Redactor,
    /// The kind of each block by its index (indexes are small and dense).
    blocks: Vec<Block>,
    calls: usize,
    stop_reason: Option<FinishReason>,
    finished: bool,
    usage: Usage,
    saw_usage: bool,
}

impl MessagesParser {
    pub(crate) fn new(redactor: Redactor) -> Self {
        Self {
            redactor,
            ..Self::default()
        }
    }

    fn block(&self, index: Option<usize>) -> Block {
        index
            .and_then(|i| self.blocks.get(i).copied())
            .unwrap_or(Block::Other)
    }

    fn malformed(&self, what: &str, data: &str) -> LlmError {
        LlmError::Malformed {
            detail: format!(
                "{what}; payload: {}",
                self.redactor.log_prefix(data, DETAIL_MAX_CHARS)
            ),
        }
    }

    fn error_frame(&self, data: &str, error: Option<&Value>) -> LlmError {
        let message = error
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .and_then(|m| self.redactor.public_snippet(m));
        let code = error
            .and_then(|e| e.get("type"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        LlmError::Upstream {
            upstream_message: message,
            code,
            detail: self.redactor.log_prefix(data, DETAIL_MAX_CHARS),
        }
    }

    fn add_usage(&mut self, usage: &WireUsage) {
        self.saw_usage = true;
        // The API counts cached input apart; the total input is what every provider reports.
        let cached = usage.cache_read_input_tokens.unwrap_or(0);
        if let Some(input) = usage.input_tokens {
            self.usage.input_tokens = input
                .saturating_add(cached)
                .saturating_add(usage.cache_creation_input_tokens.unwrap_or(0));
            self.usage.cached_input_tokens = usage.cache_read_input_tokens;
        }
        if let Some(output) = usage.output_tokens {
            self.usage.output_tokens = output;
        }
    }

    fn block_start(&mut self, index: usize, block: WireBlock, out: &mut Vec<LlmEvent>) {
        let kind = match block.kind.as_str() {
            "text" => {
                if let Some(text) = block.text.filter(|t| !t.is_empty()) {
                    out.push(LlmEvent::TextDelta(text));
                }
                Block::Text
            }
            "tool_use" | "server_tool_use" => {
                let call = self.calls;
                self.calls += 1;
                // The API opens with `input: {}` and streams the input; anything else in the
                // opener is a whole input sent at once.
                let arguments = match block.input {
                    Some(Value::Object(input)) if !input.is_empty() => {
                        Value::Object(input).to_string()
                    }
                    _ => String::new(),
                };
                out.push(LlmEvent::ToolCallDelta {
                    index: call,
                    id: block.id.filter(|id| !id.is_empty()),
                    name: block.name,
                    arguments,
                });
                Block::Tool(call)
            }
            "thinking" => {
                if let Some(text) = block.thinking.filter(|t| !t.is_empty()) {
                    out.push(LlmEvent::ReasoningDelta(text));
                }
                if let Some(signature) = block.signature.filter(|s| !s.is_empty()) {
                    out.push(LlmEvent::ReasoningEncrypted(signature));
                }
                Block::Thinking
            }
            "redacted_thinking" => {
                if let Some(data) = block.data.filter(|d| !d.is_empty()) {
                    out.push(LlmEvent::ReasoningEncrypted(format!(
                        "{REDACTED_PREFIX}{data}"
                    )));
                }
                Block::Other
            }
            _ => Block::Other,
        };
        if self.blocks.len() <= index {
            // Bounded by the events themselves: each index is one block the server opened.
            self.blocks.resize(index + 1, Block::Other);
        }
        self.blocks[index] = kind;
    }

    fn block_delta(&self, index: Option<usize>, delta: WireDelta<'_>, out: &mut Vec<LlmEvent>) {
        let kind = delta.kind.as_deref().unwrap_or_default();
        match (self.block(index), kind) {
            (Block::Text, _) | (_, "text_delta") => {
                if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
                    out.push(LlmEvent::TextDelta(text.into_owned()));
                }
            }
            (Block::Tool(call), _) => {
                if let Some(json) = delta.partial_json.filter(|j| !j.is_empty()) {
                    out.push(LlmEvent::ToolCallDelta {
                        index: call,
                        id: None,
                        name: None,
                        arguments: json.into_owned(),
                    });
                }
            }
            (Block::Thinking, _) => {
                if let Some(text) = delta.thinking.filter(|t| !t.is_empty()) {
                    out.push(LlmEvent::ReasoningDelta(text.into_owned()));
                }
                if let Some(signature) = delta.signature.filter(|s| !s.is_empty()) {
                    out.push(LlmEvent::ReasoningEncrypted(signature.into_owned()));
                }
            }
            (Block::Other, _) => {}
        }
    }

    fn finish(&mut self, out: &mut Vec<LlmEvent>) {
        if self.finished {
            return;
        }
        self.finished = true;
        let reason = self.stop_reason.take().unwrap_or(if self.calls > 0 {
            FinishReason::ToolCalls
        } else {
            FinishReason::Stop
        });
        out.push(LlmEvent::Finished { reason });
        if self.saw_usage {
            out.push(LlmEvent::Usage(self.usage));
        }
    }
}

/// Maps a Messages `stop_reason`.
fn stop_reason(value: &str) -> FinishReason {
    match value {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        "max_tokens" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}

impl EventParser for MessagesParser {
    fn on_event(&mut self, event: &SseEvent, out: &mut Vec<LlmEvent>) -> Result<Flow, LlmError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        let wire: WireEvent<'_> = match serde_json::from_str(data) {
            Ok(wire) => wire,
            Err(_) if event.event.as_deref() == Some("error") => {
                return Err(self.error_frame(data, None))
            }
            Err(e) => return Err(self.malformed(&format!("not a Messages event: {e}"), data)),
        };
        match wire.kind.as_ref() {
            "message_start" => {
                if let Some(usage) = wire.message.and_then(|m| m.usage) {
                    self.add_usage(&usage);
                }
            }
            "content_block_start" => {
                let (Some(index), Some(block)) = (wire.index, wire.content_block) else {
                    return Err(self.malformed("a content_block_start without its block", data));
                };
                self.block_start(index, block, out);
            }
            "content_block_delta" => {
                if let Some(delta) = wire.delta {
                    self.block_delta(wire.index, delta, out);
                }
            }
            "message_delta" => {
                if let Some(reason) = wire.delta.and_then(|d| d.stop_reason) {
                    self.stop_reason = Some(stop_reason(&reason));
                }
                if let Some(usage) = &wire.usage {
                    self.add_usage(usage);
                }
            }
            "message_stop" => {
                self.finish(out);
                return Ok(Flow::Stop);
            }
            "error" => return Err(self.error_frame(data, wire.error.as_ref())),
            // `ping`, `content_block_stop`, and event types added later.
            _ => {}
        }
        Ok(Flow::Continue)
    }

    fn saw_finish(&self) -> bool {
        self.stop_reason.is_some() || self.finished
    }

    fn on_done(&mut self, out: &mut Vec<LlmEvent>) {
        self.finish(out);
    }
}
