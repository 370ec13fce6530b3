//! OpenAI's Responses API (`provider = "openai-responses"`): the request body built from the
//! provider-neutral history, and (in `stream`) the streamed events read back into the same
//! [`LlmEvent`](super::LlmEvent)s the chat-completions parser produces.
//!
//! Stateless by default (`store: false`): the thread store is this server's, so nothing is
//! kept upstream, and a reasoning model's reasoning comes back as an encrypted item
//! (`include: ["reasoning.encrypted_content"]`) that travels with the conversation as the
//! protocol's encrypted value and goes back as a `reasoning` input item.
//!
//! The body and the events are our own serde types rather than async-openai's Responses types:
//! those require a whole `Response` object in every lifecycle event and reject the variations a
//! tolerant reader must accept, and the body is the same few shapes either way.

use serde_json::{json, Map, Value};

use super::{ChatMessage, ChatReasoning, ChatRequest, ToolSpec, UserPart};
use crate::settings::LlmSettings;

mod stream;
pub(crate) use stream::ResponsesParser;

/// How a Responses reasoning item travels as an encrypted value: marked, with the item's id
/// (the API wants both back), so it is never sent to another provider as a signature.
pub(crate) const SEALED_PREFIX: &str = "openai-responses:";

/// The Responses options of one profile.
#[derive(Debug, Clone, Default)]
pub(crate) struct ResponsesOptions {
    store: bool,
    reasoning_effort: String,
    reasoning_summary: String,
}

impl ResponsesOptions {
    pub(crate) fn from_settings(settings: &LlmSettings) -> Self {
        Self {
            store: settings.store,
            reasoning_effort: settings.reasoning_effort.trim().to_owned(),
            reasoning_summary: settings.reasoning_summary.trim().to_owned(),
        }
    }

    fn reasons(&self) -> bool {
        !self.reasoning_effort.is_empty() || !self.reasoning_summary.is_empty()
    }

    /// The JSON body of a streaming Responses request.
    pub(crate) fn request_body(
        &self,
        request: &ChatRequest,
        model: String,
        temperature: Option<f32>,
        max_tokens: Option<u32>,
    ) -> Value {
        let mut body = Map::new();
        body.insert("model".into(), Value::String(model));
        body.insert("stream".into(), Value::Bool(true));
        body.insert("store".into(), Value::Bool(self.store));
        let input: Vec<Value> = request.messages.iter().flat_map(input_items).collect();
        body.insert("input".into(), Value::Array(input));
        if !request.tools.is_empty() {
            body.insert(
                "tools".into(),
                Value::Array(request.tools.iter().map(wire_tool).collect()),
            );
        }
        if let Some(name) = &request.forced_tool {
            body.insert(
                "tool_choice".into(),
                json!({"type": "function", "name": name}),
            );
        }
        if let Some(temperature) = temperature {
            body.insert("temperature".into(), json!(temperature));
        }
        if let Some(max) = max_tokens {
            body.insert("max_output_tokens".into(), max.into());
        }
        // Models without reasoning refuse these options, so they are sent only when asked for.
        if self.reasons() {
            let mut reasoning = Map::new();
            if !self.reasoning_effort.is_empty() {
                reasoning.insert("effort".into(), json!(self.reasoning_effort));
            }
            if !self.reasoning_summary.is_empty() {
                reasoning.insert("summary".into(), json!(self.reasoning_summary));
            }
            body.insert("reasoning".into(), Value::Object(reasoning));
            if !self.store {
                body.insert("include".into(), json!(["reasoning.encrypted_content"]));
            }
        }
        Value::Object(body)
    }
}

fn wire_tool(tool: &ToolSpec) -> Value {
    let parameters = match &*tool.parameters {
        Value::Object(schema) if !schema.is_empty() => Value::Object(schema.clone()),
        _ => json!({"type": "object", "properties": {}}),
    };
    json!({
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": parameters,
        // Client schemas are not written for strict mode (every property required, no
        // additional ones), which would refuse them.
        "strict": false,
    })
}

/// The input items of one history message.
fn input_items(message: &ChatMessage) -> Vec<Value> {
    match message {
        ChatMessage::System { content } => {
            vec![json!({"type": "message", "role": "system", "content": content})]
        }
        ChatMessage::User { content } => {
            let parts: Vec<Value> = content
                .iter()
                .map(|part| match part {
                    UserPart::Text(text) => json!({"type": "input_text", "text": text}),
                    UserPart::ImageUrl { url } => {
                        json!({"type": "input_image", "image_url": url, "detail": "auto"})
                    }
                })
                .collect();
            vec![json!({"type": "message", "role": "user", "content": parts})]
        }
        ChatMessage::Assistant {
            content,
            tool_calls,
            reasoning,
        } => {
            let mut items: Vec<Value> = reasoning.iter().filter_map(reasoning_item).collect();
            if let Some(text) = content.as_deref().filter(|t| !t.is_empty()) {
                items.push(json!({
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }));
            }
            items.extend(tool_calls.iter().map(|call| {
                json!({
                    "type": "function_call",
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": if call.arguments.trim().is_empty() { "{}" } else { &call.arguments },
                })
            }));
            items
        }
        ChatMessage::Tool {
            tool_call_id,
            content,
        } => vec![
            json!({"type": "function_call_output", "call_id": tool_call_id, "output": content}),
        ],
    }
}

/// A reasoning item from its sealed value; reasoning sealed by another provider, or not at
/// all, is not sent.
fn reasoning_item(reasoning: &ChatReasoning) -> Option<Value> {
    let sealed = reasoning
        .encrypted
        .as_deref()?
        .strip_prefix(SEALED_PREFIX)?;
    let (id, encrypted) = sealed.split_once(':')?;
    let summary = if reasoning.text.is_empty() {
        json!([])
    } else {
        json!([{"type": "summary_text", "text": reasoning.text}])
    };
    Some(json!({
        "type": "reasoning",
        "id": id,
        "summary": summary,
        "encrypted_content": encrypted,
    }))
}

/// The encrypted value of a reasoning item: the marker, its id and its encrypted content.
pub(crate) fn seal(id: &str, encrypted: &str) -> String {
    format!("{SEALED_PREFIX}{id}:{encrypted}")
}

#[cfg(test)]
mod tests;
