//! Anthropic Messages streams for the fake upstream (served on `POST /v1/messages`), shaped as
//! the real API streams them: every frame names its event, `message_start` carries the input
//! usage, a `ping` follows it, each content block opens, streams its deltas and stops, and
//! `message_delta` carries the stop reason and the output usage before `message_stop`.

use serde_json::{json, Value};

use crate::fake_llm::chunks::{split, Call};

/// The model named in the replies.
pub(crate) const MODEL: &str = "claude-sonnet-4-5";

/// One frame: `event: <type>` and its data.
pub(crate) fn frame(data: Value) -> String {
    let event = data["type"]
        .as_str()
        .expect("a Messages event has a type")
        .to_owned();
    format!("event: {event}\ndata: {data}")
}

pub(crate) fn message_start(input_tokens: u64, cache_read: u64) -> String {
    frame(json!({"type": "message_start", "message": {
        "id": "msg_01", "type": "message", "role": "assistant", "model": MODEL,
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": cache_read, "output_tokens": 1},
    }}))
}

pub(crate) fn ping() -> String {
    frame(json!({"type": "ping"}))
}

fn block_start(index: usize, block: Value) -> String {
    frame(json!({"type": "content_block_start", "index": index, "content_block": block}))
}

fn block_delta(index: usize, delta: Value) -> String {
    frame(json!({"type": "content_block_delta", "index": index, "delta": delta}))
}

fn block_stop(index: usize) -> String {
    frame(json!({"type": "content_block_stop", "index": index}))
}

/// A text block at `index`, one delta per part.
pub(crate) fn text_block(index: usize, parts: &[&str]) -> Vec<String> {
    let mut frames = vec![block_start(index, json!({"type": "text", "text": ""}))];
    frames.extend(
        parts
            .iter()
            .map(|part| block_delta(index, json!({"type": "text_delta", "text": part}))),
    );
    frames.push(block_stop(index));
    frames
}

/// A thinking block at `index`: its text, then its signature.
pub(crate) fn thinking_block(index: usize, thinking: &str, signature: &str) -> Vec<String> {
    vec![
        block_start(
            index,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
        ),
        block_delta(
            index,
            json!({"type": "thinking_delta", "thinking": thinking}),
        ),
        block_delta(
            index,
            json!({"type": "signature_delta", "signature": signature}),
        ),
        block_stop(index),
    ]
}

/// A `tool_use` block at `index`: `input: {}`, then the input in fragments of 1 to 8
/// characters (the same fragments `chunks::tool_call_deltas` sends over Chat Completions).
pub(crate) fn tool_use_block(index: usize, (id, name, arguments): Call<'_>) -> Vec<String> {
    let mut frames = vec![block_start(
        index,
        json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
    )];
    frames.extend(split(arguments, id).into_iter().map(|fragment| {
        block_delta(
            index,
            json!({"type": "input_json_delta", "partial_json": fragment}),
        )
    }));
    frames.push(block_stop(index));
    frames
}

/// `message_delta` with the stop reason and output tokens, then `message_stop`.
pub(crate) fn stop(reason: &str, output_tokens: u64) -> Vec<String> {
    vec![
        frame(json!({"type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": null},
            "usage": {"output_tokens": output_tokens}})),
        frame(json!({"type": "message_stop"})),
    ]
}

/// A mid-stream error frame, as the API sends when it is overloaded after the 200.
pub(crate) fn error(kind: &str, message: &str) -> String {
    frame(json!({"type": "error", "error": {"type": kind, "message": message}}))
}

/// A whole text answer.
pub(crate) fn text_reply(parts: &[&str]) -> Vec<String> {
    let mut frames = vec![message_start(12, 0), ping()];
    frames.extend(text_block(0, parts));
    frames.extend(stop("end_turn", 5));
    frames
}

/// Optional text, then tool calls (parallel when several), `stop_reason: tool_use`.
pub(crate) fn tool_calls(text: &[&str], calls: &[Call<'_>]) -> Vec<String> {
    let mut frames = vec![message_start(12, 0), ping()];
    let mut index = 0;
    if !text.is_empty() {
        frames.extend(text_block(0, text));
        index = 1;
    }
    for call in calls {
        frames.extend(tool_use_block(index, *call));
        index += 1;
    }
    frames.extend(stop("tool_use", 20));
    frames
}

/// An answer that thinks first (signed), then answers with text and optional calls.
pub(crate) fn thinking_then(
    thinking: &str,
    signature: &str,
    text: &[&str],
    calls: &[Call<'_>],
) -> Vec<String> {
    let mut frames = vec![message_start(12, 0), ping()];
    frames.extend(thinking_block(0, thinking, signature));
    let mut index = 1;
    if !text.is_empty() {
        frames.extend(text_block(index, text));
        index += 1;
    }
    for call in calls {
        frames.extend(tool_use_block(index, *call));
        index += 1;
    }
    let reason = if calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    frames.extend(stop(reason, 30));
    frames
}
