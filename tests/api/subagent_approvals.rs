//! Approvals inside a subagent, over the runs that follow them: the child's approval interrupts
//! the whole run (attributed to the child, which ends suspended), the answer resumes the child
//! under the same run id, and the approved call runs once, counted at the tool service,
//! whatever is replayed after it, on one replica or another (over Redis). Approved, rejected,
//! replayed; for a 1.0 client attributed and inline, and for a 0.x client; a grandchild's; an
//! input tool's question and an MCP server's inside a child. And a child that calls the
//! client's tools, resumed by the client's results on the next run.

use agui_host::settings::{Settings, ThreadStoreKind};
use serde_json::{json, Value};

use crate::approvals::{
    always, approval_call_id, assert_success, http_tool, interrupts, resolved, ToolService,
};
use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::redis_server::RedisServer;
use crate::subagents::{client_history, position, started, task, travel};
use crate::verify::{assert_0x_compatible, assert_well_formed};

const BOOKING: &str = r#"{"hotel":"Grand Hotel","nights":2}"#;

/// `planner` delegating to `hotels`, which searches (a server tool) and books (an `http` tool
/// to `service` that needs approval).
fn hotels_that_book(settings: &mut Settings, service: &ToolService, planner: Value) {
    travel(settings, planner);
    let hotels = settings.agents.get_mut("hotels").unwrap();
    hotels.tools = vec![
        static_tool("search_hotels", json!({"hotels": ["Grand Hotel"]})),
        http_tool(
            service,
            "book_hotel",
            json!({"type": "object", "properties": {"hotel": {"type": "string"}, "nights": {"type": "integer"}}}),
            always(),
            false,
        ),
    ];
}

/// Scripts run 1: the parent calls `hotels`, which searches, then asks to book.
fn script_asking(app: &TestApp) {
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "hotels", &task("Book two nights in Rome"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("c1", "search_hotels", "{}")],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("c2", "book_hotel", BOOKING)],
        false,
    )));
}

/// Scripts the resumed run: the child answers, then the parent.
fn script_resumed(app: &TestApp, child: &str, parent: &str) {
    app.fake.push(Reply::Sse(chunks::text_reply(&[child])));
    app.fake.push(Reply::Sse(chunks::text_reply(&[parent])));
}

fn with_run(mut body: Value, run: &str) -> Value {
    body["runId"] = json!(run);
    body
}

fn resume_body(history: Vec<Value>, id: &str, payload: Value, run: &str) -> Value {
    let mut body = with_run(input(history), run);
    body["resume"] = json!([resolved(id, payload)]);
    body
}

/// Answers `interrupt` (which ended `events`, the run after `sent`) with `payload`, as run
/// `run`, on the history the client keeps: the resumed run's events, checked to succeed.
async fn answer(
    app: &TestApp,
    sent: &[Value],
    events: &[Value],
    interrupt: &Value,
    payload: Value,
    run: &str,
) -> Vec<Value> {
    let id = interrupt["id"].as_str().unwrap();
    let body = resume_body(client_history(sent, events), id, payload, run);
    let resumed = app.run_events("/planner", &body).await;
    assert_well_formed(&resumed);
    assert_success(&resumed);
    resumed
}

/// Run 1 for a 1.0 client: the child's interrupt ends the run. Returns the events, the
/// interrupt and the child's run id.
async fn asked(app: &TestApp, sent: &[Value]) -> (Vec<Value>, Value, String) {
    script_asking(app);
    let events = app
        .run_events("/planner", &with_run(input(sent.to_vec()), "r1"))
        .await;
    assert_well_formed(&events);
    let all = interrupts(&events);
    assert_eq!(all.len(), 1, "{all:?}");
    let subagent = started(&events, "hotels")["subagentRunId"]
        .as_str()
        .unwrap()
        .to_owned();
    (events, all[0].clone(), subagent)
}

#[tokio::test]
async fn a_childs_approval_interrupts_the_run_and_the_answer_resumes_the_child_once() {
    let service = ToolService::start().await;
    let app = spawn_app(|s| hotels_that_book(s, &service, json!({}))).await;
    let sent = vec![user("Find me a hotel in Rome")];
    let (events, interrupt, subagent) = asked(&app, &sent).await;

    // The interrupt is the child's: its call, its run id, its question.
    assert_eq!(interrupt["reason"], "tool_call");
    assert_eq!(interrupt["subagentRunId"], subagent.as_str());
    assert_eq!(interrupt["toolCallId"], format!("{subagent}.c2"));
    assert_eq!(
        interrupt["responseSchema"]["required"],
        json!(["approved"]),
        "{interrupt}"
    );
    let about = &interrupt["metadata"]["agui-host"];
    assert_eq!(about["agent"], "hotels");
    assert_eq!(about["tool"], "book_hotel");
    assert_eq!(
        about["arguments"],
        serde_json::from_str::<Value>(BOOKING).unwrap()
    );
    // The child ends suspended, naming the question, and nothing ran.
    let finished = position(&events, |e| e["type"] == "SUBAGENT_FINISHED");
    assert_eq!(events[finished]["subagentRunId"], subagent.as_str());
    assert_eq!(
        events[finished]["outcome"],
        json!({"type": "suspended", "interruptIds": [interrupt["id"]]})
    );
    assert!(
        !events
            .iter()
            .any(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1"),
        "the parent's call waits"
    );
    assert_eq!(service.total(), 0, "nothing runs before the answer");
    assert_eq!(app.upstream_bodies().len(), 3, "parent, child, child");

    // Run 2: approved. The child goes on under the same run id; the booking runs once.
    let history = client_history(&sent, &events);
    let id = interrupt["id"].as_str().unwrap();
    script_resumed(&app, "Booked the Grand Hotel.", "Your room is booked.");
    let approved = json!({"approved": true});
    let resumed = answer(&app, &sent, &events, &interrupt, approved, "r2").await;
    assert_eq!(
        started(&resumed, "hotels")["subagentRunId"],
        subagent.as_str()
    );
    assert_eq!(started(&resumed, "hotels")["parentToolCallId"], "call_1");
    let booked = position(&resumed, |e| {
        e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == format!("{subagent}.c2")
    });
    assert_eq!(resumed[booked]["subagentRunId"], subagent.as_str());
    let done = position(&resumed, |e| e["type"] == "SUBAGENT_FINISHED");
    assert_eq!(resumed[done]["outcome"], json!({"type": "success"}));
    let result = position(&resumed, |e| {
        e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1"
    });
    assert!(booked < done && done < result);
    assert_eq!(resumed[result]["content"], "Booked the Grand Hotel.");
    assert_eq!(
        service.calls_of("book_hotel"),
        [serde_json::from_str::<Value>(BOOKING).unwrap()]
    );
    // The child continued its own conversation: its search, its call and the booking's result.
    let bodies = app.upstream_bodies();
    let child = &bodies[3];
    assert_eq!(
        roles(child),
        ["system", "user", "assistant", "tool", "assistant", "tool"]
    );
    assert_eq!(child["messages"][1]["content"], "Book two nights in Rome");
    assert_tool_calls_answered(child);
    let parent = &bodies[4];
    assert_eq!(roles(parent), ["system", "user", "assistant", "tool"]);
    assert_tool_calls_answered(parent);

    // Run 3: the user goes on with what the client holds; nothing is booked again.
    let mut history = client_history(&history, &resumed);
    history.push(user("Thanks!"));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Enjoy Rome."])));
    let next = app
        .run_events("/planner", &with_run(input(history.clone()), "r3"))
        .await;
    assert_well_formed(&next);
    assert_success(&next);
    assert!(of_type(&next, "TOOL_CALL_RESULT").is_empty());

    // Run 4: the answer replayed, with the history of run 1 (a client that lost run 2's
    // response): the decision was acted on, so nothing runs and the child is not resumed.
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Already booked."])));
    let replay = resume_body(
        client_history(&sent, &events),
        id,
        json!({"approved": true}),
        "r4",
    );
    let replayed = app.run_events("/planner", &replay).await;
    assert_well_formed(&replayed);
    assert!(
        !replayed.iter().any(|e| e["type"] == "SUBAGENT_STARTED"),
        "{:?}",
        types(&replayed)
    );
    assert_eq!(service.calls_of("book_hotel").len(), 1, "booked once");
}

#[tokio::test]
async fn a_rejected_childs_approval_runs_nothing_and_the_child_hears_it() {
    let service = ToolService::start().await;
    let app = spawn_app(|s| {
        hotels_that_book(s, &service, json!({}));
        // The child's questions expire sooner than the parent's would.
        s.agents.get_mut("hotels").unwrap().approval.ttl_secs = 600;
    })
    .await;
    let sent = vec![user("Find me a hotel in Rome")];
    let (events, interrupt, subagent) = asked(&app, &sent).await;
    let expires = unix_seconds(interrupt["expiresAt"].as_str().unwrap());
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        (now + 500..now + 700).contains(&expires),
        "the child's expiry is shown: {interrupt}"
    );
    script_resumed(&app, "I did not book it.", "Nothing was booked.");
    let resumed = answer(
        &app,
        &sent,
        &events,
        &interrupt,
        json!({"approved": false}),
        "r2",
    )
    .await;
    assert_eq!(
        started(&resumed, "hotels")["subagentRunId"],
        subagent.as_str()
    );
    assert_eq!(service.total(), 0, "a rejected booking never runs");
    // The child's model is told, and answers the parent.
    let child = &app.upstream_bodies()[3];
    let last = child["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "tool");
    assert_eq!(last["tool_call_id"], "c2");
    let result = position(&resumed, |e| {
        e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1"
    });
    assert_eq!(resumed[result]["content"], "I did not book it.");
}

#[tokio::test]
async fn an_answer_that_does_not_fit_the_childs_question_is_refused_and_the_question_stands() {
    let service = ToolService::start().await;
    let app = spawn_app(|s| hotels_that_book(s, &service, json!({}))).await;
    let sent = vec![user("Find me a hotel in Rome")];
    let (events, interrupt, _) = asked(&app, &sent).await;
    let history = client_history(&sent, &events);
    let id = interrupt["id"].as_str().unwrap();
    let body = resume_body(history.clone(), id, json!({"approved": "yes"}), "r2");
    let refused = app.run_events("/planner", &body).await;
    assert_eq!(last(&refused)["type"], "RUN_ERROR");
    assert_eq!(last(&refused)["code"], "invalid_resume_payload");
    assert_eq!(service.total(), 0);
    // The same question, answered properly, still works.
    script_resumed(&app, "Booked.", "Booked.");
    let body = resume_body(history, id, json!({"approved": true}), "r3");
    assert_success(&app.run_events("/planner", &body).await);
    assert_eq!(service.total(), 1);
}

#[tokio::test]
async fn inline_a_childs_approval_is_asked_as_the_parents_call_for_both_generations() {
    let service = ToolService::start().await;
    let app = spawn_app(|s| {
        hotels_that_book(s, &service, json!({"subagent_visibility": "inline"}));
    })
    .await;
    // 1.0, inline: no subagent events; the interrupt names the parent's call.
    script_asking(&app);
    let sent = vec![user("Find me a hotel in Rome")];
    let events = app
        .run_events("/planner", &with_run(input(sent.clone()), "r1"))
        .await;
    assert_well_formed(&events);
    assert!(!events.iter().any(|e| e.get("subagentRunId").is_some()));
    let interrupt = interrupts(&events)[0].clone();
    assert_eq!(interrupt["toolCallId"], "call_1");
    assert!(interrupt.get("subagentRunId").is_none(), "{interrupt}");
    let waiting = of_type(&events, "ACTIVITY_SNAPSHOT")
        .into_iter()
        .rfind(|e| e["activityType"] == "agui-host.subagent")
        .unwrap()
        .clone();
    assert_eq!(waiting["content"]["status"], "waiting");
    script_resumed(&app, "Booked.", "Done.");
    let resumed = answer(
        &app,
        &sent,
        &events,
        &interrupt,
        json!({"approved": true}),
        "r2",
    )
    .await;
    assert_eq!(service.total(), 1);
    let done = of_type(&resumed, "ACTIVITY_SNAPSHOT")
        .into_iter()
        .rfind(|e| e["activityType"] == "agui-host.subagent")
        .unwrap()
        .clone();
    assert_eq!(done["content"]["status"], "finished", "{done}");

    // 0.x: an approval call the page knows, naming the child's tool and arguments; the answer
    // is a tool message, and the run after it goes on.
    script_asking(&app);
    let sent = vec![user("Another hotel, please")];
    let mut body = input_0x(sent.clone());
    body["threadId"] = json!("t-0x");
    let events = app.run_events("/planner", &body).await;
    assert_well_formed(&events);
    assert_0x_compatible(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    let call = approval_call_id(&events);
    let args: Value = serde_json::from_str(&tool_args(&events)[&call]).unwrap();
    assert_eq!(args["toolCallId"], "call_1");
    assert_eq!(args["toolName"], "book_hotel");
    assert_eq!(args["agent"], "hotels");
    assert_eq!(
        args["arguments"],
        serde_json::from_str::<Value>(BOOKING).unwrap()
    );
    let mut history = crate::approvals::client_history(&sent, &events);
    history.push(tool_result(&call, r#"{"approved":true}"#));
    script_resumed(&app, "Booked again.", "Done again.");
    let mut answer = input_0x(history.clone());
    answer["threadId"] = json!("t-0x");
    answer["runId"] = json!("r-0x-2");
    let resumed = app.run_events("/planner", &answer).await;
    assert_well_formed(&resumed);
    assert_0x_compatible(&resumed);
    assert_eq!(service.total(), 2);
    let result = position(&resumed, |e| {
        e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1"
    });
    assert_eq!(resumed[result]["content"], "Booked again.");
    // The run after: nothing is booked again.
    let mut history = crate::approvals::client_history(&history, &resumed);
    history.push(user("Thanks"));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Bye."])));
    let mut next = input_0x(history);
    next["threadId"] = json!("t-0x");
    next["runId"] = json!("r-0x-3");
    let next = app.run_events("/planner", &next).await;
    assert_well_formed(&next);
    assert_eq!(last(&next)["type"], "RUN_FINISHED");
    assert_eq!(service.total(), 2);
}

/// Unix seconds of an ISO 8601 UTC time (`2026-12-05T14:40:00Z`).
fn unix_seconds(iso: &str) -> i64 {
    let part = |range: std::ops::Range<usize>| iso[range].parse::<i64>().unwrap();
    let (year, month, day) = (part(0..4), part(5..7), part(8..10));
    // Days from the civil date (March-based years, as the proleptic Gregorian calendar).
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    let days = era * 146_097 + day_of_era - 719_468;
    days * 86_400 + part(11..13) * 3_600 + part(14..16) * 60 + part(17..19)
}

const SHARED_KEY: &str = "an-approval-key-both-replicas-share-of-40-chars";

#[tokio::test]
async fn redis_a_childs_approval_resumes_on_another_replica_and_runs_once() {
    let redis = RedisServer::start().await;
    let service = ToolService::start().await;
    let replica = || {
        spawn_app(|s| {
            hotels_that_book(s, &service, json!({}));
            s.threads.store = ThreadStoreKind::Redis;
            s.threads.redis_url = redis.url();
            s.security.approval_keys = vec![SHARED_KEY.into()];
        })
    };
    let a = replica().await;
    let b = replica().await;
    let sent = vec![user("Find me a hotel in Rome")];
    let (events, interrupt, subagent) = asked(&a, &sent).await;
    let history = client_history(&sent, &events);
    let id = interrupt["id"].as_str().unwrap();

    // Answered on the other replica: the child resumes there, under its run id.
    script_resumed(&b, "Booked on b.", "Done on b.");
    let approved = json!({"approved": true});
    let resumed = answer(&b, &sent, &events, &interrupt, approved, "r2").await;
    assert_eq!(
        started(&resumed, "hotels")["subagentRunId"],
        subagent.as_str()
    );
    assert_eq!(service.total(), 1);

    // Replayed on the first replica, with the history it last sent: the ledger says no.
    a.fake
        .push(Reply::Sse(chunks::text_reply(&["Already done."])));
    let replayed = a
        .run_events(
            "/planner",
            &resume_body(history, id, json!({"approved": true}), "r3"),
        )
        .await;
    assert_well_formed(&replayed);
    assert!(!replayed.iter().any(|e| e["type"] == "SUBAGENT_STARTED"));
    assert_eq!(service.total(), 1, "booked once across replicas");
}

#[tokio::test]
async fn a_grandchilds_approval_passes_up_through_its_parent_and_resumes_both() {
    let service = ToolService::start().await;
    let app = spawn_app(|s| {
        hotels_that_book(s, &service, json!({"subagents": ["flights"]}));
        // planner -> flights -> hotels: the grandchild books.
        s.agents.get_mut("flights").unwrap().subagents = vec!["hotels".into()];
    })
    .await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("Fly to Rome and book a hotel"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("f1", "hotels", &task("Book two nights in Rome"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("c1", "book_hotel", BOOKING)],
        false,
    )));
    let sent = vec![user("Trip to Rome")];
    let events = app
        .run_events("/planner", &with_run(input(sent.clone()), "r1"))
        .await;
    assert_well_formed(&events);
    let child = started(&events, "flights")["subagentRunId"].clone();
    let grandchild = started(&events, "hotels")["subagentRunId"].clone();
    let interrupt = interrupts(&events)[0].clone();
    assert_eq!(interrupt["subagentRunId"], grandchild);
    assert_eq!(
        interrupt["toolCallId"],
        format!("{}.c1", grandchild.as_str().unwrap())
    );
    assert_eq!(
        interrupt["metadata"]["agui-host"]["subagents"],
        json!([child, grandchild])
    );
    // Both end suspended, each naming the question.
    let suspended: Vec<&Value> = of_type(&events, "SUBAGENT_FINISHED");
    assert_eq!(suspended.len(), 2);
    for finished in suspended {
        assert_eq!(
            finished["outcome"]["interruptIds"],
            json!([interrupt["id"]])
        );
    }

    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Hotel booked."])));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Flight and hotel done."])));
    app.fake.push(Reply::Sse(chunks::text_reply(&["All set."])));
    let resumed = answer(
        &app,
        &sent,
        &events,
        &interrupt,
        json!({"approved": true}),
        "r2",
    )
    .await;
    assert_eq!(started(&resumed, "flights")["subagentRunId"], child);
    assert_eq!(started(&resumed, "hotels")["subagentRunId"], grandchild);
    assert_eq!(service.total(), 1);
    let result = position(&resumed, |e| {
        e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1"
    });
    assert_eq!(resumed[result]["content"], "Flight and hotel done.");
}

#[tokio::test]
async fn a_childs_question_and_approval_in_one_turn_are_answered_together() {
    let service = ToolService::start().await;
    let app = spawn_app(|s| {
        hotels_that_book(s, &service, json!({}));
        let room = json!({
            "name": "choose_room", "description": "Asks which room.", "kind": "input",
            "response_schema": {"type": "object", "properties": {"room": {"enum": ["A", "B"]}}, "required": ["room"]},
        });
        let hotels = s.agents.get_mut("hotels").unwrap();
        hotels.tools.push(serde_json::from_value(room).unwrap());
    })
    .await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "hotels", &task("Book a room at the Grand"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[
            ("c1", "choose_room", r#"{"question":"Which room?"}"#),
            ("c2", "book_hotel", BOOKING),
        ],
        false,
    )));
    let sent = vec![user("A room at the Grand")];
    let events = app
        .run_events("/planner", &with_run(input(sent.clone()), "r1"))
        .await;
    assert_well_formed(&events);
    let subagent = started(&events, "hotels")["subagentRunId"].clone();
    let asked = interrupts(&events);
    assert_eq!(asked.len(), 2, "{asked:?}");
    let question = asked
        .iter()
        .find(|i| i["reason"] == "input_required")
        .unwrap();
    let approval = asked.iter().find(|i| i["reason"] == "tool_call").unwrap();
    for interrupt in [question, approval] {
        assert_eq!(interrupt["subagentRunId"], subagent);
    }
    assert_eq!(
        question["responseSchema"]["required"],
        json!(["room"]),
        "{question}"
    );
    assert_eq!(
        of_type(&events, "SUBAGENT_FINISHED")[0]["outcome"]["interruptIds"],
        json!([asked[0]["id"], asked[1]["id"]])
    );
    let history = client_history(&sent, &events);

    // One answer alone is refused: the child asked both at once.
    let mut partial = with_run(input(history.clone()), "r2");
    partial["resume"] = json!([resolved(
        approval["id"].as_str().unwrap(),
        json!({"approved": true})
    )]);
    let refused = app.run_events("/planner", &partial).await;
    assert_eq!(
        last(&refused)["code"],
        "interrupt_unanswered",
        "{refused:?}"
    );
    assert_eq!(service.total(), 0);

    script_resumed(&app, "Room A at the Grand is booked.", "Done.");
    let mut both = with_run(input(history), "r3");
    both["resume"] = json!([
        resolved(question["id"].as_str().unwrap(), json!({"room": "A"})),
        resolved(approval["id"].as_str().unwrap(), json!({"approved": true})),
    ]);
    let resumed = app.run_events("/planner", &both).await;
    assert_well_formed(&resumed);
    assert_success(&resumed);
    assert_eq!(service.total(), 1);
    let child = &app.upstream_bodies()[2];
    let answers: Vec<&Value> = child["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[0]["tool_call_id"], "c1");
    assert_eq!(
        serde_json::from_str::<Value>(answers[0]["content"].as_str().unwrap()).unwrap(),
        json!({"room": "A"})
    );
}

#[tokio::test]
async fn a_child_calls_a_client_tool_and_the_clients_result_resumes_it_on_the_next_run() {
    let app = spawn_app(|s| travel(s, json!({}))).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("Show Rome on the map"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[
            ("c1", "search_flights", "{}"),
            ("c2", "show_map", r#"{"city":"Rome"}"#),
        ],
        false,
    )));
    let sent = vec![user("Where is Rome?")];
    let mut body = with_run(input(sent.clone()), "r1");
    body["tools"] = json!([client_tool("show_map")]);
    let events = app.run_events("/planner", &body).await;
    assert_well_formed(&events);
    // The child was offered the client's tool, and its call waits for the client.
    let child = &app.upstream_bodies()[1];
    assert!(tool_names(child).contains(&"show_map"), "{child}");
    let subagent = started(&events, "flights")["subagentRunId"]
        .as_str()
        .unwrap()
        .to_owned();
    let call = format!("{subagent}.c2");
    let start = position(&events, |e| {
        e["type"] == "TOOL_CALL_START" && e["toolCallId"] == call.as_str()
    });
    assert_eq!(events[start]["subagentRunId"], subagent.as_str());
    assert_eq!(
        the(&events, "SUBAGENT_FINISHED")["outcome"],
        json!({"type": "suspended"})
    );
    // The client is told to run the child's call; the parent's call waits for the child.
    assert_eq!(
        last(&events)["outcome"],
        json!({"type": "success", "pendingToolCallIds": [call]})
    );
    assert!(!events
        .iter()
        .any(|e| e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1"));

    // Run 2: the client ran its tool; the child goes on under its run id.
    let mut history = client_history(&sent, &events);
    history.push(tool_result(&call, "The map shows Rome."));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Rome is on the map."])));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["There it is."])));
    let mut body = with_run(input(history.clone()), "r2");
    body["tools"] = json!([client_tool("show_map")]);
    let resumed = app.run_events("/planner", &body).await;
    assert_well_formed(&resumed);
    assert_success(&resumed);
    assert_eq!(
        started(&resumed, "flights")["subagentRunId"],
        subagent.as_str()
    );
    let child = &app.upstream_bodies()[2];
    assert_eq!(
        roles(child),
        ["system", "user", "assistant", "tool", "tool"],
        "{child}"
    );
    assert_tool_calls_answered(child);
    let result = position(&resumed, |e| {
        e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1"
    });
    assert_eq!(resumed[result]["content"], "Rome is on the map.");
    assert_eq!(last_text(&resumed), "There it is.");

    // Run 3: the user goes on; the child is not run again.
    let mut history = client_history(&history, &resumed);
    history.push(user("Thanks"));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Bye."])));
    let next = app
        .run_events("/planner", &with_run(input(history), "r3"))
        .await;
    assert_success(&next);
    assert!(!next.iter().any(|e| e["type"] == "SUBAGENT_STARTED"));
    assert_eq!(app.upstream_bodies().len(), 5);
}

#[tokio::test]
async fn a_child_is_offered_no_client_tools_when_the_client_does_not_see_its_calls() {
    let app = spawn_app(|s| travel(s, json!({"subagent_visibility": "inline"}))).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("Rome"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::text_reply(&["AF12."])));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Take AF12."])));
    let mut body = input(vec![user("Rome?")]);
    body["tools"] = json!([client_tool("show_map")]);
    let events = app.run_events("/planner", &body).await;
    assert_success(&events);
    let child = &app.upstream_bodies()[1];
    assert!(!tool_names(child).contains(&"show_map"), "{child}");
}

fn last_text(events: &[Value]) -> String {
    texts(events)
        .last()
        .map(|(_, t)| t.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn an_mcp_servers_question_inside_a_child_is_asked_and_the_answer_retries_its_call() {
    let mcp = crate::mcp::spawn_mcp_app(|s| {
        travel(s, json!({"subagents": ["diner"]}));
        let diner = json!({"description": "Books restaurants", "instructions": "You book tables."});
        let mut diner: agui_host::settings::AgentSettings = serde_json::from_value(diner).unwrap();
        diner.mcp_servers = vec![crate::mcp::test_server()];
        s.agents.insert("diner".into(), diner);
    })
    .await;
    let app = &mcp.app;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "diner", &task("A table at Chez Rust"))],
        false,
    )));
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("d1", "test__book_table", r#"{"restaurant": "Chez Rust"}"#)],
        false,
    )));
    let sent = vec![user("Dinner at Chez Rust?")];
    let events = app
        .run_events("/planner", &with_run(input(sent.clone()), "r1"))
        .await;
    assert_well_formed(&events);
    let subagent = started(&events, "diner")["subagentRunId"].clone();
    let asked = interrupts(&events);
    assert_eq!(asked.len(), 1, "{asked:?}");
    let question = &asked[0];
    assert_eq!(question["reason"], "input_required");
    assert_eq!(question["subagentRunId"], subagent);
    assert_eq!(question["responseSchema"]["required"], json!(["size"]));
    assert_eq!(question["metadata"]["agui-host"]["source"], "mcp");

    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Booked for four."])));
    app.fake.push(Reply::Sse(chunks::text_reply(&["Enjoy."])));
    let resumed = answer(
        app,
        &sent,
        &events,
        question,
        json!({"size": 4, "name": "Ada"}),
        "r2",
    )
    .await;
    let booked = position(&resumed, |e| {
        e["type"] == "TOOL_CALL_RESULT"
            && e["toolCallId"] == format!("{}.d1", subagent.as_str().unwrap())
    });
    assert_eq!(
        resumed[booked]["content"],
        "Booked a table for 4 at Chez Rust"
    );
    let result = position(&resumed, |e| {
        e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1"
    });
    assert_eq!(resumed[result]["content"], "Booked for four.");
    mcp.shut_down().await;
}

#[tokio::test]
async fn a_call_to_a_child_may_itself_need_approval_before_the_child_runs() {
    let app = spawn_app(|s| travel(s, json!({"subagent_approval": {"flights": "always"}}))).await;
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "flights", &task("A flight to Rome"))],
        false,
    )));
    let sent = vec![user("Rome?")];
    let events = app
        .run_events("/planner", &with_run(input(sent.clone()), "r1"))
        .await;
    assert_well_formed(&events);
    let interrupt = interrupts(&events)[0].clone();
    assert_eq!(interrupt["toolCallId"], "call_1");
    assert!(interrupt.get("subagentRunId").is_none());
    assert!(!events.iter().any(|e| e["type"] == "SUBAGENT_STARTED"));
    assert_eq!(
        app.upstream_bodies().len(),
        1,
        "the child waits for the approval"
    );

    app.fake.push(Reply::Sse(chunks::text_reply(&["AF12."])));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Take AF12."])));
    let resumed = answer(
        &app,
        &sent,
        &events,
        &interrupt,
        json!({"approved": true}),
        "r2",
    )
    .await;
    started(&resumed, "flights");
    let result = position(&resumed, |e| {
        e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == "call_1"
    });
    assert_eq!(resumed[result]["content"], "AF12.");

    let error = crate::subagents::refused(|s| {
        travel(s, json!({"subagent_approval": {"trains": "always"}}));
    })
    .await;
    assert!(error.contains("subagent_approval `trains`"), "{error}");
}
