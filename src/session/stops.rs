//! Everything that can end a run other than its agent, as one value: the shutdown's grace
//! period running out, the run's deadline, a newer run taking its thread, a stop request (or
//! no reader left), and a client too slow to read. The pump waits on [`StopSignals`] beside the
//! agent's stream; the reason it ends a run for is a [`Stop`], which says what the client is
//! told.

use std::future::Future;
use std::pin::Pin;

use tokio::time::{Instant, Sleep};
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Why a run is ended from outside its agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// The shutdown's grace period is over.
    Shutdown,
    /// The run took longer than `server.limits.run_deadline_secs`.
    Deadline,
    /// A newer run took the thread (or the run's lease could not be renewed).
    Superseded,
    /// A stop request, or no reader for the grace period: the run ends `cancelled`, not failed.
    Requested,
    /// The client left the outbox full for `server.slow_client_timeout_secs`.
    ClientTooSlow,
}

impl Stop {
    /// The `RUN_ERROR` code; `None` for a stop the run ends with as cancelled.
    pub fn code(self) -> Option<&'static str> {
        match self {
            Stop::Shutdown => Some("shutdown"),
            Stop::Deadline => Some("run_deadline"),
            Stop::Superseded => Some("thread_superseded"),
            Stop::ClientTooSlow => Some("client_too_slow"),
            Stop::Requested => None,
        }
    }

    /// What the client is told.
    pub fn message(self) -> &'static str {
        match self {
            Stop::Shutdown => "The server is shutting down; please retry.",
            Stop::Deadline => "The run took longer than this server allows.",
            Stop::Superseded => "A newer run on this thread took over.",
            Stop::ClientTooSlow => "The client read the stream too slowly; the run was ended.",
            Stop::Requested => "The run was stopped.",
        }
    }

    /// Logs why the run ends.
    pub(super) fn log(self) {
        match self {
            Stop::Shutdown => tracing::warn!("the shutdown grace period is over; ending the run"),
            Stop::Deadline => tracing::warn!("the run reached its deadline; ending it"),
            Stop::Superseded => tracing::info!("a newer run took the thread; ending this one"),
            Stop::Requested => tracing::info!("the run was stopped"),
            Stop::ClientTooSlow => {
                tracing::warn!("the client read too slowly; ending the run");
            }
        }
    }
}

/// The run's stop sources, as they are known when it starts.
#[derive(Debug, Clone, Default)]
pub struct StopSources {
    /// Cancelled when the shutdown grace period is over.
    pub shutdown: CancellationToken,
    /// When the run must end with `run_deadline`; `None` for no limit.
    pub deadline: Option<Instant>,
    /// Cancelled when a newer run took the thread.
    pub superseded: Option<CancellationToken>,
    /// Cancelled to stop a logged run (a stop request, or no reader for the grace period).
    pub requested: Option<CancellationToken>,
}

/// The sources as futures, made once per run: a wake-up per model chunk re-arms nothing.
pub(super) struct StopSignals {
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    deadline: Option<Pin<Box<Sleep>>>,
    superseded: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    requested: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
}

impl StopSignals {
    pub(super) fn new(sources: &StopSources) -> Self {
        let cancelled = |token: &CancellationToken| Box::pin(token.clone().cancelled_owned());
        StopSignals {
            shutdown: cancelled(&sources.shutdown),
            deadline: sources
                .deadline
                .map(|deadline| Box::pin(tokio::time::sleep_until(deadline))),
            superseded: sources.superseded.as_ref().map(cancelled),
            requested: sources.requested.as_ref().map(cancelled),
        }
    }

    /// The first stop to come. Biased in this order: once the grace period or the deadline is
    /// over, nothing else counts.
    pub(super) async fn next(&mut self) -> Stop {
        tokio::select! {
            biased;
            () = &mut self.shutdown => Stop::Shutdown,
            () = until(self.deadline.as_mut()) => Stop::Deadline,
            () = until(self.superseded.as_mut()) => Stop::Superseded,
            () = until(self.requested.as_mut()) => Stop::Requested,
        }
    }
}

/// Waits for `future`, or forever when there is none.
async fn until<F: Future<Output = ()> + Unpin>(future: Option<&mut F>) {
    match future {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}
