//! `[runs]`: what happens to a run whose client disconnects, the bounds of the per-process log
//! that lets a client reconnect to a run, and, with Redis, the owner's lease on the shared log
//! (see `crate::runs`).

use serde::Deserialize;

pub use crate::session::OnDisconnect;

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct RunSettings {
    pub on_disconnect: OnDisconnect,
    /// A run that goes on after a disconnect: seconds it goes on with no reader before it is
    /// cancelled.
    pub reconnect_grace_secs: u64,
    /// Most reconnect readers (`GET …/runs/<runId>/events`) of one run at once (0: no cap).
    pub max_readers_per_run: usize,
    /// Most reconnect readers of all runs at once in this process (0: no cap).
    pub max_readers: usize,
    /// Seconds a run's log is kept after its terminal event.
    pub log_ttl_secs: u64,
    /// Most runs kept (the oldest is forgotten first).
    pub log_max_runs: usize,
    /// Most events kept per run (the oldest go first; a cursor before them is too old).
    pub log_max_run_events: usize,
    /// Most bytes kept per run.
    pub log_max_run_bytes: usize,
    /// Most bytes kept for all runs.
    pub log_max_bytes: usize,
    /// With `threads.store = "redis"`: seconds a run's owner may go silent (its lease, renewed
    /// every third of it) before readers on other replicas end the run with `run_lost`.
    pub lease_ttl_secs: u64,
}

impl Default for RunSettings {
    fn default() -> Self {
        RunSettings {
            on_disconnect: OnDisconnect::Auto,
            reconnect_grace_secs: 60,
            max_readers_per_run: 8,
            max_readers: 1024,
            log_ttl_secs: 300,
            log_max_runs: 10_000,
            log_max_run_events: 100_000,
            log_max_run_bytes: 16 * 1024 * 1024,
            log_max_bytes: 256 * 1024 * 1024,
            lease_ttl_secs: 10,
        }
    }
}
