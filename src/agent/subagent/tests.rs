//! The subagent tool against a scripted child: what it streams, what it answers, its limits.

use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::agent::testing::ScriptedAgent;
use crate::protocol::EventBody;

fn context(events: tokio::sync::mpsc::Sender<EventBody>) -> ToolContext {
    ToolContext {
        scope: "s".into(),
        agent: "planner".into(),
        thread_id: "t".into(),
        run_id: "r".into(),
        tool_call_id: "c1".into(),
        message_id: None,
        state: None,
        progress: None,
        input: None,
        events: Some(events),
    }
}

fn child_turn() -> Vec<AgentUpdate> {
    vec![
        EventBody::tool_call_start("c1", "search", Some("m1".into())).into(),
        EventBody::tool_call_end("c1").into(),
        EventBody::tool_call_result("r1", "c1", "found".to_owned()).into(),
        EventBody::state_snapshot(json!({"x": 1})).into(),
        EventBody::text_start("m2").into(),
        EventBody::text_content("m2", "Flight ").into(),
        EventBody::text_content("m2", "AF12").into(),
        EventBody::text_end("m2").into(),
    ]
}

#[tokio::test]
async fn a_child_streams_attributed_and_answers_with_its_last_message() {
    let child = ScriptedAgent::new(child_turn());
    let tool = SubagentTool::new(
        "flights",
        Some("Finds flights"),
        Arc::new(child.clone()),
        SubagentRuns::new(2, Default::default()),
        None,
    )
    .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let output = tool
        .call(json!({"task": "Paris to Rome"}), context(tx))
        .await
        .unwrap();
    assert_eq!(output.content, json!("Flight AF12"));
    let request = child.last_request();
    assert_eq!(request.messages.len(), 1);
    assert_eq!(request.parent_run_id.as_deref(), Some("r"));
    assert_ne!(
        request.thread_id, "t",
        "the child never runs on the parent's thread"
    );

    let mut events = Vec::new();
    while let Ok(event) = rx.try_recv() {
        events.push(event);
    }
    let EventBody::SubagentStarted(start) = &events[0] else {
        panic!("{events:?}")
    };
    let id = start.subagent_run_id.clone();
    assert_eq!(start.parent_tool_call_id.as_deref(), Some("c1"));
    assert!(matches!(
        events.last(),
        Some(EventBody::SubagentFinished(_))
    ));
    for event in &events[1..events.len() - 1] {
        assert_eq!(event.subagent_run_id(), Some(id.as_str()), "{event:?}");
        assert!(!matches!(event, EventBody::StateSnapshot(_)));
    }
    let EventBody::ToolCallStart(call) = &events[1] else {
        panic!()
    };
    assert_eq!(
        call.tool_call_id,
        format!("{id}.c1"),
        "a child's call ids cannot be the parent's"
    );
}

#[tokio::test]
async fn a_failing_child_is_an_error_result_after_its_error_event() {
    struct Failing;
    impl Agent for Failing {
        fn run(&self, _: RunRequest) -> Result<crate::agent::AgentStream, AgentError> {
            Ok(futures_util::stream::iter(vec![
                Ok(EventBody::text_start("m").into()),
                Err(AgentError::MaxIterations(3)),
            ])
            .boxed())
        }
    }
    let runs = SubagentRuns::new(2, Default::default());
    let tool = SubagentTool::new("flights", None, Arc::new(Failing), runs, None).unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::channel(64);
    let error = tool
        .call(json!({"task": "x"}), context(tx))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("`flights` agent failed"),
        "{error}"
    );
    let mut types = Vec::new();
    while let Ok(event) = rx.try_recv() {
        types.push(event.type_name());
    }
    assert_eq!(
        types,
        [
            "SUBAGENT_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_END",
            "SUBAGENT_ERROR"
        ]
    );
}

#[test]
fn the_fan_out_limit_counts_per_run_and_frees_on_drop() {
    let runs = SubagentRuns::new(1, Default::default());
    let first = runs.enter("r").expect("a slot");
    assert!(runs.enter("r").is_none());
    assert!(runs.enter("other").is_some());
    drop(first);
    assert!(runs.enter("r").is_some());
}

#[test]
fn a_0x_client_never_gets_attributed_events() {
    use crate::protocol::ProtocolVersion::{Legacy, V1};
    assert_eq!(
        SubagentVisibility::Attributed.for_client(Legacy),
        SubagentVisibility::Inline
    );
    assert_eq!(
        SubagentVisibility::Attributed.for_client(V1),
        SubagentVisibility::Attributed
    );
    assert_eq!(
        SubagentVisibility::Hidden.for_client(Legacy),
        SubagentVisibility::Hidden
    );
}
