//! The life of one run, between the HTTP edge and the agent, the thread store and the run log:
//! admission (a run slot), the run's id reserved in its log, its thread taken (`thread`), the
//! agent started, then the pump (`pump`) stepped by one loop (`sink`) into the client's outbox
//! (`outbox`) or the run's log (`logged`), and the end: the terminal event, the observers
//! finished (`observe`: metrics, span, the thread's save), the slot freed. What can end a run
//! from outside is one value (`stops`). Reconnects and stops of logged runs are here too.
//!
//! Knows no HTTP: the edge decodes the request and names the scope, and maps a [`Refused`] to
//! its status and code; a run's body is a stream of bytes the edge hands to its response.
//!
//! Without a thread store nothing is logged: a task drives the pump into the response's
//! bounded outbox, and dropping the response ends the run. With one, a task drives it into its
//! log and responses read the log, so a client can reconnect.

mod connect;
mod error;
mod limits;
mod logged;
mod observe;
mod outbox;
mod pump;
mod sink;
mod stops;
mod thread;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::OwnedSemaphorePermit;

pub use error::Refused;
pub use limits::{RunLimits, Shutdown};
pub use logged::{lost_frame, DisconnectPolicy, OnDisconnect, Resumable, StopState};
pub use observe::{Outcome, RunObserver};
pub use outbox::StreamBufferLimits;
pub use stops::{Stop, StopSources};

use crate::agent::{Agent, AgentStream, RunRequest};
use crate::protocol::RunEncoder;
use crate::runs::RunRef;
use crate::threads::Threads;
use logged::LoggedRun;
use pump::Pump;
use thread::{Prepared, ThreadRun};

/// What a run's response streams: its SSE bytes, or an error that fails the connection (a log
/// that broke off), never a clean end without a terminal event.
pub type RunBody = Pin<Box<dyn futures_util::Stream<Item = std::io::Result<Bytes>> + Send>>;

/// What every run shares: the stores, the limits, the shutdown.
#[derive(Debug)]
pub struct Sessions {
    /// Threads the server remembers; `None` when `threads.store = "off"`.
    pub threads: Option<Arc<Threads>>,
    /// The run log for reconnects and stops; `None` when runs are not logged.
    pub runs: Option<Arc<Resumable>>,
    pub limits: RunLimits,
    pub shutdown: Shutdown,
    /// How long a stream may be idle before a keep-alive comment goes out.
    pub keep_alive: Duration,
    /// What a client reading slower than the model may hold up (see `outbox`).
    pub stream_buffer: StreamBufferLimits,
}

/// A run as the edge asks for it.
pub struct NewRun<'a> {
    pub agent: &'a dyn Agent,
    pub agent_name: &'a str,
    /// The thread's scope (whose threads the caller may see); `None`: the run has no thread.
    pub thread_scope: Option<String>,
    pub request: RunRequest,
    /// The request asked for its run to go on after a disconnect.
    pub asks_to_continue: bool,
    /// The run's span, open as long as its body; the outcome is recorded on it.
    pub span: tracing::Span,
}

/// A run admitted and started, not yet streaming: [`Session::stream`] starts it.
pub struct Session {
    sessions: Arc<Sessions>,
    slot: Option<OwnedSemaphorePermit>,
    encoder: RunEncoder,
    updates: AgentStream,
    thread: Option<Box<ThreadRun>>,
    log: Option<LoggedRun>,
    continues: bool,
    span: tracing::Span,
}

impl std::fmt::Debug for NewRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewRun")
            .field("agent", &self.agent_name)
            .field("run_id", &self.request.run_id)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("logged", &self.log.is_some())
            .field("thread", &self.thread.is_some())
            .finish_non_exhaustive()
    }
}

impl Sessions {
    /// Admits and starts `run`: a slot, the run id reserved, the thread taken and the agent
    /// started. Every refusal on the way gives back what was taken.
    ///
    /// # Errors
    /// The refusal, before any stream byte.
    pub async fn open(self: &Arc<Self>, run: NewRun<'_>) -> Result<Session, Refused> {
        let NewRun {
            agent,
            agent_name,
            thread_scope,
            mut request,
            asks_to_continue,
            span,
        } = run;
        let slot = self.limits.try_acquire()?;
        // The run id is reserved first, so a retry of a live run is told so before it touches
        // the thread; every refusal after this gives it back.
        let log = match (self.runs.as_deref(), thread_scope.as_deref()) {
            (Some(runs), Some(scope)) => {
                Some(logged::open(runs, agent_name, scope, &request.run_id).await?)
            }
            _ => None,
        };
        let continues = self
            .runs
            .as_deref()
            .is_some_and(|runs| runs.continues(asks_to_continue));
        let mut encoder = RunEncoder::new(
            request.version,
            request.thread_id.clone(),
            request.run_id.clone(),
        )
        .with_parent_run_id(request.parent_run_id.clone());
        if log.is_some() {
            encoder = encoder.with_event_ids();
        }
        let prepared = thread::prepare(
            self.threads.as_ref(),
            agent_name,
            thread_scope,
            &mut request,
        )
        .await;
        let started = match prepared {
            Ok(prepared) => start(agent, prepared, request, &span).await,
            Err(refused) => Err(refused),
        };
        let (updates, thread) = match started {
            Ok(started) => started,
            Err(refused) => {
                if let Some(log) = log {
                    log.discard().await;
                }
                return Err(refused);
            }
        };
        Ok(Session {
            sessions: Arc::clone(self),
            slot,
            encoder,
            updates,
            thread,
            log,
            continues,
            span,
        })
    }

    /// A reconnect to the run (agent, run id) of `scope`: its events after `cursor` (0: all),
    /// then the live run until its terminal event.
    ///
    /// # Errors
    /// No such run for this scope, a cursor the log cannot serve, too many readers.
    pub async fn reconnect(
        &self,
        run: (&str, &str),
        scope: Option<&str>,
        cursor: u64,
    ) -> Result<RunBody, Refused> {
        let (runs, run) = self.logged_run(run, scope)?;
        logged::reconnect(runs, run, cursor, self.keep_alive).await
    }

    /// Stops the run (agent, run id) of `scope`.
    ///
    /// # Errors
    /// No such run for this scope, or the shared log is not answering.
    pub async fn stop(&self, run: (&str, &str), scope: Option<&str>) -> Result<StopState, Refused> {
        let (runs, run) = self.logged_run(run, scope)?;
        logged::stop(runs, run).await
    }

    /// The run log and the run (agent, run id) of `scope`: without a log, or for a request
    /// without a scope, no run is known.
    fn logged_run<'a>(
        &'a self,
        (agent, run_id): (&'a str, &'a str),
        scope: Option<&'a str>,
    ) -> Result<(&'a Resumable, RunRef<'a>), Refused> {
        let (Some(runs), Some(scope)) = (self.runs.as_deref(), scope) else {
            return Err(Refused::RunNotFound);
        };
        let run = RunRef {
            scope,
            agent,
            run_id,
        };
        Ok((runs, run))
    }
}

/// Starts the agent on the prepared request (or answers a hydrate from the record): the last
/// step that may still refuse the run, which then gives its thread back before it answers.
async fn start(
    agent: &dyn Agent,
    prepared: Prepared,
    request: RunRequest,
    span: &tracing::Span,
) -> Result<(AgentStream, Option<Box<ThreadRun>>), Refused> {
    let run = |request: RunRequest| {
        span.in_scope(|| agent.run(request)).map_err(|refused| {
            crate::telemetry::genai::record_run_outcome(span, refused.code(), true);
            Refused::Agent(refused)
        })
    };
    Ok(match prepared {
        Prepared::Stateless => (run(request)?, None),
        Prepared::Hydrate(updates) => (updates, None),
        Prepared::Run(thread) => match run(request) {
            Ok(updates) => (updates, Some(thread)),
            Err(refused) => {
                thread.give_back().await;
                return Err(refused);
            }
        },
    })
}

impl Session {
    /// Starts streaming the run, watched by `observer` (the edge's metrics) besides its span
    /// and thread; the body to answer with.
    pub fn stream(self, observer: Box<dyn RunObserver>) -> RunBody {
        let Session {
            sessions,
            slot,
            encoder,
            updates,
            thread,
            log,
            continues,
            span,
        } = self;
        let stops = StopSources {
            shutdown: sessions.shutdown.stop_token(),
            deadline: sessions
                .limits
                .deadline()
                .map(|limit| tokio::time::Instant::now() + limit),
            superseded: thread.as_ref().map(|thread| thread.lost()),
            requested: log.as_ref().map(LoggedRun::stop_token),
        };
        let mut pump = Pump::new(encoder, updates, stops, sessions.shutdown.tasks())
            .keep_alive(sessions.keep_alive)
            .holding(slot)
            .observed_by(Box::new(observe::SpanOutcome(span.clone())))
            .observed_by(observer);
        let mut context = None;
        if let Some(mut thread) = thread {
            context = thread.take_context();
            pump = pump.observed_by(thread);
        }
        match (log, sessions.runs.as_deref()) {
            (Some(log), Some(runs)) => logged::drive(
                runs,
                log.on_thread(context),
                pump,
                span,
                (continues, sessions.keep_alive),
            ),
            _ => outbox::spawn(pump, span, sessions.stream_buffer),
        }
    }
}

#[cfg(test)]
mod tests;
