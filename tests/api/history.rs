//! History repair: AG-UI histories that OpenAI-compatible servers would refuse are repaired
//! before every model call, and AG-UI-only messages are not sent upstream.

use agui_host::settings::ThreadStoreKind;
use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

/// Runs `messages` against a plain text reply and returns the one upstream request body. No
/// thread store: these histories arrive as a thread's first request, where a server that keeps
/// threads refuses server tool results it never produced (tests/api/threads.rs); the repair
/// is the same either way.
async fn upstream_body_for(messages: Vec<Value>) -> Value {
    let app = spawn_app(|settings| settings.threads.store = ThreadStoreKind::Off).await;
    app.fake.push(Reply::Sse(chunks::text_reply(&["OK"])));
    let events = app.run_events("/", &input(messages)).await;
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    let mut bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 1);
    bodies.remove(0)
}

#[tokio::test]
async fn a_dangling_tool_call_gets_a_synthetic_result_right_after_it() {
    // An interrupted run, or a client tool the user never answered, leaves a call without a
    // result; OpenAI rejects such a history outright.
    let body = upstream_body_for(vec![
        user("Weather in Paris?"),
        assistant_calls(&[("call_old", "get_weather", r#"{"location":"Paris"}"#)]),
        user("Never mind, just say hi."),
    ])
    .await;

    assert_tool_calls_answered(&body);
    assert_eq!(
        roles(&body),
        ["system", "user", "assistant", "tool", "user"]
    );
    let synthetic = &body["messages"][3];
    assert_eq!(synthetic["tool_call_id"], "call_old");
    assert!(synthetic["content"].is_string(), "{synthetic}");
    assert_eq!(
        content_text(&body["messages"][4]),
        "Never mind, just say hi."
    );
}

#[tokio::test]
async fn a_tool_result_without_a_matching_call_is_dropped() {
    let body = upstream_body_for(vec![
        user("hi"),
        tool_result("call_ghost", "stale result"),
        user("again"),
    ])
    .await;

    assert_tool_calls_answered(&body);
    assert_eq!(roles(&body), ["system", "user", "user"]);
    assert!(!body.to_string().contains("stale result"), "{body}");
}

#[tokio::test]
async fn consecutive_assistant_messages_carrying_only_tool_calls_are_merged() {
    // Some clients file each parallel call as its own assistant message.
    let body = upstream_body_for(vec![
        user("Weather in Paris and Rome?"),
        assistant_calls(&[("call_1", "get_weather", r#"{"location":"Paris"}"#)]),
        assistant_calls(&[("call_2", "get_weather", r#"{"location":"Rome"}"#)]),
        tool_result("call_1", "sunny"),
        tool_result("call_2", "rainy"),
    ])
    .await;

    assert_tool_calls_answered(&body);
    assert_eq!(
        roles(&body),
        ["system", "user", "assistant", "tool", "tool"]
    );
    let ids: Vec<&Value> = body["messages"][2]["tool_calls"]
        .as_array()
        .expect("the merged message's tool_calls")
        .iter()
        .map(|call| &call["id"])
        .collect();
    assert_eq!(ids, [&json!("call_1"), &json!("call_2")]);
    let answers: Vec<(&Value, String)> = body["messages"].as_array().unwrap()[3..]
        .iter()
        .map(|m| (&m["tool_call_id"], content_text(m)))
        .collect();
    assert_eq!(
        answers,
        [
            (&json!("call_1"), "sunny".to_string()),
            (&json!("call_2"), "rainy".to_string()),
        ],
        "the real results are kept, not replaced by synthetic ones"
    );
}

#[tokio::test]
async fn developer_messages_are_sent_as_system_messages() {
    // Many OpenAI-compatible servers (vLLM, Ollama, older Azure versions) reject `developer`.
    let body = upstream_body_for(vec![developer("Answer in French."), user("hi")]).await;

    assert!(!roles(&body).contains(&"developer"), "{body}");
    let messages = body["messages"].as_array().unwrap();
    assert!(
        messages
            .iter()
            .any(|m| m["role"] == "system" && content_text(m).contains("Answer in French.")),
        "{body}"
    );
    assert_eq!(roles(&body).last(), Some(&"user"));
}

#[tokio::test]
async fn activity_and_reasoning_messages_are_not_sent_upstream() {
    let body = upstream_body_for(vec![
        user("hi"),
        json!({"id": "r-1", "role": "reasoning", "content": "secret chain of thought"}),
        assistant("Hello!"),
        json!({"id": "a-1", "role": "activity", "activityType": "progress", "content": {"percent": 50}}),
        user("again"),
    ])
    .await;

    assert_eq!(roles(&body), ["system", "user", "assistant", "user"]);
    assert_eq!(content_text(&body["messages"][2]), "Hello!");
    let sent = body.to_string();
    assert!(!sent.contains("secret chain of thought"), "{sent}");
    assert!(!sent.contains("progress"), "{sent}");
}
