//! How `ChatAgent` traces a run: the span of each model call (usage, finish reason, error, and
//! the messages when content is captured) and of each server tool call, on top of the span
//! builders in `telemetry::genai`. Message content uses the GenAI conventions' JSON shape
//! (`{"role", "parts": [{"type": "text" | "tool_call" | "tool_call_response" | "uri", ...}]}`).

use std::task::Poll;

use futures_util::stream::{self, BoxStream};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tracing::Span;

use crate::llm::{
    ChatMessage, ChatRequest, ChatToolCall, FinishReason, LlmError, LlmEvent, UserPart,
};
use crate::telemetry::genai;
use crate::tools::{result_text, ToolError, ToolOutput};

/// The span of one model call; it ends when the last clone (the one the event stream holds) is
/// dropped with the stream.
#[derive(Debug, Clone)]
pub(super) struct ModelCallTrace {
    span: Span,
}

impl ModelCallTrace {
    pub(super) fn start(provider: &str, thread_id: &str, request: &ChatRequest) -> Self {
        let model = request.model.as_deref().unwrap_or_default();
        let span = genai::model_call_span(provider, model, thread_id);
        genai::record_input_messages(&span, || input_messages(&request.messages));
        ModelCallTrace { span }
    }

    /// Polls `events` inside the span, so the upstream request carries its trace context.
    pub(super) fn traced_events(
        &self,
        mut events: BoxStream<'static, Result<LlmEvent, LlmError>>,
    ) -> BoxStream<'static, Result<LlmEvent, LlmError>> {
        if self.span.is_disabled() {
            return events;
        }
        let span = self.span.clone();
        stream::poll_fn(move |cx| -> Poll<Option<_>> {
            let _entered = span.enter();
            events.poll_next_unpin(cx)
        })
        .boxed()
    }

    pub(super) fn on_event(&self, event: &LlmEvent) {
        match event {
            LlmEvent::Usage(usage) => genai::record_usage(
                &self.span,
                usage.input_tokens,
                usage.output_tokens,
                usage.cached_input_tokens,
                usage.reasoning_tokens,
            ),
            LlmEvent::Finished { reason } => {
                genai::record_finish_reason(&self.span, finish_reason(reason))
            }
            _ => {}
        }
    }

    pub(super) fn on_error(&self, code: &str) {
        genai::record_error(&self.span, code);
    }

    /// What the model answered in this call (recorded only when content is captured).
    pub(super) fn on_answer<'a>(
        &self,
        text: &str,
        calls: impl Iterator<Item = (&'a str, Option<&'a str>, &'a str)>,
    ) {
        genai::record_output_messages(&self.span, || {
            let mut parts = Vec::new();
            if !text.is_empty() {
                parts.push(json!({"type": "text", "content": text}));
            }
            parts.extend(calls.map(|(id, name, arguments)| tool_call_part(id, name, arguments)));
            json!([{"role": "assistant", "parts": parts}]).to_string()
        });
    }
}

/// The convention's finish reason values (OpenAI's, with `tool_call` singular).
fn finish_reason(reason: &FinishReason) -> &str {
    match reason {
        FinishReason::Stop => "stop",
        FinishReason::ToolCalls => "tool_call",
        FinishReason::Length => "length",
        FinishReason::ContentFilter => "content_filter",
        FinishReason::Other(other) => other,
    }
}

/// The span of one server tool call.
pub(super) fn tool_span(call: &ChatToolCall) -> Span {
    genai::tool_span(&call.name, &call.id)
}

/// Records how a tool call ended (and its arguments and result when content is captured).
pub(super) fn record_tool_call(
    span: &Span,
    call: &ChatToolCall,
    output: &Result<ToolOutput, ToolError>,
) {
    if span.is_disabled() {
        return;
    }
    match output {
        Ok(output) => {
            genai::record_tool_outcome(span, None);
            genai::record_tool_content(span, &call.arguments, &result_text(&output.content));
        }
        Err(error) => genai::record_tool_outcome(span, Some(error.kind())),
    }
}

fn tool_call_part(id: &str, name: Option<&str>, arguments: &str) -> Value {
    let arguments = serde_json::from_str::<Value>(arguments)
        .unwrap_or_else(|_| Value::String(arguments.to_owned()));
    json!({"type": "tool_call", "id": id, "name": name.unwrap_or(""), "arguments": arguments})
}

/// The conversation sent upstream, in the convention's shape. Inline (`data:`) media is named,
/// not copied: a span attribute is no place for megabytes of base64.
fn input_messages(history: &[ChatMessage]) -> String {
    let messages: Vec<Value> = history
        .iter()
        .map(|message| match message {
            ChatMessage::System { content } => {
                json!({"role": "system", "parts": [{"type": "text", "content": content}]})
            }
            ChatMessage::User { content } => {
                let parts: Vec<Value> = content
                    .iter()
                    .map(|part| match part {
                        UserPart::Text(text) => json!({"type": "text", "content": text}),
                        UserPart::ImageUrl { url } if url.starts_with("data:") => {
                            json!({"type": "uri", "modality": "image", "uri": format!("data:… ({} bytes)", url.len())})
                        }
                        UserPart::ImageUrl { url } => {
                            json!({"type": "uri", "modality": "image", "uri": url})
                        }
                    })
                    .collect();
                json!({"role": "user", "parts": parts})
            }
            ChatMessage::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let mut parts = Vec::new();
                if let Some(text) = content {
                    parts.push(json!({"type": "text", "content": text}));
                }
                parts.extend(tool_calls.iter().map(|call| {
                    tool_call_part(&call.id, Some(&call.name), &call.arguments)
                }));
                json!({"role": "assistant", "parts": parts})
            }
            ChatMessage::Tool {
                tool_call_id,
                content,
            } => json!({"role": "tool", "parts": [
                {"type": "tool_call_response", "id": tool_call_id, "response": content}
            ]}),
        })
        .collect();
    Value::Array(messages).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_messages_follow_the_conventions_shape_and_leave_inline_media_out() {
        let history = vec![
            ChatMessage::System {
                content: "Be brief.".into(),
            },
            ChatMessage::User {
                content: vec![
                    UserPart::Text("What is this?".into()),
                    UserPart::ImageUrl {
                        url: format!("data:image/png;base64,{}", "A".repeat(1000)),
                    },
                ],
            },
            ChatMessage::Assistant {
                reasoning: Vec::new(),
                content: None,
                tool_calls: vec![ChatToolCall {
                    id: "call_1".into(),
                    name: "lookup".into(),
                    arguments: r#"{"q":"png"}"#.into(),
                }],
            },
            ChatMessage::Tool {
                tool_call_id: "call_1".into(),
                content: "an image format".into(),
            },
        ];
        let json: Value = serde_json::from_str(&input_messages(&history)).unwrap();
        assert_eq!(
            json,
            json!([
                {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
                {"role": "user", "parts": [
                    {"type": "text", "content": "What is this?"},
                    {"type": "uri", "modality": "image", "uri": "data:… (1022 bytes)"}
                ]},
                {"role": "assistant", "parts": [
                    {"type": "tool_call", "id": "call_1", "name": "lookup", "arguments": {"q": "png"}}
                ]},
                {"role": "tool", "parts": [
                    {"type": "tool_call_response", "id": "call_1", "response": "an image format"}
                ]}
            ])
        );
    }
}
