//! Runs that are an MCP App's request (`forwardedProps.__proxiedMCPRequest`): answered here,
//! at the edge, with `RUN_STARTED` then `RUN_FINISHED {result}` (the answer of
//! `agent::mcp_apps`), and nothing else.
//!
//! They are answered before the run's session, on purpose: an app's request is no turn of the
//! conversation. It must not take the thread's lease (a turn streaming on the thread would
//! answer it 409 `thread_busy`, and CopilotKit's renderer sends these requests while the
//! thread is idle or between turns), be saved to the thread, be written to the run log for a
//! reconnect, have its `messages` verified as the thread's history (the client sends whatever
//! it holds), or call the model. What still applies is what applies to every request:
//! authentication (a tower layer before this), the body's limits (it is decoded as any run),
//! and a run slot (`server.limits.max_concurrent_runs`) while it is answered.
//!
//! `RUN_STARTED` and `RUN_FINISHED` name the request's thread and run ids as sent (the TS
//! middleware puts the run id in `threadId`); nothing is recorded under either.

use axum::body::Body;
use axum::http::{header, HeaderValue};
use axum::response::Response;

use super::{ApiError, AppState, Code};
use crate::agent::mcp_apps::{ProxiedRequest, ProxyCaller};
use crate::agent::RunRequest;
use crate::protocol::{
    now_millis, write_frame, Event, EventBody, ProtocolVersion, RunFinished, RunOutcome, RunStarted,
};

/// Answers the app's request of a run to `agent`.
///
/// # Errors
/// No run slot is free (the same refusal as a run's).
pub(super) async fn answer(
    state: &AppState,
    agent: &str,
    request: RunRequest,
    proxied: Result<ProxiedRequest, String>,
) -> Result<Response, ApiError> {
    let _slot = state.sessions.limits.try_acquire()?;
    let caller = ProxyCaller {
        scope: request.scope,
        thread_id: request.thread_id.clone(),
        run_id: request.run_id.clone(),
    };
    let result = state.mcp_apps.answer(agent, proxied, caller).await;
    let v1 = request.version == ProtocolVersion::V1;
    let event = |body| Event {
        body,
        timestamp: Some(now_millis()),
        raw_event: None,
        metadata: None,
    };
    let started = event(EventBody::RunStarted(RunStarted {
        thread_id: request.thread_id.clone(),
        run_id: request.run_id.clone(),
        protocol_version: v1.then(|| ProtocolVersion::CURRENT.to_owned()),
        parent_run_id: None,
        input: None,
    }));
    let finished = event(EventBody::RunFinished(RunFinished {
        thread_id: request.thread_id,
        run_id: request.run_id,
        result: Some(result),
        // A 0.x client knows no outcome on RUN_FINISHED (see the encoder).
        outcome: v1.then_some(RunOutcome::Success {
            pending_tool_call_ids: None,
        }),
        usage: None,
    }));
    let mut body = Vec::new();
    for event in [started, finished] {
        if let Err(error) = write_frame(&event, &mut body) {
            // Only a result that is not JSON could fail, and results come from serde_json.
            tracing::error!(%error, "an MCP App's answer could not be written");
            return Err(ApiError::new(
                Code::InternalError,
                "the answer could not be written",
            ));
        }
    }
    let mut response = Response::new(Body::from(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    Ok(response)
}
