//! The terminal client (`agui-host chat`, the binary itself) against the real app and the
//! fake upstream: a scripted person types lines on its stdin, and the transcript (its stdout)
//! and the upstream requests show what the client printed and what it sent back.

use std::process::{Output, Stdio};

use agui_host::settings::{
    ApprovalPolicySetting, FixedApproval, Settings, ToolKindSettings, ToolSettings,
};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;

/// What the person at the terminal types on `agui-host chat`'s command line.
#[derive(Debug, Default)]
pub(crate) struct ChatOptions {
    pub(crate) url: String,
    pub(crate) thread_id: Option<String>,
    pub(crate) client_tools: Vec<String>,
    pub(crate) headers: Vec<(String, String)>,
}

/// What the model is told when the person declines, as configured by these tests.
const DECLINED: &str = "The person said no (chat client test).";

fn options(app: &TestApp, client_tools: &[&str]) -> ChatOptions {
    ChatOptions {
        url: format!("{}/", app.address),
        thread_id: Some("t-chat".into()),
        client_tools: client_tools.iter().map(|t| t.to_string()).collect(),
        headers: vec![("X-Test".into(), "chat".into())],
    }
}

/// Runs `agui-host chat` with `options` as flags and `script` on its stdin (one input line per
/// line). Asynchronous, so the app in this test's runtime goes on serving it.
async fn run_chat(options: ChatOptions, script: &str) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agui-host"));
    command.arg("chat").arg(&options.url);
    if let Some(thread) = &options.thread_id {
        command.args(["--thread", thread]);
    }
    for tool in &options.client_tools {
        command.args(["--tool", tool]);
    }
    for (name, value) in &options.headers {
        command.arg("--header").arg(format!("{name}: {value}"));
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("agui-host chat starts");
    let mut stdin = child.stdin.take().expect("a piped stdin");
    stdin
        .write_all(script.as_bytes())
        .await
        .expect("the script is typed");
    drop(stdin); // the end of input, as Ctrl-D
    child.wait_with_output().await.expect("agui-host chat ends")
}

/// Runs a session on `script` and returns the transcript.
pub(crate) async fn chat(options: ChatOptions, script: &str) -> String {
    let output = run_chat(options, script).await;
    assert!(
        output.status.success(),
        "the session ends normally: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("the transcript is UTF-8")
}

fn default_agent(settings: &mut Settings) -> &mut agui_host::settings::AgentSettings {
    let name = settings.default_agent.clone();
    settings.agents.get_mut(&name).expect("the default agent")
}

/// The tool message answering `call_id` in an upstream (OpenAI-shaped) request.
#[track_caller]
fn upstream_tool_message(upstream_body: &Value, call_id: &str) -> String {
    let message = upstream_body["messages"]
        .as_array()
        .expect("upstream messages")
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == call_id)
        .unwrap_or_else(|| panic!("no tool message answers {call_id}: {upstream_body}"));
    content_text(message)
}

/// `at` comes before `then` in the transcript.
#[track_caller]
fn assert_order(transcript: &str, at: &str, then: &str) {
    let first = transcript
        .find(at)
        .unwrap_or_else(|| panic!("no {at:?} in:\n{transcript}"));
    let second = transcript
        .find(then)
        .unwrap_or_else(|| panic!("no {then:?} in:\n{transcript}"));
    assert!(first < second, "{at:?} before {then:?} in:\n{transcript}");
}

#[tokio::test]
async fn a_text_reply_is_printed_as_it_streams() {
    let app = spawn_app(|_| {}).await;
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Hel", "lo ", "there."])));

    let transcript = chat(options(&app, &[]), "Hi\n:quit\nnever sent\n").await;

    assert!(transcript.contains("Hello there.\n"), "{transcript}");
    assert!(!transcript.contains("[warning]"), "{transcript}");
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 1, ":quit ends the session");
    assert_eq!(
        content_text(bodies[0]["messages"].as_array().unwrap().last().unwrap()),
        "Hi"
    );
}

#[tokio::test]
async fn a_server_tool_shows_its_call_and_result_and_the_history_keeps_both() {
    let app = spawn_app(|_| {}).await;
    app.fake.push_call_then_text(
        ("call_w", "get_weather", r#"{"location":"Paris"}"#),
        "Sunny in Paris.",
    );
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["You're welcome."])));

    let transcript = chat(options(&app, &[]), "Weather in Paris?\n:messages\nThanks\n").await;

    assert!(
        transcript.contains("[tool] get_weather {\"location\":\"Paris\"}\n"),
        "{transcript}"
    );
    let weather = default_weather_result();
    let result_line = transcript
        .lines()
        .find(|l| l.starts_with("[result] "))
        .unwrap_or_else(|| panic!("no [result] line in:\n{transcript}"));
    let shown: Value = serde_json::from_str(&result_line["[result] ".len()..])
        .expect("the short result is shown whole");
    assert_eq!(shown, weather);
    assert_order(&transcript, "[tool] get_weather", "[result] ");
    assert_order(&transcript, "[result] ", "Sunny in Paris.");
    // `:messages` shows the history as the reference reducer files it.
    assert!(
        transcript.contains("\"toolCallId\": \"call_w\""),
        "{transcript}"
    );
    assert!(transcript.contains("\"role\": \"tool\""), "{transcript}");

    // The next run sends that history back: the call, its result, the answer, the new line.
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 3);
    assert_tool_calls_answered(&bodies[2]);
    assert_eq!(
        roles(&bodies[2]),
        ["system", "user", "assistant", "tool", "assistant", "user"]
    );
    assert_eq!(
        serde_json::from_str::<Value>(&upstream_tool_message(&bodies[2], "call_w")).unwrap(),
        weather
    );
}

#[tokio::test]
async fn the_state_command_prints_the_state_a_state_tool_set_and_the_next_run_sends_it() {
    let app = spawn_app(|settings| {
        default_agent(settings).tools.push(ToolSettings {
            name: "update_recipe".into(),
            description: "Update the recipe.".into(),
            parameters: Some(json!({
                "type": "object",
                "properties": {"recipe": {"type": "object"}},
                "required": ["recipe"],
            })),
            approval: Default::default(),
            allow_edit: false,
            approval_message: None,
            background: false,
            kind: ToolKindSettings::State {
                key: "recipe".into(),
                argument: "recipe".into(),
                confirmation: "Recipe updated.".into(),
                update: Default::default(),
            },
        });
    })
    .await;
    let args = json!({"recipe": {"title": "Pancakes", "servings": 3}}).to_string();
    app.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_r", "update_recipe", &args)],
        false,
    )));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Pancakes it is."])));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Flour, eggs, milk."])));

    let transcript = chat(
        options(&app, &[]),
        "Pancakes please\n:state\nWhat do I need?\n",
    )
    .await;

    assert!(
        transcript.contains("[state] add /recipe {\"servings\":3,\"title\":\"Pancakes\"}\n"),
        "{transcript}"
    );
    assert!(
        transcript.contains("[result] Recipe updated.\n"),
        "{transcript}"
    );
    // `:state` prints the state as pretty JSON; it parses back to what the tool wrote.
    let start = transcript.find("> {").expect("the state after the prompt") + 2;
    let end = start
        + transcript[start..]
            .find("\n}\n")
            .expect("the end of the state")
        + 2;
    let printed: Value = serde_json::from_str(&transcript[start..end]).expect("pretty JSON");
    assert_eq!(
        printed,
        json!({"recipe": {"title": "Pancakes", "servings": 3}})
    );
    // The next run carries the state: the server shows it to the model.
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 3);
    assert!(
        content_text(&bodies[2]["messages"][0]).contains("Pancakes"),
        "{}",
        bodies[2]
    );
}

fn approval_app_settings(settings: &mut Settings) {
    let mut cancel = static_tool("cancel_subscription", json!("Subscription cancelled."));
    cancel.approval = ApprovalPolicySetting::Fixed(FixedApproval::Always);
    let agent = default_agent(settings);
    agent.tools.push(cancel);
    agent.approval.rejected_message = DECLINED.into();
}

#[tokio::test]
async fn an_approval_asks_and_yes_resumes_and_shows_the_result() {
    let app = spawn_app(approval_app_settings).await;
    app.fake.push_call_then_text(
        (
            "call_x",
            "cancel_subscription",
            r#"{"subscription":"Netflix"}"#,
        ),
        "Netflix is cancelled.",
    );

    // "maybe" is not an answer: the question is asked again.
    let transcript = chat(
        options(&app, &[]),
        "cancel_subscription Netflix\nmaybe\ny\n",
    )
    .await;

    assert!(
        transcript.contains("[tool] cancel_subscription {\"subscription\":\"Netflix\"}\n"),
        "{transcript}"
    );
    assert!(transcript.contains("[interrupt] "), "{transcript}");
    assert_eq!(
        transcript.matches("approve? [y/n] ").count(),
        2,
        "{transcript}"
    );
    assert!(transcript.contains("please answer y or n"), "{transcript}");
    assert_order(
        &transcript,
        "[interrupt] ",
        "[result] Subscription cancelled.",
    );
    assert_order(
        &transcript,
        "[result] Subscription cancelled.",
        "Netflix is cancelled.",
    );
    assert!(!transcript.contains("[error"), "{transcript}");

    // The model was asked once before the approval, and once after, with the tool's result.
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2);
    assert_tool_calls_answered(&bodies[1]);
    assert_eq!(
        upstream_tool_message(&bodies[1], "call_x"),
        "Subscription cancelled."
    );
}

#[tokio::test]
async fn a_declined_approval_never_runs_the_tool() {
    let app = spawn_app(approval_app_settings).await;
    app.fake.push_call_then_text(
        (
            "call_x",
            "cancel_subscription",
            r#"{"subscription":"Netflix"}"#,
        ),
        "Alright, I left it.",
    );

    let transcript = chat(options(&app, &[]), "cancel_subscription Netflix\nn\n").await;

    assert!(transcript.contains("approve? [y/n] "), "{transcript}");
    assert!(
        !transcript.contains("[result] Subscription cancelled."),
        "{transcript}"
    );
    assert!(transcript.contains("Alright, I left it."), "{transcript}");
    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2);
    assert_eq!(upstream_tool_message(&bodies[1], "call_x"), DECLINED);
}

#[tokio::test]
async fn a_client_tool_asks_for_its_result_and_the_next_run_carries_it() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(chunks::text_then_tool_calls(
        &["Let me ask you."],
        &[("call_c", "pick_color", r#"{"question":"Which color?"}"#)],
        false,
    )));
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Blue it is."])));

    let transcript = chat(options(&app, &["pick_color"]), "Choose a color\nblue\n").await;

    assert_order(&transcript, "Let me ask you.", "[tool] pick_color");
    assert!(
        transcript.contains("[tool] pick_color {\"question\":\"Which color?\"}\n"),
        "{transcript}"
    );
    assert_order(&transcript, "[tool] pick_color", "result for pick_color? ");
    assert_order(&transcript, "result for pick_color? ", "Blue it is.");

    let bodies = app.upstream_bodies();
    assert_eq!(bodies.len(), 2);
    // The tool is declared to the model...
    assert!(
        tool_names(&bodies[0]).contains(&"pick_color"),
        "{}",
        bodies[0]
    );
    // ...and the typed answer goes back as its result, after the call.
    assert_tool_calls_answered(&bodies[1]);
    assert_eq!(upstream_tool_message(&bodies[1], "call_c"), "blue");
    assert_eq!(roles(&bodies[1]), ["system", "user", "assistant", "tool"]);
    assert_eq!(
        content_text(&bodies[1]["messages"][2]),
        "Let me ask you.",
        "the text and the call are one assistant message"
    );
}

#[tokio::test]
async fn an_http_error_is_printed_and_the_session_goes_on() {
    let app = spawn_app(|_| {}).await;
    let mut options = options(&app, &[]);
    options.url = format!("{}/no_such_agent", app.address);

    let transcript = chat(options, "hello\n:state\n").await;

    assert!(transcript.contains("[http 404 Not Found] "), "{transcript}");
    assert!(transcript.contains("\"unknown_agent\""), "{transcript}");
    assert!(
        transcript.contains("> {}\n"),
        "still there for :state: {transcript}"
    );
    assert!(app.upstream_bodies().is_empty());
}

#[tokio::test]
async fn an_unreachable_server_is_an_error() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let options = ChatOptions {
        url: format!("http://{address}/"),
        ..ChatOptions::default()
    };

    let output = run_chat(options, "hello\n").await;

    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!("cannot reach http://{address}/")),
        "{stderr}"
    );
}
