//! What the discovery routes answer (`http::discovery`), computed once from the settings: the
//! agent list, and each agent's AG-UI `AgentCapabilities` (its tools, state, human-in-the-loop,
//! transport and this server's own declarations under `custom`).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::http::Discovery;
use crate::protocol::{
    AgentCapabilities, ExecutionCapabilities, HumanInTheLoopCapabilities, IdentityCapabilities,
    MultiAgentCapabilities, MultimodalCapabilities, MultimodalInputCapabilities,
    ReasoningCapabilities, StateCapabilities, SubagentInfo, Tool, ToolsCapabilities,
    TransportCapabilities,
};
use crate::settings::{
    A2uiGenerate, AgentSettings, ApprovalPolicySetting, FixedApproval, OnDisconnect, Settings,
    SubagentVisibility, ToolKindSettings, ToolSettings,
};
use crate::tools::a2ui::BASIC_CATALOG_ID as A2UI_BASIC_CATALOG_ID;

/// The key of this server's own declarations under `capabilities.custom`.
const CUSTOM_KEY: &str = "agui-host";

/// One entry of `GET /agents`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AgentEntry<'a> {
    name: &'a str,
    /// Where to POST a `RunAgentInput`.
    route: String,
    capabilities: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    /// Also served on `POST /`.
    default: bool,
    /// The model profile it calls (`default`: `[llm]`), its provider and model; never a key
    /// or a URL.
    profile: &'a str,
    provider: &'static str,
    model: String,
}

/// Both discovery answers from the settings. `extra_tools` are the Rust tools registered on an
/// agent beside its configured ones.
pub(super) fn discovery(
    settings: &Settings,
    extra_tools: &BTreeMap<String, Vec<Tool>>,
) -> Discovery {
    let entries: Vec<AgentEntry<'_>> = settings
        .agents
        .iter()
        .map(|(name, agent)| {
            let llm = settings
                .model_profile(agent.profile.as_deref())
                .unwrap_or_else(|| settings.llm.clone());
            AgentEntry {
                name,
                route: format!("/{name}"),
                capabilities: format!("/{name}/capabilities"),
                description: agent.description.as_deref(),
                default: *name == settings.default_agent,
                profile: agent
                    .profile
                    .as_deref()
                    .unwrap_or(crate::settings::DEFAULT_PROFILE),
                provider: llm.effective_provider().as_str(),
                model: agent
                    .model
                    .clone()
                    .unwrap_or_else(|| llm.served_model().to_owned()),
            }
        })
        .collect();
    let agents = json!({ "defaultAgent": settings.default_agent, "agents": entries });
    let run_deadline_secs = settings.server.limits.run_deadline_secs;
    // Runs are logged for reconnects exactly when there is a thread store (`app::backends`).
    let resumable = settings.threads.store != crate::settings::ThreadStoreKind::Off;
    let disconnect = on_disconnect(settings.runs.on_disconnect, resumable);
    let capabilities = settings
        .agents
        .iter()
        .map(|(name, agent)| {
            let extra = extra_tools.get(name).map(Vec::as_slice).unwrap_or_default();
            let mut capabilities =
                agent_capabilities(name, agent, extra, run_deadline_secs, resumable);
            add_subagents(&mut capabilities, agent, settings);
            let custom = capabilities.custom.get_or_insert_with(Map::new);
            if let Value::Object(ours) = custom
                .entry(CUSTOM_KEY.to_owned())
                .or_insert_with(|| Value::Object(Map::new()))
            {
                ours.insert("onDisconnect".into(), disconnect.clone());
            }
            (name.clone(), capabilities)
        })
        .collect();
    Discovery::new(agents, capabilities)
}

fn agent_capabilities(
    name: &str,
    agent: &AgentSettings,
    extra_tools: &[Tool],
    run_deadline_secs: f64,
    resumable: bool,
) -> AgentCapabilities {
    AgentCapabilities {
        identity: Some(IdentityCapabilities {
            name: Some(name.to_owned()),
            kind: Some("agui-host".to_owned()),
            description: agent.description.clone(),
            version: Some(env!("CARGO_PKG_VERSION").to_owned()),
        }),
        // SSE only; resumable: `GET /<agent>/runs/<runId>/events` with `Last-Event-ID`.
        transport: Some(TransportCapabilities {
            streaming: Some(true),
            websocket: Some(false),
            http_binary: Some(false),
            push_notifications: Some(false),
            resumable: Some(resumable),
        }),
        tools: Some(ToolsCapabilities {
            supported: Some(true),
            items: Some(server_tools(agent, extra_tools)),
            // The server tools of one model turn run concurrently.
            parallel_calls: Some(true),
            client_provided: Some(true),
        }),
        state: Some(state_capabilities(agent)),
        multi_agent: Some(MultiAgentCapabilities {
            supported: Some(false),
            ..Default::default()
        }),
        // Whatever reasoning the model streams is passed on as REASONING_* events.
        reasoning: Some(ReasoningCapabilities {
            supported: Some(true),
            streaming: Some(true),
            encrypted: None,
        }),
        multimodal: Some(MultimodalCapabilities {
            input: Some(multimodal_input()),
        }),
        execution: Some(ExecutionCapabilities {
            code_execution: Some(false),
            max_iterations: Some(agent.max_iterations),
            max_execution_time: (run_deadline_secs > 0.0)
                .then(|| (run_deadline_secs * 1000.0).round() as u64),
        }),
        human_in_the_loop: Some(human_in_the_loop(agent)),
        custom: custom(agent),
    }
}

/// The configured tools, then the registered ones, as the model sees them.
fn server_tools(agent: &AgentSettings, extra_tools: &[Tool]) -> Vec<Tool> {
    let configured = agent.tools.iter().map(|tool| Tool {
        name: tool.name.clone(),
        description: tool.description.clone(),
        parameters: Some(
            tool.parameters
                .clone()
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        ),
        metadata: None,
    });
    configured.chain(extra_tools.iter().cloned()).collect()
}

/// An agent's subagents: `multiAgent` names them, and each is one of its tools.
fn add_subagents(capabilities: &mut AgentCapabilities, agent: &AgentSettings, settings: &Settings) {
    if agent.subagents.is_empty() {
        return;
    }
    let described = |child: &String| {
        let description = settings
            .agents
            .get(child)
            .and_then(|a| a.description.clone());
        (child.clone(), description)
    };
    let children: Vec<(String, Option<String>)> = agent.subagents.iter().map(described).collect();
    if let Some(items) = capabilities.tools.as_mut().and_then(|t| t.items.as_mut()) {
        items.extend(children.iter().map(|(name, description)| {
            let definition = crate::agent::subagent::definition(
                name,
                description.as_deref(),
                agent.subagent_context.messages > 0,
            );
            Tool {
                name: definition.name,
                description: definition.description,
                parameters: Some(definition.parameters),
                metadata: None,
            }
        }));
    }
    capabilities.multi_agent = Some(MultiAgentCapabilities {
        supported: Some(true),
        delegation: Some(true),
        subagents: Some(
            children
                .into_iter()
                .map(|(name, description)| SubagentInfo { name, description })
                .collect(),
        ),
    });
    // A child's state changes are the agent's, as deltas under the child's key.
    if children_change_state(agent, settings, &mut Vec::new()) {
        if let Some(state) = capabilities.state.as_mut() {
            state.deltas = Some(true);
        }
    }
}

/// Whether any agent under `agent` changes its state (`seen`: the agents on the way, so a
/// cycle, refused at start-up anyway, ends the search).
fn children_change_state<'a>(
    agent: &'a AgentSettings,
    settings: &'a Settings,
    seen: &mut Vec<&'a str>,
) -> bool {
    agent.subagents.iter().any(|name| {
        let Some(child) = settings.agents.get(name) else {
            return false;
        };
        if seen.contains(&name.as_str()) {
            return false;
        }
        seen.push(name);
        let own = state_capabilities(child);
        own.deltas == Some(true)
            || own.snapshots == Some(true)
            || children_change_state(child, settings, seen)
    })
}

/// Image parts reach the model as image content; audio, video and documents only as a text
/// placeholder naming them, which is not processing them.
fn multimodal_input() -> MultimodalInputCapabilities {
    MultimodalInputCapabilities {
        image: Some(true),
        audio: Some(false),
        video: Some(false),
        pdf: Some(false),
        file: Some(false),
    }
}

/// Whether the agent itself writes the shared state (the client's state is always accepted).
fn state_capabilities(agent: &AgentSettings) -> StateCapabilities {
    let tool_writes_state = agent.tools.iter().any(|tool| match &tool.kind {
        ToolKindSettings::Static { state, .. } => state.is_some(),
        ToolKindSettings::State { .. } => true,
        ToolKindSettings::Http { envelope, .. } => *envelope,
        ToolKindSettings::Input { .. } | ToolKindSettings::A2ui { .. } => false,
    });
    let writes = tool_writes_state
        || !agent.state.from_tools.is_empty()
        || !agent.predict_state.is_empty()
        || agent.status.enabled;
    let fills_defaults = agent.state.fill_defaults && agent.state.schema.is_some();
    StateCapabilities {
        snapshots: Some(writes || fills_defaults),
        deltas: Some(writes),
        memory: Some(false),
        // The client sends the state with every run; the server keeps none between runs.
        persistent_state: Some(false),
    }
}

fn needs_approval(policy: &ApprovalPolicySetting) -> bool {
    !matches!(
        policy,
        ApprovalPolicySetting::Unset | ApprovalPolicySetting::Fixed(FixedApproval::Never)
    )
}

fn is_input_tool(tool: &ToolSettings) -> bool {
    matches!(tool.kind, ToolKindSettings::Input { .. })
}

fn human_in_the_loop(agent: &AgentSettings) -> HumanInTheLoopCapabilities {
    let approvals = agent
        .tools
        .iter()
        .any(|tool| needs_approval(&tool.approval));
    let edits = agent
        .tools
        .iter()
        .any(|tool| needs_approval(&tool.approval) && tool.allow_edit);
    let asks_for_input = agent.tools.iter().any(is_input_tool);
    HumanInTheLoopCapabilities {
        // Client tools always reach the model, so a frontend can always ask its user.
        supported: Some(true),
        approvals: Some(approvals),
        interrupts: Some(approvals || asks_for_input),
        approve_with_edits: Some(edits),
    }
}

/// What AG-UI has no field for: the state schema, the predictive state keys and the tools that
/// wait for approval, under `custom["agui-host"]`.
/// What a run does when its client disconnects, and how a request asks otherwise:
/// `{"default": "cancel" | "continue", "requestHeader"?, "forwardedProp"?}`.
fn on_disconnect(policy: OnDisconnect, resumable: bool) -> Value {
    match (policy, resumable) {
        (OnDisconnect::Continue, true) => json!({"default": "continue"}),
        (OnDisconnect::Auto, true) => json!({
            "default": "cancel",
            "requestHeader": "X-AGUI-On-Disconnect: continue",
            "forwardedProp": "aguiHost.onDisconnect = \"continue\"",
        }),
        // Without a log nothing could resume the run: it always ends with its connection.
        _ => json!({"default": "cancel"}),
    }
}

fn custom(agent: &AgentSettings) -> Option<Map<String, Value>> {
    let mut ours = Map::new();
    if let Some(schema) = &agent.state.schema {
        ours.insert("stateSchema".into(), schema.clone());
    }
    if !agent.predict_state.is_empty() {
        let keys: Map<String, Value> = agent
            .predict_state
            .iter()
            .map(|(key, rule)| {
                let rule = json!({"tool": rule.tool, "toolArgument": rule.tool_argument});
                (key.clone(), rule)
            })
            .collect();
        ours.insert("predictState".into(), Value::Object(keys));
    }
    let approval_tools: Vec<Value> = agent
        .tools
        .iter()
        .filter(|tool| needs_approval(&tool.approval))
        .map(|tool| {
            let when = match &tool.approval {
                ApprovalPolicySetting::When { when } => json!({ "when": when }),
                _ => json!("always"),
            };
            json!({"name": tool.name, "approval": when, "allowEdit": tool.allow_edit})
        })
        .collect();
    if !approval_tools.is_empty() {
        ours.insert("approvalTools".into(), Value::Array(approval_tools));
    }
    let input_tools: Vec<Value> = agent
        .tools
        .iter()
        .filter_map(|tool| match &tool.kind {
            ToolKindSettings::Input {
                response_schema, ..
            } => Some(json!({"name": tool.name, "responseSchema": response_schema})),
            _ => None,
        })
        .collect();
    if !input_tools.is_empty() {
        ours.insert("inputTools".into(), Value::Array(input_tools));
    }
    // What a renderer may meet: the activity types this agent's runs can carry (an agent
    // without server tools carries none).
    let mut activities = Vec::new();
    let has_server_tools = !agent.tools.is_empty() || !agent.mcp_servers.is_empty();
    if agent.tool_activities && has_server_tools {
        activities.push(json!("agui-host.tool"));
    }
    if !agent.background_tool_names().is_empty() {
        // A background task's life: started in one run, its result in a later one.
        activities.push(json!("agui-host.background"));
    }
    if !agent.mcp_servers.is_empty() {
        // Sent after a call of an MCP tool with a UI resource; its requests are answered here.
        activities.push(json!("mcp-apps"));
    }
    if !agent.subagents.is_empty() && agent.subagent_visibility != SubagentVisibility::Hidden {
        // A child's work folded into one activity (inline, and for 0.x clients).
        activities.push(json!(crate::agent::middleware::SUBAGENT_ACTIVITY_TYPE));
    }
    if !activities.is_empty() {
        ours.insert("activityTypes".into(), Value::Array(activities));
    }
    // A2UI surfaces the agent shows: its fixed ones, and whether every run may generate one.
    // (Any agent generates one when the client asks, unless told never to; that default is
    // left unsaid, as plain agents say nothing.)
    let surfaces: Vec<Value> = agent
        .tools
        .iter()
        .filter_map(|tool| match &tool.kind {
            ToolKindSettings::A2ui {
                surface_id,
                catalog_id,
                ..
            } => Some(json!({
                "tool": tool.name,
                "surfaceId": surface_id,
                "catalogId": catalog_id.as_deref().unwrap_or(A2UI_BASIC_CATALOG_ID),
            })),
            _ => None,
        })
        .collect();
    let generates_always = agent.a2ui.generate == A2uiGenerate::Always;
    if !surfaces.is_empty() || generates_always {
        let generate = match agent.a2ui.generate {
            A2uiGenerate::Always => "always",
            A2uiGenerate::WhenAsked => "when_asked",
            A2uiGenerate::Never => "never",
        };
        ours.insert(
            "a2ui".into(),
            json!({"version": "v0.9", "generate": generate, "surfaces": surfaces}),
        );
    }
    (!ours.is_empty()).then(|| Map::from_iter([(CUSTOM_KEY.to_owned(), Value::Object(ours))]))
}
