//! Logging: `tracing-subscriber` with an `EnvFilter` (`RUST_LOG` wins over the settings), JSON
//! lines in production, human-readable lines in development.
//!
//! JSON lines carry the current span and the list of spans: a run's lines name its agent, thread
//! id and run id (the `run` span) and the request's method, path and `x-request-id` (the
//! `request` span of the HTTP layer).

use tracing_subscriber::EnvFilter;

use crate::settings::TelemetrySettings;

/// Installs the global subscriber. A second call (tests) leaves the first one in place.
pub fn init(settings: &TelemetrySettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.log_filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only on a terminal: escape codes would litter a container's log collector.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi);
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
