//! Server tools: the agent's own tools run inside the run, their results are streamed and sent
//! back to the model, and the loop calls the model again.

use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

fn index_of(events: &[Value], predicate: impl Fn(&Value) -> bool) -> Vec<usize> {
    events
        .iter()
        .enumerate()
        .filter(|(_, e)| predicate(e))
        .map(|(i, _)| i)
        .collect()
}

/// The argument fragments of an upstream reply, in stream order, attributed to call ids.
fn upstream_fragments(frames: &[String], ids: &[&str]) -> Vec<(String, String)> {
    frames
        .iter()
        .filter_map(|f| serde_json::from_str::<Value>(f).ok())
        .flat_map(|chunk| {
            chunk["choices"][0]["delta"]["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|call| {
            let fragment = call["function"]["arguments"].as_str()?.to_string();
            let index = call["index"].as_u64()? as usize;
            (!fragment.is_empty()).then(|| (ids[index].to_string(), fragment))
        })
        .collect()
}

#[tokio::test]
async fn a_server_tool_call_is_run_and_its_result_sent_back_to_the_model() {
    let app = spawn_app(|_| {}).await;
    let args = r#"{"location":"Paris"}"#;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "get_weather", args)],
        false,
    )));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["It is ", "sunny."])));

    let events = app
        .run_events("/", &input(vec![user("Weather in Paris?")]))
        .await;

    assert_well_formed(&events);
    let without_args: Vec<&str> = types(&events)
        .into_iter()
        .filter(|t| *t != "TOOL_CALL_ARGS")
        .collect();
    assert_eq!(
        without_args,
        [
            "RUN_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_END",
            "TOOL_CALL_RESULT",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED",
        ]
    );
    let start = the(&events, "TOOL_CALL_START");
    assert_eq!(
        start["toolCallId"], "call_1",
        "the upstream call id is kept"
    );
    assert_eq!(start["toolCallName"], "get_weather");
    let parent = start["parentMessageId"]
        .as_str()
        .expect("TOOL_CALL_START.parentMessageId");
    assert_eq!(tool_args(&events)["call_1"], args);

    let expected_content = serde_json::to_string(&default_weather_result()).unwrap();
    let result = the(&events, "TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], "call_1");
    assert_eq!(result["role"], "tool");
    assert_eq!(result["content"], expected_content.as_str());
    let result_id = result["messageId"].as_str().expect("result messageId");
    assert_ne!(
        result_id, parent,
        "the tool message is a message of its own"
    );

    let text_id = the(&events, "TEXT_MESSAGE_START")["messageId"]
        .as_str()
        .unwrap();
    assert_ne!(
        text_id, parent,
        "the second model call is a new assistant message"
    );
    assert_eq!(
        texts(&events),
        [(text_id.to_string(), "It is sunny.".to_string())]
    );
    assert_eq!(last(&events)["outcome"], json!({"type": "success"}));

    assert_the_call_answered_upstream(&app, args, &expected_content);
}

/// The second model call saw the call as the model wrote it, answered by the tool's result.
fn assert_the_call_answered_upstream(app: &TestApp, args: &str, expected_content: &str) {
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2, "one model call per turn of the loop");
    let second = &bodies[1];
    assert_tool_calls_answered(second);
    assert_eq!(roles(second), ["system", "user", "assistant", "tool"]);
    assert_eq!(
        second["messages"][2]["tool_calls"],
        json!([{
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": args},
        }])
    );
    assert_eq!(second["messages"][3]["tool_call_id"], "call_1");
    assert_eq!(content_text(&second["messages"][3]), expected_content);
}

#[tokio::test]
async fn parallel_server_tool_calls_with_interleaved_arguments_are_kept_apart_and_all_answered() {
    let time_result = json!({"time": "12:00", "zone": "CET"});
    let app = spawn_app(|settings| {
        let agent = settings.agents.get_mut("assistant").unwrap();
        agent
            .tools
            .push(static_tool("get_time", time_result.clone()));
    })
    .await;
    let weather_args = r#"{"location":"Paris, France","unit":"celsius"}"#;
    let time_args = r#"{"zone":"Europe/Paris","format":"24h"}"#;
    let reply = chunks::tool_calls(
        &[
            ("call_a", "get_weather", weather_args),
            ("call_b", "get_time", time_args),
        ],
        true,
    );
    let fragments = upstream_fragments(&reply, &["call_a", "call_b"]);
    app.fake.push(Reply::Sse(reply));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Sunny, noon."])));

    let events = app
        .run_events("/", &input(vec![user("Weather and time in Paris?")]))
        .await;

    assert_well_formed(&events);
    let starts = of_type(&events, "TOOL_CALL_START");
    let started: Vec<(&Value, &Value)> = starts
        .iter()
        .map(|s| (&s["toolCallId"], &s["toolCallName"]))
        .collect();
    assert_eq!(
        started,
        [
            (&json!("call_a"), &json!("get_weather")),
            (&json!("call_b"), &json!("get_time")),
        ]
    );
    assert_eq!(
        starts[0]["parentMessageId"], starts[1]["parentMessageId"],
        "the calls of one model turn belong to one assistant message"
    );

    // One TOOL_CALL_ARGS per upstream fragment, in upstream order, attributed by index.
    let streamed: Vec<(String, String)> = of_type(&events, "TOOL_CALL_ARGS")
        .iter()
        .filter(|e| e["delta"] != "")
        .map(|e| {
            (
                e["toolCallId"].as_str().unwrap().to_string(),
                e["delta"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(streamed, fragments);
    let args = tool_args(&events);
    assert_eq!(args["call_a"], weather_args);
    assert_eq!(args["call_b"], time_args);

    assert_calls_end_together_then_answered_in_order(&events, &time_result);

    assert_both_calls_answered_upstream(&app, weather_args, time_args, &time_result);
}

/// Calls end together when the model call ends; results follow, in call order.
fn assert_calls_end_together_then_answered_in_order(events: &[Value], time_result: &Value) {
    let arg_positions = index_of(events, |e| e["type"] == "TOOL_CALL_ARGS");
    let end_positions = index_of(events, |e| e["type"] == "TOOL_CALL_END");
    let result_positions = index_of(events, |e| e["type"] == "TOOL_CALL_RESULT");
    assert!(end_positions[0] > *arg_positions.last().unwrap());
    assert!(result_positions[0] > *end_positions.last().unwrap());
    let results = of_type(events, "TOOL_CALL_RESULT");
    assert_eq!(results.len(), 2);
    assert_eq!(results[0]["toolCallId"], "call_a");
    assert_eq!(
        results[0]["content"],
        serde_json::to_string(&default_weather_result())
            .unwrap()
            .as_str()
    );
    assert_eq!(results[1]["toolCallId"], "call_b");
    assert_eq!(
        results[1]["content"],
        serde_json::to_string(time_result).unwrap().as_str()
    );
    assert_ne!(results[0]["messageId"], results[1]["messageId"]);
}

/// The second model call saw both calls, as the model wrote them, each answered in order.
fn assert_both_calls_answered_upstream(
    app: &TestApp,
    weather_args: &str,
    time_args: &str,
    time_result: &Value,
) {
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2);
    let second = &bodies[1];
    assert_tool_calls_answered(second);
    assert_eq!(
        roles(second),
        ["system", "user", "assistant", "tool", "tool"]
    );
    let calls = &second["messages"][2]["tool_calls"];
    assert_eq!(calls[0]["id"], "call_a");
    assert_eq!(calls[0]["function"]["arguments"], weather_args);
    assert_eq!(calls[1]["id"], "call_b");
    assert_eq!(calls[1]["function"]["arguments"], time_args);
    assert_eq!(second["messages"][3]["tool_call_id"], "call_a");
    assert_eq!(second["messages"][4]["tool_call_id"], "call_b");
    assert_eq!(
        content_text(&second["messages"][4]),
        serde_json::to_string(time_result).unwrap()
    );
}
