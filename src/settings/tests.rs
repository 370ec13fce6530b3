//! Settings: the layers (embedded defaults, files, environment), validation, and what each refuses.

use super::*;

#[test]
fn embedded_default_is_valid_and_offline() {
    let settings = Settings::embedded_default().expect("default.toml parses");
    assert_eq!(settings.llm.effective_provider(), LlmProvider::Offline);
    assert!(settings.agents.contains_key(&settings.default_agent));
}

#[test]
fn api_key_is_redacted_in_debug() {
    let mut settings = Settings::embedded_default().unwrap();
    settings.llm.api_key = "sk-very-secret".into();
    settings
        .llm
        .extra_headers
        .insert("api-key".into(), "also-secret".into());
    let printed = format!("{settings:?}");
    assert!(!printed.contains("sk-very-secret"));
    assert!(!printed.contains("also-secret"));
    assert!(printed.contains("[redacted]"));
}

#[test]
fn a_file_layer_replaces_an_agents_tool_list_rather_than_merging_by_index() {
    let path = std::env::temp_dir().join(format!("agui-host-settings-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        r#"
[[agents.assistant.tools]]
name = "update_recipe"
kind = "static"
result = "ok"
"#,
    )
    .unwrap();
    let settings = Settings::load(Some(&path));
    std::fs::remove_file(&path).ok();
    let tools = &settings.unwrap().agents["assistant"].tools;
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0].name, "update_recipe");
    assert!(
        tools[0].parameters.is_none(),
        "no field leaks from the default's get_weather"
    );
}

/// The defaults overlaid with `APP_...` variables from `vars` (not the process environment,
/// which other tests share).
fn with_env(vars: &[(&str, &str)]) -> Result<Settings, SettingsError> {
    let vars = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let settings: Settings = config::Config::builder()
        .add_source(config::File::from_str(
            DEFAULT_TOML,
            config::FileFormat::Toml,
        ))
        .add_source(
            config::Environment::with_prefix("APP")
                .prefix_separator("_")
                .separator("__")
                .source(Some(vars)),
        )
        .build()?
        .try_deserialize()?;
    settings.validate()?;
    Ok(settings)
}

#[test]
fn approval_keys_come_from_a_list_and_the_single_key_is_read_last() {
    let old = "o".repeat(32);
    let new = "n".repeat(32);
    let settings = with_env(&[
        ("APP_SECURITY__APPROVAL_KEYS", &format!("{new},{old}")),
        ("APP_SECURITY__APPROVAL_KEY", &old),
    ])
    .unwrap();
    assert_eq!(
        settings.security.approval_key_list(),
        [new.clone(), old.clone()]
    );
    let legacy = with_env(&[("APP_SECURITY__APPROVAL_KEY", &old)]).unwrap();
    assert_eq!(
        legacy.security.approval_key_list(),
        std::slice::from_ref(&old)
    );
    assert!(!format!("{:?}", settings.security).contains(&new));
}

#[test]
fn ops_lists_come_from_comma_separated_variables() {
    let settings = with_env(&[
        ("APP_SERVER__AUTH__TOKENS", "tok-one, tok-two,,"),
        (
            "APP_SERVER__CORS__ALLOWED_ORIGINS",
            "https://a.example,http://localhost:3000",
        ),
        ("APP_SERVER__SHUTDOWN_GRACE_SECS", "0.25"),
    ])
    .unwrap();
    assert_eq!(settings.server.auth.tokens, ["tok-one", "tok-two"]);
    assert_eq!(
        settings.server.cors.allowed_origins,
        ["https://a.example", "http://localhost:3000"]
    );
    assert_eq!(settings.server.shutdown_grace_secs, 0.25);
    let empty = with_env(&[("APP_SERVER__AUTH__TOKENS", "")]).unwrap();
    assert!(
        empty.server.auth.tokens.is_empty(),
        "an empty variable is no token"
    );
}

#[test]
fn ops_defaults_are_closed_cors_no_auth_and_bounded_runs() {
    let settings = Settings::embedded_default().unwrap();
    assert!(settings.server.cors.allowed_origins.is_empty());
    assert!(settings.server.auth.tokens.is_empty());
    assert!(settings.server.limits.max_concurrent_runs > 0);
    assert!(settings.server.limits.run_deadline_secs > 0.0);
    assert!(settings.metrics.enabled && settings.metrics.require_auth);
}

#[test]
fn input_limits_have_defaults_and_come_from_variables() {
    let settings = Settings::embedded_default().unwrap();
    let limits = &settings.server.input_limits;
    assert_eq!(limits.max_messages, 1000);
    assert_eq!(limits.max_content_bytes, 2 * 1024 * 1024);
    assert_eq!(limits.max_tools, 128);
    let settings = with_env(&[("APP_SERVER__INPUT_LIMITS__MAX_MESSAGES", "5")]).unwrap();
    assert_eq!(settings.server.input_limits.max_messages, 5);
    assert_eq!(settings.server.input_limits.max_tools, 128);
}

#[test]
fn auth_tokens_are_redacted_in_debug() {
    let mut settings = Settings::embedded_default().unwrap();
    settings.server.auth.tokens = vec!["tok-very-secret".into()];
    assert!(!format!("{settings:?}").contains("tok-very-secret"));
}

#[test]
fn unusable_ops_values_are_rejected() {
    for vars in [
        &[("APP_SERVER__CORS__ALLOWED_ORIGINS", "*")][..],
        &[("APP_SERVER__CORS__ALLOWED_ORIGINS", "https://a.example/")][..],
        &[("APP_SERVER__CORS__ALLOWED_ORIGINS", "a.example")][..],
        &[("APP_SERVER__CORS__ALLOWED_ORIGINS", "*,https://a.example")][..],
        &[("APP_SERVER__CORS__ALLOWED_HEADERS", "x bad")][..],
        &[("APP_SERVER__SHUTDOWN_GRACE_SECS", "-1")][..],
        &[("APP_SERVER__LIMITS__RUN_DEADLINE_SECS", "NaN")][..],
    ] {
        let mut vars = vars.to_vec();
        if vars[0].1 == "*" {
            // `*` alone is allowed; with credentials it is not.
            assert!(with_env(&vars).is_ok());
            vars.push(("APP_SERVER__CORS__ALLOW_CREDENTIALS", "true"));
        }
        assert!(with_env(&vars).is_err(), "{vars:?} must be refused");
    }
}

#[test]
fn connection_and_host_settings_are_checked() {
    let defaults = with_env(&[]).unwrap();
    assert_eq!(defaults.server.limits.max_connections, 512);
    assert!(defaults.server.allowed_hosts.is_empty());
    assert!(defaults.server.binds_loopback());
    let listed = with_env(&[(
        "APP_SERVER__ALLOWED_HOSTS",
        "agents.example.com, *.internal.example,[::1],10.0.0.5",
    )])
    .unwrap();
    assert_eq!(listed.server.allowed_hosts.len(), 4);
    for vars in [
        &[("APP_SERVER__LIMITS__HEADER_READ_TIMEOUT_SECS", "0")][..],
        &[("APP_SERVER__LIMITS__HTTP2_KEEP_ALIVE_TIMEOUT_SECS", "NaN")][..],
        &[("APP_SERVER__LIMITS__HTTP2_KEEP_ALIVE_INTERVAL_SECS", "-1")][..],
        &[("APP_SERVER__LIMITS__HTTP2_MAX_CONCURRENT_STREAMS", "0")][..],
        &[("APP_SERVER__ALLOWED_HOSTS", "*,localhost")][..],
        &[("APP_SERVER__ALLOWED_HOSTS", "https://agents.example.com")][..],
        &[("APP_SERVER__ALLOWED_HOSTS", "agents.example.com:8080")][..],
    ] {
        assert!(with_env(vars).is_err(), "{vars:?} must be refused");
    }
    for (host, loopback) in [
        ("127.0.0.1", true),
        ("::1", true),
        ("[::1]", true),
        ("localhost", true),
        ("0.0.0.0", false),
        ("10.1.2.3", false),
        ("agents.internal", false),
    ] {
        let mut settings = defaults.clone();
        settings.server.host = host.into();
        assert_eq!(settings.server.binds_loopback(), loopback, "{host}");
    }
}

#[test]
fn predictive_state_rules_are_read_per_agent_with_defaults() {
    let path = std::env::temp_dir().join(format!(
        "agui-host-settings-predict-{}.toml",
        std::process::id()
    ));
    std::fs::write(
        &path,
        r#"
[agents.writer]
[agents.writer.predict_state]
document = { tool = "write_document", tool_argument = "document" }
everything = { tool = "write_document", tool_argument = "*" }
"#,
    )
    .unwrap();
    let settings = Settings::load(Some(&path));
    std::fs::remove_file(&path).ok();
    let settings = settings.unwrap();
    let writer = &settings.agents["writer"];
    assert_eq!(writer.predict_state.len(), 2);
    assert_eq!(writer.predict_state["everything"].tool_argument, "*");
    assert_eq!(
        writer.predict_state_coalescing,
        PredictStateCoalescing::default()
    );
    assert!(!writer.emit_predict_state_event);
    assert!(settings.agents["assistant"].predict_state.is_empty());

    let mut settings = settings;
    settings
        .agents
        .get_mut("writer")
        .unwrap()
        .predict_state
        .insert(
            "x".into(),
            PredictStateRule {
                tool: String::new(),
                tool_argument: "*".into(),
            },
        );
    assert!(settings.validate().is_err());
}

#[test]
fn demo_agents_are_added_unless_off_in_production_or_configured() {
    const DEMO: [&str; 22] = [
        "agentic_chat",
        "agentic_chat_multimodal",
        "agentic_chat_reasoning",
        "backend_tool_rendering",
        "human_in_the_loop",
        "agentic_generative_ui",
        "tool_based_generative_ui",
        "shared_state",
        "predictive_state_updates",
        "interrupt",
        "a2ui_fixed_schema",
        "a2ui_dynamic_schema",
        "a2ui_advanced",
        "a2ui_recovery",
        "background_agents",
        "subgraphs",
        "travel_flights",
        "travel_hotels",
        "travel_experiences",
        "deepagents_subagents",
        "research_agent",
        "critique_agent",
    ];
    let settings = Settings::embedded_default().unwrap();
    assert!(settings.demo_agents);
    for name in DEMO {
        assert!(settings.agents.contains_key(name), "{name}");
    }
    let only_default = |settings: &mut Settings| {
        settings.agents.retain(|name, _| name == "assistant");
    };

    let mut off = settings.clone();
    only_default(&mut off);
    off.demo_agents = false;
    off.add_demo_agents().unwrap();
    assert_eq!(off.agents.len(), 1);

    let mut production = settings.clone();
    only_default(&mut production);
    production.security.mode = RunMode::Production;
    production.add_demo_agents().unwrap();
    assert_eq!(production.agents.len(), 1, "never in production");

    let mut mine = settings.clone();
    only_default(&mut mine);
    let mut agent = mine.agents["assistant"].clone();
    agent.instructions = "mine".into();
    mine.agents.insert("shared_state".into(), agent);
    mine.add_demo_agents().unwrap();
    assert_eq!(mine.agents.len(), DEMO.len() + 1);
    assert_eq!(mine.agents["shared_state"].instructions, "mine");
    assert!(mine.agents["shared_state"].tools[0].name == "get_weather");

    let vars = with_env(&[("APP_DEMO_AGENTS", "false")]).unwrap();
    assert!(!vars.demo_agents);
}

#[test]
fn mcp_servers_need_distinct_names_that_can_prefix_tool_names() {
    let server = |name: &str| McpServerSettings {
        name: name.into(),
        transport: McpTransportSettings::Stdio {
            command: "server".into(),
            args: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
        },
        include: Vec::new(),
        exclude: Vec::new(),
        optional: false,
        connect_timeout_secs: 30,
        tools: BTreeMap::new(),
    };
    let with = |servers: Vec<McpServerSettings>| {
        let mut settings = Settings::embedded_default().unwrap();
        let agent = settings.default_agent.clone();
        settings.agents.get_mut(&agent).unwrap().mcp_servers = servers;
        settings.validate()
    };
    assert!(with(vec![server("files"), server("tickets")]).is_ok());
    assert!(with(vec![server("files"), server("files")]).is_err());
    assert!(with(vec![server("my files")]).is_err());
    assert!(with(vec![server("")]).is_err());

    let files = server("files");
    assert_eq!(files.tool_name("read_file").unwrap(), "files__read_file");
    assert_eq!(
        files.tool_name("fs.read/all").unwrap(),
        "files__fs_read_all"
    );
    assert!(files.tool_name(&"x".repeat(57)).is_some());
    assert!(files.tool_name(&"x".repeat(58)).is_none(), "65 characters");
}

#[test]
fn unknown_default_agent_is_rejected() {
    let mut settings = Settings::embedded_default().unwrap();
    settings.default_agent = "nobody".into();
    assert!(settings.validate().is_err());
}

#[test]
fn a_fixed_read_buffer_must_hold_a_response_head() {
    let mut settings = Settings::embedded_default().unwrap();
    assert_eq!(
        settings.llm.read_buffer_bytes, 0,
        "a growing buffer by default"
    );
    for accepted in [0, 4096, 8192, 16 * 1024 * 1024] {
        settings.llm.read_buffer_bytes = accepted;
        assert!(settings.validate().is_ok(), "{accepted}");
    }
    for refused in [1, 4095, 16 * 1024 * 1024 + 1] {
        settings.llm.read_buffer_bytes = refused;
        let error = settings.validate().expect_err("refused").to_string();
        assert!(error.contains("llm.read_buffer_bytes"), "{error}");
    }
}
