//! Resumable runs at the HTTP edge: a logged run is driven by a task of its own that writes its
//! frames into the run's log (`crate::runs`), and every response, the first as well as each
//! reconnect (`GET /<agent>/runs/<runId>/events`), is a reader of that log. So the run can
//! outlive its connection (`runs.on_disconnect = "continue"`), which is the one place the rule
//! "no run outlives its response" gives way: the driver task, not the response body, owns the
//! upstream request, and the run's stop token (`POST /<agent>/runs/<runId>/stop`, or no reader
//! for `runs.reconnect_grace_secs`) ends it with the `cancelled` outcome. Without a thread
//! store nothing is logged and the run stays in its response body (see `run`).

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::stream;
use serde::Deserialize;
use serde_json::json;
use tracing::Instrument;

use super::auth::Principal;
use super::run::{sse_response, Pump};
use super::{threads, ApiError, AppState};
use crate::protocol::KEEP_ALIVE_FRAME;
use crate::runs::{parse_cursor, Follower, LogLimits, Next, OpenError, ReadError, RunLog, RunLogs};
use crate::settings::{OnDisconnect, Settings, ThreadStoreKind};

/// The run log and what a disconnect does, shared by every handler.
#[derive(Debug)]
pub struct Resumable {
    logs: RunLogs,
    /// How long a run goes on with no reader: zero for `cancel`.
    grace: Duration,
}

impl Resumable {
    /// `None` when runs are not logged (`threads.store = "off"`).
    pub fn from_settings(settings: &Settings) -> Option<Arc<Self>> {
        if settings.threads.store == ThreadStoreKind::Off {
            return None;
        }
        let grace = match settings.runs.on_disconnect {
            OnDisconnect::Cancel => Duration::ZERO,
            OnDisconnect::Continue | OnDisconnect::Auto => {
                Duration::from_secs(settings.runs.reconnect_grace_secs)
            }
        };
        Some(Arc::new(Resumable {
            logs: RunLogs::new(LogLimits::from_settings(&settings.runs)),
            grace,
        }))
    }
}

/// Opens the log of a new run, if runs are logged and the request has a scope.
pub(super) fn open(
    state: &AppState,
    agent: &str,
    scope: Option<&str>,
    run_id: &str,
) -> Result<Option<Arc<RunLog>>, ApiError> {
    let (Some(resumable), Some(scope)) = (state.runs.as_deref(), scope) else {
        return Ok(None);
    };
    match resumable.logs.open(run_id, agent, scope) {
        Ok(log) => Ok(Some(log)),
        Err(OpenError::InProgress) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "run_in_progress",
            "a run with this runId is still streaming; reconnect to it with \
             GET /<agent>/runs/<runId>/events, or use a new runId",
        )),
    }
}

/// Starts the task that drives a logged run and answers with the first reader of its log.
pub(super) fn drive(state: &AppState, log: Arc<RunLog>, pump: Pump, span: tracing::Span) -> Body {
    let grace = state.runs.as_deref().map_or(Duration::ZERO, |r| r.grace);
    // Attached before the driver starts, so the run never looks abandoned at its start.
    let first_reader = log.follow(0);
    tokio::spawn(drive_run(log, pump, grace).instrument(span));
    match first_reader {
        Ok(follower) => reader_body(follower, state.keep_alive),
        // A new log starts at 0; should that ever change, fail the connection, not the run.
        Err(_) => Body::from_stream(stream::once(async {
            Err::<Bytes, _>(std::io::Error::other("run log unavailable"))
        })),
    }
}

/// Steps the pump until the run's terminal event, appending each batch to the log, while a
/// watchdog stops the run once it has had no reader for `grace`.
async fn drive_run(log: Arc<RunLog>, mut pump: Pump, grace: Duration) {
    let _broken = BreakOffOnDrop(Arc::clone(&log));
    let watchdog = tokio::spawn({
        let log = Arc::clone(&log);
        async move {
            log.abandoned(grace).await;
            tracing::info!(
                grace_secs = grace.as_secs_f64(),
                "no reader attached; stopping the run"
            );
            log.stop_token().cancel();
        }
    });
    while let Some((Ok(batch), next)) = pump.step().await {
        pump = next;
        if batch.as_ref() == KEEP_ALIVE_FRAME {
            continue;
        }
        let over = pump.is_over();
        log.append(batch, over);
        if over {
            break;
        }
    }
    watchdog.abort();
}

/// Ends the log without a terminal event if the driver is dropped before the run ended (the
/// runtime shutting down), so readers do not wait for events that will never come.
struct BreakOffOnDrop(Arc<RunLog>);

impl Drop for BreakOffOnDrop {
    fn drop(&mut self) {
        self.0.break_off();
    }
}

/// An SSE body that reads the log: frames as they come, keep-alives while idle. A log that
/// breaks off, or a reader left behind by the log's bounds, fails the connection rather than
/// ending it cleanly without a terminal event; the client reconnects and is told why.
fn reader_body(follower: Follower, keep_alive: Duration) -> Body {
    let chunks = stream::unfold(follower, move |mut follower| async move {
        let chunk = match follower.next(keep_alive).await? {
            Next::Frames { bytes, .. } => Ok(bytes),
            Next::Idle => Ok(Bytes::from_static(KEEP_ALIVE_FRAME)),
            Next::Broken => Err(std::io::Error::other(
                "the run ended without a terminal event",
            )),
            Next::Expired => Err(std::io::Error::other("the reader fell behind the run log")),
        };
        Some((chunk, follower))
    });
    Body::from_stream(chunks)
}

#[derive(Debug, Deserialize)]
pub(super) struct EventsQuery {
    /// For clients that cannot set the `Last-Event-ID` header.
    last_event_id: Option<String>,
}

/// `GET /{agent}/runs/{run_id}/events`: the events after `Last-Event-ID` (all of them without
/// one), then the live run until its terminal event.
pub(super) async fn run_events(
    State(state): State<AppState>,
    Path((agent, run_id)): Path<(String, String)>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
) -> Result<Response, ApiError> {
    let log = find(&state, &agent, &run_id, &headers, principal.as_ref())?;
    let last_event_id = match headers.get("last-event-id") {
        Some(value) => Some(value.to_str().map_err(|_| invalid_cursor())?.to_owned()),
        None => query.last_event_id,
    };
    let cursor = match last_event_id.as_deref().map(str::trim) {
        None | Some("") => 0,
        Some(id) => parse_cursor(&run_id, id).ok_or_else(invalid_cursor)?,
    };
    let follower = log.follow(cursor).map_err(|error| match error {
        ReadError::CursorExpired => ApiError::new(
            StatusCode::GONE,
            "cursor_expired",
            "the events after this Last-Event-ID are no longer kept; start a new run",
        ),
        ReadError::CursorAhead => ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_last_event_id",
            "Last-Event-ID names an event this run has not produced",
        ),
    })?;
    Ok(sse_response(reader_body(follower, state.keep_alive)))
}

/// `POST /{agent}/runs/{run_id}/stop`: ends a live run with the `cancelled` outcome; a run
/// that already ended is left as it is.
pub(super) async fn stop_run(
    State(state): State<AppState>,
    Path((agent, run_id)): Path<(String, String)>,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
) -> Result<Response, ApiError> {
    let log = find(&state, &agent, &run_id, &headers, principal.as_ref())?;
    if log.is_ended() {
        let body = json!({"runId": run_id, "status": "ended"});
        return Ok((StatusCode::OK, Json(body)).into_response());
    }
    log.stop_token().cancel();
    let body = json!({"runId": run_id, "status": "stopping"});
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// The run, if it is kept and the request's scope may see it; 404 otherwise, alike for a run
/// that never existed, has expired, or belongs to someone else.
fn find(
    state: &AppState,
    agent: &str,
    run_id: &str,
    headers: &HeaderMap,
    principal: Option<&Extension<Principal>>,
) -> Result<Arc<RunLog>, ApiError> {
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "run_not_found",
            "no such run: it is unknown, expired, or not yours",
        )
    };
    let resumable = state.runs.as_deref().ok_or_else(not_found)?;
    let threads = state.threads.as_deref().ok_or_else(not_found)?;
    let scope = threads::scope(threads, headers, principal.map(|p| &p.0)).ok_or_else(not_found)?;
    resumable
        .logs
        .get(run_id, agent, &scope)
        .ok_or_else(not_found)
}

fn invalid_cursor() -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_last_event_id",
        "Last-Event-ID must be an id this run's stream carried: `<runId>:<seq>`",
    )
}
