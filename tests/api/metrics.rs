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
        get(
            r#"agui_tokens_total{agent="assistant",direction="input",provider="openai",model="gpt-4o-mini"}"#
        ),
        11.0
    );
    assert_eq!(
        get(
            r#"agui_tokens_total{agent="assistant",direction="output",provider="openai",model="gpt-4o-mini"}"#
        ),
        4.0
    );
    let events = (finished.len() + errored.len()) as f64;
    assert_eq!(
        get(r#"agui_stream_events_total{agent="assistant"}"#),
        events
    );
    assert!(get(r#"agui_stream_bytes_total{agent="assistant"}"#) > 0.0);
    assert_eq!(
        get(
            r#"agui_time_to_first_token_seconds_count{agent="assistant",provider="openai",model="gpt-4o-mini"}"#
        ),
        1.0,
        "only the finished run streamed content"
    );
    assert_eq!(
        get(
            r#"agui_run_duration_seconds_count{agent="assistant",outcome="success",provider="openai",model="gpt-4o-mini"}"#
        ),
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

/// Token and duration metrics name the provider and model of each agent's calls, as configured:
/// an agent with its own model gets series of its own, and what a client sends names none.
#[tokio::test]
async fn token_and_duration_metrics_are_labelled_with_each_agents_provider_and_model() {
    let app = spawn_app(|s| {
        let mut other = s.agents["assistant"].clone();
        other.model = Some("gpt-4.1-nano".into());
        s.agents.insert("nano".into(), other);
    })
    .await;
    for (input_tokens, output_tokens) in [(11, 4), (20, 6)] {
        app.fake.push(Reply::Sse(chunks::with_usage(
            chunks::text_reply(&["Hi"]),
            input_tokens,
            output_tokens,
        )));
    }
    let mut body = input(vec![user("hi")]);
    body["forwardedProps"] = serde_json::json!({"model": "client-chosen"});
    let first = app.run_events("/", &body).await;
    assert_eq!(last(&first)["type"], "RUN_FINISHED");
    let second = app.run_events("/nano", &body).await;
    assert_eq!(last(&second)["type"], "RUN_FINISHED");

    let m = scrape(&app).await;
    let get = |series: &str| {
        m.get(series)
            .copied()
            .unwrap_or_else(|| panic!("no {series} in {m:#?}"))
    };
    let labels =
        |agent: &str, model: &str| format!(r#"agent="{agent}",provider="openai",model="{model}""#);
    for (agent, model, input_tokens, output_tokens) in [
        ("assistant", "gpt-4o-mini", 11.0, 4.0),
        ("nano", "gpt-4.1-nano", 20.0, 6.0),
    ] {
        let tokens = |direction: &str| {
            get(&format!(
                r#"agui_tokens_total{{agent="{agent}",direction="{direction}",provider="openai",model="{model}"}}"#
            ))
        };
        assert_eq!(tokens("input"), input_tokens);
        assert_eq!(tokens("output"), output_tokens);
        let each = labels(agent, model);
        assert_eq!(
            get(&format!("agui_upstream_latency_seconds_count{{{each}}}")),
            1.0
        );
        assert_eq!(
            get(&format!("agui_time_to_first_token_seconds_count{{{each}}}")),
            1.0
        );
        assert_eq!(
            get(&format!(
                r#"agui_run_duration_seconds_count{{agent="{agent}",outcome="success",provider="openai",model="{model}"}}"#
            )),
            1.0
        );
    }
    assert!(
        m.keys().all(|series| !series.contains("client-chosen")),
        "a client names no label"
    );
    // What went upstream is the agent's model.
    let models: Vec<String> = app
        .fake
        .requests()
        .iter()
        .map(|request| request.body["model"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(models, ["gpt-4o-mini", "gpt-4.1-nano"]);
}
