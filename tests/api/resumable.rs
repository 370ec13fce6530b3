//! Resumable runs (docs/resumable.md): every frame of a logged run carries `id: <runId>:<seq>`;
//! `GET /<agent>/runs/<runId>/events` with `Last-Event-ID` replays what followed that id and
//! then follows the live run. A stream reassembled from a first connection and any number of
//! reconnects must equal the uninterrupted run's: no gap, no duplicate, one terminal event.
//! Unknown, expired and foreign runs are 404 before any stream; stop ends a run and closes its
//! upstream; a run nobody reads is cancelled after the grace period.

use std::collections::HashMap;
use std::time::Duration;

use agui_host::settings::{OnDisconnect, PredictStateRule, Settings};
use serde_json::{json, Value};

use crate::approvals::{transfer_tool, with_tools, ToolService, TRANSFER_ARGS};
use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

/// One frame as the client saw it: its `id:` and its event.
pub(crate) type Frame = (String, Value);

/// Reads a stream frame by frame, keeping each frame's id.
pub(crate) struct FrameReader {
    response: reqwest::Response,
    buffer: String,
}

impl FrameReader {
    pub(crate) fn new(response: reqwest::Response) -> Self {
        assert_eq!(response.status(), 200);
        assert_eq!(content_type(&response), "text/event-stream");
        FrameReader {
            response,
            buffer: String::new(),
        }
    }

    pub(crate) async fn next(&mut self) -> Option<Frame> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let frame: String = self.buffer.drain(..end + 2).collect();
                if let Some((id, event)) = parse_frame_with_id(&frame[..end]) {
                    return Some((id.expect("every frame of a logged run has an id"), event));
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.response.chunk())
                .await
                .expect("the stream goes on within 10 s")
                .expect("read the stream")?;
            self.buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    pub(crate) async fn rest(mut self) -> Vec<Frame> {
        let mut frames = Vec::new();
        while let Some(frame) = self.next().await {
            frames.push(frame);
        }
        frames
    }
}

/// A run that asks to go on after its client disconnects (as a client that reconnects does),
/// so that cutting its connection leaves it running for the reconnect.
pub(crate) fn run_body(thread_id: &str, run_id: &str, text: &str) -> Value {
    let mut body = input(vec![user(text)]);
    body["threadId"] = json!(thread_id);
    body["runId"] = json!(run_id);
    body["forwardedProps"] = json!({"aguiHost": {"onDisconnect": "continue"}});
    body
}

pub(crate) async fn reconnect(
    app: &TestApp,
    run_id: &str,
    last_event_id: Option<&str>,
) -> reqwest::Response {
    let mut request = app
        .client
        .get(format!("{}/assistant/runs/{run_id}/events", app.address));
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id);
    }
    request.send().await.unwrap()
}

pub(crate) fn events(frames: &[Frame]) -> Vec<Value> {
    frames.iter().map(|(_, event)| event.clone()).collect()
}

/// The events without what differs between two runs of one script: timestamps, and generated
/// ids (replaced by their order of first appearance).
pub(crate) fn normalized(events: &[Value]) -> Vec<Value> {
    let mut ids = HashMap::new();
    events
        .iter()
        .map(|event| normalize(event, None, &mut ids))
        .collect()
}

fn normalize(value: &Value, key: Option<&str>, ids: &mut HashMap<String, String>) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "timestamp")
                .map(|(k, v)| (k.clone(), normalize(v, Some(k), ids)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| normalize(v, key, ids)).collect()),
        Value::String(s) if key.is_some_and(|k| k == "id" || k.ends_with("Id")) => {
            let next = format!("id#{}", ids.len());
            Value::String(ids.entry(s.clone()).or_insert(next).clone())
        }
        other => other.clone(),
    }
}

/// Checks a reassembled stream: ids `<runId>:1..n` in order, one terminal event, well formed.
pub(crate) fn assert_stitched(run_id: &str, frames: &[Frame]) {
    let expected: Vec<String> = (1..=frames.len())
        .map(|n| format!("{run_id}:{n}"))
        .collect();
    let ids: Vec<String> = frames.iter().map(|(id, _)| id.clone()).collect();
    assert_eq!(ids, expected, "no gap, no duplicate");
    let terminals = frames
        .iter()
        .filter(|(_, e)| e["type"] == "RUN_FINISHED" || e["type"] == "RUN_ERROR")
        .count();
    assert_eq!(terminals, 1);
    assert_well_formed(&events(frames));
}

/// Runs `script` once uninterrupted and once cut, both on `start`: the first connection is
/// dropped after the event `cut` picks, a reconnect to `resume` reads one more event and is
/// dropped too, and a last one (to `resume` again) reads to the end. The reassembled stream must
/// equal the uninterrupted one. `start` and `resume` are one app for one process's log, two
/// replicas sharing a log otherwise.
pub(crate) async fn cut_and_resume(
    start: &TestApp,
    resume: &TestApp,
    script: impl Fn(&TestApp),
    mut cut: impl FnMut(&Value) -> bool,
) {
    script(start);
    let whole = FrameReader::new(
        start
            .post_run("/", &run_body("t-whole", "r-whole", "Go"))
            .await,
    )
    .rest()
    .await;
    assert_stitched("r-whole", &whole);

    script(start);
    let run_id = "r-cut";
    let mut first = FrameReader::new(start.post_run("/", &run_body("t-cut", run_id, "Go")).await);
    let mut stitched = Vec::new();
    loop {
        let frame = first
            .next()
            .await
            .expect("the cut point comes before the end");
        let at_cut = cut(&frame.1);
        stitched.push(frame);
        if at_cut {
            break;
        }
    }
    drop(first);
    let last_id = stitched.last().unwrap().0.clone();
    let mut second = FrameReader::new(reconnect(resume, run_id, Some(&last_id)).await);
    if let Some(frame) = second.next().await {
        stitched.push(frame);
    }
    drop(second);
    let last_id = stitched.last().unwrap().0.clone();
    // The query parameter, for clients that cannot set the header.
    let third = resume
        .client
        .get(format!(
            "{}/assistant/runs/{run_id}/events?last_event_id={last_id}",
            resume.address
        ))
        .send()
        .await
        .unwrap();
    stitched.extend(FrameReader::new(third).rest().await);

    assert_stitched(run_id, &stitched);
    assert_eq!(normalized(&events(&stitched)), normalized(&events(&whole)));
    // And byte for byte the run's own log, read from the start after it ended, from either.
    for app in [start, resume] {
        let replay = FrameReader::new(reconnect(app, run_id, None).await)
            .rest()
            .await;
        assert_eq!(replay, stitched);
    }
}

pub(crate) fn slow_text(app: &TestApp) {
    let words: Vec<String> = (0..12).map(|i| format!("w{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    app.fake.push(Reply::SlowSse(
        chunks::text_reply(&words),
        Duration::from_millis(20),
    ));
}

#[tokio::test]
async fn a_run_cut_mid_text_and_resumed_equals_the_uninterrupted_run() {
    let app = spawn_app(|_| {}).await;
    cut_mid_text_and_resume(&app, &app).await;
}

/// A text answer started on `owner`, cut after its third delta, resumed on `reader`.
pub(crate) async fn cut_mid_text_and_resume(owner: &TestApp, reader: &TestApp) {
    let mut contents = 0;
    cut_and_resume(owner, reader, slow_text, |event| {
        contents += usize::from(event["type"] == "TEXT_MESSAGE_CONTENT");
        contents == 3
    })
    .await;
}

/// A predictive `update_recipe` call started on `owner`, cut after its second state delta,
/// resumed on `reader` (both configured with [`predict_recipe`]).
pub(crate) async fn cut_inside_a_predictive_call_and_resume(owner: &TestApp, reader: &TestApp) {
    let mut deltas = 0;
    cut_and_resume(
        owner,
        reader,
        |app| {
            app.fake
                .push_call_then_text(("call_r", "update_recipe", RECIPE), "Saved.")
        },
        |event| {
            deltas += usize::from(event["type"] == "STATE_DELTA");
            deltas == 2
        },
    )
    .await;
}

/// A transfer that needs approval started on `owner`, cut right after its call ends (before
/// the interrupt), resumed on `reader`; the tool never runs.
pub(crate) async fn cut_before_an_interrupt_and_resume(
    owner: &TestApp,
    reader: &TestApp,
    service: &ToolService,
) {
    cut_and_resume(
        owner,
        reader,
        |app| {
            app.fake.push(Reply::Sse(chunks::tool_calls(
                &[("call_t", "transfer_money", TRANSFER_ARGS)],
                false,
            )))
        },
        |event| event["type"] == "TOOL_CALL_END",
    )
    .await;
    assert!(service.calls_of("transfer_money").is_empty());
}

pub(crate) const RECIPE: &str = r#"{"recipe": {"title": "Lettuce wraps", "ingredients": [{"name": "chicken", "amount": "2"}, {"name": "lettuce", "amount": "8 leaves"}], "instructions": ["Slice.", "Sear.", "Wrap."]}}"#;

pub(crate) fn predict_recipe(settings: &mut Settings) {
    let agent = settings.agents.get_mut("assistant").unwrap();
    agent.predict_state.insert(
        "recipe".into(),
        PredictStateRule {
            tool: "update_recipe".into(),
            tool_argument: "recipe".into(),
        },
    );
    agent
        .tools
        .push(static_tool("update_recipe", json!({"status": "saved"})));
}

#[tokio::test]
async fn a_run_cut_inside_a_predictive_tool_call_and_resumed_equals_the_uninterrupted_run() {
    let app = spawn_app(predict_recipe).await;
    cut_inside_a_predictive_call_and_resume(&app, &app).await;
}

#[tokio::test]
async fn a_run_cut_just_before_its_interrupt_and_resumed_equals_the_uninterrupted_run() {
    let service = ToolService::start().await;
    let app = spawn_app(|s| with_tools(s, vec![transfer_tool(&service, false)])).await;
    cut_before_an_interrupt_and_resume(&app, &app, &service).await;
}

#[tokio::test]
async fn a_run_goes_on_after_its_client_leaves_and_a_reconnect_gets_the_rest() {
    let app = spawn_app(|s| s.runs.on_disconnect = OnDisconnect::Continue).await;
    slow_text(&app);
    let mut first = FrameReader::new(app.post_run("/", &run_body("t", "r-on", "Go")).await);
    let mut seen = vec![first.next().await.unwrap(), first.next().await.unwrap()];
    drop(first);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(app.fake.disconnects(), 0, "the upstream is still read");
    let rest = FrameReader::new(reconnect(&app, "r-on", Some(&seen[1].0)).await)
        .rest()
        .await;
    seen.extend(rest);
    assert_stitched("r-on", &seen);
    assert_eq!(
        texts(&events(&seen))[0].1,
        (0..12).map(|i| format!("w{i} ")).collect::<String>()
    );
    assert_eq!(seen.last().unwrap().1["outcome"]["type"], "success");
}

#[tokio::test]
async fn a_run_with_no_reader_is_cancelled_after_the_grace_period() {
    let app = spawn_app(|s| {
        s.runs.on_disconnect = OnDisconnect::Continue;
        s.runs.reconnect_grace_secs = 1;
    })
    .await;
    assert_a_run_read_nowhere_is_cancelled(&app, &app, "r-gone").await;
}

/// A run started on `owner` whose client leaves after the first frame, with no reader anywhere:
/// once the grace period is over the upstream is closed, and `reader` (on the same replica or
/// another) replays a log that ends with the `cancelled` outcome.
pub(crate) async fn assert_a_run_read_nowhere_is_cancelled(
    owner: &TestApp,
    reader: &TestApp,
    run_id: &str,
) {
    owner
        .fake
        .push(Reply::Stall(vec![chunks::role(), chunks::text("Half")]));
    let mut first = FrameReader::new(owner.post_run("/", &run_body("t2", run_id, "Go")).await);
    first.next().await.unwrap();
    drop(first);
    assert!(
        owner.fake.wait_for_disconnect(Duration::from_secs(5)).await,
        "the upstream was closed once the grace period was over"
    );
    let replay = FrameReader::new(reconnect(reader, run_id, None).await)
        .rest()
        .await;
    assert_stitched(run_id, &replay);
    assert_eq!(replay.last().unwrap().1["outcome"]["type"], "cancelled");
}

/// Starts a run on `app` that stalls after its first text, and reads its first three frames.
pub(crate) async fn start_stalled(app: &TestApp, run_id: &str) -> (FrameReader, Vec<Frame>) {
    app.fake
        .push(Reply::Stall(vec![chunks::role(), chunks::text("Half")]));
    let mut reader = FrameReader::new(app.post_run("/", &run_body(run_id, run_id, "Go")).await);
    let mut frames = Vec::new();
    while frames.len() < 3 {
        frames.push(reader.next().await.unwrap());
    }
    (reader, frames)
}

/// `POST /assistant/runs/<run_id>/stop` on `app`.
pub(crate) async fn request_stop(app: &TestApp, run_id: &str) -> reqwest::Response {
    app.client
        .post(format!("{}/assistant/runs/{run_id}/stop", app.address))
        // A stop is declared JSON, like every POST (no page can send that cross-origin).
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap()
}

/// A body-less POST needs no CORS preflight, so any web page could send one to stop someone's
/// run; `Content-Type: application/json` needs a preflight cross-origin, so a stop must carry
/// it (415 otherwise) and the run goes on.
#[tokio::test]
async fn a_stop_without_a_json_content_type_is_refused_and_the_run_goes_on() {
    let app = spawn_app(|_| {}).await;
    let (reader, mut frames) = start_stalled(&app, "r-stop-415").await;
    let url = format!("{}/assistant/runs/r-stop-415/stop", app.address);
    for content_type in [
        None,
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
    ] {
        let mut request = app
            .client
            .post(&url)
            .header("origin", "https://evil.example");
        if let Some(content_type) = content_type {
            request = request.header("content-type", content_type);
        }
        let refused = request.send().await.unwrap();
        assert_eq!(refused.status(), 415, "{content_type:?}");
        let error = error_body(refused).await;
        assert_eq!(error["error"]["code"], "unsupported_media_type", "{error}");
    }
    assert!(
        !app.fake
            .wait_for_disconnect(Duration::from_millis(300))
            .await,
        "the run was not stopped"
    );
    let stopped = app
        .client
        .post(&url)
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(stopped.status(), 202);
    frames.extend(reader.rest().await);
    assert_eq!(
        frames.last().unwrap().1["outcome"],
        json!({"type": "cancelled"})
    );
}

/// A stop after the run's end changes nothing: 200 and `"status": "ended"`.
pub(crate) async fn assert_stop_after_the_end_is_a_no_op(app: &TestApp, run_id: &str) {
    let again = request_stop(app, run_id).await;
    assert_eq!(again.status(), 200);
    assert_eq!(again.json::<Value>().await.unwrap()["status"], "ended");
}

#[tokio::test]
async fn stop_ends_a_run_with_the_cancelled_outcome_and_closes_the_upstream_within_a_second() {
    let app = spawn_app(|_| {}).await;
    let (reader, mut frames) = start_stalled(&app, "r-stop").await;
    assert_eq!(request_stop(&app, "r-stop").await.status(), 202);
    assert!(app.fake.wait_for_disconnect(Duration::from_secs(1)).await);
    frames.extend(reader.rest().await);
    assert_stitched("r-stop", &frames);
    let finished = &frames.last().unwrap().1;
    assert_eq!(finished["type"], "RUN_FINISHED");
    assert_eq!(finished["outcome"], json!({"type": "cancelled"}));
    assert_stop_after_the_end_is_a_no_op(&app, "r-stop").await;
}

#[tokio::test]
async fn stop_ends_a_0x_run_with_run_error_cancelled() {
    let app = spawn_app(|_| {}).await;
    app.fake
        .push(Reply::Stall(vec![chunks::role(), chunks::text("Half")]));
    let mut body = input_0x(vec![user("Go")]);
    body["runId"] = json!("r-stop-0x");
    let mut reader = FrameReader::new(app.post_run("/", &body).await);
    reader.next().await.unwrap();
    assert_eq!(request_stop(&app, "r-stop-0x").await.status(), 202);
    let frames = reader.rest().await;
    let events = events(&frames);
    assert_0x_compatible(&events);
    assert_eq!(last(&events)["type"], "RUN_ERROR");
    assert_eq!(last(&events)["code"], "cancelled");
    assert!(app.fake.wait_for_disconnect(Duration::from_secs(1)).await);
}

pub(crate) async fn assert_error(response: reqwest::Response, status: u16, code: &str) {
    assert_eq!(response.status(), status);
    assert_eq!(error_body(response).await["error"]["code"], code);
}

#[tokio::test]
async fn unknown_foreign_and_other_agent_runs_are_404_before_any_stream() {
    let app = spawn_app(|s| s.threads.scope_header = "x-user-id".into()).await;
    app.fake.push(Reply::Sse(chunks::text_reply(&["Hi"])));
    let response = app
        .client
        .post(format!("{}/", app.address))
        .header("x-user-id", "alice")
        .json(&run_body("t", "r-alice", "Go"))
        .send()
        .await
        .unwrap();
    FrameReader::new(response).rest().await;
    let get = |path: String, user: &'static str| {
        app.client
            .get(format!("{}{path}", app.address))
            .header("x-user-id", user)
            .send()
    };
    let mine = get("/assistant/runs/r-alice/events".into(), "alice")
        .await
        .unwrap();
    assert_eq!(mine.status(), 200);
    for (path, user) in [
        ("/assistant/runs/r-alice/events", "bob"),
        ("/assistant/runs/no-such-run/events", "alice"),
        ("/other/runs/r-alice/events", "alice"),
    ] {
        assert_error(get(path.into(), user).await.unwrap(), 404, "run_not_found").await;
    }
    let stop = app
        .client
        .post(format!("{}/assistant/runs/r-alice/stop", app.address))
        // A stop is declared JSON, like every POST (no page can send that cross-origin).
        .header("content-type", "application/json")
        .header("x-user-id", "bob")
        .send()
        .await
        .unwrap();
    assert_error(stop, 404, "run_not_found").await;
}

#[tokio::test]
async fn a_cursor_older_than_the_kept_log_is_410_and_a_malformed_one_is_400() {
    let app = spawn_app(|s| s.runs.log_max_run_events = 3).await;
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["a", "b", "c", "d"])));
    FrameReader::new(app.post_run("/", &run_body("t", "r-old", "Go")).await)
        .rest()
        .await;
    assert_error(
        reconnect(&app, "r-old", Some("r-old:1")).await,
        410,
        "cursor_expired",
    )
    .await;
    assert_error(reconnect(&app, "r-old", None).await, 410, "cursor_expired").await;
    for bad in ["r-other:5", "r-old:x", "r-old:999"] {
        assert_error(
            reconnect(&app, "r-old", Some(bad)).await,
            400,
            "invalid_last_event_id",
        )
        .await;
    }
}

#[tokio::test]
async fn a_run_id_still_streaming_cannot_be_reused_and_the_store_off_writes_no_ids() {
    let app = spawn_app(|_| {}).await;
    app.fake
        .push(Reply::Stall(vec![chunks::role(), chunks::text("Half")]));
    let mut first = FrameReader::new(app.post_run("/", &run_body("t1", "r-dup", "Go")).await);
    first.next().await.unwrap();
    let second = app.post_run("/", &run_body("t2", "r-dup", "Go")).await;
    assert_error(second, 409, "run_in_progress").await;

    let off = spawn_app(|s| s.threads.store = agui_host::settings::ThreadStoreKind::Off).await;
    off.fake.push(Reply::Sse(chunks::text_reply(&["Hi"])));
    let text = off
        .post_run("/", &run_body("t", "r", "Go"))
        .await
        .text()
        .await
        .unwrap();
    assert!(text.starts_with("data: "), "{text}");
    assert!(!text.contains("\nid: "), "{text}");
    assert_error(reconnect(&off, "r", None).await, 404, "run_not_found").await;
    let caps: Value = off
        .get("/assistant/capabilities")
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(caps["transport"]["resumable"], false);
}

#[tokio::test]
async fn a_browser_may_reconnect_cross_origin_with_last_event_id() {
    let origin = "https://app.example.com";
    let app = spawn_app(|s| s.server.cors.allowed_origins = vec![origin.into()]).await;
    let response = app
        .client
        .request(
            reqwest::Method::OPTIONS,
            format!("{}/assistant/runs/r/events", app.address),
        )
        .header("origin", origin)
        .header("access-control-request-method", "GET")
        .header("access-control-request-headers", "last-event-id")
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let allowed = response
        .headers()
        .get("access-control-allow-headers")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    assert!(
        allowed.contains("last-event-id"),
        "allow-headers: {allowed}"
    );
}

/// The conversation a client holds after a run: its user message, then the assistant's text
/// as the stream delivered it, under the stream's message id.
fn history_after(mut history: Vec<Value>, user_text: &str, frames: &[Frame]) -> Vec<Value> {
    history
        .push(json!({"id": format!("u-{}", history.len()), "role": "user", "content": user_text}));
    for (message_id, text) in texts(&events(frames)) {
        history.push(json!({"id": message_id, "role": "assistant", "content": text}));
    }
    history
}

fn thread_body(run_id: &str, history: &[Value]) -> Value {
    let mut body = input(history.to_vec());
    body["threadId"] = json!("t-next");
    body["runId"] = json!(run_id);
    body
}

#[tokio::test]
async fn the_runs_after_a_resumed_and_a_stopped_run_go_on_with_the_conversation_the_client_saw() {
    let app = spawn_app(|_| {}).await;
    // Run 1: cut after two events, resumed to its end.
    slow_text(&app);
    let history = history_after(Vec::new(), "Go", &[]);
    let mut first = FrameReader::new(app.post_run("/", &thread_body("r-1", &history)).await);
    let mut run1 = vec![first.next().await.unwrap(), first.next().await.unwrap()];
    drop(first);
    run1.extend(
        FrameReader::new(reconnect(&app, "r-1", Some(&run1[1].0)).await)
            .rest()
            .await,
    );
    assert_stitched("r-1", &run1);
    let history = history_after(Vec::new(), "Go", &run1);

    // Run 2, on the same thread with that history: stopped mid-answer.
    app.fake
        .push(Reply::Stall(vec![chunks::role(), chunks::text("Half")]));
    let mut asked = history.clone();
    asked.push(json!({"id": "u-2", "role": "user", "content": "More"}));
    let mut second = FrameReader::new(app.post_run("/", &thread_body("r-2", &asked)).await);
    let mut run2 = Vec::new();
    while run2.len() < 3 {
        run2.push(second.next().await.unwrap());
    }
    let stop = app
        .client
        .post(format!("{}/assistant/runs/r-2/stop", app.address))
        // A stop is declared JSON, like every POST (no page can send that cross-origin).
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(stop.status(), 202);
    run2.extend(second.rest().await);
    assert_stitched("r-2", &run2);
    let history = history_after(history, "More", &run2);

    // Run 3 goes on from what the client saw of both.
    app.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));
    let mut asked = history.clone();
    asked.push(json!({"id": "u-4", "role": "user", "content": "Thanks"}));
    let run3 = FrameReader::new(app.post_run("/", &thread_body("r-3", &asked)).await)
        .rest()
        .await;
    assert_stitched("r-3", &run3);
    assert_eq!(run3.last().unwrap().1["outcome"]["type"], "success");
    let sent = app.upstream_bodies().last().unwrap().clone();
    assert_eq!(
        roles(&sent),
        ["system", "user", "assistant", "user", "assistant", "user"]
    );
}
