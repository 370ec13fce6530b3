//! The `agui-host` binary's command line, run as a person runs it: every subcommand answers
//! `--help` and `--version`, and `check-config` accepts a good file and names the file and the
//! key of a bad one.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the binary with `args` in a clean environment (no `APP_*` or `OPENAI_*` variable of
/// the test process leaks in) from an empty working directory.
fn agui_host(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agui-host"))
        .args(args)
        .env_clear()
        .current_dir(std::env::temp_dir())
        .output()
        .expect("the binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The subcommands the top-level help lists (so a new one is covered without editing this).
fn subcommands() -> Vec<String> {
    let help = stdout(&agui_host(&["--help"]));
    let commands = help
        .split("Commands:\n")
        .nth(1)
        .expect("the help lists commands");
    commands
        .lines()
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

/// A configuration file for one test, removed when dropped.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(name: &str, toml: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("agui-host-cli-{}-{name}.toml", std::process::id()));
        std::fs::write(&path, toml).expect("the file is written");
        ConfigFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("a UTF-8 path")
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn check_config(file: &str) -> Output {
    agui_host(&["check-config", "--config", file])
}

#[track_caller]
fn assert_refused(output: &Output, expected: &[&str]) {
    let stderr = stderr(output);
    assert_eq!(
        output.status.code(),
        Some(1),
        "exit status; stderr: {stderr}"
    );
    for text in expected {
        assert!(stderr.contains(text), "{text:?} in: {stderr}");
    }
    assert!(stdout(output).is_empty(), "nothing is reported as valid");
}

#[test]
fn every_subcommand_answers_help_and_version() {
    let subcommands = subcommands();
    for expected in [
        "serve",
        "check-config",
        "healthcheck",
        "chat",
        "completions",
    ] {
        assert!(
            subcommands.iter().any(|s| s == expected),
            "{expected} in {subcommands:?}"
        );
    }
    for subcommand in &subcommands {
        // clap's own `help` subcommand takes a subcommand name, not `--help`.
        let help = if subcommand == "help" {
            agui_host(&["help", "chat"])
        } else {
            agui_host(&[subcommand, "--help"])
        };
        assert!(help.status.success(), "{subcommand} --help: {help:?}");
        assert!(
            stdout(&help).contains("Usage: agui-host"),
            "{subcommand} --help prints a usage: {}",
            stdout(&help)
        );
        if subcommand != "help" {
            let version = agui_host(&[subcommand, "--version"]);
            assert!(version.status.success(), "{subcommand} --version");
            assert_eq!(
                stdout(&version).trim(),
                concat!("agui-host ", env!("CARGO_PKG_VERSION")),
                "{subcommand} --version"
            );
        }
    }
    let unknown = agui_host(&["chat", "--nonsense"]);
    assert_eq!(unknown.status.code(), Some(2), "a usage error");
    assert!(stderr(&unknown).contains("--nonsense"));
}

#[test]
fn check_config_accepts_a_good_file_and_prints_what_would_be_served() {
    let banking = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/examples/banking.toml");
    let output = check_config(banking.to_str().unwrap());
    assert!(output.status.success(), "{}", stderr(&output));
    let report = stdout(&output);
    for line in [
        "agent banking: POST /banking, POST / (default agent), GET /banking/capabilities",
        "check_balance: static; approval: never",
        "cancel_subscription: static; approval: always",
        "transfer_money: static; approval: when the arguments match",
        "arguments editable",
    ] {
        assert!(report.contains(line), "{line:?} in:\n{report}");
    }
}

#[test]
fn check_config_names_the_file_and_a_misspelt_key() {
    let file = ConfigFile::new(
        "bad-key",
        "[agents.assistant]\ninstrutions = \"Be brief.\"\n",
    );
    let file_name = file.0.file_name().unwrap().to_str().unwrap();
    assert_refused(
        &check_config(file.path()),
        &["unknown key `agents.assistant.instrutions`", file_name],
    );
    let tool_key = ConfigFile::new(
        "bad-tool-key",
        "[[agents.assistant.tools]]\nname = \"t\"\nkind = \"static\"\nreslt = 1\nresult = 2\n",
    );
    assert_refused(
        &check_config(tool_key.path()),
        &["unknown key `agents.assistant.tools[0].reslt`"],
    );
}

#[test]
fn check_config_refuses_a_value_of_the_wrong_type_naming_file_and_key() {
    let file = ConfigFile::new(
        "bad-value",
        "[agents.assistant]\nmax_iterations = \"lots\"\n",
    );
    let file_name = file.0.file_name().unwrap().to_str().unwrap();
    assert_refused(
        &check_config(file.path()),
        &["agents.assistant.max_iterations", file_name],
    );
}

#[test]
fn check_config_refuses_a_bad_json_schema() {
    let file = ConfigFile::new(
        "bad-schema",
        r#"
[[agents.assistant.tools]]
name = "lookup"
kind = "static"
result = 1
parameters = { type = "objekt" }
"#,
    );
    assert_refused(
        &check_config(file.path()),
        &[
            "agents.assistant",
            "tool `lookup`",
            "not a valid JSON Schema",
            file.path(),
        ],
    );
}

#[test]
fn check_config_refuses_a_tool_of_an_unknown_kind() {
    let file = ConfigFile::new(
        "bad-kind",
        "[[agents.assistant.tools]]\nname = \"t\"\nkind = \"magic\"\n",
    );
    assert_refused(
        &check_config(file.path()),
        &[
            "unknown variant `magic`",
            "agents.assistant.tools[0]",
            file.path(),
        ],
    );
}

#[test]
fn check_config_refuses_a_cycle_of_subagents_naming_it() {
    let file = ConfigFile::new(
        "subagent-cycle",
        r#"
[agents.planner]
subagents = ["flights"]

[agents.flights]
subagents = ["planner"]
"#,
    );
    assert_refused(
        &check_config(file.path()),
        &["cycle", "flights -> planner -> flights"],
    );
}

#[test]
fn check_config_refuses_a_missing_file() {
    assert_refused(
        &check_config("/nonexistent/agui-host.toml"),
        &["/nonexistent/agui-host.toml"],
    );
}

#[test]
fn completions_are_printed_for_a_shell() {
    let output = agui_host(&["completions", "bash"]);
    assert!(output.status.success());
    assert!(stdout(&output).contains("check-config"));
}

/// The server itself: the flags win over the environment, and a key no setting reads is
/// logged as a warning, not refused (an unknown key must not take a running service down).
#[test]
fn serve_applies_the_flags_over_the_environment_and_warns_of_unknown_keys() {
    use crate::helpers::wait_until_listening;
    use std::process::Stdio;

    let file = ConfigFile::new(
        "serve-unknown-key",
        "[agents.assistant]\ninstrutions = \"Be brief.\"\n",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_agui-host"))
        .args([
            "--config",
            file.path(),
            "--port",
            "0",
            "--model",
            "flag-model",
        ])
        .env_clear()
        .env("PORT", "1")
        .env("OPENAI_MODEL", "env-model")
        .env("APP_TELEMETRY__JSON", "true")
        .current_dir(std::env::temp_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let (listening, log) = wait_until_listening(&mut child);
    let _ = child.kill();
    let _ = child.wait();

    let listening = listening.unwrap_or_else(|| panic!("the server listens; log: {log:#?}"));
    let listening: serde_json::Value = serde_json::from_str(&listening).expect("a JSON log line");
    let address = listening["address"].as_str().expect("the address");
    assert!(
        !address.ends_with(":1"),
        "--port 0 wins over PORT=1: {address}"
    );
    assert!(
        log.iter().any(
            |line| line.contains("unknown key `agents.assistant.instrutions`")
                && line.contains("WARN")
        ),
        "a warning names the key: {log:#?}"
    );
    let settings = agui_host::settings::Settings::load_checked(None, &[("llm.model", "m".into())]);
    assert_eq!(settings.expect("the defaults load").0.llm.model, "m");
}

/// `security.mode = "production"` on an address others can reach, with no tokens and no
/// trusted proxy naming the user: the server does not start, and check-config says why.
#[test]
fn production_mode_refuses_to_listen_on_every_interface_without_authentication() {
    use std::time::{Duration, Instant};

    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_agui-host"))
            .args(args)
            .env_clear()
            .envs(env.iter().copied())
            .current_dir(std::env::temp_dir())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the binary runs");
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("{args:?} {env:?}: still running after 10 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().unwrap()
    };
    let production = [
        ("APP_SECURITY__MODE", "production"),
        ("HOST", "0.0.0.0"),
        ("PORT", "0"),
    ];
    let served = run(&[], &production);
    assert!(!served.status.success(), "the server refused to start");
    let checked = run(&["check-config"], &production);
    assert_eq!(checked.status.code(), Some(1));
    for output in [&served, &checked] {
        let stderr = stderr(output);
        for text in [
            "production",
            "0.0.0.0",
            "server.auth.tokens",
            "threads.scope_header",
        ] {
            assert!(stderr.contains(text), "{text:?} in: {stderr}");
        }
    }
    // With tokens, or a proxy that authenticates and names the user, or on loopback: valid.
    for extra in [
        ("APP_SERVER__AUTH__TOKENS", "a-long-enough-token"),
        ("APP_THREADS__SCOPE_HEADER", "X-User-Id"),
        ("HOST", "127.0.0.1"),
    ] {
        let mut env = production.to_vec();
        env.push(extra);
        let checked = run(&["check-config"], &env);
        assert!(checked.status.success(), "{extra:?}: {}", stderr(&checked));
    }
}

/// A base URL may carry a password or a key in its query (Azure-style gateways, `?api-key=`):
/// check-config prints where the model is without them, and the Redis URL likewise.
#[test]
fn check_config_redacts_the_secrets_of_the_urls_it_prints() {
    let file = ConfigFile::new(
        "secret-urls",
        r#"
[llm]
base_url = "https://gateway-user:hunter2-password@llm.example.com/v1?api-key=sk-query-secret&region=eu"
api_key = "sk-configured"

[threads]
store = "redis"
redis_url = "redis://:redis-password-42@redis.internal:6379/0"
"#,
    );
    let output = check_config(file.path());
    assert!(output.status.success(), "{}", stderr(&output));
    let report = stdout(&output);
    for secret in ["hunter2-password", "sk-query-secret", "redis-password-42"] {
        assert!(!report.contains(secret), "{secret} printed in:\n{report}");
    }
    for shown in ["llm.example.com/v1", "region=eu", "redis.internal:6379"] {
        assert!(report.contains(shown), "{shown} in:\n{report}");
    }
}
