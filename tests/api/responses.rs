//! Agents on an OpenAI Responses profile, against the fake Responses upstream: text, server and
//! client tools, parallel calls, predictive state from argument fragments, reasoning summaries
//! and the encrypted reasoning round trip, an approval over the runs that follow, and each
//! upstream fault class.

use agui_host::settings::{LlmProvider, ModelProfile, Settings};
use serde_json::{json, Value};

use crate::approvals::the_text;
use crate::fake_llm::Reply;
use crate::fake_responses::{self as responses, Script};
use crate::helpers::*;
use crate::providers::{self, assert_run_error, next_run_with_reasoning, weather_call, Provider};
use crate::verify::{assert_0x_compatible, assert_well_formed};

fn responses_profile(settings: &Settings) -> ModelProfile {
    providers::profile_on_fake(settings, LlmProvider::OpenaiResponses, responses::MODEL)
}

const RESPONSES: Provider = Provider {
    profile_name: "reasoner",
    profile: responses_profile,
    text_reply: responses::text_reply,
    tool_calls: responses::tool_calls,
};

async fn responses_app(profile: impl FnOnce(&mut ModelProfile)) -> TestApp {
    RESPONSES.app(profile).await
}

/// The input items of an upstream request.
fn items(body: &Value) -> Vec<Value> {
    body["input"].as_array().cloned().unwrap_or_default()
}

/// The item after the function call `call_id`, checked to be that call.
fn call_and_output(body: &Value, call_id: &str) -> (Value, Value) {
    let items = items(body);
    let at = items
        .iter()
        .position(|i| i["type"] == "function_call" && i["call_id"] == call_id)
        .unwrap_or_else(|| panic!("no function_call {call_id} in {body}"));
    (
        items[at].clone(),
        items.get(at + 1).cloned().unwrap_or_default(),
    )
}

#[tokio::test]
async fn a_text_reply_streams_from_a_stateless_responses_request() {
    let app = responses_app(|_| {}).await;
    app.fake
        .push(Reply::Sse(responses::text_reply(&["Hel", "lo."])));

    let events = app.run_events("/", &input(vec![user("hi")])).await;

    assert_well_formed(&events);
    assert_eq!(the_text(&events), "Hello.");
    let usage = &last(&events)["usage"][0];
    assert_eq!(usage["provider"], "openai");
    assert_eq!(usage["model"], responses::MODEL);
    assert_eq!(usage["inputTokens"], 12);
    assert_eq!(usage["outputTokens"], 5);
    let request = &app.fake.requests()[0];
    assert_eq!(request.path, "/v1/responses");
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {API_KEY}").as_str())
    );
    let body = &request.body;
    assert_eq!(body["store"], false, "the thread store is ours");
    assert_eq!(body["stream"], true);
    assert!(body.get("reasoning").is_none(), "none asked for: {body}");
    let input = body["input"].as_array().unwrap();
    assert_eq!(input[0]["role"], "system");
    assert_eq!(
        input.last().unwrap(),
        &json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]})
    );
    assert_eq!(body["tools"][0]["type"], "function");
}

#[tokio::test]
async fn parallel_server_tools_run_and_their_outputs_follow_the_calls() {
    let app = providers::parallel_server_tools(&RESPONSES, "call_").await;
    let input = items(&app.upstream_bodies()[1]);
    let kinds: Vec<&str> = input.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "message",
            "message",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output"
        ]
    );
    assert_eq!(input[2]["call_id"], "call_1");
    assert_eq!(
        input[2]["arguments"],
        weather_call("call_1", "Paris").2.as_str()
    );
    assert_eq!(input[4]["call_id"], "call_1");
    assert_eq!(
        serde_json::from_str::<Value>(input[4]["output"].as_str().unwrap()).unwrap(),
        default_weather_result()
    );
}

#[tokio::test]
async fn a_client_tool_call_ends_the_run_and_its_output_goes_back_on_the_next() {
    let app = providers::client_tool_over_two_runs(&RESPONSES, "call_c").await;
    let (call, output) = call_and_output(&app.upstream_bodies()[1], "call_c");
    assert_eq!(call["name"], "change_background");
    assert_eq!(
        output,
        json!({"type": "function_call_output", "call_id": "call_c", "output": "changed"})
    );
}

#[tokio::test]
async fn predictive_state_streams_the_same_deltas_as_over_chat_completions() {
    providers::predictive_state_matches_chat(&RESPONSES).await;
}

#[tokio::test]
async fn reasoning_summaries_stream_and_the_encrypted_item_goes_back_within_and_across_runs() {
    let app = responses_app(|p| {
        p.reasoning_effort = "low".into();
        p.reasoning_summary = "auto".into();
    })
    .await;
    let call = weather_call("call_w", "Oslo");
    app.fake.push(Reply::Sse(
        Script::new()
            .reasoning(
                "rs_1",
                &["Checking the weather.", "Then answering."],
                "gAAAenc",
            )
            .call((&call.0, &call.1, &call.2))
            .completed(20, 10),
    ));
    app.fake
        .push(Reply::Sse(responses::text_reply(&["Cold in Oslo."])));

    let question = user("Weather in Oslo?");
    let events = app.run_events("/", &input(vec![question.clone()])).await;

    assert_well_formed(&events);
    let kept = providers::sealed_reasoning(&events);
    assert_eq!(kept["content"], "Checking the weather.\n\nThen answering.");

    let bodies = app.upstream_bodies();
    assert_eq!(
        bodies[0]["reasoning"],
        json!({"effort": "low", "summary": "auto"})
    );
    assert_eq!(bodies[0]["include"], json!(["reasoning.encrypted_content"]));
    let sent_back = |body: &Value| {
        items(body)
            .into_iter()
            .find(|i| i["type"] == "reasoning")
            .unwrap_or_else(|| panic!("no reasoning item in {body}"))
    };
    let item = sent_back(&bodies[1]);
    assert_eq!(item["id"], "rs_1");
    assert_eq!(item["encrypted_content"], "gAAAenc");

    // The next run: the client's reasoning message, with its encrypted value.
    app.fake
        .push(Reply::Sse(responses::text_reply(&["Still cold."])));
    let events = app
        .run_events("/", &next_run_with_reasoning(question, &events))
        .await;

    assert_well_formed(&events);
    let item = sent_back(&app.upstream_bodies()[2]);
    assert_eq!(item["id"], "rs_1");
    assert_eq!(item["encrypted_content"], "gAAAenc");
}

#[tokio::test]
async fn reasoning_reaches_a_0x_client_in_shapes_it_accepts() {
    let app = responses_app(|p| p.reasoning_summary = "auto".into()).await;
    app.fake.push(Reply::Sse(
        Script::new()
            .reasoning("rs_1", &["Hmm."], "enc")
            .text(&["Hi!"])
            .completed(3, 3),
    ));
    let events = app.run_events("/", &input_0x(vec![user("hi")])).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    assert_eq!(the_text(&events), "Hi!");
}

#[tokio::test]
async fn an_approval_holds_the_call_and_the_next_run_carries_it_out() {
    let app = providers::approval_over_two_runs(&RESPONSES, "call_t").await;
    let body = &app.upstream_bodies()[1];
    let (_, output) = call_and_output(body, "call_t");
    assert_eq!(output["type"], "function_call_output");
    assert_eq!(items(body).last(), Some(&output), "{body}");
}

#[tokio::test]
async fn each_fault_class_ends_the_run_with_its_code() {
    let limited = r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#;
    let app = responses_app(|p| p.max_retries = Some(1)).await;
    app.fake
        .push(Reply::StatusRetryAfter(429, limited.into(), 0));
    app.fake
        .push(Reply::Sse(responses::text_reply(&["Made it."])));
    let events = app.run_events("/", &input(vec![user("hi")])).await;
    assert_eq!(the_text(&events), "Made it.", "a 429 is retried");

    for (reply, code) in [
        (
            Reply::Status(401, r#"{"error":{"message":"Incorrect API key"}}"#.into()),
            "upstream_auth",
        ),
        (
            Reply::StatusRetryAfter(429, limited.into(), 0),
            "upstream_http_429",
        ),
        (Reply::Status(503, "overloaded".into()), "upstream_http_503"),
        (
            Reply::Sse(
                Script::new()
                    .text(&["Par"])
                    .error("server_error", "Try again"),
            ),
            "upstream_error",
        ),
        (
            Reply::Sse(Script::new().failed("server_error", "The model failed")),
            "upstream_error",
        ),
        (
            Reply::Sse(Script::new().text(&["Par"]).unfinished()),
            "upstream_stream_cut",
        ),
        (
            Reply::Cut(Script::new().text(&["Par"]).unfinished()),
            "upstream_stream_cut",
        ),
        (
            Reply::Sse(vec!["event: response.output_text.delta\ndata: {oops".into()]),
            "upstream_malformed",
        ),
    ] {
        let app = responses_app(|_| {}).await;
        app.fake.push(reply);
        let events = app.run_events("/", &input(vec![user("hi")])).await;
        assert_run_error(&events, code);
    }
}
