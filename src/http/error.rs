//! `ApiError`: a refusal before any stream byte, as `{"error": {"code", "message"}}`.
//!
//! The response carries its code as a [`Rejection`] extension, so the metrics layer counts
//! refusals by code without parsing bodies.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::agent::AgentError;

#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    /// Seconds for `Retry-After` (503 when the server is full).
    retry_after: Option<u64>,
}

/// The code of a refused request, attached to its response for the metrics.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rejection(pub(super) &'static str);

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// Tells the client when to try again.
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code, "message": self.message}});
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response.extensions_mut().insert(Rejection(self.code));
        response
    }
}

impl From<AgentError> for ApiError {
    fn from(error: AgentError) -> Self {
        let status = match &error {
            AgentError::InvalidInput { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, error.code(), error.public_message())
    }
}

/// A handler panicked before streaming: answer 500 JSON and keep serving.
pub(super) fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> Response {
    tracing::error!("a request handler panicked");
    let body =
        json!({"error": {"code": "internal_error", "message": "An internal error occurred."}});
    let mut response = (
        StatusCode::INTERNAL_SERVER_ERROR,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    response
        .extensions_mut()
        .insert(Rejection("internal_error"));
    response
}
