//! What the approval gate asks of the server's memory of decisions: one claim per decision,
//! "is this the first time this call's decision is acted on?", answered atomically. The agent
//! knows no store: the HTTP layer hands each run an implementation bound to the run's scope,
//! agent and thread (over the thread store's ledger), or none when the run has no thread, and
//! then delivery stays at least once across a lost response (see docs/human-in-the-loop.md).

use futures_util::future::BoxFuture;

/// Claims decisions of one run's thread.
pub trait DecisionClaims: Send + Sync + std::fmt::Debug {
    /// Claims the decision on `tool_call_id` that answers the approval whose id has the tag
    /// `approval` (hex) and verifies until `expires` (Unix seconds; `None`: it never expires),
    /// so the claim is remembered at least that long. The tag is part of the claim because a
    /// model may reuse a call id within a thread (some do; the offline model always does): a
    /// later call under the same id is asked about anew, with an id of its own, and its
    /// approval must not be taken for a replay of the earlier one.
    /// `Ok(true)`: the first claim, act on the decision; `Ok(false)`: an earlier run claimed
    /// it, so it was carried out (or is being carried out) already.
    ///
    /// # Errors
    /// The claim could not be recorded: the decision must not be acted on, and the run ends
    /// with the error's code.
    fn claim<'a>(
        &'a self,
        tool_call_id: &'a str,
        approval: &'a str,
        expires: Option<u64>,
    ) -> BoxFuture<'a, Result<bool, ClaimError>>;

    /// Whether an earlier run claimed the decision on `tool_call_id` answering `approval`,
    /// claiming nothing.
    ///
    /// # Errors
    /// As for [`claim`](Self::claim).
    fn is_claimed<'a>(
        &'a self,
        tool_call_id: &'a str,
        approval: &'a str,
    ) -> BoxFuture<'a, Result<bool, ClaimError>>;
}

/// Why a decision could not be claimed: a stable code for `RUN_ERROR` and a message fit for
/// the client (details go to the logs where the error is made).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ClaimError {
    pub code: &'static str,
    pub message: String,
}
