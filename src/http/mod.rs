//! The HTTP edge: routes, request decoding, pre-stream errors, and the SSE response.
//!
//! Everything that can be refused is refused here, before the first byte of a stream, as a
//! 4xx JSON body ([`ApiError`]); once the stream has started only `RUN_ERROR` can report a
//! failure, and the [`RunEncoder`](crate::protocol::RunEncoder) writes it.
//!
//! Tower layers stay at this edge (tracing, panics, body limit). Limits and deadlines of a *run*
//! cannot be tower layers: a tower future ends at the response headers, a run at its last event.

mod error;
mod run;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::trace::TraceLayer;

use crate::agent::Agent;
pub use error::ApiError;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub agents: Arc<BTreeMap<String, Arc<dyn Agent>>>,
    pub default_agent: String,
    pub keep_alive: Duration,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .field("default_agent", &self.default_agent)
            .field("keep_alive", &self.keep_alive)
            .finish()
    }
}

/// The service's routes.
pub fn router(state: AppState, body_limit_bytes: usize) -> Router {
    Router::new()
        .route("/", post(run::run_default_agent).get(service_info))
        .route("/{agent}", post(run::run_named_agent))
        .route("/health", get(health))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(body_limit_bytes))
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /`: what this server is and which agents it serves, for a person with `curl`.
async fn service_info(
    axum::extract::State(state): axum::extract::State<AppState>,
) -> Json<serde_json::Value> {
    Json(json!({
        "service": "agui-host",
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": "AG-UI",
        "defaultAgent": state.default_agent,
        "agents": state.agents.keys().collect::<Vec<_>>(),
        "usage": "POST a RunAgentInput JSON body to / or /<agent>; the reply is an SSE stream",
    }))
}

async fn not_found() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::NOT_FOUND,
        "not_found",
        "no such route: POST a RunAgentInput to / or /<agent>",
    )
}
