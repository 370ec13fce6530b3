//! The `http` tool kind: POSTs the arguments as JSON to a configured URL and returns the JSON
//! answer. Header values come from environment variables read at start-up, so secrets live in
//! the environment, not in configuration files. Every failure (connection, status, timeout,
//! a body that is not JSON where an envelope is expected) is a tool error the model sees.
//! Every request names its call: `Idempotency-Key` (a digest of the caller's scope, the agent,
//! the thread id and the tool call id: see [`ToolContext::idempotency_key`]) and
//! `X-Tool-Call-Id`, so a service can dedupe a call delivered more than once (an approval
//! answered again after a lost response without a thread store, a retried run). The key is a
//! digest rather than the ids joined, since ids are client and model strings: joined, two
//! users on one thread id with a reused call id, or ids holding the separator, would share it.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::{StateUpdate, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput};

/// Largest answer read from the service; a tool result is for a model's context window.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

pub struct HttpPostTool {
    definition: ToolDefinition,
    url: reqwest::Url,
    client: reqwest::Client,
    envelope: bool,
}

impl std::fmt::Debug for HttpPostTool {
    // Headers may hold secrets: only the tool's identity is printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpPostTool")
            .field("name", &self.definition.name)
            .field("url", &self.url.as_str())
            .finish_non_exhaustive()
    }
}

impl HttpPostTool {
    /// # Errors
    /// A URL that is not http(s), a bad header name, or a header variable that is not set.
    pub fn new(
        name: &str,
        description: &str,
        parameters: Value,
        url: &str,
        headers_from_env: &BTreeMap<String, String>,
        timeout: Duration,
        envelope: bool,
    ) -> Result<Self, String> {
        let url = reqwest::Url::parse(url).map_err(|e| format!("`url` is not a URL: {e}"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err("`url` must be http or https".into());
        }
        let mut headers = HeaderMap::new();
        for (header, variable) in headers_from_env {
            let name = HeaderName::from_bytes(header.as_bytes())
                .map_err(|_| format!("`{header}` is not a valid header name"))?;
            let value = std::env::var(variable)
                .map_err(|_| format!("header `{header}` needs the environment variable `{variable}`, which is not set"))?;
            let mut value = HeaderValue::from_str(&value)
                .map_err(|_| format!("the value of `{variable}` is not a valid header value"))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(HttpPostTool {
            definition: ToolDefinition::new(name, description, parameters),
            url,
            client,
            envelope,
        })
    }

    async fn post(&self, arguments: Value, context: ToolContext) -> Result<ToolOutput, ToolError> {
        let response = self
            .client
            .post(self.url.clone())
            .header("idempotency-key", header_value(&context.idempotency_key()))
            .header("x-tool-call-id", header_value(&context.tool_call_id))
            .json(&arguments)
            .send()
            .await
            .map_err(|e| {
                if e.is_timeout() {
                    ToolError::Failed("the service did not answer in time".into())
                } else {
                    ToolError::Failed("the service could not be reached".into())
                }
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(ToolError::Failed(format!(
                "the service answered HTTP {}",
                status.as_u16()
            )));
        }
        let mut body = Vec::new();
        let mut response = response;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|_| ToolError::Failed("the service's answer was cut off".into()))?
        {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(ToolError::Failed(
                    "the service's answer is too large".into(),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        let answer: Value = match serde_json::from_slice(&body) {
            Ok(value) => value,
            Err(_) if !self.envelope => Value::String(String::from_utf8_lossy(&body).into_owned()),
            Err(_) => return Err(ToolError::Failed("the service's answer is not JSON".into())),
        };
        if !self.envelope {
            return Ok(ToolOutput::from(answer));
        }
        let Value::Object(mut envelope) = answer else {
            return Err(ToolError::Failed(
                "the service's answer is not an envelope object".into(),
            ));
        };
        let content = envelope.remove("content").unwrap_or(Value::Null);
        let state = envelope
            .remove("state")
            .map(StateUpdate::from_envelope)
            .transpose()?;
        Ok(ToolOutput {
            content,
            state,
            activity: None,
        })
    }
}

impl Tool for HttpPostTool {
    fn definition(&self) -> &ToolDefinition {
        &self.definition
    }

    fn call<'a>(
        &'a self,
        arguments: Value,
        context: ToolContext,
    ) -> BoxFuture<'a, Result<ToolOutput, ToolError>> {
        self.post(arguments, context).boxed()
    }
}

/// `text` as a header value: ids are client or model strings, so any byte outside visible
/// ASCII (and `%` itself) is percent-encoded rather than dropping the header.
fn header_value(text: &str) -> HeaderValue {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_graphic() && byte != b'%' {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    HeaderValue::from_str(&encoded).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_become_header_values_without_loss() {
        assert_eq!(header_value("t1:call_1"), "t1:call_1");
        assert_eq!(header_value("a b%\nü"), "a%20b%25%0A%C3%BC");
    }
}
