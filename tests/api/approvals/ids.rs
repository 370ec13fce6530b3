//! What an approval id binds and how it is spelled: the agent, the key (several keys verify,
//! the first signs), one canonical spelling.

use agui_host::settings::ThreadStoreKind;
use serde_json::json;

use super::*;

const OLD_KEY: &str = "the-old-approval-key-of-forty-characters";
const NEW_KEY: &str = "the-new-approval-key-of-forty-characters";

#[tokio::test]
async fn an_approval_granted_on_one_agent_does_not_resume_on_another() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| {
        with_tools(settings, tools);
        let twin = settings.agents[&settings.default_agent].clone();
        settings.agents.insert("twin".into(), twin);
    })
    .await;
    let (events, history) = interrupted_transfer(&app, &service).await;
    let id = interrupt_id(&events, "call_1");
    let resume = resume_input(history, json!([resolved(&id, json!({"approved": true}))]));

    let events = app.run_events("/twin", &resume).await;
    assert_refused(&events, "interrupt_unknown");
    assert_eq!(service.total(), 0, "the twin agent's tool never ran");

    app.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
    let events = app.run_events("/", &resume).await;
    assert_success(&events);
    assert_eq!(service.calls_of("transfer_money").len(), 1);
}

#[tokio::test]
async fn a_rotated_key_verifies_the_approvals_it_signed() {
    let service = ToolService::start().await;
    // An existing deployment: the single-key setting.
    let tools = vec![transfer_tool(&service, false)];
    let old = spawn_app(|settings| {
        with_tools(settings, tools);
        settings.security.approval_key = OLD_KEY.into();
    })
    .await;
    let (events, history) = interrupted_transfer(&old, &service).await;
    let id = interrupt_id(&events, "call_1");
    let resume = resume_input(history, json!([resolved(&id, json!({"approved": true}))]));

    // Rotated: a new signing key first, the old one still verifying (as documented, either in
    // the list or left in `approval_key`).
    for old_key_where in ["list", "single"] {
        let tools = vec![transfer_tool(&service, false)];
        let rotated = spawn_app(|settings| {
            with_tools(settings, tools);
            match old_key_where {
                "list" => settings.security.approval_keys = vec![NEW_KEY.into(), OLD_KEY.into()],
                _ => {
                    settings.security.approval_keys = vec![NEW_KEY.into()];
                    settings.security.approval_key = OLD_KEY.into();
                }
            }
        })
        .await;
        rotated
            .fake
            .push(Reply::Sse(chunks::text_reply(&["Sent."])));
        let events = rotated.run_events("/", &resume).await;
        assert_success(&events);
        assert_service_result(&result_for(&events, "call_1"), "transfer_money");
    }
    assert_eq!(
        service.calls_of("transfer_money").len(),
        2,
        "once per process asked"
    );

    // The old key dropped: its ids verify no more.
    let tools = vec![transfer_tool(&service, false)];
    let retired = spawn_app(|settings| {
        with_tools(settings, tools);
        settings.security.approval_keys = vec![NEW_KEY.into()];
    })
    .await;
    let events = retired.run_events("/", &resume).await;
    assert_refused(&events, "interrupt_unknown");

    // New ids are signed with the new key: a process holding only it verifies them.
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let signer = spawn_app(|settings| {
        with_tools(settings, tools);
        settings.security.approval_keys = vec![NEW_KEY.into(), OLD_KEY.into()];
    })
    .await;
    let (events, history) = interrupted_transfer(&signer, &service).await;
    let id = interrupt_id(&events, "call_1");
    let resume = resume_input(history, json!([resolved(&id, json!({"approved": true}))]));
    let tools = vec![transfer_tool(&service, false)];
    let new_only = spawn_app(|settings| {
        with_tools(settings, tools);
        settings.security.approval_keys = vec![NEW_KEY.into()];
    })
    .await;
    new_only
        .fake
        .push(Reply::Sse(chunks::text_reply(&["Sent."])));
    assert_success(&new_only.run_events("/", &resume).await);
    assert_eq!(service.calls_of("transfer_money").len(), 1);
}

#[tokio::test]
async fn an_id_in_any_other_spelling_is_refused() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| with_tools(settings, tools)).await;
    let (events, history) = interrupted_transfer(&app, &service).await;
    let id = interrupt_id(&events, "call_1");
    let alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let last_digit = id.chars().last().unwrap();
    // The same bytes with an unused trailing bit set (the id's length leaves 2 unused bits).
    let sloppy_tail = alphabet
        .chars()
        .nth(alphabet.find(last_digit).unwrap() | 1)
        .unwrap();
    let respellings = [
        format!("{id}="),
        format!("{}{sloppy_tail}", &id[..id.len() - 1]),
        format!(" {id}"),
        id.replacen("apr_", "APR_", 1),
    ];
    for other in respellings {
        assert_ne!(other, id);
        let body = resume_input(
            history.clone(),
            json!([resolved(&other, json!({"approved": true}))]),
        );
        let events = app.run_events("/", &body).await;
        assert_refused(&events, "interrupt_unknown");
        let message = last(&events)["message"].as_str().unwrap().to_owned();
        assert!(
            message.len() < 120,
            "error messages quote ids short: {message}"
        );
    }
    assert_eq!(service.total(), 0);
}

/// A 0.x thread keeps its old approvals (call, answer, result) in its history for ever: once
/// the key that signed them is dropped, the thread still goes on, since they act on nothing.
#[tokio::test]
async fn a_0x_thread_goes_on_after_the_key_of_its_old_approval_is_dropped() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    // Two processes with no store between them (a restart of the memory store would lose
    // the thread, and a lost thread may not carry server tool results): the history alone
    // decides, which is what the rule about retired keys is about.
    let old = spawn_app(|settings| {
        with_tools(settings, tools);
        settings.security.approval_keys = vec![OLD_KEY.into()];
        settings.threads.store = ThreadStoreKind::Off;
    })
    .await;
    old.fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "transfer_money", TRANSFER_ARGS)],
        false,
    )));
    let question = user("Send 250 to Bob.");
    let events = old.run_events("/", &input_0x(vec![question.clone()])).await;
    let approval_id = of_type(&events, "TOOL_CALL_START")[1]["toolCallId"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut history = client_history(&[question], &events);
    history.push(tool_result(&approval_id, r#"{"approved":true}"#));
    old.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
    let answered = old.run_events("/", &input_0x(history.clone())).await;
    assert_success_0x(&answered);
    let mut history = client_history(&history, &answered);
    assert_eq!(service.total(), 1);

    let tools = vec![transfer_tool(&service, false)];
    let rotated = spawn_app(|settings| {
        with_tools(settings, tools);
        settings.security.approval_keys = vec![NEW_KEY.into()];
        settings.threads.store = ThreadStoreKind::Off;
    })
    .await;
    history.push(user("thanks, now just say hello"));
    rotated
        .fake
        .push(Reply::Sse(chunks::text_reply(&["Hello."])));
    let events = rotated.run_events("/", &input_0x(history)).await;
    assert_success_0x(&events);
    assert_eq!(the_text(&events), "Hello.");
    assert!(of_type(&events, "TOOL_CALL_RESULT").is_empty());
    assert_eq!(service.total(), 1);
    assert_provider_saw_clean_histories(&rotated);
}

#[track_caller]
fn assert_success_0x(events: &[Value]) {
    assert_well_formed(events);
    assert_eq!(last(events)["type"], "RUN_FINISHED", "{:?}", types(events));
}
