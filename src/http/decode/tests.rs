//! Hostile input to the decoder: a corpus of known-nasty bodies, and a property test that feeds
//! it generated ones. The property, for every input: no panic, and either a `RunAgentInput`
//! within the input limits or a 4xx whose body is `{"error":{"code","message"}}`.
//!
//! The generator is grammar-shaped (a body, its messages, their fields, then damage to the value
//! or to the bytes); it reads its decisions from a proptest choice sequence (`test_choices`), so
//! a failure is shrunk to a short sequence, that is a small body. `PROPTEST_CASES` runs more.

use std::cell::Cell;
use std::panic::{catch_unwind, AssertUnwindSafe};

use axum::response::IntoResponse;
use futures_util::FutureExt;
use serde_json::{json, Map, Value};

use super::decode_run_input;
use crate::agent::RunRequest;
use crate::settings::InputLimitSettings;

use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};

use crate::test_choices::{choice_bytes, config_with_cases, Choices};

/// Checks the property on one body; `Err` describes the violation.
fn check(bytes: &[u8], limits: &InputLimitSettings) -> Result<(), String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        decode_run_input(bytes, limits).map(|input| {
            let (messages, tools, context) =
                (input.messages.len(), input.tools.len(), input.context.len());
            // What the handler does next must not panic either.
            let request = RunRequest::from(input);
            drop(request);
            (messages, tools, context)
        })
    }));
    match outcome {
        Err(_) => Err("the decoder panicked".into()),
        Ok(Ok((messages, tools, context))) => {
            if messages > limits.max_messages
                || tools > limits.max_tools
                || context > limits.max_context_entries
            {
                return Err(format!(
                    "accepted over the limits: {messages} messages, {tools} tools, {context} context"
                ));
            }
            Ok(())
        }
        Ok(Err(error)) => {
            let response = error.into_response();
            let status = response.status();
            if !status.is_client_error() {
                return Err(format!("refused with {status}, not a 4xx"));
            }
            let content_type = response
                .headers()
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned();
            if !content_type.starts_with("application/json") {
                return Err(format!("error content-type {content_type:?}"));
            }
            let body = axum::body::to_bytes(response.into_body(), usize::MAX)
                .now_or_never()
                .ok_or("the error body was not ready at once")?
                .map_err(|e| format!("error body: {e}"))?;
            let body: Value = serde_json::from_slice(&body)
                .map_err(|e| format!("error body is not JSON ({e})"))?;
            if !body["error"]["code"].is_string() || !body["error"]["message"].is_string() {
                return Err(format!("error body without code and message: {body}"));
            }
            Ok(())
        }
    }
}

#[track_caller]
fn assert_holds(bytes: &[u8], limits: &InputLimitSettings, what: &str) {
    if let Err(violation) = check(bytes, limits) {
        let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(600)]);
        panic!(
            "{what}: {violation}; input ({} bytes): {shown}",
            bytes.len()
        );
    }
}

fn status_and_code(bytes: &[u8], limits: &InputLimitSettings) -> (u16, String) {
    let error = decode_run_input(bytes, limits).expect_err("refused");
    let response = error.into_response();
    let status = response.status().as_u16();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .now_or_never()
        .unwrap()
        .unwrap();
    let body: Value = serde_json::from_slice(&body).unwrap();
    (status, body["error"]["code"].as_str().unwrap().to_owned())
}

fn valid_input() -> Value {
    json!({
        "threadId": "t1",
        "runId": "r1",
        "protocolVersion": "1.0",
        "state": {"a": [1, 2, {"b": null}]},
        "messages": [
            {"id": "s", "role": "system", "content": "be brief"},
            {"id": "d", "role": "developer", "content": "dev", "name": "x"},
            {"id": "u", "role": "user", "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "url", "value": "https://x/y.png"}},
                {"type": "binary", "mimeType": "image/png", "data": crate::protocol::PNG_1X1},
            ]},
            {"id": "a", "role": "assistant", "content": null, "toolCalls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}},
            ]},
            {"id": "t", "role": "tool", "toolCallId": "c1", "content": "42", "error": null},
            {"id": "r", "role": "reasoning", "content": "hmm"},
            {"id": "v", "role": "activity", "activityType": "PLAN", "content": {"steps": []}},
        ],
        "tools": [{"name": "g", "description": "d", "parameters": {"type": "object"}}],
        "context": [{"description": "page", "value": "home"}],
        "forwardedProps": {"x": 1},
        "resume": [{"interruptId": "i1", "status": "resolved", "payload": {"approved": true}}],
    })
}

/// Known-nasty bodies, each of which must be refused or accepted cleanly.
fn corpus() -> Vec<Vec<u8>> {
    let mut corpus: Vec<Vec<u8>> = [
        "",
        " ",
        "null",
        "[]",
        "{}",
        "\"messages\"",
        "{\"messages\":[]}",
        "{\"messages\":null}",
        "{\"messages\":[],\"messages\":[]}",
        "{\"messages\":[{\"id\":\"1\",\"role\":\"user\",\"role\":\"tool\",\"content\":\"x\"}]}",
        "{\"messages\":[{\"id\":\"1\",\"role\":\"wizard\",\"content\":\"x\"}]}",
        "{\"messages\":[{\"role\":null}]}",
        "{\"messages\":[],\"threadId\":1e400}",
        "{\"messages\":[],\"state\":1e400}",
        "{\"messages\":[],\"state\":-1e400}",
        "{\"messages\":[],\"state\":18446744073709551616}",
        "{\"messages\":[],\"state\":123456789012345678901234567890123456789}",
        "{\"messages\":[],\"state\":\"\\ud800\"}",
        "{\"messages\":[],\"state\":\"\\udc00\\ud800\"}",
        "{\"messages\":[],\"state\":\"\\u0000\"}",
        "{\"messages\":[],\"tools\":null,\"context\":null,\"resume\":null,\"forwardedProps\":null}",
        "{\"messages\":[],\"tools\":[{\"name\":\"t\",\"parameters\":null}]}",
        "{\"messages\":[{\"id\":\"u\",\"role\":\"user\",\"content\":[{\"type\":\"image\",\"source\":null}]}]}",
        "{\"messages\":[{\"id\":\"u\",\"role\":\"user\",\"content\":[{\"type\":\"nope\",\"x\":1}]}]}",
        "{\"messages\":[{\"id\":\"a\",\"role\":\"assistant\",\"toolCalls\":null}]}",
        "{\"messages\":[],\"resume\":[{\"interruptId\":\"i\",\"status\":\"maybe\"}]}",
        "{\"messages\":[]} trailing",
        "{\"messages\":[],}",
        "\u{feff}{\"messages\":[]}",
    ]
    .iter()
    .map(|s| s.as_bytes().to_vec())
    .collect();
    corpus.push(b"{\"messages\":[],\"threadId\":\"\xff\xfe\"}".to_vec());
    corpus.push(b"\xff\xfe\x00{".to_vec());
    corpus.push(
        b"{\"messages\":[{\"id\":\"u\",\"role\":\"user\",\"content\":\"\xc3\x28\"}]}".to_vec(),
    );
    corpus.push("[".repeat(100_000).into_bytes());
    corpus.push("{\"a\":".repeat(100_000).into_bytes());
    corpus.push(format!("{{\"messages\":[],\"state\":{}", "[".repeat(100_000)).into_bytes());
    corpus.push(
        format!(
            "{{\"messages\":[],\"state\":{}1{}}}",
            "[".repeat(127),
            "]".repeat(127)
        )
        .into_bytes(),
    );
    corpus.push(
        format!(
            "{{\"messages\":[{{\"id\":\"u\",\"role\":\"user\",\"content\":\"{}\"}}]}}",
            "x".repeat(3 * 1024 * 1024)
        )
        .into_bytes(),
    );
    corpus.push(
        format!(
            "{{\"messages\":[{}]}}",
            vec!["{\"id\":\"\",\"role\":\"user\",\"content\":\"\"}"; 100_000].join(",")
        )
        .into_bytes(),
    );
    corpus
}

#[test]
fn every_corpus_input_is_refused_with_a_4xx_json_or_accepted() {
    let limits = InputLimitSettings::default();
    for (i, body) in corpus().iter().enumerate() {
        assert_holds(body, &limits, &format!("corpus #{i}"));
    }
}

#[test]
fn nesting_invalid_utf8_and_out_of_range_numbers_are_400() {
    let limits = InputLimitSettings::default();
    // Not even an object: the shape is wrong before the depth matters.
    assert_eq!(
        status_and_code("[".repeat(100_000).as_bytes(), &limits),
        (422, "invalid_request".to_owned())
    );
    for body in [
        format!("{{\"messages\":[],\"state\":{}", "[".repeat(100_000)).into_bytes(),
        b"{\"messages\":[],\"threadId\":\"\xff\"}".to_vec(),
        b"{\"messages\":[],\"state\":1e400}".to_vec(),
    ] {
        assert_eq!(
            status_and_code(&body, &limits),
            (400, "invalid_json".to_owned())
        );
    }
    assert_eq!(
        status_and_code(b"{\"messages\":[],\"messages\":[]}", &limits),
        (422, "invalid_request".to_owned())
    );
}

/// Small limits, so that each case below passes one of them by a little.
fn small_limits() -> InputLimitSettings {
    InputLimitSettings {
        max_messages: 3,
        max_content_bytes: 100,
        max_tools: 1,
        max_context_entries: 1,
        max_context_bytes: 10,
        max_id_bytes: 8,
        max_resume_entries: 1,
        max_resume_bytes: 40,
        ..InputLimitSettings::default()
    }
}

fn user_text(n: usize) -> Value {
    json!({"id": "u", "role": "user", "content": "x".repeat(n)})
}

#[test]
fn each_input_limit_is_refused_with_its_own_code() {
    let limits = small_limits();
    let text = user_text;
    let cases = [
        (
            json!({"messages": [text(1), text(1), text(1), text(1)]}),
            "too_many_messages",
            "max_messages",
        ),
        (
            json!({"messages": [text(60), {"id": "t", "role": "tool", "toolCallId": "c", "content": [{"type": "text", "text": "y".repeat(41)}]}]}),
            "content_too_large",
            "max_content_bytes",
        ),
        (
            json!({"messages": [{"id": "a", "role": "assistant", "toolCalls": [{"id": "c", "function": {"name": "f", "arguments": "z".repeat(101)}}]}]}),
            "content_too_large",
            "max_content_bytes",
        ),
        (
            json!({"messages": [], "tools": [{"name": "a"}, {"name": "b"}]}),
            "too_many_tools",
            "max_tools",
        ),
        (
            json!({"messages": [], "context": [{"description": "a", "value": "b"}, {"description": "c", "value": "d"}]}),
            "too_many_context_entries",
            "max_context_entries",
        ),
        (
            json!({"messages": [], "context": [{"description": "12345", "value": "678901"}]}),
            "context_too_large",
            "max_context_bytes",
        ),
        (
            json!({"messages": [], "threadId": "123456789"}),
            "id_too_long",
            "max_id_bytes",
        ),
        (
            json!({"messages": [], "parentRunId": "123456789"}),
            "id_too_long",
            "max_id_bytes",
        ),
        (
            json!({"messages": [], "resume": [{"interruptId": "a", "status": "cancelled"}, {"interruptId": "b", "status": "cancelled"}]}),
            "too_many_resume_entries",
            "max_resume_entries",
        ),
        (
            json!({"messages": [], "resume": [{"interruptId": "a".repeat(30), "status": "resolved", "payload": {"k": "0123456789"}}]}),
            "resume_too_large",
            "max_resume_bytes",
        ),
    ];
    for (body, code, key) in cases {
        let error = decode_run_input(&serde_json::to_vec(&body).unwrap(), &limits).expect_err(code);
        let message = format!("{error:?}");
        assert!(message.contains(code), "{message}");
        assert!(
            message.contains(key),
            "the message names the limit: {message}"
        );
        assert_eq!(
            status_and_code(&serde_json::to_vec(&body).unwrap(), &limits),
            (422, code.to_owned())
        );
    }
}

#[test]
fn input_at_every_limit_exactly_is_accepted() {
    let limits = small_limits();
    let text = user_text;
    let body = json!({
        "messages": [text(50), text(50), {"id": "r", "role": "reasoning", "content": ""}],
        "tools": [{"name": "a"}],
        "context": [{"description": "12345", "value": "67890"}],
        "threadId": "12345678",
        "runId": "é1234é",
        "resume": [{"interruptId": "a".repeat(24), "status": "resolved", "payload": {"k": "01234"}}],
    });
    assert!(decode_run_input(&serde_json::to_vec(&body).unwrap(), &limits).is_ok());
}

#[test]
fn a_control_character_in_an_id_is_refused() {
    let limits = small_limits();
    let control = json!({"messages": [], "threadId": "a\nb"});
    assert_eq!(
        status_and_code(&serde_json::to_vec(&control).unwrap(), &limits),
        (422, "invalid_id".to_owned())
    );
}

// ---- the generator ----------------------------------------------------------------------------

fn any_string(rng: &mut Choices<'_>) -> String {
    const PIECES: &[&str] = &[
        "", "a", "user", "tool", "\u{0}", "\n", "\"", "\\", "é", "😀", "\u{2028}", "</s>", "{",
        "]", "1.0", "function", "text", "image", "null",
    ];
    match rng.below(300) {
        0 => "x".repeat(rng.below(300_000)),
        _ => (0..rng.below(6)).map(|_| *rng.pick(PIECES)).collect(),
    }
}

fn any_number(rng: &mut Choices<'_>) -> Value {
    match rng.below(6) {
        0 => json!(0),
        1 => json!(i64::MIN),
        2 => json!(u64::MAX),
        3 => json!(f64::MAX),
        4 => json!(-0.5),
        _ => json!(rng.next()),
    }
}

/// Any JSON value, nested up to `depth`.
fn any_value(rng: &mut Choices<'_>, depth: usize) -> Value {
    match rng.below(if depth == 0 { 4 } else { 6 }) {
        0 => Value::Null,
        1 => Value::Bool(rng.percent(50)),
        2 => any_number(rng),
        3 => Value::String(any_string(rng)),
        4 => Value::Array(
            (0..rng.below(4))
                .map(|_| any_value(rng, depth - 1))
                .collect(),
        ),
        _ => {
            let mut map = Map::new();
            for _ in 0..rng.below(4) {
                map.insert(any_string(rng), any_value(rng, depth - 1));
            }
            Value::Object(map)
        }
    }
}

/// A field that is mostly well typed: absent, null, a random value, or `good`.
fn field(
    rng: &mut Choices<'_>,
    map: &mut Map<String, Value>,
    key: &str,
    good: impl FnOnce(&mut Choices<'_>) -> Value,
) {
    match rng.below(20) {
        0 => {}
        1 => {
            map.insert(key.into(), Value::Null);
        }
        2 => {
            let value = any_value(rng, 3);
            map.insert(key.into(), value);
        }
        _ => {
            let value = good(rng);
            map.insert(key.into(), value);
        }
    }
}

fn string(rng: &mut Choices<'_>) -> Value {
    Value::String(any_string(rng))
}

fn metadata(rng: &mut Choices<'_>) -> Value {
    let value = any_value(rng, 2);
    if value.is_object() {
        value
    } else {
        json!({"k": value})
    }
}

fn part(rng: &mut Choices<'_>) -> Value {
    let kind = *rng.pick(&[
        "text", "image", "audio", "video", "document", "binary", "weird",
    ]);
    let mut map = Map::new();
    field(rng, &mut map, "type", |_| json!(kind));
    field(rng, &mut map, "text", string);
    field(rng, &mut map, "id", string);
    field(rng, &mut map, "metadata", metadata);
    field(rng, &mut map, "mimeType", string);
    field(rng, &mut map, "data", string);
    field(rng, &mut map, "url", string);
    field(rng, &mut map, "filename", string);
    field(rng, &mut map, "source", |rng| {
        let kind = *rng.pick(&["data", "url", "file", "other"]);
        let mut source = Map::new();
        field(rng, &mut source, "type", |_| json!(kind));
        field(rng, &mut source, "value", string);
        field(rng, &mut source, "mimeType", string);
        field(rng, &mut source, "provider", string);
        Value::Object(source)
    });
    Value::Object(map)
}

fn content(rng: &mut Choices<'_>) -> Value {
    if rng.percent(50) {
        string(rng)
    } else {
        Value::Array((0..rng.below(4)).map(|_| part(rng)).collect())
    }
}

fn tool_call(rng: &mut Choices<'_>) -> Value {
    let mut map = Map::new();
    field(rng, &mut map, "id", string);
    field(rng, &mut map, "type", |_| json!("function"));
    field(rng, &mut map, "function", |rng| {
        let mut function = Map::new();
        field(rng, &mut function, "name", string);
        field(rng, &mut function, "arguments", string);
        Value::Object(function)
    });
    field(rng, &mut map, "encryptedValue", string);
    field(rng, &mut map, "metadata", metadata);
    Value::Object(map)
}

fn message(rng: &mut Choices<'_>) -> Value {
    let role = *rng.pick(&[
        "developer",
        "system",
        "assistant",
        "user",
        "tool",
        "activity",
        "reasoning",
        "wizard",
    ]);
    let mut map = Map::new();
    field(rng, &mut map, "role", |_| json!(role));
    field(rng, &mut map, "id", string);
    match role {
        "user" | "tool" => field(rng, &mut map, "content", content),
        "activity" => {
            field(rng, &mut map, "activityType", string);
            field(rng, &mut map, "content", metadata);
        }
        _ => field(rng, &mut map, "content", string),
    }
    if role == "assistant" || rng.percent(5) {
        field(rng, &mut map, "toolCalls", |rng| {
            Value::Array((0..rng.below(4)).map(|_| tool_call(rng)).collect())
        });
    }
    if role == "tool" || rng.percent(5) {
        field(rng, &mut map, "toolCallId", string);
        field(rng, &mut map, "error", string);
    }
    for key in ["name", "encryptedValue", "subagentRunId"] {
        if rng.percent(20) {
            field(rng, &mut map, key, string);
        }
    }
    field(rng, &mut map, "metadata", metadata);
    Value::Object(map)
}

fn run_input(rng: &mut Choices<'_>) -> Value {
    let mut map = Map::new();
    field(rng, &mut map, "threadId", string);
    field(rng, &mut map, "runId", string);
    field(rng, &mut map, "parentRunId", string);
    field(rng, &mut map, "protocolVersion", |rng| {
        json!(*rng.pick(&["1.0", "0.0.59", "2.0", ""]))
    });
    field(rng, &mut map, "state", |rng| any_value(rng, 4));
    field(rng, &mut map, "forwardedProps", |rng| any_value(rng, 3));
    field(rng, &mut map, "messages", |rng| {
        Value::Array((0..rng.below(8)).map(|_| message(rng)).collect())
    });
    field(rng, &mut map, "tools", |rng| {
        Value::Array(
            (0..rng.below(4))
                .map(|_| {
                    let mut tool = Map::new();
                    field(rng, &mut tool, "name", string);
                    field(rng, &mut tool, "description", string);
                    field(rng, &mut tool, "parameters", |rng| any_value(rng, 3));
                    field(rng, &mut tool, "metadata", metadata);
                    Value::Object(tool)
                })
                .collect(),
        )
    });
    field(rng, &mut map, "context", |rng| {
        Value::Array(
            (0..rng.below(4))
                .map(|_| {
                    let mut entry = Map::new();
                    field(rng, &mut entry, "description", string);
                    field(rng, &mut entry, "value", string);
                    Value::Object(entry)
                })
                .collect(),
        )
    });
    field(rng, &mut map, "resume", |rng| {
        Value::Array(
            (0..rng.below(3))
                .map(|_| {
                    let mut entry = Map::new();
                    field(rng, &mut entry, "interruptId", string);
                    field(rng, &mut entry, "status", |rng| {
                        json!(*rng.pick(&["resolved", "cancelled", "other"]))
                    });
                    field(rng, &mut entry, "payload", |rng| any_value(rng, 3));
                    field(rng, &mut entry, "metadata", metadata);
                    Value::Object(entry)
                })
                .collect(),
        )
    });
    Value::Object(map)
}

/// Drops, replaces or retypes one value somewhere inside `value`.
fn mutate_value(rng: &mut Choices<'_>, value: &mut Value) {
    let descend = rng.percent(60);
    match value {
        Value::Object(map) if !map.is_empty() => {
            let key = map
                .keys()
                .nth(rng.below(map.len()))
                .cloned()
                .unwrap_or_default();
            match (descend, rng.below(3)) {
                (true, _) => {
                    if let Some(inner) = map.get_mut(&key) {
                        mutate_value(rng, inner);
                    }
                }
                (false, 0) => {
                    map.remove(&key);
                }
                (false, 1) => {
                    map.insert(key, Value::Null);
                }
                (false, _) => {
                    let replacement = any_value(rng, 2);
                    map.insert(key, replacement);
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let index = rng.below(items.len());
            if descend {
                mutate_value(rng, &mut items[index]);
            } else if rng.percent(50) {
                items.remove(index);
            } else {
                items[index] = any_value(rng, 2);
            }
        }
        other => *other = any_value(rng, 2),
    }
}

/// Text-level damage: what a JSON value cannot express (bad bytes, duplicate keys, big numbers).
fn mutate_bytes(rng: &mut Choices<'_>, bytes: &mut Vec<u8>) {
    const INSERTS: &[&[u8]] = &[
        b"\xff",
        b"\xc3\x28",
        b"\xed\xa0\x80",
        b"1e400",
        b"-1e400",
        b"123456789012345678901234567890",
        b"\"\\ud800\"",
        b"\"\\u00\"",
        b"\"messages\":[],",
        b"\"messages\":null,",
        b"\"role\":\"user\",",
        b"\"role\":\"tool\",",
        b"\"threadId\":\"a\",\"threadId\":\"b\",",
        b"\"content\":1e999,",
        b",",
        b"]",
        b"}",
        b"[[[[[[[[",
        b"null",
    ];
    let at = rng.below(bytes.len() + 1);
    match rng.below(5) {
        0 => bytes.truncate(at),
        1 => {
            if let Some(byte) = bytes.get_mut(at) {
                *byte = u8::try_from(rng.below(256)).unwrap_or(0);
            }
        }
        2 => {
            // After a `{`, so a key-value insert makes a duplicate or extra key.
            let at = bytes[at..]
                .iter()
                .position(|b| *b == b'{')
                .map_or(at, |p| at + p + 1);
            let insert = *rng.pick(INSERTS);
            bytes.splice(at..at, insert.iter().copied());
        }
        _ => {
            let insert = *rng.pick(INSERTS);
            bytes.splice(at..at, insert.iter().copied());
        }
    }
}

/// One generated body.
fn generate(rng: &mut Choices<'_>) -> Vec<u8> {
    match rng.below(10) {
        0 => (0..rng.below(512))
            .map(|_| u8::try_from(rng.below(256)).unwrap_or(0))
            .collect(),
        1 => {
            let depth = *rng.pick(&[127, 128, 129, 1000, 100_000]);
            let open = *rng.pick(&["[", "{\"a\":", "{\"messages\":["]);
            let prefix = *rng.pick(&[
                "",
                "{\"messages\":[],\"state\":",
                "{\"messages\":[],\"forwardedProps\":",
            ]);
            format!("{prefix}{}", open.repeat(depth)).into_bytes()
        }
        2 | 3 => {
            let mut value = valid_input();
            for _ in 0..=rng.below(3) {
                mutate_value(rng, &mut value);
            }
            serde_json::to_vec(&value).unwrap_or_default()
        }
        4 => {
            let mut bytes = serde_json::to_vec(&valid_input()).unwrap_or_default();
            for _ in 0..=rng.below(3) {
                mutate_bytes(rng, &mut bytes);
            }
            bytes
        }
        5..=7 => serde_json::to_vec(&run_input(rng)).unwrap_or_default(),
        _ => {
            let mut bytes = serde_json::to_vec(&run_input(rng)).unwrap_or_default();
            mutate_bytes(rng, &mut bytes);
            bytes
        }
    }
}

#[test]
fn generated_inputs_never_panic_and_are_refused_with_a_4xx_json_or_accepted() {
    // Small limits now and then, so the limit checks see generated input too.
    let small = InputLimitSettings {
        max_messages: 2,
        max_content_bytes: 64,
        max_tools: 1,
        max_context_entries: 1,
        max_context_bytes: 8,
        max_id_bytes: 8,
        max_tool_calls_per_message: 1,
        max_metadata_bytes: 16,
        max_forwarded_props_bytes: 16,
        max_resume_entries: 1,
        max_resume_bytes: 32,
        max_media_parts: 1,
        max_media_bytes: 16,
        allow_media_urls: false,
    };
    let default = InputLimitSettings::default();
    let accepted = Cell::new(0u32);
    let mut runner = TestRunner::new(ProptestConfig {
        // The manual runner has no source file to keep regressions beside; a failure prints
        // its shrunk body instead.
        failure_persistence: None,
        ..config_with_cases(3_000)
    });
    let result = runner.run(&choice_bytes(2_048), |bytes| {
        let mut rng = Choices::new(&bytes);
        let body = generate(&mut rng);
        let limits = if rng.percent(20) { &small } else { &default };
        check(&body, limits).map_err(|violation| {
            let shown = String::from_utf8_lossy(&body[..body.len().min(600)]);
            TestCaseError::fail(format!(
                "{violation}; input ({} bytes): {shown}",
                body.len()
            ))
        })?;
        if decode_run_input(&body, limits).is_ok() {
            accepted.set(accepted.get() + 1);
        }
        Ok(())
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
    assert!(
        accepted.get() > 0,
        "the generator never produced a valid input"
    );
}
