//! Logs and traces: `tracing-subscriber` with an `EnvFilter` (`RUST_LOG` wins over the
//! settings), JSON lines in production, human-readable lines in development; and, when an OTLP
//! endpoint is configured in the environment, OpenTelemetry trace export (`export`) of the spans
//! that `server` and `genai` name, and of the GenAI metrics (`metrics`).
//!
//! JSON lines carry the current span and the list of spans: a run's lines name its agent, thread
//! id and run id (the `run` span) and the request's method, path and `x-request-id` (the
//! `request` span of the HTTP layer).

#[cfg(feature = "otel")]
mod export;
pub mod genai;
pub mod metrics;
pub mod server;

use tracing_subscriber::EnvFilter;

use crate::settings::TelemetrySettings;

#[cfg(feature = "otel")]
pub use export::{continue_trace, inject_trace_context, is_exporting, trace_context};

/// Keeps trace export running; dropping it (or [`TelemetryGuard::shutdown`]) flushes the spans
/// not yet sent. Hold it until the server has stopped.
#[derive(Debug, Default)]
#[must_use = "dropping the guard stops trace export"]
pub struct TelemetryGuard {
    #[cfg(feature = "otel")]
    exporter: Option<export::Exporter>,
    #[cfg(feature = "otel")]
    meters: Option<opentelemetry_sdk::metrics::SdkMeterProvider>,
}

impl TelemetryGuard {
    /// Sends the spans still buffered and stops the exporter (dropping the guard does the same).
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        #[cfg(feature = "otel")]
        if let Some(exporter) = self.exporter.take() {
            exporter.shutdown();
        }
        #[cfg(feature = "otel")]
        if let Some(meters) = self.meters.take() {
            export::shutdown_meters(meters);
        }
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Installs the global subscriber, with trace export when the environment asks for it (see
/// `docs/observability.md`). A second call (tests) leaves the first one in place. Call it from
/// within the tokio runtime: the gRPC exporter needs it.
pub fn init(settings: &TelemetrySettings) -> TelemetryGuard {
    let variable = std::env::var(CAPTURE_CONTENT_VARIABLE).ok();
    genai::set_capture_content(capture_content(
        settings.capture_content,
        variable.as_deref(),
    ));
    #[allow(unused_mut)] // without the `otel` feature there is nothing to add
    let mut guard = init_traces(settings);
    #[cfg(feature = "otel")]
    {
        guard.meters = init_metrics();
    }
    guard
}

/// Installs the meter provider when the environment asks for metric export.
#[cfg(feature = "otel")]
fn init_metrics() -> Option<opentelemetry_sdk::metrics::SdkMeterProvider> {
    let problem = match export::signal_from_env("METRICS", |name| std::env::var(name).ok()) {
        Ok(None) => return None,
        Ok(Some(config)) => match metrics::install(&config) {
            Ok(provider) => return Some(provider),
            Err(problem) => problem,
        },
        Err(problem) => problem,
    };
    tracing::error!(%problem, "OpenTelemetry metric export is off");
    None
}

/// Logs, and trace export when the environment asks for it.
fn init_traces(settings: &TelemetrySettings) -> TelemetryGuard {
    #[cfg(feature = "otel")]
    match export::from_env(|name| std::env::var(name).ok()) {
        Ok(None) => {}
        Ok(Some(config)) => return export::init_with_export(settings, &config),
        Err(problem) => {
            init_logs_only(settings);
            tracing::error!(%problem, "OpenTelemetry trace export is off");
            return TelemetryGuard::default();
        }
    }
    init_logs_only(settings);
    TelemetryGuard::default()
}

/// The OpenTelemetry GenAI instrumentations' switch for message content on spans.
const CAPTURE_CONTENT_VARIABLE: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// Whether spans carry message content: the variable, when set to a value it knows, wins over
/// `telemetry.capture_content` (as `RUST_LOG` wins over the log filter). It takes `true` and
/// `false`, and the newer `span_only`, `span_and_event`, `event_only` and `no_content` (this
/// service records content on spans only), in any case.
fn capture_content(setting: bool, variable: Option<&str>) -> bool {
    match variable.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        Some("true" | "span_only" | "span_and_event") => true,
        Some("false" | "no_content" | "event_only") => false,
        _ => setting,
    }
}

/// The log filter: `RUST_LOG`, else the settings, else `info`.
fn log_filter(settings: &TelemetrySettings) -> EnvFilter {
    EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.log_filter))
        .unwrap_or_else(|_| EnvFilter::new("info"))
}

/// Colours only on a terminal: escape codes would litter a container's log collector.
fn ansi() -> bool {
    colours_on(std::io::IsTerminal::is_terminal(&std::io::stdout()))
}

/// Whether output may carry colour and style escape codes: only on a terminal, and only when
/// `NO_COLOR` is unset or empty (the convention of no-color.org, which any non-empty value
/// turns on). The terminal client asks too.
pub fn colours_on(output_is_terminal: bool) -> bool {
    colours_allowed(output_is_terminal, std::env::var_os("NO_COLOR").as_deref())
}

fn colours_allowed(output_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    output_is_terminal && no_color.is_none_or(std::ffi::OsStr::is_empty)
}

/// Logs alone: the log filter is global, so a span the filter rejects costs nothing at all.
fn init_logs_only(settings: &TelemetrySettings) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(log_filter(settings))
        .with_ansi(ansi());
    let _already_installed = if settings.json {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init()
    } else {
        builder.try_init()
    };
}

/// Whether spans are being exported: never without the `otel` feature.
#[cfg(not(feature = "otel"))]
pub fn is_exporting() -> bool {
    false
}

/// Without the `otel` feature an incoming `traceparent` is ignored.
#[cfg(not(feature = "otel"))]
pub fn continue_trace(_span: &tracing::Span, _headers: &http::HeaderMap) {}

/// Without the `otel` feature no trace context goes upstream.
#[cfg(not(feature = "otel"))]
pub fn inject_trace_context(_headers: &mut http::HeaderMap) {}

/// Without the `otel` feature there is no trace context to pass on.
#[cfg(not(feature = "otel"))]
pub fn trace_context() -> std::collections::HashMap<String, String> {
    std::collections::HashMap::new()
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;

    use super::{capture_content, colours_allowed};

    #[test]
    fn the_genai_content_variable_wins_over_the_setting_when_it_says_something() {
        assert!(capture_content(false, Some("true")));
        assert!(capture_content(false, Some("SPAN_AND_EVENT")));
        assert!(capture_content(false, Some(" span_only ")));
        assert!(!capture_content(true, Some("False")));
        assert!(!capture_content(true, Some("NO_CONTENT")));
        assert!(!capture_content(true, Some("event_only")));
        assert!(capture_content(true, None));
        assert!(!capture_content(false, Some("maybe")));
        assert!(capture_content(true, Some("")));
    }

    #[test]
    fn no_color_with_any_value_turns_colours_off_and_a_pipe_never_has_them() {
        assert!(colours_allowed(true, None));
        assert!(colours_allowed(true, Some(OsStr::new(""))));
        assert!(!colours_allowed(true, Some(OsStr::new("1"))));
        assert!(!colours_allowed(true, Some(OsStr::new("false"))));
        assert!(!colours_allowed(false, None));
    }
}
