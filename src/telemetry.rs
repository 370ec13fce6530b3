//! Logging: `tracing-subscriber` with an `EnvFilter` (`RUST_LOG` wins over the settings), JSON
//! lines in production, human-readable lines in development.

use tracing_subscriber::EnvFilter;

use crate::settings::TelemetrySettings;

/// Installs the global subscriber. A second call (tests) leaves the first one in place.
pub fn init(settings: &TelemetrySettings) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(&settings.log_filter))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
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
