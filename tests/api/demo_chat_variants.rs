//! The dojo's chat variants, `agentic_chat_multimodal` and `agentic_chat_reasoning`, against
//! the fake upstream (what reaches the model, what the client gets) and the offline model.
//! Both are followed into the next run with the history a real client keeps.

use agui_host::settings::LlmProvider;
use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

/// A complete 1×1 PNG, as the page's file input would attach it.
const PNG_1X1: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=";

fn user_parts(parts: Value) -> Value {
    json!({"id": "user-image", "role": "user", "content": parts})
}

fn png_part() -> Value {
    json!({"type": "image", "source": {"type": "data", "value": PNG_1X1, "mimeType": "image/png"}})
}

/// The upstream message of `role` at `index` among that role's messages.
fn upstream_message<'a>(body: &'a Value, role: &str, index: usize) -> &'a Value {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == role)
        .nth(index)
        .unwrap_or_else(|| panic!("{role} message #{index} in {body}"))
}

/// The concatenated deltas of the stream's reasoning messages.
fn reasoning_text(events: &[Value]) -> String {
    of_type(events, "REASONING_MESSAGE_CONTENT")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect()
}

/// The event types of the reasoning span, in order, with everything else left out.
fn reasoning_shape(events: &[Value]) -> Vec<&str> {
    let mut shape: Vec<&str> = types(events)
        .into_iter()
        .filter(|t| t.starts_with("REASONING_"))
        .collect();
    shape.dedup();
    shape
}

const REASONING_SHAPE: [&str; 5] = [
    "REASONING_START",
    "REASONING_MESSAGE_START",
    "REASONING_MESSAGE_CONTENT",
    "REASONING_MESSAGE_END",
    "REASONING_END",
];

#[tokio::test]
async fn multimodal_image_parts_reach_the_model_as_image_url_parts_in_every_later_run() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(chunks::text_reply(&[
        "A single ",
        "grey pixel.",
    ])));
    let ask = user_parts(json!([
        {"type": "text", "text": "What do you see in this image?"},
        png_part(),
        {"type": "image", "source": {"type": "url", "value": "https://example.com/cat.jpg", "mimeType": "image/jpeg"}},
    ]));
    let events = app
        .run_events("/agentic_chat_multimodal", &input(vec![ask.clone()]))
        .await;
    assert_well_formed(&events);
    assert_eq!(texts(&events)[0].1, "A single grey pixel.");

    let sent = &app.upstream_bodies()[0];
    assert_eq!(
        upstream_message(sent, "user", 0)["content"],
        json!([
            {"type": "text", "text": "What do you see in this image?"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_1X1}")}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        ])
    );
    assert!(
        content_text(upstream_message(sent, "system", 0)).contains("analyze images"),
        "the demo agent's instructions"
    );

    // The next question is about the same image: the model needs it again, in its place.
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["It is grey."])));
    let answer =
        json!({"id": texts(&events)[0].0, "role": "assistant", "content": "A single grey pixel."});
    let body = input(vec![ask, answer, user("What colour is it?")]);
    let events = app.run_events("/agentic_chat_multimodal", &body).await;
    assert_well_formed(&events);
    let sent = &app.upstream_bodies()[1];
    assert_eq!(roles(sent), ["system", "user", "assistant", "user"]);
    assert_eq!(
        upstream_message(sent, "user", 0)["content"][1]["image_url"]["url"],
        format!("data:image/png;base64,{PNG_1X1}")
    );
    assert_eq!(
        upstream_message(sent, "user", 1)["content"],
        "What colour is it?"
    );
}

#[tokio::test]
async fn legacy_binary_image_parts_from_0x_clients_are_forwarded_too() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(chunks::text_reply(&["A pixel."])));
    let ask = user_parts(json!([
        {"type": "text", "text": "Describe the uploaded picture"},
        {"type": "binary", "mimeType": "image/png", "data": PNG_1X1, "filename": "pixel.png"},
        {"type": "binary", "mimeType": "application/pdf", "url": "https://example.com/a.pdf", "filename": "a.pdf"},
    ]));
    let events = app
        .run_events("/agentic_chat_multimodal", &input_0x(vec![ask]))
        .await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    let sent = &app.upstream_bodies()[0];
    assert_eq!(
        upstream_message(sent, "user", 0)["content"],
        json!([
            {"type": "text", "text": "Describe the uploaded picture"},
            {"type": "image_url", "image_url": {"url": format!("data:image/png;base64,{PNG_1X1}")}},
            {"type": "text", "text": "[application/pdf attachment: a.pdf]"},
        ])
    );
}

#[tokio::test]
async fn bad_media_is_refused_before_the_stream_and_never_reaches_the_model() {
    let app = spawn_app(|settings| settings.server.input_limits.max_media_parts = 2).await;
    let cases = [
        (
            json!({"type": "image", "source": {"type": "data", "value": "/9j/4AAQSkZJRg==", "mimeType": "image/png"}}),
            "invalid_media",
            "not a PNG image",
        ),
        (
            json!({"type": "image", "source": {"type": "data", "value": "%%%", "mimeType": "image/png"}}),
            "invalid_media",
            "base64",
        ),
        (
            json!({"type": "image", "source": {"type": "data", "value": PNG_1X1, "mimeType": "image/png;charset=x"}}),
            "invalid_media",
            "type/subtype",
        ),
        (
            json!({"type": "image", "source": {"type": "data", "value": "PHN2Zy8+", "mimeType": "image/svg+xml"}}),
            "unsupported_image_type",
            "PNG, JPEG, GIF or WebP",
        ),
        (
            json!({"type": "image", "source": {"type": "url", "value": "file:///etc/passwd"}}),
            "invalid_media",
            "http(s)",
        ),
    ];
    for (part, code, says) in cases {
        let body = input(vec![user_parts(
            json!([{"type": "text", "text": "look"}, part]),
        )]);
        let response = app.post_run("/agentic_chat_multimodal", &body).await;
        assert_eq!(response.status(), 422, "{part}");
        let error = error_body(response).await;
        assert_eq!(error["error"]["code"], code, "{error}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("messages[0].content[1]") && message.contains(says),
            "{message}"
        );
    }
    let three = user_parts(json!([png_part(), png_part(), png_part()]));
    let response = app
        .post_run("/agentic_chat_multimodal", &input(vec![three]))
        .await;
    assert_eq!(response.status(), 422);
    assert_eq!(
        error_body(response).await["error"]["code"],
        "too_many_media_parts"
    );
    assert!(app.upstream_bodies().is_empty(), "nothing went upstream");
}

#[tokio::test]
async fn inline_only_servers_refuse_media_urls() {
    let app = spawn_app(|settings| settings.server.input_limits.allow_media_urls = false).await;
    let ask = user_parts(json!([
        {"type": "image", "source": {"type": "url", "value": "http://169.254.169.254/latest"}},
    ]));
    let response = app
        .post_run("/agentic_chat_multimodal", &input(vec![ask]))
        .await;
    assert_eq!(response.status(), 422);
    assert_eq!(
        error_body(response).await["error"]["code"],
        "media_url_not_allowed"
    );
    assert!(app.upstream_bodies().is_empty());
}

/// A reasoning model's turn: its thinking in `field`, then the answer.
fn reasoning_then_text(field: &str, reasoning: &[&str], text: &[&str]) -> Vec<String> {
    let mut frames = vec![chunks::role()];
    frames.extend(reasoning.iter().map(|r| chunks::reasoning(field, r)));
    frames.extend(text.iter().map(|t| chunks::text(t)));
    frames.push(chunks::finish("stop"));
    frames.push(chunks::done());
    frames
}

#[tokio::test]
async fn reasoning_deltas_stream_as_reasoning_events_before_the_answer() {
    let app = spawn_app(|_| {}).await;
    for field in ["reasoning_content", "reasoning"] {
        app.fake.push(Reply::Sse(reasoning_then_text(
            field,
            &["Reliability ", "and value ", "matter most."],
            &["The Toyota Camry."],
        )));
        let events = app
            .run_events(
                "/agentic_chat_reasoning",
                &input(vec![user("What is the best car to buy?")]),
            )
            .await;
        assert_well_formed(&events);
        assert_eq!(reasoning_shape(&events), REASONING_SHAPE, "{field}");
        assert_eq!(
            reasoning_text(&events),
            "Reliability and value matter most."
        );
        let start = the(&events, "REASONING_MESSAGE_START");
        assert_eq!(start["role"], "reasoning");
        let span = the(&events, "REASONING_START")["messageId"].clone();
        assert_eq!(the(&events, "REASONING_END")["messageId"], span);
        let end = events
            .iter()
            .position(|e| e["type"] == "REASONING_END")
            .unwrap();
        let text = events
            .iter()
            .position(|e| e["type"] == "TEXT_MESSAGE_START")
            .unwrap();
        assert!(end < text, "the span closes before the answer opens");
        assert_eq!(texts(&events)[0].1, "The Toyota Camry.");
    }
}

#[tokio::test]
async fn reasoning_reaches_0x_clients_unchanged_and_is_not_sent_back_upstream() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(reasoning_then_text(
        "reasoning_content",
        &["They want a sonnet."],
        &["Fourteen lines."],
    )));
    let ask = user("Write a short sonnet about AI.");
    let events = app
        .run_events("/agentic_chat_reasoning", &input_0x(vec![ask.clone()]))
        .await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    assert_eq!(reasoning_shape(&events), REASONING_SHAPE);

    // The client keeps the reasoning message in its history and sends it back; the model
    // gets the conversation without it (reasoning is not replayed to OpenAI-compatible APIs).
    let reasoning_id = the(&events, "REASONING_MESSAGE_START")["messageId"].clone();
    let (answer_id, answer) = texts(&events)[0].clone();
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Here is another."])));
    let history = vec![
        ask,
        json!({"id": reasoning_id, "role": "reasoning", "content": "They want a sonnet."}),
        json!({"id": answer_id, "role": "assistant", "content": answer}),
        user("Another one"),
    ];
    let events = app
        .run_events("/agentic_chat_reasoning", &input(history))
        .await;
    assert_well_formed(&events);
    let sent = &app.upstream_bodies()[1];
    assert_eq!(roles(sent), ["system", "user", "assistant", "user"]);
    assert!(!sent.to_string().contains("They want a sonnet"));
}

#[tokio::test]
async fn reasoning_closes_before_the_pages_change_background_call_and_the_next_run_answers() {
    let app = spawn_app(|_| {}).await;
    let mut frames = vec![
        chunks::role(),
        chunks::reasoning("reasoning_content", "Blue it is."),
    ];
    frames.extend(chunks::tool_call_deltas(
        &[("call_bg", "change_background", r#"{"background":"blue"}"#)],
        false,
    ));
    frames.push(chunks::finish("tool_calls"));
    frames.push(chunks::done());
    app.fake.push(Reply::Sse(frames));
    let ask = user("Change the background to blue");
    let body = json!({"tools": [client_tool("change_background")]});
    let mut first = input(vec![ask.clone()]);
    first["tools"] = body["tools"].clone();
    let events = app.run_events("/agentic_chat_reasoning", &first).await;
    assert_well_formed(&events);
    let end = types(&events)
        .iter()
        .position(|t| *t == "REASONING_END")
        .unwrap();
    let call = types(&events)
        .iter()
        .position(|t| *t == "TOOL_CALL_START")
        .unwrap();
    assert!(end < call, "{:?}", types(&events));
    assert_eq!(
        last(&events)["outcome"]["pendingToolCallIds"],
        json!(["call_bg"])
    );

    app.fake.push(Reply::Sse(reasoning_then_text(
        "reasoning_content",
        &["It worked."],
        &["Done: the background is blue."],
    )));
    let mut next = input(vec![
        ask,
        assistant_calls(&[("call_bg", "change_background", r#"{"background":"blue"}"#)]),
        tool_result("call_bg", r#"{"status":"success"}"#),
    ]);
    next["tools"] = body["tools"].clone();
    let events = app.run_events("/agentic_chat_reasoning", &next).await;
    assert_well_formed(&events);
    assert_eq!(reasoning_shape(&events), REASONING_SHAPE);
    assert_eq!(texts(&events)[0].1, "Done: the background is blue.");
    assert_tool_calls_answered(&app.upstream_bodies()[1]);
}

#[tokio::test]
async fn the_page_model_picker_state_is_validated() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(chunks::text_reply(&["Hi."])));
    let mut body = input(vec![user("Hi")]);
    body["state"] = json!({"model": "Anthropic"});
    let events = app.run_events("/agentic_chat_reasoning", &body).await;
    assert_well_formed(&events);

    body["state"] = json!({"model": "<script>"});
    let response = app.post_run("/agentic_chat_reasoning", &body).await;
    assert_eq!(response.status(), 422);
    assert_eq!(app.upstream_bodies().len(), 1);
}

#[tokio::test]
async fn offline_reasoning_and_image_routes_script_their_features() {
    let app = spawn_app(|settings| settings.llm.provider = LlmProvider::Offline).await;
    let events = app
        .run_events(
            "/agentic_chat_reasoning",
            &input_0x(vec![user("What is the best car to buy?")]),
        )
        .await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    assert_eq!(reasoning_shape(&events), REASONING_SHAPE);
    assert!(
        reasoning_text(&events).contains("What is the best car to buy?"),
        "{}",
        reasoning_text(&events)
    );
    assert!(!texts(&events)[0].1.is_empty());

    let ask = user_parts(json!([
        {"type": "text", "text": "Tell me what do you see in this image"},
        png_part(),
    ]));
    let events = app
        .run_events("/agentic_chat_multimodal", &input(vec![ask]))
        .await;
    assert_well_formed(&events);
    assert!(
        reasoning_shape(&events).is_empty(),
        "only the reasoning agent thinks aloud"
    );
    let reply = &texts(&events)[0].1;
    assert!(
        reply.starts_with("You attached an image (image/png, 68 bytes)."),
        "{reply}"
    );
}
