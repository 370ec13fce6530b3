//! Client (frontend) tools: tools listed in the request's `tools`. The server cannot run them,
//! so the run ends with the call pending and the client answers it in the next run.

use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

const BACKGROUND_ARGS: &str = r#"{"background":"linear-gradient(#fa0,#f0a)"}"#;

fn position(events: &[Value], ty: &str, id_field: &str, id: &str) -> usize {
    events
        .iter()
        .position(|e| e["type"] == ty && e[id_field] == id)
        .unwrap_or_else(|| panic!("no {ty} for {id} in {:?}", types(events)))
}

#[tokio::test]
async fn a_client_tool_call_ends_the_run_with_the_call_pending() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(chunks::text_then_tool_calls(
        &["Switching ", "the background."],
        &[("call_bg", "change_background", BACKGROUND_ARGS)],
        false,
    )));
    let mut body = input(vec![user("Make the background orange")]);
    body["tools"] = json!([client_tool("change_background")]);

    let events = app.run_events("/", &body).await;

    assert_well_formed(&events);
    let text_id = the(&events, "TEXT_MESSAGE_START")["messageId"]
        .as_str()
        .unwrap();
    let start = the(&events, "TOOL_CALL_START");
    assert_eq!(start["toolCallId"], "call_bg");
    assert_eq!(start["toolCallName"], "change_background");
    assert_eq!(
        start["parentMessageId"], text_id,
        "text and calls of one model call are one assistant message"
    );
    assert_eq!(tool_args(&events)["call_bg"], BACKGROUND_ARGS);
    assert!(
        position(&events, "TEXT_MESSAGE_END", "messageId", text_id)
            < position(&events, "TOOL_CALL_END", "toolCallId", "call_bg")
    );
    assert!(
        of_type(&events, "TOOL_CALL_RESULT").is_empty(),
        "the server cannot answer a client tool"
    );
    let finished = last(&events);
    assert_eq!(finished["type"], "RUN_FINISHED");
    assert_eq!(
        finished["outcome"],
        json!({"type": "success", "pendingToolCallIds": ["call_bg"]})
    );

    // The request's tools are offered to the model next to the agent's server tools.
    let bodies = app.upstream_bodies();
    assert_eq!(
        bodies.len(),
        1,
        "the run waits for the client, not the model"
    );
    let tools = bodies[0]["tools"].as_array().expect("upstream tools");
    let declared = client_tool("change_background");
    assert!(
        tools.contains(&json!({
            "type": "function",
            "function": {
                "name": "change_background",
                "description": declared["description"],
                "parameters": declared["parameters"],
            },
        })),
        "{tools:?}"
    );
    assert_eq!(tool_names(&bodies[0]).len(), 2, "{tools:?}");
    assert!(tool_names(&bodies[0]).contains(&"get_weather"));
}

#[tokio::test]
async fn the_follow_up_run_sends_the_client_tool_result_to_the_model() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(chunks::text_then_tool_calls(
        &["Switching the background."],
        &[("call_bg", "change_background", BACKGROUND_ARGS)],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Done!"])));
    let question = user("Make the background orange");
    let mut first = input(vec![question.clone()]);
    first["tools"] = json!([client_tool("change_background")]);
    let first_events = app.run_events("/", &first).await;
    assert_well_formed(&first_events);

    // The client rebuilds the assistant message from the stream, runs the tool, and sends
    // the whole history again with the result, as a new run of the same thread.
    let start = the(&first_events, "TOOL_CALL_START");
    let assistant_message = json!({
        "id": start["parentMessageId"],
        "role": "assistant",
        "content": texts(&first_events)[0].1,
        "toolCalls": [{
            "id": "call_bg",
            "type": "function",
            "function": {
                "name": "change_background",
                "arguments": tool_args(&first_events)["call_bg"],
            },
        }],
    });
    let tool_answer = tool_result("call_bg", r#"{"status":"success"}"#);
    let mut second = input(vec![question, assistant_message, tool_answer]);
    second["runId"] = json!("r2");
    second["tools"] = json!([client_tool("change_background")]);

    let events = app.run_events("/", &second).await;

    assert_well_formed(&events);
    assert_eq!(texts(&events)[0].1, "Done!");
    assert_eq!(last(&events)["outcome"], json!({"type": "success"}));
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2);
    let upstream = &bodies[1];
    assert_tool_calls_answered(upstream);
    assert_eq!(roles(upstream), ["system", "user", "assistant", "tool"]);
    let call_message = &upstream["messages"][2];
    assert_eq!(content_text(call_message), "Switching the background.");
    assert_eq!(
        call_message["tool_calls"],
        json!([{
            "id": "call_bg",
            "type": "function",
            "function": {"name": "change_background", "arguments": BACKGROUND_ARGS},
        }])
    );
    assert_eq!(upstream["messages"][3]["tool_call_id"], "call_bg");
    assert_eq!(
        content_text(&upstream["messages"][3]),
        r#"{"status":"success"}"#
    );
}

#[tokio::test]
async fn a_mixed_batch_runs_the_server_tool_and_leaves_the_client_tool_pending() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[
            ("call_bg", "change_background", BACKGROUND_ARGS),
            ("call_w", "get_weather", r#"{"location":"Lyon"}"#),
        ],
        true,
    )));
    let mut body = input(vec![user("Orange background, and the weather in Lyon")]);
    body["tools"] = json!([client_tool("change_background")]);

    let events = app.run_events("/", &body).await;

    assert_well_formed(&events);
    let results = of_type(&events, "TOOL_CALL_RESULT");
    assert_eq!(results.len(), 1, "only the server tool has a result");
    assert_eq!(results[0]["toolCallId"], "call_w");
    assert_eq!(
        results[0]["content"],
        serde_json::to_string(&default_weather_result())
            .unwrap()
            .as_str()
    );
    assert_eq!(
        last(&events)["outcome"],
        json!({"type": "success", "pendingToolCallIds": ["call_bg"]})
    );
    assert_eq!(
        app.fake.requests().len(),
        1,
        "the model is not called again while a client call is pending"
    );
}

#[tokio::test]
async fn a_client_tool_named_like_a_server_tool_runs_the_server_tool_by_default() {
    let app = spawn_app(|_| {}).await;
    app.fake.push_call_then_text(
        ("call_1", "get_weather", r#"{"location":"Rome"}"#),
        "Sunny in Rome.",
    );
    let mut body = input(vec![user("Weather in Rome?")]);
    body["tools"] = json!([{
        "name": "get_weather",
        "description": "A client-side weather widget.",
        "parameters": {"type": "object", "properties": {}},
    }]);

    let events = app.run_events("/", &body).await;

    assert_well_formed(&events);
    let bodies = app.upstream_bodies();
    assert_eq!(
        tool_names(&bodies[0]),
        ["get_weather"],
        "the model sees the tool once"
    );
    assert_eq!(
        bodies[0]["tools"][0]["function"]["description"], "Get the current weather for a location.",
        "and it is the server's"
    );
    assert_eq!(the(&events, "TOOL_CALL_RESULT")["toolCallId"], "call_1");
    assert_eq!(last(&events)["outcome"], json!({"type": "success"}));
    assert_eq!(bodies.len(), 2);
}

#[tokio::test]
async fn a_client_tool_named_like_a_server_tool_is_refused_under_the_reject_policy() {
    let app = spawn_app(|settings| {
        settings
            .agents
            .get_mut("assistant")
            .unwrap()
            .tool_name_clash = agui_host::settings::ToolNameClash::Reject;
    })
    .await;
    let mut body = input(vec![user("Weather in Rome?")]);
    body["tools"] = json!([client_tool("get_weather")]);

    let response = app.post_run("/", &body).await;

    assert_eq!(response.status(), 422);
    let error = error_body(response).await;
    assert_eq!(error["error"]["code"], "tool_name_clash");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("get_weather"),
        "the refusal names the tool: {error}"
    );
    assert!(app.fake.requests().is_empty());
}

/// A reply that arrives in one piece (a fast model, a proxy that buffers) streams one delta per
/// message and per call instead of one per model chunk, and the client's next run, sent with
/// the history it kept from those events, gives the model back exactly what it wrote.
#[tokio::test]
async fn a_reply_that_arrives_at_once_streams_one_delta_per_message_and_call() {
    let app = spawn_app(|_| {}).await;
    let parts = ["Switching ", "the ", "background", "."];
    let frames = chunks::text_then_tool_calls(
        &parts,
        &[("call_bg", "change_background", BACKGROUND_ARGS)],
        false,
    );
    app.fake.push(Reply::Burst(frames.clone()));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));
    let first_input = vec![user("Make the background orange")];
    let mut body = input(first_input.clone());
    body["tools"] = json!([client_tool("change_background")]);

    let events = app.run_events("/", &body).await;

    assert_well_formed(&events);
    let contents: Vec<&str> = of_type(&events, "TEXT_MESSAGE_CONTENT")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["Switching the background."]);
    let arguments: Vec<&str> = of_type(&events, "TOOL_CALL_ARGS")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(arguments, [BACKGROUND_ARGS]);

    let mut history = crate::approvals::client_history(&first_input, &events);
    history.push(tool_result("call_bg", "changed"));
    let mut next = input(history);
    next["tools"] = json!([client_tool("change_background")]);
    let events = app.run_events("/", &next).await;
    assert_well_formed(&events);
    assert_eq!(texts(&events).len(), 1);

    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2);
    let messages = bodies[1]["messages"].as_array().unwrap();
    let assistant = messages
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("the assistant turn is sent back");
    assert_eq!(assistant["content"], "Switching the background.");
    assert_eq!(
        assistant["tool_calls"][0]["function"]["arguments"],
        BACKGROUND_ARGS
    );
    assert_tool_calls_answered(&bodies[1]);

    // With `llm.merge_deltas = false` the same burst streams one event per model chunk.
    let app = spawn_app(|settings| settings.llm.merge_deltas = false).await;
    app.fake.push(Reply::Burst(frames));
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    assert_eq!(of_type(&events, "TEXT_MESSAGE_CONTENT").len(), parts.len());
    assert!(of_type(&events, "TOOL_CALL_ARGS").len() > 1);
    assert_eq!(tool_args(&events)["call_bg"], BACKGROUND_ARGS);
}
