//! What every provider must do the same, run once per provider by `anthropic` and `responses`:
//! parallel server tools, a client tool over two runs, predictive state with the same deltas as
//! over Chat Completions, an approval over two runs, and the reasoning round trip. Each returns
//! the app, so the caller checks what its own dialect sent upstream.

use agui_host::settings::{LlmProvider, ModelProfile, PredictStateRule, Settings};
use serde_json::{json, Value};

use crate::approvals::{
    client_history, interrupt_id, resolved, resume_input, the_text, transfer_tool, with_tools,
    ToolService, TRANSFER_ARGS,
};
use crate::fake_llm::chunks::Call;
use crate::fake_llm::Reply;
use crate::helpers::*;
use crate::verify::assert_well_formed;

/// One provider as the scenarios need it: its profile on the fake upstream, and its replies.
pub(crate) struct Provider {
    pub(crate) profile_name: &'static str,
    pub(crate) profile: fn(&Settings) -> ModelProfile,
    pub(crate) text_reply: fn(&[&str]) -> Vec<String>,
    pub(crate) tool_calls: fn(&[Call<'_>]) -> Vec<String>,
}

impl Provider {
    /// Adds the profile, changed by `change`, and puts the default agent on it.
    pub(crate) fn configure(
        &self,
        settings: &mut Settings,
        change: impl FnOnce(&mut ModelProfile),
    ) {
        let mut profile = (self.profile)(settings);
        change(&mut profile);
        settings.models.insert(self.profile_name.into(), profile);
        let agent = settings.default_agent.clone();
        settings.agents.get_mut(&agent).unwrap().profile = Some(self.profile_name.into());
    }

    pub(crate) async fn app(&self, change: impl FnOnce(&mut ModelProfile)) -> TestApp {
        spawn_app(|settings| self.configure(settings, change)).await
    }

    pub(crate) fn push_text(&self, app: &TestApp, parts: &[&str]) {
        app.fake.push(Reply::Sse((self.text_reply)(parts)));
    }

    pub(crate) fn push_calls(&self, app: &TestApp, calls: &[Call<'_>]) {
        app.fake.push(Reply::Sse((self.tool_calls)(calls)));
    }
}

/// A `provider` profile for `model` on the fake upstream (the same address as `[llm]`'s),
/// retries off.
pub(crate) fn profile_on_fake(
    settings: &Settings,
    provider: LlmProvider,
    model: &str,
) -> ModelProfile {
    ModelProfile {
        provider: Some(provider),
        base_url: settings.llm.base_url.clone(),
        api_key: API_KEY.into(),
        model: model.into(),
        max_retries: Some(0),
        ..ModelProfile::default()
    }
}

/// A `get_weather` call: id, name, arguments.
pub(crate) fn weather_call(id: &str, city: &str) -> (String, String, String) {
    (
        id.to_owned(),
        "get_weather".to_owned(),
        format!(r#"{{"location":"{city}"}}"#),
    )
}

/// Two `get_weather` calls in one turn (`<prefix>1` for Paris, `<prefix>2` for Rome), run by
/// the server, then the answer. Returns the app after the run.
pub(crate) async fn parallel_server_tools(provider: &Provider, prefix: &str) -> TestApp {
    let app = provider.app(|_| {}).await;
    let (paris, rome) = (
        weather_call(&format!("{prefix}1"), "Paris"),
        weather_call(&format!("{prefix}2"), "Rome"),
    );
    provider.push_calls(
        &app,
        &[(&paris.0, &paris.1, &paris.2), (&rome.0, &rome.1, &rome.2)],
    );
    provider.push_text(&app, &["Sunny in both."]);

    let events = app
        .run_events("/", &input(vec![user("Weather in Paris and Rome?")]))
        .await;

    assert_well_formed(&events);
    let args = tool_args(&events);
    assert_eq!(args[&paris.0], paris.2);
    assert_eq!(args[&rome.0], rome.2);
    assert_eq!(of_type(&events, "TOOL_CALL_RESULT").len(), 2);
    assert_eq!(the_text(&events), "Sunny in both.");
    assert_eq!(app.upstream_bodies().len(), 2);
    app
}

/// The model calls the client tool `change_background` (`call_id`); the run ends with it; the
/// next run carries the client's result `changed` and gets the answer. Returns the app.
pub(crate) async fn client_tool_over_two_runs(provider: &Provider, call_id: &str) -> TestApp {
    let app = provider.app(|_| {}).await;
    let arguments = r#"{"background":"navy"}"#;
    provider.push_calls(&app, &[(call_id, "change_background", arguments)]);
    let question = user("Make it navy.");
    let with_tool = |mut body: Value| {
        body["tools"] = json!([client_tool("change_background")]);
        body
    };
    let events = app
        .run_events("/", &with_tool(input(vec![question.clone()])))
        .await;
    assert_well_formed(&events);
    assert_eq!(tool_args(&events)[call_id], arguments);
    assert!(of_type(&events, "TOOL_CALL_RESULT").is_empty());
    assert_eq!(app.upstream_bodies().len(), 1, "the client runs its tool");

    provider.push_text(&app, &["Done."]);
    let mut history = client_history(&[question], &events);
    history.push(tool_result(call_id, "changed"));
    let mut next = with_tool(input(history));
    next["runId"] = json!("r2");
    let events = app.run_events("/", &next).await;
    assert_well_formed(&events);
    assert_eq!(the_text(&events), "Done.");
    app
}

/// The recipe the predictive-state scenario writes.
const RECIPE: &str = r#"{"recipe": {"title": "Lettuce wraps", "ingredients": [{"name": "chicken", "amount": "2"}, {"name": "lettuce", "amount": "8 leaves"}], "steps": ["Slice.", "Sear.", "Wrap."]}}"#;

fn predict_recipe(settings: &mut Settings) {
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

fn state_events(events: &[Value]) -> Vec<Value> {
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

/// The same `update_recipe` call over Chat Completions and over `provider`: the same state
/// events, streamed while the arguments arrive.
pub(crate) async fn predictive_state_matches_chat(provider: &Provider) {
    let call = ("call_r", "update_recipe", RECIPE);
    let chat = spawn_app(predict_recipe).await;
    chat.fake.push_call_then_text(call, "Saved.");
    let over_chat = chat.run_events("/", &input(vec![user("A recipe")])).await;

    let app = spawn_app(|s| {
        predict_recipe(s);
        provider.configure(s, |_| {});
    })
    .await;
    provider.push_calls(&app, &[call]);
    provider.push_text(&app, &["Saved."]);
    let over_provider = app.run_events("/", &input(vec![user("A recipe")])).await;

    assert_well_formed(&over_provider);
    let deltas = state_events(&over_provider);
    assert!(
        deltas.iter().filter(|e| e["type"] == "STATE_DELTA").count() > 3,
        "the state streams while the arguments do: {deltas:?}"
    );
    assert_eq!(deltas, state_events(&over_chat));
}

/// `transfer_money` (`call_id`) waits for approval; the next run approves it; it runs once and
/// the model answers. Returns the app.
pub(crate) async fn approval_over_two_runs(provider: &Provider, call_id: &str) -> TestApp {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| {
        with_tools(settings, tools);
        provider.configure(settings, |_| {});
    })
    .await;
    provider.push_calls(&app, &[(call_id, "transfer_money", TRANSFER_ARGS)]);
    let question = user("Send 250 to Bob.");
    let events = app.run_events("/", &input(vec![question.clone()])).await;
    assert_well_formed(&events);
    assert!(service.calls_of("transfer_money").is_empty());
    let id = interrupt_id(&events, call_id);

    provider.push_text(&app, &["Sent."]);
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
    app
}

/// The reasoning of a run as the 1.0 client keeps it: the message, its text, and the encrypted
/// value that sealed it (which must name it).
pub(crate) fn sealed_reasoning(events: &[Value]) -> Value {
    let id = the(events, "REASONING_MESSAGE_START")["messageId"].clone();
    let text: String = of_type(events, "REASONING_MESSAGE_CONTENT")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    let sealed = the(events, "REASONING_ENCRYPTED_VALUE");
    assert_eq!(sealed["subtype"], "message");
    assert_eq!(
        sealed["entityId"], id,
        "the value names its reasoning message"
    );
    json!({"id": id, "role": "reasoning", "content": text, "encryptedValue": sealed["encryptedValue"]})
}

/// The next run's history: the question, the kept reasoning, what the run streamed, and a
/// follow-up question.
pub(crate) fn next_run_with_reasoning(question: Value, events: &[Value]) -> Value {
    let mut history = vec![question, sealed_reasoning(events)];
    history.extend(client_history(&[], events));
    history.push(user("And tomorrow?"));
    let mut next = input(history);
    next["runId"] = json!("r2");
    next
}

/// The run's terminal event, checked to be a `RUN_ERROR` with `code`, with no key in it.
#[track_caller]
pub(crate) fn assert_run_error(events: &[Value], code: &str) {
    assert_well_formed(events);
    let error = last(events);
    assert_eq!(error["type"], "RUN_ERROR", "{:?}", types(events));
    assert_eq!(error["code"], code, "{error}");
    assert!(!error.to_string().contains(API_KEY), "{error}");
}
