//! Stop means stop: a standard AG-UI client stops a run by closing its connection (CopilotKit's
//! stop button, `abortRun()`), so with a thread store, too, a run whose client leaves is
//! cancelled at once, its upstream request closed and the thread left holding the answer as
//! far as it had streamed. A run goes on for a reconnect only when its request asked
//! (`X-AGUI-On-Disconnect: continue`, or `forwardedProps.aguiHost.onDisconnect`), or when the
//! operator set `runs.on_disconnect = "continue"`. Each is tested with both stores, and over
//! the run that follows.

use std::time::{Duration, Instant};

use agui_host::settings::{OnDisconnect, Settings};
use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::resumable::{reconnect, FrameReader};
use crate::threads::Backend;
use crate::verify::assert_well_formed;

/// Words of the long answer the fake model streams, one per chunk 30 ms apart (3 s in all).
const WORDS: usize = 100;

fn long_answer(app: &TestApp) {
    let words: Vec<String> = (0..WORDS).map(|i| format!("w{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    app.fake.push(Reply::SlowSse(
        chunks::text_reply(&words),
        Duration::from_millis(30),
    ));
}

fn body(thread_id: &str, run_id: &str) -> Value {
    let mut body = input(vec![user("A long story, please.")]);
    body["threadId"] = json!(thread_id);
    body["runId"] = json!(run_id);
    body
}

async fn post(app: &TestApp, body: &Value, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = app
        .client
        .post(format!("{}/", app.address))
        .header("content-type", "application/json")
        .header("accept", "text/event-stream")
        .json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.expect("the app answers");
    assert_eq!(response.status(), 200);
    response
}

/// Reads until `count` text deltas have arrived, and returns their text.
async fn read_deltas(reader: &mut EventReader, count: usize) -> String {
    let mut text = String::new();
    let mut seen = 0;
    while seen < count {
        let event = tokio::time::timeout(Duration::from_secs(10), reader.next())
            .await
            .expect("the run streams")
            .expect("the stream goes on");
        if event["type"] == "TEXT_MESSAGE_CONTENT" {
            text.push_str(event["delta"].as_str().unwrap());
            seen += 1;
        }
    }
    text
}

/// The thread's stored conversation, once the run that left it has been saved.
async fn stored_messages(app: &TestApp, thread_id: &str) -> Vec<Value> {
    for _ in 0..100 {
        let response = app.get(&format!("/assistant/threads/{thread_id}")).await;
        if response.status() == 200 {
            let thread: Value = response.json().await.unwrap();
            if thread["lastRunId"] != Value::Null {
                return thread["messages"].as_array().unwrap().clone();
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the thread `{thread_id}` was never saved");
}

fn assistant_text(messages: &[Value]) -> String {
    messages
        .iter()
        .filter(|m| m["role"] == "assistant")
        .filter_map(|m| m["content"].as_str())
        .collect()
}

async fn a_client_that_leaves_stops_its_run(backend: &Backend, configure: fn(&mut Settings)) {
    let app = backend.app(configure).await;
    long_answer(&app);
    let mut reader = EventReader::new(post(&app, &body("t-stop", "r-stop"), &[]).await);
    let streamed = read_deltas(&mut reader, 5).await;

    let left = Instant::now();
    reader.hang_up();
    assert!(
        app.fake.wait_for_disconnect(Duration::from_secs(2)).await,
        "the upstream request is still open after the client left"
    );
    let closed_after = left.elapsed();
    eprintln!("upstream closed {closed_after:?} after the client left");

    // The thread holds what the client saw (a little more at most: what was under way when
    // the connection closed), not the answer the model would have gone on to write.
    let messages = stored_messages(&app, "t-stop").await;
    let kept = assistant_text(&messages);
    assert!(kept.starts_with(&streamed), "{kept:?} vs {streamed:?}");
    let kept_words = kept.split_whitespace().count();
    assert!(
        kept_words < WORDS / 2,
        "the stopped answer was saved in full ({kept_words} words)"
    );
    // Still no more after a while: the run is over, not going on in the background.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(assistant_text(&stored_messages(&app, "t-stop").await), kept);
    // The run's log ends with the stop, for a client that reconnects anyway.
    let replay = FrameReader::new(reconnect(&app, "r-stop", None).await)
        .rest()
        .await;
    let events: Vec<Value> = replay.into_iter().map(|(_, event)| event).collect();
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    assert_eq!(last(&events)["outcome"]["type"], "cancelled", "{events:?}");

    // What happens next: the client goes on from the thread as the server hands it back.
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Carrying on."])));
    let mut next = body("t-stop", "r-next");
    let mut history = messages.clone();
    history.push(user("Go on."));
    next["messages"] = json!(history);
    let events = parse_sse(&post(&app, &next, &[]).await.text().await.unwrap());
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    let sent = app.upstream_bodies().pop().unwrap();
    let sent_assistant: Vec<&Value> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .collect();
    assert_eq!(sent_assistant.len(), 1, "{sent}");
    assert_eq!(sent_assistant[0]["content"], json!(kept));
}

async fn a_run_that_asked_goes_on_and_a_reconnect_gets_the_whole_answer(
    backend: &Backend,
    configure: fn(&mut Settings),
    headers: &[(&str, &str)],
    forwarded_props: Option<Value>,
) {
    let app = backend.app(configure).await;
    long_answer(&app);
    let mut request = body("t-on", "r-on");
    if let Some(props) = forwarded_props {
        request["forwardedProps"] = props;
    }
    let mut first = FrameReader::new(post(&app, &request, headers).await);
    let mut frames = Vec::new();
    while frames.len() < 4 {
        frames.push(first.next().await.expect("the run streams"));
    }
    drop(first);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(app.fake.disconnects(), 0, "the run was stopped");

    let last_id = frames.last().unwrap().0.clone();
    frames.extend(
        FrameReader::new(reconnect(&app, "r-on", Some(&last_id)).await)
            .rest()
            .await,
    );
    let events: Vec<Value> = frames.into_iter().map(|(_, event)| event).collect();
    assert_well_formed(&events);
    let whole: String = (0..WORDS).map(|i| format!("w{i} ")).collect();
    let text: String = texts(&events).into_iter().map(|(_, text)| text).collect();
    assert_eq!(text, whole);
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    assert_eq!(assistant_text(&stored_messages(&app, "t-on").await), whole);
}

fn defaults(_: &mut Settings) {}

fn always_continue(settings: &mut Settings) {
    settings.runs.on_disconnect = OnDisconnect::Continue;
}

fn always_cancel(settings: &mut Settings) {
    settings.runs.on_disconnect = OnDisconnect::Cancel;
}

async fn by_default_a_client_that_leaves_stops_its_run(backend: Backend) {
    a_client_that_leaves_stops_its_run(&backend, defaults).await;
}

async fn with_cancel_a_run_that_asks_to_continue_is_stopped_all_the_same(backend: Backend) {
    let app = backend.app(always_cancel).await;
    long_answer(&app);
    let asks = [("x-agui-on-disconnect", "continue")];
    let mut reader = EventReader::new(post(&app, &body("t-no", "r-no"), &asks).await);
    read_deltas(&mut reader, 3).await;
    reader.hang_up();
    assert!(app.fake.wait_for_disconnect(Duration::from_secs(2)).await);
}

async fn a_run_that_asks_with_the_header_goes_on(backend: Backend) {
    let asks = [("x-agui-on-disconnect", "continue")];
    a_run_that_asked_goes_on_and_a_reconnect_gets_the_whole_answer(&backend, defaults, &asks, None)
        .await;
}

async fn a_run_that_asks_in_forwarded_props_goes_on(backend: Backend) {
    let asks = json!({"aguiHost": {"onDisconnect": "continue"}});
    a_run_that_asked_goes_on_and_a_reconnect_gets_the_whole_answer(
        &backend,
        defaults,
        &[],
        Some(asks),
    )
    .await;
}

async fn with_continue_every_run_goes_on(backend: Backend) {
    a_run_that_asked_goes_on_and_a_reconnect_gets_the_whole_answer(
        &backend,
        always_continue,
        &[],
        None,
    )
    .await;
}

for_each_store!(
    by_default_a_client_that_leaves_stops_its_run,
    with_cancel_a_run_that_asks_to_continue_is_stopped_all_the_same,
    a_run_that_asks_with_the_header_goes_on,
    a_run_that_asks_in_forwarded_props_goes_on,
    with_continue_every_run_goes_on,
);
