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
//!
//! A long call can report its progress: a service that answers `application/x-ndjson` sends one
//! JSON object per line, `{"progress": n, "total"?: n, "message"?: "..."}` while it works, and
//! the answer (as it would send it whole) on the last line. Each report reaches the run as the
//! call's progress (an AG-UI activity, see `agent::chat::activities`); a line that is neither is
//! a tool error, and the whole stream is bounded as one answer is.

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::FutureExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::Value;

use super::{StateUpdate, Tool, ToolContext, ToolDefinition, ToolError, ToolOutput, ToolProgress};

/// Largest answer read from the service; a tool result is for a model's context window.
const MAX_ANSWER_BYTES: usize = 1024 * 1024;

/// The media type of an answer that reports progress before it (see the module docs).
const PROGRESS_STREAM: &str = "application/x-ndjson";

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
            .header(
                reqwest::header::ACCEPT,
                HeaderValue::from_static("application/json, application/x-ndjson"),
            )
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
        let streams_progress = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.trim_start().starts_with(PROGRESS_STREAM));
        let mut progress =
            streams_progress.then(|| ProgressLines::new(&self.definition.name, &context));
        let mut body = Vec::new();
        let mut response = response;
        let mut read = 0;
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|_| ToolError::Failed("the service's answer was cut off".into()))?
        {
            read += chunk.len();
            if read > MAX_ANSWER_BYTES {
                return Err(ToolError::Failed(
                    "the service's answer is too large".into(),
                ));
            }
            body.extend_from_slice(&chunk);
            if let Some(progress) = progress.as_mut() {
                progress.take_reports(&mut body)?;
            }
        }
        if let Some(progress) = progress.as_mut() {
            progress.take_answer(&mut body)?;
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

/// The progress reports of an answer that streams them: every complete line but the last is a
/// report, sent on as the call's progress; the last is the answer.
struct ProgressLines {
    tool_call_id: String,
    tool_name: String,
    sender: Option<tokio::sync::mpsc::Sender<ToolProgress>>,
    /// The last complete line, held until a later one shows it was not the answer.
    held: Option<Vec<u8>>,
}

impl ProgressLines {
    fn new(tool_name: &str, context: &ToolContext) -> Self {
        ProgressLines {
            tool_call_id: context.tool_call_id.clone(),
            tool_name: tool_name.to_owned(),
            sender: context.progress.clone(),
            held: None,
        }
    }

    /// Takes the complete lines off the front of `body`, sending each one that a later line
    /// follows as a report; the last stays held (it may be the answer).
    fn take_reports(&mut self, body: &mut Vec<u8>) -> Result<(), ToolError> {
        while let Some(end) = body.iter().position(|&byte| byte == b'\n') {
            let line: Vec<u8> = body.drain(..=end).collect();
            if line.trim_ascii().is_empty() {
                continue;
            }
            if let Some(previous) = self.held.replace(line) {
                self.report(&previous)?;
            }
        }
        Ok(())
    }

    /// Leaves the answer in `body`: what follows the last line break, or else the held line.
    fn take_answer(&mut self, body: &mut Vec<u8>) -> Result<(), ToolError> {
        let held = self.held.take();
        if body.trim_ascii().is_empty() {
            *body = held.unwrap_or_default();
        } else if let Some(report) = held {
            self.report(&report)?;
        }
        Ok(())
    }

    fn report(&self, line: &[u8]) -> Result<(), ToolError> {
        let not_a_report = || {
            ToolError::Failed(
                "the service's progress stream has a line that is not a progress report \
                 ({\"progress\": n, \"total\"?: n, \"message\"?: \"...\"}) before its answer"
                    .into(),
            )
        };
        let report: Value = serde_json::from_slice(line).map_err(|_| not_a_report())?;
        let progress = report
            .get("progress")
            .and_then(Value::as_f64)
            .ok_or_else(not_a_report)?;
        let Some(sender) = &self.sender else {
            return Ok(());
        };
        // Progress is advisory: a report that does not fit is dropped.
        let _ = sender.try_send(ToolProgress {
            tool_call_id: self.tool_call_id.clone(),
            tool_name: self.tool_name.clone(),
            progress,
            total: report.get("total").and_then(Value::as_f64),
            message: report
                .get("message")
                .and_then(Value::as_str)
                .map(|message| message.chars().take(500).collect()),
        });
        Ok(())
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

    fn context(sender: tokio::sync::mpsc::Sender<ToolProgress>) -> ToolContext {
        ToolContext {
            scope: "s".into(),
            agent: "a".into(),
            thread_id: "t".into(),
            run_id: "r".into(),
            tool_call_id: "call_1".into(),
            message_id: None,
            state: None,
            progress: Some(sender),
            events: None,
            input: None,
        }
    }

    /// Feeds `chunks` as they would arrive; the answer left, and the progress values sent.
    fn split(chunks: &[&str]) -> (Result<String, ToolError>, Vec<f64>) {
        let (sender, mut receiver) = tokio::sync::mpsc::channel(16);
        let mut lines = ProgressLines::new("report", &context(sender));
        let mut body = Vec::new();
        let result = (|| {
            for chunk in chunks {
                body.extend_from_slice(chunk.as_bytes());
                lines.take_reports(&mut body)?;
            }
            lines.take_answer(&mut body)?;
            Ok(String::from_utf8(body.clone()).unwrap())
        })();
        let mut sent = Vec::new();
        while let Ok(report) = receiver.try_recv() {
            sent.push(report.progress);
        }
        (result, sent)
    }

    #[test]
    fn a_progress_stream_splits_into_reports_and_the_answer_however_it_is_cut() {
        let (answer, sent) = split(&[
            "{\"progress\": 1}\n{\"progr",
            "ess\": 2}\n\n{\"ok\": true}\n",
        ]);
        assert_eq!(answer.unwrap().trim(), r#"{"ok": true}"#);
        assert_eq!(sent, [1.0, 2.0]);
        // The answer without a last line break, and a lone answer.
        let (answer, sent) = split(&["{\"progress\": 1}\n{\"ok\": 1}"]);
        assert_eq!(answer.unwrap(), r#"{"ok": 1}"#);
        assert_eq!(sent, [1.0]);
        let (answer, sent) = split(&["{\"ok\": 1}\n"]);
        assert_eq!(answer.unwrap().trim(), r#"{"ok": 1}"#);
        assert!(sent.is_empty());
    }

    #[test]
    fn a_line_that_is_no_report_before_the_answer_is_an_error() {
        let (answer, _) = split(&["{\"progress\": \"half\"}\n{\"ok\": 1}\n"]);
        assert!(matches!(answer, Err(ToolError::Failed(_))));
        let (answer, _) = split(&["not json\n{\"ok\": 1}"]);
        assert!(matches!(answer, Err(ToolError::Failed(_))));
    }

    #[test]
    fn ids_become_header_values_without_loss() {
        assert_eq!(header_value("t1:call_1"), "t1:call_1");
        assert_eq!(header_value("a b%\nü"), "a%20b%25%0A%C3%BC");
    }
}
