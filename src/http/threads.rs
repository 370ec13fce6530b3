//! The HTTP side of threads: whose a request's threads are (its scope), what a run on a known
//! thread does before it starts (hydrate, lease, load, history check), the save when it ends,
//! the decision claims a run's approval gate makes against the thread store's ledger, and
//! `GET`/`DELETE /{agent}/threads/{threadId}`.
//!
//! A thread of another scope is answered exactly like a missing one: the scope is part of the
//! key, so the same lookup misses and nothing else differs.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use futures_util::future::{BoxFuture, FutureExt};
use futures_util::stream::{self, StreamExt};
use serde_json::json;

use super::auth::Principal;
use super::{ApiError, AppState};
use crate::agent::{AgentStream, AgentUpdate, ClaimError, DecisionClaims, RunRequest};
use crate::protocol::{EventBody, Interrupt, MessagesSnapshot};
use crate::settings::{ConcurrentRunPolicy, HistoryPolicy, ToolNameClash};
use crate::threads::{
    verify, AgentTools, DecisionKey, Lease, LeaseError, StoreError, ThreadKey, ThreadRecord,
    ThreadRecorder, Threads,
};

/// The scope used when the server has no authentication and no scope header: one shared
/// development scope.
const DEVELOPMENT_SCOPE: &str = "dev";

/// Whose threads a request may see: the trusted proxy's header when one is configured, else
/// the token that authenticated it, else the development scope. `None` (a configured header
/// the request lacks): the request gets no thread at all.
pub(super) fn scope(
    threads: &Threads,
    headers: &HeaderMap,
    principal: Option<&Principal>,
) -> Option<String> {
    if let Some(header) = &threads.scope_header {
        let user = headers.get(header.as_str())?.to_str().ok()?.trim();
        return (!user.is_empty()).then(|| format!("user:{user}"));
    }
    Some(match principal {
        Some(Principal(digest)) => format!("token:{digest}"),
        None => DEVELOPMENT_SCOPE.to_owned(),
    })
}

/// The caller's scope for what binds a request to who sent it (approval ids, tools'
/// idempotency keys): the thread's scope when the request has one, else by the same rule
/// without a store (the token's digest, or the development scope). Never empty.
pub(super) fn caller_scope(thread_scope: Option<&str>, principal: Option<&Principal>) -> String {
    match (thread_scope, principal) {
        (Some(scope), _) => scope.to_owned(),
        (None, Some(Principal(digest))) => format!("token:{digest}"),
        (None, None) => DEVELOPMENT_SCOPE.to_owned(),
    }
}

/// What the request does on its thread.
pub(super) enum Prepared {
    /// No thread: the store is off, or the request has no scope.
    Stateless,
    /// A known thread with `messages: []`: the stored conversation, without a model call.
    Hydrate(AgentStream),
    /// A run that is recorded and saved when it ends.
    Run(Box<ThreadRun>),
}

/// Everything a recorded run holds until it ends.
#[derive(Debug)]
pub(super) struct ThreadRun {
    threads: Arc<Threads>,
    lease: Lease,
    pub(super) recorder: ThreadRecorder,
}

/// Prepares `request` on its thread: hydrate, or take the lease, load the record and check
/// (and repair) the client's history against it.
pub(super) async fn prepare(
    state: &AppState,
    agent: &str,
    scope: Option<String>,
    request: &mut RunRequest,
) -> Result<Prepared, ApiError> {
    let (Some(threads), Some(scope)) = (&state.threads, scope) else {
        return Ok(Prepared::Stateless);
    };
    let key = ThreadKey {
        scope,
        agent: agent.to_owned(),
        thread_id: request.thread_id.clone(),
    };
    let hydrating = request.messages.is_empty() && request.resume.is_empty();
    if hydrating {
        if let Some(record) = load(threads, &key).await? {
            return Ok(Prepared::Hydrate(hydrate(record)));
        }
    }
    let lease = take_lease(threads, &key).await?;
    // Loaded under the lease, so no other run saves between this load and this run's save.
    let previous = if hydrating {
        None
    } else {
        load(threads, &key).await?
    };
    threads
        .store
        .admit(&key)
        .await
        .map_err(|error| store_refusal(&error))?;
    if threads.history == HistoryPolicy::Verify {
        verify_history(threads, agent, previous.as_ref(), request)?;
    }
    // Whatever the history policy: the ledger only ever keeps a call from running twice.
    request.decision_claims = Some(Arc::new(ThreadDecisions {
        threads: Arc::clone(threads),
        thread: key.clone(),
    }));
    let recorder = ThreadRecorder::new(
        previous.as_ref(),
        agent,
        &request.run_id,
        request.messages.clone(),
        request.state.clone(),
    );
    Ok(Prepared::Run(Box::new(ThreadRun {
        threads: Arc::clone(threads),
        lease,
        recorder,
    })))
}

/// The thread's run lease: 409 `thread_busy` while another run streams on it (unless the policy
/// is to supersede that run), 503 when the store cannot be reached.
async fn take_lease(threads: &Threads, key: &ThreadKey) -> Result<Lease, ApiError> {
    let supersede = threads.on_concurrent_run == ConcurrentRunPolicy::Supersede;
    threads
        .leases
        .acquire(key, supersede)
        .await
        .map_err(|error| match error {
            LeaseError::Busy => ApiError::new(
                StatusCode::CONFLICT,
                "thread_busy",
                "another run is still streaming on this thread; wait for it to end or stop it",
            ),
            LeaseError::Backend(error) => unavailable(&error),
        })
}

/// Checks (and repairs) the client's history against the thread's record: a server tool result
/// the server did not produce, or one it changed, is a 422. The results the record vouches for
/// go on the request. A thread the server has no record of (new, deleted, expired) vouches for
/// nothing, so any server tool result in its history is refused.
fn verify_history(
    threads: &Threads,
    agent: &str,
    record: Option<&ThreadRecord>,
    request: &mut RunRequest,
) -> Result<(), ApiError> {
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
        client_tools_win: tools.tool_name_clash == ToolNameClash::PreferClient,
        resumed_calls: &resumed_calls,
        declined_result: Some(tools.declined_result.as_str()),
    };
    let refuse = |mismatch: verify::HistoryMismatch| {
        tracing::warn!(%mismatch, "a client's history does not match the thread's record");
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            mismatch.code(),
            mismatch.to_string(),
        )
    };
    let Some(record) = record else {
        let resuming = !request.resume.is_empty();
        return verify::check_unrecorded(&request.messages, expect, resuming).map_err(refuse);
    };
    let recorded = verify::reconcile(record, &mut request.messages, expect).map_err(refuse)?;
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
    /// Cancelled when the run must stop because another took its thread.
    pub(super) fn lost(&self) -> tokio_util::sync::CancellationToken {
        self.lease.lost().clone()
    }

    /// Saves what the client holds now and frees the thread. A run that lost its lease saves
    /// nothing: its successor's record wins. The store checks the lease again as it writes,
    /// since a run superseded on another replica may not have heard of it yet.
    pub(super) async fn finish(self) {
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

/// The stored conversation as a run: `MESSAGES_SNAPSHOT`, `STATE_SNAPSHOT`, and the
/// interrupts it is waiting on (the encoder ends the run with them).
fn hydrate(record: ThreadRecord) -> AgentStream {
    let mut updates = vec![AgentUpdate::Event(EventBody::MessagesSnapshot(
        MessagesSnapshot {
            messages: record.messages,
        },
    ))];
    if let Some(snapshot) = record.state {
        updates.push(AgentUpdate::Event(EventBody::state_snapshot(snapshot)));
    }
    updates.extend(
        record
            .interrupts
            .into_iter()
            .map(|interrupt| AgentUpdate::Interrupt(Box::new(interrupt))),
    );
    stream::iter(updates.into_iter().map(Ok)).boxed()
}

async fn load(threads: &Threads, key: &ThreadKey) -> Result<Option<ThreadRecord>, ApiError> {
    match threads.store.load(key).await {
        Ok(record) => Ok(record),
        // A record this version cannot read is as good as none; the next save replaces it.
        Err(StoreError::Decode(error)) => {
            tracing::warn!(%error, "a stored thread could not be read; starting afresh");
            Ok(None)
        }
        Err(error) => Err(unavailable(&error)),
    }
}

/// A refusal by the store before the run: the scope's quota, or the store not answering.
fn store_refusal(error: &StoreError) -> ApiError {
    match error {
        StoreError::QuotaExceeded(quota) => ApiError::new(
            StatusCode::FORBIDDEN,
            "thread_quota_exceeded",
            format!(
                "this caller's threads are at the server's quota ({quota}); delete threads \
                 (DELETE /<agent>/threads/<threadId>) or wait for old ones to expire"
            ),
        ),
        error => unavailable(error),
    }
}

fn unavailable(error: &StoreError) -> ApiError {
    tracing::error!(%error, "the thread store failed");
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "thread_store_unavailable",
        "the conversation store is not answering; please retry",
    )
    .with_retry_after(1)
}

/// `GET /{agent}/threads/{threadId}`: the stored conversation, state and open interrupts.
pub(super) async fn get_thread(
    State(state): State<AppState>,
    Path((agent, thread_id)): Path<(String, String)>,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
) -> Result<Response, ApiError> {
    let (threads, key) = thread_key(&state, agent, thread_id, &headers, principal)?;
    let record = load(threads, &key).await?.ok_or_else(|| not_found(&key))?;
    let interrupts: &[Interrupt] = &record.interrupts;
    Ok(Json(json!({
        "threadId": key.thread_id,
        "agent": key.agent,
        "messages": record.messages,
        "state": record.state,
        "interrupts": interrupts,
        "lastRunId": record.last_run_id,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
    }))
    .into_response())
}

/// `DELETE /{agent}/threads/{threadId}`: forgets the thread (204), or 404.
pub(super) async fn delete_thread(
    State(state): State<AppState>,
    Path((agent, thread_id)): Path<(String, String)>,
    headers: HeaderMap,
    principal: Option<Extension<Principal>>,
) -> Result<Response, ApiError> {
    let (threads, key) = thread_key(&state, agent, thread_id, &headers, principal)?;
    match threads.store.delete(&key).await {
        Ok(true) => Ok(StatusCode::NO_CONTENT.into_response()),
        Ok(false) => Err(not_found(&key)),
        Err(error) => Err(unavailable(&error)),
    }
}

fn thread_key<'a>(
    state: &'a AppState,
    agent: String,
    thread_id: String,
    headers: &HeaderMap,
    principal: Option<Extension<Principal>>,
) -> Result<(&'a Threads, ThreadKey), ApiError> {
    if !state.agents.contains_key(&agent) {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "unknown_agent",
            format!(
                "no agent named `{}`",
                agent.chars().take(64).collect::<String>()
            ),
        ));
    }
    let Some(threads) = state.threads.as_deref() else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "threads_off",
            "this server keeps no threads (threads.store = \"off\")",
        ));
    };
    let principal = principal.map(|Extension(principal)| principal);
    let key = ThreadKey {
        scope: scope(threads, headers, principal.as_ref()).unwrap_or_default(),
        agent,
        thread_id,
    };
    if key.scope.is_empty() {
        return Err(not_found(&key));
    }
    Ok((threads, key))
}

fn not_found(key: &ThreadKey) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "thread_not_found",
        format!(
            "no thread `{}` for agent `{}`",
            key.thread_id.chars().take(128).collect::<String>(),
            key.agent
        ),
    )
}
