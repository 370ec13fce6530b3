//! The API test binary: the app against a fake OpenAI-compatible upstream, over real HTTP.
//!
//! Harness: `helpers` (spawn the app, post runs, read SSE), `fake_llm` (the scripted upstream)
//! and `verify` (the reference client's ordering rules plus our wire rules). The other modules
//! are the specification, one behaviour per test.

// Test helpers take owned `json!`/`vec!` literals so that each call site reads as data; the lint
// guards the service's own code, where a needless move is a real cost.
#![allow(clippy::needless_pass_by_value)]

/// One test per behaviour and thread store: each listed `async fn(Backend)` of the module runs
/// once with the memory store, once with a real `redis-server` and once with a real
/// PostgreSQL, as `memory::<name>`, `redis::<name>` and `postgres::<name>`. Defined before the modules, so every one of them can use it.
macro_rules! for_each_store {
    ($($behaviour:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test]
            async fn $behaviour() {
                super::$behaviour(crate::threads::Backend::memory().await).await;
            })*
        }
        mod redis {
            $(#[tokio::test]
            async fn $behaviour() {
                super::$behaviour(crate::threads::Backend::redis().await).await;
            })*
        }
        mod postgres {
            $(#[tokio::test]
            async fn $behaviour() {
                super::$behaviour(crate::threads::Backend::postgres().await).await;
            })*
        }
    };
}

mod fake_llm;
mod fake_messages;
mod fake_responses;
mod helpers;
mod postgres_server;
mod redis_server;
mod verify;

mod a2ui;
mod activities;
mod anthropic;
mod approvals;
mod auth;
mod background_tools;
mod bad_input;
mod cancellation;
mod chat;
mod chat_client;
mod chat_reconnect;
mod cli;
mod client_tools;
mod connect;
mod connections;
mod cors;
mod demo;
mod demo_chat_variants;
mod demo_subagents;
mod demo_ui;
mod disconnect;
mod discovery;
mod examples;
mod forks;
mod health;
mod history;
mod hostile_input;
mod hosts;
mod input_requests;
mod limits;
mod mcp;
mod mcp_apps;
mod mcp_elicitation;
mod mcp_tasks;
mod metrics;
mod predicted_state_confirmation;
mod predictive_state;
mod probes;
mod protocol_versions;
mod providers;
mod quotas;
mod request_boundary;
mod responses;
mod resumable;
mod resumable_redis;
mod run_ids;
mod server_tools;
mod shared_state;
mod shutdown;
mod slow_clients;
mod subagent_approvals;
mod subagent_briefing;
mod subagent_state;
mod subagents;
mod telemetry;
mod thread_list;
mod threads;
mod threads_postgres;
mod upstream_errors;
mod upstream_network;
mod upstream_request;
