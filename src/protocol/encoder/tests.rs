//! The encoder's brackets, downgrades, event ids and endings, driven from vectors.

use super::*;
use crate::protocol::frame::{Batch, EventId};
use crate::protocol::sse::{json_string_len, write_frame, write_json_string};
use serde_json::{json, Value};

fn frames(out: &[u8]) -> Vec<Value> {
    let text = std::str::from_utf8(out).unwrap();
    assert!(!text.contains('\r'));
    text.split_terminator("\n\n")
        .map(|frame| serde_json::from_str(frame.strip_prefix("data: ").unwrap()).unwrap())
        .collect()
}

fn encoder(version: ProtocolVersion) -> RunEncoder {
    RunEncoder::new(version, "t".into(), "r".into()).without_timestamps()
}

fn text_start(id: &str) -> EventBody {
    EventBody::text_start(id)
}

fn tool_start(id: &str, parent: &str) -> EventBody {
    EventBody::tool_call_start(id, "f", Some(parent.into()))
}

#[test]
fn finish_closes_open_entities_and_lists_pending_calls_for_v1() {
    let mut enc = encoder(ProtocolVersion::V1);
    let mut out = Vec::new();
    enc.push(text_start("m1"), &mut out).unwrap();
    enc.push(tool_start("c1", "m1"), &mut out).unwrap();
    enc.finish(&mut out).unwrap();
    let events = frames(&out);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TOOL_CALL_START",
            "TEXT_MESSAGE_END",
            "TOOL_CALL_END",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(events[0]["protocolVersion"], "1.0");
    assert_eq!(
        events[5],
        json!({"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"success","pendingToolCallIds":["c1"]}})
    );
}

#[test]
fn legacy_clients_get_no_outcome_usage_or_protocol_version() {
    let mut enc = encoder(ProtocolVersion::Legacy);
    let mut out = Vec::new();
    enc.add_usage(TokenUsage {
        input_tokens: Some(1),
        ..Default::default()
    });
    enc.push(tool_start("c1", "m1"), &mut out).unwrap();
    enc.finish(&mut out).unwrap();
    let events = frames(&out);
    assert_eq!(
        events[0],
        json!({"type":"RUN_STARTED","threadId":"t","runId":"r"})
    );
    assert_eq!(
        events.last().unwrap(),
        &json!({"type":"RUN_FINISHED","threadId":"t","runId":"r"})
    );
}

#[test]
fn legacy_tool_result_parts_are_flattened() {
    let mut enc = encoder(ProtocolVersion::Legacy);
    let mut out = Vec::new();
    enc.push(
        EventBody::ToolCallResult(ToolCallResult {
            message_id: "tm".into(),
            tool_call_id: "c".into(),
            content: ToolResultContent::Parts(vec![ContentPart::Text {
                text: "a".into(),
                id: None,
                metadata: None,
            }]),
            role: Some(ToolRole::Tool),
            subagent_run_id: None,
        }),
        &mut out,
    )
    .unwrap();
    assert_eq!(frames(&out)[1]["content"], "a");
}

#[test]
fn usage_is_merged_per_model_and_reported_to_v1() {
    let mut enc = encoder(ProtocolVersion::V1);
    let usage = |i, o| TokenUsage {
        provider: Some("openai".into()),
        model: Some("m".into()),
        input_tokens: Some(i),
        output_tokens: Some(o),
        total_tokens: Some(i + o),
        ..Default::default()
    };
    enc.add_usage(usage(3, 4));
    enc.add_usage(usage(10, 1));
    let mut out = Vec::new();
    enc.finish(&mut out).unwrap();
    assert_eq!(
        frames(&out)[1]["usage"],
        json!([{"provider":"openai","model":"m","inputTokens":13,"outputTokens":5,"totalTokens":18}])
    );
}

#[test]
fn violations_are_reported_and_nothing_follows_the_terminal_event() {
    let mut enc = encoder(ProtocolVersion::V1);
    let mut out = Vec::new();
    let args = EventBody::tool_call_args("nope", "{");
    assert!(matches!(
        enc.push(args, &mut out),
        Err(EncodeError::ProtocolViolation(_))
    ));
    enc.push(text_start("m"), &mut out).unwrap();
    assert!(
        enc.push(text_start("m"), &mut out).is_err(),
        "double start of an open message"
    );
    enc.fail("upstream_timeout", "the model timed out", &mut out)
        .unwrap();
    enc.finish(&mut out).unwrap();
    assert!(enc.push(text_start("x"), &mut out).is_err());
    let events = frames(&out);
    let last = events.last().unwrap();
    assert_eq!(last["type"], "RUN_ERROR");
    assert_eq!(last["code"], "upstream_timeout");
    assert_eq!(
        events
            .iter()
            .filter(|e| e["type"] == "RUN_ERROR" || e["type"] == "RUN_FINISHED")
            .count(),
        1
    );
}

#[test]
fn interrupts_make_an_interrupt_outcome_for_both_versions() {
    for version in [ProtocolVersion::V1, ProtocolVersion::Legacy] {
        let mut enc = encoder(version);
        enc.add_interrupt(Interrupt {
            id: "i1".into(),
            reason: "tool_call".into(),
            message: None,
            tool_call_id: Some("c1".into()),
            response_schema: None,
            expires_at: None,
            metadata: None,
            subagent_run_id: None,
        });
        let mut out = Vec::new();
        enc.finish(&mut out).unwrap();
        assert_eq!(
            frames(&out)[1]["outcome"],
            json!({"type":"interrupt","interrupts":[{"id":"i1","reason":"tool_call","toolCallId":"c1"}]})
        );
    }
}

#[test]
fn timestamps_are_integers_and_empty_deltas_are_dropped() {
    let mut enc = RunEncoder::new(ProtocolVersion::V1, "t".into(), "r".into());
    let mut out = Vec::new();
    enc.push(text_start("m"), &mut out).unwrap();
    enc.push(EventBody::text_content("m", ""), &mut out)
        .unwrap();
    let events = frames(&out);
    assert_eq!(events.len(), 2);
    assert!(events.iter().all(|e| e["timestamp"].is_i64()));
}

#[test]
fn version_negotiation() {
    assert_eq!(
        ProtocolVersion::from_request(Some("1.0")),
        ProtocolVersion::V1
    );
    assert_eq!(
        ProtocolVersion::from_request(Some("1.2")),
        ProtocolVersion::V1
    );
    assert_eq!(
        ProtocolVersion::from_request(Some("0.0.59")),
        ProtocolVersion::Legacy
    );
    assert_eq!(ProtocolVersion::from_request(None), ProtocolVersion::Legacy);
}

#[test]
fn event_ids_number_every_frame_from_one() {
    let mut encoder = encoder(ProtocolVersion::V1).with_event_ids();
    let mut out = Vec::new();
    encoder.start(&mut out).unwrap();
    encoder.push(text_start("m"), &mut out).unwrap();
    encoder.finish(&mut out).unwrap();
    let text = std::str::from_utf8(&out).unwrap();
    let ids: Vec<&str> = text
        .split_terminator("\n\n")
        .map(|frame| frame.split_once('\n').unwrap().0)
        .collect();
    assert_eq!(ids, ["id: r:1", "id: r:2", "id: r:3", "id: r:4"]);
}

#[test]
fn a_run_id_that_would_break_a_frame_gets_no_ids() {
    for run_id in ["r\n", "r\r", "r\0"] {
        let mut encoder = RunEncoder::new(ProtocolVersion::V1, "t".into(), run_id.into())
            .without_timestamps()
            .with_event_ids();
        let mut out = Vec::new();
        encoder.start(&mut out).unwrap();
        assert!(out.starts_with(b"data: "), "{run_id:?}");
    }
}

#[test]
fn a_cancelled_run_closes_what_is_open_and_reads_per_version() {
    let mut v1 = encoder(ProtocolVersion::V1);
    let mut out = Vec::new();
    v1.push(text_start("m"), &mut out).unwrap();
    v1.cancel("stopped", &mut out).unwrap();
    let events = frames(&out);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_END",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(events[3]["outcome"], json!({"type": "cancelled"}));

    let mut legacy = encoder(ProtocolVersion::Legacy);
    let mut out = Vec::new();
    legacy.push(text_start("m"), &mut out).unwrap();
    legacy.cancel("stopped", &mut out).unwrap();
    let events = frames(&out);
    assert_eq!(events.last().unwrap()["type"], "RUN_ERROR");
    assert_eq!(events.last().unwrap()["code"], "cancelled");
    legacy.cancel("again", &mut out).unwrap();
    assert_eq!(
        frames(&out).len(),
        events.len(),
        "nothing follows the terminal event"
    );
}

/// The content events' own writer gives the bytes serde gives for the same event, with and
/// without a timestamp, for text that needs escaping (quotes, backslashes, control characters,
/// line breaks, non-ASCII) and for events it leaves to serde (a subagent's).
#[test]
fn content_frames_are_written_byte_for_byte_as_serde_writes_them() {
    let texts = [
        "plain",
        "",
        "quote \" backslash \\ slash /",
        "line\nbreak\r\ttab \u{0} \u{1f} \u{7f}",
        "backspace \u{8} form feed \u{c} \u{b} \u{1b}[0m",
        "\"",
        "\\",
        "é 😀 \u{2028}\u{2029}",
        "{\"recipe\": {\"title\": \"Tacos\"}}",
    ];
    for id in ["msg_1", "call \"odd\"\n"] {
        for delta in texts {
            let mut subagent = TextMessageContent::new(id.to_owned(), delta.to_owned());
            subagent.subagent_run_id = Some("sub".into());
            let bodies = [
                EventBody::TextMessageContent(TextMessageContent::new(
                    id.to_owned(),
                    delta.to_owned(),
                )),
                EventBody::ReasoningMessageContent(TextMessageContent::new(
                    id.to_owned(),
                    delta.to_owned(),
                )),
                EventBody::ToolCallArgs(ToolCallArgs {
                    tool_call_id: id.into(),
                    delta: delta.into(),
                    subagent_run_id: None,
                }),
                EventBody::TextMessageContent(subagent),
            ];
            for body in bodies {
                for timestamp in [None, Some(1_764_547_200_123)] {
                    let mut by_serde = Vec::new();
                    let event = Event {
                        body: body.clone(),
                        timestamp,
                        raw_event: None,
                        metadata: None,
                    };
                    write_frame(&event, &mut by_serde).unwrap();
                    let mut ours = Vec::new();
                    let frame = frame_of(body.clone(), timestamp).unwrap();
                    let subagent = matches!(&body, EventBody::TextMessageContent(e) if e.subagent_run_id.is_some());
                    assert_eq!(matches!(frame, Frame::Event(_)), subagent, "{body:?}");
                    frame.write(None, &mut ours);
                    assert_eq!(
                        String::from_utf8(ours).unwrap(),
                        String::from_utf8(by_serde).unwrap()
                    );
                }
            }
        }
    }
}

/// What a frame says it writes is what it writes, with and without its `id:` line, for content
/// that needs escaping and for events written by serde; so a batch's length, which the byte
/// metrics and the batch bound count, is its bytes'.
#[test]
fn a_frame_writes_as_many_bytes_as_it_says() {
    let deltas = [
        "plain",
        "",
        "quote \" and \\",
        "line\nbreak \u{1f} \u{0}",
        "é 😀",
        "\\",
    ];
    let prefix = event_id_prefix("run:1");
    for seq in [1, 9, 10, 12_345, 999_999_999_999_999_999] {
        let id = EventId {
            prefix: &prefix,
            seq,
        };
        for of in ["msg_1", "call \"odd\"\\"] {
            for delta in deltas {
                for timestamp in [None, Some(0), Some(1_764_547_200_123), Some(-5)] {
                    for kind in [
                        ContentKind::Text,
                        ContentKind::Reasoning,
                        ContentKind::ToolCallArgs,
                    ] {
                        let frame = Frame::Content(Fragment {
                            kind,
                            id: of.into(),
                            delta: delta.into(),
                            timestamp,
                        });
                        for id in [None, Some(id)] {
                            let mut written = Vec::new();
                            frame.write(id, &mut written);
                            assert_eq!(frame.len(id), written.len(), "{written:?}");
                        }
                    }
                }
            }
        }
        let mut encoder = RunEncoder::new(ProtocolVersion::V1, "t".into(), "r".into());
        let mut batch = Batch::default();
        encoder.start(&mut batch).unwrap();
        encoder.push(text_start("m \"1\""), &mut batch).unwrap();
        encoder.finish(&mut batch).unwrap();
        assert_eq!(batch.to_bytes().len(), batch.len());
        let mut written = Vec::new();
        first_frame(&batch).write(Some(id), &mut written);
        assert_eq!(first_frame(&batch).len(Some(id)), written.len());
    }
}

fn first_frame(batch: &Batch) -> &Frame {
    &batch.frames()[0]
}

/// A batch writes, frame after frame, what the same events written straight to bytes give,
/// `id:` lines included; and one frame at a time, the same bytes again.
#[test]
fn a_batch_writes_what_the_encoder_writes_to_bytes() {
    let run = |out: &mut dyn FnMut(&mut RunEncoder)| {
        let mut encoder = RunEncoder::new(ProtocolVersion::V1, "t".into(), "run:1".into())
            .with_event_ids()
            .without_timestamps();
        out(&mut encoder);
    };
    let events = || {
        vec![
            text_start("m"),
            EventBody::text_content("m", "a \"b\""),
            EventBody::text_content("m", "c"),
            tool_start("c1", "m"),
            EventBody::tool_call_args("c1", "{}"),
        ]
    };
    let mut bytes = Vec::new();
    run(&mut |encoder| {
        encoder.start(&mut bytes).unwrap();
        for event in events() {
            encoder.push(event, &mut bytes).unwrap();
        }
        encoder.finish(&mut bytes).unwrap();
    });
    let mut batch = Batch::default();
    run(&mut |encoder| {
        encoder.start(&mut batch).unwrap();
        for event in events() {
            encoder.push(event, &mut batch).unwrap();
        }
        encoder.finish(&mut batch).unwrap();
    });
    assert_eq!(batch.first_seq(), 1);
    assert_eq!(batch.frame_count(), 9);
    assert_eq!(
        String::from_utf8(batch.to_bytes().to_vec()).unwrap(),
        String::from_utf8(bytes.clone()).unwrap()
    );
    assert_eq!(batch.frame_bytes().concat(), bytes);
    assert!(String::from_utf8(bytes)
        .unwrap()
        .starts_with("id: run:1:1\ndata: "));
}

/// Every ASCII character, alone, at either end of a string and all in one, is written as
/// serde_json writes it.
#[test]
fn json_strings_are_escaped_as_serde_escapes_them() {
    let all: String = (0u8..=0x7f).map(char::from).collect();
    let mut texts = vec![all.clone(), format!("é{all}😀"), all.repeat(3)];
    for byte in 0u8..=0x7f {
        let c = char::from(byte);
        texts.push(c.to_string());
        texts.push(format!("{c}ab"));
        texts.push(format!("ab{c}"));
    }
    for text in texts {
        let mut ours = Vec::new();
        write_json_string(&text, &mut ours);
        assert_eq!(json_string_len(&text), ours.len());
        assert_eq!(
            String::from_utf8(ours).unwrap(),
            serde_json::to_string(&text).unwrap(),
            "{text:?}"
        );
    }
}

/// A subagent still open when the run ends is closed with `SUBAGENT_ERROR` after what it left
/// open, and its calls are never the client's pending calls.
#[test]
fn an_open_subagent_is_closed_before_the_run_finishes() {
    let mut enc = encoder(ProtocolVersion::V1);
    let mut out = Vec::new();
    let started = EventBody::SubagentStarted(SubagentStarted {
        subagent_run_id: "sa".into(),
        name: "flights".into(),
        description: None,
        parent_subagent_run_id: None,
        parent_tool_call_id: Some("c0".into()),
        parent_message_id: None,
    });
    enc.push(started.clone(), &mut out).unwrap();
    let mut call = tool_start("c1", "m1");
    call.attribute_to("sa");
    enc.push(call, &mut out).unwrap();
    enc.finish(&mut out).unwrap();
    let events = frames(&out);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "RUN_STARTED",
            "SUBAGENT_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_END",
            "SUBAGENT_ERROR",
            "RUN_FINISHED"
        ]
    );
    assert_eq!(events[4]["subagentRunId"], "sa");
    assert_eq!(events[5]["outcome"], json!({"type": "success"}));

    let mut twice = encoder(ProtocolVersion::V1);
    let mut out = Vec::new();
    twice.push(started.clone(), &mut out).unwrap();
    assert!(twice.push(started, &mut out).is_err());
}

#[test]
fn a_suspended_subagents_open_calls_are_the_clients_and_its_parent_call_waits_for_it() {
    let mut enc = encoder(ProtocolVersion::V1);
    let mut out = Vec::new();
    let subagent = |id: &str, call: &str| {
        EventBody::SubagentStarted(SubagentStarted {
            subagent_run_id: id.into(),
            name: "flights".into(),
            description: None,
            parent_subagent_run_id: None,
            parent_tool_call_id: Some(call.into()),
            parent_message_id: None,
        })
    };
    let finished = |id: &str, outcome| {
        EventBody::SubagentFinished(SubagentFinished {
            subagent_run_id: id.into(),
            result: None,
            outcome: Some(outcome),
        })
    };
    let attributed = |mut body: EventBody, id: &str| {
        body.attribute_to(id);
        body
    };
    for body in [
        tool_start("c0", "m0"),
        EventBody::tool_call_end("c0".to_owned()),
        tool_start("c9", "m0"),
        EventBody::tool_call_end("c9".to_owned()),
        subagent("sa", "c0"),
        attributed(tool_start("sa.c1", "m1"), "sa"),
        attributed(EventBody::tool_call_end("sa.c1".to_owned()), "sa"),
        finished(
            "sa",
            SubagentOutcome::Suspended {
                interrupt_ids: None,
            },
        ),
        // A subagent that finished leaves nothing for the client, whatever it left open.
        subagent("sb", "c9"),
        attributed(tool_start("sb.c1", "m2"), "sb"),
        attributed(EventBody::tool_call_end("sb.c1".to_owned()), "sb"),
        finished("sb", SubagentOutcome::Success),
    ] {
        enc.push(body, &mut out).unwrap();
    }
    enc.finish(&mut out).unwrap();
    let events = frames(&out);
    assert_eq!(
        events.last().unwrap()["outcome"],
        json!({"type": "success", "pendingToolCallIds": ["c9", "sa.c1"]})
    );
}
