//! The request parts every handler needs, as axum extractors: the agent a path names
//! ([`NamedAgent`], refused with `unknown_agent` when the server has none of that name), whose
//! threads and runs a request may see ([`Scopes`]), and a reconnect's cursor ([`LastEventId`]).
//!
//! A request's scope is the trusted proxy's header when one is configured, else the token
//! that authenticated it, else the development scope every caller of an open server shares. A
//! thread of another scope is answered exactly like a missing one: the scope is part of the
//! key, so the same lookup misses and nothing else differs.

use axum::extract::{FromRequestParts, Query, RawPathParams};
use axum::http::request::Parts;
use serde::Deserialize;

use super::auth::Principal;
use super::{ApiError, AppState, Code};
use crate::threads::Threads;

/// The scope used when the server has no authentication and no scope header: one shared
/// development scope.
const DEVELOPMENT_SCOPE: &str = "dev";

/// The `{agent}` of the path, an agent this server has.
#[derive(Debug, Clone)]
pub(super) struct NamedAgent(pub(super) String);

impl FromRequestParts<AppState> for NamedAgent {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let params = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::unknown_agent("", state))?;
        let agent = params
            .iter()
            .find_map(|(key, value)| (key == "agent").then(|| value.to_owned()))
            .unwrap_or_default();
        if state.agents.contains_key(&agent) {
            Ok(NamedAgent(agent))
        } else {
            Err(ApiError::unknown_agent(&agent, state))
        }
    }
}

/// Whose a request's threads and runs are.
#[derive(Debug, Clone)]
pub(super) struct Scopes {
    /// The thread's scope; `None`: no thread store, or a configured scope header the request
    /// lacks (it then gets no thread at all).
    pub(super) thread: Option<String>,
    /// The caller's, which approval ids and tools' idempotency keys bind whether or not there
    /// is a thread: the thread's scope when there is one, else by the same rule without a
    /// store. Never empty.
    pub(super) caller: String,
}

impl FromRequestParts<AppState> for Scopes {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let principal = parts.extensions.get::<Principal>();
        let thread = state
            .sessions
            .threads
            .as_deref()
            .and_then(|threads| thread_scope(threads, &parts.headers, principal));
        let caller = match (&thread, principal) {
            (Some(scope), _) => scope.clone(),
            (None, Some(Principal(digest))) => format!("token:{digest}"),
            (None, None) => DEVELOPMENT_SCOPE.to_owned(),
        };
        Ok(Scopes { thread, caller })
    }
}

/// The thread scope of a request: the trusted proxy's header when one is configured, else the
/// token that authenticated it, else the development scope.
fn thread_scope(
    threads: &Threads,
    headers: &axum::http::HeaderMap,
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

/// A reconnect's `Last-Event-ID`: the header, or the `last_event_id` query parameter for
/// clients that cannot set it; `None` (or empty) reads the run from its start.
#[derive(Debug, Clone)]
pub(super) struct LastEventId(pub(super) Option<String>);

#[derive(Debug, Deserialize)]
struct EventsQuery {
    last_event_id: Option<String>,
}

impl FromRequestParts<AppState> for LastEventId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if let Some(value) = parts.headers.get("last-event-id") {
            let value = value.to_str().map_err(|_| invalid_last_event_id())?;
            return Ok(LastEventId(Some(value.trim().to_owned())));
        }
        let Query(query) = Query::<EventsQuery>::from_request_parts(parts, state)
            .await
            .map_err(|_| invalid_last_event_id())?;
        Ok(LastEventId(
            query.last_event_id.map(|id| id.trim().to_owned()),
        ))
    }
}

pub(super) fn invalid_last_event_id() -> ApiError {
    ApiError::new(
        Code::InvalidLastEventId,
        "Last-Event-ID must be an id this run's stream carried: `<runId>:<seq>`",
    )
}
