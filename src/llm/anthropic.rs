//! Anthropic's Messages API (`provider = "anthropic"`): the request body built from the
//! provider-neutral history, and (in `stream`) the streamed events read back into the same
//! [`LlmEvent`](super::LlmEvent)s the chat-completions parser produces, so the agent and its
//! middleware (predictive state, approvals) work unchanged.
//!
//! The history rules the Messages API enforces, and that chat-completions servers do not:
//! - the system prompt is a top-level field, not a message: every system message joins it;
//! - roles alternate, so consecutive messages of one role are merged into one;
//! - tool results are `tool_result` blocks of a *user* message right after the call, all the
//!   results of one turn in one message and before any text;
//! - a text block is never empty, and the first message is the user's;
//! - with extended thinking on, an assistant turn with tool calls starts with its thinking
//!   block, signature and all, exactly as the model streamed it.

use serde_json::{json, Map, Value};

use super::{ChatMessage, ChatReasoning, ChatRequest, ToolSpec, UserPart};
use crate::settings::LlmSettings;

mod stream;
pub(crate) use stream::MessagesParser;

/// `max_tokens` when none is configured: the Messages API needs one.
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A text block may not be empty: what stands for an empty message.
const EMPTY_TEXT: &str = "(empty)";

/// The Messages options of one profile.
#[derive(Debug, Clone, Default)]
pub(crate) struct MessagesOptions {
    prompt_caching: bool,
    thinking_budget_tokens: u32,
}

impl MessagesOptions {
    pub(crate) fn from_settings(settings: &LlmSettings) -> Self {
        Self {
            prompt_caching: settings.prompt_caching,
            thinking_budget_tokens: settings.thinking_budget_tokens,
        }
    }

    /// The JSON body of a streaming Messages request.
    pub(crate) fn request_body(
        &self,
        request: &ChatRequest,
        model: String,
        temperature: Option<f32>,
        max_tokens: Option<u32>,
    ) -> Value {
        // A tool loop whose last turn lost its signed thinking (a client that keeps no
        // encrypted values, a turn another profile made) cannot continue with thinking on: the
        // API refuses it. That call goes without thinking; the next turn thinks again.
        let thinking = if unsigned_continuation(&request.messages) {
            0
        } else {
            self.thinking_budget_tokens
        };
        let (system, messages) = wire_messages(&request.messages, thinking > 0);
        // The answer's budget comes on top of the thinking budget, which must be below it.
        let max_tokens = match max_tokens {
            Some(max) if max > thinking => max,
            _ => DEFAULT_MAX_TOKENS.saturating_add(thinking),
        };
        let mut body = Map::new();
        body.insert("model".into(), Value::String(model));
        body.insert("max_tokens".into(), max_tokens.into());
        body.insert("stream".into(), Value::Bool(true));
        if !system.is_empty() {
            let mut block = json!({"type": "text", "text": system});
            if self.prompt_caching {
                block["cache_control"] = json!({"type": "ephemeral"});
            }
            body.insert("system".into(), Value::Array(vec![block]));
        }
        body.insert("messages".into(), Value::Array(messages));
        if !request.tools.is_empty() {
            let mut tools: Vec<Value> = request.tools.iter().map(wire_tool).collect();
            // One breakpoint on the last tool caches every tool definition before it.
            if let (true, Some(last)) = (self.prompt_caching, tools.last_mut()) {
                last["cache_control"] = json!({"type": "ephemeral"});
            }
            body.insert("tools".into(), Value::Array(tools));
        }
        if let (Some(name), 0) = (&request.forced_tool, thinking) {
            body.insert("tool_choice".into(), json!({"type": "tool", "name": name}));
        }
        if thinking > 0 {
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": thinking}),
            );
        } else if let Some(temperature) = temperature {
            // Extended thinking accepts no temperature but the default.
            body.insert("temperature".into(), json!(temperature));
        }
        Value::Object(body)
    }
}

/// Whether the history ends with an assistant tool-use turn (and only its results after it)
/// that carries no signed thinking to send back.
fn unsigned_continuation(history: &[ChatMessage]) -> bool {
    let Some(last) = history
        .iter()
        .rev()
        .find(|m| !matches!(m, ChatMessage::Tool { .. }))
    else {
        return false;
    };
    match last {
        ChatMessage::Assistant {
            tool_calls,
            reasoning,
            ..
        } => !tool_calls.is_empty() && !reasoning.iter().any(|r| thinking_block(r).is_some()),
        _ => false,
    }
}

fn wire_tool(tool: &ToolSpec) -> Value {
    let schema = match &*tool.parameters {
        Value::Object(schema) if !schema.is_empty() => Value::Object(schema.clone()),
        _ => json!({"type": "object", "properties": {}}),
    };
    let mut wire = json!({"name": tool.name, "input_schema": schema});
    if !tool.description.is_empty() {
        wire["description"] = Value::String(tool.description.clone());
    }
    wire
}

/// The system text and the alternating messages of `history`.
fn wire_messages(history: &[ChatMessage], thinking: bool) -> (String, Vec<Value>) {
    let mut system = String::new();
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::with_capacity(history.len());
    for message in history {
        let (role, blocks) = match message {
            ChatMessage::System { content } => {
                if !content.is_empty() {
                    if !system.is_empty() {
                        system.push_str("\n\n");
                    }
                    system.push_str(content);
                }
                continue;
            }
            ChatMessage::User { content } => {
                ("user", content.iter().filter_map(user_block).collect())
            }
            ChatMessage::Assistant {
                content,
                tool_calls,
                reasoning,
            } => {
                let mut blocks = Vec::with_capacity(tool_calls.len() + 2);
                // Thinking is sent back only while it is on: without it, the API refuses
                // thinking blocks in the history of a request that asks for none.
                if thinking {
                    blocks.extend(reasoning.iter().filter_map(thinking_block));
                }
                if let Some(text) = content.as_deref().filter(|t| !t.trim().is_empty()) {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for call in tool_calls {
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": tool_input(&call.arguments),
                    }));
                }
                ("assistant", blocks)
            }
            ChatMessage::Tool {
                tool_call_id,
                content,
            } => {
                let mut block = json!({"type": "tool_result", "tool_use_id": tool_call_id});
                if !content.is_empty() {
                    block["content"] = Value::String(content.clone());
                }
                ("user", vec![block])
            }
        };
        match messages.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => {
                // Results answer the turn before: they go ahead of any text of the same message.
                let results = blocks.iter().filter(|b| is_tool_result(b)).count();
                if results > 0 {
                    let at = last_blocks.iter().take_while(|b| is_tool_result(b)).count();
                    last_blocks.splice(at..at, blocks);
                } else {
                    last_blocks.extend(blocks);
                }
            }
            _ => messages.push((role, blocks)),
        }
    }
    if messages
        .first()
        .is_some_and(|(role, _)| *role == "assistant")
    {
        messages.insert(0, ("user", Vec::new()));
    }
    let wire = messages
        .into_iter()
        .map(|(role, mut blocks)| {
            if blocks.is_empty() {
                blocks.push(json!({"type": "text", "text": EMPTY_TEXT}));
            }
            json!({"role": role, "content": blocks})
        })
        .collect();
    (system, wire)
}

fn is_tool_result(block: &Value) -> bool {
    block.get("type").and_then(Value::as_str) == Some("tool_result")
}

fn user_block(part: &UserPart) -> Option<Value> {
    match part {
        UserPart::Text(text) if text.trim().is_empty() => None,
        UserPart::Text(text) => Some(json!({"type": "text", "text": text})),
        UserPart::ImageUrl { url } => Some(image_block(url)),
    }
}

/// An image by URL, or a `data:` URL as the base64 source the API wants.
fn image_block(url: &str) -> Value {
    let inline = url.strip_prefix("data:").and_then(|rest| {
        let (media_type, data) = rest.split_once(";base64,")?;
        Some((media_type, data))
    });
    match inline {
        Some((media_type, data)) => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }),
        None => json!({"type": "image", "source": {"type": "url", "url": url}}),
    }
}

/// A thinking block as the model streamed it; reasoning without a signature (from another
/// provider, or a client that dropped it) cannot be sent back and is left out.
fn thinking_block(reasoning: &ChatReasoning) -> Option<Value> {
    let signature = reasoning
        .encrypted
        .as_deref()
        .filter(|value| !value.starts_with(super::responses::SEALED_PREFIX))?;
    Some(match signature.strip_prefix(REDACTED_PREFIX) {
        Some(data) => json!({"type": "redacted_thinking", "data": data}),
        None => json!({"type": "thinking", "thinking": reasoning.text, "signature": signature}),
    })
}

/// How a `redacted_thinking` block's data travels as an encrypted value: marked, so it goes
/// back as the same kind of block.
pub(crate) const REDACTED_PREFIX: &str = "redacted:";

/// A call's arguments as the object `input` must be: `{}` for none, and anything that is not a
/// JSON object (the model's text is untrusted) wrapped so the call still reads back.
fn tool_input(arguments: &str) -> Value {
    if arguments.trim().is_empty() {
        return json!({});
    }
    match serde_json::from_str::<Value>(arguments) {
        Ok(object @ Value::Object(_)) => object,
        Ok(other) => json!({"value": other}),
        Err(_) => json!({"arguments": arguments}),
    }
}

#[cfg(test)]
mod tests;
