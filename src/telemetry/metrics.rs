//! The OpenTelemetry GenAI metrics, exported over OTLP when the environment asks
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, unless
//! `OTEL_METRICS_EXPORTER=none`): `gen_ai.client.token.usage` and
//! `gen_ai.client.operation.duration` of every model call, `gen_ai.client.operation.time_to_first_chunk`,
//! and the duration of every run (`invoke_agent`) and server tool call (`execute_tool`) as
//! operation durations too. Their attributes are the conventions' (`gen_ai.operation.name`,
//! `gen_ai.provider.name`, `gen_ai.request.model`, `gen_ai.token.type`, `gen_ai.agent.name`,
//! `gen_ai.tool.name`, `error.type`), all from the configuration or the code, never from a
//! request, so their cardinality is bounded.
//!
//! Off, recording is one atomic load.

use std::sync::OnceLock;

/// What one recorded operation was.
#[derive(Debug, Clone, Copy, Default)]
pub struct Operation<'a> {
    /// `chat`, `invoke_agent` or `execute_tool`.
    pub name: &'a str,
    pub provider: Option<&'a str>,
    pub model: Option<&'a str>,
    pub agent: Option<&'a str>,
    pub tool: Option<&'a str>,
    /// The stable code of a failure.
    pub error: Option<&'a str>,
}

#[cfg(feature = "otel")]
struct Instruments {
    token_usage: opentelemetry::metrics::Histogram<u64>,
    duration: opentelemetry::metrics::Histogram<f64>,
    first_chunk: opentelemetry::metrics::Histogram<f64>,
}

#[cfg(feature = "otel")]
static INSTRUMENTS: OnceLock<Instruments> = OnceLock::new();
#[cfg(not(feature = "otel"))]
static INSTRUMENTS: OnceLock<()> = OnceLock::new();

/// Whether metrics are exported.
pub fn is_exporting() -> bool {
    INSTRUMENTS.get().is_some()
}

/// A model call's tokens (`input`, `output`), as the model server reported them.
pub fn record_tokens(call: &Operation<'_>, input_tokens: u64, output_tokens: u64) {
    #[cfg(feature = "otel")]
    if let Some(instruments) = INSTRUMENTS.get() {
        for (kind, count) in [("input", input_tokens), ("output", output_tokens)] {
            let mut attributes = attributes(call);
            attributes.push(opentelemetry::KeyValue::new("gen_ai.token.type", kind));
            instruments.token_usage.record(count, &attributes);
        }
    }
    #[cfg(not(feature = "otel"))]
    let _ = (call, input_tokens, output_tokens);
}

/// How long an operation took, from its start to its end (or failure).
pub fn record_duration(operation: &Operation<'_>, seconds: f64) {
    #[cfg(feature = "otel")]
    if let Some(instruments) = INSTRUMENTS.get() {
        instruments.duration.record(seconds, &attributes(operation));
    }
    #[cfg(not(feature = "otel"))]
    let _ = (operation, seconds);
}

/// How long a model call took to its first chunk.
pub fn record_time_to_first_chunk(call: &Operation<'_>, seconds: f64) {
    #[cfg(feature = "otel")]
    if let Some(instruments) = INSTRUMENTS.get() {
        instruments.first_chunk.record(seconds, &attributes(call));
    }
    #[cfg(not(feature = "otel"))]
    let _ = (call, seconds);
}

#[cfg(feature = "otel")]
fn attributes(operation: &Operation<'_>) -> Vec<opentelemetry::KeyValue> {
    use opentelemetry::KeyValue;
    let mut attributes = vec![KeyValue::new(
        "gen_ai.operation.name",
        operation.name.to_owned(),
    )];
    let optional = [
        (
            "gen_ai.provider.name",
            operation.provider.map(super::genai::provider_name),
        ),
        ("gen_ai.request.model", operation.model),
        ("gen_ai.agent.name", operation.agent),
        ("gen_ai.tool.name", operation.tool),
        ("error.type", operation.error),
    ];
    for (key, value) in optional {
        if let Some(value) = value {
            attributes.push(KeyValue::new(key, value.to_owned()));
        }
    }
    attributes
}

/// Installs the meter provider and the instruments; the provider is to be shut down at exit
/// (which exports what is left).
#[cfg(feature = "otel")]
pub(super) fn install(
    config: &super::export::ExportConfig,
) -> Result<opentelemetry_sdk::metrics::SdkMeterProvider, String> {
    use opentelemetry::metrics::MeterProvider as _;
    use opentelemetry_otlp::{MetricExporter, WithTonicConfig};

    // The builders read the endpoint, headers, timeout and compression variables themselves;
    // the reader reads OTEL_METRIC_EXPORT_INTERVAL (default 60 s).
    let exporter = match config.protocol {
        super::export::Protocol::HttpProtobuf => MetricExporter::builder().with_http().build(),
        super::export::Protocol::Grpc => {
            let builder = MetricExporter::builder().with_tonic();
            match super::export::grpc_tls(config) {
                Some(tls) => builder.with_tls_config(tls).build(),
                None => builder.build(),
            }
        }
    }
    .map_err(|error| format!("cannot build the OTLP metric exporter: {error}"))?;
    let provider = opentelemetry_sdk::metrics::SdkMeterProvider::builder()
        .with_periodic_exporter(exporter)
        .with_resource(super::export::resource())
        .build();
    let meter = provider.meter("agui-host");
    // Bucket boundaries the conventions advise for each.
    let seconds = vec![
        0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
    ];
    let tokens = vec![
        1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0,
        4194304.0, 16777216.0, 67108864.0,
    ];
    let instruments = Instruments {
        token_usage: meter
            .u64_histogram("gen_ai.client.token.usage")
            .with_unit("{token}")
            .with_description("Tokens of each model call, by gen_ai.token.type")
            .with_boundaries(tokens)
            .build(),
        duration: meter
            .f64_histogram("gen_ai.client.operation.duration")
            .with_unit("s")
            .with_description("Duration of each model call, run and server tool call")
            .with_boundaries(seconds.clone())
            .build(),
        first_chunk: meter
            .f64_histogram("gen_ai.client.operation.time_to_first_chunk")
            .with_unit("s")
            .with_description("Time from a model call's start to its first chunk")
            .with_boundaries(seconds)
            .build(),
    };
    if INSTRUMENTS.set(instruments).is_err() {
        return Err("the metrics were installed already".into());
    }
    tracing::info!(
        endpoint = %crate::text::redact_url(&config.endpoint),
        protocol = ?config.protocol,
        "OpenTelemetry metric export on"
    );
    Ok(provider)
}
