//! Each scope's quota of threads, in both stores: one caller can neither fill the store nor (in
//! memory, whose bound evicts the least recently used thread) push another caller's threads
//! out. A run that would start a thread past the quota is refused before its stream with 403
//! `thread_quota_exceeded`, and deleting a thread makes room again.

use agui_host::settings::Settings;
use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::threads::Backend;
use crate::verify::assert_well_formed;

const NOISY: &str = "noisy-token-0123456789";
const QUIET: &str = "quiet-token-0123456789";

fn limited(settings: &mut Settings) {
    settings.server.auth.tokens = vec![NOISY.into(), QUIET.into()];
    settings.threads.max_threads = 8;
    settings.threads.max_threads_per_scope = 5;
}

async fn run_as(app: &TestApp, token: &str, thread_id: &str) -> reqwest::Response {
    let mut body = input(vec![user("Remember me.")]);
    body["threadId"] = json!(thread_id);
    body["runId"] = json!(format!("r-{thread_id}"));
    app.client
        .post(format!("{}/", app.address))
        .header("content-type", "application/json")
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("the app answers")
}

async fn ran(response: reqwest::Response) -> Vec<Value> {
    assert_eq!(response.status(), 200);
    let events = parse_sse(&response.text().await.unwrap());
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED", "{events:?}");
    events
}

async fn thread_status(app: &TestApp, token: &str, thread_id: &str) -> u16 {
    app.client
        .get(format!("{}/assistant/threads/{thread_id}", app.address))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

async fn a_scope_at_its_quota_is_refused_and_others_keep_their_threads(backend: Backend) {
    let app = backend.app(limited).await;
    app.fake.push(Reply::Sse(chunks::text_reply(&["Kept."])));
    ran(run_as(&app, QUIET, "quiet-1").await).await;
    for i in 0..5 {
        app.fake.push(Reply::Sse(chunks::text_reply(&["Ok."])));
        ran(run_as(&app, NOISY, &format!("noisy-{i}")).await).await;
    }
    // The sixth thread is refused before any model call; the fifty-fifth would be too.
    let calls = app.fake.requests().len();
    for i in 5..12 {
        let refused = run_as(&app, NOISY, &format!("noisy-{i}")).await;
        assert_eq!(refused.status(), 403);
        let error = error_body(refused).await;
        assert_eq!(error["error"]["code"], "thread_quota_exceeded", "{error}");
    }
    assert_eq!(
        app.fake.requests().len(),
        calls,
        "a refused run costs no model call"
    );
    assert_eq!(
        thread_status(&app, QUIET, "quiet-1").await,
        200,
        "not evicted"
    );

    // A thread the scope holds still runs.
    app.fake.push(Reply::Sse(chunks::text_reply(&["Again."])));
    ran(run_as(&app, NOISY, "noisy-0").await).await;
    // What happens next: a deleted thread gives its place back.
    assert_eq!(app.delete_thread("noisy-1", Some(NOISY)).await, 204);
    app.fake.push(Reply::Sse(chunks::text_reply(&["Room."])));
    ran(run_as(&app, NOISY, "noisy-5").await).await;
    assert_eq!(
        run_as(&app, NOISY, "noisy-6").await.status(),
        403,
        "and only that one place"
    );
    // The other scope has its own quota.
    for i in 2..6 {
        app.fake.push(Reply::Sse(chunks::text_reply(&["Ok."])));
        ran(run_as(&app, QUIET, &format!("quiet-{i}")).await).await;
    }
}

for_each_store!(
    a_scope_at_its_quota_is_refused_and_others_keep_their_threads,
    a_scope_past_its_bytes_runs_no_more_until_it_deletes,
);

async fn a_scope_past_its_bytes_runs_no_more_until_it_deletes(backend: Backend) {
    let app = backend
        .app(|s| {
            s.server.auth.tokens = vec![NOISY.into(), QUIET.into()];
            s.threads.max_bytes_per_scope = 2_000;
        })
        .await;
    let mut saved = 0;
    let refused = loop {
        assert!(saved < 40, "the byte quota never refused a run");
        app.fake.push(Reply::Sse(chunks::text_reply(&["Ok."])));
        let response = run_as(&app, NOISY, &format!("noisy-{saved}")).await;
        if response.status() == 403 {
            break response;
        }
        ran(response).await;
        saved += 1;
    };
    assert!(saved >= 2, "{saved} threads fit in 2000 bytes");
    assert_eq!(
        error_body(refused).await["error"]["code"],
        "thread_quota_exceeded"
    );
    assert_eq!(
        run_as(&app, NOISY, "noisy-0").await.status(),
        403,
        "old threads too"
    );
    app.fake.push(Reply::Sse(chunks::text_reply(&["Ok."])));
    ran(run_as(&app, QUIET, "quiet").await).await;
    for i in 0..saved {
        let thread_id = format!("noisy-{i}");
        assert_eq!(app.delete_thread(&thread_id, Some(NOISY)).await, 204);
    }
    app.fake.push(Reply::Sse(chunks::text_reply(&["Ok."])));
    ran(run_as(&app, NOISY, "noisy-again").await).await;
}

/// Without tokens or a scope header every caller is the one development scope: a quota would
/// only cap the whole server, so the store's own bounds hold instead.
#[tokio::test]
async fn the_shared_development_scope_has_no_quota_of_its_own() {
    let app = spawn_app(|s| {
        s.threads.max_threads_per_scope = 2;
        s.threads.max_threads = 100;
    })
    .await;
    for i in 0..4 {
        app.fake.push(Reply::Sse(chunks::text_reply(&["Ok."])));
        let mut body = input(vec![user("Hi")]);
        body["threadId"] = json!(format!("dev-{i}"));
        ran(app.post_run("/", &body).await).await;
    }
}
