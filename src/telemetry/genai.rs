//! The spans a run is traced with, named after the OpenTelemetry GenAI semantic conventions
//! (every attribute name lives here): `invoke_agent {agent}` for the run, `chat {model}` for each
//! model call, `execute_tool {tool}` for each server tool call. Approvals are events of the run
//! span.
//!
//! When no spans are exported, the run span is the plain `run` span the logs always had and the
//! others are disabled spans, so a server without export does no extra work per run. Prompt and
//! completion text is recorded only with `telemetry.capture_content = true`.

use std::sync::atomic::{AtomicBool, Ordering};

use tracing::field::Empty;
use tracing::Span;

use super::is_exporting;

static CAPTURE_CONTENT: AtomicBool = AtomicBool::new(false);

pub(super) fn set_capture_content(capture: bool) {
    CAPTURE_CONTENT.store(capture, Ordering::Relaxed);
}

/// Whether spans carry message content (`gen_ai.input.messages`, tool arguments and results).
pub fn captures_content() -> bool {
    is_exporting() && CAPTURE_CONTENT.load(Ordering::Relaxed)
}

/// The run: from the request until its stream's last event (the SSE body holds it). Of kind
/// SERVER: no span of the HTTP layer is exported, so this is where a caller's trace enters.
pub fn run_span(agent: &str, thread_id: &str, run_id: &str) -> Span {
    if !is_exporting() {
        return tracing::info_span!("run", agent, thread_id, run_id);
    }
    tracing::info_span!(
        "run",
        agent,
        thread_id,
        run_id,
        otel.name = format!("invoke_agent {agent}"),
        otel.kind = "server",
        otel.status_code = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = agent,
        gen_ai.conversation.id = thread_id,
        agui.run.id = run_id,
        agui.run.outcome = Empty,
        error.type = Empty,
    )
}

/// Records how a run ended: `finished`, `cancelled` (the client went away), or the stable code
/// of its `RUN_ERROR`, which also marks the span as failed.
pub fn record_run_outcome(span: &Span, outcome: &str, failed: bool) {
    span.record("agui.run.outcome", outcome);
    if failed {
        record_error(span, outcome);
    }
}

/// One model call (one streamed chat completion, retries included), of kind CLIENT.
pub fn model_call_span(provider: &str, model: &str, thread_id: &str) -> Span {
    if !is_exporting() {
        return Span::none();
    }
    tracing::info_span!(
        "chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider_name(provider),
        gen_ai.request.model = model,
        gen_ai.request.stream = true,
        gen_ai.conversation.id = thread_id,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        gen_ai.usage.reasoning.output_tokens = Empty,
        gen_ai.input.messages = Empty,
        gen_ai.output.messages = Empty,
        error.type = Empty,
    )
}

/// The convention's well-known provider names, where ours differ.
fn provider_name(provider: &str) -> &str {
    match provider {
        "azure" => "azure.ai.openai",
        other => other,
    }
}

/// The token counts the upstream reported for one model call.
pub fn record_usage(
    span: &Span,
    input_tokens: u64,
    output_tokens: u64,
    cached_input_tokens: Option<u64>,
    reasoning_tokens: Option<u64>,
) {
    // As i64: OpenTelemetry integers are signed, and a u64 field would be exported as text.
    let count = |tokens: u64| i64::try_from(tokens).unwrap_or(i64::MAX);
    span.record("gen_ai.usage.input_tokens", count(input_tokens));
    span.record("gen_ai.usage.output_tokens", count(output_tokens));
    if let Some(cached) = cached_input_tokens {
        span.record("gen_ai.usage.cache_read.input_tokens", count(cached));
    }
    if let Some(reasoning) = reasoning_tokens {
        span.record("gen_ai.usage.reasoning.output_tokens", count(reasoning));
    }
}

/// `gen_ai.response.finish_reasons`: a string array, which a tracing field cannot hold.
pub fn record_finish_reason(span: &Span, reason: &str) {
    #[cfg(feature = "otel")]
    if !span.is_disabled() {
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        let reasons = opentelemetry::Array::String(vec![reason.to_owned().into()]);
        let reasons = opentelemetry::Value::Array(reasons);
        span.set_attribute("gen_ai.response.finish_reasons", reasons);
    }
    #[cfg(not(feature = "otel"))]
    let _ = (span, reason);
}

/// The model call's messages as the convention's JSON (only when content is captured).
pub fn record_input_messages(span: &Span, messages: impl FnOnce() -> String) {
    if captures_content() && !span.is_disabled() {
        span.record("gen_ai.input.messages", messages());
    }
}

/// What the model answered, as the convention's JSON (only when content is captured).
pub fn record_output_messages(span: &Span, messages: impl FnOnce() -> String) {
    if captures_content() && !span.is_disabled() {
        span.record("gen_ai.output.messages", messages());
    }
}

/// Marks a span as failed with a stable error type (a `RUN_ERROR` code, a tool error kind).
pub fn record_error(span: &Span, error_type: &str) {
    span.record("error.type", error_type);
    span.record("otel.status_code", "error");
}

/// One server tool call, from its start to its result (timeouts and failures included).
pub fn tool_span(tool: &str, call_id: &str) -> Span {
    if !is_exporting() {
        return Span::none();
    }
    tracing::info_span!(
        "execute_tool",
        otel.name = format!("execute_tool {tool}"),
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        gen_ai.tool.type = "function",
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        agui.tool.outcome = Empty,
        error.type = Empty,
    )
}

/// Records a tool call's outcome: `ok`, or the kind of its failure.
pub fn record_tool_outcome(span: &Span, failure: Option<&str>) {
    span.record("agui.tool.outcome", failure.unwrap_or("ok"));
    if let Some(kind) = failure {
        record_error(span, kind);
    }
}

/// A tool call's arguments and result text (only when content is captured).
pub fn record_tool_content(span: &Span, arguments: &str, result: &str) {
    if captures_content() && !span.is_disabled() {
        span.record("gen_ai.tool.call.arguments", arguments);
        span.record("gen_ai.tool.call.result", result);
    }
}

/// A server tool call now waits for a person (an event of the run span).
pub fn approval_requested(tool: &str, call_id: &str) {
    tracing::info!(
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        "approval requested"
    );
}

/// A person's decision on a call of an earlier run arrived (an event of the run span).
pub fn approval_decided(tool: &str, call_id: &str, approved: bool) {
    tracing::info!(
        gen_ai.tool.name = tool,
        gen_ai.tool.call.id = call_id,
        approved,
        "approval decided"
    );
}
