//! Model profiles: read from the files, resolved over `[llm]`, checked, and their keys.

use super::super::{keys, Settings, DEFAULT_TOML};
use super::*;

/// The defaults with `toml` on top, and the keys no setting reads.
fn load(toml: &str) -> Result<(Settings, Vec<String>), SettingsError> {
    let config = config::Config::builder()
        .add_source(config::File::from_str(
            DEFAULT_TOML,
            config::FileFormat::Toml,
        ))
        .add_source(config::File::from_str(toml, config::FileFormat::Toml))
        .build()?;
    let (settings, unknown) = keys::deserialize(&config)?;
    settings.validate()?;
    Ok((settings, unknown.into_iter().map(|k| k.key).collect()))
}

const TWO_PROFILES: &str = r#"
[llm]
idle_timeout_secs = 7
max_retries = 5

[models.claude]
provider = "anthropic"
api_key_env = "TEST_CLAUDE_KEY"
model = "claude-sonnet-4-5"
thinking_budget_tokens = 2048
max_retries = 1

[models.reasoner]
provider = "openai-responses"
base_url = "http://gateway.internal/v1"
api_key = "sk-profile-secret"
model = "o4-mini"

[agents.assistant]
profile = "claude"
"#;

#[test]
fn a_profile_has_its_own_endpoint_and_llm_transport_where_it_sets_none() {
    let (settings, unknown) = load(TWO_PROFILES).expect("valid");
    assert!(unknown.is_empty(), "{unknown:?}");
    let claude = settings.model_profile(Some("claude")).expect("claude");
    assert_eq!(claude.provider, LlmProvider::Anthropic);
    assert_eq!(claude.model, "claude-sonnet-4-5");
    assert_eq!(claude.thinking_budget_tokens, 2048);
    assert_eq!(claude.max_retries, 1, "its own");
    assert_eq!(claude.idle_timeout_secs, 7, "[llm]'s");
    assert!(claude.api_key.is_empty(), "not [llm]'s key, nor read yet");
    assert!(
        claude.base_url.is_empty(),
        "the provider's default URL, not [llm]'s"
    );
    let reasoner = settings.model_profile(Some("reasoner")).expect("reasoner");
    assert_eq!(reasoner.provider, LlmProvider::OpenaiResponses);
    assert!(!reasoner.store, "stateless by default");
    assert_eq!(
        settings.model_profile(None).map(|l| l.model),
        Some(settings.llm.model.clone())
    );
    assert_eq!(
        settings
            .model_profile(Some(DEFAULT_PROFILE))
            .map(|l| l.model),
        Some(settings.llm.model.clone())
    );
    assert!(settings.model_profile(Some("nope")).is_none());
    assert_eq!(
        settings.agents["assistant"].profile.as_deref(),
        Some("claude")
    );
}

#[test]
fn a_named_key_variable_is_read_and_one_that_is_unset_is_refused() {
    let (mut settings, _) = load(TWO_PROFILES).expect("valid");
    settings
        .read_model_keys(|name| (name == "TEST_CLAUDE_KEY").then(|| " sk-ant-123 ".to_owned()))
        .expect("the variable is set");
    assert_eq!(settings.models["claude"].api_key, "sk-ant-123");
    assert_eq!(settings.models["reasoner"].api_key, "sk-profile-secret");

    let (mut settings, _) = load(TWO_PROFILES).expect("valid");
    let error = settings.read_model_keys(|_| None).expect_err("unset");
    assert_eq!(
        error.to_string(),
        "invalid configuration: models.claude.api_key_env names `TEST_CLAUDE_KEY`, which is not set"
    );
}

#[test]
fn secrets_of_a_profile_are_never_printed() {
    let (settings, _) = load(TWO_PROFILES).expect("valid");
    let printed = format!("{settings:?}");
    assert!(!printed.contains("sk-profile-secret"), "{printed}");
    assert!(
        printed.contains("TEST_CLAUDE_KEY"),
        "the variable's name is no secret"
    );
}

#[test]
fn misspelt_and_unusable_profiles_are_refused() {
    let (_, unknown) =
        load("[models.fast]\nprovider = \"openai\"\nmodle = \"x\"\n").expect("valid");
    assert_eq!(unknown, ["models.fast.modle"]);
    for (toml, message) in [
        (
            "[models.fast]\nmodel = \"x\"\n",
            "models.fast.provider is required",
        ),
        (
            "[models.fast]\nprovider = \"auto\"\n",
            "models.fast.provider cannot be `auto`",
        ),
        (
            "[models.default]\nprovider = \"openai\"\n",
            "`default` is the name of [llm] itself",
        ),
        (
            "[models.az]\nprovider = \"azure\"\n",
            "models.az.provider = \"azure\" needs models.az.base_url",
        ),
        (
            "[models.c]\nprovider = \"anthropic\"\nthinking_budget_tokens = 100\n",
            "models.c.thinking_budget_tokens must be 0",
        ),
        (
            "[agents.assistant]\nprofile = \"missing\"\n",
            "agents.assistant.profile `missing` is not a model profile (default)",
        ),
    ] {
        let error = load(toml).expect_err(toml).to_string();
        assert!(error.contains(message), "{toml}: {error}");
    }
}
