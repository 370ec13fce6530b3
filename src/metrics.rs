//! Service metrics: the Prometheus registry and what is counted; a run's metrics watch it as one
//! of its observers (`observe`). `GET /metrics` is the HTTP edge's (`crate::http`).
//!
//! `prometheus-client` (the Prometheus project's own Rust client) rather than the `metrics`
//! facade: its registry is a value, so every [`App`](crate::App) owns one and tests that run
//! many apps in one process never see each other's counts, and it compiles in a fraction of the
//! time (no global recorder, no exporter stack). The exposition is OpenMetrics text, which
//! Prometheus scrapes natively.
//!
//! Label values are bounded: agent names, providers and models come from the configuration
//! (never from a request), outcomes and error codes from the code (`upstream_http_<status>` at
//! worst adds one series per HTTP status). The token and duration metrics carry the `provider`
//! and `model` of the agent's model calls, as `agent::agent_model` names them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use axum::http::StatusCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Metric, Registry, Unit};

use crate::agent::AgentModel;
use crate::protocol::TokenUsage;

/// The exposition's media type (Prometheus negotiates it; `text/plain` would mislabel it).
pub(crate) const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AgentLabels {
    agent: String,
}

/// An agent and the provider and model its runs call.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    agent: String,
    provider: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    agent: String,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelOutcomeLabels {
    agent: String,
    outcome: &'static str,
    provider: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    agent: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    agent: String,
    direction: &'static str,
    provider: String,
    model: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RejectionLabels {
    code: &'static str,
    status: u16,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Every metric the service exports, registered in one registry.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    runs_started: Family<AgentLabels, Counter>,
    runs_finished: Family<OutcomeLabels, Counter>,
    run_errors: Family<CodeLabels, Counter>,
    runs_in_flight: Gauge,
    run_duration: HistogramFamily<ModelOutcomeLabels>,
    upstream_latency: HistogramFamily<ModelLabels>,
    time_to_first_token: HistogramFamily<ModelLabels>,
    tokens: Family<TokenLabels, Counter>,
    events: Family<AgentLabels, Counter>,
    bytes: Family<AgentLabels, Counter>,
    rejected: Family<RejectionLabels, Counter>,
    /// Each configured agent's provider and model.
    models: HashMap<String, AgentModel>,
}

/// Latencies from 25 ms to about 100 s.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.025, 2.0, 13))
}

/// Run durations from 100 ms to about 14 min.
fn duration_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.1, 2.0, 14))
}

/// Registers a new metric (with its unit, if any) and returns the handle to update it.
fn register<M: Metric + Clone + Default>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    unit: Option<Unit>,
) -> M {
    let metric = M::default();
    match unit {
        Some(unit) => registry.register_with_unit(name, help, unit, metric.clone()),
        None => registry.register(name, help, metric.clone()),
    }
    metric
}

/// Registers a family of histograms in seconds, each made by `buckets`.
fn register_histograms<L>(
    registry: &mut Registry,
    name: &str,
    help: &str,
    buckets: fn() -> Histogram,
) -> HistogramFamily<L>
where
    L: Clone + std::hash::Hash + Eq + EncodeLabelSet + std::fmt::Debug + Send + Sync + 'static,
{
    let family: HistogramFamily<L> = Family::new_with_constructor(buckets);
    registry.register_with_unit(name, help, Unit::Seconds, family.clone());
    family
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// Metrics whose runs name the provider and model of their agent, from `models` (an agent
    /// missing there gets empty labels).
    pub fn for_agents(models: impl IntoIterator<Item = (String, AgentModel)>) -> Self {
        Metrics {
            models: models.into_iter().collect(),
            ..Metrics::new()
        }
    }

    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("agui");
        let r = &mut registry;
        let runs_started = register(r, "runs_started", "Runs whose stream began, by agent", None);
        let runs_finished = register(
            r,
            "runs_finished",
            "Runs that ended, by agent and outcome (success, error, cancelled by the client)",
            None,
        );
        let run_errors = register(
            r,
            "run_errors",
            "Runs that ended with RUN_ERROR, by agent and code",
            None,
        );
        let runs_in_flight = register(r, "runs_in_flight", "Runs streaming now", None);
        let run_duration = register_histograms(
            r,
            "run_duration",
            "Time from a run's start to its last event, by agent and outcome",
            duration_histogram,
        );
        let upstream_latency = register_histograms(
            r,
            "upstream_latency",
            "Time from a run's start to the agent's first update (the model's first chunk)",
            latency_histogram,
        );
        let time_to_first_token = register_histograms(
            r,
            "time_to_first_token",
            "Time from a run's start to its first text, reasoning or tool-call content",
            latency_histogram,
        );
        let tokens = register(
            r,
            "tokens",
            "Model tokens reported by the model server, by agent and direction (input, output)",
            None,
        );
        let events = register(
            r,
            "stream_events",
            "AG-UI events written to streams, by agent",
            None,
        );
        let bytes = register(
            r,
            "stream",
            "Bytes written to streams (keep-alive comments included), by agent",
            Some(Unit::Bytes),
        );
        let rejected = register(
            r,
            "requests_rejected",
            "Requests refused before any stream byte, by error code and HTTP status",
            None,
        );
        Metrics {
            registry,
            runs_started,
            runs_finished,
            run_errors,
            runs_in_flight,
            run_duration,
            upstream_latency,
            time_to_first_token,
            tokens,
            events,
            bytes,
            rejected,
            models: HashMap::new(),
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail; an encoder error would be a bug in a label value.
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!(%error, "cannot encode the metrics");
        }
        text
    }

    /// Counts a request refused before any stream byte.
    pub(crate) fn rejected(&self, code: &'static str, status: StatusCode) {
        self.rejected
            .get_or_create(&RejectionLabels {
                code,
                status: status.as_u16(),
            })
            .inc();
    }

    /// Counts a run that starts streaming; the returned guard counts its end.
    pub(crate) fn run_started(self: &Arc<Self>, agent: &str) -> RunGuard {
        let (provider, model) = self
            .models
            .get(agent)
            .map(|model| (model.provider.to_owned(), model.model.clone()))
            .unwrap_or_default();
        let model = ModelLabels {
            agent: agent.to_owned(),
            provider,
            model,
        };
        let agent = AgentLabels {
            agent: agent.to_owned(),
        };
        self.runs_started.get_or_create(&agent).inc();
        self.runs_in_flight.inc();
        RunGuard {
            events: self.events.get_or_create(&agent).clone(),
            bytes: self.bytes.get_or_create(&agent).clone(),
            metrics: Arc::clone(self),
            model,
            started_at: Instant::now(),
            outcome: None,
            first_update_seen: false,
            first_token_seen: false,
        }
    }
}

/// One run's place in the metrics, as one of the run's observers (`crate::session`).
///
/// Dropping it ends the run's accounting; the pump finishes it when the terminal event is
/// written, or drops it when the response is dropped (client gone, server stopped), never when
/// the headers are sent.
#[derive(Debug)]
pub(crate) struct RunGuard {
    metrics: Arc<Metrics>,
    /// The run's agent and the provider and model it calls.
    model: ModelLabels,
    /// The agent's event and byte counters, looked up once: a write counts without a lock.
    events: Counter,
    bytes: Counter,
    started_at: Instant,
    /// `None` until the run ends on its own; a guard dropped so was cancelled.
    outcome: Option<(&'static str, Option<String>)>,
    first_update_seen: bool,
    first_token_seen: bool,
}

impl RunGuard {
    /// The agent produced an update: the first one times the upstream.
    pub(crate) fn on_update(&mut self) {
        if !self.first_update_seen {
            self.first_update_seen = true;
            self.metrics
                .upstream_latency
                .get_or_create(&self.model)
                .observe(self.started_at.elapsed().as_secs_f64());
        }
    }

    /// The first content the user sees (text, reasoning or a tool call).
    pub(crate) fn on_content(&mut self) {
        if !self.first_token_seen {
            self.first_token_seen = true;
            self.metrics
                .time_to_first_token
                .get_or_create(&self.model)
                .observe(self.started_at.elapsed().as_secs_f64());
        }
    }

    /// A model call's tokens, under the provider and model the call reported (its agent's).
    pub(crate) fn on_usage(&self, usage: &TokenUsage) {
        for (direction, count) in [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
        ] {
            if let Some(count) = count {
                self.metrics
                    .tokens
                    .get_or_create(&TokenLabels {
                        agent: self.model.agent.clone(),
                        direction,
                        provider: usage
                            .provider
                            .clone()
                            .unwrap_or_else(|| self.model.provider.clone()),
                        model: usage
                            .model
                            .clone()
                            .unwrap_or_else(|| self.model.model.clone()),
                    })
                    .inc_by(count);
            }
        }
    }

    /// Bytes about to be written, holding `events` AG-UI events.
    pub(crate) fn on_write(&self, events: u64, bytes: usize) {
        if events > 0 {
            self.events.inc_by(events);
        }
        self.bytes.inc_by(u64::try_from(bytes).unwrap_or(u64::MAX));
    }

    /// The run wrote RUN_FINISHED (counted when the guard drops).
    pub(crate) fn succeeded(&mut self) {
        self.outcome = Some(("success", None));
    }

    /// The run wrote RUN_ERROR with `code` (counted when the guard drops).
    pub(crate) fn failed(&mut self, code: &str) {
        self.outcome = Some(("error", Some(code.to_owned())));
    }
}

impl Drop for RunGuard {
    fn drop(&mut self) {
        let (outcome, code) = self.outcome.take().unwrap_or(("cancelled", None));
        let labels = OutcomeLabels {
            agent: self.model.agent.clone(),
            outcome,
        };
        self.metrics.runs_finished.get_or_create(&labels).inc();
        self.metrics
            .run_duration
            .get_or_create(&ModelOutcomeLabels {
                agent: labels.agent,
                outcome,
                provider: self.model.provider.clone(),
                model: self.model.model.clone(),
            })
            .observe(self.started_at.elapsed().as_secs_f64());
        if let Some(code) = code {
            self.metrics
                .run_errors
                .get_or_create(&CodeLabels {
                    agent: self.model.agent.clone(),
                    code,
                })
                .inc();
        }
        self.metrics.runs_in_flight.dec();
    }
}

mod observe;
