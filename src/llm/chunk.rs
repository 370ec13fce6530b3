//! Streamed chat-completion chunks → [`LlmEvent`]s, tolerant of what real servers send.
//!
//! [`StreamDecoder`] is a pure state machine (bytes in, events out, no I/O, no clock), so every
//! server quirk is unit-tested from raw SSE bytes. The quirks it absorbs:
//! - chunks whose `choices` is empty, absent or null (Azure's `prompt_filter_results` chunk,
//!   the final usage chunk), and `delta.content: null`;
//! - reasoning in `delta.reasoning_content` (DeepSeek, vLLM) or `delta.reasoning` (OpenRouter,
//!   Ollama);
//! - tool calls whose `id`/`name` are repeated in every chunk, sent whole in one chunk,
//!   interleaved by `index`, or all given `index` 0 (or none) with a distinct `id` per call;
//! - error objects sent as a frame mid-stream (`{"error":{...}}`, vLLM's `{"object":"error"}`,
//!   `event: error`), after which the stream ends;
//! - a body that ends after a `finish_reason` without `[DONE]`.
//!
//! A stream that reaches `[DONE]` without a single choice is not tolerated: it is
//! `upstream_malformed`, not an empty answer.
//!
//! The wire structs below are our own rather than async-openai's stream types, which reject or
//! drop several of these (unknown fields are ignored; a field of an unexpected type reads as
//! absent instead of failing the whole chunk).

use std::collections::HashMap;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::error::{LlmError, Redactor};
use super::sse::{SseDecoder, SseEvent};
use super::{FinishReason, LlmEvent, Usage};

/// How much of an offending payload goes into a log detail.
const DETAIL_MAX_CHARS: usize = 300;

/// Deserializes a field leniently: `null`, absence or a value of the wrong type all give `None`.
fn lenient<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned,
{
    let value = Option::<Value>::deserialize(deserializer)?;
    Ok(value.and_then(|v| serde_json::from_value(v).ok()))
}

#[derive(Debug, Default, Deserialize)]
struct WireChunk {
    #[serde(default, deserialize_with = "lenient")]
    choices: Option<Vec<WireChoice>>,
    #[serde(default, deserialize_with = "lenient")]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
    /// vLLM sends errors as `{"object":"error","message":...,"code":...}`.
    #[serde(default, deserialize_with = "lenient")]
    object: Option<String>,
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    code: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct WireChoice {
    #[serde(default, deserialize_with = "lenient")]
    index: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    delta: Option<WireDelta>,
    /// A non-streaming response (a server that ignored `stream: true`) has `message`, with the
    /// same shape as a delta.
    #[serde(default, deserialize_with = "lenient")]
    message: Option<WireDelta>,
    #[serde(default, deserialize_with = "lenient")]
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireDelta {
    /// A string, null, or (Mistral and a few others) an array of content parts.
    #[serde(default)]
    content: Option<Value>,
    #[serde(default, deserialize_with = "lenient")]
    reasoning_content: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    reasoning: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    refusal: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    tool_calls: Option<Vec<WireToolCall>>,
    /// The legacy single function call.
    #[serde(default, deserialize_with = "lenient")]
    function_call: Option<WireFunction>,
}

#[derive(Debug, Default, Deserialize)]
struct WireToolCall {
    #[serde(default, deserialize_with = "lenient")]
    index: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    function: Option<WireFunction>,
}

#[derive(Debug, Default, Deserialize)]
struct WireFunction {
    #[serde(default, deserialize_with = "lenient")]
    name: Option<String>,
    /// A JSON string per the spec; a few servers send the arguments as an object.
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct WireUsage {
    #[serde(default, deserialize_with = "lenient")]
    prompt_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    completion_tokens: Option<u64>,
    #[serde(default, deserialize_with = "lenient")]
    completion_tokens_details: Option<WireCompletionDetails>,
    #[serde(default, deserialize_with = "lenient")]
    prompt_tokens_details: Option<WirePromptDetails>,
}

#[derive(Debug, Default, Deserialize)]
struct WireCompletionDetails {
    #[serde(default, deserialize_with = "lenient")]
    reasoning_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct WirePromptDetails {
    #[serde(default, deserialize_with = "lenient")]
    cached_tokens: Option<u64>,
}

impl WireUsage {
    fn to_usage(&self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0),
            output_tokens: self.completion_tokens.unwrap_or(0),
            reasoning_tokens: self
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens),
            cached_input_tokens: self
                .prompt_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens),
        }
    }
}

/// One tool call seen in this completion, at our normalized index (its position in the list).
#[derive(Debug, Default)]
struct CallSlot {
    id_sent: bool,
    /// Whether the id came from the server (a made-up id may be followed by a late real one).
    server_id: bool,
    name: Option<String>,
}

/// Maps the server's tool-call fragments onto our normalized per-call indices.
#[derive(Debug, Default)]
struct ToolCalls {
    slots: Vec<CallSlot>,
    /// The server's `index` → the call it currently designates. Rebound when a server reuses an
    /// index for a new call (a new id at the same index).
    by_wire_index: HashMap<u64, usize>,
    by_id: HashMap<String, usize>,
}

struct Fragment {
    index: Option<u64>,
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

impl ToolCalls {
    fn on_fragment(&mut self, fragment: Fragment, out: &mut Vec<LlmEvent>) {
        let Fragment {
            index,
            id,
            name,
            arguments,
        } = fragment;
        // Some servers send `"id": ""` or `"name": ""` in continuation chunks.
        let id = id.filter(|s| !s.is_empty());
        let name = name.filter(|s| !s.is_empty());

        let known = id.as_ref().and_then(|id| self.by_id.get(id).copied());
        let target = match known {
            Some(slot) => Some(slot),
            None => {
                let candidate = match index {
                    Some(i) => self.by_wire_index.get(&i).copied(),
                    // No index: a continuation of the latest call, if any.
                    None => self.slots.len().checked_sub(1),
                };
                candidate
                    .filter(|&slot| !self.starts_new_call(slot, id.as_deref(), name.as_deref()))
            }
        };
        let is_new = target.is_none();
        let slot_index = match target {
            Some(slot) => slot,
            None => {
                self.slots.push(CallSlot::default());
                self.slots.len() - 1
            }
        };
        if let Some(i) = index {
            self.by_wire_index.insert(i, slot_index);
        }
        if let Some(id) = &id {
            self.by_id.entry(id.clone()).or_insert(slot_index);
        }
        let Some(slot) = self.slots.get_mut(slot_index) else {
            return; // unreachable: the slot was found or just pushed
        };

        let mut emit_id = None;
        if !slot.id_sent {
            slot.id_sent = true;
            slot.server_id = id.is_some();
            // The agent needs an id to pair the result with the call; make one up if the server
            // sent none (older Ollama, some llama.cpp builds).
            emit_id = Some(id.unwrap_or_else(|| crate::text::new_id("call")));
        } else if id.is_some() {
            // A late real id for a call whose id we made up: keep ours, the agent already has it.
            slot.server_id = true;
        }
        let mut emit_name = None;
        if slot.name.is_none() {
            if let Some(name) = name {
                slot.name = Some(name.clone());
                emit_name = Some(name);
            }
        }
        if is_new || emit_id.is_some() || emit_name.is_some() || !arguments.is_empty() {
            out.push(LlmEvent::ToolCallDelta {
                index: slot_index,
                id: emit_id,
                name: emit_name,
                arguments,
            });
        }
    }

    /// Whether a fragment aimed at `slot` is in fact the start of another call: it carries a
    /// different server id (servers that give every call index 0), or a different name.
    fn starts_new_call(&self, slot: usize, id: Option<&str>, name: Option<&str>) -> bool {
        let Some(existing) = self.slots.get(slot) else {
            return true;
        };
        // A known id would have matched `by_id`, so any id here differs from the slot's.
        let other_id = id.is_some() && existing.server_id;
        let other_name =
            matches!((name, existing.name.as_deref()), (Some(new), Some(old)) if new != old);
        other_id || other_name
    }
}

/// What the caller should do after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    /// `[DONE]` or an error: stop reading the body.
    Stop,
}

/// Parses SSE events (or a whole JSON body) into [`LlmEvent`]s.
#[derive(Debug, Default)]
pub(crate) struct ChunkParser {
    redactor: Redactor,
    calls: ToolCalls,
    /// The choice we follow; others (a server ignoring `n: 1`) are ignored.
    choice_index: Option<u64>,
    finish_sent: bool,
    usage: Option<Usage>,
}

/// Why `[DONE]` after chunks that never carried a choice is an error: every chat completion
/// has one, so this is a server or proxy that answered something else (or filtered the whole
/// reply away), and ending the run as if the model had nothing to say would hide it.
const NO_CHOICES: &str = "the reply ended with [DONE] without a single choice";

impl ChunkParser {
    pub(crate) fn new(redactor: Redactor) -> Self {
        Self {
            redactor,
            ..Self::default()
        }
    }

    /// Whether a `finish_reason` has been seen: the reply is complete even without `[DONE]`.
    pub(crate) fn saw_finish(&self) -> bool {
        self.finish_sent
    }

    pub(crate) fn on_event(
        &mut self,
        event: &SseEvent,
        out: &mut Vec<LlmEvent>,
    ) -> Result<Flow, LlmError> {
        let data = event.data.trim();
        if event.event.as_deref() == Some("error") {
            return Err(self.error_frame(data));
        }
        if data == "[DONE]" {
            if self.choice_index.is_none() {
                return Err(LlmError::Malformed {
                    detail: NO_CHOICES.to_owned(),
                });
            }
            self.on_done(out);
            return Ok(Flow::Stop);
        }
        if data.is_empty() {
            return Ok(Flow::Continue);
        }
        match parse_object(data) {
            Ok(chunk) => self.on_chunk(chunk, data, out),
            Err(first_error) => {
                // A server that forgets the blank line between events makes one event of several
                // `data:` lines, each a whole chunk (or `[DONE]`). Accept that when every line is
                // one; otherwise the payload is malformed.
                let lines: Vec<&str> = data
                    .lines()
                    .map(str::trim)
                    .filter(|line| !line.is_empty())
                    .collect();
                let all_chunks = lines.len() > 1
                    && lines
                        .iter()
                        .all(|line| *line == "[DONE]" || parse_object(line).is_ok());
                if !all_chunks {
                    return Err(LlmError::Malformed {
                        detail: format!(
                            "{first_error}; payload: {}",
                            self.redactor.log_prefix(data, DETAIL_MAX_CHARS)
                        ),
                    });
                }
                for line in lines {
                    let single = SseEvent {
                        event: None,
                        data: line.to_owned(),
                    };
                    if self.on_event(&single, out)? == Flow::Stop {
                        return Ok(Flow::Stop);
                    }
                }
                Ok(Flow::Continue)
            }
        }
    }

    /// A whole non-streaming JSON body (a server that ignored `stream: true`, or a proxy that
    /// answered 200 with an error object).
    pub(crate) fn on_json_body(
        &mut self,
        body: &[u8],
        out: &mut Vec<LlmEvent>,
    ) -> Result<(), LlmError> {
        let text = String::from_utf8_lossy(body);
        let chunk = parse_object(text.trim()).map_err(|e| LlmError::Malformed {
            detail: format!(
                "{e}; body: {}",
                self.redactor.log_prefix(&text, DETAIL_MAX_CHARS)
            ),
        })?;
        self.on_chunk(chunk, &text, out)?;
        if self.finish_sent {
            self.on_done(out);
            Ok(())
        } else {
            Err(LlmError::Malformed {
                detail: format!(
                    "a JSON body with no finish_reason: {}",
                    self.redactor.log_prefix(&text, DETAIL_MAX_CHARS)
                ),
            })
        }
    }

    /// `[DONE]`, or the body ended after a `finish_reason`: emits a `Finished` if none was sent
    /// yet (a server may send `[DONE]` without any `finish_reason`), then the usage.
    pub(crate) fn on_done(&mut self, out: &mut Vec<LlmEvent>) {
        if !self.finish_sent {
            self.finish_sent = true;
            let reason = if self.calls.slots.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            };
            out.push(LlmEvent::Finished { reason });
        }
        if let Some(usage) = self.usage.take() {
            out.push(LlmEvent::Usage(usage));
        }
    }

    fn on_chunk(
        &mut self,
        chunk: WireChunk,
        raw: &str,
        out: &mut Vec<LlmEvent>,
    ) -> Result<Flow, LlmError> {
        if chunk.error.as_ref().is_some_and(|e| !e.is_null())
            || chunk.object.as_deref() == Some("error")
        {
            return Err(self.error_from_chunk(&chunk, raw));
        }
        for choice in chunk.choices.unwrap_or_default() {
            let index = choice.index.unwrap_or(0);
            if *self.choice_index.get_or_insert(index) != index {
                continue;
            }
            if let Some(delta) = choice.delta.or(choice.message) {
                self.on_delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                // Some servers repeat the finish reason (e.g. on the usage chunk): one is enough.
                if !self.finish_sent {
                    self.finish_sent = true;
                    out.push(LlmEvent::Finished {
                        reason: FinishReason::from_wire(&reason),
                    });
                }
            }
        }
        // Held until the end: some servers send a cumulative usage on every chunk, and the agent
        // must count one per completion.
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.to_usage());
        }
        Ok(Flow::Continue)
    }

    fn on_delta(&mut self, delta: WireDelta, out: &mut Vec<LlmEvent>) {
        // Servers that send both fields send the same text in each: take one.
        let reasoning = delta
            .reasoning_content
            .filter(|r| !r.is_empty())
            .or(delta.reasoning.filter(|r| !r.is_empty()));
        if let Some(reasoning) = reasoning {
            out.push(LlmEvent::ReasoningDelta(reasoning));
        }
        if let Some(text) = delta.content.as_ref().and_then(content_text) {
            out.push(LlmEvent::TextDelta(text));
        }
        if let Some(refusal) = delta.refusal.filter(|r| !r.is_empty()) {
            out.push(LlmEvent::TextDelta(refusal));
        }
        for call in delta.tool_calls.unwrap_or_default() {
            let function = call.function.unwrap_or_default();
            self.calls.on_fragment(
                Fragment {
                    index: call.index,
                    id: call.id,
                    name: function.name,
                    arguments: arguments_text(function.arguments),
                },
                out,
            );
        }
        if let Some(function) = delta.function_call {
            self.calls.on_fragment(
                Fragment {
                    index: None,
                    id: None,
                    name: function.name,
                    arguments: arguments_text(function.arguments),
                },
                out,
            );
        }
    }

    fn error_from_chunk(&self, chunk: &WireChunk, raw: &str) -> LlmError {
        let (message, code) = match &chunk.error {
            Some(Value::String(message)) => (Some(message.clone()), None),
            Some(Value::Object(error)) => (
                error
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                error
                    .get("code")
                    .and_then(scalar_text)
                    .or_else(|| error.get("type").and_then(scalar_text)),
            ),
            // vLLM style: the error fields are at the top level.
            _ => (
                chunk
                    .message
                    .as_ref()
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                chunk.code.as_ref().and_then(scalar_text),
            ),
        };
        LlmError::Upstream {
            upstream_message: message.and_then(|m| self.redactor.public_snippet(&m)),
            code: code.map(|c| self.redactor.log_prefix(&c, 64)),
            detail: self.redactor.log_prefix(raw, DETAIL_MAX_CHARS),
        }
    }

    /// An `event: error` frame, whose data may be JSON or plain text.
    fn error_frame(&self, data: &str) -> LlmError {
        match parse_object(data) {
            Ok(chunk) if chunk.error.is_some() || chunk.message.is_some() => {
                self.error_from_chunk(&chunk, data)
            }
            _ => LlmError::Upstream {
                upstream_message: self.redactor.public_snippet(data),
                code: None,
                detail: self.redactor.log_prefix(data, DETAIL_MAX_CHARS),
            },
        }
    }
}

/// A payload must be a JSON object to be a chunk (`[]` or `42` would otherwise deserialize
/// into an empty struct and be silently ignored).
///
/// Almost every chunk has the types the spec gives, so it is first read straight from the text
/// into typed structs, once. Only when that fails (a field of an unexpected type, content as
/// parts, arguments as an object, or not JSON at all) is it read again, leniently, through a
/// `Value`: that path allocates a tree and costs several times more per chunk.
fn parse_object(data: &str) -> Result<WireChunk, String> {
    if data.trim_start().starts_with('{') {
        if let Ok(chunk) = serde_json::from_str::<fast::Chunk>(data) {
            return Ok(chunk.into());
        }
    }
    match serde_json::from_str::<Value>(data) {
        Ok(value @ Value::Object(_)) => {
            WireChunk::deserialize(value).map_err(|e| format!("not a chunk: {e}"))
        }
        Ok(_) => Err("not a JSON object".to_owned()),
        Err(e) => Err(format!("invalid JSON: {e}")),
    }
}

fn content_text(content: &Value) -> Option<String> {
    let text = match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter(|part| {
                part.get("type")
                    .and_then(Value::as_str)
                    .is_none_or(|t| t == "text")
            })
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    };
    (!text.is_empty()).then_some(text)
}

fn arguments_text(arguments: Option<Value>) -> String {
    match arguments {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text,
        Some(other) => other.to_string(),
    }
}

fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Bytes of an SSE body in, events out: [`SseDecoder`] + [`ChunkParser`], with the end-of-body
/// rules. After it yields an `Err` it yields nothing more.
#[derive(Debug)]
pub(crate) struct StreamDecoder {
    sse: SseDecoder,
    parser: ChunkParser,
    ended: bool,
    events: Vec<SseEvent>,
    produced: Vec<LlmEvent>,
}

impl StreamDecoder {
    pub(crate) fn new(redactor: Redactor) -> Self {
        Self {
            sse: SseDecoder::new(),
            parser: ChunkParser::new(redactor),
            ended: false,
            events: Vec::new(),
            produced: Vec::new(),
        }
    }

    /// True once `[DONE]`, an error or the end of the body was handled.
    pub(crate) fn is_ended(&self) -> bool {
        self.ended
    }

    pub(crate) fn saw_finish(&self) -> bool {
        self.parser.saw_finish()
    }

    /// Decodes a body fragment, appending the resulting items to `out`.
    pub(crate) fn feed(&mut self, bytes: &[u8], out: &mut Vec<Result<LlmEvent, LlmError>>) {
        if self.ended {
            return;
        }
        if self.sse.feed(bytes, &mut self.events).is_err() {
            self.fail(
                LlmError::Malformed {
                    detail: "an SSE event larger than 8 MiB".to_owned(),
                },
                out,
            );
            return;
        }
        self.drain_events(out);
    }

    /// The body ended: normally (`cause` is `None`) or broken (`cause` says how). Without
    /// `[DONE]` the reply counts as complete only if a `finish_reason` was seen; otherwise it
    /// was cut (`upstream_stream_cut`).
    pub(crate) fn end_with(
        &mut self,
        cause: Option<String>,
        out: &mut Vec<Result<LlmEvent, LlmError>>,
    ) {
        if self.ended {
            return;
        }
        self.sse.finish(&mut self.events);
        self.drain_events(out);
        if self.ended {
            return;
        }
        self.ended = true;
        if self.parser.saw_finish() {
            self.parser.on_done(&mut self.produced);
            out.extend(self.produced.drain(..).map(Ok));
        } else {
            out.push(Err(LlmError::StreamCut {
                detail: cause.unwrap_or_else(|| {
                    "the body ended with neither a finish_reason nor [DONE]".to_owned()
                }),
            }));
        }
    }

    fn drain_events(&mut self, out: &mut Vec<Result<LlmEvent, LlmError>>) {
        let events = std::mem::take(&mut self.events);
        for event in &events {
            let flow = self.parser.on_event(event, &mut self.produced);
            out.extend(self.produced.drain(..).map(Ok));
            match flow {
                Ok(Flow::Continue) => {}
                Ok(Flow::Stop) => {
                    self.ended = true;
                    return;
                }
                Err(error) => {
                    self.fail(error, out);
                    return;
                }
            }
        }
    }

    fn fail(&mut self, error: LlmError, out: &mut Vec<Result<LlmEvent, LlmError>>) {
        self.ended = true;
        out.push(Err(error));
    }
}

/// The typed fast path of [`parse_object`]: the spec's types, no leniency, unknown fields
/// ignored. Any surprise makes the whole parse fail, and the lenient path takes over.
mod fast {
    use serde::Deserialize;
    use serde_json::Value;

    use super::{
        WireChoice, WireChunk, WireCompletionDetails, WireDelta, WireFunction, WirePromptDetails,
        WireToolCall, WireUsage,
    };

    #[derive(Deserialize)]
    pub(super) struct Chunk {
        #[serde(default)]
        choices: Option<Vec<Choice>>,
        #[serde(default)]
        usage: Option<Usage>,
        #[serde(default)]
        error: Option<Value>,
        #[serde(default)]
        object: Option<String>,
        #[serde(default)]
        message: Option<Value>,
        #[serde(default)]
        code: Option<Value>,
    }

    #[derive(Deserialize)]
    struct Choice {
        #[serde(default)]
        index: Option<u64>,
        #[serde(default)]
        delta: Option<Delta>,
        /// Boxed: only a non-streaming reply has it, and serde moves every choice a few times
        /// while building it, so a smaller `Choice` is a cheaper one.
        #[serde(default)]
        message: Option<Box<Delta>>,
        #[serde(default)]
        finish_reason: Option<String>,
    }

    #[derive(Deserialize)]
    struct Delta {
        #[serde(default)]
        content: Option<String>,
        #[serde(default)]
        reasoning_content: Option<String>,
        #[serde(default)]
        reasoning: Option<String>,
        #[serde(default)]
        refusal: Option<String>,
        #[serde(default)]
        tool_calls: Option<Vec<ToolCall>>,
        #[serde(default)]
        function_call: Option<Function>,
    }

    #[derive(Deserialize)]
    struct ToolCall {
        #[serde(default)]
        index: Option<u64>,
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        function: Option<Function>,
    }

    #[derive(Deserialize)]
    struct Function {
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        arguments: Option<String>,
    }

    #[derive(Deserialize)]
    struct Usage {
        #[serde(default)]
        prompt_tokens: Option<u64>,
        #[serde(default)]
        completion_tokens: Option<u64>,
        #[serde(default)]
        completion_tokens_details: Option<CompletionDetails>,
        #[serde(default)]
        prompt_tokens_details: Option<PromptDetails>,
    }

    #[derive(Deserialize)]
    struct CompletionDetails {
        #[serde(default)]
        reasoning_tokens: Option<u64>,
    }

    #[derive(Deserialize)]
    struct PromptDetails {
        #[serde(default)]
        cached_tokens: Option<u64>,
    }

    impl From<Chunk> for WireChunk {
        fn from(chunk: Chunk) -> Self {
            WireChunk {
                choices: chunk
                    .choices
                    .map(|choices| choices.into_iter().map(Into::into).collect()),
                usage: chunk.usage.map(Into::into),
                error: chunk.error,
                object: chunk.object,
                message: chunk.message,
                code: chunk.code,
            }
        }
    }

    impl From<Choice> for WireChoice {
        fn from(choice: Choice) -> Self {
            WireChoice {
                index: choice.index,
                delta: choice.delta.map(Into::into),
                message: choice.message.map(|message| (*message).into()),
                finish_reason: choice.finish_reason,
            }
        }
    }

    impl From<Delta> for WireDelta {
        fn from(delta: Delta) -> Self {
            WireDelta {
                content: delta.content.map(Value::String),
                reasoning_content: delta.reasoning_content,
                reasoning: delta.reasoning,
                refusal: delta.refusal,
                tool_calls: delta
                    .tool_calls
                    .map(|calls| calls.into_iter().map(Into::into).collect()),
                function_call: delta.function_call.map(Into::into),
            }
        }
    }

    impl From<ToolCall> for WireToolCall {
        fn from(call: ToolCall) -> Self {
            WireToolCall {
                index: call.index,
                id: call.id,
                function: call.function.map(Into::into),
            }
        }
    }

    impl From<Function> for WireFunction {
        fn from(function: Function) -> Self {
            WireFunction {
                name: function.name,
                arguments: function.arguments.map(Value::String),
            }
        }
    }

    impl From<Usage> for WireUsage {
        fn from(usage: Usage) -> Self {
            WireUsage {
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
                completion_tokens_details: usage.completion_tokens_details.map(|d| {
                    WireCompletionDetails {
                        reasoning_tokens: d.reasoning_tokens,
                    }
                }),
                prompt_tokens_details: usage.prompt_tokens_details.map(|d| WirePromptDetails {
                    cached_tokens: d.cached_tokens,
                }),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(fragments: &[&[u8]]) -> Vec<Result<LlmEvent, LlmError>> {
        let mut decoder = StreamDecoder::new(Redactor::new(["sk-live-secret".to_owned()]));
        let mut out = Vec::new();
        for fragment in fragments {
            decoder.feed(fragment, &mut out);
        }
        decoder.end_with(None, &mut out);
        out
    }

    fn run_str(body: &str) -> Vec<Result<LlmEvent, LlmError>> {
        run(&[body.as_bytes()])
    }

    fn ok(events: Vec<Result<LlmEvent, LlmError>>) -> Vec<LlmEvent> {
        events
            .into_iter()
            .map(|e| e.expect("no error expected"))
            .collect()
    }

    fn text(s: &str) -> LlmEvent {
        LlmEvent::TextDelta(s.to_owned())
    }

    fn finished(reason: FinishReason) -> LlmEvent {
        LlmEvent::Finished { reason }
    }

    fn call(index: usize, id: Option<&str>, name: Option<&str>, arguments: &str) -> LlmEvent {
        LlmEvent::ToolCallDelta {
            index,
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            arguments: arguments.to_owned(),
        }
    }

    /// All tool-call arguments concatenated per normalized index.
    fn arguments_by_index(events: &[LlmEvent]) -> Vec<String> {
        let mut by_index: Vec<String> = Vec::new();
        for event in events {
            if let LlmEvent::ToolCallDelta {
                index, arguments, ..
            } = event
            {
                if by_index.len() <= *index {
                    by_index.resize(index + 1, String::new());
                }
                by_index[*index].push_str(arguments);
            }
        }
        by_index
    }

    #[test]
    fn plain_text_stream() {
        let events = ok(run_str(concat!(
            "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":null}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        )));
        assert_eq!(
            events,
            vec![text("Hel"), text("lo"), finished(FinishReason::Stop)]
        );
    }

    /// (a) Azure's first chunk: empty `choices`, `prompt_filter_results`; and `content_filter_results`.
    #[test]
    fn azure_prompt_filter_chunk_is_ignored() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}}}]}\n\n",
            "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{\"content\":\"Hi\",\"role\":\"assistant\"},\"finish_reason\":null,\"index\":0,\"logprobs\":null}],\"created\":1,\"id\":\"x\",\"model\":\"gpt-4o\",\"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"fp\"}\n\n",
            "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{},\"finish_reason\":\"stop\",\"index\":0}],\"id\":\"x\",\"object\":\"chat.completion.chunk\"}\n\n",
            "data: [DONE]\n\n",
        )));
        assert_eq!(events, vec![text("Hi"), finished(FinishReason::Stop)]);
    }

    /// (b) The usage chunk has empty `choices`; usage comes last, after `Finished`.
    #[test]
    fn usage_chunk_with_empty_choices() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":null}],\"usage\":null}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,\"total_tokens\":15,",
            "\"prompt_tokens_details\":{\"cached_tokens\":8,\"audio_tokens\":0},",
            "\"completion_tokens_details\":{\"reasoning_tokens\":2,\"audio_tokens\":0}}}\n\n",
            "data: [DONE]\n\n",
        )));
        assert_eq!(
            events,
            vec![
                text("ok"),
                finished(FinishReason::Stop),
                LlmEvent::Usage(Usage {
                    input_tokens: 12,
                    output_tokens: 3,
                    reasoning_tokens: Some(2),
                    cached_input_tokens: Some(8),
                }),
            ]
        );
    }

    #[test]
    fn usage_repeated_on_every_chunk_is_reported_once() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n",
        )));
        assert_eq!(
            events,
            vec![
                text("a"),
                text("b"),
                finished(FinishReason::Stop),
                LlmEvent::Usage(Usage {
                    input_tokens: 5,
                    output_tokens: 2,
                    ..Usage::default()
                }),
            ]
        );
    }

    /// (c) `id` and `name` repeated in every chunk (some vLLM/LiteLLM versions): emitted once.
    #[test]
    fn repeated_id_and_name_are_emitted_once() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\":\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\\\"Paris\\\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n",
        )));
        assert_eq!(
            events,
            vec![
                call(0, Some("call_1"), Some("get_weather"), ""),
                call(0, None, None, "{\"location\":"),
                call(0, None, None, "\"Paris\"}"),
                finished(FinishReason::ToolCalls),
            ]
        );
    }

    /// (d) Whole arguments in one chunk (Gemini, Ollama), without an index.
    #[test]
    fn whole_call_in_one_chunk() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[",
            "{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\":\\\"Paris\\\"}\"}},",
            "{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":{\"tz\":\"UTC\"}}}",
            "]},\"finish_reason\":\"tool_calls\"}]}\n\n",
        )));
        assert_eq!(
            events,
            vec![
                call(
                    0,
                    Some("a"),
                    Some("get_weather"),
                    "{\"location\":\"Paris\"}"
                ),
                call(1, Some("b"), Some("get_time"), "{\"tz\":\"UTC\"}"),
                finished(FinishReason::ToolCalls),
            ]
        );
    }

    /// (e) Parallel calls whose fragments alternate by `index`.
    #[test]
    fn interleaved_parallel_calls() {
        let chunk = |index: u32, head: &str, args: &str| {
            format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{index}{head},\"function\":{{\"arguments\":{}}}}}]}}}}]}}\n\n",
                serde_json::to_string(args).expect("string")
            )
        };
        let body = [
            chunk(0, ",\"id\":\"c0\",\"type\":\"function\"", ""),
            chunk(1, ",\"id\":\"c1\",\"type\":\"function\"", ""),
            chunk(0, "", "{\"city\":"),
            chunk(1, "", "{\"tz\":"),
            chunk(0, "", "\"Oslo\"}"),
            chunk(1, "", "\"CET\"}"),
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n".to_owned(),
        ]
        .concat();
        let events = ok(run_str(&body));
        assert_eq!(events[0], call(0, Some("c0"), None, ""));
        assert_eq!(events[1], call(1, Some("c1"), None, ""));
        assert_eq!(
            arguments_by_index(&events),
            vec!["{\"city\":\"Oslo\"}", "{\"tz\":\"CET\"}"]
        );
        assert_eq!(events.last(), Some(&finished(FinishReason::ToolCalls)));
    }

    /// Interleaved calls with a wire index that does not start at 0 (or skips numbers).
    #[test]
    fn sparse_wire_indices_are_normalized() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"id\":\"x\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":7,\"id\":\"y\",\"function\":{\"name\":\"g\",\"arguments\":\"[\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":7,\"function\":{\"arguments\":\"]\"}}]}}]}\n\n",
            "data: [DONE]\n\n",
        )));
        assert_eq!(arguments_by_index(&events), vec!["{}", "[]"]);
        // [DONE] without a finish_reason: a Finished is made up from what was seen.
        assert_eq!(events.last(), Some(&finished(FinishReason::ToolCalls)));
    }

    /// (f) Every call at index 0 (or without an index), a distinct id per call.
    #[test]
    fn same_index_new_id_is_a_new_call() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"A\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"B\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"b\\\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"B\",\"function\":{\"arguments\":\":2}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"C\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        )));
        assert_eq!(
            events,
            vec![
                call(0, Some("A"), Some("f"), "{\"a\""),
                call(0, None, None, ":1}"),
                call(1, Some("B"), Some("f"), "{\"b\""),
                call(1, None, None, ":2}"),
                call(2, Some("C"), Some("g"), "{}"),
                finished(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn missing_id_is_made_up_once() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"late\",\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        )));
        let LlmEvent::ToolCallDelta {
            index: 0,
            id: Some(id),
            name: Some(name),
            ..
        } = &events[0]
        else {
            panic!("unexpected {events:?}");
        };
        assert!(id.starts_with("call_") && id.len() == 37, "{id}");
        assert_eq!(name, "f");
        // The late real id does not start a second call.
        assert_eq!(events[1], call(0, None, None, "{}"));
        assert_eq!(events.len(), 3);
    }

    #[test]
    fn legacy_function_call_delta() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[{\"delta\":{\"function_call\":{\"name\":\"f\",\"arguments\":\"\"}}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"function_call\":{\"arguments\":\"{}\"}}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"function_call\"}]}\n\n",
        )));
        assert!(
            matches!(&events[0], LlmEvent::ToolCallDelta { index: 0, id: Some(_), name: Some(n), .. } if n == "f")
        );
        assert_eq!(events[1], call(0, None, None, "{}"));
        assert_eq!(events[2], finished(FinishReason::ToolCalls));
    }

    /// (g) `reasoning_content` (DeepSeek, vLLM) and `reasoning` (OpenRouter, Ollama).
    #[test]
    fn reasoning_fields() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"Let me think\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"reasoning\":\" more\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"both\",\"reasoning\":\"both\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"Answer\",\"reasoning_content\":null}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
        )));
        assert_eq!(
            events,
            vec![
                LlmEvent::ReasoningDelta("Let me think".into()),
                LlmEvent::ReasoningDelta(" more".into()),
                LlmEvent::ReasoningDelta("both".into()),
                text("Answer"),
                finished(FinishReason::Stop),
            ]
        );
    }

    /// (h) llama.cpp's server: an error object as a frame mid-stream, then the body ends.
    #[test]
    fn error_frame_mid_stream() {
        let events = run_str(concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n",
            "data: {\"error\":{\"code\":500,\"message\":\"the request exceeds the available context size\",\"type\":\"exceed_context_size_error\"}}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"never\"}}]}\n\n",
        ));
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[0], Ok(text("Hi")));
        let Err(error) = &events[1] else {
            panic!("expected an error: {events:?}");
        };
        assert_eq!(error.code(), "upstream_error");
        assert_eq!(
            error.public_message(),
            "the model server reported an error while answering: the request exceeds the available context size"
        );
        assert!(matches!(error, LlmError::Upstream { code: Some(c), .. } if c == "500"));
    }

    #[test]
    fn other_error_frame_shapes() {
        // vLLM: top-level error fields.
        let events = run_str("data: {\"object\":\"error\",\"message\":\"boom\",\"type\":\"BadRequestError\",\"code\":400}\n\n");
        assert!(
            matches!(&events[..], [Err(LlmError::Upstream { upstream_message: Some(m), code: Some(c), .. })] if m == "boom" && c == "400"),
            "{events:?}"
        );
        // `event: error` with plain text; a string `error`.
        let events = run_str("event: error\ndata: overloaded\n\n");
        assert!(
            matches!(&events[..], [Err(LlmError::Upstream { upstream_message: Some(m), .. })] if m == "overloaded")
        );
        let events = run_str("data: {\"error\":\"bad things\"}\n\n");
        assert!(
            matches!(&events[..], [Err(LlmError::Upstream { upstream_message: Some(m), .. })] if m == "bad things")
        );
        // A message that echoes the key is not shown, and the log detail is redacted.
        let events = run_str("data: {\"error\":{\"message\":\"invalid sk-live-secret\"}}\n\n");
        let [Err(LlmError::Upstream {
            upstream_message,
            detail,
            ..
        })] = &events[..]
        else {
            panic!("{events:?}");
        };
        assert_eq!(upstream_message, &None);
        assert!(!detail.contains("sk-live-secret") && detail.contains("[redacted]"));
    }

    /// (i) End of body after a finish_reason without `[DONE]` is a normal end; with neither it
    /// is a cut stream.
    #[test]
    fn end_of_body_rules() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}",
        )));
        assert_eq!(
            events,
            vec![
                text("a"),
                finished(FinishReason::Length),
                LlmEvent::Usage(Usage {
                    input_tokens: 1,
                    output_tokens: 1,
                    ..Usage::default()
                })
            ]
        );

        let events = run_str("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
        assert_eq!(events.len(), 2);
        assert_eq!(events[0], Ok(text("a")));
        assert!(matches!(&events[1], Err(e) if e.code() == "upstream_stream_cut"));

        // An empty body is cut too.
        let events = run_str("");
        assert!(matches!(&events[..], [Err(e)] if e.code() == "upstream_stream_cut"));
    }

    #[test]
    fn nothing_after_done() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"late\"}}]}\n\n",
            "data: not json\n\n",
        )));
        assert_eq!(events, vec![text("a"), finished(FinishReason::Stop)]);
    }

    /// Chunks that never carry a choice (only usage, only filter results, or nothing) and then
    /// `[DONE]`: not a chat completion, so not an empty answer either.
    #[test]
    fn done_without_any_choice_is_malformed() {
        for body in [
            "data: [DONE]\n\n",
            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":0}}\n\ndata: [DONE]\n\n",
            "data: {\"choices\":null}\n\ndata: {}\n\ndata: [DONE]\n\n",
        ] {
            let events = run_str(body);
            assert!(
                matches!(&events[..], [Err(e)] if e.code() == "upstream_malformed"),
                "{body}: {events:?}"
            );
        }
        // One choice, even empty, is a reply: the model had nothing to say.
        let events = ok(run_str(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\ndata: [DONE]\n\n",
        ));
        assert_eq!(events, vec![finished(FinishReason::Stop)]);
    }

    /// (j) A chunk that is not JSON, or not an object.
    #[test]
    fn malformed_chunks() {
        for body in [
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[\n\ndata: [DONE]\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [1,2]\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: hello\n\n",
        ] {
            let events = run_str(body);
            assert_eq!(events.len(), 2, "{body}: {events:?}");
            assert_eq!(events[0], Ok(text("a")));
            assert!(matches!(&events[1], Err(e) if e.code() == "upstream_malformed"), "{events:?}");
        }
    }

    /// (k) CRLF framing, split at every byte, including inside multi-byte characters.
    #[test]
    fn crlf_framing_split_anywhere() {
        let body = concat!(
            ": ping\r\n\r\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"h\u{e9}\u{1f600}\"}}]}\r\n\r\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\r\n\r\n",
            "data: [DONE]\r\n\r\n",
        )
        .as_bytes();
        let expected = vec![text("h\u{e9}\u{1f600}"), finished(FinishReason::Stop)];
        for split in 0..=body.len() {
            let (a, b) = body.split_at(split);
            assert_eq!(ok(run(&[a, b])), expected, "split at {split}");
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(ok(run(&bytes)), expected);
    }

    /// (l) Every finish_reason value.
    #[test]
    fn finish_reasons() {
        for (wire, reason) in [
            ("stop", FinishReason::Stop),
            ("tool_calls", FinishReason::ToolCalls),
            ("function_call", FinishReason::ToolCalls),
            ("length", FinishReason::Length),
            ("content_filter", FinishReason::ContentFilter),
            ("eos_token", FinishReason::Other("eos_token".into())),
        ] {
            let events = ok(run_str(&format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{wire}\"}}]}}\n\n\
                 data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{wire}\"}}]}}\n\ndata: [DONE]\n\n"
            )));
            assert_eq!(events, vec![finished(reason)], "{wire}");
        }
    }

    #[test]
    fn multi_line_data_is_one_json_document() {
        let events = ok(run_str(
            "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\n",
        ));
        assert_eq!(events, vec![text("x"), finished(FinishReason::Stop)]);
    }

    #[test]
    fn chunks_without_blank_lines_between_them() {
        let events = ok(run_str(concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n",
            "data: [DONE]\n",
        )));
        assert_eq!(
            events,
            vec![text("a"), text("b"), finished(FinishReason::Stop)]
        );
    }

    #[test]
    fn tolerated_oddities() {
        let events = ok(run_str(concat!(
            // choices null, unknown fields, wrong-typed fields read as absent
            "data: {\"choices\":null,\"foo\":1}\n\n",
            "data: {}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":[{\"type\":\"text\",\"text\":\"part\"},{\"type\":\"image_url\"}],\"tool_calls\":\"junk\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"refusal\":\"I can't\"}}]}\n\n",
            // a second choice (server ignoring n=1) is ignored
            "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"other\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"\"}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":\"x\",\"completion_tokens\":4}}\n\n",
            "data:  [DONE] \n\n",
        )));
        assert_eq!(
            events,
            vec![
                text("part"),
                text("I can't"),
                finished(FinishReason::Stop),
                LlmEvent::Usage(Usage {
                    input_tokens: 0,
                    output_tokens: 4,
                    ..Usage::default()
                })
            ]
        );
    }

    #[test]
    fn non_streaming_json_body() {
        let mut parser = ChunkParser::new(Redactor::default());
        let mut out = Vec::new();
        parser
            .on_json_body(
                br#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
                &mut out,
            )
            .expect("parses");
        assert_eq!(
            out,
            vec![
                text("Hello"),
                call(0, Some("c"), Some("f"), "{}"),
                finished(FinishReason::ToolCalls),
                LlmEvent::Usage(Usage {
                    input_tokens: 3,
                    output_tokens: 2,
                    ..Usage::default()
                })
            ]
        );

        let mut parser = ChunkParser::new(Redactor::default());
        let err = parser
            .on_json_body(
                br#"{"error":{"message":"quota exceeded","code":"insufficient_quota"}}"#,
                &mut Vec::new(),
            )
            .expect_err("error body");
        assert_eq!(err.code(), "upstream_error");
        let mut parser = ChunkParser::new(Redactor::default());
        let err = parser
            .on_json_body(b"<html>", &mut Vec::new())
            .expect_err("html");
        assert_eq!(err.code(), "upstream_malformed");
    }

    #[test]
    fn broken_body_after_finish_is_complete() {
        let mut decoder = StreamDecoder::new(Redactor::default());
        let mut out = Vec::new();
        decoder.feed(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n",
            &mut out,
        );
        decoder.end_with(Some("connection reset".into()), &mut out);
        assert_eq!(ok(out), vec![text("a"), finished(FinishReason::Stop)]);

        let mut decoder = StreamDecoder::new(Redactor::default());
        let mut out = Vec::new();
        decoder.feed(
            b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
            &mut out,
        );
        decoder.end_with(Some("connection reset".into()), &mut out);
        assert!(
            matches!(&out[1], Err(LlmError::StreamCut { detail }) if detail == "connection reset")
        );
        assert!(decoder.is_ended());
    }
}
