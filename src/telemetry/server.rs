//! The HTTP server span of every request, named after the OpenTelemetry HTTP semantic
//! conventions: `{method} {route}`, of kind SERVER, with `http.request.method`, `url.path`,
//! `url.scheme`, `http.route`, `http.response.status_code`, `server.address`/`server.port`,
//! `network.protocol.version` and `user_agent.original`. It continues the caller's W3C trace
//! context, and everything a request does (a run's `invoke_agent` span first) is under it.
//!
//! Without export it is the `request` span the logs always had (method, path, request id), so a
//! server that exports nothing builds nothing more per request.

use tracing::field::Empty;
use tracing::Span;

use super::is_exporting;

/// The span of one request, from its head until its response body ends (for a run's stream,
/// its last event). Call it before the span is first entered.
pub fn request_span<B>(request: &http::Request<B>, request_id: &str) -> Span {
    let method = request.method();
    let path = request.uri().path();
    if !is_exporting() {
        return tracing::info_span!("request", %method, path, request_id);
    }
    let headers = request.headers();
    let header = |name: http::header::HeaderName| headers.get(name).and_then(|v| v.to_str().ok());
    // `Host` (HTTP/1) or the `:authority` (HTTP/2), as the client named the server.
    let authority = request
        .uri()
        .authority()
        .map(http::uri::Authority::as_str)
        .or_else(|| header(http::header::HOST));
    let (address, port) = authority.map_or((None, None), split_authority);
    let span = tracing::info_span!(
        "request",
        %method,
        path,
        request_id,
        // Until the route is known: the conventions' name for a request matching none.
        otel.name = %method,
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = %method,
        http.route = Empty,
        http.response.status_code = Empty,
        url.path = path,
        url.scheme = request.uri().scheme_str().unwrap_or("http"),
        server.address = address,
        server.port = port,
        network.protocol.version = protocol_version(request.version()),
        user_agent.original = header(http::header::USER_AGENT),
        error.type = Empty,
    );
    super::continue_trace(&span, headers);
    span
}

/// The route template the request matched (`/{agent}/runs/{run_id}/events`), which also names
/// the span.
pub fn record_route(span: &Span, method: &http::Method, route: &str) {
    if span.is_disabled() || !is_exporting() {
        return;
    }
    span.record("http.route", route);
    // For the log lines; the exported span's name is set below.
    span.record("otel.name", format!("{method} {route}"));
    // The span has started (the layer entered it), and a started span ignores `otel.name`.
    #[cfg(feature = "otel")]
    {
        use opentelemetry::trace::TraceContextExt;
        use tracing_opentelemetry::OpenTelemetrySpanExt;
        span.context()
            .span()
            .update_name(format!("{method} {route}"));
    }
}

/// The response's status; a 5xx marks the span as failed (a 4xx is the client's error, not the
/// server's, by the conventions).
pub fn record_status(span: &Span, status: http::StatusCode) {
    if span.is_disabled() || !is_exporting() {
        return;
    }
    span.record("http.response.status_code", i64::from(status.as_u16()));
    if status.is_server_error() {
        span.record("error.type", status.as_str());
        span.record("otel.status_code", "error");
    }
}

fn split_authority(authority: &str) -> (Option<&str>, Option<i64>) {
    // `[::1]:8080`, `example.com:8080`, `example.com`
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port.parse().ok()),
        _ => (authority, None),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ((!host.is_empty()).then_some(host), port)
}

fn protocol_version(version: http::Version) -> &'static str {
    match version {
        http::Version::HTTP_09 => "0.9",
        http::Version::HTTP_10 => "1.0",
        http::Version::HTTP_2 => "2",
        http::Version::HTTP_3 => "3",
        _ => "1.1",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_authority_splits_into_address_and_port() {
        assert_eq!(
            split_authority("agents.example.com:8443"),
            (Some("agents.example.com"), Some(8443))
        );
        assert_eq!(split_authority("[::1]:8080"), (Some("::1"), Some(8080)));
        assert_eq!(split_authority("[::1]"), (Some("::1"), None));
        assert_eq!(split_authority("example.com"), (Some("example.com"), None));
        assert_eq!(split_authority(":80"), (None, Some(80)));
    }
}
