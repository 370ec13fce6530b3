//! Throughput of the run encoder: the per-event cost every run pays on top of the model.
//!
//! `cargo bench --bench encoder` prints the time per run for a 200-token text reply and for a
//! 476-fragment tool call (the bench harness's "text" and "predict" shapes); divide the event
//! count by the time for events per second.
//!
//! Each run is encoded as a run's pump does it: typed frames into a batch, then (for the socket)
//! the batch's bytes. The `_with_ids` variants write `id: <runId>:<seq>` on every frame, as a
//! run with a thread store does; `_logged` appends the typed frames to a run log instead (no
//! bytes are made until a reader reads): the write path of a resumable run, side by side with
//! the plain one.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;

use agui_host::runs::{LogLimits, RunLogs};
use agui_host::settings::RunSettings;

use agui_host::protocol::{
    Batch, EventBody, ProtocolVersion, RunEncoder, TextMessageContent, TextMessageStart, TextRole,
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

fn text_run(deltas: &[String], ids: bool) -> Batch {
    let mut encoder = encoder(ids);
    let mut out = Batch::default();
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

fn tool_run(fragments: &[String], ids: bool) -> Batch {
    let mut encoder = encoder(ids);
    let mut out = Batch::default();
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
        b.iter(|| text_run(black_box(&deltas), false).to_bytes())
    });
    group.bench_function("text_run_200_deltas_with_ids", |b| {
        b.iter(|| text_run(black_box(&deltas), true).to_bytes())
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
            log.append(text_run(black_box(&deltas), true), true);
        })
    });
    group.throughput(Throughput::Elements(fragments.len() as u64 + 4));
    group.bench_function("tool_run_476_fragments", |b| {
        b.iter(|| tool_run(black_box(&fragments), false).to_bytes())
    });
    group.bench_function("tool_run_476_fragments_with_ids", |b| {
        b.iter(|| tool_run(black_box(&fragments), true).to_bytes())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
