//! The probes an orchestrator calls: `GET /health` (liveness) and `GET /ready` (readiness).
//!
//! Liveness has no dependencies: a model server outage must not get every replica restarted.
//! Readiness says whether this replica should get traffic: the configuration loaded (it did, or
//! the process would not be serving), the server is not shutting down, and, only when
//! `server.ready.check_upstream` is on, the model server answers HTTP. That check is cached for
//! `server.ready.cache_secs` so frequent probes do not become load on the model server.

use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use tokio::sync::Mutex;

use super::AppState;
use crate::settings::{LlmProvider, Settings};

/// What `/ready` checks, built once from the settings.
#[derive(Debug)]
pub struct Readiness {
    upstream: Option<UpstreamProbe>,
    mcp: Option<McpReport>,
}

/// Which MCP servers are down now, as `agent/server` names: required ones make the replica
/// not ready, optional ones are only reported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct McpDown {
    pub required: Vec<String>,
    pub optional: Vec<String>,
}

/// Asks the MCP supervisors which servers are down (cheap: no request is sent).
pub struct McpReport(pub Box<dyn Fn() -> McpDown + Send + Sync>);

impl std::fmt::Debug for McpReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("McpReport")
    }
}

#[derive(Debug)]
struct UpstreamProbe {
    client: reqwest::Client,
    url: String,
    cache_for: Duration,
    /// The last result and when it was taken. A tokio mutex held across the check, so
    /// simultaneous probes wait for one request instead of each sending their own.
    last: Mutex<Option<(Instant, bool)>>,
}

impl Readiness {
    pub fn new(settings: &Settings) -> Self {
        let ready = &settings.server.ready;
        let upstream = match settings.llm.effective_provider() {
            _ if !ready.check_upstream => None,
            // The built-in model is always there.
            LlmProvider::Offline | LlmProvider::Auto => None,
            provider @ (LlmProvider::Openai
            | LlmProvider::Azure
            | LlmProvider::Anthropic
            | LlmProvider::OpenaiResponses) => {
                let url = match (settings.llm.base_url.is_empty(), provider) {
                    (false, _) => settings.llm.base_url.clone(),
                    (true, LlmProvider::Anthropic) => "https://api.anthropic.com/v1".to_owned(),
                    (true, _) => "https://api.openai.com/v1".to_owned(),
                };
                let client = reqwest::Client::builder()
                    .timeout(Duration::from_secs(ready.timeout_secs.max(1)))
                    .redirect(reqwest::redirect::Policy::none())
                    .build();
                match client {
                    Ok(client) => Some(UpstreamProbe {
                        client,
                        url,
                        cache_for: Duration::from_secs(ready.cache_secs),
                        last: Mutex::new(None),
                    }),
                    Err(error) => {
                        tracing::error!(%error, "cannot build the readiness probe's client; not checking the model server");
                        None
                    }
                }
            }
        };
        Readiness {
            upstream,
            mcp: None,
        }
    }

    /// Also reports MCP servers that are down.
    pub fn with_mcp(mut self, report: McpReport) -> Self {
        self.mcp = Some(report);
        self
    }
}

impl UpstreamProbe {
    /// Whether the model server answered HTTP recently. Any status counts, 401 and 404
    /// included: the question is reachability; no key is sent, so nothing secret leaves.
    async fn reachable(&self) -> bool {
        let mut last = self.last.lock().await;
        if let Some((at, reachable)) = *last {
            if at.elapsed() < self.cache_for {
                return reachable;
            }
        }
        let reachable = match self.client.get(&self.url).send().await {
            Ok(_) => true,
            Err(error) => {
                // Without the URL (it may carry user info); with the causes, since reqwest's own
                // message ("error sending request") does not say whether DNS, TCP or TLS failed.
                let error = error.without_url();
                let mut causes = Vec::new();
                let mut source = std::error::Error::source(&error);
                while let Some(cause) = source {
                    causes.push(cause.to_string());
                    source = cause.source();
                }
                tracing::warn!(
                    %error,
                    causes = causes.join(": "),
                    "readiness: the model server is unreachable"
                );
                false
            }
        };
        *last = Some((Instant::now(), reachable));
        reachable
    }
}

/// `GET /health`: the process serves HTTP.
pub(super) async fn health() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// `GET /ready`: 200 when this replica should get traffic, 503 with the reason when not.
pub(super) async fn ready(State(state): State<AppState>) -> Response {
    if state.sessions.shutdown.is_draining() {
        return not_ready("shutting_down");
    }
    let upstream = match &state.readiness.upstream {
        None => "not_checked",
        Some(probe) if probe.reachable().await => "ok",
        Some(_) => return not_ready("upstream_unreachable"),
    };
    let mut checks = json!({"config": "ok", "upstream": upstream});
    if let Some(report) = &state.readiness.mcp {
        let down = (report.0)();
        if !down.required.is_empty() {
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({
                    "status": "not_ready",
                    "reason": "mcp_server_down",
                    "mcp_down": down.required,
                    "mcp_optional_down": down.optional,
                })),
            )
                .into_response();
        }
        checks["mcp"] = if down.optional.is_empty() {
            json!("ok")
        } else {
            json!({"optional_down": down.optional})
        };
    }
    Json(json!({"status": "ready", "checks": checks})).into_response()
}

fn not_ready(reason: &'static str) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(json!({"status": "not_ready", "reason": reason})),
    )
        .into_response()
}

/// `GET /metrics`: the registry in the OpenMetrics text format.
pub(super) async fn metrics(State(state): State<AppState>) -> Response {
    let mut response = state.metrics.encode().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
    );
    response
}
