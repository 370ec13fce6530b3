//! The turn state machine (`Turn`) and the history helpers, fed model events directly: what
//! each model event becomes, in what order, and what a turn leaves for the history.

use super::*;
use crate::llm::LlmEvent;
use crate::protocol::TextRole;

fn text(delta: &str) -> LlmEvent {
    LlmEvent::TextDelta(delta.to_owned())
}

fn call(index: usize, id: Option<&str>, name: Option<&str>, arguments: &str) -> LlmEvent {
    LlmEvent::ToolCallDelta {
        index,
        id: id.map(str::to_owned),
        name: name.map(str::to_owned),
        arguments: arguments.to_owned(),
    }
}

/// Each update as `TYPE` or `TYPE:detail`, so a whole sequence reads as one line.
fn describe(out: &TurnUpdates) -> Vec<String> {
    out.iter()
        .map(|update| match update {
            AgentUpdate::Event(body) => match body {
                EventBody::TextMessageContent(c) | EventBody::ReasoningMessageContent(c) => {
                    format!("{}:{}", body.type_name(), c.delta)
                }
                EventBody::ToolCallStart(s) => format!("{}:{}", body.type_name(), s.tool_call_name),
                EventBody::ToolCallArgs(a) => {
                    format!("{}:{}:{}", body.type_name(), a.tool_call_id, a.delta)
                }
                EventBody::ToolCallEnd(e) => format!("{}:{}", body.type_name(), e.tool_call_id),
                other => other.type_name().to_owned(),
            },
            other => format!("{other:?}"),
        })
        .collect()
}

fn run_turn(events: Vec<LlmEvent>) -> (Turn, TurnUpdates) {
    let mut turn = Turn::new();
    let mut out = TurnUpdates::new();
    for event in events {
        turn.apply(event, &mut out);
    }
    (turn, out)
}

#[test]
fn text_opens_one_assistant_message_and_the_end_of_the_turn_closes_it() {
    let (turn, mut out) = run_turn(vec![text("Hel"), text(""), text("lo")]);
    let message_id = turn.message_id.clone();
    let TurnOutput {
        text: content,
        calls,
        ..
    } = turn.finish(&mut out).unwrap();
    assert_eq!(
        describe(&out),
        [
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT:Hel",
            "TEXT_MESSAGE_CONTENT:lo",
            "TEXT_MESSAGE_END"
        ]
    );
    let AgentUpdate::Event(EventBody::TextMessageStart(start)) = &out[0] else {
        panic!("{:?}", out[0])
    };
    assert_eq!(start.message_id, message_id);
    assert_eq!(start.role, Some(TextRole::Assistant));
    assert_eq!(content.as_deref(), Some("Hello"));
    assert!(calls.is_empty());
}

#[test]
fn reasoning_is_closed_before_the_answer_starts() {
    let (turn, mut out) = run_turn(vec![
        LlmEvent::ReasoningDelta("think".into()),
        LlmEvent::ReasoningDelta("ing".into()),
        text("Yes"),
    ]);
    turn.finish(&mut out).unwrap();
    assert_eq!(
        describe(&out),
        [
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT:think",
            "REASONING_MESSAGE_CONTENT:ing",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT:Yes",
            "TEXT_MESSAGE_END"
        ]
    );
}

#[test]
fn a_signature_seals_its_reasoning_for_the_client_and_the_next_call() {
    let (turn, mut out) = run_turn(vec![
        LlmEvent::ReasoningDelta("think".into()),
        LlmEvent::ReasoningEncrypted("sig-1".into()),
        // A redacted block: no text, only its data.
        LlmEvent::ReasoningEncrypted("redacted:xyz".into()),
        text("Yes"),
    ]);
    let reasoning = turn.finish(&mut out).unwrap().reasoning;
    assert_eq!(
        describe(&out),
        [
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_MESSAGE_CONTENT:think",
            "REASONING_ENCRYPTED_VALUE",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "REASONING_START",
            "REASONING_MESSAGE_START",
            "REASONING_ENCRYPTED_VALUE",
            "REASONING_MESSAGE_END",
            "REASONING_END",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT:Yes",
            "TEXT_MESSAGE_END"
        ]
    );
    let AgentUpdate::Event(EventBody::ReasoningMessageStart(first)) = &out[1] else {
        panic!("{:?}", out[1])
    };
    let AgentUpdate::Event(EventBody::ReasoningEncryptedValue(sealed)) = &out[3] else {
        panic!("{:?}", out[3])
    };
    assert_eq!(sealed.entity_id, first.message_id);
    assert_eq!(sealed.encrypted_value, "sig-1");
    assert_eq!(
        reasoning,
        [
            crate::llm::ChatReasoning {
                text: "think".into(),
                encrypted: Some("sig-1".into())
            },
            crate::llm::ChatReasoning {
                text: String::new(),
                encrypted: Some("redacted:xyz".into())
            },
        ]
    );
}

#[test]
fn argument_fragments_before_the_name_wait_and_go_out_as_one() {
    let (turn, mut out) = run_turn(vec![
        call(0, Some("c1"), None, "{\"a\""),
        call(0, None, None, ":1"),
        call(0, None, Some("lookup"), "}"),
        call(0, None, None, ""),
    ]);
    let message_id = turn.message_id.clone();
    let TurnOutput {
        text: content,
        calls,
        ..
    } = turn.finish(&mut out).unwrap();
    assert_eq!(
        describe(&out),
        [
            "TOOL_CALL_START:lookup",
            "TOOL_CALL_ARGS:c1:{\"a\":1}",
            "TOOL_CALL_END:c1"
        ]
    );
    let AgentUpdate::Event(EventBody::ToolCallStart(start)) = &out[0] else {
        panic!("{:?}", out[0])
    };
    assert_eq!(
        start.parent_message_id.as_deref(),
        Some(message_id.as_str())
    );
    assert_eq!(content, None);
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (
            calls[0].id.as_str(),
            calls[0].name.as_str(),
            calls[0].arguments.as_str()
        ),
        ("c1", "lookup", "{\"a\":1}")
    );
}

#[test]
fn interleaved_parallel_calls_stay_apart_and_end_in_the_order_they_began() {
    let (turn, mut out) = run_turn(vec![
        call(0, Some("a"), Some("first"), "{\"x\":"),
        call(1, Some("b"), Some("second"), "{\"y\":"),
        call(0, None, None, "1}"),
        call(1, None, None, "2}"),
    ]);
    let calls = turn.finish(&mut out).unwrap().calls;
    assert_eq!(
        describe(&out),
        [
            "TOOL_CALL_START:first",
            "TOOL_CALL_ARGS:a:{\"x\":",
            "TOOL_CALL_START:second",
            "TOOL_CALL_ARGS:b:{\"y\":",
            "TOOL_CALL_ARGS:a:1}",
            "TOOL_CALL_ARGS:b:2}",
            "TOOL_CALL_END:a",
            "TOOL_CALL_END:b"
        ]
    );
    let arguments: Vec<&str> = calls.iter().map(|c| c.arguments.as_str()).collect();
    assert_eq!(arguments, ["{\"x\":1}", "{\"y\":2}"]);
}

#[test]
fn a_call_with_an_empty_id_gets_one_and_a_call_that_never_got_a_name_fails_the_turn() {
    let (turn, mut out) = run_turn(vec![call(0, Some(""), Some("named"), "{}")]);
    let calls = turn.finish(&mut out).unwrap().calls;
    assert!(calls[0].id.starts_with("call_"), "{}", calls[0].id);

    let (turn, mut out) = run_turn(vec![call(0, Some("c"), None, "{}")]);
    assert!(
        out.is_empty(),
        "nothing starts before the name: {:?}",
        describe(&out)
    );
    assert!(matches!(
        turn.finish(&mut out),
        Err(AgentError::MalformedModelOutput(_))
    ));
}

#[test]
fn text_then_a_call_share_the_turns_message() {
    let (turn, mut out) = run_turn(vec![
        text("Let me check."),
        call(0, Some("c"), Some("t"), ""),
    ]);
    let TurnOutput {
        text: content,
        calls,
        ..
    } = turn.finish(&mut out).unwrap();
    assert_eq!(
        describe(&out),
        [
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT:Let me check.",
            "TOOL_CALL_START:t",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_END:c"
        ]
    );
    assert_eq!(content.as_deref(), Some("Let me check."));
    assert_eq!(calls[0].arguments, "");
}

#[test]
fn tool_results_go_after_their_calls_turn_and_its_earlier_results() {
    let assistant = |ids: &[&str]| ChatMessage::Assistant {
        reasoning: Vec::new(),
        content: None,
        tool_calls: ids
            .iter()
            .map(|id| ChatToolCall {
                id: (*id).to_owned(),
                name: "t".into(),
                arguments: "{}".into(),
            })
            .collect(),
    };
    let result = |id: &str| ChatMessage::Tool {
        tool_call_id: id.to_owned(),
        content: id.to_owned(),
    };
    let mut history = vec![
        assistant(&["a", "b"]),
        result("a"),
        ChatMessage::user_text("later"),
    ];
    insert_tool_result(&mut history, "b".into(), "b".into());
    insert_tool_result(&mut history, "unknown".into(), "unknown".into());
    let order: Vec<String> = history
        .iter()
        .map(|m| match m {
            ChatMessage::Tool { tool_call_id, .. } => format!("tool:{tool_call_id}"),
            ChatMessage::Assistant { .. } => "assistant".into(),
            _ => "user".into(),
        })
        .collect();
    assert_eq!(
        order,
        ["assistant", "tool:a", "tool:b", "user", "tool:unknown"]
    );
}

#[test]
fn empty_arguments_are_an_empty_object_and_bad_ones_a_tool_error() {
    assert_eq!(parse_arguments("  ").unwrap(), serde_json::json!({}));
    assert!(matches!(
        parse_arguments("{\"a\":"),
        Err(ToolError::InvalidArguments(_))
    ));
}
