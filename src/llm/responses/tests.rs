//! The Responses body built from a history, and the Responses events read back.

use serde_json::json;

use super::*;
use crate::llm::decoder::testing::{decode_in_pieces, tool_delta};
use crate::llm::error::Redactor;
use crate::llm::{ChatToolCall, FinishReason, LlmError, LlmEvent, Usage};

fn options(effort: &str, summary: &str) -> ResponsesOptions {
    ResponsesOptions {
        store: false,
        reasoning_effort: effort.into(),
        reasoning_summary: summary.into(),
    }
}

fn body(options: &ResponsesOptions, history: Vec<ChatMessage>) -> Value {
    let request = ChatRequest {
        model: None,
        messages: history,
        tools: vec![ToolSpec {
            name: "get_weather".into(),
            description: "Weather".into(),
            parameters: serde_json::Value::Null.into(),
        }],
        forced_tool: None,
    };
    options.request_body(&request, "o4-mini".into(), None, Some(500))
}

#[test]
fn the_history_becomes_input_items_and_sealed_reasoning_goes_back() {
    let history = vec![
        ChatMessage::System {
            content: "Be brief.".into(),
        },
        ChatMessage::User {
            content: vec![
                UserPart::Text("weather?".into()),
                UserPart::ImageUrl {
                    url: "data:image/png;base64,iVBOR".into(),
                },
            ],
        },
        ChatMessage::Assistant {
            content: Some("Looking.".into()),
            tool_calls: vec![ChatToolCall {
                id: "call_1".into(),
                name: "get_weather".into(),
                arguments: String::new(),
            }],
            reasoning: vec![
                ChatReasoning {
                    text: "Think.".into(),
                    encrypted: Some(seal("rs_1", "gAAA")),
                },
                // An Anthropic signature is not a Responses item.
                ChatReasoning {
                    text: "Other.".into(),
                    encrypted: Some("sig".into()),
                },
            ],
        },
        ChatMessage::Tool {
            tool_call_id: "call_1".into(),
            content: "sunny".into(),
        },
    ];
    let body = body(&options("low", "auto"), history);
    assert_eq!(body["store"], false);
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_output_tokens"], 500);
    assert_eq!(
        body["reasoning"],
        json!({"effort": "low", "summary": "auto"})
    );
    assert_eq!(body["include"], json!(["reasoning.encrypted_content"]));
    assert_eq!(
        body["tools"],
        json!([{"type": "function", "name": "get_weather", "description": "Weather",
                "parameters": {"type": "object", "properties": {}}, "strict": false}])
    );
    assert_eq!(
        body["input"],
        json!([
            {"type": "message", "role": "system", "content": "Be brief."},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "weather?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBOR", "detail": "auto"},
            ]},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "Think."}], "encrypted_content": "gAAA"},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking.", "annotations": []}]},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        ])
    );
}

#[test]
fn a_model_without_reasoning_is_sent_no_reasoning_options() {
    let body = body(&options("", ""), vec![ChatMessage::user_text("hi")]);
    assert!(body.get("reasoning").is_none(), "{body}");
    assert!(body.get("include").is_none(), "{body}");
}

fn frame(data: &Value) -> String {
    format!(
        "event: {}\ndata: {data}\n\n",
        data["type"].as_str().unwrap()
    )
}

fn decode(body: &str) -> Vec<Result<LlmEvent, LlmError>> {
    decode_in_pieces(ResponsesParser::new(Redactor::default()), body, 5)
}

#[test]
fn summaries_text_and_parallel_calls_become_the_chat_events() {
    let body: String = [
        json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 0, "delta": "First."}),
        json!({"type": "response.reasoning_summary_text.delta", "output_index": 0, "summary_index": 1, "delta": "Second."}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA"}}),
        json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0, "delta": "Hi"}),
        json!({"type": "response.output_item.added", "output_index": 2, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "f", "arguments": ""}}),
        json!({"type": "response.output_item.added", "output_index": 3, "item": {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "g", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 3, "delta": "{\"b\":"}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 2, "delta": "{}"}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 3, "delta": "1}"}),
        json!({"type": "response.function_call_arguments.done", "output_index": 3, "arguments": "{\"b\":1}"}),
        json!({"type": "response.completed", "response": {"status": "completed", "usage": {
            "input_tokens": 100, "input_tokens_details": {"cached_tokens": 80},
            "output_tokens": 40, "output_tokens_details": {"reasoning_tokens": 30}}}}),
    ]
    .iter()
    .map(frame)
    .collect();
    assert_eq!(
        decode(&body),
        vec![
            Ok(LlmEvent::ReasoningDelta("First.".into())),
            Ok(LlmEvent::ReasoningDelta("\n\n".into())),
            Ok(LlmEvent::ReasoningDelta("Second.".into())),
            Ok(LlmEvent::ReasoningEncrypted(seal("rs_1", "gAAA"))),
            Ok(LlmEvent::TextDelta("Hi".into())),
            tool_delta(0, Some("call_a"), Some("f"), ""),
            tool_delta(1, Some("call_b"), Some("g"), ""),
            tool_delta(1, None, None, "{\"b\":"),
            tool_delta(0, None, None, "{}"),
            tool_delta(1, None, None, "1}"),
            Ok(LlmEvent::Finished {
                reason: FinishReason::ToolCalls
            }),
            Ok(LlmEvent::Usage(Usage {
                input_tokens: 100,
                output_tokens: 40,
                reasoning_tokens: Some(30),
                cached_input_tokens: Some(80),
            })),
        ]
    );
}

#[test]
fn arguments_sent_only_when_done_are_not_lost_and_limits_and_failures_are_coded() {
    let body: String = [
        json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "function_call", "call_id": "c", "name": "f"}}),
        json!({"type": "response.function_call_arguments.done", "output_index": 0, "arguments": "{\"x\":1}"}),
        json!({"type": "response.incomplete", "response": {"incomplete_details": {"reason": "max_output_tokens"}}}),
    ]
    .iter()
    .map(frame)
    .collect();
    let events = decode(&body);
    assert!(events.contains(&Ok(LlmEvent::ToolCallDelta {
        index: 0,
        id: None,
        name: None,
        arguments: "{\"x\":1}".into()
    })));
    assert_eq!(
        events.last(),
        Some(&Ok(LlmEvent::Finished {
            reason: FinishReason::Length
        }))
    );

    let failed = frame(
        &json!({"type": "response.failed", "response": {"status": "failed",
        "error": {"code": "server_error", "message": "The model failed."}}}),
    );
    let events = decode(&failed);
    assert!(
        matches!(events.last(), Some(Err(LlmError::Upstream { code: Some(code), upstream_message: Some(m), .. })) if code == "server_error" && m == "The model failed."),
        "{events:?}"
    );
    let error = frame(
        &json!({"type": "error", "code": "rate_limit_exceeded", "message": "Slow down", "param": null}),
    );
    assert_eq!(
        decode(&error)
            .last()
            .and_then(|e| e.as_ref().err())
            .map(LlmError::code),
        Some("upstream_error")
    );
    let cut =
        frame(&json!({"type": "response.output_text.delta", "output_index": 0, "delta": "Hel"}));
    assert_eq!(
        decode(&cut)
            .last()
            .and_then(|e| e.as_ref().err())
            .map(LlmError::code),
        Some("upstream_stream_cut")
    );
}

#[test]
fn a_forced_tool_is_named_in_tool_choice() {
    let request = ChatRequest {
        messages: vec![ChatMessage::user_text("hi")],
        forced_tool: Some("get_weather".into()),
        ..ChatRequest::default()
    };
    let body = options("", "").request_body(&request, "gpt-5".into(), None, None);
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "name": "get_weather"})
    );
}
