//! Per-run identity for streamable HTTP servers: opt-in headers rendered from templates such
//! as `{thread_id}`, so a server can tell which thread, run or agent a call is for.
//!
//! The connection is shared by every run, so the headers cannot be set on the transport. Each
//! call carries its identity in the request's `_meta` (`io.agui-host/threadId`, `runId`,
//! `agent`), which any server may read; this HTTP client reads it back from the outgoing
//! message and adds the rendered headers to that one POST.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use futures_util::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, RequestMetaObject};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use serde_json::{Map, Value};
use sse_stream::Sse;

/// The `_meta` keys of a call's identity.
pub(super) const THREAD_ID: &str = "io.agui-host/threadId";
pub(super) const RUN_ID: &str = "io.agui-host/runId";
pub(super) const AGENT: &str = "io.agui-host/agent";

/// The identity of a call as request metadata.
pub(super) fn meta(thread_id: &str, run_id: &str, agent: &str) -> RequestMetaObject {
    let mut meta = RequestMetaObject::default();
    for (key, value) in [(THREAD_ID, thread_id), (RUN_ID, run_id), (AGENT, agent)] {
        meta.0
            .insert(key.to_owned(), Value::String(value.to_owned()));
    }
    meta
}

/// Header templates, checked at start-up.
#[derive(Debug, Clone, Default)]
pub(super) struct IdentityHeaders {
    templates: Arc<Vec<(HeaderName, String)>>,
}

impl IdentityHeaders {
    pub(super) fn new(templates: &BTreeMap<String, String>) -> Result<Self, String> {
        let mut parsed = Vec::new();
        for (header, template) in templates {
            let name = HeaderName::from_bytes(header.as_bytes())
                .map_err(|_| format!("`{header}` is not a valid header name"))?;
            parsed.push((name, template.clone()));
        }
        Ok(IdentityHeaders {
            templates: Arc::new(parsed),
        })
    }

    pub(super) fn is_empty(&self) -> bool {
        self.templates.is_empty()
    }

    /// The headers for one outgoing message: none unless it is a request with an identity.
    fn for_message(&self, message: &ClientJsonRpcMessage) -> Vec<(HeaderName, HeaderValue)> {
        if self.is_empty() {
            return Vec::new();
        }
        let Ok(value) = serde_json::to_value(message) else {
            return Vec::new();
        };
        let Some(meta) = value.pointer("/params/_meta").and_then(Value::as_object) else {
            return Vec::new();
        };
        if !meta.contains_key(THREAD_ID) {
            return Vec::new();
        }
        self.templates
            .iter()
            .filter_map(|(name, template)| {
                // Values come from the client (thread and run ids): a value that cannot be a
                // header (control characters) drops the header rather than the call.
                let value = HeaderValue::from_str(&render(template, meta)).ok()?;
                Some((name.clone(), value))
            })
            .collect()
    }
}

/// `template` with `{thread_id}`, `{run_id}` and `{agent}` replaced.
fn render(template: &str, meta: &Map<String, Value>) -> String {
    let field = |key: &str| meta.get(key).and_then(Value::as_str).unwrap_or_default();
    template
        .replace("{thread_id}", field(THREAD_ID))
        .replace("{run_id}", field(RUN_ID))
        .replace("{agent}", field(AGENT))
}

/// reqwest, plus the identity headers of each call.
#[derive(Debug, Clone)]
pub(super) struct IdentityClient {
    pub(super) inner: reqwest::Client,
    pub(super) identity: IdentityHeaders,
}

impl StreamableHttpClient for IdentityClient {
    type Error = reqwest::Error;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        custom_headers.extend(self.identity.for_message(&message));
        self.inner
            .post_message(uri, message, session_id, auth_header, custom_headers)
            .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        mut custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse, StreamableHttpError<Self::Error>> {
        custom_headers.extend(self.identity.for_message(&message));
        self.inner
            .post_message_with_response_limits(
                uri,
                message,
                session_id,
                auth_header,
                custom_headers,
                limits,
            )
            .await
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), StreamableHttpError<Self::Error>> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.inner
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
            .await
    }

    async fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> Result<BoxStream<'static, Result<Sse, SseError>>, StreamableHttpError<Self::Error>> {
        self.inner
            .get_stream_with_max_sse_event_size(
                uri,
                session_id,
                last_event_id,
                auth_header,
                custom_headers,
                max_sse_event_size,
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_are_rendered_from_the_calls_meta() {
        let meta = meta("thread-1", "run-2", "assistant").0;
        assert_eq!(
            render("{agent}:{thread_id}/{run_id}", &meta),
            "assistant:thread-1/run-2"
        );
    }

    #[test]
    fn a_bad_header_name_is_refused() {
        let templates = BTreeMap::from([("bad header".to_owned(), "{thread_id}".to_owned())]);
        assert!(IdentityHeaders::new(&templates).is_err());
    }
}
