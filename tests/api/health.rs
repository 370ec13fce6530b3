//! The liveness probe.

use serde_json::Value;

use crate::helpers::*;

#[tokio::test]
async fn health_answers_ok_without_calling_the_model() {
    let app = spawn_app(|_| {}).await;

    let response = app.get("/health").await;

    assert_eq!(response.status(), 200);
    assert!(content_type(&response).starts_with("application/json"));
    let body: Value = response.json().await.expect("JSON body");
    assert_eq!(body["status"], "ok", "{body}");
    assert!(app.fake.requests().is_empty());
}
