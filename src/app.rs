//! `App`: the one place the service is wired together, used by `main` and by the tests alike.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

mod backends;
mod discovery;
mod pipeline;
mod subagents;

pub use pipeline::approval_policies;

use crate::agent::mcp_apps::McpApps;
use crate::agent::Agent;
use crate::http::{self, AppState, McpDown, McpReport, Metrics, Readiness};
use crate::llm::{LlmError, ModelClients};
use crate::session::{Resumable, RunLimits, Sessions, Shutdown, StreamBufferLimits};
use crate::settings::{Settings, SettingsError, MCP_TOOL_SEPARATOR};
use crate::threads::{AgentTools, Threads};
use crate::tools::mcp::{McpError, McpServers};
use crate::tools::Tool;

/// The thread settings as the store is built with them: without tokens or a trusted proxy's
/// header every caller shares the one development scope, so a quota per scope would cap the
/// whole server (a load test's 1,001st thread refused) without keeping one caller from another;
/// the store's own bounds (`max_threads`, `max_bytes`) hold instead.
fn scoped_thread_settings(settings: &Settings) -> crate::settings::ThreadSettings {
    let mut threads = settings.threads.clone();
    if settings.server.auth.tokens.is_empty() && threads.scope_header.trim().is_empty() {
        threads.max_threads_per_scope = 0;
        threads.max_bytes_per_scope = 0;
    }
    threads
}

/// The run slots and deadline of `[server.limits]`.
fn run_limits(limits: &crate::settings::LimitSettings) -> RunLimits {
    // Validated finite and non-negative by `Settings::validate`.
    let deadline =
        (limits.run_deadline_secs > 0.0).then(|| Duration::from_secs_f64(limits.run_deadline_secs));
    RunLimits::new(
        limits.max_concurrent_runs,
        limits.retry_after_secs,
        deadline,
    )
}

/// How long, after the grace period, the server waits for streams to write their final
/// `RUN_ERROR` and close; a client that stopped reading cannot hold the exit up longer.
const SHUTDOWN_FLUSH: Duration = Duration::from_secs(2);

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("cannot set up the model client: {0}")]
    Llm(#[from] LlmError),
    #[error("cannot open the thread store: {0}")]
    Threads(#[from] crate::threads::StoreError),
    #[error(transparent)]
    Mcp(#[from] McpError),
    #[error("cannot listen on {address}: {source}")]
    Bind {
        address: String,
        source: std::io::Error,
    },
}

/// Rust tools to register, by agent name, in addition to the configured ones.
pub type ExtraTools = BTreeMap<String, Vec<Arc<dyn Tool>>>;

/// A built service, bound to its port and ready to run.
#[derive(Debug)]
pub struct App {
    listener: TcpListener,
    local_addr: SocketAddr,
    router: axum::Router,
    model: String,
    offline: bool,
    shutdown: Shutdown,
    shutdown_grace: Duration,
    connections: http::ConnectionLimits,
    metrics: Arc<Metrics>,
    mcp: McpServers,
}

impl App {
    /// Builds the service from settings alone (configured tools only).
    pub async fn build(settings: Settings) -> Result<App, AppError> {
        App::build_with_tools(settings, ExtraTools::new()).await
    }

    /// Builds the service, registering Rust tools on the named agents.
    pub async fn build_with_tools(
        settings: Settings,
        extra_tools: ExtraTools,
    ) -> Result<App, AppError> {
        // Validated before the store is opened, so a bad file fails without touching Redis.
        settings.validate()?;
        // Every other check first, with no store opened and no MCP server started, so a
        // configuration error starts no process; then the real assembly (building is cheap).
        // Once, so its warning about a missing key is logged once.
        let approval_keys = approval_keys(&settings);
        assemble(
            &settings,
            &extra_tools,
            &approval_keys,
            (None, None),
            &McpServers::default(),
        )?;
        let (threads, runs) = backends::open(
            &settings,
            &scoped_thread_settings(&settings),
            agent_tools(&settings, &extra_tools),
        )
        .await?;
        let mcp = McpServers::start(&settings).await?;
        let Assembled {
            router,
            model,
            offline,
            shutdown,
            metrics,
        } = match assemble(
            &settings,
            &extra_tools,
            &approval_keys,
            (threads, runs),
            &mcp,
        ) {
            Ok(assembled) => assembled,
            Err(error) => {
                mcp.shutdown().await;
                return Err(error);
            }
        };
        let address = format!("{}:{}", settings.server.host, settings.server.port);
        let listener = match TcpListener::bind(&address).await {
            Ok(listener) => listener,
            Err(source) => {
                mcp.shutdown().await;
                return Err(AppError::Bind { address, source });
            }
        };
        let local_addr = listener
            .local_addr()
            .map_err(|source| AppError::Bind { address, source })?;
        Ok(App {
            listener,
            local_addr,
            router,
            model,
            offline,
            shutdown,
            // Validated finite and non-negative by `Settings::validate`.
            shutdown_grace: Duration::from_secs_f64(settings.server.shutdown_grace_secs),
            connections: http::ConnectionLimits::new(&settings.server.limits),
            metrics,
            mcp,
        })
    }

    /// Builds everything [`App::build`] would (settings, model client, every agent with its
    /// tools, JSON Schemas and state rules, routes and CORS) without binding a port, and drops
    /// it: what `agui-host check-config` runs.
    pub fn check(settings: &Settings) -> Result<(), AppError> {
        // The thread store is not opened: a check needs no Redis, and its settings are validated.
        let approval_keys = approval_keys(settings);
        assemble(
            settings,
            &ExtraTools::new(),
            &approval_keys,
            (None, None),
            &McpServers::default(),
        )
        .map(drop)
    }

    /// The address the service listens on (the real port when 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// What the service talks to, e.g. "offline model (built-in, deterministic)".
    pub fn model_description(&self) -> &str {
        &self.model
    }

    /// Whether replies come from the built-in offline model rather than a real one.
    pub fn is_offline(&self) -> bool {
        self.offline
    }

    /// The MCP servers the agents use (their process ids, which are down).
    pub fn mcp_servers(&self) -> &McpServers {
        &self.mcp
    }

    /// The service's metrics registry (what `GET /metrics` serves).
    pub fn metrics(&self) -> Arc<Metrics> {
        Arc::clone(&self.metrics)
    }

    /// Serves until Ctrl-C or SIGTERM, then shuts down gracefully (see [`App::run_until`]).
    pub async fn run(self) -> std::io::Result<()> {
        self.run_until(shutdown_signal()).await
    }

    /// Serves until `shutdown` completes, then: stops accepting connections (and `/ready`
    /// answers 503), lets open streams (and runs that go on without their client) finish for
    /// `server.shutdown_grace_secs`, ends the ones still open with `RUN_ERROR` code
    /// `shutdown`, waits briefly for those last events to be written and their threads saved,
    /// closes the MCP servers (no child process outlives the service), and returns.
    pub async fn run_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let mcp = self.mcp.clone();
        let served = self.serve_until(shutdown).await;
        // Last: runs that were still calling MCP tools are over by now.
        mcp.shutdown().await;
        served
    }

    async fn serve_until(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let stages = self.shutdown.clone();
        let grace = self.shutdown_grace;
        let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
        let graceful = {
            let stages = stages.clone();
            async move {
                shutdown.await;
                tracing::info!(
                    grace_secs = grace.as_secs_f64(),
                    "shutting down: no new connections; open streams may finish"
                );
                stages.start_draining();
                let _ = signalled_tx.send(());
            }
        };
        let connections = http::serve(self.listener, self.router, self.connections, graceful);
        // Done once the connections are closed and the runs driven by their own tasks (and
        // the saves of threads whose client left) have ended too.
        let tasks = stages.clone();
        let server = async move {
            let result = connections.await;
            tasks.tasks_ended().await;
            result
        };
        tokio::pin!(server);
        tokio::select! {
            result = &mut server => return result,
            signalled = signalled_rx => {
                if signalled.is_err() {
                    // The sender went without sending: the server stopped by itself.
                    return server.await;
                }
            }
        }
        // Draining: open streams finish on their own, up to the grace period.
        tokio::select! {
            result = &mut server => return result,
            () = tokio::time::sleep(grace) => {}
        }
        tracing::warn!("grace period over; ending the streams still open with RUN_ERROR");
        stages.stop_streams();
        tokio::select! {
            result = &mut server => result,
            () = tokio::time::sleep(SHUTDOWN_FLUSH) => {
                tracing::warn!("streams still open after {SHUTDOWN_FLUSH:?}; stopping anyway");
                Ok(())
            }
        }
    }
}

/// What [`App::build_with_tools`] makes before it binds the port.
struct Assembled {
    router: axum::Router,
    model: String,
    offline: bool,
    shutdown: Shutdown,
    metrics: Arc<Metrics>,
}

fn assemble(
    settings: &Settings,
    extra_tools: &ExtraTools,
    approval_keys: &[String],
    (threads, runs): (Option<Arc<Threads>>, Option<Arc<Resumable>>),
    mcp: &McpServers,
) -> Result<Assembled, AppError> {
    settings.validate()?;
    for agent in extra_tools.keys() {
        if !settings.agents.contains_key(agent) {
            return Err(SettingsError::Invalid(format!(
                "tools were registered for agent `{agent}`, which is not configured"
            ))
            .into());
        }
    }
    let clients = ModelClients::new(settings)?;
    let model = clients.default.describe();
    let offline = clients.default.is_offline();
    let mut agents: BTreeMap<String, Arc<dyn Agent>> = BTreeMap::new();
    let mut mcp_apps = McpApps::default();
    // Children first: a parent's subagent tools hold its children's built agents.
    for name in subagents::build_order(settings) {
        let (name, agent_settings) = (&name, &settings.agents[&name]);
        let approvals = pipeline::approval_policies(agent_settings)
            .map_err(|message| SettingsError::Invalid(format!("agents.{name}: {message}")))?;
        let timeout = Duration::from_secs(agent_settings.tool_timeout_secs);
        mcp_apps.add_agent(name, mcp.app_servers_for(name), approvals, timeout);
        let (mut tools, subagent_runs) = subagents::tools(agent_settings, settings, &agents)
            .map_err(|message| SettingsError::Invalid(format!("agents.{name}: {message}")))?;
        tools.extend(extra_tools.get(name).into_iter().flatten().cloned());
        let agent = pipeline::build(
            name,
            agent_settings,
            clients.for_profile(agent_settings.profile.as_deref()),
            pipeline::BuiltTools {
                tools,
                subagent_runs,
            },
            mcp.sources_for(name),
            approval_keys,
            settings.server.input_limits.max_id_bytes,
        )
        .map_err(|message| SettingsError::Invalid(format!("agents.{name}: {message}")))?;
        agents.insert(name.clone(), agent);
    }
    let registered_tools = extra_tools
        .iter()
        .map(|(agent, tools)| {
            (
                agent.clone(),
                tools.iter().map(|t| wire_tool(t.as_ref())).collect(),
            )
        })
        .collect();
    let discovery = Arc::new(discovery::discovery(settings, &registered_tools));
    let shutdown = Shutdown::new();
    // Each agent's provider and model label its metrics: from configuration only, so the
    // series stay bounded.
    let metrics = Arc::new(Metrics::for_agents(settings.agents.iter().map(
        |(name, agent)| {
            let llm = clients.for_profile(agent.profile.as_deref());
            let model = crate::agent::agent_model(&llm, agent.model.as_deref());
            (name.clone(), model)
        },
    )));
    let sessions = Arc::new(Sessions {
        threads,
        runs,
        limits: run_limits(&settings.server.limits),
        shutdown: shutdown.clone(),
        keep_alive: Duration::from_secs(settings.server.keep_alive_secs.max(1)),
        stream_buffer: StreamBufferLimits {
            max_bytes: settings.server.max_stream_buffer_bytes,
            slow_client_timeout: Duration::from_secs_f64(settings.server.slow_client_timeout_secs),
        },
    });
    let state = AppState {
        agents: Arc::new(agents),
        default_agent: settings.default_agent.clone(),
        sessions,
        input_limits: settings.server.input_limits.clone(),
        metrics: Arc::clone(&metrics),
        readiness: Arc::new(readiness(settings, mcp)),
        discovery,
        mcp_apps: Arc::new(mcp_apps),
    };
    let router = http::router(state, settings)?;
    Ok(Assembled {
        router,
        model,
        offline,
        shutdown,
        metrics,
    })
}

/// Each agent's server tool names (configured and registered in Rust), whose results a client
/// may not invent on a verified thread, and its result for a declined call.
fn agent_tools(settings: &Settings, extra_tools: &ExtraTools) -> BTreeMap<String, AgentTools> {
    settings
        .agents
        .iter()
        .map(|(name, agent)| {
            let configured = agent.tools.iter().map(|tool| tool.name.clone());
            let configured = configured.chain(agent.subagents.iter().cloned());
            let registered = extra_tools
                .get(name)
                .into_iter()
                .flatten()
                .map(|tool| tool.definition().name.clone());
            // The calls the server makes of its own: their results are the server's too.
            let background = !agent.background_tool_names().is_empty();
            let own = [
                (background, crate::agent::BACKGROUND_RESULT_TOOL),
                (background, crate::tools::background::CANCEL_TOOL),
                (
                    agent.a2ui.generate != crate::settings::A2uiGenerate::Never,
                    crate::agent::GENERATE_A2UI_TOOL,
                ),
            ];
            let own = own
                .into_iter()
                .filter(|(offered, _)| *offered)
                .map(|(_, name)| name.to_owned());
            let tools = AgentTools {
                server_tools: configured.chain(registered).chain(own).collect(),
                server_tool_prefixes: agent
                    .mcp_servers
                    .iter()
                    .map(|server| format!("{}{MCP_TOOL_SEPARATOR}", server.name))
                    .collect(),
                declined_result: agent.approval.rejected_message.clone(),
                client_tools_win: agent.tool_name_clash
                    == crate::settings::ToolNameClash::PreferClient,
            };
            (name.clone(), tools)
        })
        .collect()
}

/// The readiness probe, reporting MCP servers that are down when the agents have any.
fn readiness(settings: &Settings, mcp: &McpServers) -> Readiness {
    let readiness = Readiness::new(settings);
    if mcp.is_empty() {
        return readiness;
    }
    let servers = mcp.clone();
    readiness.with_mcp(McpReport(Box::new(move || {
        let (required, optional) = servers.down();
        McpDown { required, optional }
    })))
}

/// A registered Rust tool as discovery lists it.
fn wire_tool(tool: &dyn Tool) -> crate::protocol::Tool {
    let definition = tool.definition();
    crate::protocol::Tool {
        name: definition.name.clone(),
        description: definition.description.clone(),
        parameters: Some(definition.parameters.clone()),
        metadata: None,
    }
}

/// The same keys for every agent (each id also binds its agent's name): sign with the first,
/// verify with any. None configured gets one random key per process (development only;
/// validated).
fn approval_keys(settings: &Settings) -> Vec<String> {
    let keys = settings.security.approval_key_list();
    if !keys.is_empty() {
        return keys;
    }
    let needs_approval = settings
        .agents
        .values()
        .any(|agent| approval_policies(agent).is_ok_and(|p| !p.is_empty()));
    if needs_approval {
        tracing::warn!(
            "security.approval_keys is not set: approvals are signed with a random key and \
             cannot be resumed after a restart or on another replica"
        );
    }
    vec![uuid::Uuid::new_v4().simple().to_string() + &uuid::Uuid::new_v4().simple().to_string()]
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
}
