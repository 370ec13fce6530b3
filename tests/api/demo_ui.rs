//! The demo routes of UI from the server, with the offline model: `a2ui_fixed_schema`,
//! `a2ui_dynamic_schema`, `a2ui_recovery` and `background_agents` do what the dojo's pages
//! of those names check (the surface ids and the data they show, recovery and its failure, a
//! background task's activity), in streams both client generations accept.

use agui_host::settings::LlmProvider;
use serde_json::{json, Value};

use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

pub(crate) async fn offline_demo() -> TestApp {
    spawn_app(|settings| settings.llm.provider = LlmProvider::Offline).await
}

/// The catalog the dojo's dynamic pages register, as CopilotKit sends it in the run's context.
fn dynamic_catalog() -> Value {
    let string = json!({"anyOf": [{"type": "string"}, {"type": "object"}]});
    let number = json!({"anyOf": [{"type": "number"}, {"type": "object"}]});
    let value = json!({
        "catalogId": "https://a2ui.org/demos/dojo/dynamic_catalog.json",
        "components": {
            "Row": {"type": "object", "required": ["children"], "properties": {"children": {}, "gap": {"type": "number"}}},
            "HotelCard": {"type": "object", "required": ["name", "location", "rating", "pricePerNight", "action"],
                "properties": {"name": string, "location": string, "rating": number, "pricePerNight": string, "action": {}}},
            "ProductCard": {"type": "object", "required": ["name", "price", "rating", "action"],
                "properties": {"name": string, "price": string, "rating": number, "description": string, "action": {}}},
            "TeamMemberCard": {"type": "object", "required": ["name", "role", "action"],
                "properties": {"name": string, "role": string, "department": string, "email": string, "action": {}}}
        }
    });
    json!({
        "description": "A2UI Component Schema — available components for generating UI surfaces. Use these component names and properties when creating A2UI operations.",
        "value": value.to_string(),
    })
}

/// A run of `route`, checked well formed (and 0.x-compatible for a 0.x body) to its end.
pub(crate) async fn run(app: &TestApp, route: &str, body: &Value) -> Vec<Value> {
    let events = app.run_events(route, body).await;
    assert_well_formed(&events);
    if body.get("protocolVersion").is_none() {
        assert_0x_compatible(&events);
    }
    assert_eq!(
        last(&events)["type"],
        "RUN_FINISHED",
        "{:?}",
        types(&events)
    );
    events
}

/// The results of the calls named `name`, parsed.
fn results_of(events: &[Value], name: &str) -> Vec<Value> {
    let ids: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_START" && e["toolCallName"] == name)
        .map(|e| &e["toolCallId"])
        .collect();
    events
        .iter()
        .filter(|e| e["type"] == "TOOL_CALL_RESULT" && ids.contains(&&e["toolCallId"]))
        .map(|e| serde_json::from_str(e["content"].as_str().unwrap()).unwrap())
        .collect()
}

/// The surface id an envelope creates, and its text, for "contains" checks.
fn surface(envelope: &Value) -> (String, String) {
    let operations = envelope["a2ui_operations"]
        .as_array()
        .unwrap_or_else(|| panic!("an envelope: {envelope}"));
    let id = operations[0]["createSurface"]["surfaceId"]
        .as_str()
        .unwrap()
        .to_owned();
    (id, envelope.to_string())
}

fn text_of(events: &[Value]) -> String {
    of_type(events, "TEXT_MESSAGE_CONTENT")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn a2ui_fixed_schema_shows_flights_and_hotels_in_their_fixed_surfaces() {
    let app = offline_demo().await;
    let cases = [
        (
            "Find flights from SFO to JFK for next Tuesday.",
            "search_flights",
            "flight-search-results",
            &["UA 123", "DL 456", "$289", "$315"][..],
        ),
        (
            "Find hotels in downtown Manhattan for next weekend.",
            "search_hotels",
            "hotel-search-results",
            &["The Manhattan Grand", "Downtown Boutique Hotel", "4.5"][..],
        ),
    ];
    for (body_of, generation) in [(input as fn(Vec<Value>) -> Value, "1.0"), (input_0x, "0.x")] {
        for (message, tool, surface_id, shown) in cases {
            let events = run(&app, "/a2ui_fixed_schema", &body_of(vec![user(message)])).await;
            let results = results_of(&events, tool);
            assert_eq!(results.len(), 1, "{generation}: {:?}", types(&events));
            let (id, text) = surface(&results[0]);
            assert_eq!(id, surface_id);
            assert_eq!(
                results[0]["a2ui_operations"][0]["createSurface"]["catalogId"],
                "https://a2ui.org/demos/dojo/fixed_catalog.json"
            );
            for value in shown {
                assert!(text.contains(value), "{generation}: {value} in {text}");
            }
            assert_eq!(text_of(&events), "Here it is.");
        }
    }
}

#[tokio::test]
async fn a2ui_dynamic_schema_designs_each_surface_with_the_pages_catalog() {
    let app = offline_demo().await;
    let cases = [
        (
            "Use the generate_a2ui tool to create a comparison of 3 hotels with name, location, price per night, and star rating using the StarRating component.",
            "hotel-comparison",
            &["The Ritz", "Holiday Inn", "Boutique Loft", "$450/night", "$180/night", "$320/night", "4.8", "HotelCard"][..],
        ),
        (
            "Use the generate_a2ui tool to create a product comparison of 3 headphones with name, price, rating, a short description, and a Select button on each card.",
            "product-comparison",
            &["Sony WH-1000XM5", "AirPods Max", "Bose QC Ultra", "$349", "$549", "$429"][..],
        ),
        (
            "Use the generate_a2ui tool to create a team roster with 4 people showing name, role, avatar, and email.",
            "team-roster",
            &["Alice Chen", "Bob Martinez", "Carol Davis", "Dan Wilson", "Engineering Lead", "Product Designer"][..],
        ),
    ];
    for (body_of, generation) in [(input as fn(Vec<Value>) -> Value, "1.0"), (input_0x, "0.x")] {
        for (message, surface_id, shown) in cases {
            let mut body = body_of(vec![user(message)]);
            body["context"] = json!([dynamic_catalog()]);
            let events = run(&app, "/a2ui_dynamic_schema", &body).await;
            // The inner call streams in pieces, so the page paints as it arrives.
            let pieces = of_type(&events, "TOOL_CALL_ARGS")
                .iter()
                .filter(|a| {
                    a["toolCallId"]
                        .as_str()
                        .unwrap()
                        .starts_with("a2ui_render_")
                })
                .count();
            assert!(pieces >= 4, "{generation}: {pieces} pieces");
            let results = results_of(&events, "generate_a2ui");
            assert_eq!(results.len(), 1, "{generation}: {:?}", types(&events));
            let (id, text) = surface(&results[0]);
            assert_eq!(id, surface_id);
            assert_eq!(
                results[0]["a2ui_operations"][0]["createSurface"]["catalogId"],
                "https://a2ui.org/demos/dojo/dynamic_catalog.json",
                "the catalog the page registered"
            );
            for value in shown {
                assert!(text.contains(value), "{generation}: {value} in {text}");
            }
        }
    }
}

#[tokio::test]
async fn a2ui_recovery_recovers_once_and_fails_cleanly_when_it_cannot() {
    let app = offline_demo().await;
    let mut body = input(vec![user(
        "Compare 3 luxury hotels with ratings and prices.",
    )]);
    body["context"] = json!([dynamic_catalog()]);
    let events = run(&app, "/a2ui_recovery", &body).await;
    let inner = results_of(&events, "render_a2ui");
    assert_eq!(
        inner
            .iter()
            .map(|r| r["status"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["invalid", "rendered"]
    );
    let (id, text) = surface(&results_of(&events, "generate_a2ui")[0]);
    assert_eq!(id, "hotel-comparison");
    assert!(text.contains("The Ritz") && text.contains("Boutique Loft"));

    // Every attempt fails: the failure result, and the conversation goes on.
    let mut body = input(vec![user(
        "Compare 3 broken hotels with ratings and prices.",
    )]);
    body["context"] = json!([dynamic_catalog()]);
    body["threadId"] = json!("t2");
    let events = run(&app, "/a2ui_recovery", &body).await;
    assert_eq!(results_of(&events, "render_a2ui").len(), 3);
    let failure = &results_of(&events, "generate_a2ui")[0];
    assert_eq!(failure["code"], "a2ui_recovery_exhausted");
    assert!(text_of(&events).starts_with("I could not build that view"));
    let thread: Value = app
        .get("/a2ui_recovery/threads/t2")
        .await
        .json()
        .await
        .unwrap();
    let mut history: Vec<Value> = thread["messages"].as_array().unwrap().clone();
    history.push(user("Thanks anyway."));
    let mut body = input(history);
    body["threadId"] = json!("t2");
    body["runId"] = json!("r2");
    body["context"] = json!([dynamic_catalog()]);
    let events = run(&app, "/a2ui_recovery", &body).await;
    assert!(
        text_of(&events).contains("Thanks anyway"),
        "{}",
        text_of(&events)
    );
}

#[tokio::test]
async fn background_agents_starts_the_research_as_a_task_with_an_activity() {
    let app = offline_demo().await;
    for (body_of, thread) in [(input as fn(Vec<Value>) -> Value, "t1"), (input_0x, "t2")] {
        let mut body = body_of(vec![user("Research the Solana ecosystem for me.")]);
        body["threadId"] = json!(thread);
        let events = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            run(&app, "/background_agents", &body),
        )
        .await
        .expect("the run does not wait for the research");
        let handle = &results_of(&events, "run_deep_research")[0];
        assert_eq!(handle["status"], "started");
        let activity = the(&events, "ACTIVITY_SNAPSHOT");
        assert_eq!(activity["activityType"], "agui-host.background");
        assert_eq!(activity["content"]["tool"], "run_deep_research");
        assert_eq!(activity["content"]["status"], "running");
        assert!(text_of(&events).contains("running in the background"));
    }
}
