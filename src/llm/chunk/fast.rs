//! The typed fast path of the chunk parser's `parse_object`: the spec's types, no leniency,
//! unknown fields ignored. Any surprise makes the whole parse fail, and the lenient path takes
//! over.

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

/// Whether `text` is a chunk that sets nothing the parser reads: no choices, usage or error,
/// and an `object` other than `error` (see `head`).
pub(super) fn head_is_ignored(text: &str) -> bool {
    serde_json::from_str::<Chunk>(text).is_ok_and(|head| {
        head.choices.is_none()
            && head.usage.is_none()
            && head.error.is_none()
            && head.message.is_none()
            && head.code.is_none()
            && head.object.as_deref() != Some("error")
    })
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
