//! `POST /` and `POST /{agent}`: decode a `RunAgentInput` (see `decode`), start the agent, and stream its
//! updates through the run encoder as SSE.
//!
//! The pump owns everything a run holds for its stream's whole life: its concurrency slot and
//! metrics ([`RunGuard`]), its deadline, and the shutdown token that ends it with `RUN_ERROR`
//! `shutdown` once the grace period is over.

use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use axum::Extension;
use bytes::BytesMut;
use futures_util::{FutureExt, StreamExt};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tokio_util::task::TaskTracker;

use super::auth::Principal;
use super::decode;
use super::metrics::RunGuard;
use super::threads::{self, Prepared, ThreadRun};
use super::{ApiError, AppState};
use crate::agent::{AgentStream, AgentUpdate, RunRequest};
use crate::protocol::{EventBody, RunEncoder, KEEP_ALIVE_FRAME};
use crate::telemetry::genai;

/// Most bytes gathered into one body chunk when several updates are ready at once: batching
/// saves a write per event under load without holding back a slow stream.
const MAX_BATCH_BYTES: usize = 16 * 1024;

/// The block a run's batches are packed into (see `Pump::seal`): a few dozen paced frames, and
/// at most this much left unused at the end of a run that its log keeps.
const FRAME_BLOCK_BYTES: usize = 2 * 1024;

pub(super) async fn run_default_agent(
    State(state): State<AppState>,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let agent = state.default_agent.clone();
    let scopes = scopes(&state, &headers, principal.as_ref());
    run_agent(state, &agent, &headers, scopes, body).await
}

pub(super) async fn run_named_agent(
    State(state): State<AppState>,
    Path(agent): Path<String>,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let scopes = scopes(&state, &headers, principal.as_ref());
    run_agent(state, &agent, &headers, scopes, body).await
}

/// A request's scopes: its thread's (`None`: no thread) and the caller's, which approval ids
/// and tools' idempotency keys bind whether or not there is a thread.
fn scopes(
    state: &AppState,
    headers: &HeaderMap,
    principal: Option<&Extension<Principal>>,
) -> (Option<String>, String) {
    let principal = principal.map(|p| &p.0);
    let thread = state
        .threads
        .as_deref()
        .and_then(|threads| threads::scope(threads, headers, principal));
    let caller = threads::caller_scope(thread.as_deref(), principal);
    (thread, caller)
}

async fn run_agent(
    state: AppState,
    agent_name: &str,
    headers: &HeaderMap,
    (scope, caller): (Option<String>, String),
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let Some(agent) = state.agents.get(agent_name) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_agent",
            format!(
                "no agent named `{}`; this server has: {}",
                agent_name.chars().take(64).collect::<String>(),
                state.agents.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        ));
    };
    let bytes = body.map_err(|rejection| decode::body_rejection(&rejection))?;
    let input = decode::decode_run_input(&bytes, &state.input_limits)?;
    // After validation, so a malformed request is told so even when the server is full.
    let permit = state.limits.try_acquire()?;
    let mut request = RunRequest::from(input);
    request.scope = caller;
    // The run id is reserved first, so a retry of a live run is told so before it touches the
    // thread; every refusal after this gives it back.
    let log = super::runs::open(&state, agent_name, scope.as_deref(), &request.run_id).await?;
    let continues = state
        .runs
        .as_deref()
        .is_some_and(|resumable| resumable.continues(headers, request.forwarded_props.as_ref()));
    // A child of the request's HTTP server span, which continued the caller's trace.
    let span = genai::run_span(agent_name, &request.thread_id, &request.run_id);
    let mut encoder = RunEncoder::new(
        request.version,
        request.thread_id.clone(),
        request.run_id.clone(),
    );
    if log.is_some() {
        encoder = encoder.with_event_ids();
    }
    let started = start(&state, agent.as_ref(), agent_name, scope, request, &span).await;
    let (updates, thread) = match started {
        Ok(started) => started,
        Err(refused) => {
            if let Some(log) = log {
                log.discard().await;
            }
            return Err(refused);
        }
    };
    let pump = Pump {
        lease_lost: thread.as_ref().map(|thread| thread.lost()),
        cancel: log.as_ref().map(|log| log.stop_token()),
        thread,
        encoder,
        updates: Some(updates),
        keep_alive: state.keep_alive,
        deadline: state.limits.deadline.map(|limit| Instant::now() + limit),
        stop: state.shutdown.stop_token(),
        tasks: state.shutdown.tasks(),
        guard: Some(state.metrics.run_started(agent_name, permit)),
        started_at: Instant::now(),
        bytes_sent: 0,
        span: span.clone(),
        last_write: Instant::now(),
        waits: None,
        batch: Vec::new(),
        frames: BytesMut::new(),
    };
    let body = match log {
        Some(log) => super::runs::drive(&state, log, pump, span, continues),
        None => outbox::spawn(pump, span, state.stream_buffer),
    };
    Ok(sse_response(body))
}

/// Takes the request's thread (hydrate, or lease and history check) and starts the agent: the
/// steps that may still refuse the run with a 4xx.
async fn start(
    state: &AppState,
    agent: &dyn crate::agent::Agent,
    agent_name: &str,
    scope: Option<String>,
    mut request: RunRequest,
    span: &tracing::Span,
) -> Result<(AgentStream, Option<Box<ThreadRun>>), ApiError> {
    let prepared = threads::prepare(state, agent_name, scope, &mut request).await?;
    let run = |request: RunRequest| {
        span.in_scope(|| agent.run(request))
            .inspect_err(|refused| genai::record_run_outcome(span, refused.code(), true))
    };
    Ok(match prepared {
        Prepared::Stateless => (run(request)?, None),
        Prepared::Hydrate(updates) => (updates, None),
        Prepared::Run(thread) => (run(request)?, Some(thread)),
    })
}

/// A response streaming `body` as server-sent events, never cached or buffered on the way.
pub(super) fn sse_response(body: Body) -> Response {
    let mut response = Response::new(body);
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

/// The per-run pump between the agent and the response body (or, for a logged run, the
/// run's log: see `super::runs`).
pub(super) struct Pump {
    encoder: RunEncoder,
    /// `None` once the run ended: dropping the agent stream releases the upstream at once.
    updates: Option<AgentStream>,
    keep_alive: Duration,
    /// When the run must end with `run_deadline`; `None` for no limit.
    deadline: Option<Instant>,
    /// Cancelled when the shutdown grace period is over.
    stop: CancellationToken,
    /// Where a save that outlives the pump runs, so that shutdown waits for it.
    tasks: TaskTracker,
    /// The run's slot and metrics; dropped (slot freed) when the run ends or the pump drops.
    guard: Option<RunGuard>,
    started_at: Instant,
    bytes_sent: usize,
    /// The run's thread record and lease; saved and released when the run ends.
    thread: Option<Box<ThreadRun>>,
    /// Cancelled when a newer run took the thread (or its lease could not be renewed).
    lease_lost: Option<CancellationToken>,
    /// The run's span, open as long as the response body: the outcome is recorded on it.
    span: tracing::Span,
    /// Cancelled to stop a logged run (a stop request, or no reader for the grace period).
    cancel: Option<CancellationToken>,
    /// When the last chunk was written: the keep-alive comment counts from it.
    last_write: Instant,
    /// The timers and signals `wait` selects on, made at its first call.
    waits: Option<Box<Waits>>,
    /// Where a batch is encoded, kept from batch to batch so that it grows once per run rather
    /// than from nothing for every batch.
    batch: Vec<u8>,
    /// Where encoded batches are copied to leave (see `seal`).
    frames: BytesMut,
}

/// What a run waits on besides its agent, kept across wake-ups (see `Pump::wait`).
struct Waits {
    idle: Pin<Box<Sleep>>,
    deadline: Option<Pin<Box<Sleep>>>,
    stop: Pin<Box<WaitForCancellationFutureOwned>>,
    lease_lost: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    cancel: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
}

/// What polling the agent stream gave: an update, its end, or a panic.
type Polled =
    Result<Option<Result<AgentUpdate, crate::agent::AgentError>>, Box<dyn std::any::Any + Send>>;

/// Why the pump woke up.
#[allow(clippy::large_enum_variant)] // a local, moved once per step; boxing buys nothing
enum Wake {
    Next(Polled),
    Idle,
    Deadline,
    Shutdown,
    Superseded,
    Cancelled,
}

impl Pump {
    /// Whether the terminal event has been written.
    pub(super) fn is_over(&self) -> bool {
        self.updates.is_none()
    }

    /// The next body chunk: `RUN_STARTED` first, then whatever the next wake-up gives (several
    /// updates when they are ready at once), or a keep-alive comment; `None` after the end.
    pub(super) async fn next_batch(&mut self) -> Option<Bytes> {
        self.updates.as_ref()?;
        let mut out = std::mem::take(&mut self.batch);
        let events_before = self.encoder.events_written();
        if self.bytes_sent == 0 {
            // RUN_STARTED goes out before the model is even called: time to first byte is ours.
            self.write_or_fail(|encoder, out| encoder.start(out), &mut out);
        } else {
            let wake = self.wait().await;
            if let Wake::Idle = wake {
                self.batch = out;
                self.count_write(0, KEEP_ALIVE_FRAME.len());
                self.last_write = Instant::now();
                return Some(Bytes::from_static(KEEP_ALIVE_FRAME));
            }
            self.on_wake(wake, &mut out);
            while out.len() < MAX_BATCH_BYTES {
                let Some(updates) = self.updates.as_mut() else {
                    break;
                };
                match AssertUnwindSafe(updates.next())
                    .catch_unwind()
                    .now_or_never()
                {
                    Some(next) => self.handle(next, &mut out),
                    None => break,
                }
            }
        }
        Some(self.settle(out, events_before).await)
    }

    /// Ends the run at once with `RUN_ERROR` `code` (the agent stream, and with it the
    /// upstream request, goes now); the final chunk to send. `None` if the run was over.
    pub(super) async fn end_now(&mut self, code: &str, message: &str) -> Option<Bytes> {
        self.updates.as_ref()?;
        let mut out = std::mem::take(&mut self.batch);
        let events_before = self.encoder.events_written();
        self.end_with_error(code, message, &mut out);
        Some(self.settle(out, events_before).await)
    }

    /// Counts a chunk about to leave; once it holds the terminal event, frees the run's slot and
    /// saves its thread.
    async fn settle(&mut self, mut out: Vec<u8>, events_before: u64) -> Bytes {
        self.bytes_sent += out.len();
        self.last_write = Instant::now();
        let events = self.encoder.events_written() - events_before;
        self.count_write(events, out.len());
        if self.updates.is_none() {
            // The terminal event is in `out`: free the run's slot now, not when the client has
            // read it or the connection closes.
            self.guard = None;
            // Saved before the terminal event leaves, so the client's next run finds it.
            if let Some(thread) = self.thread.take() {
                thread.finish().await;
            }
        }
        let batch = self.seal(&out);
        out.clear();
        self.batch = out;
        batch
    }

    /// `batch` as it leaves: copied into the run's current block of frames and split off it, so
    /// that a paced run's one-frame batches share a few allocations instead of taking one each
    /// (and a second when the log and its reader both hold one), and a run's log keeps its
    /// frames packed: a vector kept with its spare capacity cost about three times its bytes.
    fn seal(&mut self, batch: &[u8]) -> Bytes {
        if self.frames.capacity() < batch.len() {
            self.frames = BytesMut::with_capacity(batch.len().max(FRAME_BLOCK_BYTES));
        }
        self.frames.extend_from_slice(batch);
        self.frames.split().freeze()
    }

    /// Waits for the next thing that moves the run. The timers and signals live as long as the
    /// run, so a wake-up per model chunk re-arms nothing: the keep-alive timer is moved only
    /// when it fires early (it counts from the last write).
    async fn wait(&mut self) -> Wake {
        let keep_alive = self.keep_alive;
        let waits = self.waits.get_or_insert_with(|| {
            Box::new(Waits {
                idle: Box::pin(tokio::time::sleep(keep_alive)),
                deadline: self
                    .deadline
                    .map(|deadline| Box::pin(tokio::time::sleep_until(deadline))),
                stop: Box::pin(self.stop.clone().cancelled_owned()),
                lease_lost: self
                    .lease_lost
                    .clone()
                    .map(|token| Box::pin(token.cancelled_owned())),
                cancel: self
                    .cancel
                    .clone()
                    .map(|token| Box::pin(token.cancelled_owned())),
            })
        });
        let Some(updates) = self.updates.as_mut() else {
            return Wake::Next(Ok(None));
        };
        loop {
            // Biased: once the grace period or the deadline is over, a busy agent cannot keep
            // the run going by always having the next update ready.
            let wake = tokio::select! {
                biased;
                () = &mut waits.stop => Wake::Shutdown,
                () = until(waits.deadline.as_mut()) => Wake::Deadline,
                () = until(waits.lease_lost.as_mut()) => Wake::Superseded,
                () = until(waits.cancel.as_mut()) => Wake::Cancelled,
                next = AssertUnwindSafe(updates.next()).catch_unwind() => Wake::Next(next),
                () = &mut waits.idle => Wake::Idle,
            };
            if let Wake::Idle = wake {
                let due = self.last_write + keep_alive;
                if Instant::now() < due {
                    waits.idle.as_mut().reset(due);
                    continue;
                }
                waits.idle.as_mut().reset(Instant::now() + keep_alive);
            }
            return wake;
        }
    }

    /// What a wake-up other than idleness writes: the agent's next update, or the end the
    /// shutdown, the deadline, a newer run on the thread or a stop request gives the run.
    fn on_wake(&mut self, wake: Wake, out: &mut Vec<u8>) {
        match wake {
            Wake::Idle => {}
            Wake::Shutdown => {
                tracing::warn!("the shutdown grace period is over; ending the run");
                self.end_with_error(
                    "shutdown",
                    "The server is shutting down; please retry.",
                    out,
                );
            }
            Wake::Deadline => {
                tracing::warn!("the run reached its deadline; ending it");
                self.end_with_error(
                    "run_deadline",
                    "The run took longer than this server allows.",
                    out,
                );
            }
            Wake::Superseded => {
                tracing::info!("a newer run took the thread; ending this one");
                self.end_with_error(
                    "thread_superseded",
                    "A newer run on this thread took over.",
                    out,
                );
            }
            Wake::Cancelled => self.stop_run(out),
            Wake::Next(next) => self.handle(next, out),
        }
    }

    fn count_write(&self, events: u64, bytes: usize) {
        if let Some(guard) = &self.guard {
            guard.on_write(events, bytes);
        }
    }

    fn handle(&mut self, next: Polled, out: &mut Vec<u8>) {
        match next {
            Err(_panic) => {
                tracing::error!("the agent panicked; ending the run");
                self.end_with_error("internal_error", "An internal error ended the run.", out);
            }
            Ok(None) => {
                self.write_or_fail(|encoder, out| encoder.finish(out), out);
                // Still running unless `finish` failed, which already ended the run with an error.
                if self.updates.is_some() {
                    if let Some(guard) = &mut self.guard {
                        guard.succeeded();
                    }
                    genai::record_run_outcome(&self.span, "finished", false);
                    self.end("finished");
                }
            }
            Ok(Some(Err(error))) => {
                tracing::warn!(code = error.code(), %error, "run failed");
                self.end_with_error(error.code(), &error.public_message(), out);
            }
            Ok(Some(Ok(AgentUpdate::Event(body)))) => {
                if let Some(thread) = &mut self.thread {
                    thread.recorder.observe(&body);
                }
                if let Some(guard) = &mut self.guard {
                    guard.on_update();
                    if is_content(&body) {
                        guard.on_content();
                    }
                }
                self.write_or_fail(|encoder, out| encoder.push(body, out), out);
            }
            Ok(Some(Ok(AgentUpdate::Usage(usage)))) => {
                if let Some(guard) = &mut self.guard {
                    guard.on_update();
                    guard.on_usage(&usage);
                }
                self.encoder.add_usage(usage);
            }
            Ok(Some(Ok(AgentUpdate::Interrupt(interrupt)))) => {
                if let Some(thread) = &mut self.thread {
                    thread.recorder.interrupt(&interrupt);
                }
                self.encoder.add_interrupt(*interrupt)
            }
            Ok(Some(Ok(AgentUpdate::ToolProgress(_)))) => {
                // Only the status middleware shows progress; without it there is nothing to send.
            }
            Ok(Some(Ok(AgentUpdate::ApprovalRequest(request)))) => {
                tracing::error!(
                    tool = %request.tool_name,
                    "an approval request reached the encoder: no approval gate is wired"
                );
                self.end_with_error("internal_error", "An internal error ended the run.", out);
            }
        }
    }

    fn write_or_fail(
        &mut self,
        write: impl FnOnce(&mut RunEncoder, &mut Vec<u8>) -> Result<(), crate::protocol::EncodeError>,
        out: &mut Vec<u8>,
    ) {
        if let Err(error) = write(&mut self.encoder, out) {
            tracing::error!(%error, "the agent produced an invalid event sequence");
            self.end_with_error("internal_error", "An internal error ended the run.", out);
        }
    }

    fn stop_run(&mut self, out: &mut Vec<u8>) {
        tracing::info!("the run was stopped");
        if let Err(error) = self.encoder.cancel("The run was stopped.", out) {
            tracing::error!(%error, "could not encode the end of a stopped run");
        }
        if let Some(guard) = &mut self.guard {
            guard.failed("cancelled");
        }
        genai::record_run_outcome(&self.span, "cancelled", false);
        self.end("cancelled");
    }

    fn end_with_error(&mut self, code: &str, message: &str, out: &mut Vec<u8>) {
        if let Err(error) = self.encoder.fail(code, message, out) {
            tracing::error!(%error, "could not encode RUN_ERROR");
        }
        if let Some(guard) = &mut self.guard {
            guard.failed(code);
        }
        genai::record_run_outcome(&self.span, code, true);
        self.end(code);
    }

    /// The run is over: the agent stream (and with it the upstream request) goes now; the
    /// guard, with the run's slot, once the last bytes are counted (see `step`).
    fn end(&mut self, outcome: &str) {
        self.updates = None;
        tracing::info!(
            outcome,
            elapsed_ms = u64::try_from(self.started_at.elapsed().as_millis()).unwrap_or(u64::MAX),
            "run ended"
        );
    }
}

/// Waits for `future`, or forever when there is none.
async fn until<F: std::future::Future<Output = ()> + Unpin>(future: Option<&mut F>) {
    match future {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

/// Whether the user sees model output in this event: what time-to-first-token measures.
fn is_content(body: &EventBody) -> bool {
    matches!(
        body,
        EventBody::TextMessageContent(_)
            | EventBody::TextMessageChunk(_)
            | EventBody::ReasoningMessageContent(_)
            | EventBody::ReasoningMessageChunk(_)
            | EventBody::ToolCallStart(_)
            | EventBody::ToolCallChunk(_)
    )
}

impl Drop for Pump {
    fn drop(&mut self) {
        if self.updates.is_some() {
            // The client went away mid-run (disconnect or Stop): dropping the agent stream here
            // closes the upstream request; nothing keeps running.
            genai::record_run_outcome(&self.span, "cancelled", false);
            tracing::info!(
                elapsed_ms =
                    u64::try_from(self.started_at.elapsed().as_millis()).unwrap_or(u64::MAX),
                "client disconnected; run cancelled"
            );
        }
        // What the client saw is kept (a disconnect does not roll the thread back); the save
        // cannot be awaited here, so it runs on its own, and shutdown waits for it.
        if let (Some(thread), Ok(runtime)) =
            (self.thread.take(), tokio::runtime::Handle::try_current())
        {
            self.tasks.spawn_on(thread.finish(), &runtime);
        }
    }
}

mod outbox;
#[cfg(test)]
mod tests;

pub use outbox::StreamBufferLimits;
