//! Optional token authentication: 401 JSON before any stream without a valid token; the
//! probes never need one.

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

const TOKEN: &str = "s3cret-token-for-tests";

async fn spawn_with_auth(require_auth_for_metrics: bool) -> TestApp {
    spawn_app(|s| {
        s.server.auth.tokens = vec!["another-token".into(), TOKEN.into()];
        s.metrics.require_auth = require_auth_for_metrics;
    })
    .await
}

async fn post_with(app: &TestApp, header: Option<(&str, String)>) -> reqwest::Response {
    let mut request = app
        .client
        .post(format!("{}/", app.address))
        .json(&input(vec![user("hi")]));
    if let Some((name, value)) = header {
        request = request.header(name, value);
    }
    request.send().await.expect("the app answers")
}

#[tokio::test]
async fn a_run_without_a_token_is_a_401_json_before_any_stream() {
    let app = spawn_with_auth(true).await;

    let response = post_with(&app, None).await;

    assert_eq!(response.status(), 401);
    assert_eq!(response.headers()["www-authenticate"], "Bearer");
    let body = error_body(response).await;
    assert_eq!(body["error"]["code"], "missing_token");
    assert!(app.fake.requests().is_empty(), "nothing reached the model");
}

#[tokio::test]
async fn a_wrong_token_is_a_401_that_does_not_echo_it() {
    let app = spawn_with_auth(true).await;

    let response = post_with(&app, Some(("authorization", "Bearer s3cret-token".into()))).await;

    assert_eq!(response.status(), 401);
    let body = error_body(response).await;
    assert_eq!(body["error"]["code"], "invalid_token");
    assert!(!body.to_string().contains("s3cret"), "{body}");
    assert!(app.fake.requests().is_empty());
}

#[tokio::test]
async fn a_bearer_token_or_an_api_key_runs_the_agent() {
    let app = spawn_with_auth(true).await;
    for header in [
        ("authorization", format!("Bearer {TOKEN}")),
        ("x-api-key", TOKEN.to_string()),
    ] {
        app.fake.push(Reply::Sse(chunks::text_reply(&["Hi!"])));

        let response = post_with(&app, Some(header.clone())).await;

        assert_eq!(response.status(), 200, "{header:?}");
        let events = parse_sse(&response.text().await.unwrap());
        assert_well_formed(&events);
        assert_eq!(last(&events)["type"], "RUN_FINISHED");
    }
    assert_eq!(app.fake.requests().len(), 2);
}

#[tokio::test]
async fn health_and_ready_need_no_token_and_metrics_does_by_default() {
    let app = spawn_with_auth(true).await;
    for path in ["/health", "/ready"] {
        let response = app.get(path).await;
        assert_eq!(response.status(), 200, "{path}");
    }
    let metrics = app.get("/metrics").await;
    assert_eq!(metrics.status(), 401);
    let metrics = app
        .client
        .get(format!("{}/metrics", app.address))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(metrics.status(), 200);
}

#[tokio::test]
async fn metrics_can_be_left_open_for_the_scraper() {
    let app = spawn_with_auth(false).await;

    let metrics = app.get("/metrics").await;

    assert_eq!(metrics.status(), 200);
    let run = post_with(&app, None).await;
    assert_eq!(run.status(), 401, "only /metrics was opened");
}

/// A proxy in front may put its own Basic credentials in `Authorization`: the `X-API-Key`
/// still authenticates, and a Basic header alone is refused.
#[tokio::test]
async fn an_api_key_counts_when_authorization_holds_basic_credentials() {
    let app = spawn_with_auth(true).await;
    app.fake.push(Reply::Sse(chunks::text_reply(&["Hi!"])));
    let response = app
        .client
        .post(format!("{}/", app.address))
        .header("authorization", "Basic cHJveHk6cGFzcw==")
        .header("x-api-key", TOKEN)
        .json(&input(vec![user("hi")]))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        last(&parse_sse(&response.text().await.unwrap()))["type"],
        "RUN_FINISHED"
    );

    let basic_only = post_with(
        &app,
        Some(("authorization", "Basic cHJveHk6cGFzcw==".into())),
    )
    .await;
    assert_eq!(basic_only.status(), 401);
    assert_eq!(
        error_body(basic_only).await["error"]["code"],
        "invalid_token"
    );
    let wrong_key = app
        .client
        .post(format!("{}/", app.address))
        .header("authorization", "Basic cHJveHk6cGFzcw==")
        .header("x-api-key", "not-the-token")
        .json(&input(vec![user("hi")]))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_key.status(), 401);
    assert_eq!(app.fake.requests().len(), 1);
}
