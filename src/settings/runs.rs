//! `[runs]`: what happens to a run whose client disconnects, the bounds of the per-process log
//! that lets a client reconnect to a run, and, with Redis, the owner's lease on the shared log
//! (see `crate::runs`).

use serde::Deserialize;

/// What a run does when its client disconnects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnDisconnect {
    /// `cancel` with `threads.store = "off"` (nothing could resume the run), `continue` with a
    /// store.
    #[default]
    Auto,
    /// The run ends at once and its upstream request is closed.
    Cancel,
    /// The run goes on into its log for a client to reconnect to, until no reader has been
    /// attached for `reconnect_grace_secs`.
    Continue,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(default)]
pub struct RunSettings {
    pub on_disconnect: OnDisconnect,
    /// With `continue`: seconds a run goes on with no reader before it is cancelled.
    pub reconnect_grace_secs: u64,
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
            log_ttl_secs: 300,
            log_max_runs: 10_000,
            log_max_run_events: 100_000,
            log_max_run_bytes: 16 * 1024 * 1024,
            log_max_bytes: 256 * 1024 * 1024,
            lease_ttl_secs: 10,
        }
    }
}
