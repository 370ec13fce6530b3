//! The demo routes of subagents, with the offline model: `subgraphs` (a travel supervisor whose
//! hotels agent asks before it books) and `deepagents_subagents` (a main agent with a research
//! and a critique agent), each over the runs that follow it, for both client generations.

use serde_json::{json, Value};

use crate::approvals::{approval_call_id, interrupts, resolved};
use crate::demo::apply_state;
use crate::demo_ui::{offline_demo, run};
use crate::helpers::*;
use crate::subagents::{client_history, position, started};

fn result_of(events: &[Value], call: &str) -> String {
    let at = position(events, |e| {
        e["type"] == "TOOL_CALL_RESULT" && e["toolCallId"] == call
    });
    events[at]["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn subgraphs_plans_with_three_agents_and_books_the_hotel_once_approved_for_a_1_0_client() {
    let app = offline_demo().await;
    let sent = vec![user("Help me plan a trip to San Francisco")];
    let mut body = input(sent.clone());
    body["state"] = json!({});
    let events = run(&app, "/subgraphs", &body).await;

    // The three agents run at once, each attributed.
    for name in ["travel_flights", "travel_hotels", "travel_experiences"] {
        started(&events, name);
    }
    let hotels = started(&events, "travel_hotels")["subagentRunId"].clone();
    let said: String = texts(&events).into_iter().map(|(_, t)| t).collect();
    assert!(said.contains("KLM") && said.contains("$652"), "{said}");
    assert!(said.contains("Golden Gate Bridge walk"), "{said}");
    // The hotels agent asks before it books: the run ends with its question.
    let asked = interrupts(&events);
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["subagentRunId"], hotels);
    assert_eq!(
        asked[0]["message"],
        "Book two nights at Hotel Zephyr for $289 a night?"
    );
    // What the children found is in the supervisor's state, each under its key.
    let state = apply_state(json!({}), &events);
    assert_eq!(state["flights"]["chosen"], "KLM", "{state}");
    assert_eq!(state["experiences"]["picks"][0], "Golden Gate Bridge walk");
    assert!(state.get("hotels").is_none(), "nothing booked yet: {state}");

    // Approved: the hotels agent books, and the supervisor sums up the three answers.
    let mut answer = input(client_history(&sent, &events));
    answer["runId"] = json!("r2");
    answer["state"] = state.clone();
    answer["resume"] = json!([resolved(
        asked[0]["id"].as_str().unwrap(),
        json!({"approved": true})
    )]);
    let resumed = run(&app, "/subgraphs", &answer).await;
    assert_eq!(last(&resumed)["outcome"]["type"], "success");
    assert_eq!(started(&resumed, "travel_hotels")["subagentRunId"], hotels);
    let state = apply_state(state, &resumed);
    assert_eq!(
        state["hotels"]["booked"]["confirmation"], "ZPH-4417",
        "{state}"
    );
    let summary = texts(&resumed).last().unwrap().1.clone();
    assert!(
        summary.contains("ZPH-4417") && summary.contains("KLM"),
        "{summary}"
    );

    // The next message goes on from what the client holds; nothing is booked again.
    let mut history = client_history(&client_history(&sent, &events), &resumed);
    history.push(user("Thanks!"));
    let mut next = input(history);
    next["runId"] = json!("r3");
    next["state"] = state;
    let next = run(&app, "/subgraphs", &next).await;
    assert_eq!(last(&next)["outcome"]["type"], "success");
    assert!(!next.iter().any(|e| e["type"] == "SUBAGENT_STARTED"));
}

#[tokio::test]
async fn subgraphs_for_a_0x_client_shows_each_agent_as_an_activity_and_asks_through_request_approval(
) {
    let app = offline_demo().await;
    let sent = vec![user("Help me plan a trip to San Francisco")];
    let events = run(&app, "/subgraphs", &input_0x(sent.clone())).await;
    assert!(events
        .iter()
        .all(|e| !e["type"].as_str().unwrap().starts_with("SUBAGENT_")));
    let agents: Vec<&Value> = of_type(&events, "ACTIVITY_SNAPSHOT")
        .into_iter()
        .filter(|e| e["activityType"] == "agui-host.subagent")
        .map(|e| &e["content"]["agent"])
        .collect();
    for name in ["travel_flights", "travel_hotels", "travel_experiences"] {
        assert!(agents.contains(&&json!(name)), "{agents:?}");
    }
    let call = approval_call_id(&events);
    let args: Value = serde_json::from_str(&tool_args(&events)[&call]).unwrap();
    assert_eq!(args["toolName"], "book_hotels");
    assert_eq!(args["agent"], "travel_hotels");

    let mut history = crate::approvals::client_history(&sent, &events);
    history.push(tool_result(&call, r#"{"approved":true}"#));
    let mut answer = input_0x(history);
    answer["runId"] = json!("r2");
    let resumed = run(&app, "/subgraphs", &answer).await;
    let summary = texts(&resumed).last().unwrap().1.clone();
    assert!(summary.contains("ZPH-4417"), "{summary}");
}

#[tokio::test]
async fn deepagents_subagents_streams_both_agents_attributed_and_answers_from_them() {
    let app = offline_demo().await;
    let sent = vec![user("What do recent surveys say about remote work?")];
    let events = run(&app, "/deepagents_subagents", &input(sent.clone())).await;
    let research = started(&events, "research_agent")["subagentRunId"].clone();
    let critique = started(&events, "critique_agent")["subagentRunId"].clone();
    // Every event between a child's start and end names it, and each ends with success.
    for id in [&research, &critique] {
        let calls: Vec<&Value> = of_type(&events, "TOOL_CALL_START")
            .into_iter()
            .filter(|e| e["subagentRunId"] == *id)
            .collect();
        assert_eq!(calls.len(), 1, "{calls:?}");
        let finished = events
            .iter()
            .find(|e| e["type"] == "SUBAGENT_FINISHED" && e["subagentRunId"] == *id)
            .unwrap();
        assert_eq!(finished["outcome"]["type"], "success");
    }
    let summary = texts(&events).last().unwrap().1.clone();
    assert!(
        summary.contains("single source") && summary.contains("survey"),
        "{summary}"
    );
    let calls: Vec<&Value> = of_type(&events, "TOOL_CALL_START")
        .into_iter()
        .filter(|e| e.get("subagentRunId").is_none())
        .collect();
    assert_eq!(calls.len(), 2);
    assert!(
        result_of(&events, calls[0]["toolCallId"].as_str().unwrap()).contains("The tool returned")
    );

    // The next run carries the children's messages; the supervisor's model reads none of them.
    let mut history = client_history(&sent, &events);
    history.push(user("Thanks"));
    let mut next = input(history);
    next["runId"] = json!("r2");
    let next = run(&app, "/deepagents_subagents", &next).await;
    assert_eq!(last(&next)["outcome"]["type"], "success");
}
