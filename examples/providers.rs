//! Server CPU per run for each provider, against an in-process fake upstream that speaks that
//! provider's dialect (Chat Completions, Anthropic Messages, OpenAI Responses), beside the
//! fake's own cost of streaming the same replies to a plain client ("the upstream alone").
//!
//! ```sh
//! cargo run --release --example providers                 # 3 rounds of 400 runs per cell
//! cargo run --release --example providers -- --runs 1000 --rounds 5
//! ```
//!
//! Scenarios, as the shared bench harness's mock has them: `text` is a 200-token reply, one
//! token per frame; `predict` is an `update_recipe` call whose 2 KB argument streams in 1 to 8
//! character fragments, predicted into the state, then (after the tool's result) a 30-token
//! reply. One server serves three agents, one per provider, each on its own model profile.
//! Every frame is written on its own, so each costs a read as a model's stream does.
//!
//! CPU is read per thread from `/proc/self/task/*/schedstat` (nanoseconds): the server's
//! runtime threads, the fake's and the clients' are named apart. The rounds interleave the
//! providers, and each figure is the median over the rounds.

use std::convert::Infallible;
use std::process::ExitCode;
use std::sync::Arc;

use agui_host::settings::{LlmProvider, ModelProfile, PredictStateRule, Settings};
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
const UPSTREAM_THREAD: &str = "fake-upstream";
/// Runs in flight at once.
const CONCURRENCY: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Chat,
    Messages,
    Responses,
}

impl Dialect {
    const ALL: [Dialect; 3] = [Dialect::Chat, Dialect::Messages, Dialect::Responses];

    fn name(self) -> &'static str {
        match self {
            Dialect::Chat => "chat-completions",
            Dialect::Messages => "anthropic",
            Dialect::Responses => "openai-responses",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Dialect::Chat => "/v1/chat/completions",
            Dialect::Messages => "/v1/messages",
            Dialect::Responses => "/v1/responses",
        }
    }

    fn provider(self) -> LlmProvider {
        match self {
            Dialect::Chat => LlmProvider::Openai,
            Dialect::Messages => LlmProvider::Anthropic,
            Dialect::Responses => LlmProvider::OpenaiResponses,
        }
    }
}

/// The 2 KB recipe argument.
fn recipe_argument() -> String {
    let mut argument = String::from(r#"{"recipe":{"title":"Bench stew","ingredients":["#);
    let mut i = 0;
    while argument.len() < 2048 {
        argument.push_str(&format!(
            r#"{{"icon":"🥕","name":"ingredient {i}","amount":"{} g"}},"#,
            10 + i % 90
        ));
        i += 1;
    }
    argument.pop();
    argument.push_str("]}}");
    argument
}

/// `text` in fragments of 1 to 8 characters.
fn fragments(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let (mut out, mut start, mut size) = (Vec::new(), 0, 1);
    while start < chars.len() {
        let end = (start + size).min(chars.len());
        out.push(chars[start..end].iter().collect());
        start = end;
        size = size % 8 + 1;
    }
    out
}

/// What a reply says: text tokens, or one call with its argument fragments.
enum Reply {
    Text(Vec<String>),
    Call(Vec<String>),
}

fn tokens(n: usize) -> Reply {
    Reply::Text((0..n).map(|i| format!(" word{i}")).collect())
}

fn sse(event: Option<&str>, data: &Value) -> Bytes {
    Bytes::from(match event {
        Some(event) => format!("event: {event}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    })
}

/// The frames of `reply` in `dialect`, shaped as each API streams them.
fn frames(dialect: Dialect, reply: &Reply) -> Vec<Bytes> {
    match dialect {
        Dialect::Chat => chat_frames(reply),
        Dialect::Messages => messages_frames(reply),
        Dialect::Responses => responses_frames(reply),
    }
}

fn chat_frames(reply: &Reply) -> Vec<Bytes> {
    let chunk = |delta: Value, finish: Value| {
        sse(
            None,
            &json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1,
                    "model": "bench", "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let finish = match reply {
        Reply::Text(parts) => {
            out.extend(
                parts
                    .iter()
                    .map(|p| chunk(json!({"content": p}), Value::Null)),
            );
            "stop"
        }
        Reply::Call(parts) => {
            out.push(chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_bench", "type": "function",
                                       "function": {"name": "update_recipe", "arguments": ""}}]}),
                Value::Null,
            ));
            out.extend(parts.iter().map(|p| {
                chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}),
                    Value::Null,
                )
            }));
            "tool_calls"
        }
    };
    out.push(chunk(json!({}), json!(finish)));
    out.push(Bytes::from_static(b"data: [DONE]\n\n"));
    out
}

fn messages_frames(reply: &Reply) -> Vec<Bytes> {
    let frame = |data: Value| sse(data["type"].as_str(), &data);
    let mut out = vec![
        frame(
            json!({"type": "message_start", "message": {"id": "msg_bench", "type": "message",
            "role": "assistant", "model": "bench", "content": [],
            "usage": {"input_tokens": 100, "output_tokens": 1}}}),
        ),
        frame(json!({"type": "ping"})),
    ];
    let stop = match reply {
        Reply::Text(parts) => {
            out.push(frame(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}})));
            out.extend(parts.iter().map(|p| {
                frame(json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": p}}))
            }));
            "end_turn"
        }
        Reply::Call(parts) => {
            out.push(frame(json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "tool_use", "id": "toolu_bench", "name": "update_recipe", "input": {}}})));
            out.extend(parts.iter().map(|p| {
                frame(json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "input_json_delta", "partial_json": p}}))
            }));
            "tool_use"
        }
    };
    out.push(frame(json!({"type": "content_block_stop", "index": 0})));
    out.push(frame(json!({"type": "message_delta",
        "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 200}})));
    out.push(frame(json!({"type": "message_stop"})));
    out
}

fn responses_frames(reply: &Reply) -> Vec<Bytes> {
    let mut sequence = 0;
    let mut frame = |mut data: Value| {
        data["sequence_number"] = json!(sequence);
        sequence += 1;
        sse(data["type"].as_str(), &data)
    };
    let mut out = vec![frame(json!({"type": "response.created",
        "response": {"id": "resp_bench", "status": "in_progress", "output": []}}))];
    match reply {
        Reply::Text(parts) => {
            out.push(frame(
                json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "message", "id": "msg_0", "role": "assistant", "content": []}}),
            ));
            for p in parts {
                out.push(frame(
                    json!({"type": "response.output_text.delta", "item_id": "msg_0",
                    "output_index": 0, "content_index": 0, "delta": p}),
                ));
            }
        }
        Reply::Call(parts) => {
            out.push(frame(
                json!({"type": "response.output_item.added", "output_index": 0,
                "item": {"type": "function_call", "id": "fc_0", "call_id": "call_bench",
                         "name": "update_recipe", "arguments": ""}}),
            ));
            for p in parts {
                out.push(frame(
                    json!({"type": "response.function_call_arguments.delta",
                    "item_id": "fc_0", "output_index": 0, "delta": p}),
                ));
            }
        }
    }
    out.push(frame(
        json!({"type": "response.completed", "response": {"id": "resp_bench",
        "status": "completed", "usage": {"input_tokens": 100, "output_tokens": 200}}}),
    ));
    out
}

/// The replies of each dialect and scenario, rendered once.
struct Script {
    text: Vec<Bytes>,
    call: Vec<Bytes>,
    follow_up: Vec<Bytes>,
}

impl Script {
    fn new(dialect: Dialect) -> Self {
        Script {
            text: frames(dialect, &tokens(200)),
            call: frames(dialect, &Reply::Call(fragments(&recipe_argument()))),
            follow_up: frames(dialect, &tokens(30)),
        }
    }

    /// The reply to a request: after a tool result the follow-up, else by the user's word.
    fn reply_to(&self, body: &[u8]) -> &[Bytes] {
        let text = String::from_utf8_lossy(body);
        let answered = [
            "\"tool_result\"",
            "\"function_call_output\"",
            "\"role\":\"tool\"",
        ]
        .iter()
        .any(|marker| text.contains(marker));
        if answered {
            &self.follow_up
        } else if text.contains("predict") {
            &self.call
        } else {
            &self.text
        }
    }
}

fn upstream_router() -> Router {
    let mut router = Router::new();
    for dialect in Dialect::ALL {
        let script = Arc::new(Script::new(dialect));
        router = router.route(
            dialect.path(),
            post(move |body: Bytes| {
                let script = Arc::clone(&script);
                async move {
                    let frames = script.reply_to(&body).to_vec();
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
        );
    }
    router
}

fn settings(upstream: &str) -> Settings {
    let mut settings = Settings::embedded_default().expect("the defaults");
    settings.server.host = "127.0.0.1".into();
    settings.server.port = 0;
    settings.demo_agents = false;
    settings.telemetry.log_filter = "error".into();
    let template = settings.agents["assistant"].clone();
    settings.agents.clear();
    for dialect in Dialect::ALL {
        let name = dialect.name().to_owned();
        settings.models.insert(
            name.clone(),
            ModelProfile {
                provider: Some(dialect.provider()),
                base_url: format!("{upstream}/v1"),
                api_key: "bench".into(),
                model: "bench".into(),
                ..ModelProfile::default()
            },
        );
        let mut agent = template.clone();
        agent.profile = Some(name.clone());
        agent.predict_state.insert(
            "recipe".into(),
            PredictStateRule {
                tool: "update_recipe".into(),
                tool_argument: "recipe".into(),
            },
        );
        let mut tool = agent.tools[0].clone();
        tool.name = "update_recipe".into();
        tool.parameters =
            Some(json!({"type": "object", "properties": {"recipe": {"type": "object"}}}));
        agent.tools.push(tool);
        settings.agents.insert(name, agent);
    }
    settings.default_agent = Dialect::Chat.name().into();
    settings
}

fn run_input(scenario: &str) -> Value {
    json!({
        "threadId": uuid::Uuid::new_v4().to_string(), "runId": uuid::Uuid::new_v4().to_string(),
        "protocolVersion": "1.0", "state": {}, "tools": [], "context": [], "forwardedProps": {},
        "messages": [{"id": "u1", "role": "user", "content": format!("{scenario} please")}],
    })
}

/// A provider and scenario, with its (upstream alone, server) ms per run of each round.
type Cell = ((Dialect, &'static str), Vec<(f64, f64)>);

fn main() -> ExitCode {
    let mut runs = 400;
    let mut rounds = 3;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = args.next().and_then(|v| v.parse().ok());
        match (arg.as_str(), value) {
            ("--runs", Some(v)) => runs = v,
            ("--rounds", Some(v)) => rounds = v,
            _ => {
                eprintln!("usage: providers [--runs N] [--rounds N]");
                return ExitCode::from(2);
            }
        }
    }
    let upstream_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(UPSTREAM_THREAD)
        .enable_all()
        .build()
        .expect("the upstream runtime");
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(SERVER_THREAD)
        .enable_all()
        .build()
        .expect("the server runtime");
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-client")
        .enable_all()
        .build()
        .expect("the client runtime");

    let upstream = serve_upstream(&upstream_rt, upstream_router());
    let server = serve_app(&server_rt, settings(&upstream));

    let client = reqwest::Client::new();
    let mut figures: Vec<Cell> = Vec::new();
    for dialect in Dialect::ALL {
        for scenario in ["text", "predict"] {
            figures.push(((dialect, scenario), Vec::new()));
        }
    }
    for round in 0..=rounds {
        for ((dialect, scenario), per_round) in &mut figures {
            let (dialect, scenario) = (*dialect, *scenario);
            let outcome = client_rt.block_on(async {
                // The upstream alone: the replies of one run, read by a plain client.
                let direct = format!("{upstream}{}", dialect.path());
                let before = cpu_ns(UPSTREAM_THREAD);
                drive(
                    &client,
                    &direct,
                    runs,
                    || json!({"messages": [{"role": "user", "content": scenario}]}),
                    false,
                    CONCURRENCY,
                )
                .await?;
                if scenario == "predict" {
                    drive(
                        &client,
                        &direct,
                        runs,
                        || json!({"messages": [{"role": "tool", "content": "ok"}]}),
                        false,
                        CONCURRENCY,
                    )
                    .await?;
                }
                let alone = cpu_ns(UPSTREAM_THREAD) - before;
                let url = format!("{server}/{}", dialect.name());
                let before = cpu_ns(SERVER_THREAD);
                drive(
                    &client,
                    &url,
                    runs,
                    || run_input(scenario),
                    true,
                    CONCURRENCY,
                )
                .await?;
                let served = cpu_ns(SERVER_THREAD) - before;
                Ok::<_, String>((alone, served))
            });
            let (alone, served) = match outcome {
                Ok(figures) => figures,
                Err(error) => {
                    eprintln!("{} {scenario}: {error}", dialect.name());
                    return ExitCode::FAILURE;
                }
            };
            // Round 0 warms up (connections, allocator, learnt chunk shapes) and is not counted.
            if round > 0 {
                let per_run = |ns: u64| ns as f64 / runs as f64 / 1e6;
                per_round.push((per_run(alone), per_run(served)));
            }
        }
    }
    println!(
        "{runs} runs per cell, {rounds} rounds, {CONCURRENCY} at a time; medians over the rounds"
    );
    println!(
        "| provider | scenario | upstream alone ms/run | server CPU ms/run | server ÷ upstream |"
    );
    println!("| --- | --- | --- | --- | --- |");
    for ((dialect, scenario), per_round) in &figures {
        let alone = median(per_round.iter().map(|f| f.0).collect());
        let served = median(per_round.iter().map(|f| f.1).collect());
        println!(
            "| {} | {scenario} | {alone:.3} | {served:.3} | {:.1}× |",
            dialect.name(),
            served / alone
        );
    }
    ExitCode::SUCCESS
}
