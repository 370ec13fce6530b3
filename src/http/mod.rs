//! The HTTP edge: routes, request decoding, pre-stream errors, and the SSE response.
//!
//! Everything that can be refused is refused here, before the first byte of a stream, as a
//! 4xx JSON body ([`ApiError`]); once the stream has started only `RUN_ERROR` can report a
//! failure, and the [`RunEncoder`](crate::protocol::RunEncoder) writes it.
//!
//! Tower layers stay at this edge (request ids, tracing, CORS, authentication, panics, body
//! limit). Limits and deadlines of a *run* cannot be tower layers: a tower future ends at the
//! response headers, a run at its last event; the run's session (`crate::session`) holds them.
//!
//! Files: `run` (the run endpoints), `decode` (body to `RunAgentInput`, input limits), `extract`
//! (the agent of a path, the request's scopes, `Last-Event-ID`), `error` (ApiError), `ops`
//! (health, readiness and `/metrics`), `auth` (tokens), `cors`, `discovery` (`/agents` and
//! `/<agent>/capabilities`), `threads` (the thread routes), `runs` (reconnect and stop),
//! `serve` (the accept loop, the connection bound and each connection's HTTP settings and
//! deadlines), `host` (the `Host` allow-list against DNS rebinding), `trace` (the HTTP server
//! span of every request), `mcp_apps` (runs that are an MCP App's request).

mod auth;
mod cors;
mod decode;
mod discovery;
mod error;
mod extract;
mod host;
mod mcp_apps;
mod ops;
mod run;
mod runs;
mod serve;
mod threads;
mod trace;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::HeaderName;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};

use crate::agent::Agent;
pub use crate::metrics::Metrics;
use crate::settings::{InputLimitSettings, Settings, SettingsError};
pub use discovery::Discovery;
pub use error::{ApiError, Code};
pub use ops::{McpDown, McpReport, Readiness};
pub use run::ON_DISCONNECT_HEADER;
pub use serve::{serve, ConnectionLimits};

/// The request-id header: accepted from the client (or a proxy) or generated, and returned.
const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// What every handler shares.
#[derive(Clone)]
pub struct AppState {
    pub agents: Arc<BTreeMap<String, Arc<dyn Agent>>>,
    pub default_agent: String,
    /// Runs, their stores, limits and shutdown.
    pub sessions: Arc<crate::session::Sessions>,
    /// What one request may carry (`server.input_limits`).
    pub input_limits: InputLimitSettings,
    pub metrics: Arc<Metrics>,
    pub readiness: Arc<Readiness>,
    /// The answers of `GET /agents` and `GET /<agent>/capabilities`.
    pub discovery: Arc<Discovery>,
    /// What MCP Apps' own requests may reach (`mcp_apps`).
    pub mcp_apps: Arc<crate::agent::mcp_apps::McpApps>,
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState")
            .field("agents", &self.agents.keys().collect::<Vec<_>>())
            .field("default_agent", &self.default_agent)
            .field("sessions", &self.sessions)
            .finish_non_exhaustive()
    }
}

/// The service's routes and layers. Fails only on CORS values `Settings::validate` let through.
pub fn router(state: AppState, settings: &Settings) -> Result<Router, SettingsError> {
    let mut routes = Router::new()
        .route("/", post(run::run_default_agent).get(service_info))
        .route("/{agent}", post(run::run_named_agent))
        .route("/agents", get(discovery::list_agents))
        .route("/{agent}/capabilities", get(discovery::capabilities))
        .route("/{agent}/threads", get(threads::list_threads))
        .route(
            "/{agent}/threads/{thread_id}",
            get(threads::get_thread)
                .delete(threads::delete_thread)
                .patch(threads::patch_thread),
        )
        .route(
            "/{agent}/threads/{thread_id}/connect",
            get(threads::connect_thread),
        )
        .route("/{agent}/runs/{run_id}/events", get(runs::run_events))
        .route("/{agent}/runs/{run_id}/stop", post(runs::stop_run))
        .route("/health", get(ops::health))
        .route("/ready", get(ops::ready));
    if settings.metrics.enabled {
        routes = routes.route("/metrics", get(ops::metrics));
    }
    let auth = auth::Auth::new(&settings.server.auth.tokens, settings.metrics.require_auth);
    // Each `.layer` wraps everything added before it, so a request meets them bottom-up:
    // request id, tracing, CORS (answers preflights before authentication, and decorates
    // refusals so a browser can read them), rejection counting, the Host allow-list,
    // authentication, panics, body limit, content type and body read timeout, then the handler.
    let body_read_timeout = Duration::from_secs_f64(settings.server.body_read_timeout_secs);
    let mut router = routes
        .route_layer(middleware::from_fn(trace::name_route))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(
            decode::BodyReadTimeout(body_read_timeout),
            decode::read_body_in_time,
        ))
        .layer(DefaultBodyLimit::max(settings.server.body_limit_bytes))
        .layer(CatchPanicLayer::custom(error::panic_response))
        .layer(middleware::from_fn_with_state(auth, auth::require_token))
        .layer(middleware::from_fn_with_state(
            host::HostPolicy::new(&settings.server),
            host::require_allowed_host,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_rejections,
        ));
    if let Some(cors) = cors::layer(&settings.server.cors)? {
        router = router.layer(cors);
    }
    Ok(router
        .layer(trace::layer())
        .layer(PropagateRequestIdLayer::new(REQUEST_ID))
        .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
        .with_state(state))
}

/// Counts the requests refused before a stream, by the code their [`ApiError`] carried.
async fn count_rejections(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if let Some(rejection) = response.extensions().get::<error::Rejection>() {
        state.metrics.rejected(rejection.0, response.status());
    }
    response
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
        Code::NotFound,
        "no such route: POST a RunAgentInput to / or /<agent>",
    )
}
