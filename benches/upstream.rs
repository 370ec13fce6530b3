//! Decoding the upstream's streaming reply: the per-chunk cost of reading OpenAI-compatible
//! `chat.completion.chunk` SSE into model events, which every token of every run pays.
//!
//! `cargo bench --bench upstream` measures two bodies shaped like the bench harness's fake
//! upstream: a 200-token text reply, and a tool call whose 2 KB argument streams in 438
//! fragments of 1 to 8 characters. Each is fed the way the network delivers it under load (the
//! whole body in one read) and at real speed (one read per chunk). Divide by the chunk count
//! (202 and 441) for the cost per chunk.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};

use agui_host::llm::{CompletionStreamDecoder, LlmEvent};

const HEAD: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1764500000,"model":"gpt-4o-mini","system_fingerprint":"fp_bench","choices":[{"index":0,"delta":"#;

fn frame(delta: &str, finish: Option<&str>) -> String {
    let finish = finish.map_or("null".to_owned(), |reason| format!("\"{reason}\""));
    format!("data: {HEAD}{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n")
}

/// A role chunk, `tokens` one-word content chunks, a finish chunk and `[DONE]`.
fn text_body(tokens: usize) -> Vec<String> {
    let mut frames = vec![frame(r#"{"role":"assistant","content":""}"#, None)];
    for i in 0..tokens {
        let word = serde_json::to_string(&format!(" word{i}")).unwrap();
        frames.push(frame(&format!(r#"{{"content":{word}}}"#), None));
    }
    frames.push(frame("{}", Some("stop")));
    frames.push("data: [DONE]\n\n".to_owned());
    frames
}

/// One `update_recipe` call whose JSON argument arrives in 1 to 8 character fragments.
fn tool_body(argument_bytes: usize) -> Vec<String> {
    let mut argument = String::from(r#"{"recipe":{"title":"Bench stew","ingredients":["#);
    let mut i = 0;
    while argument.len() < argument_bytes {
        argument.push_str(&format!(
            r#"{{"icon":"🥕","name":"ingredient {i}","amount":"{} g"}},"#,
            10 + i % 90
        ));
        i += 1;
    }
    argument.pop();
    argument.push_str("]}}");
    let mut frames = vec![frame(
        r#"{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_bench","type":"function","function":{"name":"update_recipe","arguments":""}}]}"#,
        None,
    )];
    let chars: Vec<char> = argument.chars().collect();
    let mut start = 0;
    let mut size = 1;
    while start < chars.len() {
        let end = (start + size).min(chars.len());
        let fragment: String = chars[start..end].iter().collect();
        let fragment = serde_json::to_string(&fragment).unwrap();
        frames.push(frame(
            &format!(r#"{{"tool_calls":[{{"index":0,"function":{{"arguments":{fragment}}}}}]}}"#),
            None,
        ));
        start = end;
        size = size % 8 + 1;
    }
    frames.push(frame("{}", Some("tool_calls")));
    frames.push("data: [DONE]\n\n".to_owned());
    frames
}

fn decode(reads: &[&[u8]]) -> usize {
    let mut decoder = CompletionStreamDecoder::default();
    let mut out = Vec::with_capacity(64);
    let mut events = 0;
    for read in reads {
        decoder.feed(read, &mut out);
        events += out.len();
        for event in out.drain(..) {
            black_box(event.expect("a well-formed body"));
        }
    }
    decoder.finish(&mut out);
    events + out.len()
}

fn bench_body(c: &mut Criterion, name: &str, frames: &[String]) {
    let whole = frames.concat();
    let per_chunk: Vec<&[u8]> = frames.iter().map(|frame| frame.as_bytes()).collect();
    // Sanity: every chunk decodes, and the reply finishes.
    let mut check = CompletionStreamDecoder::default();
    let mut out = Vec::new();
    check.feed(whole.as_bytes(), &mut out);
    check.finish(&mut out);
    assert!(
        out.iter().all(Result::is_ok),
        "{name}: the body must decode"
    );
    assert!(
        out.iter()
            .any(|event| matches!(event, Ok(LlmEvent::Finished { .. }))),
        "{name}: the reply must finish"
    );

    let mut group = c.benchmark_group(format!("upstream/{name}"));
    group.throughput(Throughput::Elements(frames.len() as u64));
    group.bench_function("one read", |b| {
        b.iter(|| decode(&[black_box(whole.as_bytes())]))
    });
    group.bench_function("one read per chunk", |b| {
        b.iter(|| decode(black_box(&per_chunk)))
    });
    group.finish();
}

fn upstream(c: &mut Criterion) {
    bench_body(c, "text 200 tokens", &text_body(200));
    bench_body(c, "tool call 2 KB argument", &tool_body(2048));
}

criterion_group!(benches, upstream);
criterion_main!(benches);
