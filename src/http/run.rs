//! `POST /` and `POST /{agent}`: decode a `RunAgentInput`, start the agent, and stream its
//! updates through the run encoder as SSE.

use std::convert::Infallible;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use futures_util::{stream, FutureExt, Stream, StreamExt};
use tracing::Instrument;

use super::{ApiError, AppState};
use crate::agent::{AgentStream, AgentUpdate, RunRequest};
use crate::protocol::{RunAgentInput, RunEncoder, KEEP_ALIVE_FRAME};

/// Most bytes gathered into one body chunk when several updates are ready at once: batching
/// saves a write per event under load without holding back a slow stream.
const MAX_BATCH_BYTES: usize = 16 * 1024;

pub(super) async fn run_default_agent(
    State(state): State<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let agent = state.default_agent.clone();
    run_agent(state, &agent, body)
}

pub(super) async fn run_named_agent(
    State(state): State<AppState>,
    Path(agent): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    run_agent(state, &agent, body)
}

fn run_agent(
    state: AppState,
    agent_name: &str,
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
    let input = decode_input(body)?;
    let request = RunRequest::from(input);
    let span = tracing::info_span!(
        "run",
        agent = %agent_name,
        thread_id = %request.thread_id,
        run_id = %request.run_id,
    );
    let encoder = RunEncoder::new(
        request.version,
        request.thread_id.clone(),
        request.run_id.clone(),
    );
    let updates = span.in_scope(|| agent.run(request))?;
    let body = Body::from_stream(event_stream(encoder, updates, state.keep_alive, span));
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    // Tells nginx-style proxies not to buffer the stream.
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(response)
}

/// Decodes the body: a JSON syntax error is 400, a well-formed body of the wrong shape 422, a
/// body over the limit 413. Any content type is accepted: the body is what matters.
fn decode_input(body: Result<Bytes, BytesRejection>) -> Result<RunAgentInput, ApiError> {
    let bytes = body.map_err(|rejection| {
        let status = rejection.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                status,
                "payload_too_large",
                "the request body is larger than server.body_limit_bytes",
            )
        } else {
            ApiError::new(status, "invalid_body", rejection.body_text())
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|error| {
        use serde_json::error::Category;
        match error.classify() {
            Category::Syntax | Category::Eof | Category::Io => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                format!("the body is not valid JSON: {error}"),
            ),
            Category::Data => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                format!("the body is not a valid RunAgentInput: {error}"),
            ),
        }
    })
}

/// The per-run pump between the agent and the response body.
struct Pump {
    encoder: RunEncoder,
    /// `None` once the run ended: dropping the agent stream releases the upstream at once.
    updates: Option<AgentStream>,
    keep_alive: Duration,
    started_at: Instant,
    bytes_sent: usize,
}

/// The SSE body: `RUN_STARTED` at once, then the agent's updates (batched when several are
/// ready), keep-alive comments while idle, and exactly one terminal event. A panic in the agent
/// ends the run with `RUN_ERROR`; it never reaches the server.
fn event_stream(
    encoder: RunEncoder,
    updates: AgentStream,
    keep_alive: Duration,
    span: tracing::Span,
) -> impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static {
    let pump = Pump {
        encoder,
        updates: Some(updates),
        keep_alive,
        started_at: Instant::now(),
        bytes_sent: 0,
    };
    stream::unfold(pump, move |pump| pump.step().instrument(span.clone()))
}

impl Pump {
    async fn step(mut self) -> Option<(Result<Bytes, Infallible>, Pump)> {
        let mut out = Vec::new();
        let updates = self.updates.as_mut()?;
        if self.bytes_sent == 0 {
            // RUN_STARTED goes out before the model is even called: time to first byte is ours.
            self.write_or_fail(|encoder, out| encoder.start(out), &mut out);
        } else {
            match tokio::time::timeout(
                self.keep_alive,
                AssertUnwindSafe(updates.next()).catch_unwind(),
            )
            .await
            {
                Err(_idle) => return Some((Ok(Bytes::from_static(KEEP_ALIVE_FRAME)), self)),
                Ok(next) => self.handle(next, &mut out),
            }
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
        self.bytes_sent += out.len();
        Some((Ok(Bytes::from(out)), self))
    }

    fn handle(
        &mut self,
        next: Result<
            Option<Result<AgentUpdate, crate::agent::AgentError>>,
            Box<dyn std::any::Any + Send>,
        >,
        out: &mut Vec<u8>,
    ) {
        match next {
            Err(_panic) => {
                tracing::error!("the agent panicked; ending the run");
                self.end_with_error("internal_error", "An internal error ended the run.", out);
            }
            Ok(None) => {
                self.write_or_fail(|encoder, out| encoder.finish(out), out);
                self.end("finished");
            }
            Ok(Some(Err(error))) => {
                tracing::warn!(code = error.code(), %error, "run failed");
                self.end_with_error(error.code(), &error.public_message(), out);
            }
            Ok(Some(Ok(AgentUpdate::Event(body)))) => {
                self.write_or_fail(|encoder, out| encoder.push(body, out), out);
            }
            Ok(Some(Ok(AgentUpdate::Usage(usage)))) => self.encoder.add_usage(usage),
            Ok(Some(Ok(AgentUpdate::Interrupt(interrupt)))) => {
                self.encoder.add_interrupt(interrupt)
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

    fn end_with_error(&mut self, code: &str, message: &str, out: &mut Vec<u8>) {
        if let Err(error) = self.encoder.fail(code, message, out) {
            tracing::error!(%error, "could not encode RUN_ERROR");
        }
        self.end(code);
    }

    fn end(&mut self, outcome: &str) {
        self.updates = None;
        tracing::info!(
            outcome,
            elapsed_ms = u64::try_from(self.started_at.elapsed().as_millis()).unwrap_or(u64::MAX),
            "run ended"
        );
    }
}

impl Drop for Pump {
    fn drop(&mut self) {
        if self.updates.is_some() {
            // The client went away mid-run (disconnect or Stop): dropping the agent stream here
            // closes the upstream request; nothing keeps running.
            tracing::info!(
                elapsed_ms =
                    u64::try_from(self.started_at.elapsed().as_millis()).unwrap_or(u64::MAX),
                "client disconnected; run cancelled"
            );
        }
    }
}
