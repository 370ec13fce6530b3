//! What the app sends to the model: the OpenAI chat-completions request it builds from the run.

use agui_host::settings::LlmProvider;
use serde_json::json;

use crate::fake_llm::{chunks, RecordedRequest, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

const INSTRUCTIONS: &str = "You are a helpful assistant. Answer concisely.";

/// Runs `body` on `path` against a plain text reply; returns the one upstream request.
async fn one_request(app: &TestApp, path: &str, body: &serde_json::Value) -> RecordedRequest {
    app.fake.push(Reply::Sse(chunks::text_reply(&["OK"])));
    let events = app.run_events(path, body).await;
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    let mut requests = app.fake.requests();
    assert_eq!(requests.len(), 1);
    requests.remove(0)
}

#[tokio::test]
async fn the_upstream_request_carries_model_stream_prompt_history_and_server_tools() {
    let app = spawn_app(|_| {}).await;
    let body = input(vec![
        user("hi"),
        assistant("Hello! How can I help?"),
        user("What's the weather?"),
    ]);

    let request = one_request(&app, "/", &body).await;

    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {API_KEY}").as_str())
    );
    let sent = &request.body;
    assert_eq!(sent["model"], "gpt-4o-mini");
    assert_eq!(sent["stream"], true);
    assert_eq!(roles(sent), ["system", "user", "assistant", "user"]);
    assert!(content_text(&sent["messages"][0]).contains(INSTRUCTIONS));
    let history: Vec<String> = sent["messages"].as_array().unwrap()[1..]
        .iter()
        .map(content_text)
        .collect();
    assert_eq!(
        history,
        ["hi", "Hello! How can I help?", "What's the weather?"]
    );
    assert_eq!(
        sent["tools"],
        json!([{
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the current weather for a location.",
                "parameters": {
                    "type": "object",
                    "properties": {"location": {"type": "string", "description": "City name"}},
                    "required": ["location"],
                },
            },
        }])
    );
}

#[tokio::test]
async fn an_agent_without_tools_sends_no_tools_key() {
    // Several OpenAI-compatible servers reject `"tools": []`.
    let app = spawn_app(|settings| {
        settings.agents.get_mut("assistant").unwrap().tools.clear();
    })
    .await;

    let request = one_request(&app, "/", &input(vec![user("hi")])).await;

    assert!(request.body.get("tools").is_none(), "{}", request.body);
}

#[tokio::test]
async fn context_entries_are_added_to_the_system_prompt() {
    let app = spawn_app(|_| {}).await;
    let mut body = input(vec![user("Who am I?")]);
    body["context"] = json!([
        {"description": "Name of the user", "value": "Bob"},
        {"description": "Time zone of the user", "value": "Europe/Paris"},
    ]);

    let request = one_request(&app, "/", &body).await;

    let system = &request.body["messages"][0];
    assert_eq!(system["role"], "system");
    let prompt = content_text(system);
    for expected in [
        INSTRUCTIONS,
        "Name of the user",
        "Bob",
        "Time zone of the user",
        "Europe/Paris",
    ] {
        assert!(
            prompt.contains(expected),
            "{expected:?} missing from {prompt:?}"
        );
    }
}

#[tokio::test]
async fn a_named_agent_route_runs_that_agent_with_its_prompt_and_model() {
    let app = spawn_app(|settings| {
        let mut poet = settings.agents["assistant"].clone();
        poet.instructions = "You answer in haiku.".into();
        poet.model = Some("poet-model".into());
        poet.tools.clear();
        settings.agents.insert("poet".into(), poet);
    })
    .await;

    let request = one_request(&app, "/poet", &input(vec![user("Spring?")])).await;

    assert_eq!(request.body["model"], "poet-model");
    let prompt = content_text(&request.body["messages"][0]);
    assert!(prompt.contains("You answer in haiku."), "{prompt:?}");
    assert!(!prompt.contains(INSTRUCTIONS), "{prompt:?}");
    assert!(request.body.get("tools").is_none(), "{}", request.body);
}

#[tokio::test]
async fn azure_requests_go_to_the_deployment_with_the_api_key_header() {
    let app = spawn_app(|settings| {
        settings.llm.provider = LlmProvider::Azure;
        // The resource endpoint: the fake's origin, without the `/v1` of OpenAI's base URL.
        settings.llm.base_url = settings.llm.base_url.trim_end_matches("/v1").to_string();
        settings.llm.azure_deployment = "my-deployment".into();
    })
    .await;

    let request = one_request(&app, "/", &input(vec![user("hi")])).await;

    assert_eq!(
        request.path,
        "/openai/deployments/my-deployment/chat/completions"
    );
    let query = request.query.clone().unwrap_or_default();
    assert!(query.contains("api-version=2024-10-21"), "{query:?}");
    assert_eq!(request.header("api-key"), Some(API_KEY));
}

#[tokio::test]
async fn configured_extra_headers_are_sent_upstream() {
    let app = spawn_app(|settings| {
        settings
            .llm
            .extra_headers
            .insert("x-gateway-tenant".into(), "acme".into());
    })
    .await;

    let request = one_request(&app, "/", &input(vec![user("hi")])).await;

    assert_eq!(request.header("x-gateway-tenant"), Some("acme"));
}
