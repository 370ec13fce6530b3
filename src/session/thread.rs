//! A run on a thread the server remembers: what it does before it starts (hydrate, or take the
//! thread's lease, load its record, check the client's history against it), the claims its
//! approval gate makes on the thread store's ledger, and the save when it ends, as the run's
//! observer ([`ThreadRun`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::{BoxFuture, FutureExt};
use futures_util::stream::{self, StreamExt};

use super::observe::RunObserver;
use super::Refused;
use crate::agent::{AgentStream, AgentUpdate, ClaimError, DecisionClaims, RunRequest};
use crate::threads::{
    verify, AgentTools, ConcurrentRunPolicy, DecisionKey, HistoryPolicy, Lease, LeaseError,
    RecordedRun, StoreError, ThreadKey, ThreadRecord, ThreadRecorder, Threads,
};

/// What the request does on its thread.
pub(super) enum Prepared {
    /// No thread: the store is off, or the request has no scope.
    Stateless,
    /// A known thread with `messages: []`: the stored conversation, without a model call.
    Hydrate(AgentStream),
    /// A run that is recorded and saved when it ends.
    Run(Box<ThreadRun>),
}

/// Everything a recorded run holds until it ends; it watches the run as its observer.
#[derive(Debug)]
pub(super) struct ThreadRun {
    threads: Arc<Threads>,
    lease: Lease,
    recorder: ThreadRecorder,
    /// What a client connecting to the thread needs of this run (`super::connect`), until the
    /// run's log takes it.
    context: Option<bytes::Bytes>,
}

/// Prepares `request` on its thread: hydrate, or take the lease, load the record and check
/// (and repair) the client's history against it.
pub(super) async fn prepare(
    threads: Option<&Arc<Threads>>,
    agent: &str,
    scope: Option<String>,
    request: &mut RunRequest,
) -> Result<Prepared, Refused> {
    let (Some(threads), Some(scope)) = (threads, scope) else {
        return Ok(Prepared::Stateless);
    };
    let key = ThreadKey {
        scope,
        agent: agent.to_owned(),
        thread_id: request.thread_id.clone(),
    };
    let hydrating = request.messages.is_empty() && request.resume.is_empty();
    if hydrating {
        if let Some(record) = threads.load(&key).await.map_err(unavailable)? {
            return Ok(Prepared::Hydrate(hydrate(record)));
        }
    }
    let lease = take_lease(threads, &key).await?;
    let previous = match admit(threads, agent, &key, hydrating, request).await {
        Ok(previous) => previous,
        Err(refused) => {
            // Freed before the refusal is answered, so the client's next request (the same
            // history, put right) finds the thread free, whatever store holds the lease.
            lease.release().await;
            return Err(refused);
        }
    };
    // Whatever the history policy: the ledger only ever keeps a call from running twice.
    request.decision_claims = Some(Arc::new(ThreadDecisions {
        threads: Arc::clone(threads),
        thread: key.clone(),
    }));
    let context = super::connect::Context::of(
        &request.run_id,
        previous.as_ref(),
        &request.messages,
        request.state.as_ref(),
    );
    let run = RecordedRun {
        agent,
        run_id: &request.run_id,
        parent_run_id: request.parent_run_id.as_deref(),
    };
    let recorder = ThreadRecorder::new(
        previous,
        run,
        request.messages.clone(),
        request.state.clone(),
    );
    Ok(Prepared::Run(Box::new(ThreadRun {
        threads: Arc::clone(threads),
        lease,
        recorder,
        context: Some(context),
    })))
}

/// What a run on a leased thread checks before it starts: the thread's record (loaded under
/// the lease, so no other run saves between this load and this run's save), the scope's
/// quota, and the client's history against the record.
async fn admit(
    threads: &Threads,
    agent: &str,
    key: &ThreadKey,
    hydrating: bool,
    request: &mut RunRequest,
) -> Result<Option<ThreadRecord>, Refused> {
    let previous = if hydrating {
        None
    } else {
        threads.load(key).await.map_err(unavailable)?
    };
    threads.store.admit(key).await.map_err(store_refusal)?;
    if threads.history == HistoryPolicy::Verify {
        verify_history(threads, agent, previous.as_ref(), request)?;
    }
    Ok(previous)
}

/// The thread's run lease: 409 `thread_busy` while another run streams on it (unless the policy
/// is to supersede that run), 503 when the store cannot be reached.
async fn take_lease(threads: &Threads, key: &ThreadKey) -> Result<Lease, Refused> {
    let supersede = threads.on_concurrent_run == ConcurrentRunPolicy::Supersede;
    threads
        .leases
        .acquire(key, supersede)
        .await
        .map_err(|error| match error {
            LeaseError::Busy => Refused::ThreadBusy,
            LeaseError::Backend(error) => unavailable(error),
        })
}

/// Checks (and repairs) the client's history against the thread's record (the branch the
/// request's `parentRunId` names, when the thread kept that run): a server tool result the
/// server did not produce, or one it changed, is a 422. The results the record vouches for
/// go on the request. A thread the server has no record of (new, deleted, expired) vouches for
/// nothing, so any server tool result in its history is refused.
fn verify_history(
    threads: &Threads,
    agent: &str,
    record: Option<&ThreadRecord>,
    request: &mut RunRequest,
) -> Result<(), Refused> {
    let no_tools = AgentTools::default();
    let tools = threads.agent_tools.get(agent).unwrap_or(&no_tools);
    let client_tools: BTreeSet<&str> = request.tools.iter().map(|t| t.name.as_str()).collect();
    let resumed_calls: BTreeSet<&str> = record
        .map(|record| record.interrupts.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|interrupt| {
            request
                .resume
                .iter()
                .any(|r| r.interrupt_id == interrupt.id)
        })
        .filter_map(|interrupt| interrupt.tool_call_id.as_deref())
        .collect();
    let expect = verify::Expectations {
        server_tools: &tools.server_tools,
        server_tool_prefixes: &tools.server_tool_prefixes,
        client_tools: &client_tools,
        // The run's tools are settled by the same rule (the base agent's `tools_for_run`):
        // only where the client's declaration wins is a server tool's name the client's.
        client_tools_win: tools.client_tools_win,
        resumed_calls: &resumed_calls,
        declined_result: Some(tools.declined_result.as_str()),
    };
    let refuse = |mismatch: verify::HistoryMismatch| {
        tracing::warn!(%mismatch, "a client's history does not match the thread's record");
        Refused::History(mismatch)
    };
    let Some(record) = record else {
        let resuming = !request.resume.is_empty();
        return verify::check_unrecorded(&request.messages, expect, resuming).map_err(refuse);
    };
    // A request naming a kept run as its parent is checked against the conversation after that
    // run: the branch it continues, which may not be the current one.
    let against = request
        .parent_run_id
        .as_deref()
        .and_then(|parent| record.lineage.conversation_after(&record.messages, parent))
        .map_or_else(
            || verify::Recorded::current(record),
            |messages| verify::Recorded {
                messages,
                server_results: &record.server_results,
            },
        );
    let recorded = verify::reconcile(against, &mut request.messages, expect).map_err(refuse)?;
    // The approval gate counts these as carried out, whatever else the history shows.
    request.recorded_results = recorded;
    Ok(())
}

/// How long a claim outlives its approval id's expiry: replicas' clocks differ a little, and
/// one running behind still takes the id as valid for that long.
const CLOCK_MARGIN: Duration = Duration::from_secs(300);

/// The decision claims of one run: the thread store's ledger, keyed by the run's thread.
#[derive(Debug)]
struct ThreadDecisions {
    threads: Arc<Threads>,
    thread: ThreadKey,
}

impl ThreadDecisions {
    /// The ledger's key of one decision of this run's thread.
    fn key<'a>(&'a self, tool_call_id: &'a str, approval: &'a str) -> DecisionKey<'a> {
        DecisionKey {
            thread: &self.thread,
            tool_call_id,
            approval,
        }
    }

    /// How long a claim must be remembered: until the id stops verifying (and a margin), or,
    /// for an id that never expires, as long as a thread is kept: past that a replay with the
    /// result dropped is no longer recognised (docs/human-in-the-loop.md).
    fn keep(&self, expires: Option<u64>) -> Duration {
        match expires {
            Some(expires) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                Duration::from_secs(expires.saturating_sub(now)).saturating_add(CLOCK_MARGIN)
            }
            None => self.threads.ttl,
        }
    }
}

impl DecisionClaims for ThreadDecisions {
    fn claim<'a>(
        &'a self,
        tool_call_id: &'a str,
        approval: &'a str,
        expires: Option<u64>,
    ) -> BoxFuture<'a, Result<bool, ClaimError>> {
        async move {
            let key = self.key(tool_call_id, approval);
            let keep = self.keep(expires);
            self.threads
                .ledger
                .claim(key, keep)
                .await
                .map_err(claim_error)
        }
        .boxed()
    }

    fn is_claimed<'a>(
        &'a self,
        tool_call_id: &'a str,
        approval: &'a str,
    ) -> BoxFuture<'a, Result<bool, ClaimError>> {
        async move {
            let key = self.key(tool_call_id, approval);
            self.threads
                .ledger
                .is_claimed(key)
                .await
                .map_err(claim_error)
        }
        .boxed()
    }
}

/// A ledger failure as the run reports it; the details go to the log.
#[allow(clippy::needless_pass_by_value)] // a `map_err` adapter: it takes what `map_err` gives
fn claim_error(error: StoreError) -> ClaimError {
    if let StoreError::LedgerFull { .. } = error {
        tracing::error!(%error, "a decision was not acted on");
        return ClaimError {
            code: "decision_ledger_full",
            message: "the server cannot record more approval decisions now, so this one was \
                      not acted on; please retry later"
                .to_owned(),
        };
    }
    tracing::error!(%error, "the thread store failed; a decision was not acted on");
    ClaimError {
        code: "thread_store_unavailable",
        message: "the conversation store is not answering, so the decision was not acted on; \
                  please retry"
            .to_owned(),
    }
}

impl ThreadRun {
    /// Gives the thread back for a run that never started (the agent refused its request).
    pub(super) async fn give_back(self) {
        self.lease.release().await;
    }

    /// The thread's id and what a client connecting to it needs of this run, once.
    pub(super) fn take_context(&mut self) -> Option<(String, bytes::Bytes)> {
        let context = self.context.take()?;
        Some((self.lease.key().thread_id.clone(), context))
    }

    /// Cancelled when the run must stop because another took its thread.
    pub(super) fn lost(&self) -> tokio_util::sync::CancellationToken {
        self.lease.lost().clone()
    }

    /// Saves what the client holds now and frees the thread. A run that lost its lease saves
    /// nothing: its successor's record wins. The store checks the lease again as it writes,
    /// since a run superseded on another replica may not have heard of it yet.
    async fn save_and_release(self) {
        if !self.lease.lost().is_cancelled() {
            let record = self.recorder.finish();
            match self.threads.store.save(&self.lease, &record).await {
                Ok(()) => {}
                Err(StoreError::LeaseLost) => tracing::warn!(
                    thread_id = %self.lease.key().thread_id,
                    run_id = %record.last_run_id,
                    "a newer run took the thread before this one saved; its record is not saved"
                ),
                // Another run of the scope took the last place after this one was admitted.
                Err(StoreError::QuotaExceeded(quota)) => tracing::warn!(
                    thread_id = %self.lease.key().thread_id,
                    %quota,
                    "the scope reached its thread quota during the run; the thread is not saved"
                ),
                Err(error) => tracing::warn!(%error, "could not save the thread"),
            }
        }
        self.lease.release().await;
    }
}

impl RunObserver for ThreadRun {
    fn on_update(&mut self, update: &AgentUpdate) {
        match update {
            AgentUpdate::Event(body) => self.recorder.observe(body),
            AgentUpdate::Interrupt(interrupt) => self.recorder.interrupt(interrupt),
            // Neither is part of the conversation the client keeps.
            AgentUpdate::Usage(_)
            | AgentUpdate::ToolProgress(_)
            | AgentUpdate::ApprovalRequest(_) => {}
        }
    }

    fn finish(self: Box<Self>) -> BoxFuture<'static, ()> {
        self.save_and_release().boxed()
    }
}

/// The stored conversation as a run: `MESSAGES_SNAPSHOT`, `STATE_SNAPSHOT`, and the
/// interrupts it is waiting on (the encoder ends the run with them).
fn hydrate(record: ThreadRecord) -> AgentStream {
    stream::iter(super::connect::record_updates(record).into_iter().map(Ok)).boxed()
}

/// A refusal by the store before the run: the scope's quota, or the store not answering.
#[allow(clippy::needless_pass_by_value)] // a `map_err` adapter: it takes what `map_err` gives
fn store_refusal(error: StoreError) -> Refused {
    match error {
        StoreError::QuotaExceeded(quota) => Refused::ThreadQuotaExceeded(quota),
        error => unavailable(error),
    }
}

#[allow(clippy::needless_pass_by_value)] // a `map_err` adapter: it takes what `map_err` gives
fn unavailable(error: StoreError) -> Refused {
    tracing::error!(%error, "the thread store failed");
    Refused::StoreUnavailable
}
