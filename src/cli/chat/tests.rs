//! The session's handling of events, commands and input, without a server: events are fed
//! as JSON, as the stream would deliver them. Against a real server: `tests/api/chat_client.rs`.

use super::session::{RunEnd, RunSummary, Session};
use super::thread::Thread;
use super::*;
use agui_host::protocol::{Event, Message};

fn session(client_tools: &[&str]) -> Session<std::io::Empty, Vec<u8>> {
    let options = ChatOptions {
        url: "http://127.0.0.1:9/agent".into(),
        client_tools: client_tools.iter().map(|t| t.to_string()).collect(),
        ..ChatOptions::default()
    };
    Session::new(options, std::io::empty(), Vec::new()).expect("a valid session")
}

/// Feeds events (as JSON) through the session and returns what it printed.
fn feed(session: &mut Session<std::io::Empty, Vec<u8>>, events: &[Value]) -> RunSummary {
    let mut summary = RunSummary::default();
    for event in events {
        session
            .handle_data(&event.to_string(), &mut summary)
            .expect("writing to a Vec");
    }
    session.close_chunks(None).expect("writing to a Vec");
    summary
}

fn printed(session: &Session<std::io::Empty, Vec<u8>>) -> String {
    String::from_utf8_lossy(&session.out.out).into_owned()
}

fn history(session: &Session<std::io::Empty, Vec<u8>>) -> Value {
    serde_json::to_value(&session.thread.messages).expect("messages serialize")
}

#[test]
fn calls_and_results_are_filed_as_the_reference_reducer_files_them() {
    let mut session = session(&[]);
    feed(
        &mut session,
        &[
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Let me look."}),
            json!({"type": "TEXT_MESSAGE_END", "messageId": "m1"}),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c1", "toolCallName": "a", "parentMessageId": "m1"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "{\"x\":"}),
            json!({"type": "TOOL_CALL_ARGS", "toolCallId": "c1", "delta": "1}"}),
            json!({"type": "TOOL_CALL_END", "toolCallId": "c1"}),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c2", "toolCallName": "b", "parentMessageId": "m1"}),
            json!({"type": "TOOL_CALL_END", "toolCallId": "c2"}),
            json!({"type": "TOOL_CALL_START", "toolCallId": "c3", "toolCallName": "c"}),
            json!({"type": "TOOL_CALL_END", "toolCallId": "c3"}),
            json!({"type": "TOOL_CALL_RESULT", "messageId": "t1", "toolCallId": "c1", "content": "one"}),
            json!({"type": "TOOL_CALL_RESULT", "messageId": "t2", "toolCallId": "c2", "content": "two"}),
            json!({"type": "TOOL_CALL_RESULT", "messageId": "t9", "toolCallId": "nobody", "content": "?"}),
        ],
    );
    let ids: Vec<String> = session
        .thread
        .messages
        .iter()
        .map(|m| m.id().to_owned())
        .collect();
    // Results right after their call's message, in arrival order; an orphan at the end; a
    // call without a parent gets a message named after itself.
    assert_eq!(ids, ["m1", "t1", "t2", "c3", "t9"]);
    let messages = history(&session);
    assert_eq!(messages[0]["content"], "Let me look.");
    assert_eq!(
        messages[0]["toolCalls"][0]["function"],
        json!({"name": "a", "arguments": "{\"x\":1}"})
    );
    assert_eq!(messages[0]["toolCalls"][1]["id"], "c2");
    assert_eq!(messages[1]["toolCallId"], "c1");
    let out = printed(&session);
    assert!(
        out.starts_with("Let me look.\n[tool] a {\"x\":1}\n[tool] b \n"),
        "{out}"
    );
    assert!(out.contains("[result] one\n[result] two\n"), "{out}");
}

#[test]
fn a_failing_patch_keeps_the_state_and_warns() {
    let mut session = session(&[]);
    feed(
        &mut session,
        &[
            json!({"type": "STATE_SNAPSHOT", "snapshot": {"a": 1}}),
            json!({"type": "STATE_DELTA", "delta": [{"op": "add", "path": "/b", "value": 2}]}),
            // The first op would apply; the second fails: neither is kept.
            json!({"type": "STATE_DELTA", "delta": [
                {"op": "replace", "path": "/a", "value": 5},
                {"op": "remove", "path": "/missing"},
            ]}),
        ],
    );
    assert_eq!(session.thread.state, json!({"a": 1, "b": 2}));
    let out = printed(&session);
    assert!(out.contains("[state] add /b 2\n"), "{out}");
    assert!(
        out.contains("[warning] a state patch did not apply"),
        "{out}"
    );
}

#[test]
fn a_frame_that_is_not_an_event_is_reported_and_skipped() {
    let mut session = session(&[]);
    let mut summary = RunSummary::default();
    session.handle_data("{not json", &mut summary).unwrap();
    session
        .handle_data(r#"{"type":"NO_SUCH_EVENT"}"#, &mut summary)
        .unwrap();
    let finished = json!({"type": "RUN_FINISHED", "threadId": "t", "runId": "r"});
    session
        .handle_data(&finished.to_string(), &mut summary)
        .unwrap();
    assert_eq!(
        printed(&session)
            .matches("[warning] skipped a frame")
            .count(),
        2
    );
    assert!(matches!(summary.end, Some(RunEnd::Finished(None))));
}

#[test]
fn chunks_expand_like_start_content_end() {
    let mut session = session(&["ask"]);
    let summary = feed(
        &mut session,
        &[
            json!({"type": "TEXT_MESSAGE_CHUNK", "messageId": "m1", "delta": "Hi "}),
            json!({"type": "TEXT_MESSAGE_CHUNK", "delta": "there"}),
            json!({"type": "TOOL_CALL_CHUNK", "toolCallId": "c1", "toolCallName": "ask", "parentMessageId": "m1", "delta": "{}"}),
        ],
    );
    assert_eq!(printed(&session), "Hi there\n[tool] ask {}\n");
    assert_eq!(summary.client_calls, ["c1"]);
    assert_eq!(session.thread.unanswered(&summary.client_calls).len(), 1);
    let messages = history(&session);
    assert_eq!(messages[0]["content"], "Hi there");
    assert_eq!(messages[0]["toolCalls"][0]["id"], "c1");
}

#[test]
fn reasoning_is_a_thinking_line_and_an_error_ends_the_run() {
    let mut session = session(&[]);
    let summary = feed(
        &mut session,
        &[
            json!({"type": "REASONING_START", "messageId": "r1"}),
            json!({"type": "REASONING_MESSAGE_START", "messageId": "r1", "role": "reasoning"}),
            json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "r1", "delta": "Hmm, "}),
            json!({"type": "REASONING_MESSAGE_CONTENT", "messageId": "r1", "delta": "weather."}),
            json!({"type": "REASONING_MESSAGE_END", "messageId": "r1"}),
            json!({"type": "REASONING_END", "messageId": "r1"}),
            json!({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
            json!({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": "Half"}),
            json!({"type": "RUN_ERROR", "message": "the model went away", "code": "upstream_stream_cut"}),
        ],
    );
    assert_eq!(
        printed(&session),
        "[thinking] Hmm, weather.\nHalf\n[error upstream_stream_cut] the model went away\n"
    );
    assert!(matches!(summary.end, Some(RunEnd::Failed)));
    let messages = history(&session);
    assert_eq!(
        messages[0],
        json!({"id": "r1", "role": "reasoning", "content": "Hmm, weather."})
    );
}

#[test]
fn a_messages_snapshot_replaces_appends_and_removes() {
    let mut thread = Thread::new("t".into());
    thread.push_user("old");
    thread.start_reasoning("r1");
    thread.start_text("a1", None);
    let snapshot: Vec<Message> = serde_json::from_value(json!([
        {"id": "a1", "role": "assistant", "content": "new"},
        {"id": "u2", "role": "user", "content": "next"},
    ]))
    .unwrap();
    thread.merge_snapshot(snapshot);
    let ids: Vec<&str> = thread.messages.iter().map(Message::id).collect();
    // The user message is gone; reasoning stays, as the snapshot carries none.
    assert_eq!(ids, ["r1", "a1", "u2"]);
}

#[test]
fn commands_and_answers_parse() {
    assert_eq!(Command::parse("  :state "), Command::State);
    assert_eq!(Command::parse(":nope"), Command::Unknown(":nope"));
    assert_eq!(Command::parse(" hello "), Command::Say("hello"));
    assert_eq!(Command::parse("   "), Command::Nothing);
    assert_eq!(parse_yes_no("Y"), Some(true));
    assert_eq!(parse_yes_no("no"), Some(false));
    assert_eq!(parse_yes_no("maybe"), None);
}

#[test]
fn bad_urls_and_headers_are_refused_up_front() {
    let options = |url: &str, headers: Vec<(String, String)>| ChatOptions {
        url: url.into(),
        headers,
        ..ChatOptions::default()
    };
    let refused = |options: ChatOptions| Session::new(options, std::io::empty(), Vec::new()).err();
    assert!(matches!(
        refused(options("not a url", vec![])),
        Some(ChatError::InvalidUrl { .. })
    ));
    assert!(matches!(
        refused(options("ftp://host/", vec![])),
        Some(ChatError::InvalidUrl { .. })
    ));
    let bad_header = vec![("Bad Name".to_owned(), "v".to_owned())];
    assert!(matches!(
        refused(options("http://host/", bad_header)),
        Some(ChatError::InvalidHeader { .. })
    ));
    let secret = options(
        "http://host/",
        vec![("Authorization".into(), "Bearer s3cret".into())],
    );
    assert!(!format!("{secret:?}").contains("s3cret"));
}

#[test]
fn the_input_is_a_1_0_run_with_history_state_and_tools() {
    let mut thread = Thread::new("t1".into());
    thread.push_user("hi");
    thread.state = json!({"k": 1});
    let input = thread.input(&["pick".to_owned()], Vec::new());
    let body = serde_json::to_value(&input).unwrap();
    assert_eq!(body["protocolVersion"], "1.0");
    assert_eq!(body["threadId"], "t1");
    assert_eq!(body["state"], json!({"k": 1}));
    assert_eq!(body["tools"][0]["name"], "pick");
    assert_eq!(body["tools"][0]["parameters"]["type"], "object");
    assert_eq!(body["context"], json!([]));
    assert!(body.get("resume").is_none());
    let again = thread.input(&[], Vec::new());
    assert_ne!(input.run_id, again.run_id, "a fresh run id per run");
    // What we send parses back as what the server reads.
    let _: Event = serde_json::from_value(json!({
        "type": "RUN_STARTED", "threadId": "t1", "runId": "r", "input": body,
    }))
    .unwrap();
}
