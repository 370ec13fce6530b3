//! 1.0 clients send `protocolVersion: "1.0"`; the 0.0.59 client that CopilotKit pins sends
//! none and rejects several 1.0-only shapes, so those must be left out for it.

use serde_json::json;

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

#[tokio::test]
async fn run_finished_has_outcome_and_usage_for_1_0_and_neither_for_0_x() {
    let app = spawn_app(|_| {}).await;
    let reply = chunks::with_usage(chunks::text_reply(&["Hi", "!"]), 8, 2);
    app.fake.push(Reply::Sse(reply.clone()));
    app.fake.push(Reply::Sse(reply));

    let v1 = app.run_events("/", &input(vec![user("hi")])).await;
    let v0 = app.run_events("/", &input_0x(vec![user("hi")])).await;

    assert_well_formed(&v1);
    assert_well_formed(&v0);
    assert_0x_compatible(&v0);
    assert_eq!(types(&v1), types(&v0), "the same events either way");

    assert_eq!(v1[0]["protocolVersion"], "1.0");
    assert!(v0[0].get("protocolVersion").is_none(), "{}", v0[0]);

    let finished_1 = last(&v1);
    assert_eq!(finished_1["outcome"], json!({"type": "success"}));
    assert_eq!(finished_1["usage"][0]["totalTokens"], 10, "{finished_1}");

    let finished_0 = last(&v0);
    assert_eq!(finished_0["type"], "RUN_FINISHED");
    assert!(finished_0.get("outcome").is_none(), "{finished_0}");
    assert!(finished_0.get("usage").is_none(), "{finished_0}");
}

#[tokio::test]
async fn a_0_x_client_gets_its_pending_client_call_without_pending_tool_call_ids() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[
            ("call_w", "get_weather", r#"{"location":"Oslo"}"#),
            ("call_bg", "change_background", r#"{"background":"teal"}"#),
        ],
        false,
    )));
    let mut body = input_0x(vec![user("Weather in Oslo, and make it teal")]);
    body["tools"] = json!([client_tool("change_background")]);

    let events = app.run_events("/", &body).await;

    assert_well_formed(&events);
    assert_0x_compatible(&events);
    let result = the(&events, "TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], "call_w");
    assert!(result["content"].is_string());
    assert!(of_type(&events, "TOOL_CALL_END")
        .iter()
        .any(|e| e["toolCallId"] == "call_bg"));
    let finished = last(&events);
    assert_eq!(finished["type"], "RUN_FINISHED", "{events:?}");
    assert!(finished.get("outcome").is_none(), "{finished}");
    assert_eq!(app.fake.requests().len(), 1);
}
