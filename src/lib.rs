//! agui-host: an AG-UI protocol host for LLM agents.
//!
//! `POST /` (and `POST /<agent>`) takes an AG-UI `RunAgentInput` and answers with an SSE stream
//! of AG-UI events that the real clients (`@ag-ui/client` 1.0, and the 0.0.59 that CopilotKit
//! ships) accept. The model is any OpenAI-compatible chat-completions server, or a built-in
//! offline model when none is configured.
//!
//! # Layout
//! ```text
//! main.rs      thin: parse the command line, then Settings, telemetry, App::build(settings)
//!              .run(), or one of the other subcommands of `cli`
//! app          App::build: the one place things are wired
//! settings     the typed settings tree (config crate layers + environment)
//! telemetry    logs (tracing-subscriber), OpenTelemetry trace export (OTLP, the `otel`
//!              feature), and the run's spans named after the GenAI conventions
//! http         the accept loop (hyper-util), routes, request decoding (content type, body
//!              read timeout, input limits), 4xx errors, the SSE response pump and its
//!              bounded outbox (slow clients), and the operational edge: probes, metrics,
//!              CORS, auth, run limits, shutdown
//! protocol     AG-UI wire types and the run encoder (pure serde; a leaf)
//! agent        Agent trait, RunRequest, AgentUpdate, AgentError, ChatAgent, pipeline;
//!              approval policies and the signed ApprovalId
//! llm          the OpenAI-compatible client and the offline model (the only module that
//!              names async-openai types)
//! tools        Tool trait, per-agent registry, declarative tool kinds; `tools::mcp`: the
//!              tools of MCP servers (rmcp), their connections and child processes
//! state        predictive state, pure: incremental partial JSON, arguments projected onto
//!              state keys as minimal JSON Patch operations (a leaf)
//! text         the id, digest and truncation helpers every module shares (a leaf)
//! clock        instants a configured duration away, saturating instead of panicking (a leaf)
//! retry        the one retry policy (exponential backoff with jitter) of every retry loop
//!              (a leaf)
//! threads      threads the server remembers: the store (memory, Redis), run leases, the
//!              record of a run, the check of a client's history against it
//! runs         the log of each run's SSE frames: replay after a cursor, follow live, stop;
//!              per process, and shared by replicas on Redis (Streams, the owner's lease,
//!              `run_lost`, stop over pub/sub) (uses `settings` only)
//! ```
//! The command line (`src/cli/`: clap types, `check-config`, `healthcheck`, and the terminal
//! client `agui-host chat`) belongs to the binary alone; the library does not compile it.
//!
//! # Dependency rule
//! `protocol`, `state`, `text`, `clock` and `retry` are leaves (`state`: no tokio, no agent or
//! protocol types), and any module may use `text` (ids, truncation), `clock` and `retry`;
//! `telemetry` uses only `settings`, and any module may use it for spans and trace context;
//! `llm` uses only `settings` (and `telemetry`); `tools` uses `settings`; `threads` uses
//! `protocol` and `settings`; `agent` uses `protocol`, `llm`, `state` and `tools`; `runs`
//! uses `settings`, `protocol` (the shape of a frame) and `text`; `http` uses `agent`,
//! `protocol`, `threads` and `runs`; `app` wires everything. The binary's `cli` uses the library's public API only.
//!
//! # How a run flows
//! ```text
//! POST /<agent>  RunAgentInput
//!   -> http: decode (4xx JSON before any SSE byte), pick the agent
//!   -> agent pipeline (agent::pipeline, outermost first):
//!        ClientStateInjection   validates the client's state, puts it in the prompt
//!        StatusSnapshots        optional status under one state key (add patches only)
//!        ApprovalGate           verifies resumes; approval requests -> interrupts (1.0) or
//!                               an approval tool call (0.x)
//!        PredictiveStateDeltas  streaming tool arguments -> STATE_DELTA
//!        ChatAgent              streams the model, runs server tools, stops for client tools
//!   -> protocol::RunEncoder: RUN_STARTED first, exactly one RUN_FINISHED/RUN_ERROR last,
//!      closes anything open, downgrades shapes for 0.x clients, writes `data: <json>\n\n`
//!   -> SSE response (keep-alive comments, no compression; at most
//!      `server.max_stream_buffer_bytes` held for a slow client, then `client_too_slow`)
//! ```
//! Without a thread store, dropping the response (disconnect, Stop) drops every stream above
//! it, which closes the upstream request: no run outlives its client. With a store, a task
//! drives the run into its log (`runs`) and responses read the log, so a client can reconnect;
//! the run is stopped on request or when no reader has been attached for the grace period.

pub mod agent;
pub mod app;
pub mod clock;
pub mod http;
pub mod llm;
pub mod protocol;
pub mod retry;
pub mod runs;
pub mod settings;
pub mod state;
pub mod telemetry;
pub mod text;
pub mod threads;
pub mod tools;

#[cfg(test)]
mod test_choices;

pub use app::{App, AppError};
pub use settings::Settings;
