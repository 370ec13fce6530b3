//! Exactly once whatever the history says: with a thread store the server keeps a ledger of
//! the decisions it acted on, apart from the thread's record, so neither a truncated history,
//! a `DELETE` of the thread nor a replayed answer runs an approved call a second time. Counted
//! at the tool service, with the `memory` store and with a real `redis-server`.
//!
//! Also what an approval id and an `Idempotency-Key` are bound to: the caller's scope, so one
//! user's id or key never stands for another's on the same client-chosen thread id.

use agui_host::settings::{ApprovalPolicySetting, Settings, ThreadStoreKind};
use serde_json::{json, Value};

use super::*;
use crate::redis_server::RedisServer;

const TOKEN_A: &str = "ledger-token-of-user-a";
const TOKEN_B: &str = "ledger-token-of-user-b";
/// The `Authorization` header of each of the two users.
const USER_A: [(&str, &str); 1] = [("authorization", "Bearer ledger-token-of-user-a")];
const USER_B: [(&str, &str); 1] = [("authorization", "Bearer ledger-token-of-user-b")];
const SHARED_KEY: &str = "an-approval-key-both-replicas-share-of-40-chars";

/// Where the thread (and the ledger) live.
fn on_store(settings: &mut Settings, redis: Option<&RedisServer>) {
    match redis {
        Some(server) => {
            settings.threads.store = ThreadStoreKind::Redis;
            settings.threads.redis_url = server.url();
        }
        None => settings.threads.store = ThreadStoreKind::Memory,
    }
}

/// A run posted with `headers` (e.g. a bearer token); its events.
async fn run_with(app: &TestApp, headers: &[(&str, &str)], body: &Value) -> Vec<Value> {
    let response = crate::threads::run_as(app, headers, body).await;
    let status = response.status();
    let text = response.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    parse_sse(&text)
}

fn with_run_id(mut body: Value, run_id: &str) -> Value {
    body["runId"] = json!(run_id);
    body
}

/// Approve, truncate the history, delete the thread, replay the same answer twice: one
/// execution. Then the thread goes on.
async fn an_approved_call_runs_once_over_truncation_delete_and_replays(redis: Option<RedisServer>) {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| {
        with_tools(settings, tools);
        on_store(settings, redis.as_ref());
    })
    .await;
    let (events, history) = interrupted_transfer(&app, &service).await;
    let id = interrupt_id(&events, "call_1");
    let approve = resume_input(
        history.clone(),
        json!([resolved(&id, json!({"approved": true}))]),
    );
    app.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
    assert_success(&app.run_events("/", &approve).await);
    assert_eq!(service.calls_of("transfer_money").len(), 1);

    // A cheap run whose history holds only an activity message: the record keeps no result.
    let activity = json!({"id": "act-1", "role": "activity", "activityType": "progress",
        "content": {"percent": 100}});
    let truncated = with_run_id(input(vec![activity]), "r-truncate");
    assert_well_formed(&app.run_events("/", &truncated).await);

    // And the thread itself goes.
    assert_eq!(app.delete_thread("t1", None).await, 204);

    // The same answer, twice, with the call still unanswered in the history.
    let mut kept = history.clone();
    for run in ["r-replay-1", "r-replay-2"] {
        app.fake
            .push(Reply::Sse(chunks::text_reply(&["Nothing more to do."])));
        let events = app
            .run_events("/", &with_run_id(approve.clone(), run))
            .await;
        assert_well_formed(&events);
        assert_success(&events);
        assert_eq!(
            service.calls_of("transfer_money").len(),
            1,
            "a replayed approval ran the tool again ({run}): {:?}",
            types(&events)
        );
        if run == "r-replay-1" {
            // The call is answered, so the history stays well-formed: the result says the
            // decision was acted on before, and the model goes on from there. (The second
            // replay finds that result in the thread's record and answers nothing anew.)
            let answer = result_for(&events, "call_1");
            assert!(answer.contains("already"), "{answer}");
        }
        kept = client_history(&kept, &events);
    }
    assert_provider_saw_clean_histories(&app);

    // What happens next: an honest run on the same thread works.
    kept.push(user("Thanks. Anything else?"));
    app.fake.push(Reply::Sse(chunks::text_reply(&["No."])));
    let events = app
        .run_events("/", &with_run_id(input(kept), "r-next"))
        .await;
    assert_success(&events);
    assert_eq!(the_text(&events), "No.");
    assert_eq!(service.calls_of("transfer_money").len(), 1);
}

#[tokio::test]
async fn memory_an_approved_call_runs_once_over_truncation_delete_and_replays() {
    an_approved_call_runs_once_over_truncation_delete_and_replays(None).await;
}

#[tokio::test]
async fn redis_an_approved_call_runs_once_over_truncation_delete_and_replays() {
    let redis = RedisServer::start().await;
    an_approved_call_runs_once_over_truncation_delete_and_replays(Some(redis)).await;
}

/// The ledger lives apart from the thread: on Redis, deleting the thread key leaves the
/// decision's key, so a replay on a second replica runs nothing either.
#[tokio::test]
async fn redis_a_replay_on_another_replica_after_delete_runs_nothing() {
    let redis = RedisServer::start().await;
    let service = ToolService::start().await;
    let app = |tools| {
        spawn_app(|settings| {
            with_tools(settings, tools);
            on_store(settings, Some(&redis));
            // Replicas share their approval keys (without, each signs with a key of its own).
            settings.security.approval_keys = vec![SHARED_KEY.into()];
        })
    };
    let a = app(vec![transfer_tool(&service, false)]).await;
    let b = app(vec![transfer_tool(&service, false)]).await;
    let (events, history) = interrupted_transfer(&a, &service).await;
    let id = interrupt_id(&events, "call_1");
    let approve = resume_input(history, json!([resolved(&id, json!({"approved": true}))]));
    a.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
    assert_success(&a.run_events("/", &approve).await);
    assert_eq!(b.delete_thread("t1", None).await, 204);
    b.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));
    assert_success(&b.run_events("/", &with_run_id(approve, "r3")).await);
    assert_eq!(service.calls_of("transfer_money").len(), 1);
}

/// On Postgres the ledger is a table: a server restarted on the same database (a new app, its
/// approval key shared with the old one) still knows the decision ran, so the same answer
/// replayed after the restart runs nothing; and the thread is still there.
#[tokio::test]
async fn postgres_a_restart_keeps_the_ledger_and_a_replay_runs_nothing() {
    let database = crate::threads::Backend::postgres().await;
    let service = ToolService::start().await;
    let configure = |settings: &mut Settings, tools| {
        with_tools(settings, tools);
        database.configure(settings);
        settings.security.approval_keys = vec![SHARED_KEY.into()];
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (before, server) = spawn_app_until(
        |settings| configure(settings, vec![transfer_tool(&service, false)]),
        async move {
            let _ = stopped.await;
        },
    )
    .await;
    let (events, history) = interrupted_transfer(&before, &service).await;
    let id = interrupt_id(&events, "call_1");
    let approve = resume_input(history, json!([resolved(&id, json!({"approved": true}))]));
    before.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
    assert_success(&before.run_events("/", &approve).await);
    assert_eq!(service.calls_of("transfer_money").len(), 1);
    stop.send(()).unwrap();
    server.await.unwrap().unwrap();

    let after =
        spawn_app(|settings| configure(settings, vec![transfer_tool(&service, false)])).await;
    let thread = after.get("/assistant/threads/t1").await;
    assert_eq!(thread.status(), 200, "the thread outlived the restart");
    after
        .fake
        .push(Reply::Sse(chunks::text_reply(&["Nothing more to do."])));
    let events = after
        .run_events("/", &with_run_id(approve, "r-after-restart"))
        .await;
    assert_success(&events);
    assert_eq!(
        service.calls_of("transfer_money").len(),
        1,
        "a replay after the restart ran the tool again: {:?}",
        types(&events)
    );
}

/// An approval id minted for one scope (token A) is refused for another (token B) on the same
/// thread id, with or without a thread store; A's own answer still runs the call once.
#[tokio::test]
async fn an_approval_id_of_one_scope_is_refused_for_another_on_the_same_thread() {
    for store in [ThreadStoreKind::Memory, ThreadStoreKind::Off] {
        let service = ToolService::start().await;
        let tools = vec![transfer_tool(&service, false)];
        let app = spawn_app(|settings| {
            with_tools(settings, tools);
            settings.threads.store = store;
            settings.server.auth.tokens = vec![TOKEN_A.into(), TOKEN_B.into()];
        })
        .await;
        let (a, b) = (USER_A, USER_B);
        app.fake.push(Reply::Sse(chunks::tool_calls(
            &[("call_1", "transfer_money", TRANSFER_ARGS)],
            false,
        )));
        let question = user("Send 250 to Bob.");
        let events = run_with(&app, &a, &input(vec![question.clone()])).await;
        let id = interrupt_id(&events, "call_1");
        let history = client_history(&[question], &events);
        let approve = resume_input(history, json!([resolved(&id, json!({"approved": true}))]));

        let events = run_with(&app, &b, &approve).await;
        assert_refused(&events, "interrupt_unknown");
        assert_eq!(service.total(), 0, "{store:?}: B's resume ran A's call");

        app.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
        let events = run_with(&app, &a, &with_run_id(approve, "r3")).await;
        assert_success(&events);
        assert_eq!(service.calls_of("transfer_money").len(), 1, "{store:?}");
    }
}

/// An `http` tool that needs no approval, posting to `service`.
fn lookup_tool(service: &ToolService) -> ToolSettings {
    http_tool(
        service,
        "lookup",
        json!({"type": "object", "properties": {}}),
        ApprovalPolicySetting::Unset,
        false,
    )
}

/// One run on `thread_id` whose model calls `lookup` with `call_id`; the headers the tool
/// service got: `[Idempotency-Key, X-Tool-Call-Id]`.
async fn lookup_key(
    app: &TestApp,
    service: &ToolService,
    headers: &[(&str, &str)],
    thread_id: &str,
    call_id: &str,
) -> [String; 2] {
    app.fake
        .push_call_then_text((call_id, "lookup", "{}"), "Looked up.");
    let mut body = input(vec![user("Look it up.")]);
    body["threadId"] = json!(thread_id);
    body["runId"] = json!(format!("r-{}", service.total()));
    assert_success(&run_with(app, headers, &body).await);
    service
        .call_ids_of("lookup")
        .pop()
        .expect("the tool service got the call")
}

#[tokio::test]
async fn the_idempotency_key_tells_scopes_and_ids_apart_unambiguously() {
    let service = ToolService::start().await;
    let tools = vec![lookup_tool(&service)];
    let app = spawn_app(|settings| {
        with_tools(settings, tools);
        settings.threads.store = ThreadStoreKind::Off;
        settings.server.auth.tokens = vec![TOKEN_A.into(), TOKEN_B.into()];
    })
    .await;
    let (a, b) = (USER_A, USER_B);

    // Two users on the same client-chosen thread id, whose model reuses a call id.
    let key_a = lookup_key(&app, &service, &a, "t1", "call_1").await;
    let key_b = lookup_key(&app, &service, &b, "t1", "call_1").await;
    assert_ne!(key_a[0], key_b[0], "two scopes share an Idempotency-Key");
    assert_eq!(key_a[1], "call_1", "X-Tool-Call-Id names the call");
    assert_eq!(key_b[1], "call_1");
    assert!(
        key_a[0].len() == 64 && key_a[0].bytes().all(|b| b.is_ascii_hexdigit()),
        "a fixed-length digest: {}",
        key_a[0]
    );
    // The same scope, thread and call: the same key (a retry is recognised).
    let again = lookup_key(&app, &service, &a, "t1", "call_1").await;
    assert_eq!(again[0], key_a[0]);

    // No separator to move: `a:b` + `c` is not `a` + `b:c`.
    let left = lookup_key(&app, &service, &a, "a:b", "c").await;
    let right = lookup_key(&app, &service, &a, "a", "b:c").await;
    assert_ne!(left[0], right[0]);
}

/// The ledger fails closed: a decision that cannot be recorded is not acted on, and the run
/// says why. On Redis, the ledger's keys are made unwritable (an ACL) while everything else
/// works; once they are writable again the same answer runs the call, once.
#[tokio::test]
async fn redis_a_decision_the_ledger_cannot_record_is_not_acted_on() {
    let redis = RedisServer::start().await;
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| {
        with_tools(settings, tools);
        on_store(settings, Some(&redis));
    })
    .await;
    let (events, history) = interrupted_transfer(&app, &service).await;
    let id = interrupt_id(&events, "call_1");
    let approve = resume_input(history, json!([resolved(&id, json!({"approved": true}))]));

    let denied = redis
        .command("ACL SETUSER default resetkeys ~agui:thread:* ~agui:lease:* ~agui:run*")
        .await;
    assert_eq!(denied, "+OK");
    let events = app.run_events("/", &approve).await;
    assert_refused(&events, "thread_store_unavailable");
    assert_eq!(service.total(), 0, "nothing runs unrecorded");

    assert_eq!(redis.command("ACL SETUSER default allkeys").await, "+OK");
    app.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
    assert_success(
        &app.run_events("/", &with_run_id(approve.clone(), "r3"))
            .await,
    );
    app.fake.push(Reply::Sse(chunks::text_reply(&["Done."])));
    assert_success(&app.run_events("/", &with_run_id(approve, "r4")).await);
    assert_eq!(service.calls_of("transfer_money").len(), 1);
}

/// The memory ledger is bounded and, when full, refuses to act on another decision rather
/// than forget one it holds.
#[tokio::test]
async fn memory_a_full_ledger_refuses_new_decisions_and_forgets_none() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| {
        with_tools(settings, tools);
        on_store(settings, None);
        settings.threads.max_decisions = 1;
    })
    .await;
    let mut approvals = Vec::new();
    for thread in ["t-one", "t-two"] {
        app.fake.push(Reply::Sse(chunks::tool_calls(
            &[("call_1", "transfer_money", TRANSFER_ARGS)],
            false,
        )));
        let question = user("Send 250 to Bob.");
        let mut body = input(vec![question.clone()]);
        body["threadId"] = json!(thread);
        body["runId"] = json!(format!("{thread}-ask"));
        let events = app.run_events("/", &body).await;
        let id = interrupt_id(&events, "call_1");
        let mut approve = resume_input(
            client_history(&[question], &events),
            json!([resolved(&id, json!({"approved": true}))]),
        );
        approve["threadId"] = json!(thread);
        approvals.push(approve);
    }
    app.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
    let first = with_run_id(approvals[0].clone(), "t-one-approve");
    assert_success(&app.run_events("/", &first).await);
    let second = with_run_id(approvals[1].clone(), "t-two-approve");
    assert_refused(&app.run_events("/", &second).await, "decision_ledger_full");
    assert_eq!(service.calls_of("transfer_money").len(), 1);
    // The entry it holds still counts.
    assert_eq!(app.delete_thread("t-one", None).await, 204);
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Nothing to do."])));
    let replay = with_run_id(approvals[0].clone(), "t-one-replay");
    assert_success(&app.run_events("/", &replay).await);
    assert_eq!(service.calls_of("transfer_money").len(), 1);
}

/// A decline claims nothing (a person may still approve a call they declined), but a decline
/// of a call whose approval already ran is not reported as declined: the model is told the
/// call was decided on before.
#[tokio::test]
async fn a_decline_never_undoes_or_denies_an_approval_that_ran() {
    let service = ToolService::start().await;
    let tools = vec![transfer_tool(&service, false)];
    let app = spawn_app(|settings| with_tools(settings, tools)).await;
    let (events, history) = interrupted_transfer(&app, &service).await;
    let id = interrupt_id(&events, "call_1");
    let answer = |approved: bool, run: &str| {
        with_run_id(
            resume_input(
                history.clone(),
                json!([resolved(&id, json!({"approved": approved}))]),
            ),
            run,
        )
    };

    // Declined, then approved after all: the tool runs once.
    app.fake
        .push(Reply::Sse(chunks::text_reply(&["Not sent."])));
    let declined = app.run_events("/", &answer(false, "r-decline")).await;
    assert_eq!(result_for(&declined, "call_1"), REJECTED);
    app.fake.push(Reply::Sse(chunks::text_reply(&["Sent."])));
    assert_success(&app.run_events("/", &answer(true, "r-approve")).await);
    assert_eq!(service.calls_of("transfer_money").len(), 1);

    // The thread forgotten, then a decline: nothing runs, and it is not called a decline.
    assert_eq!(app.delete_thread("t1", None).await, 204);
    app.fake.push(Reply::Sse(chunks::text_reply(&["Noted."])));
    let late = app.run_events("/", &answer(false, "r-late-decline")).await;
    assert_success(&late);
    let result = result_for(&late, "call_1");
    assert_ne!(result, REJECTED);
    assert!(result.contains("already"), "{result}");
    assert_eq!(service.calls_of("transfer_money").len(), 1);
}
