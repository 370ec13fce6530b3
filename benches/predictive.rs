//! Predictive state: the cost of parsing and projecting streamed tool arguments, and the bytes
//! of `STATE_DELTA` it sends.
//!
//! `cargo bench --bench predictive` first prints two reports, then runs the criterion benches:
//! - the cost per argument byte of `Projection::push` over the whole call, for a structured
//!   recipe argument and for one long string (a document), at 2 KB, 50 KB and 1 MB, split into
//!   1 to 8 byte fragments as models stream them. Linear time means a flat cost per byte;
//! - the wire bytes of the `STATE_DELTA` events (as the encoder writes them) per argument byte,
//!   next to the `TOOL_CALL_ARGS` events that carry the same arguments.
//!
//! Criterion then measures the same work per size with its throughput in bytes per second.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};

use agui_host::protocol::{
    EventBody, ProtocolVersion, RunEncoder, StateDelta, ToolCallArgs, ToolCallStart,
};
use agui_host::state::{Argument, Coalescing, Projection};

const SIZES: [(&str, usize); 3] = [("2KB", 2 * 1024), ("50KB", 50 * 1024), ("1MB", 1024 * 1024)];

/// A recipe-shaped argument of at least `size` bytes: short strings, numbers, arrays of objects,
/// a few escapes and non-ASCII characters.
fn recipe(size: usize) -> String {
    let mut ingredients = Vec::new();
    let mut instructions = Vec::new();
    let mut i = 0;
    loop {
        ingredients.push(format!(
            r#"{{"icon": "🥕", "name": "ingredient n°{i}", "amount": "{} g", "optional": {}}}"#,
            10 + i % 90,
            i % 3 == 0
        ));
        instructions.push(format!(
            r#""Step {i}: stir the \"base\" for {} minutes,\nthen taste and adjust the seasoning.""#,
            1 + i % 9
        ));
        i += 1;
        let text = format!(
            r#"{{"recipe": {{"title": "Slow-cooked stew", "servings": 4, "ingredients": [{}], "instructions": [{}]}}}}"#,
            ingredients.join(", "),
            instructions.join(", ")
        );
        if text.len() >= size {
            return text;
        }
    }
}

/// A document argument of at least `size` bytes: one long string.
fn document(size: usize) -> String {
    let sentence = r#"The quick brown fox \"jumps\" over the lazy dog; café, naïve, 東京.\n"#;
    let body = sentence.repeat(size / sentence.len() + 1);
    format!(r#"{{"document": "{body}"}}"#)
}

/// Fragments of 1 to 8 bytes (moved to the next character boundary), reproducibly.
fn split(text: &str) -> Vec<&str> {
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut fragments = Vec::new();
    let mut at = 0;
    while at < text.len() {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let mut end = (at + 1 + (state % 8) as usize).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        fragments.push(&text[at..end]);
        at = end;
    }
    fragments
}

fn project(fragments: &[&str], key: &str, now: Instant) -> usize {
    let mut projection = Projection::new(
        [(key.to_owned(), Argument::Named(key.to_owned()))],
        Coalescing::default(),
    );
    let mut ops = 0;
    for fragment in fragments {
        ops += projection.push(fragment, now).len();
    }
    let finished = projection.finish().expect("valid arguments");
    black_box(finished);
    ops
}

struct Shape {
    name: &'static str,
    key: &'static str,
    make: fn(usize) -> String,
}

const SHAPES: [Shape; 2] = [
    Shape {
        name: "recipe",
        key: "recipe",
        make: recipe,
    },
    Shape {
        name: "document",
        key: "document",
        make: document,
    },
];

/// Nanoseconds per argument byte of a whole call, for each input: the least over several
/// rounds, each round timing every input once over about 4 MB of arguments. Interleaving the
/// inputs and keeping the least time keeps a busy machine from favouring one size.
fn costs_per_byte(inputs: &[(Vec<&str>, usize)], key: &str) -> Vec<f64> {
    let now = Instant::now();
    let mut best = vec![f64::MAX; inputs.len()];
    for _ in 0..7 {
        for (i, (fragments, bytes)) in inputs.iter().enumerate() {
            let runs = (4 * 1024 * 1024 / bytes).max(2);
            let started = Instant::now();
            for _ in 0..runs {
                project(black_box(fragments), key, now);
            }
            let per_byte = started.elapsed().as_nanos() as f64 / (runs * bytes) as f64;
            best[i] = best[i].min(per_byte);
        }
    }
    best
}

/// Wire bytes of the args events and of the delta events of one call, as the encoder writes
/// them (`data: {...}\n\n` with a timestamp).
fn wire_bytes(fragments: &[&str], key: &str) -> (usize, usize, usize, usize) {
    let mut encoder = RunEncoder::new(ProtocolVersion::V1, "thread-1".into(), "run-1".into());
    let mut out = Vec::new();
    encoder
        .push(
            EventBody::ToolCallStart(ToolCallStart {
                tool_call_id: "call_1".into(),
                tool_call_name: "update".into(),
                parent_message_id: None,
                subagent_run_id: None,
            }),
            &mut out,
        )
        .expect("encodes");
    let mut projection = Projection::new(
        [(key.to_owned(), Argument::Named(key.to_owned()))],
        Coalescing::default(),
    );
    let (mut args_bytes, mut delta_bytes, mut events, mut ops) = (0, 0, 0, 0);
    let now = Instant::now();
    for fragment in fragments {
        let before = out.len();
        encoder
            .push(
                EventBody::ToolCallArgs(ToolCallArgs {
                    tool_call_id: "call_1".into(),
                    delta: (*fragment).to_owned(),
                    subagent_run_id: None,
                }),
                &mut out,
            )
            .expect("encodes");
        args_bytes += out.len() - before;
        let patch = projection.push(fragment, now);
        if patch.is_empty() {
            continue;
        }
        events += 1;
        ops += patch.len();
        let before = out.len();
        encoder
            .push(
                EventBody::StateDelta(StateDelta {
                    delta: json_patch::Patch(patch),
                    subagent_run_id: None,
                }),
                &mut out,
            )
            .expect("encodes");
        delta_bytes += out.len() - before;
        out.clear();
    }
    (args_bytes, delta_bytes, events, ops)
}

fn report() {
    println!("\npredictive state: parse + project, cost per argument byte (1-8 byte fragments)");
    println!(
        "{:<10} {:>6} {:>10} {:>10} {:>12}",
        "shape", "size", "bytes", "ns/byte", "MB/s"
    );
    for shape in &SHAPES {
        let texts: Vec<String> = SIZES.iter().map(|(_, size)| (shape.make)(*size)).collect();
        let inputs: Vec<(Vec<&str>, usize)> = texts.iter().map(|t| (split(t), t.len())).collect();
        let costs = costs_per_byte(&inputs, shape.key);
        for (((label, _), text), ns) in SIZES.iter().zip(&texts).zip(&costs) {
            println!(
                "{:<10} {:>6} {:>10} {:>10.2} {:>12.1}",
                shape.name,
                label,
                text.len(),
                ns,
                1e3 / ns
            );
        }
        let (low, high) = costs
            .iter()
            .fold((f64::MAX, 0.0_f64), |(l, h), c| (l.min(*c), h.max(*c)));
        println!(
            "{:<10} cost per byte from 2KB to 1MB: max/min = {:.2}, 1MB/2KB = {:.2}",
            shape.name,
            high / low,
            costs[2] / costs[0]
        );
    }

    println!("\npredictive state: bytes sent per argument byte (default coalescing)");
    println!(
        "{:<10} {:>6} {:>9} {:>8} {:>7} {:>14} {:>15}",
        "shape", "size", "arg bytes", "deltas", "ops", "delta B/arg B", "args ev B/arg B"
    );
    for shape in &SHAPES {
        for (label, size) in SIZES {
            let text = (shape.make)(size);
            let fragments = split(&text);
            let (args_bytes, delta_bytes, events, ops) = wire_bytes(&fragments, shape.key);
            println!(
                "{:<10} {:>6} {:>9} {:>8} {:>7} {:>14.2} {:>15.2}",
                shape.name,
                label,
                text.len(),
                events,
                ops,
                delta_bytes as f64 / text.len() as f64,
                args_bytes as f64 / text.len() as f64
            );
        }
    }
    println!();
}

fn bench(c: &mut Criterion) {
    for shape in &SHAPES {
        let mut group = c.benchmark_group(format!("predictive/{}", shape.name));
        for (label, size) in SIZES {
            let text = (shape.make)(size);
            let fragments = split(&text);
            group.throughput(Throughput::Bytes(text.len() as u64));
            if size > 100 * 1024 {
                group.sample_size(10);
            }
            let now = Instant::now();
            group.bench_with_input(BenchmarkId::from_parameter(label), &fragments, |b, f| {
                b.iter(|| project(black_box(f), shape.key, now))
            });
        }
        group.finish();
    }
}

fn main() {
    // `cargo test --benches` runs this binary with `--test` (or `--list`): skip the report then.
    let quick = std::env::args().any(|a| a == "--test" || a == "--list");
    if !quick {
        report();
    }
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
