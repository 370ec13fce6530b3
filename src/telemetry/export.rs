//! OTLP trace export, configured by the standard `OTEL_*` variables: which variables turn it
//! on, the exporter (gRPC or HTTP/protobuf), the subscriber that feeds it, W3C trace-context
//! propagation in and out, and the flush at exit.
//!
//! Export is on only when an OTLP endpoint is set. Then logs and traces get separate filters:
//! `RUST_LOG` keeps choosing the log lines, and never silences a span an operator traces, while
//! only the spans `server` and `genai` build (they carry `otel.name`) and the service's own log
//! events inside them are exported; the dependencies' spans stay in the logs. JSON log lines
//! then carry the `trace_id` and `span_id` of the span they were written in.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider};
use opentelemetry::KeyValue;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_otlp::{SpanExporter, WithTonicConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::resource::{
    EnvResourceDetector, SdkProvidedResourceDetector, TelemetryResourceDetector,
};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::{Level, Metadata};
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::filter_fn;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use super::TelemetryGuard;
use crate::settings::TelemetrySettings;

/// Set once the exporting subscriber is installed: until then propagation does nothing, so a
/// server without export pays one atomic load per request for it.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// The most a shutdown waits for the last spans to be sent.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether spans are being exported.
pub fn is_exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// Makes `span` a child of the caller's trace when `headers` carry a valid W3C `traceparent`
/// (and `tracestate`). Call it before the span is first entered.
pub fn continue_trace(span: &tracing::Span, headers: &http::HeaderMap) {
    if !is_exporting() {
        return;
    }
    let parent = TraceContextPropagator::new().extract(&HeaderExtractor(headers));
    if parent.span().span_context().is_valid() {
        // Fails only when the span is disabled or already started: then it keeps its own trace.
        let _ = span.set_parent(parent);
    }
}

/// Adds the current span's `traceparent` (and `tracestate`) to an outgoing request's headers.
pub fn inject_trace_context(headers: &mut http::HeaderMap) {
    if !is_exporting() {
        return;
    }
    let context = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut HeaderInjector(headers));
}

/// The current span's `traceparent` (and `tracestate`), as the name-value pairs a carrier other
/// than HTTP headers takes (an MCP request's `params._meta`). Empty when nothing is exported.
pub fn trace_context() -> std::collections::HashMap<String, String> {
    let mut carrier = std::collections::HashMap::new();
    if is_exporting() {
        let context = tracing::Span::current().context();
        TraceContextPropagator::new().inject_context(&context, &mut carrier);
    }
    carrier
}

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Protocol {
    Grpc,
    HttpProtobuf,
}

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ExportConfig {
    pub(super) protocol: Protocol,
    /// The endpoint as configured (the signal's own variable first), for the log and TLS.
    pub(super) endpoint: String,
}

/// Reads the standard variables of trace export through `var`. `Ok(None)`: export is off (no
/// endpoint set, `OTEL_SDK_DISABLED=true`, or `OTEL_TRACES_EXPORTER=none`). `Err`: a value this
/// build cannot honour, named.
pub(super) fn from_env(
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<ExportConfig>, String> {
    signal_from_env("TRACES", var)
}

/// [`from_env`] for a signal: `TRACES` or `METRICS` (`OTEL_METRICS_EXPORTER`,
/// `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, ...).
pub(super) fn signal_from_env(
    signal: &str,
    var: impl Fn(&str) -> Option<String>,
) -> Result<Option<ExportConfig>, String> {
    let var = |name: &str| {
        var(name)
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(None);
    }
    let exporter = format!("OTEL_{signal}_EXPORTER");
    match var(&exporter).as_deref() {
        None | Some("otlp") => {}
        Some("none") => return Ok(None),
        Some(other) => {
            return Err(format!(
                "{exporter}=`{other}` is not supported (use `otlp` or `none`)"
            ))
        }
    }
    let Some(endpoint) = var(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT"))
        .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))
    else {
        return Ok(None);
    };
    let signal_protocol = format!("OTEL_EXPORTER_OTLP_{signal}_PROTOCOL");
    let (name, value) = match var(&signal_protocol) {
        Some(value) => (signal_protocol.as_str(), Some(value)),
        None => (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            var("OTEL_EXPORTER_OTLP_PROTOCOL"),
        ),
    };
    // The specification's default transport is HTTP/protobuf.
    let protocol = match value.as_deref() {
        None | Some("http/protobuf") => Protocol::HttpProtobuf,
        Some("grpc") => Protocol::Grpc,
        Some(other) => {
            return Err(format!(
                "{name}=`{other}` is not supported (use `grpc` or `http/protobuf`)"
            ))
        }
    };
    Ok(Some(ExportConfig { protocol, endpoint }))
}

/// The tracer provider and its batch exporter.
#[derive(Debug)]
pub(super) struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Sends what is buffered and stops.
    pub(super) fn shutdown(self) {
        let provider = self.provider;
        let result = blocking(move || provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT));
        if let Err(error) = result {
            tracing::warn!(%error, "OpenTelemetry: the last spans may not have been sent");
        }
    }
}

/// Exports the last metrics and stops the meter provider.
pub(super) fn shutdown_meters(provider: opentelemetry_sdk::metrics::SdkMeterProvider) {
    let result = blocking(move || provider.shutdown_with_timeout(SHUTDOWN_TIMEOUT));
    if let Err(error) = result {
        tracing::warn!(%error, "OpenTelemetry: the last metrics may not have been sent");
    }
}

/// Runs an exporter's blocking flush. Inside the server's multi-threaded runtime it blocks in
/// place, so the other workers keep the gRPC channel's tasks running meanwhile.
fn blocking<T>(flush: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(flush)
        }
        _ => flush(),
    }
}

/// Installs logs and trace export. If the exporter cannot be built, logs alone, and says why.
pub(super) fn init_with_export(
    settings: &TelemetrySettings,
    config: &ExportConfig,
) -> TelemetryGuard {
    let provider = match build_provider(config) {
        Ok(provider) => provider,
        Err(problem) => {
            super::init_logs_only(settings);
            tracing::error!(%problem, "OpenTelemetry trace export is off");
            return TelemetryGuard::default();
        }
    };
    let tracer = provider.tracer("agui-host");
    let traces = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(filter_fn(is_exported));
    let logs = if settings.json {
        let json = tracing_subscriber::fmt::format()
            .json()
            .flatten_event(true)
            .with_current_span(true);
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .event_format(WithTraceIds(json))
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_ansi(super::ansi())
            .boxed()
    };
    let installed = tracing_subscriber::registry()
        .with(logs.with_filter(super::log_filter(settings)))
        .with(traces)
        .try_init();
    let exporter = Exporter { provider };
    if installed.is_err() {
        exporter.shutdown();
        return TelemetryGuard::default();
    }
    EXPORTING.store(true, Ordering::Relaxed);
    tracing::info!(
        endpoint = %crate::text::redact_url(&config.endpoint),
        protocol = ?config.protocol,
        "OpenTelemetry trace export on"
    );
    TelemetryGuard {
        exporter: Some(exporter),
        meters: None,
    }
}

/// A JSON log line with the `trace_id` and `span_id` of the exported span it was written in
/// (the innermost one, when the current span is not exported itself) first, so a log backend
/// can take a line to its trace. Lines outside any exported span are left as they are.
struct WithTraceIds<F>(F);

impl<S, N, F> FormatEvent<S, N> for WithTraceIds<F>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let Some((trace_id, span_id)) = exported_span_ids(ctx) else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => {
                let comma = if rest.starts_with('}') { "" } else { "," };
                write!(
                    writer,
                    "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\"{comma}{rest}"
                )
            }
            None => writer.write_str(&line),
        }
    }
}

/// The trace and span id of the innermost exported span around the event being logged.
fn exported_span_ids<S, N>(ctx: &FmtContext<'_, S, N>) -> Option<(String, String)>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    let current = ctx.lookup_current()?;
    tracing::dispatcher::get_default(|dispatch| {
        current.scope().find_map(|span| {
            let context = tracing_opentelemetry::get_otel_context(&span.id(), dispatch)?;
            let span_context = context.span().span_context().clone();
            span_context.is_valid().then(|| {
                (
                    span_context.trace_id().to_string(),
                    span_context.span_id().to_string(),
                )
            })
        })
    })
}

/// The spans `genai` builds (they name themselves with `otel.name`), and this service's log
/// events of level INFO and above, which become events of the span they happen in.
fn is_exported(metadata: &Metadata<'_>) -> bool {
    if metadata.is_span() {
        metadata.fields().field("otel.name").is_some()
    } else {
        *metadata.level() <= Level::INFO && metadata.target().starts_with("agui_host")
    }
}

/// TLS with the system's root certificates for an `https:` gRPC endpoint (HTTP/protobuf takes
/// it from the URL by itself).
pub(super) fn grpc_tls(
    config: &ExportConfig,
) -> Option<opentelemetry_otlp::tonic_types::transport::ClientTlsConfig> {
    config.endpoint.starts_with("https:").then(|| {
        opentelemetry_otlp::tonic_types::transport::ClientTlsConfig::new().with_native_roots()
    })
}

fn build_provider(config: &ExportConfig) -> Result<SdkTracerProvider, String> {
    // The builders read the endpoint, headers, timeout and compression variables themselves.
    let exporter = match config.protocol {
        Protocol::HttpProtobuf => SpanExporter::builder().with_http().build(),
        Protocol::Grpc => {
            let builder = SpanExporter::builder().with_tonic();
            match grpc_tls(config) {
                Some(tls) => builder.with_tls_config(tls).build(),
                None => builder.build(),
            }
        }
    }
    .map_err(|error| format!("cannot build the OTLP exporter: {error}"))?;
    // The sampler comes from OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (default:
    // parentbased_always_on), read by the SDK.
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource())
        .build())
}

/// `service.name` from OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES, else `agui-host` (rather
/// than the SDK's `unknown_service`); `service.version` unless the environment sets one.
pub(super) fn resource() -> Resource {
    let detected = || {
        Resource::builder_empty()
            .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
            .with_detectors(&[
                Box::new(SdkProvidedResourceDetector),
                Box::new(TelemetryResourceDetector),
                Box::new(EnvResourceDetector::new()),
            ])
    };
    let resource = detected().build();
    let named = resource
        .get(&opentelemetry::Key::new("service.name"))
        .is_some_and(|name| !name.as_str().starts_with("unknown_service"));
    if named {
        resource
    } else {
        detected().with_service_name("agui-host").build()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Option<ExportConfig>, String> {
        from_env(|name| {
            vars.iter()
                .find(|(key, _)| *key == name)
                .map(|(_, value)| (*value).to_owned())
        })
    }

    #[test]
    fn export_is_off_without_an_endpoint() {
        assert_eq!(config(&[]), Ok(None));
        assert_eq!(
            config(&[
                ("OTEL_SERVICE_NAME", "agents"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_TRACES_SAMPLER", "always_on"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "  "),
            ]),
            Ok(None)
        );
    }

    #[test]
    fn export_is_off_when_disabled_even_with_an_endpoint() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
        assert_eq!(config(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]), Ok(None));
        assert_eq!(
            config(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            Ok(None)
        );
        assert!(config(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")])
            .unwrap_err()
            .contains("OTEL_TRACES_EXPORTER"));
    }

    #[test]
    fn the_protocol_defaults_to_http_protobuf_and_the_traces_variables_win() {
        let on = config(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")]);
        assert_eq!(
            on,
            Ok(Some(ExportConfig {
                protocol: Protocol::HttpProtobuf,
                endpoint: "http://collector:4318".to_owned(),
            }))
        );
        let grpc = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://traces:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
        ]);
        assert_eq!(
            grpc,
            Ok(Some(ExportConfig {
                protocol: Protocol::Grpc,
                endpoint: "https://traces:4317".to_owned(),
            }))
        );
    }

    #[test]
    fn metrics_read_their_own_variables_first_and_may_be_turned_off_alone() {
        let vars = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                vars.iter()
                    .find(|(key, _)| *key == name)
                    .map(|(_, value)| (*value).to_owned())
            }
        };
        let both = vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "https://metrics:4317",
            ),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ]);
        assert_eq!(signal_from_env("TRACES", both), Ok(None));
        assert_eq!(
            signal_from_env("METRICS", both),
            Ok(Some(ExportConfig {
                protocol: Protocol::Grpc,
                endpoint: "https://metrics:4317".to_owned(),
            }))
        );
        let off = vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ]);
        assert_eq!(signal_from_env("METRICS", off), Ok(None));
        assert!(signal_from_env("TRACES", off).unwrap().is_some());
        let unknown = vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_METRICS_EXPORTER", "prometheus"),
        ]);
        assert!(signal_from_env("METRICS", unknown)
            .unwrap_err()
            .contains("OTEL_METRICS_EXPORTER=`prometheus`"));
    }

    #[test]
    fn an_unsupported_protocol_is_named() {
        let problem = config(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ])
        .unwrap_err();
        assert!(
            problem.contains("OTEL_EXPORTER_OTLP_PROTOCOL=`http/json`"),
            "{problem}"
        );
    }
}
