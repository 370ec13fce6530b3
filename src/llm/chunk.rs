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

pub(crate) use super::decoder::{EventParser, Flow, StreamDecoder};
use super::error::{LlmError, Redactor};
use super::sse::SseEvent;
use super::{FinishReason, LlmEvent, Usage};
use head::SharedHead;
use shape::{Found, Shapes, Slot};

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
    /// The last binding made in `by_wire_index`, which is still in it: nearly every fragment
    /// continues the call of the one before, and is placed without hashing its index.
    last_wire_binding: Option<(u64, usize)>,
    by_id: HashMap<String, usize>,
}

struct Fragment {
    index: Option<u64>,
    id: Option<String>,
    name: Option<String>,
    arguments: String,
}

impl ToolCalls {
    fn slot_at_wire_index(&self, wire_index: u64) -> Option<usize> {
        match self.last_wire_binding {
            Some((bound, slot)) if bound == wire_index => Some(slot),
            _ => self.by_wire_index.get(&wire_index).copied(),
        }
    }

    fn bind_wire_index(&mut self, wire_index: u64, slot: usize) {
        if self.last_wire_binding != Some((wire_index, slot)) {
            self.by_wire_index.insert(wire_index, slot);
            self.last_wire_binding = Some((wire_index, slot));
        }
    }

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
                    Some(i) => self.slot_at_wire_index(i),
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
            self.bind_wire_index(i, slot_index);
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

/// Parses SSE events (or a whole JSON body) into [`LlmEvent`]s.
#[derive(Debug, Default)]
pub(crate) struct ChunkParser {
    redactor: Redactor,
    calls: ToolCalls,
    /// The choice we follow; others (a server ignoring `n: 1`) are ignored.
    choice_index: Option<u64>,
    finish_sent: bool,
    usage: Option<Usage>,
    /// The members every chunk of this reply repeats before `choices`, read once.
    head: SharedHead,
    /// The chunks this reply repeats but for one string, read without the JSON parser.
    shapes: Shapes,
    /// The reply's `id` and `model`, for traces.
    names: names::ResponseNamer,
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
        // Found once per chunk: the shapes and the parser both read from it.
        let tail = self.head.tail(data);
        if let Some((slot, text)) = tail.and_then(|tail| self.shapes.read(tail)) {
            self.on_string(slot, text, out);
            return Ok(Flow::Continue);
        }
        match self.parse_chunk(data, tail) {
            Ok(chunk) => {
                // A shape is relative to the head, so only a chunk with a skippable one (known
                // by now: `parse_chunk` learns it, so the tail is looked for again) can teach one.
                let learnable = self
                    .shapes
                    .is_learning()
                    .then(|| self.head.tail(data))
                    .flatten();
                let found = learnable.and_then(|tail| Some((tail, one_string(&chunk)?)));
                self.names.name(data, self.choice_index.is_some(), out);
                let flow = self.on_chunk(chunk, data, out)?;
                if let Some((tail, (choice, found))) = found {
                    self.learn_shape(data, tail, choice, &found);
                }
                Ok(flow)
            }
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

    /// A chunk read by its shape: what [`Self::on_chunk`] does with a chunk whose one string
    /// is `text` in `slot`.
    fn on_string(&mut self, slot: Slot, text: String, out: &mut Vec<LlmEvent>) {
        match slot {
            Slot::Content => out.push(LlmEvent::TextDelta(text)),
            Slot::Reasoning => out.push(LlmEvent::ReasoningDelta(text)),
            Slot::Arguments { wire_index } => self.calls.on_fragment(
                Fragment {
                    index: wire_index,
                    id: None,
                    name: None,
                    arguments: text,
                },
                out,
            ),
        }
    }

    /// Learns the shape of `data`, a chunk just read whole that carried one string, if it is on
    /// the choice this parser follows (so a chunk of that shape is not one to ignore). `tail` is
    /// `data` after its skippable head.
    fn learn_shape(&mut self, data: &str, tail: &str, choice: u64, found: &Found) {
        if self.choice_index != Some(choice) {
            return;
        }
        let head = &data[..data.len() - tail.len()];
        self.shapes.learn(head, tail, found, |whole| {
            parse_object(whole)
                .ok()
                .as_ref()
                .and_then(one_string)
                .map(|(_, found)| found)
        });
    }

    /// [`parse_object`], skipping the head this reply's chunks share once it is known. `tail`
    /// is `data` after that head, when it starts with it.
    fn parse_chunk(&mut self, data: &str, tail: Option<&str>) -> Result<WireChunk, String> {
        if let Some(tail) = tail {
            if let Ok(chunk) = parse_object(self.head.as_object(tail)) {
                return Ok(chunk);
            }
        }
        let chunk = parse_object(data)?;
        self.head.learn(data);
        Ok(chunk)
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

/// The choice index and the one string of a chunk that sets nothing else the parser acts on:
/// one choice, no finish reason, and a delta with only a text, a reasoning text, or a fragment
/// of arguments (with no id or name). Such a chunk may teach a shape.
fn one_string(chunk: &WireChunk) -> Option<(u64, Found)> {
    let plain =
        chunk.error.is_none() && chunk.usage.is_none() && chunk.object.as_deref() != Some("error");
    let [choice] = chunk.choices.as_deref().filter(|_| plain)? else {
        return None;
    };
    if choice.finish_reason.is_some() || choice.message.is_some() {
        return None;
    }
    let delta = choice.delta.as_ref()?;
    if delta.refusal.is_some() || delta.function_call.is_some() {
        return None;
    }
    let found = |slot, key, value: &String| Found {
        slot,
        key,
        value: value.clone(),
    };
    let found = match (
        &delta.content,
        &delta.reasoning_content,
        &delta.reasoning,
        delta.tool_calls.as_deref(),
    ) {
        (Some(Value::String(text)), None, None, None) => {
            found(Slot::Content, b"\"content\":\"", text)
        }
        (None, Some(text), None, None) => found(Slot::Reasoning, b"\"reasoning_content\":\"", text),
        (None, None, Some(text), None) => found(Slot::Reasoning, b"\"reasoning\":\"", text),
        (None, None, None, Some([call])) => {
            let function = call.function.as_ref().filter(|f| f.name.is_none());
            let Some(Value::String(text)) = function.and_then(|f| f.arguments.as_ref()) else {
                return None;
            };
            if call.id.is_some() {
                return None;
            }
            let slot = Slot::Arguments {
                wire_index: call.index,
            };
            found(slot, b"\"arguments\":\"", text)
        }
        _ => return None,
    };
    Some((choice.index.unwrap_or(0), found))
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

impl StreamDecoder<ChunkParser> {
    /// The decoder of a chat-completions stream.
    pub(crate) fn new(redactor: Redactor) -> Self {
        Self::with_parser(ChunkParser::new(redactor))
    }

    /// A decoder that reads every chunk with the JSON parser, to compare the shapes against.
    #[cfg(test)]
    fn without_shapes(redactor: Redactor) -> Self {
        let mut decoder = Self::new(redactor);
        decoder.parser.shapes = Shapes::disabled();
        decoder
    }
}

impl EventParser for ChunkParser {
    fn on_event(&mut self, event: &SseEvent, out: &mut Vec<LlmEvent>) -> Result<Flow, LlmError> {
        ChunkParser::on_event(self, event, out)
    }

    fn saw_finish(&self) -> bool {
        ChunkParser::saw_finish(self)
    }

    fn on_done(&mut self, out: &mut Vec<LlmEvent>) {
        ChunkParser::on_done(self, out);
    }
}

/// The typed fast path of [`parse_object`].
mod fast;
mod head;
mod names;
mod shape;

#[cfg(test)]
mod tests;
