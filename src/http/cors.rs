//! CORS for frontends that call the service straight from the browser.
//!
//! Off unless origins are configured: with no CORS headers a browser refuses cross-origin
//! calls, which is the safe default (same-origin proxies and server-side clients need none).
//! `*` is honoured only when it is the configured value, and never with credentials
//! (`Settings::validate` refuses that, as browsers would).

use std::time::Duration;

use axum::http::{header, HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::settings::{CorsSettings, SettingsError};

/// The layer for these settings, or `None` when no origin is allowed.
pub(super) fn layer(settings: &CorsSettings) -> Result<Option<CorsLayer>, SettingsError> {
    if settings.allowed_origins.is_empty() {
        return Ok(None);
    }
    let origins = if settings.allowed_origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(
            settings
                .allowed_origins
                .iter()
                .map(|origin| parse(origin, HeaderValue::from_str))
                .collect::<Result<Vec<_>, _>>()?,
        )
    };
    let headers = settings
        .allowed_headers
        .iter()
        .map(|name| parse(name, str::parse::<HeaderName>))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(
        CorsLayer::new()
            .allow_origin(origins)
            .allow_methods([Method::GET, Method::POST, Method::OPTIONS])
            .allow_headers(headers)
            // A browser script may read these: the id to quote in a bug report, and how long
            // to wait after a 503.
            .expose_headers([HeaderName::from_static("x-request-id"), header::RETRY_AFTER])
            .allow_credentials(settings.allow_credentials)
            .max_age(Duration::from_secs(settings.max_age_secs)),
    ))
}

fn parse<T, E: std::fmt::Display>(
    text: &str,
    parse: impl FnOnce(&str) -> Result<T, E>,
) -> Result<T, SettingsError> {
    parse(text).map_err(|error| {
        SettingsError::Invalid(format!("server.cors: `{text}` is not usable: {error}"))
    })
}
