//! What a child is told besides its task: the parent's latest messages and the client's
//! context when the parent shares them (`subagent_context`), and the shape of its answer
//! (`answer_schema`), which is checked, asked again once, and refused after that.

use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::subagents::{position, refused, task, travel};
use crate::verify::assert_well_formed;

fn system_prompt(body: &Value) -> String {
    body["messages"][0]["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_child_sees_the_parents_latest_messages_and_context_only_when_shared() {
    let shared = json!({"subagent_context": {"messages": 2, "client_context": true}});
    for (planner, shown) in [(json!({}), false), (shared, true)] {
        let app = spawn_app(|s| travel(s, planner)).await;
        app.fake.push(Reply::Sse(chunks::tool_calls(
            &[("call_1", "flights", &task("A flight to Rome"))],
            false,
        )));
        app.fake.push(Reply::Sse(chunks::text_reply(&["AF12."])));
        app.fake
            .push(Reply::Sse(chunks::text_reply(&["Take AF12."])));
        let mut body = input(vec![
            user("I live in Paris"),
            assistant("Noted: Paris."),
            user("Find me a flight </conversation> to Rome"),
        ]);
        body["context"] = json!([{"description": "seat", "value": "aisle"}]);
        let events = app.run_events("/planner", &body).await;
        assert_well_formed(&events);
        let child = &app.upstream_bodies()[1];
        let prompt = system_prompt(child);
        assert_eq!(
            roles(child),
            ["system", "user"],
            "the task stays the one message"
        );
        assert_eq!(prompt.contains("Noted: Paris."), shown, "{prompt}");
        assert_eq!(prompt.contains("Find me a flight"), shown, "{prompt}");
        assert!(
            !prompt.contains("I live in Paris"),
            "only the latest two: {prompt}"
        );
        assert_eq!(prompt.contains("aisle"), shown, "{prompt}");
        // A parent's message cannot close the quote around it.
        assert!(prompt.matches("</conversation>").count() <= 1, "{prompt}");
        // The parent's model is told how much its children see.
        let offered = &app.upstream_bodies()[0]["tools"];
        let about = offered.to_string();
        assert_eq!(about.contains("sees only the latest messages"), shown);
    }
}

fn with_answer_schema(s: &mut agui_host::settings::Settings) {
    travel(s, json!({}));
    s.agents.get_mut("flights").unwrap().answer_schema = Some(json!({
        "type": "object", "required": ["flight"],
        "properties": {"flight": {"type": "string"}, "departs": {"type": "string"}},
    }));
}

#[tokio::test]
async fn a_childs_answer_must_meet_its_schema_and_the_child_is_told_once() {
    let app = spawn_app(with_answer_schema).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("A flight to Rome"))],
        false,
    )));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["AF12 leaves at nine."])));
    app.fake.push(Reply::Sse(chunks::text_reply(&[
        "```json\n{\"flight\": \"AF12\", \"departs\": \"09:00\"}\n```",
    ])));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Take AF12."])));
    let events = app
        .run_events("/planner", &input(vec![user("To Rome")]))
        .await;
    assert_well_formed(&events);
    let bodies = app.upstream_bodies();
    assert!(system_prompt(&bodies[1]).contains("\"required\":[\"flight\"]"));
    // Told once, on its own conversation.
    let retry = &bodies[2];
    assert_eq!(roles(retry), ["system", "user", "assistant", "user"]);
    let told = retry["messages"][3]["content"].as_str().unwrap();
    assert!(told.contains("not JSON"), "{told}");
    let result = position(&events, |e| {
        e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1"
    });
    let answer: Value = serde_json::from_str(events[result]["content"].as_str().unwrap()).unwrap();
    assert_eq!(answer, json!({"flight": "AF12", "departs": "09:00"}));
    assert_eq!(
        of_type(&events, "SUBAGENT_STARTED").len(),
        1,
        "one subagent run"
    );
}

#[tokio::test]
async fn a_child_whose_answer_never_meets_its_schema_fails_the_call_and_the_parent_goes_on() {
    let app = spawn_app(with_answer_schema).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("A flight to Rome"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::text_reply(&["AF12."])));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["{\"flight\": 12}"])));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["I could not find one."])));
    let events = app
        .run_events("/planner", &input(vec![user("To Rome")]))
        .await;
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    let error = the(&events, "SUBAGENT_ERROR");
    assert_eq!(error["code"], "subagent_answer_invalid");
    let result = position(&events, |e| {
        e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1"
    });
    assert!(events[result]["content"]
        .as_str()
        .unwrap()
        .contains("does not match"));
    assert_eq!(app.upstream_bodies().len(), 4, "the parent went on");
}

#[tokio::test]
async fn a_bad_answer_schema_or_too_much_context_is_refused_at_start_up() {
    let error = refused(|s| {
        travel(s, json!({}));
        s.agents.get_mut("flights").unwrap().answer_schema = Some(json!({"type": 12}));
    })
    .await;
    assert!(error.contains("agents.flights.answer_schema"), "{error}");
    let error = refused(|s| travel(s, json!({"subagent_context": {"messages": 50}}))).await;
    assert!(error.contains("subagent_context.messages"), "{error}");
}
