//! `GET` and `DELETE /{agent}/threads/{threadId}`: a stored thread as the caller's scope may
//! see it; `GET /{agent}/threads/{threadId}/connect`: the thread, then its live run. What a run
//! does on its thread is the session's (`crate::session`).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;

use super::extract::{NamedAgent, Scopes};
use super::run::sse_response;
use super::{ApiError, AppState, Code};
use crate::protocol::{Interrupt, ProtocolVersion};
use crate::threads::{StoreError, ThreadKey, Threads};

/// `GET /{agent}/threads/{threadId}`: the stored conversation, state and open interrupts, and
/// the runs of its current branch (each with the `parentRunId` it named).
pub(super) async fn get_thread(
    State(state): State<AppState>,
    NamedAgent(agent): NamedAgent,
    Path((_, thread_id)): Path<(String, String)>,
    scopes: Scopes,
) -> Result<Response, ApiError> {
    let (threads, key) = thread_key(&state, agent, thread_id, scopes)?;
    let record = threads
        .load(&key)
        .await
        .map_err(|error| unavailable(&error))?
        .ok_or_else(|| not_found(&key))?;
    let interrupts: &[Interrupt] = &record.interrupts;
    Ok(Json(json!({
        "threadId": key.thread_id,
        "agent": key.agent,
        "messages": record.messages,
        "state": record.state,
        "interrupts": interrupts,
        "lastRunId": record.last_run_id,
        "runs": record.lineage.runs,
        "createdAt": record.created_at,
        "updatedAt": record.updated_at,
    }))
    .into_response())
}

/// `?protocolVersion=` of a connect: the shapes of the frames it makes (absent: a 0.x client,
/// as for a run).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct ConnectParams {
    protocol_version: Option<String>,
}

/// `GET /{agent}/threads/{threadId}/connect`: the thread, then its live run if one is running,
/// as one SSE stream (`crate::session` says how).
pub(super) async fn connect_thread(
    State(state): State<AppState>,
    NamedAgent(agent): NamedAgent,
    Path((_, thread_id)): Path<(String, String)>,
    Query(params): Query<ConnectParams>,
    scopes: Scopes,
) -> Result<Response, ApiError> {
    let (_, key) = thread_key(&state, agent, thread_id, scopes)?;
    let version = ProtocolVersion::from_request(params.protocol_version.as_deref());
    let body = state
        .sessions
        .connect((&key.agent, &key.thread_id), Some(&key.scope), version)
        .await?;
    Ok(sse_response(body))
}

/// `DELETE /{agent}/threads/{threadId}`: forgets the thread (204), or 404.
pub(super) async fn delete_thread(
    State(state): State<AppState>,
    NamedAgent(agent): NamedAgent,
    Path((_, thread_id)): Path<(String, String)>,
    scopes: Scopes,
) -> Result<Response, ApiError> {
    let (threads, key) = thread_key(&state, agent, thread_id, scopes)?;
    match threads.store.delete(&key).await {
        Ok(true) => Ok(StatusCode::NO_CONTENT.into_response()),
        Ok(false) => Err(not_found(&key)),
        Err(error) => Err(unavailable(&error)),
    }
}

fn thread_key(
    state: &AppState,
    agent: String,
    thread_id: String,
    scopes: Scopes,
) -> Result<(&Threads, ThreadKey), ApiError> {
    let Some(threads) = state.sessions.threads.as_deref() else {
        return Err(ApiError::new(
            Code::ThreadsOff,
            "this server keeps no threads (threads.store = \"off\")",
        ));
    };
    let key = ThreadKey {
        scope: scopes.thread.unwrap_or_default(),
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
        Code::ThreadNotFound,
        format!(
            "no thread `{}` for agent `{}`",
            key.thread_id.chars().take(128).collect::<String>(),
            key.agent
        ),
    )
}

fn unavailable(error: &StoreError) -> ApiError {
    tracing::error!(%error, "the thread store failed");
    ApiError::from(crate::session::Refused::StoreUnavailable)
}
