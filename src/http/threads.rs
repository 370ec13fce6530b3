//! The thread routes, as the caller's scope may see them: `GET /{agent}/threads` (the list),
//! `GET`, `PATCH` and `DELETE /{agent}/threads/{threadId}`, and
//! `GET /{agent}/threads/{threadId}/connect` (the thread, then its live run). What a run does
//! on its thread is the session's (`crate::session`).

use axum::body::Bytes;
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
use crate::session::Refused;
use crate::threads::list::MAX_PAGE;
use crate::threads::{
    ArchivedFilter, EditError, LeaseError, ListCursor, ListQuery, StoreError, ThreadEdit,
    ThreadKey, Threads,
};

/// The longest title `PATCH` takes, in characters.
const MAX_TITLE_CHARS: usize = 200;

/// A page when the client names no `limit`.
const DEFAULT_PAGE: usize = 20;

/// `GET /{agent}/threads`'s query, as text: each value is checked here, so a bad one is a
/// 400 with a code rather than the extractor's plain-text refusal.
#[derive(Debug, Deserialize)]
pub(super) struct ListParams {
    limit: Option<String>,
    cursor: Option<String>,
    archived: Option<String>,
}

/// `PATCH /{agent}/threads/{threadId}`'s body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EditBody {
    /// Absent: unchanged; `null`: cleared (derived again).
    #[serde(default, deserialize_with = "present")]
    title: Option<Option<String>>,
    archived: Option<bool>,
}

/// A field that is present, `null` or not: `Some(None)` for `null`.
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(deserializer).map(Some)
}

/// `GET /{agent}/threads`: a page of the caller's threads of this agent, newest first.
pub(super) async fn list_threads(
    State(state): State<AppState>,
    NamedAgent(agent): NamedAgent,
    scopes: Scopes,
    params: Result<Query<ListParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) =
        params.map_err(|_| ApiError::new(Code::InvalidQuery, "the query string is malformed"))?;
    let (threads, scope) = thread_scope(&state, scopes)?;
    let query = ListQuery {
        scope: scope.unwrap_or_default(),
        agent,
        archived: archived_filter(params.archived.as_deref())?,
        limit: page_limit(params.limit.as_deref())?,
        after: params
            .cursor
            .as_deref()
            .map(|cursor| {
                ListCursor::decode(cursor).ok_or_else(|| {
                    ApiError::new(
                        Code::InvalidCursor,
                        "`cursor` is not a `nextCursor` of this list",
                    )
                })
            })
            .transpose()?,
    };
    // A request without a scope (a configured scope header it lacks) holds no threads.
    let page = if query.scope.is_empty() {
        Default::default()
    } else {
        threads
            .list(&query)
            .await
            .map_err(|error| unavailable(&error))?
    };
    let mut body = json!({ "threads": page.threads });
    if let Some(next) = page.next {
        body["nextCursor"] = json!(next.encode());
    }
    Ok(Json(body).into_response())
}

fn page_limit(limit: Option<&str>) -> Result<usize, ApiError> {
    let Some(limit) = limit else {
        return Ok(DEFAULT_PAGE);
    };
    limit
        .parse::<usize>()
        .ok()
        .filter(|limit| (1..=MAX_PAGE).contains(limit))
        .ok_or_else(|| {
            ApiError::new(
                Code::InvalidQuery,
                format!("`limit` must be a whole number from 1 to {MAX_PAGE}"),
            )
        })
}

fn archived_filter(archived: Option<&str>) -> Result<ArchivedFilter, ApiError> {
    match archived {
        None | Some("false") => Ok(ArchivedFilter::Active),
        Some("true") => Ok(ArchivedFilter::Archived),
        Some("all") => Ok(ArchivedFilter::All),
        Some(_) => Err(ApiError::new(
            Code::InvalidQuery,
            "`archived` must be `true`, `false` or `all`",
        )),
    }
}

/// `PATCH /{agent}/threads/{threadId}`: renames or (un)archives the thread; answers its list
/// entry.
pub(super) async fn patch_thread(
    State(state): State<AppState>,
    NamedAgent(agent): NamedAgent,
    Path((_, thread_id)): Path<(String, String)>,
    scopes: Scopes,
    body: Bytes,
) -> Result<Response, ApiError> {
    let (threads, key) = thread_key(&state, agent, thread_id, scopes)?;
    let edit = edit_of(&body)?;
    match threads.edit(&key, edit).await {
        Ok(summary) => Ok(Json(summary).into_response()),
        Err(EditError::NotFound) => Err(not_found(&key)),
        Err(EditError::Lease(LeaseError::Busy)) => Err(ApiError::from(Refused::ThreadBusy)),
        Err(EditError::Store(StoreError::QuotaExceeded(quota))) => {
            Err(ApiError::from(Refused::ThreadQuotaExceeded(quota)))
        }
        Err(EditError::Lease(LeaseError::Backend(error)) | EditError::Store(error)) => {
            Err(unavailable(&error))
        }
    }
}

/// The edit a body asks for: 400 when it is not JSON, 422 when it is not an edit.
fn edit_of(body: &[u8]) -> Result<ThreadEdit, ApiError> {
    let edit: EditBody = serde_json::from_slice(body).map_err(|error| {
        let code = if error.is_data() {
            Code::InvalidRequest
        } else {
            Code::InvalidJson
        };
        ApiError::new(code, format!("not a thread edit: {error}"))
    })?;
    if edit.title.is_none() && edit.archived.is_none() {
        return Err(ApiError::new(
            Code::InvalidRequest,
            "a thread edit names `title`, `archived` or both",
        ));
    }
    let title = edit.title.map(|title| {
        title
            .map(|title| title.trim().to_owned())
            .filter(|title| !title.is_empty())
    });
    if let Some(Some(title)) = &title {
        if title.chars().count() > MAX_TITLE_CHARS {
            return Err(ApiError::new(
                Code::TitleTooLong,
                format!("a title is at most {MAX_TITLE_CHARS} characters"),
            ));
        }
    }
    Ok(ThreadEdit {
        title,
        archived: edit.archived,
    })
}

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

/// The thread service and the caller's scope in it, or 404 `threads_off`.
fn thread_scope(state: &AppState, scopes: Scopes) -> Result<(&Threads, Option<String>), ApiError> {
    let Some(threads) = state.sessions.threads.as_deref() else {
        return Err(ApiError::new(
            Code::ThreadsOff,
            "this server keeps no threads (threads.store = \"off\")",
        ));
    };
    Ok((threads, scopes.thread))
}

fn thread_key(
    state: &AppState,
    agent: String,
    thread_id: String,
    scopes: Scopes,
) -> Result<(&Threads, ThreadKey), ApiError> {
    let (threads, scope) = thread_scope(state, scopes)?;
    let key = ThreadKey {
        scope: scope.unwrap_or_default(),
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
