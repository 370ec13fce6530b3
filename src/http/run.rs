//! `POST /` and `POST /{agent}`: decode a `RunAgentInput` (see `decode`), open the run's
//! session (`crate::session`: admission, thread, log, the agent started) and answer with its
//! SSE body; the metrics watch the run as one of its observers. A run that is an MCP App's
//! request goes to `mcp_apps` instead, before any of that.

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue};
use axum::response::Response;
use serde_json::Value;

use super::decode;
use super::extract::{NamedAgent, Scopes};
use super::{ApiError, AppState};
use crate::agent::mcp_apps::ProxiedRequest;
use crate::agent::RunRequest;
use crate::session::{NewRun, RunBody};
use crate::telemetry::genai;

/// The request header by which a client asks its run to go on after a disconnect (`continue`),
/// for a reconnect to pick up; `forwardedProps.aguiHost.onDisconnect` says the same from a
/// client that cannot set headers.
pub const ON_DISCONNECT_HEADER: &str = "x-agui-on-disconnect";

pub(super) async fn run_default_agent(
    State(state): State<AppState>,
    scopes: Scopes,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let agent = state.default_agent.clone();
    run_agent(state, &agent, &headers, scopes, body).await
}

pub(super) async fn run_named_agent(
    State(state): State<AppState>,
    NamedAgent(agent): NamedAgent,
    scopes: Scopes,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    run_agent(state, &agent, &headers, scopes, body).await
}

async fn run_agent(
    state: AppState,
    agent_name: &str,
    headers: &HeaderMap,
    Scopes { thread, caller }: Scopes,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Some(agent) = state.agents.get(agent_name) else {
        return Err(ApiError::unknown_agent(agent_name, &state));
    };
    let bytes = body.map_err(|rejection| decode::body_rejection(&rejection))?;
    let input = decode::decode_run_input(&bytes, &state.input_limits)?;
    let mut request = RunRequest::from(input);
    request.scope = caller;
    let forwarded_props = request.forwarded_props.as_ref();
    if let Some(proxied) = ProxiedRequest::from_forwarded_props(forwarded_props) {
        return super::mcp_apps::answer(&state, agent_name, request, proxied).await;
    }
    let asks_to_continue = asks_to_continue(headers, request.forwarded_props.as_ref());
    // A child of the request's HTTP server span, which continued the caller's trace.
    let span = genai::run_span(agent_name, &request.thread_id, &request.run_id);
    let session = state
        .sessions
        .open(NewRun {
            agent: agent.as_ref(),
            agent_name,
            thread_scope: thread,
            request,
            asks_to_continue,
            span,
        })
        .await?;
    let metrics = state.metrics.run_started(agent_name);
    Ok(sse_response(session.stream(Box::new(metrics))))
}

/// Whether the request asks for its run to go on after a disconnect: the header, or
/// `forwardedProps.aguiHost.onDisconnect`, is `continue`.
fn asks_to_continue(headers: &HeaderMap, forwarded_props: Option<&Value>) -> bool {
    let says_continue = |value: &str| value.trim().eq_ignore_ascii_case("continue");
    if let Some(value) = headers.get(ON_DISCONNECT_HEADER) {
        return value.to_str().is_ok_and(says_continue);
    }
    forwarded_props
        .and_then(|props| props.get("aguiHost"))
        .and_then(|host| host.get("onDisconnect"))
        .and_then(Value::as_str)
        .is_some_and(says_continue)
}

/// A response streaming `body` as server-sent events, never cached or buffered on the way.
pub(super) fn sse_response(body: RunBody) -> Response {
    let mut response = Response::new(Body::from_stream(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tells nginx-style proxies not to buffer the stream.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
