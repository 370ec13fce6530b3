//! Readiness and request ids (liveness is in `health`).

use serde_json::Value;

use crate::helpers::*;

#[tokio::test]
async fn ready_answers_200_once_configured_without_calling_the_model() {
    let app = spawn_app(|_| {}).await;

    let response = app.get("/ready").await;

    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "ready", "{body}");
    assert_eq!(body["checks"]["upstream"], "not_checked");
    assert!(app.fake.requests().is_empty());
}

#[tokio::test]
async fn ready_can_check_that_the_model_server_answers() {
    let app = spawn_app(|s| s.server.ready.check_upstream = true).await;

    for _ in 0..3 {
        let response = app.get("/ready").await;
        assert_eq!(response.status(), 200);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["checks"]["upstream"], "ok", "{body}");
    }
    let requests = app.fake.requests();
    assert_eq!(requests.len(), 1, "the result is cached");
    assert_eq!(
        requests[0].header("authorization"),
        None,
        "the probe sends no key"
    );
}

#[tokio::test]
async fn ready_is_503_when_the_model_server_is_unreachable() {
    // A port nothing listens on: bind one, then free it.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = closed.local_addr().unwrap();
    drop(closed);
    let app = spawn_app(|s| {
        s.server.ready.check_upstream = true;
        s.llm.base_url = format!("http://{address}/v1");
    })
    .await;

    let response = app.get("/ready").await;

    assert_eq!(response.status(), 503);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["reason"], "upstream_unreachable", "{body}");
    let health = app.get("/health").await;
    assert_eq!(
        health.status(),
        200,
        "liveness does not depend on the model"
    );
}

#[tokio::test]
async fn a_request_id_is_generated_or_echoed() {
    let app = spawn_app(|_| {}).await;

    let generated = app.get("/health").await;
    let id = generated.headers()["x-request-id"].to_str().unwrap();
    assert_eq!(id.len(), 36, "a UUID: {id}");

    let echoed = app
        .client
        .post(format!("{}/", app.address))
        .header("x-request-id", "req-42")
        .header("content-type", "application/json")
        .body("{broken")
        .send()
        .await
        .unwrap();
    assert_eq!(echoed.status(), 400, "errors carry it too");
    assert_eq!(echoed.headers()["x-request-id"], "req-42");
}
