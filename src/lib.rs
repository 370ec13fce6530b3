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
//! app          App::build: the one place things are wired; `app::backends` chooses the
//!              stores, `app::pipeline` builds each agent's middleware chain
//! settings     the typed settings tree (config crate layers + environment)
//! telemetry    logs (tracing-subscriber), OpenTelemetry trace export (OTLP, the `otel`
//!              feature), and the run's spans named after the GenAI conventions
//! http         the edge: the accept loop (hyper-util), routes, extractors (agent, scopes,
//!              Last-Event-ID), request decoding (content type, body read timeout, input
//!              limits), refusals with their stable codes, and the operational edge: probes,
//!              metrics, CORS, auth, hosts
//! metrics      the Prometheus registry and a run's metrics as one of its observers
//! session      the life of one run: admission, its thread, its log, the pump over the
//!              agent's updates, the drive into the client's outbox or the run's log, the
//!              observers (metrics, span, thread save), reconnects and stops, run limits and
//!              shutdown
//! protocol     AG-UI wire types, the run encoder, typed frames and the SSE codec (a leaf)
//! agent        Agent trait, RunRequest, AgentUpdate, AgentError, ChatAgent, the middlewares
//!              and their configuration types; approval policies and the signed ApprovalId
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
//!              decision ledger, the record of a run, the check of a client's history
//! runs         the log of each run's SSE frames behind `RunLogStore`: replay after a cursor,
//!              follow live, stop; per process, and shared by replicas on Redis (Streams,
//!              the owner's lease, `run_lost`, stop over pub/sub)
//! ```
//! The command line (`src/cli/`: clap types, `check-config`, `healthcheck`, and the terminal
//! client `agui-host chat`) belongs to the binary alone; the library does not compile it.
//!
//! # Dependency rule
//! `protocol`, `state`, `text`, `clock` and `retry` are leaves, and any module may use `text`,
//! `clock`, `retry` and `telemetry`; `llm`, `tools` and `telemetry` use `settings`; `threads` uses `protocol`
//! and `state`; `runs` uses `protocol`; `agent` uses `protocol`, `llm`, `state` and `tools`;
//! `session` uses `agent`, `protocol`, `threads` and `runs`; `http` uses those and `settings`;
//! `settings` names the configuration types it deserializes; `app` wires everything. The
//! binary's `cli` uses the library's public API only. `tests/architecture.rs` holds it.
//!
//! # How a run flows
//! ```text
//! POST /<agent>  RunAgentInput
//!   -> http: extract and decode (4xx JSON before any SSE byte), pick the agent
//!   -> session: a run slot, the run id reserved, the thread leased and checked
//!   -> agent pipeline (app::pipeline builds it, outermost first):
//!        ClientStateInjection   validates the client's state, puts it in the prompt
//!        StatusSnapshots        optional status under one state key (add patches only)
//!        ApprovalGate           verifies resumes; approval requests -> interrupts (1.0) or
//!                               an approval tool call (0.x)
//!        PredictiveStateDeltas  streaming tool arguments -> STATE_DELTA
//!        ChatAgent              streams the model, runs server tools, stops for client tools
//!   -> protocol::RunEncoder: RUN_STARTED first, exactly one RUN_FINISHED/RUN_ERROR last,
//!      closes anything open, downgrades shapes for 0.x clients, hands on typed frames
//!      (`protocol::Batch`); `data: <json>\n\n` is written where they leave
//!   -> session pump and drive: the SSE response (keep-alive comments, no compression; at
//!      most `server.max_stream_buffer_bytes` held for a slow client, then `client_too_slow`)
//!      or the run's log
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
pub mod metrics;
pub mod protocol;
pub mod retry;
pub mod runs;
pub mod session;
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
