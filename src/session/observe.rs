//! What watches a run without steering it: the metrics, the run's span, the thread's recorder.
//! The pump tells each [`RunObserver`] what the agent produced, what was written and how the
//! run ended, and awaits each one's [`RunObserver::finish`] before the terminal event leaves
//! (so a thread is saved before the client can send its next run).

use futures_util::future::BoxFuture;

use crate::agent::AgentUpdate;
use crate::telemetry::genai;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome<'a> {
    /// `RUN_FINISHED` was written.
    Finished,
    /// Stopped on request: `RUN_ERROR` with the cancelled outcome.
    Stopped,
    /// `RUN_ERROR` with this code.
    Failed { code: &'a str },
    /// The client went away mid-run; nothing more was written.
    Disconnected,
}

impl Outcome<'_> {
    /// The outcome as spans and logs name it.
    pub fn name(&self) -> &str {
        match self {
            Outcome::Finished => "finished",
            Outcome::Stopped | Outcome::Disconnected => "cancelled",
            Outcome::Failed { code } => code,
        }
    }
}

/// See the module docs. Every method is called from the run's own task, in order.
pub trait RunObserver: Send + 'static {
    /// An update of the agent, before it is encoded.
    fn on_update(&mut self, update: &AgentUpdate) {
        let _ = update;
    }

    /// Bytes about to be written, holding `events` AG-UI events (a keep-alive holds none).
    fn on_write(&mut self, events: u64, bytes: usize) {
        let _ = (events, bytes);
    }

    /// The run ended (called once).
    fn on_end(&mut self, outcome: Outcome<'_>) {
        let _ = outcome;
    }

    /// The run is over: what must be done before its terminal event leaves. After a
    /// disconnect it runs on a task of its own, which shutdown waits for.
    fn finish(self: Box<Self>) -> BoxFuture<'static, ()> {
        Box::pin(std::future::ready(()))
    }
}

/// The run's span: its outcome is recorded on it.
pub(super) struct SpanOutcome(pub(super) tracing::Span);

impl RunObserver for SpanOutcome {
    fn on_end(&mut self, outcome: Outcome<'_>) {
        let failed = matches!(outcome, Outcome::Failed { .. });
        genai::record_run_outcome(&self.0, outcome.name(), failed);
    }
}
