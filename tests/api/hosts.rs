//! DNS rebinding: a page on `rebind.attacker.example` whose name is re-pointed at 127.0.0.1
//! reaches a server on the developer's machine as a same-origin site, with its own name in
//! `Host`. On a loopback address the server answers loopback names only (unless
//! `server.allowed_hosts` says otherwise); probes answer any name, for health checks.

use std::net::SocketAddr;

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;

/// A client that reaches `app` under the name `host` (as a browser would after rebinding),
/// over HTTP/1.1 or, with `h2`, HTTP/2 (where the name travels as `:authority`).
fn client_as(app: &TestApp, host: &str, h2: bool) -> (reqwest::Client, String) {
    let address: SocketAddr = app.address.trim_start_matches("http://").parse().unwrap();
    let mut builder = reqwest::Client::builder().resolve(host, address);
    if h2 {
        builder = builder.http2_prior_knowledge();
    }
    let base = format!("http://{host}:{}", address.port());
    (builder.build().unwrap(), base)
}

async fn status_as(app: &TestApp, host: &str, h2: bool, path: &str) -> (u16, serde_json::Value) {
    let (client, base) = client_as(app, host, h2);
    let response = client.get(format!("{base}{path}")).send().await.unwrap();
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn on_a_loopback_address_a_foreign_host_is_refused_and_loopback_names_are_served() {
    let app = spawn_app(|_| {}).await;
    for h2 in [false, true] {
        for path in ["/agents", "/assistant/threads/t1", "/", "/metrics"] {
            let (status, body) = status_as(&app, "rebind.attacker.example", h2, path).await;
            assert_eq!(status, 403, "{path} (h2: {h2}): {body}");
            assert_eq!(body["error"]["code"], "host_not_allowed", "{body}");
        }
        for host in ["localhost", "app.localhost", "127.0.0.1"] {
            let (status, body) = status_as(&app, host, h2, "/agents").await;
            assert_eq!(status, 200, "{host} (h2: {h2}): {body}");
        }
        // Probes answer whatever the name: a health check may use any address of the machine.
        for path in ["/health", "/ready"] {
            let (status, _) = status_as(&app, "rebind.attacker.example", h2, path).await;
            assert_eq!(status, 200, "{path} (h2: {h2})");
        }
    }
    // Neither a run nor a delete gets through under a foreign name.
    let (client, base) = client_as(&app, "rebind.attacker.example", false);
    let run = client
        .post(format!("{base}/"))
        .header("content-type", "application/json")
        .json(&input(vec![user("hi")]))
        .send()
        .await
        .unwrap();
    assert_eq!(run.status(), 403);
    let delete = client
        .delete(format!("{base}/assistant/threads/t1"))
        .send()
        .await
        .unwrap();
    assert_eq!(delete.status(), 403);
    assert!(app.fake.requests().is_empty(), "no run started");
    // The test client's own `Host: 127.0.0.1:<port>` runs.
    app.fake.push(Reply::Sse(chunks::text_reply(&["Hi."])));
    let events = app.run_events("/", &input(vec![user("hi")])).await;
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
}

#[tokio::test]
async fn a_raw_request_with_an_ipv6_loopback_host_or_none_is_judged_by_its_name() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let app = spawn_app(|_| {}).await;
    let address = app.address.trim_start_matches("http://").to_owned();
    for (head, expected) in [
        ("GET /agents HTTP/1.1\r\nhost: [::1]:8080\r\n", "200"),
        ("GET /agents HTTP/1.1\r\nhost: LOCALHOST.\r\n", "200"),
        (
            "GET /agents HTTP/1.1\r\nhost: 127.0.0.1.attacker.example\r\n",
            "403",
        ),
        (
            "GET /agents HTTP/1.1\r\nhost: localhost.attacker.example\r\n",
            "403",
        ),
        // No name at all (HTTP/1.0 allows it; no browser sends it): not a loopback name.
        ("GET /agents HTTP/1.0\r\n", "403"),
    ] {
        let mut socket = tokio::net::TcpStream::connect(&address).await.unwrap();
        socket
            .write_all(format!("{head}connection: close\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut answer = Vec::new();
        socket.read_to_end(&mut answer).await.unwrap();
        let answer = String::from_utf8_lossy(&answer);
        let status = answer.split(' ').nth(1).unwrap_or_default();
        assert_eq!(status, expected, "{head:?}: {answer}");
    }
}

#[tokio::test]
async fn allowed_hosts_names_the_hosts_served() {
    let app = spawn_app(|s| {
        s.server.allowed_hosts = vec!["agents.example.com".into(), "*.internal.example".into()];
    })
    .await;
    for (host, expected) in [
        ("agents.example.com", 200),
        ("api.internal.example", 200),
        ("internal.example", 403),
        ("localhost", 403),
        ("rebind.attacker.example", 403),
    ] {
        let (status, body) = status_as(&app, host, false, "/agents").await;
        assert_eq!(status, expected, "{host}: {body}");
    }
    let any = spawn_app(|s| s.server.allowed_hosts = vec!["*".into()]).await;
    let (status, _) = status_as(&any, "rebind.attacker.example", false, "/agents").await;
    assert_eq!(status, 200, "`*` allows any name");
}

/// Bound to every interface (a container behind a proxy, a pod whose probes use its IP), with
/// no list: any name is served.
#[tokio::test]
async fn on_a_wildcard_address_with_no_list_any_host_is_served() {
    let app = spawn_app(|s| s.server.host = "0.0.0.0".into()).await;
    let (status, body) = status_as(&app, "agui-host.default.svc", false, "/agents").await;
    assert_eq!(status, 200, "{body}");
}
