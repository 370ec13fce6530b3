//! Discovery: `GET /agents` and `GET /<agent>/capabilities` (AG-UI `AgentCapabilities`), built
//! from the configuration, behind the same authentication as runs, and good for what a client
//! does next: run the agent at the route it was given.

use agui_host::settings::{AgentSettings, Settings};
use serde_json::Value;

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

const TOKEN: &str = "discovery-test-token";

/// An agent with every kind of declaration: approval tools (one editable), a state tool, a
/// state schema and a predictive state key.
const BANKING: &str = r#"
description = "Checks balances and moves money, with approval."
max_iterations = 5

[state.schema]
type = "object"
properties = { document = { type = "string" } }

[predict_state]
document = { tool = "write_document", tool_argument = "document" }

[[tools]]
name = "check_balance"
description = "Get the balance."
kind = "static"
result = { balance = 10 }

[[tools]]
name = "transfer_money"
description = "Send money."
kind = "static"
result = "sent"
approval = { when = { type = "object", properties = { amount = { type = "number", exclusiveMinimum = 100 } }, required = ["amount"] } }
allow_edit = true
parameters = { type = "object", properties = { amount = { type = "number" } }, required = ["amount"] }

[[tools]]
name = "write_document"
kind = "state"
key = "document"
argument = "document"
"#;

fn agent(toml: &str) -> AgentSettings {
    config::Config::builder()
        .add_source(config::File::from_str(toml, config::FileFormat::Toml))
        .build()
        .and_then(config::Config::try_deserialize)
        .expect("the agent's TOML")
}

fn with_banking(settings: &mut Settings) {
    settings.agents.insert("banking".into(), agent(BANKING));
}

async fn json(response: reqwest::Response) -> Value {
    assert_eq!(response.status(), 200);
    assert!(content_type(&response).starts_with("application/json"));
    response.json().await.expect("a JSON body")
}

/// No optional field is sent as `null`: the AG-UI schemas refuse it.
#[track_caller]
fn assert_no_null(value: &Value, at: &str) {
    match value {
        Value::Null => panic!("null at {at}"),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                assert_no_null(item, &format!("{at}/{i}"));
            }
        }
        Value::Object(map) => {
            for (key, item) in map {
                assert_no_null(item, &format!("{at}/{key}"));
            }
        }
        _ => {}
    }
}

#[tokio::test]
async fn agents_lists_every_agent_with_its_route_description_and_the_default() {
    let app = spawn_app(with_banking).await;

    let body = json(app.get("/agents").await).await;

    assert_eq!(body["defaultAgent"], "assistant");
    let agents = body["agents"].as_array().expect("an agent list");
    let names: Vec<&str> = agents.iter().filter_map(|a| a["name"].as_str()).collect();
    assert!(
        names.contains(&"assistant") && names.contains(&"banking"),
        "{names:?}"
    );
    assert!(
        names.contains(&"agentic_chat"),
        "the demo agents too: {names:?}"
    );
    let banking = agents.iter().find(|a| a["name"] == "banking").unwrap();
    assert_eq!(banking["route"], "/banking");
    assert_eq!(banking["capabilities"], "/banking/capabilities");
    assert_eq!(
        banking["description"],
        "Checks balances and moves money, with approval."
    );
    assert_eq!(banking["default"], false);
    let assistant = agents.iter().find(|a| a["name"] == "assistant").unwrap();
    assert_eq!(assistant["default"], true);
    assert_no_null(&body, "");
}

#[tokio::test]
async fn capabilities_declare_tools_state_approvals_and_resumable_sse() {
    let app = spawn_app(with_banking).await;

    let caps = json(app.get("/banking/capabilities").await).await;

    assert_no_null(&caps, "");
    assert_eq!(caps["identity"]["name"], "banking");
    assert_eq!(caps["identity"]["type"], "agui-host");
    assert_eq!(
        caps["identity"]["description"],
        "Checks balances and moves money, with approval."
    );
    assert_eq!(caps["transport"]["streaming"], true);
    assert_eq!(
        caps["transport"]["resumable"], true,
        "the default memory store logs runs"
    );
    let tools = caps["tools"]["items"].as_array().expect("tool items");
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    assert_eq!(names, ["check_balance", "transfer_money", "write_document"]);
    assert_eq!(tools[1]["parameters"]["required"][0], "amount");
    assert_eq!(
        tools[0]["parameters"]["type"], "object",
        "an open schema when none is set"
    );
    assert_eq!(caps["tools"]["clientProvided"], true);
    assert_eq!(caps["state"]["deltas"], true);
    assert_eq!(caps["state"]["snapshots"], true);
    assert_eq!(caps["humanInTheLoop"]["approvals"], true);
    assert_eq!(caps["humanInTheLoop"]["interrupts"], true);
    assert_eq!(caps["humanInTheLoop"]["approveWithEdits"], true);
    assert_eq!(caps["execution"]["maxIterations"], 5);
    assert_eq!(caps["multimodal"]["input"]["image"], true);
    assert_eq!(caps["reasoning"]["supported"], true);
    let ours = &caps["custom"]["agui-host"];
    assert_eq!(
        ours["stateSchema"]["properties"]["document"]["type"],
        "string"
    );
    assert_eq!(ours["predictState"]["document"]["tool"], "write_document");
    assert_eq!(ours["predictState"]["document"]["toolArgument"], "document");
    let approval_tools = ours["approvalTools"].as_array().expect("approval tools");
    assert_eq!(approval_tools.len(), 1);
    assert_eq!(approval_tools[0]["name"], "transfer_money");
    assert_eq!(approval_tools[0]["allowEdit"], true);
    assert_eq!(
        approval_tools[0]["approval"]["when"]["required"][0],
        "amount"
    );
}

#[tokio::test]
async fn a_plain_agent_declares_no_approvals_and_no_state_writes() {
    let app = spawn_app(|settings| {
        settings
            .agents
            .insert("plain".into(), agent("instructions = \"Hi.\""));
    })
    .await;

    let caps = json(app.get("/plain/capabilities").await).await;

    assert_eq!(caps["tools"]["items"], Value::Array(vec![]));
    assert_eq!(caps["humanInTheLoop"]["approvals"], false);
    assert_eq!(caps["state"]["deltas"], false);
    // Only what every agent says: what a disconnect does.
    let ours = caps["custom"]["agui-host"]
        .as_object()
        .expect("our section");
    assert_eq!(ours.keys().collect::<Vec<_>>(), ["onDisconnect"], "{caps}");
    assert!(caps["identity"].get("description").is_none());
}

#[tokio::test]
async fn capabilities_say_what_a_disconnect_does_and_how_a_request_asks_otherwise() {
    use agui_host::settings::{OnDisconnect, ThreadStoreKind};
    let by_default = spawn_app(|_| {}).await;
    let caps = json(by_default.get("/assistant/capabilities").await).await;
    assert_eq!(
        caps["custom"]["agui-host"]["onDisconnect"],
        serde_json::json!({
            "default": "cancel",
            "requestHeader": "X-AGUI-On-Disconnect: continue",
            "forwardedProp": "aguiHost.onDisconnect = \"continue\"",
        })
    );
    let continuing = spawn_app(|s| s.runs.on_disconnect = OnDisconnect::Continue).await;
    let caps = json(continuing.get("/assistant/capabilities").await).await;
    assert_eq!(
        caps["custom"]["agui-host"]["onDisconnect"],
        serde_json::json!({"default": "continue"})
    );
    // Without a store nothing could resume a run, whatever the setting says.
    let no_store = spawn_app(|s| {
        s.threads.store = ThreadStoreKind::Off;
        s.runs.on_disconnect = OnDisconnect::Continue;
    })
    .await;
    let caps = json(no_store.get("/assistant/capabilities").await).await;
    assert_eq!(
        caps["custom"]["agui-host"]["onDisconnect"],
        serde_json::json!({"default": "cancel"})
    );
}

#[tokio::test]
async fn an_unknown_agent_is_a_404_json() {
    let app = spawn_app(|_| {}).await;

    let response = app.get("/no_such_agent/capabilities").await;

    assert_eq!(response.status(), 404);
    let body = error_body(response).await;
    assert_eq!(body["error"]["code"], "unknown_agent");
}

#[tokio::test]
async fn discovery_needs_the_same_token_as_runs() {
    let app = spawn_app(|settings| settings.server.auth.tokens = vec![TOKEN.into()]).await;

    for path in ["/agents", "/assistant/capabilities"] {
        let refused = app.get(path).await;
        assert_eq!(refused.status(), 401, "{path}");
        assert_eq!(error_body(refused).await["error"]["code"], "missing_token");
        let allowed = app
            .client
            .get(format!("{}{path}", app.address))
            .bearer_auth(TOKEN)
            .send()
            .await
            .expect("the app answers");
        assert_eq!(allowed.status(), 200, "{path}");
    }
}

#[tokio::test]
async fn the_route_an_agent_is_listed_with_runs_it() {
    let app = spawn_app(with_banking).await;
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Your balance is 10."])));

    let listing = json(app.get("/agents").await).await;
    let banking = listing["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "banking")
        .unwrap();
    let route = banking["route"].as_str().unwrap();
    let events = app.run_events(route, &input(vec![user("Balance?")])).await;

    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    let advertised = json(app.get(banking["capabilities"].as_str().unwrap()).await).await;
    let upstream = app.upstream_bodies();
    let offered = tool_names(&upstream[0]);
    for tool in advertised["tools"]["items"].as_array().unwrap() {
        assert!(
            offered.contains(&tool["name"].as_str().unwrap()),
            "every advertised tool is offered to the model: {offered:?}"
        );
    }
}

#[tokio::test]
async fn an_agent_cannot_take_the_name_of_a_service_route() {
    let fake = crate::fake_llm::FakeLlm::start().await;
    for reserved in ["agents", "health", "ready", "metrics"] {
        let mut settings = test_settings(&fake);
        settings.agents.insert(reserved.into(), agent(""));
        let error = agui_host::App::build(settings)
            .await
            .expect_err("a reserved name is refused");
        assert!(
            error
                .to_string()
                .contains(&format!("agent name `{reserved}`")),
            "{error}"
        );
    }
}
