//! `GET /<agent>/threads/<id>/connect` (issue 29): the thread, then its live run if one is
//! running, as one stream: a reloaded page gets the conversation and the rest of the run, each
//! message exactly once, whichever replica it reaches; a thread with no live run comes back as
//! a finished run; the next run goes on from what the connect gave.

use std::time::Duration;

use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::threads::Backend;
use crate::verify::assert_well_formed;

fn run_input(run_id: &str, messages: Vec<Value>) -> Value {
    let mut body = input(messages);
    body["runId"] = json!(run_id);
    body
}

async fn connect(app: &TestApp, thread: &str) -> reqwest::Response {
    app.get(&format!(
        "/assistant/threads/{thread}/connect?protocolVersion=1.0"
    ))
    .await
}

/// The conversation a client holds after applying `events` as `@ag-ui/client` does: the last
/// `MESSAGES_SNAPSHOT`, then the text each message's content events add.
fn conversation(events: &[Value]) -> Vec<(String, String)> {
    let mut messages: Vec<(String, String)> = Vec::new();
    for event in events {
        match event["type"].as_str().unwrap() {
            "MESSAGES_SNAPSHOT" => {
                messages = event["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| (m["id"].as_str().unwrap().to_owned(), content_text(m)))
                    .collect();
            }
            "TEXT_MESSAGE_START" => {
                let id = event["messageId"].as_str().unwrap().to_owned();
                assert!(
                    !messages.iter().any(|(known, _)| *known == id),
                    "message {id} started twice"
                );
                messages.push((id, String::new()));
            }
            "TEXT_MESSAGE_CONTENT" => {
                let id = event["messageId"].as_str().unwrap();
                let message = messages.iter_mut().find(|(known, _)| known == id).unwrap();
                message.1.push_str(event["delta"].as_str().unwrap());
            }
            _ => {}
        }
    }
    messages
}

/// Starts a slow second run on thread `t1` of `owner` (after a first, finished one) and reads
/// it to its first content; returns the run's reader and the question it asked.
async fn a_live_second_run(owner: &TestApp) -> (EventReader, Value) {
    owner.fake.push(Reply::Sse(chunks::text_reply(&["Hello."])));
    assert_well_formed(
        &owner
            .run_events("/", &run_input("r1", vec![user("Hi")]))
            .await,
    );
    let thread: Value = owner
        .get("/assistant/threads/t1")
        .await
        .json()
        .await
        .unwrap();
    let mut history = thread["messages"].as_array().unwrap().clone();
    let question = user("Count to four");
    history.push(question.clone());
    owner.fake.push(Reply::SlowSse(
        chunks::text_reply(&["one ", "two ", "three ", "four"]),
        Duration::from_millis(250),
    ));
    let mut live = EventReader::new(owner.post_run("/", &run_input("r2", history)).await);
    loop {
        let event = live.next().await.expect("the run streams");
        if event["type"] == "TEXT_MESSAGE_CONTENT" {
            break;
        }
    }
    (live, question)
}

/// Reads a connect to its end and checks it against the live run's own stream.
async fn assert_joined(response: reqwest::Response, mut live: EventReader, question: &Value) {
    assert_eq!(response.status(), 200);
    assert_eq!(content_type(&response), "text/event-stream");
    let joined = parse_sse(&response.text().await.unwrap());
    assert_well_formed(&joined);
    assert_eq!(
        types(&joined)[..2],
        ["RUN_STARTED", "MESSAGES_SNAPSHOT"],
        "{joined:?}"
    );
    assert_eq!(the(&joined, "RUN_STARTED")["runId"], "r2");
    while live.next().await.is_some() {}
    let held = conversation(&joined);
    let texts: Vec<&str> = held.iter().map(|(_, text)| text.as_str()).collect();
    assert_eq!(
        texts,
        [
            "Hi",
            "Hello.",
            content_text(question).as_str(),
            "one two three four"
        ],
        "the conversation, then the live run, each message once"
    );
}

async fn connect_joins_a_live_run_once(backend: Backend) {
    let app = backend.app(|_| {}).await;
    let (live, question) = a_live_second_run(&app).await;
    assert_joined(connect(&app, "t1").await, live, &question).await;

    // Once the run has ended, a connect is the thread as a finished run, with that run in it.
    let events = parse_sse(&connect(&app, "t1").await.text().await.unwrap());
    assert_well_formed(&events);
    assert_eq!(
        types(&events),
        [
            "RUN_STARTED",
            "MESSAGES_SNAPSHOT",
            "STATE_SNAPSHOT",
            "RUN_FINISHED"
        ],
        "the shape of a hydrate"
    );
    assert_eq!(the(&events, "RUN_STARTED")["runId"], "r2");
    let held = conversation(&events);
    assert_eq!(held.len(), 4);
    assert_eq!(held[3].1, "one two three four");

    // And the conversation goes on from what the connect gave.
    let messages = the(&events, "MESSAGES_SNAPSHOT")["messages"]
        .as_array()
        .unwrap()
        .clone();
    let mut history = messages;
    history.push(user("And five?"));
    app.fake.push(Reply::Sse(chunks::text_reply(&["five"])));
    assert_well_formed(&app.run_events("/", &run_input("r3", history)).await);
    let thread: Value = app.get("/assistant/threads/t1").await.json().await.unwrap();
    assert_eq!(thread["messages"].as_array().unwrap().len(), 6, "{thread}");
}

async fn connect_refuses_an_unknown_thread_and_another_scopes(backend: Backend) {
    let app = backend
        .app(|settings| settings.threads.scope_header = "x-user".into())
        .await;
    let missing = connect(&app, "nope").await;
    assert_eq!(missing.status(), 404);
    assert_eq!(
        error_body(missing).await["error"]["code"],
        "thread_not_found"
    );

    app.fake.push(Reply::Sse(chunks::text_reply(&["Mine."])));
    let response = app
        .client
        .post(format!("{}/", app.address))
        .header("x-user", "alice")
        .json(&input(vec![user("Hi")]))
        .send()
        .await
        .unwrap();
    assert_well_formed(&parse_sse(&response.text().await.unwrap()));
    let url = format!(
        "{}/assistant/threads/t1/connect?protocolVersion=1.0",
        app.address
    );
    let as_bob = app
        .client
        .get(&url)
        .header("x-user", "bob")
        .send()
        .await
        .unwrap();
    assert_eq!(
        as_bob.status(),
        404,
        "another scope's thread does not exist"
    );
    let as_alice = app
        .client
        .get(&url)
        .header("x-user", "alice")
        .send()
        .await
        .unwrap();
    assert_eq!(as_alice.status(), 200);
}

for_each_store!(
    connect_joins_a_live_run_once,
    connect_refuses_an_unknown_thread_and_another_scopes,
);

/// On Redis, a connect that reaches another replica than the run's joins it all the same.
#[tokio::test]
async fn redis_connect_joins_a_run_live_on_another_replica() {
    let redis = Backend::redis().await;
    let owner = redis.app(|_| {}).await;
    let other = redis.app(|_| {}).await;
    let (live, question) = a_live_second_run(&owner).await;
    assert_joined(connect(&other, "t1").await, live, &question).await;
}

#[tokio::test]
async fn with_the_store_off_connect_is_threads_off() {
    let app = spawn_app(|settings| {
        settings.threads.store = agui_host::settings::ThreadStoreKind::Off;
    })
    .await;
    let response = connect(&app, "t1").await;
    assert_eq!(response.status(), 404);
    assert_eq!(error_body(response).await["error"]["code"], "threads_off");
}
