//! `agui-host check-config`: loads the configuration through every layer, builds everything the
//! server builds at start-up (`App::check`: agents, tools, JSON Schemas, state rules, routes)
//! without binding a port, and prints what would be served. A key no setting reads is an error
//! here (the server only warns), so a misspelling is caught before a deploy.

use std::fmt::Write as _;
use std::process::ExitCode;

use agui_host::settings::{
    A2uiGenerate, AgentSettings, ApprovalPolicySetting, FixedApproval, LlmSettings,
    ThreadStoreKind, ToolKindSettings, ToolNameClash, ToolSettings, ToolStateSource,
    DEFAULT_PROFILE,
};
use agui_host::text::redact_url;
use agui_host::{App, Settings};

use super::SettingsArgs;

/// Exit status of a configuration that does not load or does not validate.
const INVALID: u8 = 1;

pub(crate) fn check_config(args: &SettingsArgs) -> ExitCode {
    let layers = match &args.config {
        Some(file) => format!("the configuration with {}", file.display()),
        None => "the configuration".to_owned(),
    };
    let (settings, unknown) = match args.load() {
        Ok(loaded) => loaded,
        Err(error) => {
            eprintln!("agui-host check-config: {layers}: {error}");
            return ExitCode::from(INVALID);
        }
    };
    if !unknown.is_empty() {
        for key in &unknown {
            eprintln!("agui-host check-config: {key}");
        }
        eprintln!("agui-host check-config: {layers}: no setting reads these keys (misspelt?)");
        return ExitCode::from(INVALID);
    }
    if let Err(error) = App::check(&settings) {
        eprintln!("agui-host check-config: {layers}: {error}");
        return ExitCode::from(INVALID);
    }
    print!("{}", report(&settings));
    ExitCode::SUCCESS
}

/// What the server would serve, for a person to read.
fn report(settings: &Settings) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "configuration valid: {} agent(s), listening on {}:{}",
        settings.agents.len(),
        settings.server.host,
        settings.server.port
    );
    let _ = writeln!(out, "model: {}", describe_model(&settings.llm));
    for (name, profile) in &settings.models {
        let _ = writeln!(
            out,
            "model profile {name}: {}",
            describe_model(&profile.resolve(&settings.llm))
        );
    }
    let threads = &settings.threads;
    let _ = match threads.store {
        ThreadStoreKind::Off => writeln!(out, "threads: not kept"),
        ThreadStoreKind::Memory => writeln!(out, "threads: kept in memory"),
        ThreadStoreKind::Redis => writeln!(
            out,
            "threads: kept in Redis at {}",
            redact_url(&threads.redis_url)
        ),
        ThreadStoreKind::Postgres => writeln!(
            out,
            "threads: kept in PostgreSQL at {}",
            redact_url(&threads.postgres_url)
        ),
    };
    for (name, agent) in &settings.agents {
        let _ = writeln!(out);
        describe_agent(&mut out, name, agent, name == &settings.default_agent);
        if let Some(llm) = settings.model_profile(agent.profile.as_deref()) {
            let _ = writeln!(
                out,
                "  model profile: {} ({}, model {})",
                agent.profile.as_deref().unwrap_or(DEFAULT_PROFILE),
                llm.effective_provider().as_str(),
                agent.model.as_deref().unwrap_or(llm.served_model())
            );
        }
    }
    out
}

/// `model at url (provider: p, key: ...)`, never the key itself.
fn describe_model(llm: &LlmSettings) -> String {
    // URLs are printed with their secrets (a password, an `api-key` in the query) redacted:
    // this report ends up in terminals, CI logs and issues.
    let model = match llm.base_url.as_str() {
        "" => llm.model.clone(),
        base_url => format!("{} at {}", llm.model, redact_url(base_url)),
    };
    let provider = llm.effective_provider().as_str();
    let key = match (llm.api_key_env.trim(), llm.api_key.is_empty()) {
        (_, true) => String::new(),
        ("", false) => ", key: set".to_owned(),
        (variable, false) => format!(", key: from {variable}"),
    };
    format!("{model} (provider: {provider}{key})")
}

fn describe_agent(out: &mut String, name: &str, agent: &AgentSettings, is_default: bool) {
    let routes = if is_default {
        format!("POST /{name}, POST / (default agent)")
    } else {
        format!("POST /{name}")
    };
    let _ = writeln!(out, "agent {name}: {routes}, GET /{name}/capabilities");
    if let Some(description) = &agent.description {
        let _ = writeln!(out, "  description: {description}");
    }
    let _ = writeln!(
        out,
        "  max_iterations: {}, tool_timeout_secs: {}, client tools: accepted (name clash: {})",
        agent.max_iterations,
        agent.tool_timeout_secs,
        clash_policy(agent.tool_name_clash)
    );
    if agent.tools.is_empty() {
        let _ = writeln!(out, "  server tools: none");
    } else {
        let _ = writeln!(out, "  server tools:");
    }
    for tool in &agent.tools {
        let _ = writeln!(out, "    {}", describe_tool(tool));
    }
    // `when_asked`, the default, is left unsaid: every agent has it.
    if agent.a2ui.generate == A2uiGenerate::Always {
        let _ = writeln!(
            out,
            "  generate_a2ui: offered always; {} attempt(s) within {} s",
            agent.a2ui.max_attempts, agent.a2ui.timeout_secs
        );
    }
    describe_state(out, agent);
}

/// The configured name of a `tool_name_clash` policy.
fn clash_policy(policy: ToolNameClash) -> &'static str {
    match policy {
        ToolNameClash::PreferServer => "prefer_server",
        ToolNameClash::PreferClient => "prefer_client",
        ToolNameClash::Reject => "reject",
    }
}

/// `name  kind  approval: ...`.
fn describe_tool(tool: &ToolSettings) -> String {
    let kind = match &tool.kind {
        ToolKindSettings::Static { .. } => "static".to_owned(),
        ToolKindSettings::State { key, argument, .. } => {
            format!("state (argument {argument} -> key {key})")
        }
        ToolKindSettings::Http { url, .. } => format!("http (POST {url})"),
        ToolKindSettings::A2ui { surface_id, .. } => format!("a2ui (surface {surface_id})"),
        ToolKindSettings::Input {
            response_schema, ..
        } => {
            return format!(
                "{}: input; asks the user, answer matching {response_schema}",
                tool.name
            )
        }
    };
    let approval = match &tool.approval {
        ApprovalPolicySetting::Unset | ApprovalPolicySetting::Fixed(FixedApproval::Never) => {
            "never".to_owned()
        }
        ApprovalPolicySetting::Fixed(FixedApproval::Always) => "always".to_owned(),
        ApprovalPolicySetting::When { when } => format!("when the arguments match {when}"),
    };
    let edit = if tool.allow_edit {
        ", arguments editable"
    } else {
        ""
    };
    format!("{}: {kind}; approval: {approval}{edit}", tool.name)
}

fn describe_state(out: &mut String, agent: &AgentSettings) {
    let state = &agent.state;
    let _ = writeln!(
        out,
        "  state: schema {}, max {} bytes, in the prompt: {}, defaults filled: {}",
        if state.schema.is_some() {
            "yes"
        } else {
            "none"
        },
        state.max_bytes,
        state.inject_into_prompt,
        state.fill_defaults
    );
    for rule in &state.from_tools {
        let source = match &rule.source {
            ToolStateSource::Arguments { argument, key } => {
                format!("argument {argument} -> key {key}")
            }
            ToolStateSource::Result { kind } => {
                format!("result as {}", format!("{kind:?}").to_ascii_lowercase())
            }
        };
        let _ = writeln!(out, "    from tool {}: {source}", rule.tool);
    }
    for (key, rule) in &agent.predict_state {
        let _ = writeln!(
            out,
            "    predicted key {key} <- {}.{} while the arguments stream",
            rule.tool, rule.tool_argument
        );
    }
    if agent.status.enabled {
        let _ = writeln!(out, "    status under key {}", agent.status.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_names_routes_tools_with_kind_and_approval_and_state_rules() {
        let mut settings = Settings::embedded_default().expect("the defaults");
        settings.demo_agents = false;
        let report = report(&settings);
        assert!(report.contains(
            "agent assistant: POST /assistant, POST / (default agent), GET /assistant/capabilities"
        ));
        assert!(
            report.contains("get_weather: static; approval: never"),
            "{report}"
        );
        assert!(
            report.contains("agent human_in_the_loop: POST /human_in_the_loop"),
            "{report}"
        );
        assert!(
            report.contains("predicted key document <- write_document_local.document"),
            "{report}"
        );
    }

    #[test]
    fn the_report_names_each_profile_and_each_agents_without_a_key() {
        let mut settings = Settings::embedded_default().expect("the defaults");
        settings.demo_agents = false;
        settings.models.insert(
            "claude".into(),
            agui_host::settings::ModelProfile {
                provider: Some(agui_host::settings::LlmProvider::Anthropic),
                api_key: "sk-ant-secret".into(),
                api_key_env: "ANTHROPIC_API_KEY".into(),
                model: "claude-sonnet-4-5".into(),
                ..Default::default()
            },
        );
        settings.agents.get_mut("assistant").unwrap().profile = Some("claude".into());
        let report = report(&settings);
        assert!(
            report.contains(
                "model profile claude: claude-sonnet-4-5 (provider: anthropic, key: from ANTHROPIC_API_KEY)"
            ),
            "{report}"
        );
        assert!(
            report.contains("  model profile: claude (anthropic, model claude-sonnet-4-5)"),
            "{report}"
        );
        assert!(!report.contains("sk-ant-secret"), "{report}");
    }
}
