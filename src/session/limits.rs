//! Run limits and the shutdown signal every stream listens to.
//!
//! Neither can be a tower layer: a layer's future ends with the response headers, a run with
//! its last event. So a run takes an owned semaphore permit before its stream opens and the
//! pump holds it until the stream ends or is dropped; the deadline and the shutdown token are
//! awaited by the pump itself.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::Refused;

/// The concurrent-run limit and the per-run deadline.
#[derive(Debug, Clone)]
pub struct RunLimits {
    /// `None`: no limit on concurrent runs.
    slots: Option<Arc<Semaphore>>,
    retry_after_secs: u64,
    /// `None`: runs may stream for as long as they like.
    deadline: Option<Duration>,
}

impl RunLimits {
    /// At most `max_concurrent_runs` runs at once (0: no limit), a refused one told to retry
    /// after `retry_after_secs`; each may stream until `deadline` (`None`: for as long as it
    /// likes).
    pub fn new(
        max_concurrent_runs: usize,
        retry_after_secs: u64,
        deadline: Option<Duration>,
    ) -> Self {
        RunLimits {
            slots: (max_concurrent_runs > 0).then(|| Arc::new(Semaphore::new(max_concurrent_runs))),
            retry_after_secs,
            deadline,
        }
    }

    /// How long a run may stream; `None`: no limit.
    pub fn deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// A slot for one run, or a refusal (with when to retry) when every slot is taken. Never
    /// waits: a queued run would hold its client's connection with nothing to show for it.
    pub fn try_acquire(&self) -> Result<Option<OwnedSemaphorePermit>, Refused> {
        let Some(slots) = &self.slots else {
            return Ok(None);
        };
        match Arc::clone(slots).try_acquire_owned() {
            Ok(permit) => Ok(Some(permit)),
            Err(_) => Err(Refused::TooManyRuns {
                retry_after_secs: self.retry_after_secs,
            }),
        }
    }
}

/// The two stages of a graceful shutdown, shared by the server and every stream, and the
/// tasks that outlive a request (a run driven into its log, a thread saved after a
/// disconnect), which the server waits for before it exits.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    /// Cancelled on SIGTERM/SIGINT: `/ready` reports 503 so load balancers stop routing here.
    draining: CancellationToken,
    /// Cancelled when the grace period is over: every open stream ends with `RUN_ERROR`
    /// `shutdown` at once.
    stop: CancellationToken,
    tasks: TaskTracker,
}

impl Shutdown {
    pub fn new() -> Self {
        Shutdown::default()
    }

    /// The shutdown signal arrived; open streams may still finish.
    pub fn start_draining(&self) {
        self.draining.cancel();
    }

    /// The grace period is over: end every open stream now.
    pub fn stop_streams(&self) {
        self.stop.cancel();
    }

    pub fn is_draining(&self) -> bool {
        self.draining.is_cancelled()
    }

    /// What a pump awaits to learn that it must end its stream.
    pub(super) fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Where work that outlives its request is spawned, so that shutdown waits for it:
    /// otherwise a run driven by its own task, or a thread's last save, could be cut off by
    /// the process exiting after the last connection closed.
    pub(super) fn tasks(&self) -> TaskTracker {
        self.tasks.clone()
    }

    /// Resolves once every task spawned through [`Shutdown::tasks`] has ended (new ones may
    /// still be spawned, and are waited for too).
    pub async fn tasks_ended(&self) {
        self.tasks.close();
        self.tasks.wait().await;
    }
}
