//! Asking the user: `kind = "input"` tools.
//!
//! The contract (docs/human-in-the-loop.md, "Asking the user"): a call of an input tool never
//! runs on the server; a 1.0 client gets an interrupt with `reason: "input_required"`, the
//! tool's `responseSchema` and the question, and answers with `resume`; a 0.x client gets a
//! `request_input` client tool call and answers with a tool message. The answer, checked
//! against the schema, is the call's result, once over every later run; an invalid answer
//! ends the run with `RUN_ERROR` `invalid_resume_payload` and can be sent again, corrected; an
//! expired question is refused; a cancelled one tells the model so.

use agui_host::settings::{ApprovalPolicySetting, FixedApproval, ToolKindSettings, ToolSettings};
use serde_json::{json, Value};

use crate::approvals::{
    assert_provider_saw_clean_histories, assert_refused, assert_success, cancelled, client_history,
    interrupt_id, interrupts, resolved, result_for, results, resume_input, the_text, with_tools,
};
use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::{assert_0x_compatible, assert_well_formed};

/// What the model reads when the user cancels, as configured here.
const CANCELLED: &str = "The user closed the scheduler without picking a time.";

/// The model's call of the scheduler in most tests.
const ASK_ARGS: &str = r#"{"topic":"the design review","slots":["Mon 10:00","Tue 14:00"]}"#;

fn slot_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "chosen_time": {"type": "string", "minLength": 1},
            "chosen_label": {"type": "string"},
        },
        "required": ["chosen_time"],
        "additionalProperties": false,
    })
}

/// `choose_meeting_time`: asks for a slot, with a templated question.
fn scheduler_tool() -> ToolSettings {
    ToolSettings {
        name: "choose_meeting_time".into(),
        description: "Ask the user to pick a time for a meeting.".into(),
        parameters: Some(json!({
            "type": "object",
            "properties": {
                "topic": {"type": "string"},
                "slots": {"type": "array", "items": {"type": "string"}},
            },
        })),
        approval: ApprovalPolicySetting::default(),
        allow_edit: false,
        approval_message: None,
        background: false,
        kind: ToolKindSettings::Input {
            response_schema: slot_schema(),
            message: Some("When should we hold {topic}?".into()),
            cancelled_result: Some(CANCELLED.into()),
        },
    }
}

/// `choose_room`: a second question, with the default question (the call's `question`).
fn room_tool() -> ToolSettings {
    ToolSettings {
        name: "choose_room".into(),
        description: "Ask the user which room to book.".into(),
        parameters: None,
        approval: ApprovalPolicySetting::default(),
        allow_edit: false,
        approval_message: None,
        background: false,
        kind: ToolKindSettings::Input {
            response_schema: json!({"type": "object", "properties": {"room": {"enum": ["A", "B"]}}, "required": ["room"]}),
            message: None,
            cancelled_result: None,
        },
    }
}

async fn scheduler_app() -> TestApp {
    spawn_app(|settings| with_tools(settings, vec![scheduler_tool(), room_tool()])).await
}

/// Run 1: the model asks for a slot (`call_1`); returns the run's events and the client's
/// history after it.
async fn asked(app: &TestApp, body: impl Fn(Vec<Value>) -> Value) -> (Vec<Value>, Vec<Value>) {
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "choose_meeting_time", ASK_ARGS)],
        false,
    )));
    let question = user("Set up the design review.");
    let events = app.run_events("/", &body(vec![question.clone()])).await;
    assert_well_formed(&events);
    let history = client_history(&[question], &events);
    (events, history)
}

/// Counts the results for `call_id` over every run's events.
fn results_for(runs: &[&[Value]], call_id: &str) -> usize {
    runs.iter()
        .flat_map(|events| results(events))
        .filter(|(id, _)| id == call_id)
        .count()
}

#[tokio::test]
async fn a_question_interrupts_and_its_answer_is_the_result_once_over_later_runs() {
    let app = scheduler_app().await;

    // Run 1: the call is streamed, then the run ends asking.
    let (run1, history) = asked(&app, input).await;
    assert!(results(&run1).is_empty(), "{:?}", types(&run1));
    let all = interrupts(&run1);
    assert_eq!(all.len(), 1, "{all:?}");
    let interrupt = &all[0];
    assert_eq!(interrupt["reason"], "input_required", "{interrupt}");
    assert_eq!(interrupt["toolCallId"], "call_1");
    assert_eq!(
        interrupt["message"],
        "When should we hold the design review?"
    );
    assert_eq!(interrupt["responseSchema"], slot_schema());
    assert!(interrupt["expiresAt"].is_string(), "{interrupt}");
    assert_eq!(
        interrupt["metadata"]["agui-host"],
        json!({"tool": "choose_meeting_time", "arguments": serde_json::from_str::<Value>(ASK_ARGS).unwrap()}),
        "the page gets what the model proposed: {interrupt}"
    );
    let id = interrupt_id(&run1, "call_1");

    // Run 2: the answer is the call's result, and the model goes on from it.
    let answer = json!({"chosen_time": "Tue 14:00", "chosen_label": "Tuesday afternoon"});
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Booked for Tuesday."])));
    let resume = json!([resolved(&id, answer.clone())]);
    let run2 = app
        .run_events("/", &resume_input(history.clone(), resume.clone()))
        .await;
    assert_well_formed(&run2);
    assert_success(&run2);
    assert!(
        of_type(&run2, "TOOL_CALL_START").is_empty(),
        "the call is answered, not streamed again: {:?}",
        types(&run2)
    );
    let result: Value = serde_json::from_str(&result_for(&run2, "call_1")).unwrap();
    assert_eq!(result, answer);
    assert_eq!(the_text(&run2), "Booked for Tuesday.");
    let bodies = app.upstream_bodies();
    let heard = crate::approvals::upstream_answer(&bodies[1], "call_1");
    assert_eq!(
        serde_json::from_str::<Value>(&content_text(heard)).unwrap(),
        answer,
        "the model reads the answer as the call's result"
    );

    // Runs 3 and 4: the conversation goes on with the history the client keeps.
    let mut kept = client_history(&history, &run2);
    kept.push(user("Thanks. Who is invited?"));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["The whole team."])));
    let mut body = input(kept.clone());
    body["runId"] = json!("r3");
    let run3 = app.run_events("/", &body).await;
    assert_success(&run3);
    let mut kept = client_history(&kept, &run3);
    kept.push(user("And the agenda?"));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Three items."])));
    let mut body = input(kept.clone());
    body["runId"] = json!("r4");
    let run4 = app.run_events("/", &body).await;
    assert_success(&run4);

    // Run 5: the same answer replayed, on the history as the client keeps it, changes nothing.
    let kept = client_history(&kept, &run4);
    app.fake.push(Reply::Sse(chunks::text_reply(&["Noted."])));
    let mut body = resume_input(kept, resume);
    body["runId"] = json!("r5");
    let run5 = app.run_events("/", &body).await;
    assert_well_formed(&run5);
    assert_eq!(last(&run5)["type"], "RUN_FINISHED", "{:?}", types(&run5));
    assert_eq!(
        results_for(&[&run1, &run2, &run3, &run4, &run5], "call_1"),
        1,
        "the answer is the call's result once"
    );
    for body in app.upstream_bodies() {
        let answered = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool" && m["tool_call_id"] == "call_1")
            .count();
        assert!(answered <= 1, "the model hears the answer once: {body}");
    }
    assert_provider_saw_clean_histories(&app);
}

#[tokio::test]
async fn an_answer_replayed_on_a_truncated_history_is_not_a_second_result() {
    let app = scheduler_app().await;
    let (run1, history) = asked(&app, input).await;
    let id = interrupt_id(&run1, "call_1");
    let resume = json!([resolved(&id, json!({"chosen_time": "Mon 10:00"}))]);
    app.fake.push(Reply::Sse(chunks::text_reply(&["Monday."])));
    let run2 = app
        .run_events("/", &resume_input(history.clone(), resume.clone()))
        .await;
    assert_success(&run2);

    // The client lost run 2 and sends the answer again on the history from before it: the
    // thread's record and its decision ledger know the call was answered.
    app.fake.push(Reply::Sse(chunks::text_reply(&["Monday."])));
    let mut body = resume_input(history, resume);
    body["runId"] = json!("r3");
    let run3 = app.run_events("/", &body).await;
    assert_well_formed(&run3);
    assert_eq!(last(&run3)["type"], "RUN_FINISHED", "{:?}", types(&run3));
    assert_eq!(
        results_for(&[&run2, &run3], "call_1"),
        1,
        "the replay streams no second result: {:?}",
        types(&run3)
    );
    for body in app.upstream_bodies() {
        let answers: Vec<&Value> = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool" && m["tool_call_id"] == "call_1")
            .collect();
        assert!(answers.len() <= 1, "{body}");
        for answer in answers {
            assert_eq!(
                serde_json::from_str::<Value>(&content_text(answer)).ok(),
                Some(json!({"chosen_time": "Mon 10:00"})),
                "the model only ever hears the one answer: {body}"
            );
        }
    }
    assert_provider_saw_clean_histories(&app);
}

#[tokio::test]
async fn an_invalid_answer_is_refused_and_can_be_sent_again_corrected() {
    let app = scheduler_app().await;
    let (run1, history) = asked(&app, input).await;
    let id = interrupt_id(&run1, "call_1");

    for (n, wrong) in [
        json!({"chosen_time": ""}),
        json!({"chosen_label": "no time"}),
        json!({"chosen_time": "Mon 10:00", "extra": true}),
        json!("Mon 10:00"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut body = resume_input(history.clone(), json!([resolved(&id, wrong.clone())]));
        body["runId"] = json!(format!("bad{n}"));
        let events = app.run_events("/", &body).await;
        assert_refused(&events, "invalid_resume_payload");
        let message = last(&events)["message"].as_str().unwrap().to_owned();
        assert!(
            message.contains("response schema"),
            "the error says what is wrong with {wrong}: {message}"
        );
    }
    let mut body = resume_input(
        history.clone(),
        json!([{"interruptId": id, "status": "resolved"}]),
    );
    body["runId"] = json!("no-payload");
    assert_refused(&app.run_events("/", &body).await, "invalid_resume_payload");
    assert_eq!(
        app.upstream_bodies().len(),
        1,
        "no model call for a refused answer"
    );

    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Monday it is."])));
    let events = app
        .run_events(
            "/",
            &resume_input(
                history,
                json!([resolved(&id, json!({"chosen_time": "Mon 10:00"}))]),
            ),
        )
        .await;
    assert_success(&events);
    assert_eq!(
        serde_json::from_str::<Value>(&result_for(&events, "call_1")).unwrap(),
        json!({"chosen_time": "Mon 10:00"})
    );
}

#[tokio::test]
async fn an_expired_question_is_refused() {
    let app = spawn_app(|settings| {
        with_tools(settings, vec![scheduler_tool()]);
        let name = settings.default_agent.clone();
        settings.agents.get_mut(&name).unwrap().approval.ttl_secs = 1;
    })
    .await;
    let (run1, history) = asked(&app, input).await;
    let id = interrupt_id(&run1, "call_1");
    tokio::time::sleep(std::time::Duration::from_millis(2200)).await;
    let events = app
        .run_events(
            "/",
            &resume_input(
                history,
                json!([resolved(&id, json!({"chosen_time": "Mon 10:00"}))]),
            ),
        )
        .await;
    assert_refused(&events, "interrupt_expired");
}

#[tokio::test]
async fn a_cancelled_question_tells_the_model() {
    let app = scheduler_app().await;
    let (run1, history) = asked(&app, input).await;
    let id = interrupt_id(&run1, "call_1");
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["No meeting then."])));
    let events = app
        .run_events("/", &resume_input(history, json!([cancelled(&id)])))
        .await;
    assert_success(&events);
    assert_eq!(result_for(&events, "call_1"), CANCELLED);
    let bodies = app.upstream_bodies();
    assert_eq!(
        content_text(crate::approvals::upstream_answer(&bodies[1], "call_1")),
        CANCELLED
    );
}

#[tokio::test]
async fn two_questions_in_one_turn_need_both_answers() {
    let app = scheduler_app().await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[
            ("call_1", "choose_meeting_time", ASK_ARGS),
            ("call_2", "choose_room", r#"{"question":"Which room?"}"#),
        ],
        false,
    )));
    let question = user("Book the review and a room.");
    let run1 = app.run_events("/", &input(vec![question.clone()])).await;
    assert_well_formed(&run1);
    let all = interrupts(&run1);
    assert_eq!(all.len(), 2, "{all:?}");
    let room = all.iter().find(|i| i["toolCallId"] == "call_2").unwrap();
    assert_eq!(
        room["message"], "Which room?",
        "the call's own question: {room}"
    );
    assert_eq!(room["reason"], "input_required");
    let history = client_history(&[question], &run1);
    let slot_id = interrupt_id(&run1, "call_1");
    let room_id = interrupt_id(&run1, "call_2");

    // One answer alone leaves the other question open.
    let mut body = resume_input(
        history.clone(),
        json!([resolved(&slot_id, json!({"chosen_time": "Mon 10:00"}))]),
    );
    body["runId"] = json!("half");
    assert_refused(&app.run_events("/", &body).await, "interrupt_unanswered");

    app.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));
    let events = app
        .run_events(
            "/",
            &resume_input(
                history,
                json!([
                    resolved(&slot_id, json!({"chosen_time": "Mon 10:00"})),
                    resolved(&room_id, json!({"room": "B"})),
                ]),
            ),
        )
        .await;
    assert_success(&events);
    assert_eq!(
        serde_json::from_str::<Value>(&result_for(&events, "call_2")).unwrap(),
        json!({"room": "B"})
    );
    assert_eq!(results(&events).len(), 2);
    assert_provider_saw_clean_histories(&app);
}

/// The `request_input` call a 0.x run asked with: its id and arguments.
#[track_caller]
fn request_input_call(events: &[Value]) -> (String, Value) {
    assert_well_formed(events);
    assert_0x_compatible(events);
    let start = of_type(events, "TOOL_CALL_START")
        .into_iter()
        .find(|e| e["toolCallName"] == "request_input")
        .unwrap_or_else(|| panic!("a request_input call: {:?}", types(events)));
    let id = start["toolCallId"].as_str().unwrap().to_owned();
    assert_eq!(
        start["parentMessageId"],
        of_type(events, "TOOL_CALL_START")[0]["parentMessageId"],
        "filed under the assistant message of the call it asks about"
    );
    let arguments: Value = serde_json::from_str(&tool_args(events)[&id]).unwrap();
    assert!(
        last(events).get("outcome").is_none(),
        "0.x clients get no outcome"
    );
    (id, arguments)
}

#[tokio::test]
async fn a_0x_client_is_asked_through_a_request_input_tool_call() {
    let app = scheduler_app().await;
    let (run1, history) = asked(&app, input_0x).await;
    let (ask_id, ask) = request_input_call(&run1);
    assert_eq!(ask["toolCallId"], "call_1");
    assert_eq!(ask["toolName"], "choose_meeting_time");
    assert_eq!(ask["message"], "When should we hold the design review?");
    assert_eq!(ask["responseSchema"], slot_schema());
    assert_eq!(
        ask["arguments"],
        serde_json::from_str::<Value>(ASK_ARGS).unwrap()
    );

    // The page answers with the form as it is.
    let answers = [
        (
            r#"{"chosen_time":"Tue 14:00"}"#,
            json!({"chosen_time": "Tue 14:00"}).to_string(),
        ),
        (
            r#"{"answer":{"chosen_time":"Mon 10:00"}}"#,
            json!({"chosen_time": "Mon 10:00"}).to_string(),
        ),
        (r#"{"cancelled":true}"#, CANCELLED.to_owned()),
        // An answer that fails the schema cannot be asked again inside a 0.x conversation:
        // the model is told the question went unanswered.
        (r#"{"chosen_time":42}"#, CANCELLED.to_owned()),
    ];
    // No thread store, so each answer is taken on the same history as if it were the first.
    let app_without_store = spawn_app(|settings| {
        with_tools(settings, vec![scheduler_tool()]);
        settings.threads.store = agui_host::settings::ThreadStoreKind::Off;
    })
    .await;
    let (run1_off, history_off) = asked(&app_without_store, input_0x).await;
    let (ask_id_off, _) = request_input_call(&run1_off);
    for (n, (answer, expected)) in answers.into_iter().enumerate() {
        let mut answered = history_off.clone();
        answered.push(tool_result(&ask_id_off, answer));
        let mut body = input_0x(answered);
        body["runId"] = json!(format!("r{n}"));
        app_without_store
            .fake
            .push(Reply::Sse(chunks::text_reply(&["Ok."])));
        let events = app_without_store.run_events("/", &body).await;
        assert_well_formed(&events);
        assert_0x_compatible(&events);
        assert_eq!(result_for(&events, "call_1"), expected, "answer {answer}");
        let bodies = app_without_store.upstream_bodies();
        let raw = bodies.last().unwrap().to_string();
        assert!(
            !raw.contains("request_input") && !raw.contains(&ask_id_off),
            "the input protocol never reaches the model: {raw}"
        );
    }

    // With the store, the answer is the call's result once over later runs.
    let mut answered = history;
    answered.push(tool_result(&ask_id, r#"{"chosen_time":"Tue 14:00"}"#));
    let mut body = input_0x(answered.clone());
    body["runId"] = json!("r2");
    app.fake.push(Reply::Sse(chunks::text_reply(&["Tuesday."])));
    let run2 = app.run_events("/", &body).await;
    assert_well_formed(&run2);
    assert_eq!(
        serde_json::from_str::<Value>(&result_for(&run2, "call_1")).unwrap(),
        json!({"chosen_time": "Tue 14:00"})
    );
    let mut kept = client_history(&answered, &run2);
    kept.push(user("Thanks."));
    let mut body = input_0x(kept);
    body["runId"] = json!("r3");
    app.fake.push(Reply::Sse(chunks::text_reply(&["Welcome."])));
    let run3 = app.run_events("/", &body).await;
    assert_well_formed(&run3);
    assert!(results(&run3).is_empty(), "{:?}", types(&run3));
    assert_provider_saw_clean_histories(&app);
}

#[tokio::test]
async fn an_input_tool_takes_no_approval_and_needs_an_object_schema() {
    for (tool, says) in [
        (
            ToolSettings {
                approval: ApprovalPolicySetting::Fixed(FixedApproval::Always),
                ..scheduler_tool()
            },
            "asks the user itself",
        ),
        (
            ToolSettings {
                kind: ToolKindSettings::Input {
                    response_schema: json!(true),
                    message: None,
                    cancelled_result: None,
                },
                ..scheduler_tool()
            },
            "response_schema must be a JSON Schema object",
        ),
    ] {
        let fake = crate::fake_llm::FakeLlm::start().await;
        let mut settings = test_settings(&fake);
        with_tools(&mut settings, vec![tool]);
        let Err(error) = agui_host::app::App::build(settings).await else {
            panic!("refused at start-up");
        };
        let error = error.to_string();
        assert!(error.contains(says), "{error}");
    }
}

#[tokio::test]
async fn capabilities_list_input_tools_and_interrupts() {
    let app = scheduler_app().await;
    let caps: Value = app
        .client
        .get(format!("{}/assistant/capabilities", app.address))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(caps["humanInTheLoop"]["interrupts"], true, "{caps}");
    assert_eq!(caps["humanInTheLoop"]["approvals"], false, "{caps}");
    let inputs = caps["custom"]["agui-host"]["inputTools"]
        .as_array()
        .unwrap_or_else(|| panic!("input tools: {caps}"));
    let names: Vec<&Value> = inputs.iter().map(|tool| &tool["name"]).collect();
    assert_eq!(
        names,
        [&json!("choose_meeting_time"), &json!("choose_room")]
    );
    assert_eq!(inputs[0]["responseSchema"], slot_schema());
}
