//! The thread list and thread edits (issue 29), one body of assertions over every store
//! (`for_each_store!`): `GET /<agent>/threads` newest first and cursor paged, per scope;
//! `PATCH /<agent>/threads/<id>` renaming and archiving; `DELETE` taking a thread off the list;
//! and the refusals of each route.

use serde_json::{json, Value};

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::threads::Backend;
use crate::verify::assert_well_formed;

const ALICE: (&str, &str) = ("x-user-id", "alice");
const BOB: (&str, &str) = ("x-user-id", "bob");

/// An app whose scope is the proxy's `X-User-Id`, so each test has two callers.
async fn app_of(backend: &Backend) -> TestApp {
    backend
        .app(|settings| settings.threads.scope_header = "X-User-Id".into())
        .await
}

/// One finished run as `who` on `thread`, asking `question`.
async fn converse(app: &TestApp, who: (&str, &str), thread: &str, question: &str) {
    app.fake.push(Reply::Sse(chunks::text_reply(&["Noted."])));
    let mut body = input(vec![user(question)]);
    body["threadId"] = json!(thread);
    body["runId"] = json!(format!("run-{thread}-{}", uuid::Uuid::new_v4().simple()));
    let response = app
        .client
        .post(format!("{}/", app.address))
        .header("content-type", "application/json")
        .header(who.0, who.1)
        .json(&body)
        .send()
        .await
        .expect("the app answers");
    assert_eq!(response.status(), 200);
    assert_well_formed(&parse_sse(&response.text().await.unwrap()));
    // Each save in a millisecond of its own, so the order the test expects is by time alone.
    tokio::time::sleep(std::time::Duration::from_millis(3)).await;
}

/// `GET /assistant/threads?<query>` as `who`: the status and the body.
async fn list(app: &TestApp, who: (&str, &str), query: &str) -> (u16, Value) {
    let response = app
        .client
        .get(format!("{}/assistant/threads?{query}", app.address))
        .header(who.0, who.1)
        .send()
        .await
        .expect("the app answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

/// Every page of the list, following `nextCursor`: the thread ids in order.
async fn all_pages(app: &TestApp, who: (&str, &str), query: &str) -> (Vec<String>, usize) {
    let (mut ids, mut pages, mut cursor) = (Vec::new(), 0, None::<String>);
    loop {
        let query = match &cursor {
            Some(cursor) => format!("{query}&cursor={cursor}"),
            None => query.to_owned(),
        };
        let (status, body) = list(app, who, &query).await;
        assert_eq!(status, 200, "{body}");
        pages += 1;
        ids.extend(ids_of(&body));
        match body.get("nextCursor") {
            Some(next) => cursor = Some(next.as_str().expect("a string cursor").to_owned()),
            None => return (ids, pages),
        }
        assert!(pages < 50, "the pages never end");
    }
}

fn ids_of(body: &Value) -> Vec<String> {
    body["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .map(|thread| thread["threadId"].as_str().unwrap().to_owned())
        .collect()
}

async fn patch(app: &TestApp, who: (&str, &str), thread: &str, body: &str) -> (u16, Value) {
    let response = app
        .client
        .patch(format!("{}/assistant/threads/{thread}", app.address))
        .header(who.0, who.1)
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("the app answers");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

async fn the_list_pages_newest_first_and_each_entry_says_what_it_is(backend: Backend) {
    let app = app_of(&backend).await;
    for i in 1..=5 {
        converse(
            &app,
            ALICE,
            &format!("t{i}"),
            &format!("  Question number {i}  "),
        )
        .await;
    }
    let (status, first) = list(&app, ALICE, "limit=2").await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(ids_of(&first), ["t5", "t4"]);
    let entry = &first["threads"][0];
    assert_eq!(entry["title"], "Question number 5", "trimmed: {entry}");
    assert!(
        entry["lastRunId"].as_str().unwrap().starts_with("run-t5-"),
        "{entry}"
    );
    assert_eq!(entry["status"], "idle");
    assert_eq!(entry["archived"], false);
    assert_eq!(entry["messageCount"], 2, "the question and the answer");
    assert!(entry["createdAt"].as_i64().unwrap() <= entry["updatedAt"].as_i64().unwrap());

    let (ids, pages) = all_pages(&app, ALICE, "limit=2").await;
    assert_eq!(ids, ["t5", "t4", "t3", "t2", "t1"]);
    assert_eq!(pages, 3, "the last page says so by having no cursor");
    let (_, whole) = list(&app, ALICE, "").await;
    assert_eq!(ids_of(&whole).len(), 5);
    assert!(
        whole.get("nextCursor").is_none(),
        "omitted, never null: {whole}"
    );

    // A thread that runs again moves to the front.
    converse(&app, ALICE, "t2", "Back again").await;
    let (ids, _) = all_pages(&app, ALICE, "limit=3").await;
    assert_eq!(ids, ["t2", "t5", "t4", "t3", "t1"]);
}

async fn the_list_is_the_callers_own(backend: Backend) {
    let app = app_of(&backend).await;
    converse(&app, ALICE, "mine", "Alice's secret").await;
    converse(&app, BOB, "his", "Bob's question").await;
    assert_eq!(all_pages(&app, ALICE, "limit=10").await.0, ["mine"]);
    assert_eq!(all_pages(&app, BOB, "limit=10").await.0, ["his"]);
    // Another scope's thread is as missing to an edit as to a read.
    let (status, body) = patch(&app, BOB, "mine", r#"{"title": "Stolen"}"#).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "thread_not_found");
    let (_, alices) = list(&app, ALICE, "").await;
    assert_eq!(alices["threads"][0]["title"], "Alice's secret");
    // A request without the scope header holds no threads.
    let response = app
        .get("/assistant/threads")
        .await
        .json::<Value>()
        .await
        .unwrap();
    assert_eq!(response, json!({"threads": []}));
}

async fn a_rename_and_an_archive_show_in_the_list(backend: Backend) {
    let app = app_of(&backend).await;
    converse(&app, ALICE, "old", "The first question").await;
    converse(&app, ALICE, "new", "The second question").await;

    let (status, renamed) = patch(&app, ALICE, "old", r#"{"title": "  Taxes 2026 "}"#).await;
    assert_eq!(status, 200, "{renamed}");
    assert_eq!(renamed["title"], "Taxes 2026");
    assert_eq!(renamed["threadId"], "old");
    let (_, page) = list(&app, ALICE, "").await;
    assert_eq!(
        ids_of(&page),
        ["new", "old"],
        "a rename does not move a thread up"
    );
    assert_eq!(page["threads"][1]["title"], "Taxes 2026");

    // The title survives the thread's next run; `null` derives it again.
    converse(&app, ALICE, "old", "A follow-up").await;
    let (_, page) = list(&app, ALICE, "").await;
    assert_eq!(page["threads"][0]["title"], "Taxes 2026", "{page}");
    let (status, _) = patch(&app, ALICE, "old", r#"{"title": null}"#).await;
    assert_eq!(status, 200);
    let (_, page) = list(&app, ALICE, "").await;
    assert_eq!(page["threads"][0]["title"], "A follow-up", "{page}");

    let (status, archived) = patch(&app, ALICE, "old", r#"{"archived": true}"#).await;
    assert_eq!((status, &archived["archived"]), (200, &json!(true)));
    assert_eq!(
        all_pages(&app, ALICE, "").await.0,
        ["new"],
        "hidden by default"
    );
    assert_eq!(all_pages(&app, ALICE, "archived=true").await.0, ["old"]);
    assert_eq!(
        all_pages(&app, ALICE, "archived=all&limit=1").await.0,
        ["old", "new"]
    );
    // An archived thread still reads, and comes back when unarchived.
    let response = app
        .client
        .get(format!("{}/assistant/threads/old", app.address))
        .header(ALICE.0, ALICE.1)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    patch(&app, ALICE, "old", r#"{"archived": false}"#).await;
    assert_eq!(all_pages(&app, ALICE, "").await.0, ["old", "new"]);
}

async fn a_deleted_thread_leaves_the_list(backend: Backend) {
    let app = app_of(&backend).await;
    for thread in ["a", "b", "c"] {
        converse(&app, ALICE, thread, "Hello").await;
    }
    let response = app
        .client
        .delete(format!("{}/assistant/threads/b", app.address))
        .header(ALICE.0, ALICE.1)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 204);
    assert_eq!(all_pages(&app, ALICE, "limit=1").await.0, ["c", "a"]);
}

async fn bad_list_queries_and_edits_are_refused_with_a_code(backend: Backend) {
    let app = app_of(&backend).await;
    converse(&app, ALICE, "t", "Hello").await;
    for (query, code) in [
        ("limit=0", "invalid_query"),
        ("limit=101", "invalid_query"),
        ("limit=ten", "invalid_query"),
        ("archived=maybe", "invalid_query"),
        ("cursor=not-a-cursor", "invalid_cursor"),
    ] {
        let (status, body) = list(&app, ALICE, query).await;
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (400, Some(code)),
            "{query}"
        );
    }
    let long = format!(r#"{{"title": "{}"}}"#, "x".repeat(201));
    for (body, status, code) in [
        (r#"{"title": "ok", "pinned": true}"#, 422, "invalid_request"),
        (r#"{"archived": "yes"}"#, 422, "invalid_request"),
        ("{}", 422, "invalid_request"),
        ("{not json", 400, "invalid_json"),
        (long.as_str(), 422, "title_too_long"),
    ] {
        let (got, answer) = patch(&app, ALICE, "t", body).await;
        assert_eq!(
            (got, answer["error"]["code"].as_str()),
            (status, Some(code)),
            "{body}"
        );
    }
    let (status, body) = patch(&app, ALICE, "missing", r#"{"archived": true}"#).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("thread_not_found"))
    );
}

async fn a_streaming_thread_is_running_and_an_edit_waits_for_it(backend: Backend) {
    let app = app_of(&backend).await;
    converse(&app, ALICE, "t1", "Hello").await;
    app.fake.push(Reply::SlowSse(
        chunks::text_reply(&["one ", "two ", "three"]),
        std::time::Duration::from_millis(300),
    ));
    let mut body = input(vec![user("Hello"), assistant("Noted."), user("Count")]);
    body["threadId"] = json!("t1");
    body["runId"] = json!("slow-run");
    let response = app
        .client
        .post(format!("{}/", app.address))
        .header("content-type", "application/json")
        .header(ALICE.0, ALICE.1)
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut run = EventReader::new(response);
    assert_eq!(run.next().await.unwrap()["type"], "RUN_STARTED");
    let (_, page) = list(&app, ALICE, "").await;
    assert_eq!(page["threads"][0]["status"], "running", "{page}");
    let (status, refused) = patch(&app, ALICE, "t1", r#"{"title": "Mid-run"}"#).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (409, Some("thread_busy"))
    );
    while run.next().await.is_some() {}
    let (_, page) = list(&app, ALICE, "").await;
    assert_eq!(page["threads"][0]["status"], "idle", "{page}");
    assert_eq!(page["threads"][0]["messageCount"], 4, "{page}");
    let (status, _) = patch(&app, ALICE, "t1", r#"{"title": "After the run"}"#).await;
    assert_eq!(status, 200);
}

for_each_store!(
    a_streaming_thread_is_running_and_an_edit_waits_for_it,
    the_list_pages_newest_first_and_each_entry_says_what_it_is,
    the_list_is_the_callers_own,
    a_rename_and_an_archive_show_in_the_list,
    a_deleted_thread_leaves_the_list,
    bad_list_queries_and_edits_are_refused_with_a_code,
);

/// Redis bounds one list call's work: past a long run of threads the filter skips (here more
/// archived threads than one call looks at), a page comes back short but with a cursor, and
/// following it finds the rest.
#[tokio::test]
async fn redis_a_page_past_many_skipped_threads_comes_short_with_a_cursor() {
    use agui_host::threads::{
        ArchivedFilter, ListQuery, ScopeQuota, ThreadBackends, ThreadKey, ThreadRecord,
    };
    let server = crate::redis_server::RedisServer::start().await;
    let connection =
        agui_host::threads::redis::connect(&server.url(), std::time::Duration::from_secs(5))
            .await
            .unwrap();
    let day = std::time::Duration::from_secs(86_400);
    let backends = ThreadBackends::redis(&connection, (day, day), 0, ScopeQuota::default());
    let save = |thread: usize, archived: bool| {
        let key = ThreadKey {
            scope: "s".into(),
            agent: "assistant".into(),
            thread_id: format!("t{thread:05}"),
        };
        let record = ThreadRecord {
            agent: "assistant".into(),
            messages: Vec::new(),
            state: None,
            interrupts: Vec::new(),
            server_results: Default::default(),
            last_run_id: "r".into(),
            created_at: 1,
            // The archived ones are the newest, so every page starts among them.
            updated_at: i64::try_from(thread).unwrap(),
            title: None,
            archived,
            lineage: Default::default(),
        };
        let backends = &backends;
        async move {
            let lease = backends.leases.acquire(&key, false).await.unwrap();
            backends.store.save(&lease, &record).await.unwrap();
            lease.release().await;
        }
    };
    for thread in 0..3 {
        save(thread, false).await;
    }
    for thread in 3..1_203 {
        save(thread, true).await;
    }
    let (mut found, mut calls, mut after) = (Vec::new(), 0, None);
    loop {
        let query = ListQuery {
            scope: "s".into(),
            agent: "assistant".into(),
            archived: ArchivedFilter::Active,
            limit: 20,
            after: after.take(),
        };
        let page = backends.store.list(&query).await.unwrap();
        calls += 1;
        found.extend(page.threads.into_iter().map(|summary| summary.thread_id));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
        assert!(calls < 10, "the pages never end");
    }
    assert_eq!(found, ["t00002", "t00001", "t00000"]);
    assert!(calls >= 2, "one call looked at every member: {calls}");
}
