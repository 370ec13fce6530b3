//! The subagent view per visibility, fed vectors.

use super::*;
use crate::agent::testing::{collect, request, ScriptedAgent};
use crate::protocol::{ProtocolVersion, SubagentFinished, SubagentOutcome, SubagentStarted};

fn script() -> Vec<AgentUpdate> {
    let start = EventBody::SubagentStarted(SubagentStarted {
        subagent_run_id: "sa".into(),
        name: "flights".into(),
        description: None,
        parent_subagent_run_id: None,
        parent_tool_call_id: Some("c1".into()),
        parent_message_id: None,
    });
    let mut child = vec![
        EventBody::text_start("m2"),
        EventBody::text_content("m2", "AF12"),
        EventBody::text_end("m2"),
    ];
    for event in &mut child {
        event.attribute_to("sa");
    }
    let mut updates: Vec<AgentUpdate> = vec![
        EventBody::tool_call_start("c1", "flights", Some("m1".into())).into(),
        EventBody::tool_call_end("c1").into(),
        start.into(),
    ];
    updates.extend(child.into_iter().map(AgentUpdate::from));
    updates.push(
        EventBody::SubagentFinished(SubagentFinished {
            subagent_run_id: "sa".into(),
            result: None,
            outcome: Some(SubagentOutcome::Success),
        })
        .into(),
    );
    updates.push(EventBody::tool_call_result("t1", "c1", "AF12".to_owned()).into());
    updates
}

async fn shown(visibility: SubagentVisibility, version: ProtocolVersion) -> Vec<EventBody> {
    let runs = crate::agent::subagent::SubagentRuns::new(4, Default::default());
    let view = SubagentView::new(Arc::new(ScriptedAgent::new(script())), visibility, runs);
    let mut req = request(None);
    req.version = version;
    collect(view.run(req).unwrap())
        .await
        .into_iter()
        .map(|item| match item {
            Ok(AgentUpdate::Event(body)) => body,
            other => panic!("{other:?}"),
        })
        .collect()
}

fn names(events: &[EventBody]) -> Vec<&'static str> {
    events.iter().map(EventBody::type_name).collect()
}

#[tokio::test]
async fn attributed_passes_everything_and_names_the_calls_message() {
    let events = shown(SubagentVisibility::Attributed, ProtocolVersion::V1).await;
    assert_eq!(events.len(), 8);
    let EventBody::SubagentStarted(start) = &events[2] else {
        panic!()
    };
    assert_eq!(start.parent_message_id.as_deref(), Some("m1"));
}

#[tokio::test]
async fn inline_folds_the_child_into_an_activity_and_0x_gets_inline() {
    for (visibility, version) in [
        (SubagentVisibility::Inline, ProtocolVersion::V1),
        (SubagentVisibility::Attributed, ProtocolVersion::Legacy),
    ] {
        let events = shown(visibility, version).await;
        assert_eq!(
            names(&events),
            [
                "TOOL_CALL_START",
                "TOOL_CALL_END",
                "ACTIVITY_SNAPSHOT",
                "ACTIVITY_SNAPSHOT",
                "ACTIVITY_SNAPSHOT",
                "TOOL_CALL_RESULT"
            ]
        );
        let EventBody::ActivitySnapshot(last) = &events[4] else {
            panic!()
        };
        assert_eq!(last.content["status"], "finished");
        assert_eq!(last.content["text"], "AF12");
        assert!(events.iter().all(|e| e.subagent_run_id().is_none()));
    }
}

#[tokio::test]
async fn hidden_shows_only_the_result() {
    let events = shown(SubagentVisibility::Hidden, ProtocolVersion::V1).await;
    assert_eq!(
        names(&events),
        ["TOOL_CALL_START", "TOOL_CALL_END", "TOOL_CALL_RESULT"]
    );
}

/// A child cut off (its call's result came first) is closed whole, deepest first: its
/// grandchild's open message, the grandchild, its own open message, itself.
#[tokio::test]
async fn a_cut_off_child_is_closed_whole_before_the_result() {
    let start = |id: &str, parent: Option<&str>, call: &str| {
        EventBody::SubagentStarted(SubagentStarted {
            subagent_run_id: id.into(),
            name: id.into(),
            description: None,
            parent_subagent_run_id: parent.map(str::to_owned),
            parent_tool_call_id: Some(call.into()),
            parent_message_id: None,
        })
    };
    let tagged = |mut event: EventBody, id: &str| {
        event.attribute_to(id);
        AgentUpdate::from(event)
    };
    let script = vec![
        EventBody::tool_call_start("c1", "flights", Some("m1".into())).into(),
        start("sa", None, "c1").into(),
        tagged(EventBody::text_start("m2"), "sa"),
        start("sb", Some("sa"), "sa.c2").into(),
        tagged(EventBody::text_start("m3"), "sb"),
        tagged(EventBody::text_start("m4"), "sb"),
        tagged(EventBody::text_end("m4"), "sb"),
        EventBody::tool_call_result("t1", "c1", "timed out".to_owned()).into(),
    ];
    let runs = crate::agent::subagent::SubagentRuns::new(4, Default::default());
    let view = SubagentView::new(
        Arc::new(ScriptedAgent::new(script)),
        SubagentVisibility::Attributed,
        runs,
    );
    let events: Vec<EventBody> = collect(view.run(request(None)).unwrap())
        .await
        .into_iter()
        .map(|item| match item {
            Ok(AgentUpdate::Event(body)) => body,
            other => panic!("{other:?}"),
        })
        .collect();
    let tail: Vec<(&str, Option<&str>)> = events[7..]
        .iter()
        .map(|e| (e.type_name(), e.subagent_run_id()))
        .collect();
    assert_eq!(
        tail,
        [
            ("TEXT_MESSAGE_END", Some("sb")),
            ("SUBAGENT_ERROR", Some("sb")),
            ("TEXT_MESSAGE_END", Some("sa")),
            ("SUBAGENT_ERROR", Some("sa")),
            ("TOOL_CALL_RESULT", None),
        ]
    );
}
