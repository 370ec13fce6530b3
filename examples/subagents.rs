//! Server CPU per run of a parent that delegates to two subagents, against two plain runs
//! of the same length, side by side against one in-process fake upstream.
//!
//! ```sh
//! cargo run --release --example subagents                  # 3 rounds of 200 runs per cell
//! cargo run --release --example subagents -- --runs 500 --rounds 5
//! ```
//!
//! A plain run is a 200-token reply, one token per frame. A `supervisor` run calls its two
//! subagents (`flights`, `hotels`) in one turn; each child answers with the same 200-token
//! reply, attributed on the parent's stream (1.0 client, `subagent_visibility = "attributed"`),
//! then the parent answers in 30 tokens. So one supervisor run streams the two plain runs'
//! tokens plus one tool-calling turn and a short answer: the difference is what delegation
//! costs. CPU is read per thread from `/proc/self/task/*/schedstat`; the rounds interleave the
//! two cells and each figure is the median over the rounds.

use std::convert::Infallible;
use std::process::ExitCode;

use agui_host::settings::Settings;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use futures_util::{stream, StreamExt};
use serde_json::{json, Value};

#[path = "support/server_cpu.rs"]
mod server_cpu;
use server_cpu::{cpu_ns, drive, median, serve_app, serve_upstream};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SERVER_THREAD: &str = "agui-server";
/// Runs in flight at once.
const CONCURRENCY: usize = 4;

fn chunk(delta: &Value, finish: &Value) -> Bytes {
    let data = json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1,
        "model": "bench", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    Bytes::from(format!("data: {data}\n\n"))
}

fn text_frames(tokens: usize) -> Vec<Bytes> {
    let mut out = vec![chunk(
        &json!({"role": "assistant", "content": ""}),
        &Value::Null,
    )];
    out.extend((0..tokens).map(|i| chunk(&json!({"content": format!(" word{i}")}), &Value::Null)));
    out.push(chunk(&json!({}), &json!("stop")));
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

/// The parent's first turn: both children called at once.
fn delegation_frames() -> Vec<Bytes> {
    let mut out = vec![chunk(
        &json!({"role": "assistant", "content": ""}),
        &Value::Null,
    )];
    for (index, name) in ["flights", "hotels"].into_iter().enumerate() {
        out.push(chunk(
            &json!({"tool_calls": [{"index": index, "id": format!("call_{name}"), "type": "function",
                                   "function": {"name": name, "arguments": ""}}]}),
            &Value::Null,
        ));
        out.push(chunk(
            &json!({"tool_calls": [{"index": index, "function": {"arguments": "{\"task\":\"Paris in May\"}"}}]}),
            &Value::Null,
        ));
    }
    out.push(chunk(&json!({}), &json!("tool_calls")));
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

fn upstream_router() -> Router {
    let text = text_frames(200);
    let follow_up = text_frames(30);
    let delegation = delegation_frames();
    Router::new().route(
        "/v1/chat/completions",
        post(move |body: Bytes| {
            let request = String::from_utf8_lossy(&body);
            let frames = if request.contains("\"role\":\"tool\"") {
                follow_up.clone()
            } else if request.contains("\"name\":\"flights\"") {
                delegation.clone()
            } else {
                text.clone()
            };
            async move {
                // One write per frame, as a model streams.
                let body = stream::iter(frames).then(|frame| async move {
                    tokio::task::yield_now().await;
                    Ok::<_, Infallible>(frame)
                });
                Response::builder()
                    .header(header::CONTENT_TYPE, "text/event-stream")
                    .body(Body::from_stream(body))
                    .unwrap_or_default()
            }
        }),
    )
}

fn settings(upstream: &str) -> Settings {
    let mut settings = Settings::embedded_default().expect("the defaults");
    settings.server.host = "127.0.0.1".into();
    settings.server.port = 0;
    settings.demo_agents = false;
    settings.telemetry.log_filter = "error".into();
    settings.llm.base_url = format!("{upstream}/v1");
    settings.llm.api_key = "bench".into();
    settings.llm.model = "bench".into();
    let mut template = settings.agents["assistant"].clone();
    template.tools.clear();
    settings.agents.clear();
    for name in ["plain", "flights", "hotels"] {
        let mut agent = template.clone();
        agent.description = Some(format!("Answers about {name}."));
        settings.agents.insert(name.into(), agent);
    }
    let mut supervisor = template;
    supervisor.subagents = vec!["flights".into(), "hotels".into()];
    settings.agents.insert("supervisor".into(), supervisor);
    settings.default_agent = "plain".into();
    settings
}

fn run_input() -> Value {
    json!({
        "threadId": uuid::Uuid::new_v4().to_string(), "runId": uuid::Uuid::new_v4().to_string(),
        "protocolVersion": "1.0", "state": {}, "tools": [], "context": [], "forwardedProps": {},
        "messages": [{"id": "u1", "role": "user", "content": "Plan a trip to Paris in May"}],
    })
}

fn main() -> ExitCode {
    let mut runs = 200;
    let mut rounds = 3;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().and_then(|v| v.parse().ok());
        match (arg.as_str(), value) {
            ("--runs", Some(v)) => runs = v,
            ("--rounds", Some(v)) => rounds = v,
            _ => {
                eprintln!("usage: subagents [--runs N] [--rounds N]");
                return ExitCode::from(2);
            }
        }
    }
    let runtime = |name: &str, threads: usize| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()
            .expect("a runtime")
    };
    let upstream_rt = runtime("fake-upstream", 1);
    let server_rt = runtime(SERVER_THREAD, 2);
    let client_rt = runtime("bench-client", 1);
    let upstream = serve_upstream(&upstream_rt, upstream_router());
    let server = serve_app(&server_rt, settings(&upstream));

    let client = reqwest::Client::new();
    // Per round: ms per plain run, ms per supervisor run.
    let mut figures: Vec<(f64, f64)> = Vec::new();
    for round in 0..=rounds {
        let outcome = client_rt.block_on(async {
            let before = cpu_ns(SERVER_THREAD);
            drive(
                &client,
                &format!("{server}/plain"),
                runs,
                run_input,
                true,
                CONCURRENCY,
            )
            .await?;
            let plain = cpu_ns(SERVER_THREAD) - before;
            let before = cpu_ns(SERVER_THREAD);
            drive(
                &client,
                &format!("{server}/supervisor"),
                runs,
                run_input,
                true,
                CONCURRENCY,
            )
            .await?;
            let supervisor = cpu_ns(SERVER_THREAD) - before;
            Ok::<_, String>((plain, supervisor))
        });
        let (plain, supervisor) = match outcome {
            Ok(figures) => figures,
            Err(error) => {
                eprintln!("{error}");
                return ExitCode::FAILURE;
            }
        };
        // Round 0 warms up and is not counted.
        if round > 0 {
            let per_run = |ns: u64| ns as f64 / runs as f64 / 1e6;
            figures.push((per_run(plain), per_run(supervisor)));
        }
    }
    let plain = median(figures.iter().map(|f| f.0).collect());
    let supervisor = median(figures.iter().map(|f| f.1).collect());
    println!(
        "{runs} runs per cell, {rounds} rounds, {CONCURRENCY} at a time; medians over the rounds"
    );
    println!("| run | server CPU ms/run |");
    println!("| --- | --- |");
    println!("| plain, 200 tokens | {plain:.3} |");
    println!("| two plain runs | {:.3} |", 2.0 * plain);
    println!("| supervisor with two subagents of 200 tokens each | {supervisor:.3} |");
    println!(
        "supervisor ÷ two plain runs: {:.2}×",
        supervisor / (2.0 * plain)
    );
    ExitCode::SUCCESS
}
