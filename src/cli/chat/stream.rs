//! One run's response: its SSE stream read and applied as it arrives, and, when the connection
//! drops before the terminal event of a run whose frames carry ids, the reconnect to the run's
//! events route with `Last-Event-ID` (a few attempts, backing off) that picks the stream up
//! after the last event read.

use std::io::{BufRead, Write};
use std::time::Duration;

use agui_host::llm::sse::{SseDecoder, SseEvent, MAX_EVENT_BYTES};
use agui_host::retry::RetryPolicy;
use reqwest::header::ACCEPT;
use reqwest::{StatusCode, Url};
use serde_json::Value;

use super::session::{OpenChunks, RunEnd, RunSummary, Session};
use super::transcript::error_chain;
use super::ChatError;

/// How many times a broken stream is reconnected: a blip heals at once, a restarting proxy in
/// a second or two; past that the run is given up on (it is still in the thread if the server
/// saves it).
const RECONNECT_ATTEMPTS: usize = 4;
/// The waits before those attempts: 100 ms doubling to 800 ms, each with up to as much again of
/// jitter (so from 0.75 s to 3 s in all), that many times.
const RECONNECT: RetryPolicy =
    RetryPolicy::new(Duration::from_millis(100), Duration::from_millis(800))
        .with_max_retries(RECONNECT_ATTEMPTS);

/// How one connection's stream ended.
enum ConnectionEnd {
    /// The body ended (with or without a terminal event).
    Closed,
    /// The connection failed; the text says how.
    Broke(String),
    /// An event too large to buffer: not worth reconnecting for.
    Oversized,
}

impl<R: BufRead, W: Write> Session<R, W> {
    /// Reads a run's stream to its end, reconnecting when it drops before its terminal event.
    pub(super) async fn read_stream(
        &mut self,
        response: reqwest::Response,
        run_id: &str,
    ) -> Result<RunSummary, ChatError> {
        let mut summary = RunSummary::default();
        // The id of the last whole event read, over every connection of the run.
        let mut last_id: Option<String> = None;
        self.chunks = OpenChunks::default();
        let mut connection = response;
        // Reconnects that brought nothing new: a server that keeps dropping the stream at the
        // same point is given up on rather than asked forever.
        let mut stalls = 0;
        let mut resumed_from: Option<String> = None;
        loop {
            let end = self
                .read_connection(connection, &mut last_id, &mut summary)
                .await?;
            if summary.end.is_some() {
                break;
            }
            let broke = match end {
                ConnectionEnd::Oversized => break,
                ConnectionEnd::Broke(how) => Some(how),
                ConnectionEnd::Closed => None,
            };
            let Some(last_id) = last_id.clone() else {
                // No ids: the server keeps no log of the run, so nothing can pick it up again.
                if let Some(how) = broke {
                    self.out.line(&format!("[error] the stream broke: {how}"))?;
                    summary.end = Some(RunEnd::Failed);
                }
                break;
            };
            if resumed_from.as_deref() == Some(last_id.as_str()) {
                stalls += 1;
                if stalls >= RECONNECT_ATTEMPTS {
                    self.out
                        .line("[error] the stream keeps breaking at the same event; giving up")?;
                    summary.end = Some(RunEnd::Failed);
                    break;
                }
            } else {
                stalls = 0;
            }
            resumed_from = Some(last_id.clone());
            match self.reconnect(run_id, &last_id).await? {
                Some(resumed) => connection = resumed,
                // Said why already.
                None => {
                    summary.end = Some(RunEnd::Failed);
                    break;
                }
            }
        }
        self.close_chunks(None)?;
        self.out.end_line()?;
        if summary.end.is_none() {
            self.out
                .line("[warning] the stream ended without RUN_FINISHED or RUN_ERROR")?;
            summary.end = Some(RunEnd::Failed);
        }
        Ok(summary)
    }

    /// Applies one connection's events until its body ends or fails. A frame cut short by a
    /// drop is dropped with the connection: the reconnect starts after the last whole event.
    async fn read_connection(
        &mut self,
        mut response: reqwest::Response,
        last_id: &mut Option<String>,
        summary: &mut RunSummary,
    ) -> Result<ConnectionEnd, ChatError> {
        // Events without an id of their own carry the last one on, across the reconnect.
        let mut decoder = SseDecoder::resuming(last_id.clone());
        let mut events: Vec<SseEvent> = Vec::new();
        loop {
            let bytes = match response.chunk().await {
                Ok(Some(bytes)) => bytes,
                Ok(None) => {
                    // A last frame without its blank line is an event by the decoder's rule,
                    // for servers that end so. A server that gives ids ends every frame, so
                    // there it is a frame cut short, read again after a reconnect.
                    if last_id.is_none() && !decoder.saw_id() {
                        decoder.finish(&mut events);
                        self.handle_events(&mut events, summary)?;
                    }
                    return Ok(ConnectionEnd::Closed);
                }
                Err(error) => return Ok(ConnectionEnd::Broke(error_chain(&error))),
            };
            let fed = decoder.feed(&bytes, &mut events);
            if decoder.last_event_id() != last_id.as_deref() {
                *last_id = decoder.last_event_id().map(str::to_owned);
            }
            self.handle_events(&mut events, summary)?;
            if fed.is_err() {
                self.out.line(&format!(
                    "[error] an event is over {} MB; giving up on this stream",
                    MAX_EVENT_BYTES / (1024 * 1024)
                ))?;
                summary.end.get_or_insert(RunEnd::Failed);
                return Ok(ConnectionEnd::Oversized);
            }
            if summary.end.is_some() {
                return Ok(ConnectionEnd::Closed);
            }
        }
    }

    /// The data of each decoded SSE event, in order; `events` is left empty for reuse.
    fn handle_events(
        &mut self,
        events: &mut Vec<SseEvent>,
        summary: &mut RunSummary,
    ) -> std::io::Result<()> {
        for event in events.drain(..) {
            self.handle_data(&event.data, summary)?;
        }
        Ok(())
    }

    /// `GET <agent>/runs/<runId>/events` after `last_id`, a few times with a growing wait; the
    /// response to go on reading, or `None` (said why) when the run cannot be picked up again.
    async fn reconnect(
        &mut self,
        run_id: &str,
        last_id: &str,
    ) -> Result<Option<reqwest::Response>, ChatError> {
        self.out.end_line()?;
        self.out
            .notice(&format!("connection lost, resuming from {last_id}…"))?;
        let mut last_failure = String::new();
        for wait in RECONNECT.waits() {
            tokio::time::sleep(wait).await;
            let url = match self.events_url(run_id).await {
                Ok(url) => url,
                Err(failure) => {
                    last_failure = failure;
                    continue;
                }
            };
            let sent = self
                .http
                .get(url)
                .header(ACCEPT, "text/event-stream")
                .header("last-event-id", last_id)
                .headers(self.headers.clone())
                .send()
                .await;
            match sent {
                Ok(response) if response.status().is_success() => {
                    self.out.notice("resumed")?;
                    return Ok(Some(response));
                }
                // The server is there and answers for good: the run is gone, not kept this
                // far back, or not ours. Another attempt would get the same answer.
                Ok(response) if response.status().is_client_error() => {
                    self.out.line("[error] the run cannot be resumed")?;
                    self.show_refusal(response).await?;
                    return Ok(None);
                }
                Ok(response) => last_failure = format!("status {}", response.status()),
                Err(error) => last_failure = error_chain(&error),
            }
        }
        self.out.line(&format!(
            "[error] could not resume the run after {RECONNECT_ATTEMPTS} attempts: {last_failure}"
        ))?;
        Ok(None)
    }

    /// The run's events route. `POST /<agent>` runs reconnect under the same path; a run posted
    /// to the server's root (its default agent) needs that agent's name, which `GET /` gives.
    async fn events_url(&self, run_id: &str) -> Result<Url, String> {
        let mut agent_url = self.url.clone();
        if self.url.path().ends_with('/') {
            let agent = self.default_agent().await?;
            agent_url = self
                .url
                .join(&agent)
                .map_err(|e| format!("the default agent `{agent}` makes no URL: {e}"))?;
        }
        let mut url = agent_url;
        url.path_segments_mut()
            .map_err(|()| "the server URL cannot take a path".to_owned())?
            .extend(["runs", run_id, "events"]);
        Ok(url)
    }

    /// `defaultAgent` from the service description at the root URL.
    async fn default_agent(&self) -> Result<String, String> {
        let response = self
            .http
            .get(self.url.clone())
            .headers(self.headers.clone())
            .send()
            .await
            .map_err(|e| error_chain(&e))?;
        if response.status() != StatusCode::OK {
            return Err(format!(
                "`GET {}` answered {} (the default agent's name is needed to reconnect)",
                self.url,
                response.status()
            ));
        }
        let info: Value = response.json().await.map_err(|e| error_chain(&e))?;
        info["defaultAgent"]
            .as_str()
            .filter(|name| !name.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("`GET {}` names no defaultAgent", self.url))
    }
}
