//! CORS: browsers on configured origins may call the service; others get no CORS headers (so
//! the browser refuses), and with no origin configured there are none at all.

use reqwest::Method;

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

const ALLOWED: &str = "https://app.example.com";
const REFUSED: &str = "https://evil.example.net";

async fn preflight(app: &TestApp, origin: &str) -> reqwest::Response {
    app.client
        .request(Method::OPTIONS, format!("{}/", app.address))
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header(
            "access-control-request-headers",
            "content-type,accept,authorization",
        )
        .send()
        .await
        .expect("the app answers")
}

fn header<'a>(response: &'a reqwest::Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

#[tokio::test]
async fn a_preflight_from_an_allowed_origin_is_answered_with_what_ag_ui_clients_send() {
    let app = spawn_app(|s| s.server.cors.allowed_origins = vec![ALLOWED.into()]).await;

    let response = preflight(&app, ALLOWED).await;

    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(
        header(&response, "access-control-allow-origin"),
        Some(ALLOWED)
    );
    let methods = header(&response, "access-control-allow-methods").unwrap_or("");
    assert!(methods.contains("POST"), "allow-methods: {methods}");
    let headers = header(&response, "access-control-allow-headers")
        .unwrap_or("")
        .to_ascii_lowercase();
    for needed in ["content-type", "accept", "authorization"] {
        assert!(
            headers.contains(needed),
            "allow-headers lacks {needed}: {headers}"
        );
    }
    assert!(header(&response, "access-control-max-age").is_some());
    assert_eq!(
        header(&response, "access-control-allow-credentials"),
        None,
        "no credentials unless configured"
    );
    assert!(app.fake.requests().is_empty());
}

#[tokio::test]
async fn a_run_from_an_allowed_origin_carries_the_cors_headers() {
    let app = spawn_app(|s| s.server.cors.allowed_origins = vec![ALLOWED.into()]).await;
    app.fake.push(Reply::Sse(chunks::text_reply(&["Hi!"])));

    let response = app
        .client
        .post(format!("{}/", app.address))
        .header("origin", ALLOWED)
        .header("content-type", "application/json")
        .json(&input(vec![user("hi")]))
        .send()
        .await
        .unwrap();

    assert_eq!(response.status(), 200);
    assert_eq!(
        header(&response, "access-control-allow-origin"),
        Some(ALLOWED)
    );
    let exposed = header(&response, "access-control-expose-headers").unwrap_or("");
    assert!(
        exposed.contains("x-request-id"),
        "expose-headers: {exposed}"
    );
    let events = parse_sse(&response.text().await.unwrap());
    assert_well_formed(&events);
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
}

#[tokio::test]
async fn a_refused_origin_gets_no_cors_headers() {
    let app = spawn_app(|s| s.server.cors.allowed_origins = vec![ALLOWED.into()]).await;

    let response = preflight(&app, REFUSED).await;

    assert_eq!(header(&response, "access-control-allow-origin"), None);
    assert_eq!(header(&response, "access-control-allow-credentials"), None);
    assert!(app.fake.requests().is_empty());
}

#[tokio::test]
async fn without_configured_origins_there_are_no_cors_headers() {
    let app = spawn_app(|_| {}).await;

    let response = preflight(&app, ALLOWED).await;

    assert_eq!(header(&response, "access-control-allow-origin"), None);
    assert!(!response.status().is_success(), "{}", response.status());
}

#[tokio::test]
async fn a_wildcard_is_honoured_only_when_configured_and_never_with_credentials() {
    let app = spawn_app(|s| s.server.cors.allowed_origins = vec!["*".into()]).await;

    let response = preflight(&app, REFUSED).await;

    assert_eq!(header(&response, "access-control-allow-origin"), Some("*"));
    assert_eq!(header(&response, "access-control-allow-credentials"), None);
}

#[tokio::test]
async fn credentials_are_allowed_for_explicit_origins_when_configured() {
    let app = spawn_app(|s| {
        s.server.cors.allowed_origins = vec![ALLOWED.into()];
        s.server.cors.allow_credentials = true;
    })
    .await;

    let response = preflight(&app, ALLOWED).await;

    assert_eq!(
        header(&response, "access-control-allow-origin"),
        Some(ALLOWED)
    );
    assert_eq!(
        header(&response, "access-control-allow-credentials"),
        Some("true")
    );
}

#[tokio::test]
async fn a_preflight_needs_no_token_when_authentication_is_on() {
    let app = spawn_app(|s| {
        s.server.cors.allowed_origins = vec![ALLOWED.into()];
        s.server.auth.tokens = vec!["secret-token".into()];
    })
    .await;

    let response = preflight(&app, ALLOWED).await;

    assert!(response.status().is_success(), "{}", response.status());
    assert_eq!(
        header(&response, "access-control-allow-origin"),
        Some(ALLOWED)
    );
}
