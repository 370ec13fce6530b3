//! The demo agents (`config/demo.toml`, on by default) with the offline model: each route of
//! the AG-UI dojo does its feature's interaction with no key configured, and every stream is
//! one the reference client accepts, with state events that apply.

use agui_host::settings::LlmProvider;
use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

/// The app with its embedded defaults (demo agents included) and the offline model.
async fn offline_demo() -> TestApp {
    spawn_app(|settings| settings.llm.provider = LlmProvider::Offline).await
}

fn frontend_tool(name: &str, parameters: Value) -> Value {
    json!({"name": name, "description": format!("The page's {name} tool."), "parameters": parameters})
}

fn with(mut body: Value, key: &str, value: Value) -> Value {
    body[key] = value;
    body
}

/// The client's state after applying the stream's state events to `state`, as the client does.
pub(crate) fn apply_state(mut state: Value, events: &[Value]) -> Value {
    for event in events {
        match event["type"].as_str() {
            Some("STATE_SNAPSHOT") => state = event["snapshot"].clone(),
            Some("STATE_DELTA") => {
                let patch: json_patch::Patch =
                    serde_json::from_value(event["delta"].clone()).expect("an RFC 6902 patch");
                json_patch::patch(&mut state, &patch)
                    .unwrap_or_else(|e| panic!("the delta applies: {e}: {event}"));
            }
            _ => {}
        }
    }
    state
}

/// The single tool call named `name`: its id and parsed arguments; checks that its arguments
/// came in at least `fragments` TOOL_CALL_ARGS events.
#[track_caller]
fn call_named(events: &[Value], name: &str, fragments: usize) -> (String, Value) {
    let start = events
        .iter()
        .find(|e| e["type"] == "TOOL_CALL_START" && e["toolCallName"] == name)
        .unwrap_or_else(|| panic!("a {name} call: {:?}", types(events)));
    let id = start["toolCallId"].as_str().unwrap().to_owned();
    let deltas: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_ARGS" && e["toolCallId"] == id.as_str())
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(
        deltas.len() >= fragments,
        "{name}: {} argument fragments",
        deltas.len()
    );
    let arguments = serde_json::from_str(&deltas.concat()).expect("JSON arguments");
    (id, arguments)
}

fn text_of(events: &[Value]) -> String {
    of_type(events, "TEXT_MESSAGE_CONTENT")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect()
}

fn call_message(id: &str, name: &str, arguments: &Value) -> Value {
    json!({"id": format!("a-{id}"), "role": "assistant", "toolCalls": [
        {"id": id, "type": "function", "function": {"name": name, "arguments": arguments.to_string()}}
    ]})
}

#[tokio::test]
async fn agentic_chat_streams_text_and_calls_the_pages_change_background() {
    let app = offline_demo().await;
    let events = app
        .run_events("/agentic_chat", &input(vec![user("Hi")]))
        .await;
    assert_well_formed(&events);
    assert!(
        of_type(&events, "TEXT_MESSAGE_CONTENT").len() > 5,
        "streamed text"
    );

    let tools = json!([frontend_tool(
        "change_background",
        json!({"type": "object", "properties": {"background": {"type": "string", "description": "CSS background"}}, "required": ["background"]})
    )]);
    let ask = user("Change the background to blue");
    let body = with(input(vec![ask.clone()]), "tools", tools.clone());
    let events = app.run_events("/agentic_chat", &body).await;
    assert_well_formed(&events);
    let (id, arguments) = call_named(&events, "change_background", 3);
    assert_eq!(arguments, json!({"background": "blue"}));
    assert!(
        of_type(&events, "TOOL_CALL_RESULT").is_empty(),
        "the page runs it"
    );
    assert_eq!(last(&events)["outcome"]["pendingToolCallIds"], json!([id]));

    // The page's handler answers; the follow-up run answers with text.
    let messages = vec![
        ask,
        call_message(&id, "change_background", &arguments),
        tool_result(
            &id,
            r#"{"status":"success","message":"Background changed to blue"}"#,
        ),
    ];
    let body = with(input(messages), "tools", tools);
    let events = app.run_events("/agentic_chat", &body).await;
    assert_well_formed(&events);
    assert!(
        text_of(&events).contains("Background changed"),
        "{events:?}"
    );
}

#[tokio::test]
async fn backend_tool_rendering_runs_get_weather_on_the_server() {
    let app = offline_demo().await;
    let body = input_0x(vec![user("Weather in San Francisco")]);
    let events = app.run_events("/backend_tool_rendering", &body).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    let (id, arguments) = call_named(&events, "get_weather", 3);
    assert_eq!(arguments, json!({"location": "San Francisco"}));
    let result = the(&events, "TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], id.as_str());
    let weather: Value = serde_json::from_str(result["content"].as_str().unwrap()).unwrap();
    for field in [
        "city",
        "temperature",
        "conditions",
        "humidity",
        "wind_speed",
        "feels_like",
    ] {
        assert!(weather.get(field).is_some(), "{field} in {weather}");
    }
    assert!(text_of(&events).contains("temperature"));
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
}

#[tokio::test]
async fn human_in_the_loop_streams_generate_task_steps_then_answers_the_decision() {
    let app = offline_demo().await;
    let tools = json!([frontend_tool(
        "generate_task_steps",
        json!({"type": "object", "properties": {"steps": {"type": "array", "items": {"type": "object", "properties": {
            "description": {"type": "string"},
            "status": {"type": "string", "enum": ["enabled", "disabled", "executing"]}
        }, "required": ["description", "status"]}}}, "required": ["steps"]})
    )]);
    let ask = user("Plan a trip to Mars");
    let body = with(input_0x(vec![ask.clone()]), "tools", tools.clone());
    let events = app.run_events("/human_in_the_loop", &body).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    let (id, arguments) = call_named(&events, "generate_task_steps", 4);
    let steps = arguments["steps"].as_array().unwrap();
    assert!(steps.len() >= 3, "{arguments}");
    for step in steps {
        assert_eq!(step["status"], "enabled");
        assert!(step["description"]
            .as_str()
            .unwrap()
            .contains("trip to Mars"));
    }
    assert!(of_type(&events, "TOOL_CALL_RESULT").is_empty());

    let answer = json!({"accepted": true, "steps": &steps[..2]}).to_string();
    let messages = vec![
        ask,
        call_message(&id, "generate_task_steps", &arguments),
        tool_result(&id, &answer),
    ];
    let body = with(input_0x(messages), "tools", tools);
    let events = app.run_events("/human_in_the_loop", &body).await;
    assert_well_formed(&events);
    assert!(text_of(&events).contains("accepted"));
}

#[tokio::test]
async fn agentic_generative_ui_publishes_steps_then_completes_them_one_by_one() {
    let app = offline_demo().await;
    let started = std::time::Instant::now();
    let events = app
        .run_events("/agentic_generative_ui", &input(vec![user("Plan a party")]))
        .await;
    assert!(
        started.elapsed() >= std::time::Duration::from_millis(1200),
        "the steps complete over time, not at once"
    );
    assert_well_formed(&events);
    assert_eq!(last(&events)["outcome"]["type"], "success");
    call_named(&events, "generate_task_steps_generative_ui", 4);
    // The state after each state event, as the page sees it.
    let mut state = json!({});
    let mut seen = Vec::new();
    for event in events
        .iter()
        .filter(|e| e["type"] == "STATE_SNAPSHOT" || e["type"] == "STATE_DELTA")
    {
        state = apply_state(state, std::slice::from_ref(event));
        let statuses: Vec<&str> = state["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .map(|s| s["status"].as_str().unwrap())
            .collect();
        seen.push(statuses.join(","));
    }
    assert_eq!(
        seen,
        [
            "pending,pending,pending",
            "completed,pending,pending",
            "completed,completed,pending",
            "completed,completed,completed"
        ]
    );
    // The list once, then one `replace` per completed step.
    let deltas = of_type(&events, "STATE_DELTA");
    assert_eq!(deltas[0]["delta"][0]["op"], "add");
    assert_eq!(deltas[0]["delta"][0]["path"], "/steps");
    for (i, delta) in deltas[1..].iter().enumerate() {
        assert_eq!(
            delta["delta"],
            json!([{"op": "replace", "path": format!("/steps/{i}/status"), "value": "completed"}])
        );
    }
    assert!(state["steps"][0]["description"]
        .as_str()
        .unwrap()
        .contains("party"));
    assert!(!text_of(&events).is_empty(), "a final answer");
}

#[tokio::test]
async fn tool_based_generative_ui_streams_a_generate_haiku_call() {
    let app = offline_demo().await;
    let tools = json!([frontend_tool(
        "generate_haiku",
        json!({"type": "object", "properties": {
            "japanese": {"type": "array", "items": {"type": "string"}},
            "english": {"type": "array", "items": {"type": "string"}},
            "image_name": {"type": "string"},
            "gradient": {"type": "string"}
        }, "required": ["japanese", "english", "image_name", "gradient"]})
    )]);
    let body = with(
        input_0x(vec![user("Write a haiku about autumn")]),
        "tools",
        tools,
    );
    let events = app.run_events("/tool_based_generative_ui", &body).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    let (_, haiku) = call_named(&events, "generate_haiku", 4);
    assert_eq!(haiku["japanese"].as_array().unwrap().len(), 3);
    assert_eq!(haiku["english"].as_array().unwrap().len(), 3);
    assert!(haiku["image_name"].is_string() && haiku["gradient"].is_string());
}

#[tokio::test]
async fn shared_state_writes_the_recipe_into_the_state() {
    let app = offline_demo().await;
    let events = app
        .run_events(
            "/shared_state",
            &input(vec![user("Make me a recipe for tacos")]),
        )
        .await;
    assert_well_formed(&events);
    let (_, arguments) = call_named(&events, "generate_recipe", 4);
    let delta = the(&events, "STATE_DELTA");
    assert_eq!(delta["delta"][0]["op"], "add");
    assert_eq!(delta["delta"][0]["path"], "/recipe");
    let state = apply_state(json!({}), &events);
    assert_eq!(state["recipe"], arguments["recipe"]);
    let recipe = &state["recipe"];
    assert_eq!(recipe["title"], "Tacos");
    assert_eq!(recipe["skill_level"], "Beginner");
    let names: Vec<&str> = recipe["ingredients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Chicken breast", "Chili powder", "Salt"]);
    assert_eq!(recipe["instructions"].as_array().unwrap().len(), 3);
    assert!(text_of(&events).contains("Recipe updated."));
}

// ---- The dojo's recorded model fixtures ---------------------------------------------------------
// The dojo's Playwright specs replace the model with recorded fixtures that fire on the tool
// names and argument shapes of its LLM-backed integration examples; these replay such calls
// through the fake upstream.

/// The upstream tool named `name` in the request `upstream_body`, as the fixtures match it.
#[track_caller]
fn upstream_tool<'a>(upstream_body: &'a Value, name: &str) -> &'a Value {
    upstream_body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| t["function"]["name"] == name)
        .unwrap_or_else(|| panic!("a {name} tool in {upstream_body}"))
}

/// The text of the upstream message that carries the client's state block.
#[track_caller]
fn state_block(upstream_body: &Value) -> String {
    upstream_body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(content_text)
        .find(|text| text.contains("</state>"))
        .unwrap_or_else(|| panic!("a state block in {upstream_body}"))
}

#[tokio::test]
async fn shared_state_takes_the_dojo_fixtures_nested_generate_recipe_call_into_the_next_run() {
    let app = spawn_app(|_| {}).await;
    // A complete recipe as the fixtures write it: every field, `changes` included.
    let recipe = json!({
        "title": "Garlic Pasta", "skill_level": "Intermediate", "special_preferences": [],
        "cooking_time": "45 min", "changes": "",
        "ingredients": [{"icon": "🍝", "name": "Pasta", "amount": "400g"},
                        {"icon": "🧄", "name": "Garlic", "amount": "6 cloves"}],
        "instructions": ["Cook the pasta", "Fry the garlic in oil", "Toss and serve"]
    });
    let arguments = json!({"recipe": recipe}).to_string();
    app.fake.push_call_then_text(
        ("call_generate_recipe", "generate_recipe", &arguments),
        "Here is a garlic pasta.",
    );
    let ask = vec![user("Give me a pasta recipe")];
    let events = app.run_events("/shared_state", &input(ask.clone())).await;
    assert_well_formed(&events);

    // What the fixtures' predicates look for: the name and a nested `recipe` parameter.
    let first = &app.upstream_bodies()[0];
    let parameters = &upstream_tool(first, "generate_recipe")["function"]["parameters"];
    assert_eq!(parameters["required"], json!(["recipe"]));
    assert!(parameters["properties"]["recipe"]["properties"]["changes"].is_object());
    assert_eq!(
        of_type(&events, "TOOL_CALL_RESULT")[0]["content"],
        "Recipe updated."
    );
    let state = apply_state(json!({}), &events);
    assert_eq!(state, json!({"recipe": recipe}));

    // The page adds an ingredient and asks about the ingredients: the model reads the edited
    // recipe from the state it is sent, not the one in the call it made.
    let mut edited = state.clone();
    edited["recipe"]["ingredients"]
        .as_array_mut()
        .unwrap()
        .push(json!({"icon": "🥔", "name": "Potatoes", "amount": "12"}));
    app.fake.push(Reply::Sse(chunks::text_reply(&[
        "Pasta, garlic, potatoes.",
    ])));
    let mut history = crate::approvals::client_history(&ask, &events);
    history.push(user("What are the ingredients?"));
    let next = with(input(history), "state", edited);
    let events = app.run_events("/shared_state", &next).await;
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    let block = state_block(&app.upstream_bodies()[2]);
    assert!(block.contains("Potatoes"), "{block}");
}

#[tokio::test]
async fn agentic_generative_ui_takes_the_dojo_fixtures_generate_task_steps_generative_ui_call() {
    let app = spawn_app(|_| {}).await;
    let steps = json!([
        {"description": "Gathering ingredients", "status": "pending"},
        {"description": "Mixing the batter", "status": "pending"},
        {"description": "Baking for 25 minutes", "status": "pending"}
    ]);
    let arguments = json!({"steps": steps}).to_string();
    app.fake.push_call_then_text(
        (
            "call_steps",
            "generate_task_steps_generative_ui",
            &arguments,
        ),
        "Done.",
    );
    let events = app
        .run_events(
            "/agentic_generative_ui",
            &input(vec![user("Give me a plan to make brownies")]),
        )
        .await;
    assert_well_formed(&events);

    let first = &app.upstream_bodies()[0];
    let parameters =
        &upstream_tool(first, "generate_task_steps_generative_ui")["function"]["parameters"];
    assert_eq!(parameters["required"], json!(["steps"]));
    assert_eq!(
        parameters["properties"]["steps"]["items"]["required"],
        json!(["description", "status"])
    );
    assert_eq!(
        of_type(&events, "TOOL_CALL_RESULT")[0]["content"],
        "Steps updated."
    );
    assert_eq!(apply_state(json!({}), &events), json!({"steps": steps}));
    assert_eq!(
        app.upstream_bodies().len(),
        2,
        "the answer follows the steps"
    );
}

/// The tools the predictive-state page registers itself: `confirm_changes` and its own
/// `write_document`.
fn predictive_page_tools() -> Value {
    json!([
        frontend_tool(
            "confirm_changes",
            json!({"type": "object", "properties": {}})
        ),
        frontend_tool(
            "write_document",
            json!({"type": "object", "properties": {"document": {"type": "string"}}, "required": ["document"]})
        ),
    ])
}

#[tokio::test]
async fn predictive_state_updates_fills_the_document_then_asks_confirm_changes() {
    let app = offline_demo().await;
    // The page registers its own write_document and confirm_changes; the agent writes with
    // write_document_local, the name the dojo's recorded model fixtures call.
    let tools = predictive_page_tools();
    let before = json!({"document": ""});
    let ask = user("Write a document about cats");
    let body = with(
        with(input_0x(vec![ask.clone()]), "tools", tools.clone()),
        "state",
        before.clone(),
    );
    let events = app.run_events("/predictive_state_updates", &body).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    let (write_id, arguments) = call_named(&events, "write_document_local", 10);
    // The document fills in while the arguments stream: deltas before the call ends.
    let end = events
        .iter()
        .position(|e| e["type"] == "TOOL_CALL_END" && e["toolCallId"] == write_id.as_str())
        .unwrap();
    let early = events[..end]
        .iter()
        .filter(|e| e["type"] == "STATE_DELTA")
        .count();
    assert!(early >= 2, "{early} deltas while the arguments stream");
    let predicted = apply_state(before.clone(), &events);
    assert_eq!(predicted["document"], arguments["document"]);
    assert!(predicted["document"]
        .as_str()
        .unwrap()
        .starts_with("# Cats"));
    let (confirm_id, _) = call_named(&events, "confirm_changes", 1);
    assert!(of_type(&events, "TOOL_CALL_RESULT").is_empty());

    // The page confirms: the document is committed, the tool runs, the agent answers.
    let messages = vec![
        ask,
        json!({"id": "a1", "role": "assistant", "toolCalls": [
            {"id": write_id, "type": "function", "function": {"name": "write_document_local", "arguments": arguments.to_string()}},
            {"id": confirm_id, "type": "function", "function": {"name": "confirm_changes", "arguments": "{}"}}
        ]}),
        tool_result(&confirm_id, r#"{"accepted":true}"#),
    ];
    let body = with(
        with(input_0x(messages), "tools", tools),
        "state",
        predicted.clone(),
    );
    let events = app.run_events("/predictive_state_updates", &body).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    assert_eq!(apply_state(predicted.clone(), &events), predicted);
    let result = the(&events, "TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], write_id.as_str());
    assert_eq!(result["content"], "Document saved.");
    assert!(!text_of(&events).is_empty());

    // A 1.0 client gets an interrupt instead of the confirm_changes call.
    let body = with(
        input(vec![user("Write a document about dogs")]),
        "state",
        before,
    );
    let events = app.run_events("/predictive_state_updates", &body).await;
    assert_well_formed(&events);
    assert_eq!(last(&events)["outcome"]["type"], "interrupt");
}

#[tokio::test]
async fn predictive_state_updates_takes_the_dojo_fixtures_write_document_local_call() {
    let app = spawn_app(|_| {}).await;
    let document = "Once upon a time there lived a dragon named Atlantis.";
    let arguments = json!({"document": document}).to_string();
    app.fake.push_call_then_text(
        ("call_write", "write_document_local", &arguments),
        "The story is in the document.",
    );
    // The page's own tools travel with every request, as CopilotKit sends them.
    let tools = predictive_page_tools();
    let ask = user("Give me a story for a dragon called Atlantis in document");
    let body = with(
        with(input_0x(vec![ask.clone()]), "tools", tools.clone()),
        "state",
        json!({"document": ""}),
    );
    let events = app.run_events("/predictive_state_updates", &body).await;
    assert_well_formed(&events);
    let first = &app.upstream_bodies()[0];
    let parameters = &upstream_tool(first, "write_document_local")["function"]["parameters"];
    assert_eq!(parameters["required"], json!(["document"]));
    // The fixture's call is the agent's own tool: the document is predicted and the page
    // is asked to confirm, instead of an unknown-tool result.
    let predicted = apply_state(json!({"document": ""}), &events);
    assert_eq!(predicted, json!({"document": document}));
    let (confirm_id, _) = call_named(&events, "confirm_changes", 1);
    assert!(of_type(&events, "TOOL_CALL_RESULT").is_empty());

    let messages = vec![
        ask,
        json!({"id": "a1", "role": "assistant", "toolCalls": [
            {"id": "call_write", "type": "function", "function": {"name": "write_document_local", "arguments": arguments}},
            {"id": confirm_id, "type": "function", "function": {"name": "confirm_changes", "arguments": "{}"}}
        ]}),
        tool_result(&confirm_id, r#"{"accepted":true}"#),
    ];
    let body = with(with(input_0x(messages), "tools", tools), "state", predicted);
    let events = app.run_events("/predictive_state_updates", &body).await;
    assert_well_formed(&events);
    let result = the(&events, "TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], "call_write");
    assert_eq!(result["content"], "Document saved.");
    // The configured confirmation message, then the model's answer.
    assert_eq!(
        text_of(&events),
        "Changes applied.The story is in the document."
    );
    assert_eq!(app.fake.unused_replies(), 0);
}

#[tokio::test]
async fn demo_agents_can_be_turned_off() {
    let app = spawn_app(|settings| {
        settings.llm.provider = LlmProvider::Offline;
        settings.demo_agents = false;
        settings.agents.retain(|name, _| name == "assistant");
        settings.add_demo_agents().unwrap();
    })
    .await;
    let response = app
        .post_run("/agentic_chat", &input(vec![user("Hi")]))
        .await;
    assert_eq!(response.status(), 404);
}

#[tokio::test]
async fn interrupt_asks_for_a_meeting_time_and_confirms_the_choice() {
    use crate::approvals::{client_history, interrupt_id, interrupts, resolved, resume_input};
    let app = offline_demo().await;

    // A 1.0 client: the question is an `input_required` interrupt with the offered slots.
    let ask = user("Schedule a meeting about the roadmap");
    let events = app
        .run_events("/interrupt", &input(vec![ask.clone()]))
        .await;
    assert_well_formed(&events);
    let (call_id, arguments) = call_named(&events, "pick_meeting_time", 2);
    assert!(
        arguments["slots"].as_array().is_some_and(|s| !s.is_empty()),
        "{arguments}"
    );
    let interrupt = interrupts(&events).remove(0);
    assert_eq!(interrupt["reason"], "input_required", "{interrupt}");
    assert_eq!(interrupt["toolCallId"], call_id.as_str());
    assert!(
        interrupt["message"]
            .as_str()
            .unwrap()
            .starts_with("Pick a time for "),
        "{interrupt}"
    );
    assert_eq!(
        interrupt["responseSchema"]["required"],
        json!(["chosen_time"])
    );
    assert_eq!(interrupt["metadata"]["agui-host"]["arguments"], arguments);
    let id = interrupt_id(&events, &call_id);
    let history = client_history(std::slice::from_ref(&ask), &events);
    let choice = json!({"chosen_time": "Tuesday 10:00", "chosen_label": "Tuesday morning"});
    let events = app
        .run_events(
            "/interrupt",
            &resume_input(history, json!([resolved(&id, choice)])),
        )
        .await;
    assert_well_formed(&events);
    assert!(
        text_of(&events).contains("Tuesday 10:00"),
        "{}",
        text_of(&events)
    );
    assert_eq!(last(&events)["outcome"]["type"], "success");

    // A 0.x client (CopilotKit's): the same question as a `request_input` client tool call.
    let mut body = input_0x(vec![ask.clone()]);
    body["threadId"] = json!("t-0x");
    let events = app.run_events("/interrupt", &body).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    let (request_id, request) = call_named(&events, "request_input", 1);
    assert_eq!(request["toolName"], "pick_meeting_time");
    let mut messages = client_history(&[ask], &events);
    messages.push(tool_result(&request_id, r#"{"cancelled":true}"#));
    let mut body = input_0x(messages);
    body["threadId"] = json!("t-0x");
    body["runId"] = json!("r2");
    let events = app.run_events("/interrupt", &body).await;
    assert_well_formed(&events);
    assert!(
        text_of(&events).contains("no meeting was booked"),
        "{}",
        text_of(&events)
    );
}
