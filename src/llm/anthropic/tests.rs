//! The Messages body built from a history, and the Messages events read back.

use serde_json::json;

use super::*;
use crate::llm::decoder::testing::{decode_in_pieces, tool_delta};
use crate::llm::error::Redactor;
use crate::llm::{ChatToolCall, FinishReason, LlmError, LlmEvent, Usage};

fn options(thinking: u32) -> MessagesOptions {
    MessagesOptions {
        prompt_caching: true,
        thinking_budget_tokens: thinking,
    }
}

fn body(history: Vec<ChatMessage>, thinking: u32) -> Value {
    let request = ChatRequest {
        model: None,
        messages: history,
        tools: vec![ToolSpec {
            name: "get_weather".into(),
            description: "Weather".into(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}})
                .into(),
        }],
        forced_tool: None,
    };
    options(thinking).request_body(&request, "claude-test".into(), Some(0.2), None)
}

fn call(id: &str) -> ChatToolCall {
    ChatToolCall {
        id: id.into(),
        name: "get_weather".into(),
        arguments: r#"{"city":"Paris"}"#.into(),
    }
}

#[test]
fn the_system_prompt_and_tools_are_cached_and_roles_alternate() {
    let body = body(
        vec![
            ChatMessage::System {
                content: "Be brief.".into(),
            },
            ChatMessage::user_text("weather?"),
            ChatMessage::assistant(Some("Looking.".into()), vec![call("c1"), call("c2")]),
            ChatMessage::Tool {
                tool_call_id: "c1".into(),
                content: "sunny".into(),
            },
            ChatMessage::Tool {
                tool_call_id: "c2".into(),
                content: String::new(),
            },
            ChatMessage::System {
                content: "State: {}".into(),
            },
            ChatMessage::user_text("thanks"),
        ],
        0,
    );
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "Be brief.\n\nState: {}", "cache_control": {"type": "ephemeral"}}])
    );
    assert_eq!(
        body["tools"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
    assert_eq!(
        body["tools"][0]["input_schema"]["properties"]["city"]["type"],
        "string"
    );
    assert_eq!(body["temperature"], json!(0.2_f32));
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "c2", "name": "get_weather", "input": {"city": "Paris"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "c2"},
                {"type": "text", "text": "thanks"},
            ]},
        ])
    );
}

#[test]
fn signed_thinking_goes_back_only_while_thinking_is_on_and_images_are_sources() {
    let history = vec![
        ChatMessage::User {
            content: vec![
                UserPart::ImageUrl {
                    url: "data:image/png;base64,iVBOR".into(),
                },
                UserPart::ImageUrl {
                    url: "https://example.com/a.png".into(),
                },
            ],
        },
        ChatMessage::Assistant {
            content: None,
            tool_calls: vec![ChatToolCall {
                arguments: "not json".into(),
                ..call("c1")
            }],
            reasoning: vec![
                ChatReasoning {
                    text: "Let me think.".into(),
                    encrypted: Some("sig-1".into()),
                },
                ChatReasoning {
                    text: String::new(),
                    encrypted: Some(format!("{REDACTED_PREFIX}opaque")),
                },
                ChatReasoning {
                    text: "unsigned".into(),
                    encrypted: None,
                },
            ],
        },
    ];
    let on = body(history.clone(), 2048);
    assert_eq!(
        on["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert!(on.get("temperature").is_none(), "{on}");
    assert_eq!(on["max_tokens"], 4096 + 2048);
    assert_eq!(
        on["messages"][0]["content"],
        json!([
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        ])
    );
    assert_eq!(
        on["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "Let me think.", "signature": "sig-1"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"arguments": "not json"}},
        ])
    );
    let off = body(history, 0);
    assert_eq!(
        off["messages"][1]["content"],
        json!([{"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"arguments": "not json"}}])
    );
}

#[test]
fn a_tool_loop_whose_turn_lost_its_thinking_continues_without_thinking() {
    let unsigned = vec![
        ChatMessage::user_text("weather?"),
        ChatMessage::assistant(None, vec![call("c1")]),
        ChatMessage::Tool {
            tool_call_id: "c1".into(),
            content: "sunny".into(),
        },
    ];
    let body_unsigned = body(unsigned.clone(), 2048);
    assert!(body_unsigned.get("thinking").is_none(), "{body_unsigned}");
    assert_eq!(body_unsigned["temperature"], json!(0.2_f32));

    let mut signed = unsigned.clone();
    signed[1] = ChatMessage::Assistant {
        content: None,
        tool_calls: vec![call("c1")],
        reasoning: vec![ChatReasoning {
            text: "Hm.".into(),
            encrypted: Some("sig".into()),
        }],
    };
    assert!(body(signed, 2048).get("thinking").is_some());

    // A new user turn after it thinks again.
    let mut next = unsigned;
    next.push(ChatMessage::user_text("and Rome?"));
    assert!(body(next, 2048).get("thinking").is_some());
}

#[test]
fn a_history_that_opens_with_the_assistant_gets_a_user_turn_first() {
    let body = body(vec![ChatMessage::assistant(Some("Hi!".into()), vec![])], 0);
    assert_eq!(body["messages"][0]["role"], "user");
    assert_eq!(body["messages"][0]["content"][0]["text"], EMPTY_TEXT);
    assert_eq!(body["messages"][1]["role"], "assistant");
}

fn frame(event: &str, data: &serde_json::Value) -> String {
    format!("event: {event}\ndata: {data}\n\n")
}

fn decode(body: &str) -> Vec<Result<LlmEvent, LlmError>> {
    decode_in_pieces(MessagesParser::new(Redactor::default()), body, 7)
}

fn start() -> String {
    frame(
        "message_start",
        &json!({"type": "message_start", "message": {"id": "msg_1", "usage": {
            "input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 1}}}),
    )
}

#[test]
fn thinking_text_and_parallel_tool_use_become_the_chat_events() {
    let mut body = start();
    for (event, data) in [
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm."}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}}),
        ),
        (
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ),
        ("ping", json!({"type": "ping"})),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {}}}),
        ),
        (
            "content_block_start",
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_b", "name": "g", "input": {}}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{\"b\":"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
        ),
        (
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "1}"}}),
        ),
        (
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 42}}),
        ),
        ("message_stop", json!({"type": "message_stop"})),
    ] {
        body.push_str(&frame(event, &data));
    }
    assert_eq!(
        decode(&body),
        vec![
            Ok(LlmEvent::ReasoningDelta("Hmm.".into())),
            Ok(LlmEvent::ReasoningEncrypted("sig".into())),
            Ok(LlmEvent::TextDelta("Hi".into())),
            tool_delta(0, Some("toolu_a"), Some("f"), ""),
            tool_delta(1, Some("toolu_b"), Some("g"), ""),
            tool_delta(1, None, None, "{\"b\":"),
            tool_delta(0, None, None, "{}"),
            tool_delta(1, None, None, "1}"),
            Ok(LlmEvent::Finished {
                reason: FinishReason::ToolCalls
            }),
            Ok(LlmEvent::Usage(Usage {
                input_tokens: 100,
                output_tokens: 42,
                reasoning_tokens: None,
                cached_input_tokens: Some(90),
            })),
        ]
    );
}

#[test]
fn an_error_frame_mid_stream_is_an_upstream_error_with_its_type() {
    let body = start()
        + &frame(
            "error",
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        );
    let events = decode(&body);
    let Some(Err(error)) = events.last() else {
        panic!("{events:?}")
    };
    assert_eq!(error.code(), "upstream_error");
    assert!(
        matches!(error, LlmError::Upstream { code: Some(code), upstream_message: Some(m), .. } if code == "overloaded_error" && m == "Overloaded"),
        "{error:?}"
    );
}

#[test]
fn a_body_cut_before_the_stop_is_a_cut_stream_and_after_it_is_complete() {
    let text = frame(
        "content_block_start",
        &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "Hel"}}),
    );
    let events = decode(&(start() + &text));
    assert_eq!(events[0], Ok(LlmEvent::TextDelta("Hel".into())));
    assert_eq!(
        events
            .last()
            .and_then(|e| e.as_ref().err())
            .map(LlmError::code),
        Some("upstream_stream_cut")
    );

    let stopped = start()
        + &text
        + &frame(
            "message_delta",
            &json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 3}}),
        );
    let events = decode(&stopped);
    assert!(
        events.contains(&Ok(LlmEvent::Finished {
            reason: FinishReason::Length
        })),
        "{events:?}"
    );
    assert!(events.iter().all(Result::is_ok), "{events:?}");
    assert_eq!(
        decode("data: [1,2]\n\n")[0]
            .as_ref()
            .map_err(LlmError::code),
        Err("upstream_malformed")
    );
}

#[test]
fn a_forced_tool_is_named_unless_the_model_thinks() {
    let forced = |thinking: u32| {
        let request = ChatRequest {
            messages: vec![ChatMessage::user_text("hi")],
            tools: vec![ToolSpec {
                name: "render".into(),
                description: String::new(),
                parameters: json!({"type": "object"}).into(),
            }],
            forced_tool: Some("render".into()),
            ..ChatRequest::default()
        };
        options(thinking).request_body(&request, "claude-test".into(), None, None)
    };
    assert_eq!(
        forced(0)["tool_choice"],
        json!({"type": "tool", "name": "render"})
    );
    // Extended thinking refuses a forced choice: the prompt asks for the call instead.
    assert!(forced(1024).get("tool_choice").is_none());
}
