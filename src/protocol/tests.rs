//! Serde round trips against JSON shaped like the `@ag-ui/core` 1.0 schema.

use serde_json::{json, Value};

use super::*;

#[test]
fn a_full_1_0_request_parses_with_every_role_and_part() {
    let body = json!({
        "threadId": "t", "runId": "r", "protocolVersion": "1.0",
        "state": {"k": 1},
        "messages": [
            {"id": "d", "role": "developer", "content": "be brief"},
            {"id": "s", "role": "system", "content": "sys"},
            {"id": "u", "role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "data", "value": "AAAA", "mimeType": "image/png"}},
                {"type": "audio", "source": {"type": "url", "value": "https://x/a.mp3"}},
                {"type": "video", "source": {"type": "file", "value": "file-1", "provider": "openai"}},
                {"type": "document", "source": {"type": "url", "value": "https://x/d.pdf", "mimeType": "application/pdf"}, "metadata": null},
                {"type": "binary", "mimeType": "image/jpeg", "data": "BBBB", "filename": "a.jpg"},
                {"type": "hologram", "whatever": 1}
            ]},
            {"id": "a", "role": "assistant", "content": "calling", "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ]},
            {"id": "tm", "role": "tool", "toolCallId": "c1", "content": "ok", "error": "partial"},
            {"id": "act", "role": "activity", "activityType": "plan", "content": {"steps": []}},
            {"id": "re", "role": "reasoning", "content": "thinking", "encryptedValue": "xyz"}
        ],
        "tools": [{"name": "f", "description": "d", "parameters": null}],
        "context": [{"description": "Name of the user", "value": "Bob"}],
        "forwardedProps": null,
        "resume": [{"interruptId": "i", "status": "resolved", "payload": {"approved": true}}],
        "somethingNew": true
    });
    let input: RunAgentInput = serde_json::from_value(body).unwrap();
    assert_eq!(input.messages.len(), 7);
    assert!(input.forwarded_props.is_none());
    assert!(input.tools[0].parameters.is_none());
    let Message::User(user) = &input.messages[2] else {
        panic!("user")
    };
    let Content::Parts(parts) = &user.content else {
        panic!("parts")
    };
    assert!(matches!(parts[5], ContentPart::Binary { .. }));
    assert!(matches!(parts[6], ContentPart::Unknown));
    assert_eq!(input.resume[0].status, ResumeStatus::Resolved);
}

#[test]
fn a_minimal_request_defaults_collections() {
    let input: RunAgentInput = serde_json::from_value(json!({
        "threadId": "t", "runId": "r", "messages": [], "tools": null, "state": null
    }))
    .unwrap();
    assert!(input.tools.is_empty() && input.context.is_empty() && input.resume.is_empty());
    assert!(input.state.is_none());
    assert!(input.protocol_version.is_none());
}

#[test]
fn unknown_roles_wrong_types_and_missing_messages_are_rejected() {
    for body in [
        json!({"threadId": "t", "runId": "r", "messages": [{"id": "x", "role": "wizard", "content": "hi"}]}),
        json!({"threadId": "t", "runId": "r", "messages": "hi"}),
        json!({"threadId": 1, "runId": "r", "messages": []}),
        json!({"threadId": "t", "runId": "r"}),
    ] {
        assert!(serde_json::from_value::<RunAgentInput>(body).is_err());
    }
}

fn contains_null(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.iter().any(contains_null),
        Value::Object(map) => map.values().any(contains_null),
        _ => false,
    }
}

#[test]
fn events_serialize_camel_case_without_nulls() {
    let event = Event::from(EventBody::ToolCallStart(ToolCallStart {
        tool_call_id: "c".into(),
        tool_call_name: "f".into(),
        parent_message_id: None,
        subagent_run_id: None,
    }));
    let value = serde_json::to_value(&event).unwrap();
    assert_eq!(
        value,
        json!({"type": "TOOL_CALL_START", "toolCallId": "c", "toolCallName": "f"})
    );

    let reasoning = serde_json::to_value(Event::from(EventBody::ReasoningMessageStart(
        ReasoningMessageStart {
            message_id: "m".into(),
            role: ReasoningRole::Reasoning,
            subagent_run_id: None,
        },
    )))
    .unwrap();
    assert_eq!(
        reasoning["role"], "reasoning",
        "role is required on REASONING_MESSAGE_START"
    );

    let finished = serde_json::to_value(Event::from(EventBody::RunFinished(RunFinished {
        thread_id: "t".into(),
        run_id: "r".into(),
        result: None,
        outcome: Some(RunOutcome::Success {
            pending_tool_call_ids: None,
        }),
        usage: None,
    })))
    .unwrap();
    assert!(!contains_null(&finished));
    assert_eq!(finished["outcome"], json!({"type": "success"}));

    let encrypted = serde_json::to_value(Event::from(EventBody::ReasoningEncryptedValue(
        ReasoningEncryptedValue {
            subtype: EncryptedValueSubtype::ToolCall,
            entity_id: "c".into(),
            encrypted_value: "x".into(),
            subagent_run_id: None,
        },
    )))
    .unwrap();
    assert_eq!(encrypted["subtype"], "tool-call");
}

#[test]
fn every_event_type_round_trips() {
    let cases = [
        json!({"type":"RUN_STARTED","threadId":"t","runId":"r","protocolVersion":"1.0"}),
        json!({"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"cancelled"}}),
        json!({"type":"RUN_ERROR","message":"m","code":"c"}),
        json!({"type":"STEP_STARTED","stepName":"s"}),
        json!({"type":"STEP_FINISHED","stepName":"s"}),
        json!({"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}),
        json!({"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"d"}),
        json!({"type":"TEXT_MESSAGE_END","messageId":"m"}),
        json!({"type":"TEXT_MESSAGE_CHUNK","messageId":"m","delta":"d"}),
        json!({"type":"TOOL_CALL_START","toolCallId":"c","toolCallName":"f","parentMessageId":"m"}),
        json!({"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{"}),
        json!({"type":"TOOL_CALL_END","toolCallId":"c"}),
        json!({"type":"TOOL_CALL_CHUNK","toolCallId":"c","delta":"}"}),
        json!({"type":"TOOL_CALL_RESULT","messageId":"tm","toolCallId":"c","content":"ok","role":"tool"}),
        json!({"type":"STATE_SNAPSHOT","snapshot":null}),
        json!({"type":"STATE_DELTA","delta":[{"op":"add","path":"/a~1b","value":1}]}),
        json!({"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u","role":"user","content":"hi"}]}),
        json!({"type":"ACTIVITY_SNAPSHOT","messageId":"a","activityType":"plan","content":{}}),
        json!({"type":"ACTIVITY_DELTA","messageId":"a","activityType":"plan","patch":[]}),
        json!({"type":"RAW","event":{"x":1},"source":"openai"}),
        json!({"type":"CUSTOM","name":"PredictState","value":null}),
        json!({"type":"REASONING_START","messageId":"r"}),
        json!({"type":"REASONING_MESSAGE_START","messageId":"r","role":"reasoning"}),
        json!({"type":"REASONING_MESSAGE_CONTENT","messageId":"r","delta":"d"}),
        json!({"type":"REASONING_MESSAGE_END","messageId":"r"}),
        json!({"type":"REASONING_MESSAGE_CHUNK","messageId":"r","delta":"d"}),
        json!({"type":"REASONING_END","messageId":"r"}),
        json!({"type":"REASONING_ENCRYPTED_VALUE","subtype":"message","entityId":"m","encryptedValue":"x"}),
        json!({"type":"SUBAGENT_STARTED","subagentRunId":"s","name":"n"}),
        json!({"type":"SUBAGENT_FINISHED","subagentRunId":"s","outcome":{"type":"suspended","interruptIds":["i"]}}),
        json!({"type":"SUBAGENT_ERROR","subagentRunId":"s","message":"m"}),
    ];
    assert_eq!(cases.len(), 31);
    let mut seen = std::collections::BTreeSet::new();
    for case in cases {
        let event: Event =
            serde_json::from_value(case.clone()).unwrap_or_else(|e| panic!("{case}: {e}"));
        seen.insert(event.body.type_name());
        assert_eq!(serde_json::to_value(&event).unwrap(), case);
    }
    assert_eq!(seen.len(), 31);
}
