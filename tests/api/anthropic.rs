//! Agents on an Anthropic Messages profile, against the fake Messages upstream: text, server
//! and client tools, parallel calls, predictive state from `input_json_delta` fragments,
//! extended thinking and its signature round trip, approvals over the runs that follow, and
//! each upstream fault class.

use agui_host::settings::{LlmProvider, ModelProfile, PredictStateRule, Settings};
use serde_json::{json, Value};

use crate::approvals::{
    client_history, interrupt_id, resolved, resume_input, the_text, transfer_tool, with_tools,
    ToolService, TRANSFER_ARGS,
};
use crate::fake_llm::{chunks, Reply};
use crate::fake_messages as messages;
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

/// The profile the tests' Anthropic agents use.
pub(crate) const PROFILE: &str = "claude";

/// An Anthropic profile on the fake upstream (the same address as `[llm]`'s), retries off.
pub(crate) fn anthropic_profile(settings: &Settings) -> ModelProfile {
    ModelProfile {
        provider: Some(LlmProvider::Anthropic),
        base_url: settings.llm.base_url.clone(),
        api_key: API_KEY.into(),
        model: messages::MODEL.into(),
        max_retries: Some(0),
        ..ModelProfile::default()
    }
}

/// Adds `profile` as `name` and puts the default agent on it.
pub(crate) fn use_profile(settings: &mut Settings, name: &str, profile: ModelProfile) {
    settings.models.insert(name.into(), profile);
    let agent = settings.default_agent.clone();
    settings.agents.get_mut(&agent).unwrap().profile = Some(name.into());
}

/// Puts the default agent on the Anthropic profile, changed by `profile`.
fn on_anthropic(settings: &mut Settings, profile: impl FnOnce(&mut ModelProfile)) {
    let mut claude = anthropic_profile(settings);
    profile(&mut claude);
    use_profile(settings, PROFILE, claude);
}

async fn anthropic_app(profile: impl FnOnce(&mut ModelProfile)) -> TestApp {
    spawn_app(|settings| on_anthropic(settings, profile)).await
}

pub(crate) fn weather_call(id: &str, city: &str) -> (String, String, String) {
    (
        id.to_owned(),
        "get_weather".to_owned(),
        format!(r#"{{"location":"{city}"}}"#),
    )
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
    let app = anthropic_app(|_| {}).await;
    let (paris, rome) = (
        weather_call("toolu_1", "Paris"),
        weather_call("toolu_2", "Rome"),
    );
    let calls = [
        (paris.0.as_str(), paris.1.as_str(), paris.2.as_str()),
        (rome.0.as_str(), rome.1.as_str(), rome.2.as_str()),
    ];
    app.fake
        .push(Reply::Sse(messages::tool_calls(&["Checking."], &calls)));
    app.fake
        .push(Reply::Sse(messages::text_reply(&["Sunny in both."])));

    let events = app
        .run_events("/", &input(vec![user("Weather in Paris and Rome?")]))
        .await;

    assert_well_formed(&events);
    let args = tool_args(&events);
    assert_eq!(args["toolu_1"], paris.2);
    assert_eq!(args["toolu_2"], rome.2);
    assert_eq!(of_type(&events, "TOOL_CALL_RESULT").len(), 2);
    assert_eq!(the_text(&events), "Checking.|Sunny in both.");

    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2);
    let history = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(
        history
            .iter()
            .map(|m| m["role"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["user", "assistant", "user"],
        "roles alternate: {}",
        bodies[1]
    );
    let turn = history[1]["content"].as_array().unwrap();
    assert_eq!(turn[0], json!({"type": "text", "text": "Checking."}));
    assert_eq!(
        turn[1],
        json!({"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"location": "Paris"}})
    );
    assert_eq!(turn[2]["id"], "toolu_2");
    let results = history[2]["content"].as_array().unwrap();
    let expected = default_weather_result().to_string();
    for (block, id) in results.iter().zip(["toolu_1", "toolu_2"]) {
        assert_eq!(block["type"], "tool_result");
        assert_eq!(block["tool_use_id"], id);
        assert_eq!(
            serde_json::from_str::<Value>(block["content"].as_str().unwrap()).unwrap(),
            serde_json::from_str::<Value>(&expected).unwrap()
        );
    }
}

#[tokio::test]
async fn a_client_tool_call_ends_the_run_and_its_result_goes_back_on_the_next() {
    let app = anthropic_app(|_| {}).await;
    let arguments = r#"{"background":"navy"}"#;
    app.fake.push(Reply::Sse(messages::tool_calls(
        &[],
        &[("toolu_c", "change_background", arguments)],
    )));
    let mut body = input(vec![user("Make it navy.")]);
    body["tools"] = json!([client_tool("change_background")]);

    let events = app.run_events("/", &body).await;

    assert_well_formed(&events);
    assert_eq!(tool_args(&events)["toolu_c"], arguments);
    assert!(of_type(&events, "TOOL_CALL_RESULT").is_empty());
    assert_eq!(app.upstream_bodies().len(), 1, "the client runs its tool");

    // The next run: the client's history with its result.
    app.fake.push(Reply::Sse(messages::text_reply(&["Done."])));
    let mut history = client_history(&[user("Make it navy.")], &events);
    history.push(tool_result("toolu_c", "changed"));
    let mut next = input(history);
    next["runId"] = json!("r2");
    next["tools"] = json!([client_tool("change_background")]);
    let events = app.run_events("/", &next).await;

    assert_well_formed(&events);
    assert_eq!(the_text(&events), "Done.");
    let upstream = &app.upstream_bodies()[1]["messages"];
    let roles: Vec<&str> = upstream
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"], "{upstream}");
    assert_eq!(
        upstream[1]["content"][0],
        json!({"type": "tool_use", "id": "toolu_c", "name": "change_background", "input": {"background": "navy"}})
    );
    assert_eq!(
        upstream[2]["content"][0],
        json!({"type": "tool_result", "tool_use_id": "toolu_c", "content": "changed"})
    );
}

/// The recipe the predictive-state tests write, and its rule.
pub(crate) const RECIPE: &str = r#"{"recipe": {"title": "Lettuce wraps", "ingredients": [{"name": "chicken", "amount": "2"}, {"name": "lettuce", "amount": "8 leaves"}], "steps": ["Slice.", "Sear.", "Wrap."]}}"#;

pub(crate) fn predict_recipe(settings: &mut Settings) {
    let agent = settings.agents.get_mut("assistant").unwrap();
    agent.predict_state.insert(
        "recipe".into(),
        PredictStateRule {
            tool: "update_recipe".into(),
            tool_argument: "recipe".into(),
        },
    );
    agent
        .tools
        .push(static_tool("update_recipe", json!({"status": "saved"})));
}

pub(crate) fn state_events(events: &[Value]) -> Vec<Value> {
    events
        .iter()
        .filter(|e| matches!(e["type"].as_str(), Some("STATE_DELTA" | "STATE_SNAPSHOT")))
        .map(|e| {
            let mut e = e.clone();
            e.as_object_mut().unwrap().remove("timestamp");
            e
        })
        .collect()
}

#[tokio::test]
async fn predictive_state_streams_the_same_deltas_as_over_chat_completions() {
    let call = ("toolu_r", "update_recipe", RECIPE);
    let chat = spawn_app(predict_recipe).await;
    chat.fake.push_call_then_text(call, "Saved.");
    let over_chat = chat.run_events("/", &input(vec![user("A recipe")])).await;

    let claude = spawn_app(|s| {
        predict_recipe(s);
        on_anthropic(s, |_| {});
    })
    .await;
    claude
        .fake
        .push(Reply::Sse(messages::tool_calls(&[], &[call])));
    claude
        .fake
        .push(Reply::Sse(messages::text_reply(&["Saved."])));
    let over_messages = claude.run_events("/", &input(vec![user("A recipe")])).await;

    assert_well_formed(&over_messages);
    let deltas = state_events(&over_messages);
    assert!(
        deltas.iter().filter(|e| e["type"] == "STATE_DELTA").count() > 3,
        "the state streams while the arguments do: {deltas:?}"
    );
    assert_eq!(deltas, state_events(&over_chat));
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
    let reasoning_id = the(&events, "REASONING_MESSAGE_START")["messageId"]
        .as_str()
        .unwrap()
        .to_owned();
    let reasoning: String = of_type(&events, "REASONING_MESSAGE_CONTENT")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(reasoning, "The user wants the weather.");
    let sealed = the(&events, "REASONING_ENCRYPTED_VALUE");
    assert_eq!(sealed["subtype"], "message");
    assert_eq!(sealed["entityId"], reasoning_id.as_str());
    assert_eq!(sealed["encryptedValue"], "sig-abc");

    // Within the run: the tool loop's second call carries the signed thinking first.
    let bodies = app.upstream_bodies();
    assert_eq!(
        bodies[0]["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert!(bodies[0].get("temperature").is_none());
    let turn = &bodies[1]["messages"][1]["content"];
    assert_eq!(
        turn[0],
        json!({"type": "thinking", "thinking": "The user wants the weather.", "signature": "sig-abc"})
    );
    assert_eq!(turn[1]["type"], "tool_use");

    // Across runs: the client sends the reasoning message back with its encrypted value.
    app.fake
        .push(Reply::Sse(messages::text_reply(&["Still cold."])));
    let mut history = vec![
        question,
        json!({"id": reasoning_id, "role": "reasoning", "content": reasoning, "encryptedValue": "sig-abc"}),
    ];
    history.extend(client_history(&[], &events));
    history.push(user("And tomorrow?"));
    let mut next = input(history);
    next["runId"] = json!("r2");
    let events = app.run_events("/", &next).await;

    assert_well_formed(&events);
    let body = &app.upstream_bodies()[2];
    let turn = &body["messages"][1];
    assert_eq!(turn["role"], "assistant", "{body}");
    assert_eq!(turn["content"][0]["type"], "thinking", "{body}");
    assert_eq!(turn["content"][0]["signature"], "sig-abc");
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
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| {
        with_tools(settings, tools);
        on_anthropic(settings, |_| {});
    })
    .await;
    app.fake.push(Reply::Sse(messages::tool_calls(
        &[],
        &[("toolu_t", "transfer_money", TRANSFER_ARGS)],
    )));
    let question = user("Send 250 to Bob.");
    let events = app.run_events("/", &input(vec![question.clone()])).await;
    assert_well_formed(&events);
    assert_eq!(service.calls_of("transfer_money").len(), 0);
    let id = interrupt_id(&events, "toolu_t");

    app.fake.push(Reply::Sse(messages::text_reply(&["Sent."])));
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
    let upstream = &app.upstream_bodies()[1]["messages"];
    assert_eq!(upstream[1]["content"][0]["id"], "toolu_t", "{upstream}");
    assert_eq!(upstream[2]["content"][0]["type"], "tool_result");
    assert_eq!(upstream[2]["content"][0]["tool_use_id"], "toolu_t");
    assert_eq!(upstream.as_array().unwrap().len(), 3, "{upstream}");
}

/// The run's terminal event, checked to be a `RUN_ERROR` with `code`.
#[track_caller]
pub(crate) fn assert_run_error(events: &[Value], code: &str) {
    assert_well_formed(events);
    let error = last(events);
    assert_eq!(error["type"], "RUN_ERROR", "{:?}", types(events));
    assert_eq!(error["code"], code, "{error}");
    assert!(!error.to_string().contains(API_KEY), "{error}");
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
            .insert(PROFILE.into(), anthropic_profile(settings));
        let mut claude = settings.agents["assistant"].clone();
        claude.profile = Some(PROFILE.into());
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
    assert_eq!(claude["profile"], PROFILE);
    assert_eq!(claude["provider"], "anthropic");
    assert_eq!(claude["model"], messages::MODEL);
    assert!(!listing.to_string().contains(API_KEY), "{listing}");
    assert!(
        !listing.to_string().contains("127.0.0.1"),
        "no URL: {listing}"
    );
}
