//! Discovery: `GET /agents` lists the agents a client can run, and `GET /<agent>/capabilities`
//! declares what one of them can do as AG-UI `AgentCapabilities` (what `HttpAgent` leaves to
//! the server). Both answers are computed once at start-up from the configuration (by
//! `app::discovery`) and sit behind the same authentication as runs: the tool list and state
//! schema are not for anonymous readers.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::Json;
use serde_json::Value;

use super::{ApiError, AppState};
use crate::protocol::AgentCapabilities;

/// The answers of both discovery routes.
#[derive(Debug)]
pub struct Discovery {
    agents: Value,
    capabilities: BTreeMap<String, AgentCapabilities>,
}

impl Discovery {
    /// `agents` is the body of `GET /agents`; `capabilities` each agent's, by name.
    pub fn new(agents: Value, capabilities: BTreeMap<String, AgentCapabilities>) -> Self {
        Discovery {
            agents,
            capabilities,
        }
    }
}

/// `GET /agents`.
pub(super) async fn list_agents(State(state): State<AppState>) -> Json<Value> {
    Json(state.discovery.agents.clone())
}

/// `GET /<agent>/capabilities`.
pub(super) async fn capabilities(
    State(state): State<AppState>,
    Path(agent): Path<String>,
) -> Result<Json<AgentCapabilities>, ApiError> {
    match state.discovery.capabilities.get(&agent) {
        Some(capabilities) => Ok(Json(capabilities.clone())),
        None => Err(ApiError::unknown_agent(&agent, &state)),
    }
}
