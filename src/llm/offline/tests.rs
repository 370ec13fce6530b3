//! The offline model's script: what each prompt makes it answer or call, and the shape of its stream.

use futures_util::TryStreamExt;
use serde_json::json;

use super::super::{ChatToolCall, LlmClient};
use super::*;

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".into(),
        description: "Get the weather.".into(),
        parameters: json!({
            "type": "object",
            "properties": { "location": { "type": "string" }, "unit": { "type": "string" } },
            "required": ["location"]
        })
        .into(),
    }
}

fn request(messages: Vec<ChatMessage>, tools: Vec<ToolSpec>) -> ChatRequest {
    ChatRequest {
        model: None,
        messages,
        tools,
        forced_tool: None,
    }
}

fn text_of(events: &[LlmEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect()
}

fn arguments_of(events: &[LlmEvent]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            LlmEvent::ToolCallDelta { arguments, .. } => Some(arguments.as_str()),
            _ => None,
        })
        .collect()
}

#[test]
fn scripted_reply_quotes_the_user() {
    let req = request(
        vec![
            ChatMessage::System {
                content: "Be brief.".into(),
            },
            ChatMessage::user_text("Hi there, model"),
        ],
        vec![weather_tool()],
    );
    let events = reply(&req);
    let expected = "Hello from the agui-host offline model. No API key is configured, so this reply is scripted. You said: \"Hi there, model\". Set OPENAI_API_KEY (and optionally OPENAI_BASE_URL) to talk to a real model.";
    assert_eq!(text_of(&events), expected);
    // Word-sized deltas.
    let deltas = events
        .iter()
        .filter(|e| matches!(e, LlmEvent::TextDelta(_)))
        .count();
    assert_eq!(deltas, expected.split_whitespace().count());
    let n = events.len();
    assert_eq!(
        events[n - 2],
        LlmEvent::Finished {
            reason: FinishReason::Stop
        }
    );
    assert_eq!(
        events[n - 1],
        LlmEvent::Usage(Usage {
            input_tokens: 5,
            output_tokens: expected.split_whitespace().count() as u64,
            ..Usage::default()
        })
    );
    // Deterministic.
    assert_eq!(reply(&req), events);
}

#[test]
fn long_user_text_is_truncated() {
    let long = "a".repeat(500);
    let text = text_of(&reply(&request(vec![ChatMessage::user_text(long)], vec![])));
    assert!(
        text.contains(&format!("\"{}…\"", "a".repeat(200))),
        "{text}"
    );
    let empty = text_of(&reply(&request(vec![], vec![])));
    assert!(empty.contains("You said: \"\"."));
}

#[test]
fn tool_result_is_quoted() {
    let result = format!("{{\"temperature\":20,\"pad\":\"{}\"}}", "x".repeat(300));
    let req = request(
        vec![
            ChatMessage::user_text("get_weather Paris"),
            ChatMessage::Assistant {
                reasoning: Vec::new(),
                content: None,
                tool_calls: vec![ChatToolCall {
                    id: "call_offline_1".into(),
                    name: "get_weather".into(),
                    arguments: "{\"location\":\"Paris\"}".into(),
                }],
            },
            ChatMessage::Tool {
                tool_call_id: "call_offline_1".into(),
                content: result.clone(),
            },
        ],
        vec![weather_tool()],
    );
    let events = reply(&req);
    let text = text_of(&events);
    assert!(
        text.starts_with("The tool returned: {\"temperature\":20"),
        "{text}"
    );
    assert_eq!(text.chars().count(), "The tool returned: ".len() + 201);
    assert!(events.contains(&LlmEvent::Finished {
        reason: FinishReason::Stop
    }));
}

#[test]
fn naming_a_tool_calls_it() {
    let req = request(
        vec![ChatMessage::user_text(
            "Please use GET_WEATHER: Paris, France ",
        )],
        vec![weather_tool()],
    );
    let events = reply(&req);
    assert_eq!(
        events[0],
        LlmEvent::ToolCallDelta {
            index: 0,
            id: Some("call_offline_1".into()),
            name: Some("get_weather".into()),
            arguments: String::new(),
        }
    );
    let fragments = events
        .iter()
        .filter(|e| matches!(e, LlmEvent::ToolCallDelta { id: None, arguments, .. } if !arguments.is_empty()))
        .count();
    assert!(fragments >= 3, "{events:?}");
    let arguments: Value = serde_json::from_str(&arguments_of(&events)).expect("JSON");
    assert_eq!(arguments, json!({ "location": "Paris, France" }));
    let n = events.len();
    assert_eq!(
        events[n - 2],
        LlmEvent::Finished {
            reason: FinishReason::ToolCalls
        }
    );
    assert!(matches!(events[n - 1], LlmEvent::Usage(_)));
}

#[test]
fn call_ids_count_previous_calls() {
    let req = request(
        vec![
            ChatMessage::user_text("get_weather Oslo"),
            ChatMessage::Assistant {
                reasoning: Vec::new(),
                content: Some("calling".into()),
                tool_calls: vec![ChatToolCall {
                    id: "call_offline_1".into(),
                    name: "get_weather".into(),
                    arguments: "{}".into(),
                }],
            },
            ChatMessage::Tool {
                tool_call_id: "call_offline_1".into(),
                content: "sunny".into(),
            },
            ChatMessage::Assistant {
                reasoning: Vec::new(),
                content: Some("The tool returned: sunny".into()),
                tool_calls: vec![],
            },
            ChatMessage::user_text("and get_weather Rome"),
        ],
        vec![weather_tool()],
    );
    let events = reply(&req);
    assert!(
        matches!(&events[0], LlmEvent::ToolCallDelta { id: Some(id), .. } if id == "call_offline_2")
    );
    assert_eq!(arguments_of(&events), "{\"location\":\"Rome\"}");
}

#[test]
fn placeholders_follow_the_schema() {
    let tool = ToolSpec {
        name: "change_background".into(),
        description: String::new(),
        parameters: json!({
            "type": "object",
            "properties": {
                "color": { "type": "string" },
                "count": { "type": "integer" },
                "ratio": { "type": "number" },
                "flag": { "type": "boolean" },
                "items": { "type": "array" },
                "extra": { "type": "object" },
                "maybe": { "type": ["null", "string"] },
                "mode": { "type": "string", "enum": ["light", "dark"] },
                "optional": { "type": "string" }
            },
            "required": ["color", "count", "ratio", "flag", "items", "extra", "maybe", "mode", "undeclared"]
        }).into(),
    };
    let events = reply(&request(
        vec![ChatMessage::user_text("change_background")],
        vec![weather_tool(), tool],
    ));
    let arguments: Value = serde_json::from_str(&arguments_of(&events)).expect("JSON");
    assert_eq!(
        arguments,
        json!({
            "color": "lightblue", "count": 0, "ratio": 0, "flag": true, "items": [],
            "extra": {}, "maybe": "change_background", "mode": "light",
            "undeclared": "change_background"
        })
    );
    // A tool without a schema gets `{}`.
    let bare = ToolSpec {
        name: "ping".into(),
        description: String::new(),
        parameters: Value::Null.into(),
    };
    let events = reply(&request(vec![ChatMessage::user_text("ping")], vec![bare]));
    assert_eq!(arguments_of(&events), "{}");
}

#[test]
fn only_whole_tool_names_count() {
    // Neither the exact name nor a keyword as a whole word ("weather" in "get weather"
    // does name the tool: see `keywords_name_tools`).
    for text in ["get_weathers please", "forget_weather", "weatherproof"] {
        let events = reply(&request(
            vec![ChatMessage::user_text(text)],
            vec![weather_tool()],
        ));
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, LlmEvent::ToolCallDelta { .. })),
            "{text}"
        );
    }
    // Without tools in the request, naming one does nothing.
    let events = reply(&request(
        vec![ChatMessage::user_text("get_weather")],
        vec![],
    ));
    assert!(text_of(&events).starts_with("Hello from"));
}

fn tool(name: &str, parameters: Value) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: String::new(),
        parameters: parameters.into(),
    }
}

fn call_of(events: &[LlmEvent]) -> (String, Value) {
    let name = events
        .iter()
        .find_map(|e| match e {
            LlmEvent::ToolCallDelta {
                name: Some(name), ..
            } => Some(name.clone()),
            _ => None,
        })
        .expect("a tool call");
    (
        name,
        serde_json::from_str(&arguments_of(events)).expect("JSON"),
    )
}

fn demo_tools() -> Vec<ToolSpec> {
    vec![
        tool(
            "change_background",
            json!({"type": "object", "properties": {"background": {"type": "string"}}, "required": ["background"]}),
        ),
        weather_tool(),
        tool(
            "generate_task_steps",
            json!({"type": "object", "properties": {"steps": {"type": "array", "items": {"type": "object", "properties": {"description": {"type": "string"}, "status": {"type": "string", "enum": ["enabled", "disabled", "executing"]}}, "required": ["description", "status"]}}}, "required": ["steps"]}),
        ),
        tool(
            "generate_haiku",
            json!({"type": "object", "properties": {"japanese": {"type": "array", "items": {"type": "string"}}, "english": {"type": "array", "items": {"type": "string"}}, "image_name": {"type": "string"}, "gradient": {"type": "string"}}}),
        ),
    ]
}

#[test]
fn keywords_name_tools() {
    let tools = demo_tools();
    let cases = [
        ("Change the background to blue, please", "change_background"),
        ("What is the weather in San Francisco?", "get_weather"),
        ("Plan a trip to Mars", "generate_task_steps"),
        ("Write a haiku about AI", "generate_haiku"),
    ];
    for (text, expected) in cases {
        let events = reply(&request(vec![ChatMessage::user_text(text)], tools.clone()));
        assert_eq!(call_of(&events).0, expected, "{text}");
        assert_eq!(
            events,
            reply(&request(vec![ChatMessage::user_text(text)], tools.clone()))
        );
    }
    let (_, arguments) = call_of(&reply(&request(
        vec![ChatMessage::user_text("Change the background to blue")],
        tools.clone(),
    )));
    assert_eq!(arguments, json!({"background": "blue"}));
    let (_, arguments) = call_of(&reply(&request(
        vec![ChatMessage::user_text("weather in San Francisco?")],
        tools.clone(),
    )));
    assert_eq!(arguments, json!({"location": "San Francisco"}));
    let (_, arguments) = call_of(&reply(&request(
        vec![ChatMessage::user_text("Plan a trip to Mars")],
        tools.clone(),
    )));
    assert_eq!(
        arguments,
        json!({"steps": [
            {"description": "Research trip to Mars", "status": "enabled"},
            {"description": "Plan trip to Mars", "status": "enabled"},
            {"description": "Prepare trip to Mars", "status": "enabled"}
        ]})
    );
    let (_, haiku) = call_of(&reply(&request(
        vec![ChatMessage::user_text("Write a haiku")],
        tools,
    )));
    assert_eq!(haiku["japanese"].as_array().unwrap().len(), 3);
    assert_eq!(haiku["english"].as_array().unwrap().len(), 3);
    assert!(haiku["image_name"].as_str().unwrap().ends_with(".jpg"));
    assert!(haiku["gradient"]
        .as_str()
        .unwrap()
        .starts_with("linear-gradient"));
}

#[test]
fn long_arguments_stream_in_many_fragments() {
    let writer = tool(
        "write_document",
        json!({"type": "object", "properties": {"document": {"type": "string"}}, "required": ["document"]}),
    );
    let events = reply(&request(
        vec![ChatMessage::user_text("Write a document about cats")],
        vec![writer],
    ));
    let (name, arguments) = call_of(&events);
    assert_eq!(name, "write_document");
    let document = arguments["document"].as_str().unwrap();
    assert!(document.starts_with("# Cats\n"), "{document}");
    let fragments = events
        .iter()
        .filter(|e| matches!(e, LlmEvent::ToolCallDelta { id: None, .. }))
        .count();
    assert!(fragments > 10, "{fragments}");
}

#[test]
fn progress_tools_are_called_until_every_step_is_completed() {
    let steps = tool(
        "generate_task_steps_generative_ui",
        json!({"type": "object", "required": ["steps"], "properties": {"steps": {"type": "array", "items": {"type": "object", "properties": {"description": {"type": "string"}, "status": {"type": "string", "enum": ["pending", "completed"]}}}}}}),
    );
    let mut messages = vec![ChatMessage::user_text("Plan a party")];
    let mut statuses = Vec::new();
    for _ in 0..6 {
        let events = reply(&request(messages.clone(), vec![steps.clone()]));
        if !events
            .iter()
            .any(|e| matches!(e, LlmEvent::ToolCallDelta { .. }))
        {
            assert!(text_of(&events).starts_with("The tool returned"));
            break;
        }
        let (name, arguments) = call_of(&events);
        assert_eq!(name, "generate_task_steps_generative_ui");
        statuses.push(
            arguments["steps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["status"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
                .join(","),
        );
        let id = format!("call_offline_{}", statuses.len());
        messages.push(ChatMessage::Assistant {
            reasoning: Vec::new(),
            content: None,
            tool_calls: vec![ChatToolCall {
                id: id.clone(),
                name,
                arguments: arguments.to_string(),
            }],
        });
        messages.push(ChatMessage::Tool {
            tool_call_id: id,
            content: "Steps updated.".into(),
        });
    }
    assert_eq!(
        statuses,
        [
            "pending,pending,pending",
            "completed,pending,pending",
            "completed,completed,pending",
            "completed,completed,completed"
        ]
    );
}

#[test]
fn non_ascii_text_is_safe() {
    let events = reply(&request(
        vec![ChatMessage::user_text("İstanbul get_weather Zürich ☀")],
        vec![weather_tool()],
    ));
    assert_eq!(arguments_of(&events), "{\"location\":\"Zürich ☀\"}");
}

#[tokio::test]
async fn streams_through_the_client() {
    let client = LlmClient::offline();
    let req = request(vec![ChatMessage::user_text("hello")], vec![]);
    let streamed: Vec<LlmEvent> = client
        .stream_chat(req.clone())
        .try_collect()
        .await
        .expect("no error");
    assert_eq!(streamed, reply(&req));
}

#[test]
fn a_scheduling_tool_is_offered_times() {
    let tool = ToolSpec {
        name: "pick_meeting_time".into(),
        description: "Ask the user to pick a time.".into(),
        parameters:
            serde_json::json!({"type": "object", "required": ["topic", "slots"], "properties": {
                "topic": {"type": "string"}, "slots": {"type": "array", "items": {"type": "string"}}
            }})
            .into(),
    };
    let events = reply(&request(
        vec![ChatMessage::user_text(
            "schedule a meeting about the roadmap",
        )],
        vec![tool],
    ));
    let arguments: serde_json::Value = serde_json::from_str(&arguments_of(&events)).unwrap();
    assert_eq!(arguments["topic"], "roadmap");
    assert_eq!(
        arguments["slots"],
        serde_json::json!(["Monday 10:00", "Tuesday 14:00", "Thursday 16:30"])
    );
}
