//! Agents on an OpenAI Responses profile, against the fake Responses upstream: text, server and
//! client tools, parallel calls, predictive state from argument fragments, reasoning summaries
//! and the encrypted reasoning round trip, an approval over the runs that follow, and each
//! upstream fault class.

use agui_host::settings::{LlmProvider, ModelProfile, Settings};
use serde_json::{json, Value};

use crate::anthropic::{
    assert_run_error, predict_recipe, state_events, use_profile, weather_call, RECIPE,
};
use crate::approvals::{
    client_history, interrupt_id, resolved, resume_input, the_text, transfer_tool, with_tools,
    ToolService, TRANSFER_ARGS,
};
use crate::fake_llm::Reply;
use crate::fake_responses::{self as responses, Script};
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

const PROFILE: &str = "reasoner";

/// A Responses profile on the fake upstream, retries off.
fn responses_profile(settings: &Settings) -> ModelProfile {
    ModelProfile {
        provider: Some(LlmProvider::OpenaiResponses),
        base_url: settings.llm.base_url.clone(),
        api_key: API_KEY.into(),
        model: responses::MODEL.into(),
        max_retries: Some(0),
        ..ModelProfile::default()
    }
}

fn on_responses(settings: &mut Settings, profile: impl FnOnce(&mut ModelProfile)) {
    let mut reasoner = responses_profile(settings);
    profile(&mut reasoner);
    use_profile(settings, PROFILE, reasoner);
}

async fn responses_app(profile: impl FnOnce(&mut ModelProfile)) -> TestApp {
    spawn_app(|settings| on_responses(settings, profile)).await
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
    let app = responses_app(|_| {}).await;
    let (paris, rome) = (
        weather_call("call_1", "Paris"),
        weather_call("call_2", "Rome"),
    );
    app.fake.push(Reply::Sse(responses::tool_calls(&[
        (&paris.0, &paris.1, &paris.2),
        (&rome.0, &rome.1, &rome.2),
    ])));
    app.fake
        .push(Reply::Sse(responses::text_reply(&["Sunny in both."])));

    let events = app
        .run_events("/", &input(vec![user("Paris and Rome?")]))
        .await;

    assert_well_formed(&events);
    let args = tool_args(&events);
    assert_eq!(args["call_1"], paris.2);
    assert_eq!(args["call_2"], rome.2);
    assert_eq!(of_type(&events, "TOOL_CALL_RESULT").len(), 2);
    assert_eq!(the_text(&events), "Sunny in both.");
    let input = app.upstream_bodies()[1]["input"]
        .as_array()
        .unwrap()
        .clone();
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
    assert_eq!(input[2]["arguments"], paris.2.as_str());
    assert_eq!(input[4]["call_id"], "call_1");
    assert_eq!(
        serde_json::from_str::<Value>(input[4]["output"].as_str().unwrap()).unwrap(),
        default_weather_result()
    );
}

#[tokio::test]
async fn a_client_tool_call_ends_the_run_and_its_output_goes_back_on_the_next() {
    let app = responses_app(|_| {}).await;
    let arguments = r#"{"background":"navy"}"#;
    app.fake.push(Reply::Sse(responses::tool_calls(&[(
        "call_c",
        "change_background",
        arguments,
    )])));
    let mut body = input(vec![user("Navy, please.")]);
    body["tools"] = json!([client_tool("change_background")]);
    let events = app.run_events("/", &body).await;
    assert_well_formed(&events);
    assert_eq!(tool_args(&events)["call_c"], arguments);
    assert_eq!(app.upstream_bodies().len(), 1);

    app.fake.push(Reply::Sse(responses::text_reply(&["Done."])));
    let mut history = client_history(&[user("Navy, please.")], &events);
    history.push(tool_result("call_c", "changed"));
    let mut next = input(history);
    next["runId"] = json!("r2");
    next["tools"] = json!([client_tool("change_background")]);
    let events = app.run_events("/", &next).await;

    assert_well_formed(&events);
    assert_eq!(the_text(&events), "Done.");
    let input = &app.upstream_bodies()[1]["input"];
    let items = input.as_array().unwrap();
    let call = items
        .iter()
        .position(|i| i["type"] == "function_call")
        .unwrap();
    assert_eq!(items[call]["call_id"], "call_c");
    assert_eq!(
        items[call + 1],
        json!({"type": "function_call_output", "call_id": "call_c", "output": "changed"})
    );
}

#[tokio::test]
async fn predictive_state_streams_the_same_deltas_as_over_chat_completions() {
    let call = ("call_r", "update_recipe", RECIPE);
    let chat = spawn_app(predict_recipe).await;
    chat.fake.push_call_then_text(call, "Saved.");
    let over_chat = chat.run_events("/", &input(vec![user("A recipe")])).await;

    let app = spawn_app(|s| {
        predict_recipe(s);
        on_responses(s, |_| {});
    })
    .await;
    app.fake.push(Reply::Sse(responses::tool_calls(&[call])));
    app.fake
        .push(Reply::Sse(responses::text_reply(&["Saved."])));
    let over_responses = app.run_events("/", &input(vec![user("A recipe")])).await;

    assert_well_formed(&over_responses);
    let deltas = state_events(&over_responses);
    assert!(deltas.len() > 3, "{deltas:?}");
    assert_eq!(deltas, state_events(&over_chat));
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
    let reasoning: String = of_type(&events, "REASONING_MESSAGE_CONTENT")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(reasoning, "Checking the weather.\n\nThen answering.");
    let reasoning_id = the(&events, "REASONING_MESSAGE_START")["messageId"]
        .as_str()
        .unwrap()
        .to_owned();
    let sealed = the(&events, "REASONING_ENCRYPTED_VALUE");
    assert_eq!(sealed["entityId"], reasoning_id.as_str());
    let encrypted = sealed["encryptedValue"].as_str().unwrap().to_owned();

    let bodies = app.upstream_bodies();
    assert_eq!(
        bodies[0]["reasoning"],
        json!({"effort": "low", "summary": "auto"})
    );
    assert_eq!(bodies[0]["include"], json!(["reasoning.encrypted_content"]));
    let sent_back = |body: &Value| {
        body["input"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "reasoning")
            .cloned()
            .unwrap_or_else(|| panic!("no reasoning item in {body}"))
    };
    let item = sent_back(&bodies[1]);
    assert_eq!(item["id"], "rs_1");
    assert_eq!(item["encrypted_content"], "gAAAenc");

    // The next run: the client's reasoning message, with its encrypted value.
    app.fake
        .push(Reply::Sse(responses::text_reply(&["Still cold."])));
    let mut history = vec![
        question,
        json!({"id": reasoning_id, "role": "reasoning", "content": reasoning, "encryptedValue": encrypted}),
    ];
    history.extend(client_history(&[], &events));
    history.push(user("And tomorrow?"));
    let mut next = input(history);
    next["runId"] = json!("r2");
    let events = app.run_events("/", &next).await;

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
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| {
        with_tools(settings, tools);
        on_responses(settings, |_| {});
    })
    .await;
    app.fake.push(Reply::Sse(responses::tool_calls(&[(
        "call_t",
        "transfer_money",
        TRANSFER_ARGS,
    )])));
    let question = user("Send 250 to Bob.");
    let events = app.run_events("/", &input(vec![question.clone()])).await;
    assert_well_formed(&events);
    assert!(service.calls_of("transfer_money").is_empty());
    let id = interrupt_id(&events, "call_t");

    app.fake.push(Reply::Sse(responses::text_reply(&["Sent."])));
    let history = client_history(&[question], &events);
    let events = app
        .run_events(
            "/",
            &resume_input(history, json!([resolved(&id, json!({"approved": true}))])),
        )
        .await;

    assert_well_formed(&events);
    assert_eq!(the_text(&events), "Sent.");
    assert_eq!(
        service.calls_of("transfer_money"),
        [serde_json::from_str::<Value>(TRANSFER_ARGS).unwrap()]
    );
    let input = app.upstream_bodies()[1]["input"]
        .as_array()
        .unwrap()
        .clone();
    let call = input
        .iter()
        .position(|i| i["type"] == "function_call")
        .unwrap();
    assert_eq!(input[call]["call_id"], "call_t");
    assert_eq!(input[call + 1]["type"], "function_call_output");
    assert_eq!(input.len(), call + 2);
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
