//! The chunk decoder fed what real model servers send: bytes split anywhere, every finish
//! reason, usage, tool-call shapes, and malformed chunks.

use super::*;

/// What `fragments` decode to, without the response's names (which
/// `the_first_chunk_naming_the_response_names_it_once` covers).
fn run(fragments: &[&[u8]]) -> Vec<Result<LlmEvent, LlmError>> {
    let mut out = run_with_names(fragments);
    out.retain(|event| !matches!(event, Ok(LlmEvent::Response { .. })));
    out
}

fn run_with_names(fragments: &[&[u8]]) -> Vec<Result<LlmEvent, LlmError>> {
    let mut decoder = StreamDecoder::new(Redactor::new(["sk-live-secret".to_owned()]));
    let mut out = Vec::new();
    for fragment in fragments {
        decoder.feed(fragment, &mut out);
    }
    decoder.end_with(None, &mut out);
    out
}

#[test]
fn the_first_chunk_naming_the_response_names_it_once() {
    let events = ok(run_with_names(&[concat!(
        "data: {\"id\":\"chatcmpl-7\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        "data: {\"id\":\"chatcmpl-7\",\"object\":\"chat.completion.chunk\",\"created\":2,\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    )
    .as_bytes()]));
    assert_eq!(
        events,
        vec![
            LlmEvent::Response {
                id: Some("chatcmpl-7".into()),
                model: Some("gpt-4o-2024-08-06".into()),
            },
            text("Hi"),
            finished(FinishReason::Stop)
        ]
    );
    // Azure's first chunk names nothing (empty strings): the next one does; and a reply whose
    // chunks put `choices` first is named all the same.
    let events = ok(run_with_names(&[concat!(
        "data: {\"id\":\"\",\"model\":\"\",\"choices\":[]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":\"stop\"}],\"id\":\"x\",\"model\":\"gpt-4o\"}\n\n",
        "data: {\"choices\":[],\"id\":\"y\",\"model\":\"other\"}\n\n",
        "data: [DONE]\n\n",
    )
    .as_bytes()]));
    let named = LlmEvent::Response {
        id: Some("x".into()),
        model: Some("gpt-4o".into()),
    };
    assert_eq!(
        events,
        vec![named, text("Hi"), finished(FinishReason::Stop)]
    );
}

fn run_str(body: &str) -> Vec<Result<LlmEvent, LlmError>> {
    run(&[body.as_bytes()])
}

fn ok(events: Vec<Result<LlmEvent, LlmError>>) -> Vec<LlmEvent> {
    events
        .into_iter()
        .map(|e| e.expect("no error expected"))
        .collect()
}

fn text(s: &str) -> LlmEvent {
    LlmEvent::TextDelta(s.to_owned())
}

fn finished(reason: FinishReason) -> LlmEvent {
    LlmEvent::Finished { reason }
}

fn call(index: usize, id: Option<&str>, name: Option<&str>, arguments: &str) -> LlmEvent {
    LlmEvent::ToolCallDelta {
        index,
        id: id.map(str::to_owned),
        name: name.map(str::to_owned),
        arguments: arguments.to_owned(),
    }
}

/// All tool-call arguments concatenated per normalized index.
fn arguments_by_index(events: &[LlmEvent]) -> Vec<String> {
    let mut by_index: Vec<String> = Vec::new();
    for event in events {
        if let LlmEvent::ToolCallDelta {
            index, arguments, ..
        } = event
        {
            if by_index.len() <= *index {
                by_index.resize(index + 1, String::new());
            }
            by_index[*index].push_str(arguments);
        }
    }
    by_index
}

#[test]
fn plain_text_stream() {
    let events = ok(run_str(concat!(
        "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":null}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
    )));
    assert_eq!(
        events,
        vec![text("Hel"), text("lo"), finished(FinishReason::Stop)]
    );
}

/// (a) Azure's first chunk: empty `choices`, `prompt_filter_results`; and `content_filter_results`.
#[test]
fn azure_prompt_filter_chunk_is_ignored() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[],\"created\":0,\"id\":\"\",\"model\":\"\",\"object\":\"\",\"prompt_filter_results\":[{\"prompt_index\":0,\"content_filter_results\":{\"hate\":{\"filtered\":false,\"severity\":\"safe\"}}}]}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{\"content\":\"Hi\",\"role\":\"assistant\"},\"finish_reason\":null,\"index\":0,\"logprobs\":null}],\"created\":1,\"id\":\"x\",\"model\":\"gpt-4o\",\"object\":\"chat.completion.chunk\",\"system_fingerprint\":\"fp\"}\n\n",
        "data: {\"choices\":[{\"content_filter_results\":{},\"delta\":{},\"finish_reason\":\"stop\",\"index\":0}],\"id\":\"x\",\"object\":\"chat.completion.chunk\"}\n\n",
        "data: [DONE]\n\n",
    )));
    assert_eq!(events, vec![text("Hi"), finished(FinishReason::Stop)]);
}

/// (b) The usage chunk has empty `choices`; usage comes last, after `Finished`.
#[test]
fn usage_chunk_with_empty_choices() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":null}],\"usage\":null}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":null}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":3,\"total_tokens\":15,",
        "\"prompt_tokens_details\":{\"cached_tokens\":8,\"audio_tokens\":0},",
        "\"completion_tokens_details\":{\"reasoning_tokens\":2,\"audio_tokens\":0}}}\n\n",
        "data: [DONE]\n\n",
    )));
    assert_eq!(
        events,
        vec![
            text("ok"),
            finished(FinishReason::Stop),
            LlmEvent::Usage(Usage {
                input_tokens: 12,
                output_tokens: 3,
                reasoning_tokens: Some(2),
                cached_input_tokens: Some(8),
            }),
        ]
    );
}

#[test]
fn usage_repeated_on_every_chunk_is_reported_once() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n",
    )));
    assert_eq!(
        events,
        vec![
            text("a"),
            text("b"),
            finished(FinishReason::Stop),
            LlmEvent::Usage(Usage {
                input_tokens: 5,
                output_tokens: 2,
                ..Usage::default()
            }),
        ]
    );
}

/// (c) `id` and `name` repeated in every chunk (some vLLM/LiteLLM versions): emitted once.
#[test]
fn repeated_id_and_name_are_emitted_once() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\":\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\\\"Paris\\\"}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
        "data: [DONE]\n\n",
    )));
    assert_eq!(
        events,
        vec![
            call(0, Some("call_1"), Some("get_weather"), ""),
            call(0, None, None, "{\"location\":"),
            call(0, None, None, "\"Paris\"}"),
            finished(FinishReason::ToolCalls),
        ]
    );
}

/// (d) Whole arguments in one chunk (Gemini, Ollama), without an index.
#[test]
fn whole_call_in_one_chunk() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"tool_calls\":[",
        "{\"id\":\"a\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"location\\\":\\\"Paris\\\"}\"}},",
        "{\"id\":\"b\",\"type\":\"function\",\"function\":{\"name\":\"get_time\",\"arguments\":{\"tz\":\"UTC\"}}}",
        "]},\"finish_reason\":\"tool_calls\"}]}\n\n",
    )));
    assert_eq!(
        events,
        vec![
            call(
                0,
                Some("a"),
                Some("get_weather"),
                "{\"location\":\"Paris\"}"
            ),
            call(1, Some("b"), Some("get_time"), "{\"tz\":\"UTC\"}"),
            finished(FinishReason::ToolCalls),
        ]
    );
}

/// (e) Parallel calls whose fragments alternate by `index`.
#[test]
fn interleaved_parallel_calls() {
    let chunk = |index: u32, head: &str, args: &str| {
        format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{index}{head},\"function\":{{\"arguments\":{}}}}}]}}}}]}}\n\n",
            serde_json::to_string(args).expect("string")
        )
    };
    let body = [
        chunk(0, ",\"id\":\"c0\",\"type\":\"function\"", ""),
        chunk(1, ",\"id\":\"c1\",\"type\":\"function\"", ""),
        chunk(0, "", "{\"city\":"),
        chunk(1, "", "{\"tz\":"),
        chunk(0, "", "\"Oslo\"}"),
        chunk(1, "", "\"CET\"}"),
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let events = ok(run_str(&body));
    assert_eq!(events[0], call(0, Some("c0"), None, ""));
    assert_eq!(events[1], call(1, Some("c1"), None, ""));
    assert_eq!(
        arguments_by_index(&events),
        vec!["{\"city\":\"Oslo\"}", "{\"tz\":\"CET\"}"]
    );
    assert_eq!(events.last(), Some(&finished(FinishReason::ToolCalls)));
}

/// Interleaved calls with a wire index that does not start at 0 (or skips numbers).
#[test]
fn sparse_wire_indices_are_normalized() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"id\":\"x\",\"function\":{\"name\":\"f\",\"arguments\":\"{\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":7,\"id\":\"y\",\"function\":{\"name\":\"g\",\"arguments\":\"[\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":3,\"function\":{\"arguments\":\"}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":7,\"function\":{\"arguments\":\"]\"}}]}}]}\n\n",
        "data: [DONE]\n\n",
    )));
    assert_eq!(arguments_by_index(&events), vec!["{}", "[]"]);
    // [DONE] without a finish_reason: a Finished is made up from what was seen.
    assert_eq!(events.last(), Some(&finished(FinishReason::ToolCalls)));
}

/// (f) Every call at index 0 (or without an index), a distinct id per call.
#[test]
fn same_index_new_id_is_a_new_call() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"A\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"a\\\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\":1}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"B\",\"function\":{\"name\":\"f\",\"arguments\":\"{\\\"b\\\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"B\",\"function\":{\"arguments\":\":2}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"C\",\"function\":{\"name\":\"g\",\"arguments\":\"{}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    )));
    assert_eq!(
        events,
        vec![
            call(0, Some("A"), Some("f"), "{\"a\""),
            call(0, None, None, ":1}"),
            call(1, Some("B"), Some("f"), "{\"b\""),
            call(1, None, None, ":2}"),
            call(2, Some("C"), Some("g"), "{}"),
            finished(FinishReason::ToolCalls),
        ]
    );
}

#[test]
fn missing_id_is_made_up_once() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"\",\"function\":{\"name\":\"f\",\"arguments\":\"\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"late\",\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    )));
    let LlmEvent::ToolCallDelta {
        index: 0,
        id: Some(id),
        name: Some(name),
        ..
    } = &events[0]
    else {
        panic!("unexpected {events:?}");
    };
    assert!(id.starts_with("call_") && id.len() == 37, "{id}");
    assert_eq!(name, "f");
    // The late real id does not start a second call.
    assert_eq!(events[1], call(0, None, None, "{}"));
    assert_eq!(events.len(), 3);
}

#[test]
fn legacy_function_call_delta() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[{\"delta\":{\"function_call\":{\"name\":\"f\",\"arguments\":\"\"}}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"function_call\":{\"arguments\":\"{}\"}}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"function_call\"}]}\n\n",
    )));
    assert!(
        matches!(&events[0], LlmEvent::ToolCallDelta { index: 0, id: Some(_), name: Some(n), .. } if n == "f")
    );
    assert_eq!(events[1], call(0, None, None, "{}"));
    assert_eq!(events[2], finished(FinishReason::ToolCalls));
}

/// (g) `reasoning_content` (DeepSeek, vLLM) and `reasoning` (OpenRouter, Ollama).
#[test]
fn reasoning_fields() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"Let me think\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"reasoning\":\" more\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"both\",\"reasoning\":\"both\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"Answer\",\"reasoning_content\":null}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    )));
    assert_eq!(
        events,
        vec![
            LlmEvent::ReasoningDelta("Let me think".into()),
            LlmEvent::ReasoningDelta(" more".into()),
            LlmEvent::ReasoningDelta("both".into()),
            text("Answer"),
            finished(FinishReason::Stop),
        ]
    );
}

/// (h) llama.cpp's server: an error object as a frame mid-stream, then the body ends.
#[test]
fn error_frame_mid_stream() {
    let events = run_str(concat!(
        "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        "data: {\"error\":{\"code\":500,\"message\":\"the request exceeds the available context size\",\"type\":\"exceed_context_size_error\"}}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"never\"}}]}\n\n",
    ));
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0], Ok(text("Hi")));
    let Err(error) = &events[1] else {
        panic!("expected an error: {events:?}");
    };
    assert_eq!(error.code(), "upstream_error");
    assert_eq!(
        error.public_message(),
        "the model server reported an error while answering: the request exceeds the available context size"
    );
    assert!(matches!(error, LlmError::Upstream { code: Some(c), .. } if c == "500"));
}

#[test]
fn other_error_frame_shapes() {
    // vLLM: top-level error fields.
    let events = run_str("data: {\"object\":\"error\",\"message\":\"boom\",\"type\":\"BadRequestError\",\"code\":400}\n\n");
    assert!(
        matches!(&events[..], [Err(LlmError::Upstream { upstream_message: Some(m), code: Some(c), .. })] if m == "boom" && c == "400"),
        "{events:?}"
    );
    // `event: error` with plain text; a string `error`.
    let events = run_str("event: error\ndata: overloaded\n\n");
    assert!(
        matches!(&events[..], [Err(LlmError::Upstream { upstream_message: Some(m), .. })] if m == "overloaded")
    );
    let events = run_str("data: {\"error\":\"bad things\"}\n\n");
    assert!(
        matches!(&events[..], [Err(LlmError::Upstream { upstream_message: Some(m), .. })] if m == "bad things")
    );
    // A message that echoes the key is not shown, and the log detail is redacted.
    let events = run_str("data: {\"error\":{\"message\":\"invalid sk-live-secret\"}}\n\n");
    let [Err(LlmError::Upstream {
        upstream_message,
        detail,
        ..
    })] = &events[..]
    else {
        panic!("{events:?}");
    };
    assert_eq!(upstream_message, &None);
    assert!(!detail.contains("sk-live-secret") && detail.contains("[redacted]"));
}

/// (i) End of body after a finish_reason without `[DONE]` is a normal end; with neither it
/// is a cut stream.
#[test]
fn end_of_body_rules() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}",
    )));
    assert_eq!(
        events,
        vec![
            text("a"),
            finished(FinishReason::Length),
            LlmEvent::Usage(Usage {
                input_tokens: 1,
                output_tokens: 1,
                ..Usage::default()
            })
        ]
    );

    let events = run_str("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n");
    assert_eq!(events.len(), 2);
    assert_eq!(events[0], Ok(text("a")));
    assert!(matches!(&events[1], Err(e) if e.code() == "upstream_stream_cut"));

    // An empty body is cut too.
    let events = run_str("");
    assert!(matches!(&events[..], [Err(e)] if e.code() == "upstream_stream_cut"));
}

#[test]
fn nothing_after_done() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n",
        "data: [DONE]\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"late\"}}]}\n\n",
        "data: not json\n\n",
    )));
    assert_eq!(events, vec![text("a"), finished(FinishReason::Stop)]);
}

/// Chunks that never carry a choice (only usage, only filter results, or nothing) and then
/// `[DONE]`: not a chat completion, so not an empty answer either.
#[test]
fn done_without_any_choice_is_malformed() {
    for body in [
        "data: [DONE]\n\n",
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":0}}\n\ndata: [DONE]\n\n",
        "data: {\"choices\":null}\n\ndata: {}\n\ndata: [DONE]\n\n",
    ] {
        let events = run_str(body);
        assert!(
            matches!(&events[..], [Err(e)] if e.code() == "upstream_malformed"),
            "{body}: {events:?}"
        );
    }
    // One choice, even empty, is a reply: the model had nothing to say.
    let events = ok(run_str(
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}\n\ndata: [DONE]\n\n",
    ));
    assert_eq!(events, vec![finished(FinishReason::Stop)]);
}

/// (j) A chunk that is not JSON, or not an object.
#[test]
fn malformed_chunks() {
    for body in [
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: {\"choices\":[\n\ndata: [DONE]\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [1,2]\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: hello\n\n",
    ] {
        let events = run_str(body);
        assert_eq!(events.len(), 2, "{body}: {events:?}");
        assert_eq!(events[0], Ok(text("a")));
        assert!(matches!(&events[1], Err(e) if e.code() == "upstream_malformed"), "{events:?}");
    }
}

/// (k) CRLF framing, split at every byte, including inside multi-byte characters.
#[test]
fn crlf_framing_split_anywhere() {
    let body = concat!(
        ": ping\r\n\r\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"h\u{e9}\u{1f600}\"}}]}\r\n\r\n",
        "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\r\n\r\n",
        "data: [DONE]\r\n\r\n",
    )
    .as_bytes();
    let expected = vec![text("h\u{e9}\u{1f600}"), finished(FinishReason::Stop)];
    for split in 0..=body.len() {
        let (a, b) = body.split_at(split);
        assert_eq!(ok(run(&[a, b])), expected, "split at {split}");
    }
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(ok(run(&bytes)), expected);
}

/// (l) Every finish_reason value.
#[test]
fn finish_reasons() {
    for (wire, reason) in [
        ("stop", FinishReason::Stop),
        ("tool_calls", FinishReason::ToolCalls),
        ("function_call", FinishReason::ToolCalls),
        ("length", FinishReason::Length),
        ("content_filter", FinishReason::ContentFilter),
        ("eos_token", FinishReason::Other("eos_token".into())),
    ] {
        let events = ok(run_str(&format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{wire}\"}}]}}\n\n\
             data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{wire}\"}}]}}\n\ndata: [DONE]\n\n"
        )));
        assert_eq!(events, vec![finished(reason)], "{wire}");
    }
}

#[test]
fn multi_line_data_is_one_json_document() {
    let events = ok(run_str(
        "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\n",
    ));
    assert_eq!(events, vec![text("x"), finished(FinishReason::Stop)]);
}

#[test]
fn chunks_without_blank_lines_between_them() {
    let events = ok(run_str(concat!(
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"stop\"}]}\n",
        "data: [DONE]\n",
    )));
    assert_eq!(
        events,
        vec![text("a"), text("b"), finished(FinishReason::Stop)]
    );
}

#[test]
fn tolerated_oddities() {
    let events = ok(run_str(concat!(
        // choices null, unknown fields, wrong-typed fields read as absent
        "data: {\"choices\":null,\"foo\":1}\n\n",
        "data: {}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":[{\"type\":\"text\",\"text\":\"part\"},{\"type\":\"image_url\"}],\"tool_calls\":\"junk\"}}]}\n\n",
        "data: {\"choices\":[{\"delta\":{\"refusal\":\"I can't\"}}]}\n\n",
        // a second choice (server ignoring n=1) is ignored
        "data: {\"choices\":[{\"index\":1,\"delta\":{\"content\":\"other\"}}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"\"}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":\"x\",\"completion_tokens\":4}}\n\n",
        "data:  [DONE] \n\n",
    )));
    assert_eq!(
        events,
        vec![
            text("part"),
            text("I can't"),
            finished(FinishReason::Stop),
            LlmEvent::Usage(Usage {
                input_tokens: 0,
                output_tokens: 4,
                ..Usage::default()
            })
        ]
    );
}

#[test]
fn non_streaming_json_body() {
    let mut parser = ChunkParser::new(Redactor::default());
    let mut out = Vec::new();
    parser
        .on_json_body(
            br#"{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hello","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
            &mut out,
        )
        .expect("parses");
    assert_eq!(
        out,
        vec![
            text("Hello"),
            call(0, Some("c"), Some("f"), "{}"),
            finished(FinishReason::ToolCalls),
            LlmEvent::Usage(Usage {
                input_tokens: 3,
                output_tokens: 2,
                ..Usage::default()
            })
        ]
    );

    let mut parser = ChunkParser::new(Redactor::default());
    let err = parser
        .on_json_body(
            br#"{"error":{"message":"quota exceeded","code":"insufficient_quota"}}"#,
            &mut Vec::new(),
        )
        .expect_err("error body");
    assert_eq!(err.code(), "upstream_error");
    let mut parser = ChunkParser::new(Redactor::default());
    let err = parser
        .on_json_body(b"<html>", &mut Vec::new())
        .expect_err("html");
    assert_eq!(err.code(), "upstream_malformed");
}

#[test]
fn broken_body_after_finish_is_complete() {
    let mut decoder = StreamDecoder::new(Redactor::default());
    let mut out = Vec::new();
    decoder.feed(
        b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"stop\"}]}\n\n",
        &mut out,
    );
    decoder.end_with(Some("connection reset".into()), &mut out);
    assert_eq!(ok(out), vec![text("a"), finished(FinishReason::Stop)]);

    let mut decoder = StreamDecoder::new(Redactor::default());
    let mut out = Vec::new();
    decoder.feed(
        b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n",
        &mut out,
    );
    decoder.end_with(Some("connection reset".into()), &mut out);
    assert!(matches!(&out[1], Err(LlmError::StreamCut { detail }) if detail == "connection reset"));
    assert!(decoder.is_ended());
}

/// An OpenAI-style chunk: the head every chunk of a reply repeats, then `choices` and `rest`.
fn openai_chunk(head: &str, choices: &str, rest: &str) -> String {
    format!("data: {{{head},\"choices\":[{choices}]{rest}}}\n\n")
}

/// The same reply twice: once with the head every chunk shares (read once, then skipped), once
/// with a head that differs in every chunk (read whole each time). The events must not differ.
#[test]
fn a_reply_whose_chunks_share_a_head_reads_as_if_each_were_read_whole() {
    let bodies: Vec<String> = [true, false]
        .iter()
        .map(|shared| {
            let head = |n: usize| {
                let id = if *shared { 7 } else { n };
                format!(
                    r#""id":"chatcmpl-{id}","object":"chat.completion.chunk","created":1700000000,"model":"m","system_fingerprint":"fp""#
                )
            };
            let mut body = openai_chunk(
                &head(0),
                r#"{"index":0,"delta":{"role":"assistant","content":"Say \"hi\"\n"},"logprobs":null,"finish_reason":null}"#,
                "",
            );
            body += &openai_chunk(
                &head(1),
                r#"{"index":0,"delta":{"content":"é😀"},"finish_reason":null}"#,
                r#","obfuscation":"xy""#,
            );
            body += &openai_chunk(
                &head(2),
                r#"{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\""}}]}}"#,
                "",
            );
            body += &openai_chunk(
                &head(3),
                r#"{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":": 1}"}}]},"finish_reason":"tool_calls"}"#,
                "",
            );
            body += &openai_chunk(
                &head(4),
                "",
                r#","usage":{"prompt_tokens":9,"completion_tokens":4}"#,
            );
            body + "data: [DONE]\n\n"
        })
        .collect();
    let shared = ok(run_str(&bodies[0]));
    assert_eq!(shared, ok(run_str(&bodies[1])));
    assert_eq!(shared[0], text("Say \"hi\"\n"));
    assert_eq!(arguments_by_index(&shared), vec![r#"{"a": 1}"#.to_owned()]);
    assert!(shared.contains(&LlmEvent::Usage(Usage {
        input_tokens: 9,
        output_tokens: 4,
        ..Usage::default()
    })));
}

/// A head that carries something the parser reads (here a growing usage) is read in every chunk.
#[test]
fn a_head_that_carries_usage_is_read_in_every_chunk() {
    let head = |tokens: u32| {
        format!(r#""id":"c","usage":{{"prompt_tokens":3,"completion_tokens":{tokens}}}"#)
    };
    let body = openai_chunk(&head(1), r#"{"delta":{"content":"a"}}"#, "")
        + &openai_chunk(&head(1), r#"{"delta":{"content":"b"}}"#, "")
        + &openai_chunk(&head(2), r#"{"delta":{},"finish_reason":"stop"}"#, "");
    let events = ok(run_str(&body));
    assert_eq!(
        events.last(),
        Some(&LlmEvent::Usage(Usage {
            input_tokens: 3,
            output_tokens: 2,
            ..Usage::default()
        }))
    );
}

/// An error frame after the head was learnt is still an error, and a `,"choices":` nested in
/// the head's own members is not taken for the top-level one.
#[test]
fn a_shared_head_hides_neither_an_error_frame_nor_a_nested_choices() {
    let head = r#""id":"c","object":"chat.completion.chunk""#;
    let body = openai_chunk(head, r#"{"delta":{"content":"a"}}"#, "")
        + &openai_chunk(head, "", r#","object":"error","message":"overloaded""#);
    let events = run_str(&body);
    assert_eq!(events[0].as_ref().unwrap(), &text("a"));
    assert!(
        matches!(events[1], Err(LlmError::Upstream { .. })),
        "{events:?}"
    );

    let nested = r#""meta":{"a":1,"choices":[]}"#;
    let body = openai_chunk(nested, r#"{"delta":{"content":"a"}}"#, "")
        + &openai_chunk(
            nested,
            r#"{"delta":{"content":"b"},"finish_reason":"stop"}"#,
            "",
        );
    assert_eq!(
        ok(run_str(&body)),
        vec![text("a"), text("b"), finished(FinishReason::Stop)]
    );
}

/// `body` decoded twice, with shapes and with every chunk read by the JSON parser, which must
/// agree; and how many shapes were learnt.
fn run_with_and_without_shapes(body: &str) -> (Vec<Result<LlmEvent, LlmError>>, usize) {
    let redactor = || Redactor::new(["sk-live-secret".to_owned()]);
    let decode = |mut decoder: StreamDecoder<ChunkParser>| {
        let mut out = Vec::new();
        // In pieces, as a socket delivers them, so that shapes are learnt and used across reads.
        for piece in body.as_bytes().chunks(97) {
            decoder.feed(piece, &mut out);
        }
        decoder.end_with(None, &mut out);
        let learnt = decoder.parser.shapes.learnt();
        (out, learnt)
    };
    let (mut with_shapes, learnt) = decode(StreamDecoder::new(redactor()));
    let (parsed, _) = decode(StreamDecoder::without_shapes(redactor()));
    assert_eq!(format!("{with_shapes:?}"), format!("{parsed:?}"));
    with_shapes.retain(|event| !matches!(event, Ok(LlmEvent::Response { .. })));
    (with_shapes, learnt)
}

const HEAD: &str = r#""id":"chatcmpl-9","object":"chat.completion.chunk","created":1700000000,"model":"m","system_fingerprint":"fp""#;

fn content_chunk(quoted: &str) -> String {
    openai_chunk(
        HEAD,
        &format!(
            r#"{{"index":0,"delta":{{"content":{quoted}}},"logprobs":null,"finish_reason":null}}"#
        ),
        "",
    )
}

fn arguments_chunk(index: u64, quoted: &str) -> String {
    openai_chunk(
        HEAD,
        &format!(
            r#"{{"index":0,"delta":{{"tool_calls":[{{"index":{index},"function":{{"arguments":{quoted}}}}}]}},"logprobs":null,"finish_reason":null}}"#
        ),
        "",
    )
}

/// Texts, reasoning and two interleaved calls' arguments, with escapes, non-ASCII, empty and
/// null strings, and strings that would change the chunk's structure if taken as raw bytes.
#[test]
fn a_reply_read_by_its_shapes_reads_as_if_every_chunk_were_parsed() {
    let mut body = openai_chunk(
        HEAD,
        r#"{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}"#,
        "",
    );
    for quoted in [
        r#""Hel""#,
        r#""lo \"you\"\n""#,
        r#""\u00e9 é😀""#,
        r#""""#,
        "null",
        r#""a\\""#,
        r#""a","role":"b""#,
        r#""x"},"finish_reason":"stop","y":{"z":"""#,
        r#""tail""#,
    ] {
        body += &content_chunk(quoted);
    }
    for quoted in [r#""think""#, r#""ing \"hard\"""#] {
        body += &openai_chunk(
            HEAD,
            &format!(
                r#"{{"index":0,"delta":{{"reasoning_content":{quoted}}},"logprobs":null,"finish_reason":null}}"#
            ),
            "",
        );
    }
    for (index, id) in [(0, "call_a"), (1, "call_b")] {
        body += &openai_chunk(
            HEAD,
            &format!(
                r#"{{"index":0,"delta":{{"tool_calls":[{{"index":{index},"id":"{id}","type":"function","function":{{"name":"f","arguments":""}}}}]}},"logprobs":null,"finish_reason":null}}"#
            ),
            "",
        );
    }
    for (index, quoted) in [
        (0, r#""{\"a\":""#),
        (1, r#""{\"b\":""#),
        (0, r#"" \"x\\\"y\"""#),
        (1, r#"" 2""#),
        (0, r#""}""#),
        (1, r#""}""#),
    ] {
        body += &arguments_chunk(index, quoted);
    }
    body += &openai_chunk(
        HEAD,
        r#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}"#,
        "",
    );
    body += "data: [DONE]\n\n";

    let (events, learnt) = run_with_and_without_shapes(&body);
    assert_eq!(learnt, 4, "text, reasoning and one shape per call's index");
    let events = ok(events);
    let texts: Vec<&LlmEvent> = events
        .iter()
        .filter(|e| matches!(e, LlmEvent::TextDelta(_)))
        .collect();
    assert_eq!(texts[1], &text("lo \"you\"\n"));
    assert_eq!(texts[2], &text("é é😀"));
    assert_eq!(texts[4], &text("a"), "the role after it is not text");
    assert_eq!(
        arguments_by_index(&events),
        vec![r#"{"a": "x\"y"}"#.to_owned(), r#"{"b": 2}"#.to_owned()]
    );
}

/// A string under the same key in a member the parser ignores is not taken for the one it
/// reads: the probe fails, no shape is kept, and each chunk's own text is read.
#[test]
fn a_look_alike_string_in_an_ignored_member_teaches_no_shape() {
    let chunk = |ignored: &str| {
        openai_chunk(
            HEAD,
            &format!(
                r#"{{"index":0,"delta":{{"content": "same"}},"meta":{{"content":"{ignored}"}}}}"#
            ),
            "",
        )
    };
    let body = chunk("same") + &chunk("other") + &chunk("third") + "data: [DONE]\n\n";
    let (events, learnt) = run_with_and_without_shapes(&body);
    assert_eq!(learnt, 0);
    assert_eq!(
        ok(events),
        vec![
            text("same"),
            text("same"),
            text("same"),
            finished(FinishReason::Stop)
        ]
    );
}

/// A chunk of a known shape whose string is not well-formed JSON is read by the parser, which
/// refuses it as before.
#[test]
fn a_malformed_string_in_a_known_shape_is_still_malformed() {
    for broken in ["\"a\u{1}b\"", r#""a\qb""#, r#""a"b""#] {
        let body = content_chunk(r#""ok""#) + &content_chunk(r#""fine""#) + &content_chunk(broken);
        let (events, learnt) = run_with_and_without_shapes(&body);
        assert_eq!(learnt, 1);
        assert_eq!(events[1].as_ref().unwrap(), &text("fine"));
        assert!(
            matches!(events[2], Err(LlmError::Malformed { .. })),
            "{broken}: {events:?}"
        );
    }
}

/// OpenAI pads every chunk with a random `obfuscation` member after `choices`: it is left out
/// when the shape is compared, so such a reply is still read by its shapes.
#[test]
fn a_reply_padded_with_obfuscation_is_read_by_its_shapes() {
    let padded = |delta: &str, padding: &str| {
        openai_chunk(
            HEAD,
            &format!(r#"{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":null}}"#),
            &format!(r#","obfuscation":"{padding}""#),
        )
    };
    let body = padded(r#"{"role":"assistant","content":""}"#, "a1")
        + &padded(r#"{"content":"One"}"#, "Zx9")
        + &padded(r#"{"content":" two"}"#, "q")
        + &padded(r#"{"content":" \"three\""}"#, "Q7pL0")
        + &padded(r#"{"content":" four"}"#, r#"not \"plain\""#)
        + &openai_chunk(
            HEAD,
            r#"{"index":0,"delta":{},"logprobs":null,"finish_reason":"stop"}"#,
            r#","obfuscation":"k""#,
        )
        + "data: [DONE]\n\n";
    let (events, learnt) = run_with_and_without_shapes(&body);
    // One shape for all the plainly padded chunks; the padding with escapes is not left out,
    // so that chunk is read whole and teaches a shape of its own.
    assert_eq!(learnt, 2);
    assert_eq!(
        ok(events),
        vec![
            text("One"),
            text(" two"),
            text(" \"three\""),
            text(" four"),
            finished(FinishReason::Stop)
        ]
    );
}
