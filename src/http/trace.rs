//! The HTTP server span of every request as a tower layer at the router
//! (`telemetry::server`): opened with the request, named after the matched route once routing
//! has found it, given the response status, and held by the response body, so a run's span and
//! everything under it are children of it and it lasts as long as the stream.

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use tower_http::classify::{ServerErrorsAsFailures, SharedClassifier};
use tower_http::trace::{DefaultOnRequest, MakeSpan, OnResponse, TraceLayer};
use tracing::Span;

use super::REQUEST_ID;
use crate::telemetry::server;

/// The layer: put it outside everything that may answer (CORS, authentication, the Host
/// allow-list), so refusals have spans too, and inside the request-id layers, so the span
/// names the request's id.
pub(super) fn layer(
) -> TraceLayer<SharedClassifier<ServerErrorsAsFailures>, ServerSpan, DefaultOnRequest, ServerSpan>
{
    TraceLayer::new_for_http()
        .make_span_with(ServerSpan)
        .on_response(ServerSpan)
}

/// Makes the span and records the response on it.
#[derive(Debug, Clone, Copy)]
pub(super) struct ServerSpan;

impl<B> MakeSpan<B> for ServerSpan {
    fn make_span(&mut self, request: &http::Request<B>) -> Span {
        let request_id = request
            .headers()
            .get(&REQUEST_ID)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        server::request_span(request, request_id)
    }
}

impl<B> OnResponse<B> for ServerSpan {
    fn on_response(self, response: &http::Response<B>, latency: std::time::Duration, span: &Span) {
        server::record_status(span, response.status());
        // What tower-http's default logs at DEBUG, kept for the logs.
        tracing::debug!(
            status = response.status().as_u16(),
            latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX),
            "finished processing request"
        );
    }
}

/// Route middleware (it runs after routing, where the matched route is known): names the
/// request's span after its route template.
pub(super) async fn name_route(request: Request, next: Next) -> Response {
    if let Some(route) = request.extensions().get::<MatchedPath>() {
        server::record_route(&Span::current(), request.method(), route.as_str());
    }
    next.run(request).await
}
