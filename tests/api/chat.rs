//! Plain chat: the model's text becomes one assistant text message per model call.

use serde_json::json;

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

#[tokio::test]
async fn text_reply_streams_as_one_assistant_text_message() {
    let app = spawn_app(|_| {}).await;
    // The empty delta stands for the keep-alive deltas some servers send: it must not surface.
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Hel", "", "lo"])));

    let events = app.run_events("/", &input(vec![user("hi")])).await;

    assert_well_formed(&events);
    assert_eq!(
        types(&events),
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED",
        ]
    );
    assert_eq!(events[0]["protocolVersion"], "1.0");
    let start = the(&events, "TEXT_MESSAGE_START");
    assert_eq!(start["role"], "assistant");
    let id = start["messageId"].as_str().unwrap();
    let deltas: Vec<&str> = of_type(&events, "TEXT_MESSAGE_CONTENT")
        .iter()
        .map(|e| {
            assert_eq!(e["messageId"], id);
            e["delta"].as_str().unwrap()
        })
        .collect();
    assert_eq!(deltas, ["Hel", "lo"]);
    assert_eq!(the(&events, "TEXT_MESSAGE_END")["messageId"], id);

    let finished = last(&events);
    assert_eq!(finished["type"], "RUN_FINISHED");
    assert_eq!(finished["outcome"], json!({"type": "success"}));
    assert!(
        finished.get("usage").is_none(),
        "no usage chunk upstream, so no usage: {finished}"
    );
    assert_eq!(app.fake.requests().len(), 1);
}

#[tokio::test]
async fn usage_is_summed_over_the_model_calls_of_a_run() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(chunks::with_usage(
        chunks::tool_calls(
            &[("call_1", "get_weather", r#"{"location":"Paris"}"#)],
            false,
        ),
        10,
        5,
    )));
    app.fake.push(Reply::Sse(chunks::with_usage(
        chunks::text_reply(&["Sunny."]),
        20,
        7,
    )));

    let events = app
        .run_events("/", &input(vec![user("Weather in Paris?")]))
        .await;

    assert_well_formed(&events);
    let finished = last(&events);
    assert_eq!(finished["type"], "RUN_FINISHED", "{events:?}");
    let usage = finished["usage"].as_array().expect("RUN_FINISHED.usage");
    assert_eq!(
        usage.len(),
        1,
        "one entry per provider and model: {usage:?}"
    );
    let entry = &usage[0];
    assert_eq!(entry["provider"], "openai");
    assert_eq!(entry["model"], chunks::MODEL);
    assert_eq!(entry["inputTokens"], 30);
    assert_eq!(entry["outputTokens"], 12);
    assert_eq!(entry["totalTokens"], 42);
    // Real OpenAI only sends the usage chunk when asked (`llm.stream_usage`, on by default).
    for body in app.upstream_bodies() {
        assert_eq!(body["stream_options"]["include_usage"], true, "{body}");
    }
}
