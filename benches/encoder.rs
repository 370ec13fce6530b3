//! Throughput of the run encoder: the per-event cost every run pays on top of the model.
//!
//! `cargo bench --bench encoder` prints the time per run for a 200-token text reply and for a
//! 476-fragment tool call (the bench harness's "text" and "predict" shapes); divide the event
//! count by the time for events per second.
//!
//! The `_with_ids` variants write `id: <runId>:<seq>` on every frame, as a run with a thread
//! store does; `_logged` also appends the frames to a run log (split into frames, no copy):
//! the whole extra cost of a resumable run on the write path, side by side with the plain one.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;

use agui_host::runs::{LogLimits, RunLogs};
use agui_host::settings::RunSettings;
use bytes::Bytes;

use agui_host::protocol::{
    EventBody, ProtocolVersion, RunEncoder, TextMessageContent, TextMessageStart, TextRole,
    ToolCallArgs, ToolCallStart,
};

fn encoder(ids: bool) -> RunEncoder {
    let encoder = RunEncoder::new(ProtocolVersion::V1, "thread-1".into(), "run-1".into());
    if ids {
        encoder.with_event_ids()
    } else {
        encoder
    }
}

fn text_run(deltas: &[String], ids: bool) -> Vec<u8> {
    let mut encoder = encoder(ids);
    let mut out = Vec::with_capacity(64 * 1024);
    encoder
        .push(
            EventBody::TextMessageStart(TextMessageStart {
                message_id: "msg_1".into(),
                role: Some(TextRole::Assistant),
                name: None,
                subagent_run_id: None,
            }),
            &mut out,
        )
        .unwrap();
    for delta in deltas {
        encoder
            .push(
                EventBody::TextMessageContent(TextMessageContent {
                    message_id: "msg_1".into(),
                    delta: delta.clone(),
                    subagent_run_id: None,
                }),
                &mut out,
            )
            .unwrap();
    }
    encoder.finish(&mut out).unwrap();
    out
}

fn tool_run(fragments: &[String], ids: bool) -> Vec<u8> {
    let mut encoder = encoder(ids);
    let mut out = Vec::with_capacity(64 * 1024);
    encoder
        .push(
            EventBody::ToolCallStart(ToolCallStart {
                tool_call_id: "call_1".into(),
                tool_call_name: "update_recipe".into(),
                parent_message_id: Some("msg_1".into()),
                subagent_run_id: None,
            }),
            &mut out,
        )
        .unwrap();
    for fragment in fragments {
        encoder
            .push(
                EventBody::ToolCallArgs(ToolCallArgs {
                    tool_call_id: "call_1".into(),
                    delta: fragment.clone(),
                    subagent_run_id: None,
                }),
                &mut out,
            )
            .unwrap();
    }
    encoder.finish(&mut out).unwrap();
    out
}

fn bench(c: &mut Criterion) {
    let deltas: Vec<String> = (0..200).map(|i| format!(" word{i}")).collect();
    let fragments: Vec<String> = (0..476).map(|i| format!("\"k{i}\":\"é\\\"")).collect();
    let mut group = c.benchmark_group("encoder");
    group.throughput(Throughput::Elements(deltas.len() as u64 + 3));
    group.bench_function("text_run_200_deltas", |b| {
        b.iter(|| text_run(black_box(&deltas), false))
    });
    group.bench_function("text_run_200_deltas_with_ids", |b| {
        b.iter(|| text_run(black_box(&deltas), true))
    });
    let runs = RunSettings::default();
    let logs = RunLogs::new(LogLimits {
        max_runs: runs.log_max_runs,
        max_run_events: runs.log_max_run_events,
        max_run_bytes: runs.log_max_run_bytes,
        max_bytes: runs.log_max_bytes,
        ttl: std::time::Duration::from_secs(runs.log_ttl_secs),
    });
    group.bench_function("text_run_200_deltas_logged", |b| {
        b.iter(|| {
            let log = logs.open("run-1", "agent", "scope").unwrap();
            log.append(Bytes::from(text_run(black_box(&deltas), true)), true);
        })
    });
    group.throughput(Throughput::Elements(fragments.len() as u64 + 4));
    group.bench_function("tool_run_476_fragments", |b| {
        b.iter(|| tool_run(black_box(&fragments), false))
    });
    group.bench_function("tool_run_476_fragments_with_ids", |b| {
        b.iter(|| tool_run(black_box(&fragments), true))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
