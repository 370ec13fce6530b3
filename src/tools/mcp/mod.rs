//! MCP tools: an agent calls the tools of Model Context Protocol servers declared in its
//! `mcp_servers`, through the official Rust SDK (`rmcp`).
//!
//! Each configured server gets one [`McpServer`]: a supervisor task that connects (a child
//! process over stdio, or streamable HTTP), lists the tools, re-lists them on
//! `notifications/tools/list_changed`, reconnects with backoff when the connection ends (a
//! stdio server that exits is restarted), and closes the connection on shutdown (the child's
//! whole process group goes with it). The server's tools join the agent's registry as a
//! [`ToolSource`], named `<server>__<tool>`; a run takes the list as it is when the run starts.
//! [`McpServers`] holds every server of every agent for start-up, `/ready` and shutdown.
//!
//! MCP Apps (`apps`): the client declares the UI extension; a tool's `_meta.ui` decides whether
//! the model is offered it and whether apps may call it; a call of a tool with a `ui://`
//! resource comes back with the `mcp-apps` activity; [`AppServer`] is what an app's requests
//! reach through the host.

mod apps;
mod call;
mod connection;
mod content;
mod elicit;
mod identity;
mod task;
mod trace;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rmcp::model::ProgressToken;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;

use super::{RegisteredTool, ToolProgress, ToolSource};
use crate::retry::RetryPolicy;
use crate::settings::{McpServerSettings, Settings};
pub use apps::{
    is_ui_uri, AppServer, AppToolAccess, ACTIVITY_TYPE as APPS_ACTIVITY_TYPE, APP_MIME_TYPE,
    UI_EXTENSION,
};
pub use content::result_to_output;

/// Why the MCP servers could not be started.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error("agents.{agent}: MCP server `{server}` could not be started: {message}")]
    Start {
        agent: String,
        server: String,
        message: String,
    },
}

/// Every MCP server of every agent: started together, reported by `/ready`, closed together.
#[derive(Debug, Clone, Default)]
pub struct McpServers {
    servers: Vec<Arc<McpServer>>,
}

impl McpServers {
    /// Connects every configured server and lists its tools. A server that fails is an error,
    /// unless it is `optional`: then a warning, and its supervisor keeps trying in the
    /// background.
    ///
    /// # Errors
    /// A required server that cannot be started, connected or listed within its
    /// `connect_timeout_secs`.
    pub async fn start(settings: &Settings) -> Result<McpServers, McpError> {
        let mut servers = Vec::new();
        let mut starts = Vec::new();
        for (agent, agent_settings) in &settings.agents {
            for server_settings in &agent_settings.mcp_servers {
                let server = McpServer::new(agent, server_settings.clone());
                starts.push(Arc::clone(&server).start());
                servers.push(server);
            }
        }
        // Connected side by side: start-up waits for the slowest server, not the sum.
        let results = futures_util::future::join_all(starts).await;
        let started = McpServers { servers };
        for (server, result) in started.servers.iter().zip(results) {
            if let Err(message) = result {
                if server.settings.optional {
                    tracing::warn!(
                        agent = %server.agent, server = %server.settings.name, %message,
                        "optional MCP server is not available; its tools appear once it connects"
                    );
                } else {
                    started.shutdown().await;
                    return Err(McpError::Start {
                        agent: server.agent.clone(),
                        server: server.settings.name.clone(),
                        message,
                    });
                }
            }
        }
        Ok(started)
    }

    /// The tool sources of `agent`'s servers, for its registry.
    pub fn sources_for(&self, agent: &str) -> Vec<Arc<dyn ToolSource>> {
        self.servers
            .iter()
            .filter(|server| server.agent == agent)
            .map(|server| Arc::clone(server) as Arc<dyn ToolSource>)
            .collect()
    }

    /// The servers of `agent` as their apps reach them.
    pub fn app_servers_for(&self, agent: &str) -> Vec<AppServer> {
        self.servers
            .iter()
            .filter(|server| server.agent == agent)
            .map(|server| AppServer(Arc::clone(server)))
            .collect()
    }

    /// `agent/server` for every server that is not connected now: (required, optional).
    pub fn down(&self) -> (Vec<String>, Vec<String>) {
        let (optional, required): (Vec<_>, Vec<_>) = self
            .servers
            .iter()
            .filter(|server| !server.is_up())
            .partition(|server| server.settings.optional);
        let names = |servers: Vec<&Arc<McpServer>>| {
            servers
                .iter()
                .map(|server| format!("{}/{}", server.agent, server.settings.name))
                .collect()
        };
        (names(required), names(optional))
    }

    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Closes every connection and waits for the children to exit (each stdio server gets its
    /// standard input closed, then SIGTERM, then SIGKILL, to its whole process group).
    pub async fn shutdown(&self) {
        let closing = self.servers.iter().map(|server| server.shutdown());
        futures_util::future::join_all(closing).await;
    }

    /// The process ids of the running stdio servers (for operators and tests).
    pub fn child_pids(&self) -> Vec<u32> {
        self.servers.iter().filter_map(|s| s.child_pid()).collect()
    }
}

/// One configured server of one agent, and its supervisor's shared state.
pub struct McpServer {
    agent: String,
    settings: McpServerSettings,
    /// The opaque id the server's apps name it by (`apps::server_id`).
    server_id: String,
    /// The tools the model may be offered, as last listed, by the name the model sees.
    tools: RwLock<Arc<BTreeMap<String, RegisteredTool>>>,
    /// Every tool as last listed (apart from those that failed closed), by its name on the
    /// server: what an app's `tools/call` is checked against.
    app_tools: RwLock<Arc<BTreeMap<String, apps::AppTool>>>,
    /// The live connection, when there is one.
    peer: RwLock<Option<rmcp::Peer<rmcp::RoleClient>>>,
    child_pid: Mutex<Option<u32>>,
    /// Woken by `notifications/tools/list_changed`: the supervisor lists the tools again.
    list_changed: Notify,
    /// Progress reports of calls in flight, by their progress token.
    progress: Mutex<HashMap<ProgressToken, ProgressRoute>>,
    shutdown: CancellationToken,
    supervisor: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Where the progress of one call goes.
struct ProgressRoute {
    sender: mpsc::Sender<ToolProgress>,
    tool_call_id: String,
    tool_name: String,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("agent", &self.agent)
            .field("name", &self.settings.name)
            .field("up", &self.is_up())
            .finish_non_exhaustive()
    }
}

impl ToolSource for McpServer {
    fn current_tools(&self) -> Arc<BTreeMap<String, RegisteredTool>> {
        Arc::clone(&self.tools.read().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The waits between reconnections: 250 ms doubling to 15 s (each with up to as much again of
/// jitter, so at most 30 s), without end; a healthy connection starts the series again.
const RECONNECT: RetryPolicy = RetryPolicy::new(Duration::from_millis(250), RECONNECT_MAX_WAIT);
const RECONNECT_MAX_WAIT: Duration = Duration::from_secs(15);

impl McpServer {
    fn new(agent: &str, settings: McpServerSettings) -> Arc<Self> {
        Arc::new(McpServer {
            agent: agent.to_owned(),
            server_id: apps::server_id(agent, &settings.name),
            settings,
            tools: RwLock::new(Arc::new(BTreeMap::new())),
            app_tools: RwLock::new(Arc::new(BTreeMap::new())),
            peer: RwLock::new(None),
            child_pid: Mutex::new(None),
            list_changed: Notify::new(),
            progress: Mutex::new(HashMap::new()),
            shutdown: CancellationToken::new(),
            supervisor: Mutex::new(None),
        })
    }

    /// Starts the supervisor and waits for the first connection attempt's outcome.
    async fn start(self: Arc<Self>) -> Result<(), String> {
        let (first_tx, first_rx) = tokio::sync::oneshot::channel();
        let supervisor = tokio::spawn(Arc::clone(&self).supervise(first_tx));
        *self.supervisor.lock().unwrap_or_else(|e| e.into_inner()) = Some(supervisor);
        first_rx
            .await
            .unwrap_or_else(|_| Err("the supervisor stopped".into()))
    }

    fn is_up(&self) -> bool {
        self.peer
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|peer| !peer.is_transport_closed())
    }

    /// Whether calls carry the run's identity (only when identity headers are configured).
    fn sends_identity(&self) -> bool {
        matches!(&self.settings.transport,
            crate::settings::McpTransportSettings::Http { identity_headers, .. } if !identity_headers.is_empty())
    }

    fn current_tool_count(&self) -> usize {
        self.current_tools().len()
    }

    fn child_pid(&self) -> Option<u32> {
        *self.child_pid.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn current_peer(&self) -> Option<rmcp::Peer<rmcp::RoleClient>> {
        self.peer
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .filter(|peer| !peer.is_transport_closed())
    }

    async fn shutdown(&self) {
        self.shutdown.cancel();
        let supervisor = self
            .supervisor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(supervisor) = supervisor {
            if let Err(error) = supervisor.await {
                tracing::warn!(server = %self.settings.name, %error, "MCP supervisor failed");
            }
        }
    }

    /// Connects, serves, and reconnects with backoff until shutdown. The first attempt's outcome
    /// goes to `first`.
    async fn supervise(self: Arc<Self>, first: tokio::sync::oneshot::Sender<Result<(), String>>) {
        let mut first = Some(first);
        let mut waits = RECONNECT.waits();
        loop {
            let connected = tokio::select! {
                () = self.shutdown.cancelled() => return,
                connected = connection::connect(&self) => connected,
            };
            let unavailable = match connected {
                Ok(live) => {
                    if let Some(first) = first.take() {
                        let _ = first.send(Ok(()));
                    }
                    waits = RECONNECT.waits();
                    let stopping = connection::serve(&self, live).await;
                    self.set_disconnected();
                    if stopping {
                        return;
                    }
                    tracing::warn!(
                        agent = %self.agent, server = %self.settings.name,
                        "MCP server connection ended; reconnecting"
                    );
                    None
                }
                Err(message) => {
                    self.set_disconnected();
                    if let Some(first) = first.take() {
                        let _ = first.send(Err(message.clone()));
                        if !self.settings.optional {
                            return;
                        }
                    }
                    Some(message)
                }
            };
            // The series has no end; the fallback only keeps the loop total.
            let wait = waits.next().unwrap_or(RECONNECT_MAX_WAIT);
            if let Some(message) = unavailable {
                tracing::warn!(
                    agent = %self.agent, server = %self.settings.name, %message,
                    retry_in_ms = wait.as_millis() as u64,
                    "MCP server unavailable"
                );
            }
            tokio::select! {
                () = self.shutdown.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    fn set_disconnected(&self) {
        *self.peer.write().unwrap_or_else(|e| e.into_inner()) = None;
        *self.child_pid.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Routes a progress notification to the call it belongs to, if it is still running.
    fn on_progress(
        &self,
        token: &ProgressToken,
        progress: f64,
        total: Option<f64>,
        message: Option<String>,
    ) {
        let routes = self.progress.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(route) = routes.get(token) {
            let _ = route.sender.try_send(ToolProgress {
                tool_call_id: route.tool_call_id.clone(),
                tool_name: route.tool_name.clone(),
                progress,
                total,
                message,
            });
        }
    }
}
