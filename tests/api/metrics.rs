//! `GET /metrics`: Prometheus (OpenMetrics) text that counts what happened.

use std::collections::BTreeMap;

use crate::fake_llm::{chunks, Reply};
use crate::helpers::*;
use crate::verify::assert_well_formed;

/// The samples of an exposition, by series (`name{labels}`).
fn samples(text: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            Some((series.to_string(), value.parse().ok()?))
        })
        .collect()
}

async fn scrape(app: &TestApp) -> BTreeMap<String, f64> {
    let response = app.get("/metrics").await;
    assert_eq!(response.status(), 200);
    let content_type = content_type(&response);
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    samples(&text)
}

#[tokio::test]
async fn metrics_count_a_finished_an_errored_and_a_rejected_run() {
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(chunks::with_usage(
        chunks::text_reply(&["Hel", "lo"]),
        11,
        4,
    )));
    app.fake
        .push(Reply::Status(500, r#"{"error":{"message":"boom"}}"#.into()));

    let finished = app.run_events("/", &input(vec![user("hi")])).await;
    assert_well_formed(&finished);
    assert_eq!(last(&finished)["type"], "RUN_FINISHED");
    let errored = app.run_events("/", &input(vec![user("hi")])).await;
    assert_well_formed(&errored);
    assert_eq!(last(&errored)["code"], "upstream_http_500");
    let rejected = app.post_raw("/", b"{not json".to_vec()).await;
    assert_eq!(rejected.status(), 400);

    let m = scrape(&app).await;
    let get = |series: &str| {
        m.get(series)
            .copied()
            .unwrap_or_else(|| panic!("no {series} in {m:#?}"))
    };
    assert_eq!(get(r#"agui_runs_started_total{agent="assistant"}"#), 2.0);
    assert_eq!(
        get(r#"agui_runs_finished_total{agent="assistant",outcome="success"}"#),
        1.0
    );
    assert_eq!(
        get(r#"agui_runs_finished_total{agent="assistant",outcome="error"}"#),
        1.0
    );
    assert_eq!(
        get(r#"agui_run_errors_total{agent="assistant",code="upstream_http_500"}"#),
        1.0
    );
    assert_eq!(
        get(r#"agui_requests_rejected_total{code="invalid_json",status="400"}"#),
        1.0
    );
    assert_eq!(get("agui_runs_in_flight"), 0.0);
    assert_eq!(
        get(r#"agui_tokens_total{agent="assistant",direction="input"}"#),
        11.0
    );
    assert_eq!(
        get(r#"agui_tokens_total{agent="assistant",direction="output"}"#),
        4.0
    );
    let events = (finished.len() + errored.len()) as f64;
    assert_eq!(
        get(r#"agui_stream_events_total{agent="assistant"}"#),
        events
    );
    assert!(get(r#"agui_stream_bytes_total{agent="assistant"}"#) > 0.0);
    assert_eq!(
        get(r#"agui_time_to_first_token_seconds_count{agent="assistant"}"#),
        1.0,
        "only the finished run streamed content"
    );
    assert_eq!(
        get(r#"agui_run_duration_seconds_count{agent="assistant",outcome="success"}"#),
        1.0
    );
}

#[tokio::test]
async fn a_run_refused_for_lack_of_slots_is_counted_as_rejected() {
    let app = spawn_app(|s| s.server.limits.max_concurrent_runs = 1).await;
    app.fake.push(Reply::SlowSse(
        chunks::text_reply(&["a", "b", "c", "d"]),
        std::time::Duration::from_millis(50),
    ));
    let first = app.post_run("/", &input(vec![user("hold")])).await;
    let mut reader = EventReader::new(first);
    reader.next().await.expect("RUN_STARTED");

    let refused = app.post_run("/", &input(vec![user("me too")])).await;
    assert_eq!(refused.status(), 503);
    let during = scrape(&app).await;
    while reader.next().await.is_some() {}
    let after = scrape(&app).await;

    assert_eq!(during["agui_runs_in_flight"], 1.0);
    assert_eq!(
        during[r#"agui_requests_rejected_total{code="too_many_runs",status="503"}"#],
        1.0
    );
    assert_eq!(after["agui_runs_in_flight"], 0.0);
}

#[tokio::test]
async fn metrics_can_be_turned_off() {
    let app = spawn_app(|s| s.metrics.enabled = false).await;
    let response = app.get("/metrics").await;
    assert!(response.status().is_client_error(), "{}", response.status());
}
