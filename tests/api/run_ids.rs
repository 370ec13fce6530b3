//! Run ids as the server keeps them: a run refused before it starts leaves nothing behind (a
//! retry with the same `runId` runs; a reconnect or a stop finds nothing), a run id is the
//! caller's own (another scope or agent may pick the same one), and reconnect readers are
//! capped. Each is tested with both stores.

use std::time::Duration;

use agui_host::settings::Settings;
use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::resumable::{reconnect, FrameReader};
use crate::threads::Backend;
use crate::verify::assert_well_formed;

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789";

fn slow_answer(app: &TestApp, words: usize) {
    let words: Vec<String> = (0..words).map(|i| format!("w{i} ")).collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    app.fake.push(Reply::SlowSse(
        chunks::text_reply(&words),
        Duration::from_millis(20),
    ));
}

fn body(thread_id: &str, run_id: &str) -> Value {
    let mut body = input(vec![user("Go")]);
    body["threadId"] = json!(thread_id);
    body["runId"] = json!(run_id);
    body
}

async fn post_as(app: &TestApp, token: Option<&str>, body: &Value) -> reqwest::Response {
    let mut request = app
        .client
        .post(format!("{}/", app.address))
        .header("content-type", "application/json")
        .header("x-agui-on-disconnect", "continue")
        .json(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("the app answers")
}

async fn events_as(app: &TestApp, token: Option<&str>, run_id: &str) -> reqwest::Response {
    let mut request = app
        .client
        .get(format!("{}/assistant/runs/{run_id}/events", app.address));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("the app answers")
}

async fn stop_as(app: &TestApp, token: Option<&str>, run_id: &str) -> reqwest::Response {
    let mut request = app
        .client
        .post(format!("{}/assistant/runs/{run_id}/stop", app.address))
        .header("content-type", "application/json")
        .header("x-agui-stop", "1");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.expect("the app answers")
}

/// Asserts that `run_id` was left behind by nothing: a reconnect and a stop find no run, and a
/// retry with the same id runs to its end (and then is found).
async fn assert_nothing_left_and_the_retry_runs(app: &TestApp, retry: &Value) {
    let run_id = retry["runId"].as_str().unwrap();
    let reconnect = tokio::time::timeout(Duration::from_secs(5), events_as(app, None, run_id))
        .await
        .expect("a reconnect to a refused run answers at once");
    assert_eq!(reconnect.status(), 404, "a refused run is not kept");
    assert_eq!(stop_as(app, None, run_id).await.status(), 404);

    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Done", " now."])));
    let response = post_as(app, None, retry).await;
    assert_eq!(response.status(), 200, "the retry with the same runId runs");
    let events = parse_sse(&response.text().await.unwrap());
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    let replay = FrameReader::new(reconnect_ok(app, run_id).await)
        .rest()
        .await;
    assert_eq!(
        last(&replay.into_iter().map(|f| f.1).collect::<Vec<_>>())["type"],
        "RUN_FINISHED"
    );
}

async fn reconnect_ok(app: &TestApp, run_id: &str) -> reqwest::Response {
    let response = reconnect(app, run_id, None).await;
    assert_eq!(response.status(), 200);
    response
}

async fn a_run_refused_as_thread_busy_leaves_nothing_behind(backend: Backend) {
    let app = backend.app(|_| {}).await;
    slow_answer(&app, 20);
    let busy = post_as(&app, None, &body("t", "r-first")).await;
    assert_eq!(busy.status(), 200);
    let mut busy = EventReader::new(busy);
    busy.next().await.expect("RUN_STARTED");

    let refused = post_as(&app, None, &body("t", "r-second")).await;
    assert_eq!(refused.status(), 409);
    assert_eq!(error_body(refused).await["error"]["code"], "thread_busy");
    let reconnect = tokio::time::timeout(Duration::from_secs(5), events_as(&app, None, "r-second"))
        .await
        .expect("answers at once");
    assert_eq!(reconnect.status(), 404);

    // Once the thread is free, the honest client's retry with the same run id runs.
    while busy.next().await.is_some() {}
    assert_nothing_left_and_the_retry_runs(&app, &body("t", "r-second")).await;
}

async fn a_run_refused_for_an_invalid_tool_leaves_nothing_behind(backend: Backend) {
    let app = backend.app(|_| {}).await;
    let mut refused = body("t", "r-tool");
    refused["tools"] = json!([client_tool("not a valid name!")]);
    let response = post_as(&app, None, &refused).await;
    assert_eq!(response.status(), 422);
    assert_eq!(error_body(response).await["error"]["code"], "invalid_tool");
    assert_nothing_left_and_the_retry_runs(&app, &body("t", "r-tool")).await;
}

fn with_state_schema(settings: &mut Settings) {
    settings.agents.get_mut("assistant").unwrap().state.schema = Some(json!({
        "type": "object",
        "properties": {"count": {"type": "integer"}},
    }));
}

async fn a_run_refused_for_an_invalid_state_leaves_nothing_behind(backend: Backend) {
    let app = backend.app(with_state_schema).await;
    let mut refused = body("t", "r-state");
    refused["state"] = json!({"count": "many"});
    let response = post_as(&app, None, &refused).await;
    assert_eq!(response.status(), 422);
    assert_eq!(error_body(response).await["error"]["code"], "invalid_state");
    let mut fixed = body("t", "r-state");
    fixed["state"] = json!({"count": 3});
    assert_nothing_left_and_the_retry_runs(&app, &fixed).await;
}

fn two_tokens(settings: &mut Settings) {
    settings.server.auth.tokens = vec![ALICE.into(), BOB.into()];
}

async fn a_run_id_belongs_to_its_caller(backend: Backend) {
    let app = backend.app(two_tokens).await;
    slow_answer(&app, 30);
    let alices = post_as(&app, Some(ALICE), &body("t", "r-same")).await;
    assert_eq!(alices.status(), 200);
    let mut alices = FrameReader::new(alices);
    let mut frames = vec![alices.next().await.unwrap(), alices.next().await.unwrap()];

    // Bob picks the same run id (and thread id): his run is his own, and nothing tells him that
    // Alice's exists.
    slow_answer(&app, 3);
    let bobs = post_as(&app, Some(BOB), &body("t", "r-same")).await;
    assert_eq!(bobs.status(), 200, "another caller's run id is no conflict");
    let bobs = parse_sse(&bobs.text().await.unwrap());
    assert_well_formed(&bobs);
    let bobs_text: String = texts(&bobs).into_iter().map(|(_, t)| t).collect();
    assert_eq!(bobs_text, "w0 w1 w2 ");

    // Alice's reconnect still reaches her run, which Bob's stop did not touch.
    assert_eq!(stop_as(&app, Some(BOB), "r-same").await.status(), 200);
    drop(alices);
    let last_id = frames.last().unwrap().0.clone();
    let response = events_as_after(&app, ALICE, "r-same", &last_id).await;
    assert_eq!(response.status(), 200);
    frames.extend(FrameReader::new(response).rest().await);
    let events: Vec<Value> = frames.into_iter().map(|f| f.1).collect();
    assert_well_formed(&events);
    let text: String = texts(&events).into_iter().map(|(_, t)| t).collect();
    assert_eq!(text, (0..30).map(|i| format!("w{i} ")).collect::<String>());
}

async fn events_as_after(
    app: &TestApp,
    token: &str,
    run_id: &str,
    last_event_id: &str,
) -> reqwest::Response {
    app.client
        .get(format!("{}/assistant/runs/{run_id}/events", app.address))
        .bearer_auth(token)
        .header("last-event-id", last_event_id)
        .send()
        .await
        .expect("the app answers")
}

async fn reconnect_readers_are_capped(backend: Backend) {
    let app = backend
        .app(|s| {
            s.runs.max_readers_per_run = 2;
            s.runs.max_readers = 3;
        })
        .await;
    slow_answer(&app, 50);
    let first = post_as(&app, None, &body("t1", "r-1")).await;
    assert_eq!(first.status(), 200);
    slow_answer(&app, 50);
    let second = post_as(&app, None, &body("t2", "r-2")).await;
    assert_eq!(second.status(), 200);

    let a = events_as(&app, None, "r-1").await;
    let b = events_as(&app, None, "r-1").await;
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    let refused = events_as(&app, None, "r-1").await;
    assert_eq!(refused.status(), 429);
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(
        error_body(refused).await["error"]["code"],
        "too_many_readers"
    );
    let c = events_as(&app, None, "r-2").await;
    assert_eq!(c.status(), 200);
    let refused = events_as(&app, None, "r-2").await;
    assert_eq!(refused.status(), 429, "the server's cap holds across runs");

    // A reader that leaves gives its place back.
    drop(a);
    let mut again = None;
    for _ in 0..100 {
        let response = events_as(&app, None, "r-1").await;
        if response.status() == 200 {
            again = Some(response);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let again = again.expect("a freed place is taken again");
    drop((b, c, again, first, second));
}

for_each_store!(
    a_run_refused_as_thread_busy_leaves_nothing_behind,
    a_run_refused_for_an_invalid_tool_leaves_nothing_behind,
    a_run_refused_for_an_invalid_state_leaves_nothing_behind,
    a_run_id_belongs_to_its_caller,
    reconnect_readers_are_capped,
);
