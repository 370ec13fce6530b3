//! Why a run, a reconnect or a stop is refused before any stream byte: the session's own
//! error, which the HTTP edge maps to a status and a stable code (`crate::http::Code`).

use crate::agent::AgentError;
use crate::runs::{ReadError, ReaderRefusal};
use crate::threads::verify::HistoryMismatch;
use crate::threads::Quota;

/// See the module docs.
#[derive(Debug, thiserror::Error)]
pub enum Refused {
    /// Every run slot is taken; retry after this many seconds.
    #[error("the server is running as many runs as it allows")]
    TooManyRuns { retry_after_secs: u64 },
    /// A run with this run id is still streaming.
    #[error("a run with this runId is still streaming")]
    RunInProgress,
    /// Another run streams on the thread, and the policy is to refuse.
    #[error("another run is still streaming on this thread")]
    ThreadBusy,
    /// The caller's scope is at its thread quota.
    #[error("the scope's thread quota is reached: {0}")]
    ThreadQuotaExceeded(Quota),
    /// The thread store is not answering.
    #[error("the thread store is not answering")]
    StoreUnavailable,
    /// The shared run log is not answering.
    #[error("the run log is not answering")]
    RunLogUnavailable,
    /// The client's history does not match the thread's record.
    #[error(transparent)]
    History(HistoryMismatch),
    /// The agent refused the request as sent.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// No such thread for this caller and agent (and no run streams on it), or no threads are
    /// kept.
    #[error("no such thread")]
    ThreadNotFound,
    /// No such run for this caller and agent (or it expired, or runs are not logged).
    #[error("no such run")]
    RunNotFound,
    /// The reconnect's cursor is before what is kept, or after the run's last event.
    #[error(transparent)]
    Cursor(ReadError),
    /// The run, or the server, has as many reconnect readers as allowed.
    #[error(transparent)]
    TooManyReaders(ReaderRefusal),
}
