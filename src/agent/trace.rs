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
    CallTarget, ChatMessage, ChatRequest, ChatToolCall, FinishReason, LlmError, LlmEvent, UserPart,
};
use crate::telemetry::genai;
use crate::tools::{result_text, ToolError, ToolOutput};

/// The span of one model call; it ends when the last clone (the one the event stream holds) is
/// dropped with the stream.
#[derive(Debug, Clone)]
pub(super) struct ModelCallTrace {
    span: Span,
    /// The call's finish reason once the model gave it, for its output messages.
    finish_reason: Option<String>,
}

impl ModelCallTrace {
    pub(super) fn start(
        provider: &str,
        thread_id: &str,
        target: &CallTarget,
        request: &ChatRequest,
    ) -> Self {
        let span = genai::model_call_span(&genai::ModelCall {
            provider,
            model: request.model.as_deref().unwrap_or_default(),
            thread_id,
            server_address: target.server_address.as_deref(),
            server_port: target.server_port,
            temperature: target.temperature,
            max_tokens: target.max_tokens,
        });
        genai::record_input_messages(&span, || input_messages(&request.messages));
        ModelCallTrace {
            span,
            finish_reason: None,
        }
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

    pub(super) fn on_event(&mut self, event: &LlmEvent) {
        match event {
            LlmEvent::Response { id, model } => {
                genai::record_response(&self.span, id.as_deref(), model.as_deref());
            }
            LlmEvent::Usage(usage) => genai::record_usage(
                &self.span,
                usage.input_tokens,
                usage.output_tokens,
                usage.cached_input_tokens,
                usage.reasoning_tokens,
            ),
            LlmEvent::Finished { reason } => {
                let reason = finish_reason(reason);
                genai::record_finish_reason(&self.span, reason);
                self.finish_reason = Some(reason.to_owned());
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
            // The schema requires a finish reason on every output message; a stream cut short
            // gave none, and the conventions name that `error`.
            let finish_reason = self.finish_reason.as_deref().unwrap_or("error");
            json!([{"role": "assistant", "parts": parts, "finish_reason": finish_reason}])
                .to_string()
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

/// The run's span: the provider and model its agent calls.
pub(super) fn record_agent_model(run_span: &Span, provider: &str, model: &str) {
    genai::record_agent_model(run_span, provider, model);
}

/// The run's span: the tokens of its model calls so far.
pub(super) fn record_agent_usage(run_span: &Span, input_tokens: u64, output_tokens: u64) {
    genai::record_agent_usage(run_span, input_tokens, output_tokens);
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
