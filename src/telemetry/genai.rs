//! The spans a run is traced with, named after the OpenTelemetry GenAI semantic conventions
//! (every attribute name lives here): `invoke_agent {agent}` for the run, `chat {model}` for each
//! model call, `execute_tool {tool}` for each server tool call, and `tools/call {tool}` for the
//! MCP request of an MCP tool (the MCP conventions). Approvals are events of the run span.
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
/// INTERNAL, under the request's HTTP server span (`telemetry::server`), which is where a
/// caller's trace enters. The agent records its provider and model, and the tokens of all its
/// model calls, on it.
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
        otel.kind = "internal",
        otel.status_code = Empty,
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = agent,
        gen_ai.conversation.id = thread_id,
        gen_ai.provider.name = Empty,
        gen_ai.request.model = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        agui.run.id = run_id,
        agui.run.outcome = Empty,
        error.type = Empty,
    )
}

/// The provider and model the run's agent calls.
pub fn record_agent_model(span: &Span, provider: &str, model: &str) {
    span.record("gen_ai.provider.name", provider_name(provider));
    span.record("gen_ai.request.model", model);
}

/// The tokens of every model call of the run so far.
pub fn record_agent_usage(span: &Span, input_tokens: u64, output_tokens: u64) {
    span.record("gen_ai.usage.input_tokens", token_count(input_tokens));
    span.record("gen_ai.usage.output_tokens", token_count(output_tokens));
}

/// As i64: OpenTelemetry integers are signed, and a u64 field would be exported as text.
fn token_count(tokens: u64) -> i64 {
    i64::try_from(tokens).unwrap_or(i64::MAX)
}

/// Records how a run ended: `finished`, `cancelled` (the client went away), or the stable code
/// of its `RUN_ERROR`, which also marks the span as failed.
pub fn record_run_outcome(span: &Span, outcome: &str, failed: bool) {
    span.record("agui.run.outcome", outcome);
    if failed {
        record_error(span, outcome);
    }
}

/// What a model call is sent to and with.
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelCall<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    pub thread_id: &'a str,
    /// The model server's host and port (none for the offline model).
    pub server_address: Option<&'a str>,
    pub server_port: Option<u16>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
}

/// One model call (one streamed chat completion, retries included), of kind CLIENT.
pub fn model_call_span(call: &ModelCall<'_>) -> Span {
    if !is_exporting() {
        return Span::none();
    }
    let model = call.model;
    tracing::info_span!(
        "chat",
        otel.name = format!("chat {model}"),
        otel.kind = "client",
        otel.status_code = Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider_name(call.provider),
        gen_ai.request.model = model,
        gen_ai.request.stream = true,
        gen_ai.request.temperature = call.temperature.map(f64::from),
        gen_ai.request.max_tokens = call.max_tokens.map(i64::from),
        gen_ai.conversation.id = call.thread_id,
        server.address = call.server_address,
        server.port = call.server_port.map(i64::from),
        gen_ai.response.id = Empty,
        gen_ai.response.model = Empty,
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
pub(super) fn provider_name(provider: &str) -> &str {
    match provider {
        "azure" => "azure.ai.openai",
        other => other,
    }
}

/// The completion's id and the model that answered, as the model server named them.
pub fn record_response(span: &Span, id: Option<&str>, model: Option<&str>) {
    if let Some(id) = id {
        span.record("gen_ai.response.id", id);
    }
    if let Some(model) = model {
        span.record("gen_ai.response.model", model);
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
    span.record("gen_ai.usage.input_tokens", token_count(input_tokens));
    span.record("gen_ai.usage.output_tokens", token_count(output_tokens));
    if let Some(cached) = cached_input_tokens {
        span.record("gen_ai.usage.cache_read.input_tokens", token_count(cached));
    }
    if let Some(reasoning) = reasoning_tokens {
        span.record(
            "gen_ai.usage.reasoning.output_tokens",
            token_count(reasoning),
        );
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
        // Run by the agent, not by the client: the conventions' `extension`, where `function`
        // is a tool the client carries out.
        gen_ai.tool.type = "extension",
        gen_ai.tool.call.arguments = Empty,
        gen_ai.tool.call.result = Empty,
        agui.tool.outcome = Empty,
        error.type = Empty,
    )
}

/// One MCP request (`tools/call`) to a server, of kind CLIENT, under the tool call's span, by
/// the MCP semantic conventions. Its trace context goes to the server in `params._meta`
/// ([`super::trace_context`]), so the server's spans join the run's trace.
pub fn mcp_call_span(tool: &str, server: &str, transport: McpTransport<'_>) -> Span {
    if !is_exporting() {
        return Span::none();
    }
    let (network_transport, address, port) = match transport {
        McpTransport::Pipe => ("pipe", None, None),
        McpTransport::Tcp { address, port } => ("tcp", address, port.map(i64::from)),
    };
    tracing::info_span!(
        "mcp",
        otel.name = format!("tools/call {tool}"),
        otel.kind = "client",
        otel.status_code = Empty,
        mcp.method.name = "tools/call",
        mcp.protocol.version = Empty,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = tool,
        agui.mcp.server = server,
        network.transport = network_transport,
        server.address = address,
        server.port = port,
        jsonrpc.request.id = Empty,
        rpc.response.status_code = Empty,
        error.type = Empty,
    )
}

/// How an MCP server is reached.
#[derive(Debug, Clone, Copy)]
pub enum McpTransport<'a> {
    /// A child process over its standard input and output.
    Pipe,
    /// Streamable HTTP.
    Tcp {
        address: Option<&'a str>,
        port: Option<u16>,
    },
}

/// What the MCP request was sent as, and the protocol version the server agreed to.
pub fn record_mcp_request(span: &Span, request_id: &str, protocol_version: Option<&str>) {
    span.record("jsonrpc.request.id", request_id);
    if let Some(version) = protocol_version {
        span.record("mcp.protocol.version", version);
    }
}

/// An MCP request that failed: a JSON-RPC error code from the server, or how the connection
/// failed.
pub fn record_mcp_failure(span: &Span, error_type: &str, json_rpc_code: Option<i64>) {
    if let Some(code) = json_rpc_code {
        span.record("rpc.response.status_code", code.to_string());
    }
    record_error(span, error_type);
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
