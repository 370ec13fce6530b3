//! How `ChatAgent` traces a run: the span of each model call (usage, finish reason, error, and
//! the messages when content is captured) and of each server tool call, on top of the span
//! builders in `telemetry::genai`; and the GenAI metrics of each (`telemetry::metrics`). Message content uses the GenAI conventions' JSON shape
//! (`{"role", "parts": [{"type": "text" | "tool_call" | "tool_call_response" | "uri", ...}]}`).

use std::task::Poll;
use std::time::Instant;

use futures_util::stream::{self, BoxStream};
use futures_util::StreamExt;
use serde_json::{json, Value};
use tracing::Span;

use crate::llm::{
    CallTarget, ChatMessage, ChatRequest, ChatToolCall, FinishReason, LlmError, LlmEvent, UserPart,
};
use crate::telemetry::{genai, metrics};
use crate::tools::{result_text, ToolError, ToolOutput};

/// The span of one model call; it ends when the last clone (the one the event stream holds) is
/// dropped with the stream.
#[derive(Debug, Clone)]
pub(super) struct ModelCallTrace {
    span: Span,
    /// The call's finish reason once the model gave it, for its output messages.
    finish_reason: Option<String>,
    /// For the GenAI metrics: the call's provider and model, when it started, and whether its
    /// first chunk has come.
    provider: &'static str,
    model: String,
    started: Instant,
    first_chunk_seen: bool,
}

impl ModelCallTrace {
    pub(super) fn start(
        provider: &'static str,
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
            provider,
            model: request.model.clone().unwrap_or_default(),
            started: Instant::now(),
            first_chunk_seen: false,
        }
    }

    fn operation(&self) -> metrics::Operation<'_> {
        metrics::Operation {
            name: "chat",
            provider: Some(self.provider),
            model: Some(&self.model),
            ..metrics::Operation::default()
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
        if !self.first_chunk_seen && metrics::is_exporting() {
            let waited = self.started.elapsed().as_secs_f64();
            metrics::record_time_to_first_chunk(&self.operation(), waited);
        }
        self.first_chunk_seen = true;
        if let LlmEvent::Usage(usage) = event {
            metrics::record_tokens(&self.operation(), usage.input_tokens, usage.output_tokens);
        }
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
        let failed = metrics::Operation {
            error: Some(code),
            ..self.operation()
        };
        metrics::record_duration(&failed, self.started.elapsed().as_secs_f64());
    }

    /// What the model answered in this call (recorded only when content is captured), and how
    /// long the call took.
    pub(super) fn on_answer<'a>(
        &self,
        text: &str,
        calls: impl Iterator<Item = (&'a str, Option<&'a str>, &'a str)>,
    ) {
        metrics::record_duration(&self.operation(), self.started.elapsed().as_secs_f64());
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

/// The run is over: the tokens of its model calls on its span, and its duration.
pub(super) fn record_run_end(
    run_span: &Span,
    agent: &str,
    (provider, model): (&str, &str),
    tokens: Option<(u64, u64)>,
    started: Instant,
) {
    if let Some((input_tokens, output_tokens)) = tokens {
        genai::record_agent_usage(run_span, input_tokens, output_tokens);
    }
    let run = metrics::Operation {
        name: "invoke_agent",
        provider: Some(provider),
        model: Some(model),
        agent: Some(agent),
        ..metrics::Operation::default()
    };
    metrics::record_duration(&run, started.elapsed().as_secs_f64());
}

/// How long a server tool call took, and how it failed if it did.
pub(super) fn record_tool_duration(
    agent: &str,
    call: &ChatToolCall,
    output: &Result<ToolOutput, ToolError>,
    started: Instant,
) {
    let tool = metrics::Operation {
        name: "execute_tool",
        agent: Some(agent),
        tool: Some(&call.name),
        error: output.as_ref().err().map(ToolError::kind),
        ..metrics::Operation::default()
    };
    metrics::record_duration(&tool, started.elapsed().as_secs_f64());
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
