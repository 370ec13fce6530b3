//! Resumable runs at the HTTP edge: a logged run is driven by a task of its own that writes its
//! frames into the run's log (`crate::runs`), and every response, the first as well as each
//! reconnect (`GET /<agent>/runs/<runId>/events`), is a reader of that log. So the run can
//! outlive its connection when its request asks (`X-AGUI-On-Disconnect: continue`) or the
//! operator set `runs.on_disconnect = "continue"`, which is the one place the rule "no run
//! outlives its response" gives way: the driver task, not the response body, owns the upstream
//! request, and the run's stop token (`POST /<agent>/runs/<runId>/stop`, its last reader gone
//! when it did not ask to go on, or no reader for `runs.reconnect_grace_secs` when it did) ends
//! it with the `cancelled` outcome. Without a thread
//! store nothing is logged and the run stays in its response body (see `run`). With the Redis
//! store the run's log is shared too (`crate::runs::redis`): a reconnect or a stop may reach any
//! replica, which reads the shared log or asks the owner to stop; this module picks the log,
//! and [`Reader`] hides which one it is from the response body.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::stream;
use serde::Deserialize;
use serde_json::{json, Value};
use tracing::Instrument;

use super::auth::Principal;
use super::run::{sse_response, Pump};
use super::{threads, ApiError, AppState};
use crate::protocol::{write_frame, Event, EventBody, RunError, KEEP_ALIVE_FRAME};
use crate::runs::redis::{
    Presence, RunKeys, SharedError, SharedLimits, SharedRun, SharedRuns, SharedWriter,
};
use crate::runs::{
    parse_cursor, LogLimits, Next, OpenError, ReadError, Reader, ReaderRefusal, ReaderSlot,
    ReaderSlots, RunLog, RunLogs,
};
use crate::settings::{OnDisconnect, Settings, ThreadStoreKind};
use crate::threads::StoreError;

/// How often a run with no reader here asks whether a reader elsewhere is still attached.
const PRESENCE_POLL: Duration = Duration::from_secs(1);

/// The request header by which a client asks its run to go on after a disconnect (`continue`),
/// for a reconnect to pick up; `forwardedProps.aguiHost.onDisconnect` says the same from a
/// client that cannot set headers.
pub const ON_DISCONNECT_HEADER: &str = "x-agui-on-disconnect";

/// The run log and what a disconnect does, shared by every handler.
#[derive(Debug)]
pub struct Resumable {
    logs: Arc<RunLogs>,
    /// What a disconnect does, unless the request asks (see [`Resumable::continues`]).
    on_disconnect: OnDisconnect,
    /// How long a run that goes on after a disconnect waits for a reader.
    grace: Duration,
    /// The caps on reconnect readers (`runs.max_readers_per_run`, `runs.max_readers`).
    readers: ReaderSlots,
    /// The log shared by replicas, with `threads.store = "redis"`.
    shared: Option<SharedRuns>,
}

impl Resumable {
    /// `None` when runs are not logged (`threads.store = "off"`).
    ///
    /// # Errors
    /// With the Redis store: Redis cannot be reached or its URL is malformed.
    pub async fn from_settings(settings: &Settings) -> Result<Option<Arc<Self>>, StoreError> {
        let shared = match settings.threads.store {
            ThreadStoreKind::Off => return Ok(None),
            ThreadStoreKind::Memory => None,
            ThreadStoreKind::Redis => Some(shared_runs(settings).await?),
        };
        let logs = Arc::new(RunLogs::new(LogLimits::from_settings(&settings.runs)));
        logs.sweep_in_background();
        Ok(Some(Arc::new(Resumable {
            logs,
            on_disconnect: settings.runs.on_disconnect,
            grace: Duration::from_secs(settings.runs.reconnect_grace_secs),
            readers: ReaderSlots::new(settings.runs.max_readers_per_run, settings.runs.max_readers),
            shared,
        })))
    }

    /// Whether a run goes on after its client disconnects: by default only when the request
    /// asked for it, since a standard client stops a run by closing its connection (its stop
    /// button, `abortRun()`), and going on would bill a model for an answer the user stopped.
    pub fn continues(&self, headers: &HeaderMap, forwarded_props: Option<&Value>) -> bool {
        match self.on_disconnect {
            OnDisconnect::Cancel => false,
            OnDisconnect::Continue => true,
            OnDisconnect::Auto => asks_to_continue(headers, forwarded_props),
        }
    }
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

/// The shared log on a connection of its own: a busy run log never queues behind threads.
async fn shared_runs(settings: &Settings) -> Result<SharedRuns, StoreError> {
    let threads = &settings.threads;
    let reply_timeout = Duration::from_millis(threads.redis_timeout_ms.max(1));
    let connection = crate::threads::redis::connect(&threads.redis_url, reply_timeout).await?;
    let client = redis::Client::open(threads.redis_url.as_str())
        .map_err(|error| StoreError::Backend(error.to_string()))?;
    let limits = SharedLimits {
        lease_ttl: Duration::from_secs(settings.runs.lease_ttl_secs.max(1)),
        log_ttl: Duration::from_secs(settings.runs.log_ttl_secs),
        max_run_events: settings.runs.log_max_run_events,
        reply_timeout,
    };
    SharedRuns::start(connection, client, limits, Arc::new(lost_frame))
        .await
        .map_err(|error| StoreError::Backend(error.to_string()))
}

/// The `RUN_ERROR` `run_lost` frame a reader appends when a run's owner is gone.
fn lost_frame(run_id: &str, seq: u64) -> Bytes {
    let event = Event {
        body: EventBody::RunError(RunError {
            message: "The server running this run stopped; the run is lost. Please retry.".into(),
            code: Some("run_lost".into()),
            usage: None,
        }),
        timestamp: Some(crate::protocol::now_millis()),
        raw_event: None,
        metadata: None,
    };
    let mut out = format!("id: {run_id}:{seq}\n").into_bytes();
    if let Err(error) = write_frame(&event, &mut out) {
        tracing::error!(%error, "could not encode RUN_ERROR run_lost");
    }
    Bytes::from(out)
}

/// A new run's logs: this process's, and the shared one with Redis. Until the run is driven
/// its run id is only reserved: a refused request gives it back ([`LoggedRun::discard`], or
/// dropping it), so a refusal leaves no run behind that a retry, a reconnect or a stop would
/// meet.
pub(super) struct LoggedRun {
    log: Arc<RunLog>,
    shared: Option<SharedWriter>,
    /// The index to give the run id back to; `None` once the run is driven.
    reserved_in: Option<Arc<RunLogs>>,
}

impl LoggedRun {
    /// The token that stops the run.
    pub(super) fn stop_token(&self) -> tokio_util::sync::CancellationToken {
        self.log.stop_token()
    }

    /// Gives the run id back, here and in Redis, before the refusal is answered: a retry
    /// right after it runs.
    pub(super) async fn discard(mut self) {
        if let Some(logs) = self.reserved_in.take() {
            logs.discard(&self.log);
        }
        if let Some(shared) = self.shared.take() {
            shared.abandon().await;
        }
    }
}

impl Drop for LoggedRun {
    /// A request dropped before its run was driven (its client left while the request was
    /// being admitted). The shared log's claim goes with its writer.
    fn drop(&mut self) {
        if let Some(logs) = self.reserved_in.take() {
            logs.discard(&self.log);
        }
    }
}

/// Opens the log of a new run, if runs are logged and the request has a scope. With Redis the
/// run id is claimed there first, so a run id live on another replica is refused too.
pub(super) async fn open(
    state: &AppState,
    agent: &str,
    scope: Option<&str>,
    run_id: &str,
) -> Result<Option<LoggedRun>, ApiError> {
    let (Some(resumable), Some(scope)) = (state.runs.as_deref(), scope) else {
        return Ok(None);
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let shared = match &resumable.shared {
        Some(shared) => {
            let keys = RunKeys::new(run_id, agent, scope);
            Some(
                shared
                    .claim(keys, stop.clone())
                    .await
                    .map_err(shared_error)?,
            )
        }
        None => None,
    };
    match resumable.logs.open_with_stop(run_id, agent, scope, stop) {
        Ok(log) => Ok(Some(LoggedRun {
            log,
            shared,
            reserved_in: Some(Arc::clone(&resumable.logs)),
        })),
        Err(OpenError::InProgress) => {
            if let Some(shared) = shared {
                shared.abandon().await;
            }
            Err(in_progress())
        }
    }
}

fn in_progress() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "run_in_progress",
        "a run with this runId is still streaming; reconnect to it with \
         GET /<agent>/runs/<runId>/events, or use a new runId",
    )
}

fn shared_error(error: SharedError) -> ApiError {
    match error {
        SharedError::InProgress => in_progress(),
        SharedError::Read(error) => read_error(error),
        SharedError::Backend(message) => {
            tracing::error!(error = %message, "the run log in Redis is unavailable");
            // The thread store's answer: one Redis, one way of saying it is not answering.
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "thread_store_unavailable",
                "the store is not answering; please retry",
            )
            .with_retry_after(1)
        }
    }
}

/// Starts the task that drives a logged run and answers with the first reader of its log.
/// `continues`: the run goes on after its client disconnects (see [`Resumable::continues`]);
/// otherwise it is stopped as soon as its last reader is gone.
pub(super) fn drive(
    state: &AppState,
    mut run: LoggedRun,
    pump: Pump,
    span: tracing::Span,
    continues: bool,
) -> Body {
    let grace = match state.runs.as_deref() {
        Some(resumable) if continues => resumable.grace,
        _ => Duration::ZERO,
    };
    run.reserved_in = None;
    let log = Arc::clone(&run.log);
    let shared = run.shared.take();
    // Attached before the driver starts, so the run never looks abandoned at its start.
    let first_reader = log.follow(0);
    state
        .shutdown
        .tasks()
        .spawn(drive_run(log, pump, grace, shared).instrument(span));
    match first_reader {
        Ok(follower) => reader_body(Reader::Local(follower), None, state.keep_alive),
        // A new log starts at 0; should that ever change, fail the connection, not the run.
        Err(_) => Body::from_stream(stream::once(async {
            Err::<Bytes, _>(std::io::Error::other("run log unavailable"))
        })),
    }
}

/// Steps the pump until the run's terminal event, appending each batch to the log (and handing
/// it to the shared log's appender), while a watchdog stops the run once it has had no reader,
/// here or on another replica, for `grace`.
async fn drive_run(
    log: Arc<RunLog>,
    mut pump: Pump,
    grace: Duration,
    shared: Option<SharedWriter>,
) {
    let _broken = BreakOffOnDrop(Arc::clone(&log));
    let presence = shared.as_ref().map(SharedWriter::presence);
    let watchdog = tokio::spawn(stop_when_abandoned(Arc::clone(&log), grace, presence));
    while let Some(batch) = pump.next_batch().await {
        if batch.as_ref() == KEEP_ALIVE_FRAME {
            continue;
        }
        let over = pump.is_over();
        log.append(batch.clone(), over);
        // A batch with no frame (token usage alone) is not worth a round trip to Redis.
        if let Some(shared) = shared.as_ref().filter(|_| over || !batch.is_empty()) {
            shared.append(batch, over).await;
        }
        if over {
            break;
        }
    }
    watchdog.abort();
}

/// Stops the run once it has had no reader for `grace`: none attached here, and none on
/// another replica (whose readers keep a presence key fresh in Redis).
async fn stop_when_abandoned(log: Arc<RunLog>, grace: Duration, presence: Option<Presence>) {
    loop {
        log.abandoned(grace).await;
        let Some(presence) = &presence else { break };
        if !presence.attached().await {
            break;
        }
        // Read elsewhere: once that reader leaves, the grace period starts again.
        while presence.attached().await {
            tokio::time::sleep(PRESENCE_POLL).await;
        }
    }
    tracing::info!(
        grace_secs = grace.as_secs_f64(),
        "no reader attached; stopping the run"
    );
    log.stop_token().cancel();
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
///
/// A reconnect's `slot` is its place under the reader caps, held as long as the body.
fn reader_body(reader: Reader, slot: Option<ReaderSlot>, keep_alive: Duration) -> Body {
    let chunks = stream::unfold((reader, slot), move |(mut follower, slot)| async move {
        let chunk = match follower.next(keep_alive).await? {
            Next::Frames { bytes, .. } => Ok(bytes),
            Next::Idle => Ok(Bytes::from_static(KEEP_ALIVE_FRAME)),
            Next::Broken => Err(std::io::Error::other(
                "the run ended without a terminal event",
            )),
            Next::Expired => Err(std::io::Error::other("the reader fell behind the run log")),
            Next::Unavailable => Err(std::io::Error::other("the run log is unavailable")),
        };
        Some((chunk, (follower, slot)))
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
    let found = find(&state, &agent, &run_id, &headers, principal.as_ref()).await?;
    let last_event_id = match headers.get("last-event-id") {
        Some(value) => Some(value.to_str().map_err(|_| invalid_cursor())?.to_owned()),
        None => query.last_event_id,
    };
    let cursor = match last_event_id.as_deref().map(str::trim) {
        None | Some("") => 0,
        Some(id) => parse_cursor(&run_id, id).ok_or_else(invalid_cursor)?,
    };
    let readers = state.runs.as_deref().map(|resumable| &resumable.readers);
    let run_key = match &found {
        Found::Local(log) => RunLogs::key_of(log),
        Found::Shared(_, run) => run.key().to_owned(),
    };
    let slot = readers
        .map(|readers| readers.acquire(&run_key))
        .transpose()
        .map_err(readers_full)?;
    let reader = match found {
        Found::Local(log) => Reader::Local(log.follow(cursor).map_err(read_error)?),
        Found::Shared(shared, run) => Reader::Shared(Box::new(
            shared.follow(run, cursor).await.map_err(shared_error)?,
        )),
    };
    Ok(sse_response(reader_body(reader, slot, state.keep_alive)))
}

/// 429 with `Retry-After`: readers come and go, so the same request may well succeed soon.
fn readers_full(refusal: ReaderRefusal) -> ApiError {
    let message = match refusal {
        ReaderRefusal::RunFull => {
            "this run already has as many readers as the server allows; close one and retry"
        }
        ReaderRefusal::ServerFull => {
            "the server is reading as many runs as it allows; please retry"
        }
    };
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, "too_many_readers", message).with_retry_after(1)
}

fn read_error(error: ReadError) -> ApiError {
    match error {
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
    }
}

/// `POST /{agent}/runs/{run_id}/stop`: ends a live run with the `cancelled` outcome; a run
/// that already ended is left as it is.
pub(super) async fn stop_run(
    State(state): State<AppState>,
    Path((agent, run_id)): Path<(String, String)>,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
) -> Result<Response, ApiError> {
    let found = find(&state, &agent, &run_id, &headers, principal.as_ref()).await?;
    let ended = match &found {
        Found::Local(log) => log.is_ended(),
        Found::Shared(_, run) => run.is_ended(),
    };
    if ended {
        let body = json!({"runId": run_id, "status": "ended"});
        return Ok((StatusCode::OK, Json(body)).into_response());
    }
    match found {
        Found::Local(log) => log.stop_token().cancel(),
        Found::Shared(shared, run) => shared.request_stop(&run).await.map_err(shared_error)?,
    }
    let body = json!({"runId": run_id, "status": "stopping"});
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

/// Where a run's log was found: here, or in Redis (a run another replica owns, or one this
/// process no longer keeps).
enum Found {
    Local(Arc<RunLog>),
    Shared(SharedRuns, SharedRun),
}

/// The run, if it is kept and the request's scope may see it; 404 otherwise, alike for a run
/// that never existed, has expired, or belongs to someone else.
async fn find(
    state: &AppState,
    agent: &str,
    run_id: &str,
    headers: &HeaderMap,
    principal: Option<&Extension<Principal>>,
) -> Result<Found, ApiError> {
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
    if let Some(log) = resumable.logs.get(run_id, agent, &scope) {
        return Ok(Found::Local(log));
    }
    let shared = resumable.shared.as_ref().ok_or_else(not_found)?;
    let keys = RunKeys::new(run_id, agent, &scope);
    match shared.find(keys).await.map_err(shared_error)? {
        Some(run) => Ok(Found::Shared(shared.clone(), run)),
        None => Err(not_found()),
    }
}

fn invalid_cursor() -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "invalid_last_event_id",
        "Last-Event-ID must be an id this run's stream carried: `<runId>:<seq>`",
    )
}
