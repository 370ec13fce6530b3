//! The configuration examples that ship under `config/examples/` load, build, and serve a run:
//! an example that no longer parses would fail here, not in a user's hands.

use agui_host::settings::{LlmProvider, Settings};
use agui_host::App;
use serde_json::json;

use crate::verify::assert_well_formed;

#[tokio::test]
async fn every_shipped_example_starts_and_answers_a_run_with_the_offline_model() {
    let mut paths: Vec<_> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/config/examples"))
            .expect("config/examples exists")
            .map(|entry| entry.unwrap().path())
            .filter(|path| path.extension().is_some_and(|e| e == "toml"))
            .collect();
    paths.sort();
    assert!(
        paths.len() >= 3,
        "the recipe, ingredients and status examples ship: {paths:?}"
    );
    for path in paths {
        let mut settings =
            Settings::load(Some(&path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        settings.llm.provider = LlmProvider::Offline;
        settings.server.port = 0;
        // MCP servers start processes fetched from npm: `mcp::the_mcp_example_pins_the_tested_
        // reference_server` checks the MCP example, and the MCP tests run those servers.
        for agent in settings.agents.values_mut() {
            agent.mcp_servers.clear();
        }
        let agent = settings.default_agent.clone();
        let app = App::build(settings)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let address = app.local_addr();
        tokio::spawn(app.run_until(std::future::pending()));
        let body = json!({
            "threadId": "t", "runId": "r", "protocolVersion": "1.0", "state": {},
            "messages": [{"id": "u", "role": "user", "content": "Hello"}]
        });
        let response = reqwest::Client::new()
            .post(format!("http://{address}/{agent}"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{}", path.display());
        let text = response.text().await.unwrap();
        let events = crate::helpers::parse_sse(&text);
        assert_well_formed(&events);
        assert_eq!(
            events.last().unwrap()["type"],
            "RUN_FINISHED",
            "{}",
            path.display()
        );
    }
}
