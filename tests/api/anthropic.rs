//! Agents on an Anthropic Messages profile, against the fake Messages upstream: text, server
//! and client tools, parallel calls, predictive state from `input_json_delta` fragments,
//! extended thinking and its signature round trip, approvals over the runs that follow, and
//! each upstream fault class.

use agui_host::settings::{LlmProvider, ModelProfile, Settings};
use serde_json::{json, Value};

use crate::approvals::the_text;
use crate::fake_llm::{chunks, Reply};
use crate::fake_messages as messages;
use crate::helpers::*;
use crate::providers::{self, assert_run_error, next_run_with_reasoning, weather_call, Provider};
use crate::verify::{assert_0x_compatible, assert_well_formed};

fn anthropic_profile(settings: &Settings) -> ModelProfile {
    providers::profile_on_fake(settings, LlmProvider::Anthropic, messages::MODEL)
}

const ANTHROPIC: Provider = Provider {
    profile_name: "claude",
    profile: anthropic_profile,
    text_reply: messages::text_reply,
    tool_calls: |calls| messages::tool_calls(&[], calls),
};

async fn anthropic_app(profile: impl FnOnce(&mut ModelProfile)) -> TestApp {
    ANTHROPIC.app(profile).await
}

/// The content blocks of every message of an upstream request, in order.
fn blocks(body: &Value) -> Vec<Value> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn a_text_reply_streams_and_the_request_is_a_messages_request() {
    let app = anthropic_app(|_| {}).await;
    app.fake
        .push(Reply::Sse(messages::text_reply(&["Hel", "lo ", "there."])));

    let events = app.run_events("/", &input(vec![user("hi")])).await;

    assert_well_formed(&events);
    assert_eq!(the_text(&events), "Hello there.");
    let usage = &last(&events)["usage"][0];
    assert_eq!(usage["provider"], "anthropic");
    assert_eq!(usage["model"], messages::MODEL);
    assert_eq!(usage["inputTokens"], 12);
    assert_eq!(usage["outputTokens"], 5);

    let requests = app.fake.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some(API_KEY));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.header("authorization"), None, "no OpenAI-style key");
    let body = &request.body;
    assert_eq!(body["model"], messages::MODEL);
    assert_eq!(body["stream"], true);
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["system"][0]["type"], "text");
    assert_eq!(
        body["system"][0]["cache_control"],
        json!({"type": "ephemeral"}),
        "the system prompt is cached by default"
    );
    let last_tool = body["tools"].as_array().unwrap().last().unwrap();
    assert_eq!(last_tool["cache_control"], json!({"type": "ephemeral"}));
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
    );
}

#[tokio::test]
async fn prompt_caching_can_be_turned_off() {
    let app = anthropic_app(|p| p.prompt_caching = Some(false)).await;
    app.fake.push(Reply::Sse(messages::text_reply(&["ok"])));
    app.run_events("/", &input(vec![user("hi")])).await;
    let body = &app.upstream_bodies()[0];
    assert!(body["system"][0].get("cache_control").is_none(), "{body}");
    assert!(
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.get("cache_control").is_none()),
        "{body}"
    );
}

#[tokio::test]
async fn parallel_server_tools_run_and_their_results_go_back_in_one_user_turn() {
    let app = providers::parallel_server_tools(&ANTHROPIC, "toolu_").await;
    let body = &app.upstream_bodies()[1];
    assert_eq!(
        roles(body),
        ["user", "assistant", "user"],
        "roles alternate: {body}"
    );
    let turn = body["messages"][1]["content"].as_array().unwrap();
    assert_eq!(
        turn[0],
        json!({"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"location": "Paris"}})
    );
    assert_eq!(turn[1]["id"], "toolu_2");
    let results = body["messages"][2]["content"].as_array().unwrap();
    for (block, id) in results.iter().zip(["toolu_1", "toolu_2"]) {
        assert_eq!(block["type"], "tool_result");
        assert_eq!(block["tool_use_id"], id);
        assert_eq!(
            serde_json::from_str::<Value>(block["content"].as_str().unwrap()).unwrap(),
            default_weather_result()
        );
    }
}

#[tokio::test]
async fn text_and_calls_of_one_turn_go_back_as_one_assistant_message() {
    let app = anthropic_app(|_| {}).await;
    let call = weather_call("toolu_w", "Paris");
    app.fake.push(Reply::Sse(messages::tool_calls(
        &["Checking."],
        &[(&call.0, &call.1, &call.2)],
    )));
    app.fake.push(Reply::Sse(messages::text_reply(&["Sunny."])));
    let events = app.run_events("/", &input(vec![user("Paris?")])).await;
    assert_well_formed(&events);
    assert_eq!(the_text(&events), "Checking.|Sunny.");
    let turn = &app.upstream_bodies()[1]["messages"][1];
    assert_eq!(
        turn["content"][0],
        json!({"type": "text", "text": "Checking."})
    );
    assert_eq!(turn["content"][1]["type"], "tool_use");
}

#[tokio::test]
async fn a_client_tool_call_ends_the_run_and_its_result_goes_back_on_the_next() {
    let app = providers::client_tool_over_two_runs(&ANTHROPIC, "toolu_c").await;
    let body = &app.upstream_bodies()[1];
    assert_eq!(roles(body), ["user", "assistant", "user"], "{body}");
    assert_eq!(
        body["messages"][1]["content"][0],
        json!({"type": "tool_use", "id": "toolu_c", "name": "change_background", "input": {"background": "navy"}})
    );
    assert_eq!(
        body["messages"][2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_c", "content": "changed"})
    );
}

#[tokio::test]
async fn predictive_state_streams_the_same_deltas_as_over_chat_completions() {
    providers::predictive_state_matches_chat(&ANTHROPIC).await;
}

#[tokio::test]
async fn thinking_streams_as_reasoning_and_its_signature_goes_back_within_and_across_runs() {
    let app = anthropic_app(|p| p.thinking_budget_tokens = Some(2048)).await;
    let call = weather_call("toolu_w", "Oslo");
    app.fake.push(Reply::Sse(messages::thinking_then(
        "The user wants the weather.",
        "sig-abc",
        &[],
        &[(&call.0, &call.1, &call.2)],
    )));
    app.fake
        .push(Reply::Sse(messages::text_reply(&["Cold in Oslo."])));

    let question = user("Weather in Oslo?");
    let events = app.run_events("/", &input(vec![question.clone()])).await;

    assert_well_formed(&events);
    let kept = providers::sealed_reasoning(&events);
    assert_eq!(kept["content"], "The user wants the weather.");
    assert_eq!(kept["encryptedValue"], "sig-abc");

    // Within the run: the tool loop's second call carries the signed thinking first.
    let bodies = app.upstream_bodies();
    assert_eq!(
        bodies[0]["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert!(bodies[0].get("temperature").is_none());
    let thinking = json!({"type": "thinking", "thinking": "The user wants the weather.", "signature": "sig-abc"});
    let turn = &bodies[1]["messages"][1]["content"];
    assert_eq!(turn[0], thinking);
    assert_eq!(turn[1]["type"], "tool_use");

    // Across runs: the client sends the reasoning message back with its encrypted value.
    app.fake
        .push(Reply::Sse(messages::text_reply(&["Still cold."])));
    let events = app
        .run_events("/", &next_run_with_reasoning(question, &events))
        .await;

    assert_well_formed(&events);
    let body = &app.upstream_bodies()[2];
    assert_eq!(body["messages"][1]["role"], "assistant", "{body}");
    assert_eq!(body["messages"][1]["content"][0], thinking, "{body}");
}

#[tokio::test]
async fn thinking_reaches_a_0x_client_in_shapes_it_accepts() {
    let app = anthropic_app(|p| p.thinking_budget_tokens = Some(1024)).await;
    app.fake.push(Reply::Sse(messages::thinking_then(
        "Hmm.",
        "sig",
        &["Hi!"],
        &[],
    )));
    let events = app.run_events("/", &input_0x(vec![user("hi")])).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    assert_eq!(the_text(&events), "Hi!");
}

#[tokio::test]
async fn an_approval_holds_the_call_and_the_next_run_carries_it_out() {
    let app = providers::approval_over_two_runs(&ANTHROPIC, "toolu_t").await;
    let body = &app.upstream_bodies()[1];
    assert_eq!(roles(body), ["user", "assistant", "user"], "{body}");
    let sent = blocks(body);
    assert_eq!(sent[1]["id"], "toolu_t", "{body}");
    assert_eq!(sent[2]["type"], "tool_result");
    assert_eq!(sent[2]["tool_use_id"], "toolu_t");
}

#[tokio::test]
async fn overloaded_and_rate_limited_answers_are_retried_then_coded() {
    let overloaded =
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    let limited = r#"{"type":"error","error":{"type":"rate_limit_error","message":"Slow down"}}"#;
    let app = anthropic_app(|p| p.max_retries = Some(2)).await;
    app.fake.push(Reply::Status(529, overloaded.into()));
    app.fake
        .push(Reply::StatusRetryAfter(429, limited.into(), 0));
    app.fake
        .push(Reply::Sse(messages::text_reply(&["Made it."])));
    let events = app.run_events("/", &input(vec![user("hi")])).await;
    assert_well_formed(&events);
    assert_eq!(the_text(&events), "Made it.");
    assert_eq!(app.fake.requests().len(), 3, "two retries");

    let app = anthropic_app(|_| {}).await;
    app.fake.push(Reply::Status(529, overloaded.into()));
    let events = app.run_events("/", &input(vec![user("hi")])).await;
    assert_run_error(&events, "upstream_http_529");
    assert!(
        last(&events)["message"]
            .as_str()
            .is_some_and(|m| m.contains("Overloaded")),
        "{events:?}"
    );

    let app = anthropic_app(|_| {}).await;
    app.fake
        .push(Reply::StatusRetryAfter(429, limited.into(), 0));
    let events = app.run_events("/", &input(vec![user("hi")])).await;
    assert_run_error(&events, "upstream_http_429");
}

#[tokio::test]
async fn each_fault_class_ends_the_run_with_its_code() {
    let auth =
        r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
    let mut mid_stream = vec![messages::message_start(3, 0), messages::ping()];
    mid_stream.extend(messages::text_block(0, &["Par"]));
    mid_stream.push(messages::error("overloaded_error", "Overloaded"));
    let mut cut = vec![messages::message_start(3, 0)];
    cut.extend(messages::text_block(0, &["Par"]));
    for (reply, code) in [
        (Reply::Status(401, auth.into()), "upstream_auth"),
        (Reply::Status(400, r#"{"type":"error","error":{"type":"invalid_request_error","message":"messages: roles must alternate"}}"#.into()), "upstream_http_400"),
        (Reply::Sse(mid_stream), "upstream_error"),
        (Reply::Cut(cut.clone()), "upstream_stream_cut"),
        (Reply::Sse(cut), "upstream_stream_cut"),
        (Reply::Sse(vec!["event: content_block_delta\ndata: {not json".into()]), "upstream_malformed"),
    ] {
        let app = anthropic_app(|_| {}).await;
        app.fake.push(reply);
        let events = app.run_events("/", &input(vec![user("hi")])).await;
        assert_run_error(&events, code);
    }
}

#[tokio::test]
async fn two_agents_on_two_profiles_share_one_server() {
    let app = spawn_app(|settings| {
        settings
            .models
            .insert(ANTHROPIC.profile_name.into(), anthropic_profile(settings));
        let mut claude = settings.agents["assistant"].clone();
        claude.profile = Some(ANTHROPIC.profile_name.into());
        claude.description = Some("The same assistant, on Claude.".into());
        settings.agents.insert("claude".into(), claude);
    })
    .await;
    app.fake.push(Reply::Sse(chunks::with_usage(
        chunks::text_reply(&["From GPT."]),
        3,
        2,
    )));
    app.fake
        .push(Reply::Sse(messages::text_reply(&["From Claude."])));

    let gpt = app.run_events("/assistant", &input(vec![user("hi")])).await;
    let claude = app.run_events("/claude", &input(vec![user("hi")])).await;

    assert_eq!(the_text(&gpt), "From GPT.");
    assert_eq!(the_text(&claude), "From Claude.");
    let paths: Vec<String> = app.fake.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/v1/chat/completions", "/v1/messages"]);
    assert_eq!(last(&gpt)["usage"][0]["provider"], "openai");
    assert_eq!(last(&claude)["usage"][0]["provider"], "anthropic");

    let listing = app.get("/agents").await.json::<Value>().await.unwrap();
    let entry = |name: &str| {
        listing["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name)
            .cloned()
            .unwrap()
    };
    let (assistant, claude) = (entry("assistant"), entry("claude"));
    assert_eq!(assistant["profile"], "default");
    assert_eq!(assistant["provider"], "openai");
    assert_eq!(assistant["model"], chunks::MODEL);
    assert_eq!(claude["profile"], ANTHROPIC.profile_name);
    assert_eq!(claude["provider"], "anthropic");
    assert_eq!(claude["model"], messages::MODEL);
    assert!(!listing.to_string().contains(API_KEY), "{listing}");
    assert!(
        !listing.to_string().contains("127.0.0.1"),
        "no URL: {listing}"
    );
}
