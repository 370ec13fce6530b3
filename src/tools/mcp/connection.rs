//! One connection to an MCP server: starting it (a child process in its own process group, or
//! streamable HTTP), listing its tools into the server's registry, and serving it until it
//! ends or the service shuts down. Notifications arrive on rmcp's tasks; the handler only
//! signals (`list_changed`) or forwards (progress), never awaits a request of its own.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Weak};
use std::time::Duration;

use process_wrap::tokio::{CommandWrap, ProcessGroup};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use rmcp::model::{
    ClientCapabilities, ClientConfig, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationCapability, FormElicitationCapability, Implementation, ProgressNotificationParam,
    ProtocolVersion, UrlElicitationCapability,
};
use rmcp::service::{
    ClientLifecycleMode, ClientServiceExt, NotificationContext, RequestContext, RunningService,
};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ClientHandler, RoleClient};
use tokio::io::AsyncBufReadExt;

use super::apps::{self, AppTool};
use super::call::McpTool;
use super::identity::{IdentityClient, IdentityHeaders};
use super::{task, McpServer};
use crate::settings::McpTransportSettings;
use crate::tools::{RegisteredTool, Tool};

/// Variables a stdio server inherits from this service; everything else it gets must be
/// configured in its `env` (so the model key and other secrets never reach it by accident).
const INHERITED_VARIABLES: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR",
    "TERM",
];

/// How long a closing connection may take before it is abandoned (the child is killed).
const CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest line of a server's standard error that is logged.
const MAX_LOGGED_LINE: usize = 2000;

/// The client side of one connection: what rmcp calls for the server's notifications.
pub(super) struct Handler {
    server: Weak<McpServer>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        if let Some(server) = self.server.upgrade() {
            server.list_changed.notify_one();
        }
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        if let Some(server) = self.server.upgrade() {
            server.on_progress(
                &params.progress_token,
                params.progress,
                params.total,
                params.message,
            );
        }
    }

    /// A server on a revision before 2026-07-28 asks in the middle of its call. The person's
    /// answer comes in a later run, maybe on another replica, so the call cannot be held open
    /// for it: declined at once, and the server's tool decides what to answer. Servers on
    /// 2026-07-28 ask with an `input_required` result instead, which reaches the user.
    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, rmcp::ErrorData> {
        let server = self.server.upgrade();
        let name = server.as_ref().map_or("?", |s| s.settings.name.as_str());
        tracing::warn!(
            server = name,
            "an MCP server asked for input in the middle of a call (elicitation/create, before \
             MCP 2026-07-28): declined; only input_required results reach the user"
        );
        Ok(ElicitResult::new(ElicitationAction::Decline))
    }

    fn get_info(&self) -> ClientConfig {
        // Form and URL elicitation: the questions of `input_required` results reach the user.
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            ElicitationCapability::new()
                .with_form(FormElicitationCapability::new())
                .with_url(UrlElicitationCapability::new()),
        );
        // MCP Apps: a server may then give its tools a `ui://` resource (`apps.rs`). Tasks: a
        // server may answer a call with a task, which the call follows (`task.rs`).
        let mut extensions = apps::extensions();
        extensions.insert(task::TASKS_EXTENSION_ID.to_owned(), Default::default());
        capabilities.extensions = Some(extensions);
        ClientConfig::new(
            capabilities,
            Implementation::new("agui-host", env!("CARGO_PKG_VERSION")),
        )
    }
}

pub(super) type Live = RunningService<RoleClient, Handler>;

/// The newest revision where the server has it (2026-07-28: a server may then ask the user
/// through `input_required` results), else the server's own with the `initialize` handshake.
fn lifecycle() -> ClientLifecycleMode {
    ClientLifecycleMode::Auto {
        preferred_versions: vec![ProtocolVersion::LATEST],
        legacy_version: None,
    }
}

/// Starts and initializes the server and lists its tools, within `connect_timeout_secs`.
pub(super) async fn connect(server: &Arc<McpServer>) -> Result<Live, String> {
    let attempt = async {
        let handler = Handler {
            server: Arc::downgrade(server),
        };
        let live = match &server.settings.transport {
            McpTransportSettings::Stdio { .. } => {
                let transport = spawn_child(server)?;
                handler
                    .serve_with_lifecycle(transport, lifecycle())
                    .await
                    .map_err(|e| format!("the MCP handshake failed: {e}"))?
            }
            McpTransportSettings::Http {
                url,
                headers_from_env,
                identity_headers,
            } => {
                let client = IdentityClient {
                    inner: http_client(headers_from_env)?,
                    identity: IdentityHeaders::new(identity_headers)?,
                };
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                let transport = StreamableHttpClientTransport::with_client(client, config);
                handler
                    .serve_with_lifecycle(transport, lifecycle())
                    .await
                    .map_err(|e| format!("the MCP handshake with {url} failed: {e}"))?
            }
        };
        list_tools(server, live.peer()).await?;
        Ok(live)
    };
    within_connect_timeout(server, attempt).await
}

/// `work`'s outcome, or an error once `connect_timeout_secs` has passed without one.
async fn within_connect_timeout<T>(
    server: &McpServer,
    work: impl std::future::Future<Output = Result<T, String>>,
) -> Result<T, String> {
    let timeout = Duration::from_secs(server.settings.connect_timeout_secs);
    tokio::time::timeout(timeout, work)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no answer within connect_timeout_secs ({})",
                timeout.as_secs()
            ))
        })
}

/// Serves a live connection until it ends (`false`) or the service shuts down (`true`, after
/// closing it), re-listing the tools whenever the server says they changed.
pub(super) async fn serve(server: &Arc<McpServer>, live: Live) -> bool {
    let peer = live.peer().clone();
    *server.peer.write().unwrap_or_else(|e| e.into_inner()) = Some(peer.clone());
    let mut cancel = Some(live.cancellation_token());
    let waiting = live.waiting();
    tokio::pin!(waiting);
    loop {
        tokio::select! {
            _ = &mut waiting => return server.shutdown.is_cancelled(),
            () = server.shutdown.cancelled() => {
                if let Some(cancel) = cancel.take() {
                    cancel.cancel();
                }
                if tokio::time::timeout(CLOSE_TIMEOUT, &mut waiting).await.is_err() {
                    tracing::warn!(server = %server.settings.name, "MCP connection did not close in time");
                }
                return true;
            }
            () = server.list_changed.notified() => {
                // Bounded, and given up at shutdown: a server that never answers this listing
                // would otherwise hold the loop, and with it the service's shutdown, forever.
                let listed = tokio::select! {
                    listed = within_connect_timeout(server, list_tools(server, &peer)) => listed,
                    () = server.shutdown.cancelled() => continue,
                };
                match listed {
                    Ok(()) => tracing::info!(
                        agent = %server.agent, server = %server.settings.name,
                        tools = server.current_tool_count(),
                        "MCP tool list changed"
                    ),
                    Err(message) => tracing::warn!(
                        agent = %server.agent, server = %server.settings.name, %message,
                        "MCP tool list could not be refreshed; keeping the previous one"
                    ),
                }
            }
        }
    }
}

/// Lists the server's tools (every page) and makes them the server's current tools: those the
/// model may see for the agent, and every one for the apps (`apps.rs`).
async fn list_tools(server: &Arc<McpServer>, peer: &rmcp::Peer<RoleClient>) -> Result<(), String> {
    let listed = peer
        .list_all_tools()
        .await
        .map_err(|e| format!("tools/list failed: {e}"))?;
    let settings = &server.settings;
    let mut tools = BTreeMap::new();
    let mut app_tools = BTreeMap::new();
    for remote in listed {
        let remote_name = remote.name.to_string();
        let wanted = (settings.include.is_empty() || settings.include.contains(&remote_name))
            && !settings.exclude.contains(&remote_name);
        if !wanted {
            continue;
        }
        let Some(name) = settings.tool_name(&remote_name) else {
            tracing::warn!(server = %settings.name, tool = %remote_name, "MCP tool skipped: its prefixed name is longer than 64 characters");
            continue;
        };
        let ui = match apps::tool_ui(remote.meta.as_ref().map(|meta| &meta.0)) {
            Ok(ui) => ui,
            Err(problem) => {
                tracing::warn!(server = %settings.name, tool = %remote_name, %problem, "MCP tool skipped: neither the model nor an app may call it");
                continue;
            }
        };
        let tool = Arc::new(McpTool::new(
            Arc::downgrade(server),
            &name,
            &remote,
            ui.resource_uri.clone(),
        ));
        match RegisteredTool::new(Arc::clone(&tool) as Arc<dyn Tool>) {
            Ok(registered) => {
                let model = ui.model;
                let app_tool = AppTool {
                    name: name.clone(),
                    tool,
                    registered: registered.clone(),
                    ui,
                };
                app_tools.insert(remote_name, app_tool);
                if model && tools.insert(name.clone(), registered).is_some() {
                    tracing::warn!(server = %settings.name, tool = %name, "two MCP tools map to the same name; the last one is used");
                }
            }
            Err(error) => {
                tracing::warn!(server = %settings.name, tool = %remote_name, %error, "MCP tool skipped")
            }
        }
    }
    *server.tools.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(tools);
    *server.app_tools.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(app_tools);
    Ok(())
}

/// Spawns a stdio server as the leader of a new process group (so closing it reaches anything
/// it started, like the server `npx` runs), with its standard error logged.
fn spawn_child(server: &Arc<McpServer>) -> Result<TokioChildProcess, String> {
    let McpTransportSettings::Stdio {
        command,
        args,
        env,
        cwd,
    } = &server.settings.transport
    else {
        return Err("not a stdio server".into());
    };
    let mut cmd = tokio::process::Command::new(command);
    cmd.args(args).env_clear();
    for variable in INHERITED_VARIABLES {
        if let Some(value) = std::env::var_os(variable) {
            cmd.env(variable, value);
        }
    }
    for (name, from) in env {
        let value = std::env::var_os(from).ok_or_else(|| {
            format!("`env.{name}` needs the environment variable `{from}`, which is not set")
        })?;
        cmd.env(name, value);
    }
    if let Some(cwd) = cwd {
        cmd.current_dir(cwd);
    }
    let mut wrapped = CommandWrap::from(cmd);
    wrapped.wrap(ProcessGroup::leader());
    let (child, stderr) = TokioChildProcess::builder(wrapped)
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start `{command}`: {e}"))?;
    *server.child_pid.lock().unwrap_or_else(|e| e.into_inner()) = child.id();
    if let Some(stderr) = stderr {
        let name = server.settings.name.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let line: String = line.chars().take(MAX_LOGGED_LINE).collect();
                tracing::debug!(server = %name, "{line}");
            }
        });
    }
    Ok(child)
}

/// The HTTP client of a streamable HTTP server, with its configured headers.
fn http_client(headers_from_env: &BTreeMap<String, String>) -> Result<reqwest::Client, String> {
    let mut headers = HeaderMap::new();
    for (header, variable) in headers_from_env {
        let name = HeaderName::from_bytes(header.as_bytes())
            .map_err(|_| format!("`{header}` is not a valid header name"))?;
        let value = std::env::var(variable).map_err(|_| {
            format!(
                "header `{header}` needs the environment variable `{variable}`, which is not set"
            )
        })?;
        let mut value = HeaderValue::from_str(&value)
            .map_err(|_| format!("the value of `{variable}` is not a valid header value"))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    reqwest::Client::builder()
        .default_headers(headers)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build the HTTP client: {e}"))
}
