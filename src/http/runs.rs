//! The routes of logged runs: `GET /{agent}/runs/{runId}/events` (a reconnect: the events
//! after `Last-Event-ID`, then the live run) and `POST /{agent}/runs/{runId}/stop`. The run's
//! life, its log and its readers are the session's (`crate::session`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use super::extract::{invalid_last_event_id, LastEventId, Scopes};
use super::run::sse_response;
use super::{ApiError, AppState};
use crate::runs::parse_cursor;
use crate::session::StopState;

/// `GET /{agent}/runs/{run_id}/events`: the events after `Last-Event-ID` (all of them without
/// one), then the live run until its terminal event.
pub(super) async fn run_events(
    State(state): State<AppState>,
    Path((agent, run_id)): Path<(String, String)>,
    LastEventId(last_event_id): LastEventId,
    scopes: Scopes,
) -> Result<Response, ApiError> {
    let cursor = match last_event_id.as_deref() {
        None | Some("") => 0,
        Some(id) => parse_cursor(&run_id, id).ok_or_else(invalid_last_event_id)?,
    };
    let body = state
        .sessions
        .reconnect((&agent, &run_id), scopes.thread.as_deref(), cursor)
        .await?;
    Ok(sse_response(body))
}

/// `POST /{agent}/runs/{run_id}/stop`: ends a live run with the `cancelled` outcome; a run
/// that already ended is left as it is.
pub(super) async fn stop_run(
    State(state): State<AppState>,
    Path((agent, run_id)): Path<(String, String)>,
    scopes: Scopes,
) -> Result<Response, ApiError> {
    let stopped = state
        .sessions
        .stop((&agent, &run_id), scopes.thread.as_deref())
        .await?;
    let (status, word) = match stopped {
        StopState::Ended => (StatusCode::OK, "ended"),
        StopState::Stopping => (StatusCode::ACCEPTED, "stopping"),
    };
    Ok((status, Json(json!({"runId": run_id, "status": word}))).into_response())
}
