//! OpenTelemetry traces, end to end: the built binary (the tracer provider is global to a
//! process, so each test gets its own) exports over OTLP/HTTP (and gRPC) to a receiver in the
//! test, which decodes `ExportTraceServiceRequest` with the official protobuf types. Without an endpoint,
//! nothing is traced and no trace context goes upstream.

use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agui_host::text::hex;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data as MetricData;
use opentelemetry_proto::tonic::metrics::v1::HistogramDataPoint;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::approvals::{client_history, interrupt_id, resolved, resume_input};
use crate::fake_llm::{chunks, FakeLlm, Reply};
use crate::helpers::*;

/// The caller's trace: a W3C `traceparent` (version 00, sampled).
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN_ID: &str = "00f067aa0ba902b7";

/// An OTLP/HTTP trace receiver on a random port: what the exporter sent, decoded.
#[derive(Clone, Default)]
struct Receiver {
    exports: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    metric_exports: Arc<Mutex<Vec<ExportMetricsServiceRequest>>>,
}

impl Receiver {
    async fn start(&self) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let router = Router::new()
            .route("/v1/traces", post(receive))
            .route("/v1/metrics", post(receive_metrics))
            .with_state(self.clone());
        tokio::spawn(async move { axum::serve(listener, router).await });
        format!("http://{address}")
    }

    /// Fails, with what the server logged, when no span arrived at all: the export itself
    /// failed, which the span assertions that follow could not tell.
    fn expect_spans(&self, server_log: &str) {
        assert!(
            !self.spans().is_empty(),
            "the server exported no span; its log:\n{server_log}"
        );
    }

    /// Every span received, with the `service.name` of its resource.
    fn spans(&self) -> Vec<(String, Span)> {
        let exports = self.exports.lock().unwrap();
        let mut spans = Vec::new();
        for export in exports.iter() {
            for resource_spans in &export.resource_spans {
                let service = resource_spans
                    .resource
                    .as_ref()
                    .and_then(|r| string_attribute(&r.attributes, "service.name"))
                    .unwrap_or_default();
                for scope in &resource_spans.scope_spans {
                    for span in &scope.spans {
                        spans.push((service.clone(), span.clone()));
                    }
                }
            }
        }
        spans
    }
}

async fn receive(State(receiver): State<Receiver>, body: Bytes) -> impl IntoResponse {
    let export = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
    receiver.exports.lock().unwrap().push(export);
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

async fn receive_metrics(State(receiver): State<Receiver>, body: Bytes) -> impl IntoResponse {
    let export = ExportMetricsServiceRequest::decode(body).expect("an OTLP protobuf export");
    receiver.metric_exports.lock().unwrap().push(export);
    (
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportMetricsServiceResponse::default().encode_to_vec(),
    )
}

fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a AnyValue> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn string_attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    match attribute(attributes, key)? {
        AnyValue::StringValue(value) => Some(value.clone()),
        other => panic!("{key} is not a string: {other:?}"),
    }
}

fn int_attribute(attributes: &[KeyValue], key: &str) -> Option<i64> {
    match attribute(attributes, key)? {
        AnyValue::IntValue(value) => Some(*value),
        other => panic!("{key} is not an integer: {other:?}"),
    }
}

fn double_attribute(attributes: &[KeyValue], key: &str) -> Option<f64> {
    match attribute(attributes, key)? {
        AnyValue::DoubleValue(value) => Some(*value),
        other => panic!("{key} is not a double: {other:?}"),
    }
}

fn string_array_attribute(attributes: &[KeyValue], key: &str) -> Vec<String> {
    match attribute(attributes, key) {
        Some(AnyValue::ArrayValue(array)) => array
            .values
            .iter()
            .map(|v| match &v.value {
                Some(AnyValue::StringValue(s)) => s.clone(),
                other => panic!("{key} holds a non-string: {other:?}"),
            })
            .collect(),
        other => panic!("{key} is not an array: {other:?}"),
    }
}

/// The `agui-host` binary, configured only through its environment, on a random port.
struct Server {
    child: tokio::process::Child,
    address: String,
    /// The server's log lines after "listening", for the message of a failed assertion.
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    async fn start(fake: &FakeLlm, extra_env: &[(&str, &str)]) -> Server {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agui-host"));
        command
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env_clear()
            .env("HOST", "127.0.0.1")
            .env("PORT", "0")
            .env("OPENAI_BASE_URL", fake.base_url())
            .env("OPENAI_API_KEY", API_KEY)
            .env("APP_LLM__MAX_RETRIES", "0")
            .env("APP_TELEMETRY__JSON", "true")
            .env("APP_TELEMETRY__LOG_FILTER", "info")
            .envs(extra_env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("the binary starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let address = tokio::time::timeout(Duration::from_secs(30), async {
            while let Some(line) = lines.next_line().await.unwrap() {
                let Ok(log) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if log["message"] == "agui-host listening" {
                    return log["address"].as_str().unwrap().to_owned();
                }
            }
            panic!("the binary exited before listening");
        })
        .await
        .expect("the binary listens within 30 s");
        // Keep reading, so a full pipe never blocks the server's logging.
        let log = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&log);
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                kept.lock().unwrap().push(line);
            }
        });
        Server {
            child,
            address: format!("http://{address}"),
            log,
        }
    }

    /// SIGTERM, as an orchestrator stops it; the server must flush its spans before exiting.
    /// Returns what it logged, to explain a span that never arrived.
    async fn stop(mut self) -> String {
        let pid = self.child.id().expect("still running").to_string();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap();
        assert!(status.success());
        let exit = tokio::time::timeout(Duration::from_secs(20), self.child.wait())
            .await
            .expect("the server exits within 20 s of SIGTERM")
            .unwrap();
        assert!(exit.success(), "{exit:?}");
        // The reader drains the pipe until the process is gone; give it a moment to finish.
        tokio::time::sleep(Duration::from_millis(20)).await;
        self.log.lock().unwrap().join("\n")
    }
}

async fn post_traced_run(server: &Server, path: &str, body: &Value) -> Vec<Value> {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", server.address))
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01"))
        .json(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    parse_sse(&response.text().await.unwrap())
}

/// The model's side of a run that calls `get_weather` (31 tokens in, 12 out), then answers
/// (58 in, 6 out).
fn push_weather_run(fake: &FakeLlm) {
    let call = ("call_w1", "get_weather", r#"{"location":"Paris"}"#);
    fake.push(Reply::Sse(chunks::with_usage(
        chunks::tool_calls(&[call], false),
        31,
        12,
    )));
    fake.push(Reply::Sse(chunks::with_usage(
        chunks::text_reply(&["Sunny in ", "Paris."]),
        58,
        6,
    )));
}

#[tokio::test]
#[cfg_attr(not(feature = "otel"), ignore = "built without the otel feature")]
async fn a_run_with_a_tool_call_exports_one_trace_continuing_the_callers() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let fake = FakeLlm::start().await;
    push_weather_run(&fake);
    let server = Server::start(
        &fake,
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_SERVICE_NAME", "agents-under-test"),
            ("APP_LLM__TEMPERATURE", "0.25"),
            ("APP_LLM__MAX_TOKENS", "256"),
        ],
    )
    .await;
    let mut body = input(vec![user("Weather in Paris?")]);
    body["threadId"] = "thread-otel".into();
    body["runId"] = "run-otel".into();
    let events = post_traced_run(&server, "/backend_tool_rendering", &body).await;
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    // Routes other than runs have spans too, a request that matches none included.
    let client = reqwest::Client::new();
    for path in ["/health", "/no/such/route"] {
        client
            .get(format!("{}{path}", server.address))
            .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01"))
            .send()
            .await
            .unwrap();
    }
    let server_log = server.stop().await;
    receiver.expect_spans(&server_log);
    let all: Vec<Span> = receiver.spans().into_iter().map(|(_, span)| span).collect();
    let health = all
        .iter()
        .find(|span| span.name == "GET /health")
        .expect("a span for GET /health");
    assert_eq!(
        int_attribute(&health.attributes, "http.response.status_code"),
        Some(200)
    );
    let unmatched = all
        .iter()
        .find(|span| {
            string_attribute(&span.attributes, "url.path").as_deref() == Some("/no/such/route")
        })
        .expect("a span for the unmatched request");
    assert_eq!(unmatched.name, "GET", "no route, so the method alone");
    assert!(attribute(&unmatched.attributes, "http.route").is_none());
    assert_eq!(
        int_attribute(&unmatched.attributes, "http.response.status_code"),
        Some(404)
    );

    let spans = receiver.spans();
    assert!(spans
        .iter()
        .all(|(service, _)| service == "agents-under-test"));
    let spans: Vec<Span> = spans.into_iter().map(|(_, span)| span).collect();
    assert!(
        spans.iter().all(|span| hex(&span.trace_id) == TRACE_ID),
        "every span continues the caller's trace"
    );

    let named = |name: &str| -> Vec<&Span> { spans.iter().filter(|s| s.name == name).collect() };
    let runs = named("invoke_agent backend_tool_rendering");
    assert_eq!(
        runs.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let run = runs[0];
    let request = assert_request_span(&spans, run, "/{agent}", "/backend_tool_rendering");
    assert_eq!(hex(&request.parent_span_id), CALLER_SPAN_ID);
    assert_run_span(run);
    // The agent's provider and model, and the tokens of both model calls.
    let run_attr = |key| string_attribute(&run.attributes, key);
    assert_eq!(run_attr("gen_ai.provider.name").as_deref(), Some("openai"));
    assert_eq!(
        run_attr("gen_ai.request.model").as_deref(),
        Some("gpt-4o-mini")
    );
    assert_eq!(
        int_attribute(&run.attributes, "gen_ai.usage.input_tokens"),
        Some(31 + 58)
    );
    assert_eq!(
        int_attribute(&run.attributes, "gen_ai.usage.output_tokens"),
        Some(12 + 6)
    );

    let model_calls = named("chat gpt-4o-mini");
    assert_eq!(model_calls.len(), 2);
    let mut model_calls = model_calls.clone();
    model_calls.sort_by_key(|s| s.start_time_unix_nano);
    let expected = [(31, 12, "tool_call"), (58, 6, "stop")];
    let fake_port = fake
        .base_url()
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/v1")
        .parse::<i64>()
        .unwrap();
    for (span, expected) in model_calls.iter().zip(expected) {
        assert_eq!(span.parent_span_id, run.span_id);
        assert_model_call_span(span, expected);
        let attrs = &span.attributes;
        assert_eq!(
            string_attribute(attrs, "server.address").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(int_attribute(attrs, "server.port"), Some(fake_port));
        // From the chunks' head: the completion's id and the model that answered.
        assert_eq!(
            string_attribute(attrs, "gen_ai.response.id").as_deref(),
            Some("chatcmpl-1")
        );
        assert_eq!(
            string_attribute(attrs, "gen_ai.response.model").as_deref(),
            Some("gpt-4o-mini")
        );
        assert_eq!(
            double_attribute(attrs, "gen_ai.request.temperature"),
            Some(0.25)
        );
        assert_eq!(int_attribute(attrs, "gen_ai.request.max_tokens"), Some(256));
    }

    // The request's span lasts as long as its stream, the last model call included.
    assert!(request.end_time_unix_nano >= model_calls[1].end_time_unix_nano);

    let tools = named("execute_tool get_weather");
    assert_eq!(tools.len(), 1);
    let tool = tools[0];
    assert_tool_span(tool, run, &model_calls);

    assert_upstream_requests_carry_their_spans(&fake, &model_calls);
}

/// The tool's span: under the run's, named for its call, between the two model calls.
fn assert_tool_span(tool: &Span, run: &Span, model_calls: &[&Span]) {
    assert_eq!(tool.parent_span_id, run.span_id);
    assert_eq!(
        string_attribute(&tool.attributes, "gen_ai.tool.name").as_deref(),
        Some("get_weather")
    );
    assert_eq!(
        string_attribute(&tool.attributes, "gen_ai.tool.call.id").as_deref(),
        Some("call_w1")
    );
    assert_eq!(
        string_attribute(&tool.attributes, "agui.tool.outcome").as_deref(),
        Some("ok")
    );
    // Run by the agent: an `extension` (a `function` is carried out by the client).
    assert_eq!(
        string_attribute(&tool.attributes, "gen_ai.tool.type").as_deref(),
        Some("extension")
    );
    assert!(attribute(&tool.attributes, "gen_ai.tool.call.arguments").is_none());
    // The tool ran between the two model calls.
    assert!(tool.start_time_unix_nano >= model_calls[0].end_time_unix_nano);
    assert!(tool.end_time_unix_nano <= model_calls[1].start_time_unix_nano);
    // The run span covers the whole stream.
    assert!(run.end_time_unix_nano >= model_calls[1].end_time_unix_nano);
}

/// Each upstream request names its model call's span as the parent.
fn assert_upstream_requests_carry_their_spans(fake: &FakeLlm, model_calls: &[&Span]) {
    let upstream = fake.requests();
    assert_eq!(upstream.len(), 2);
    for (request, span) in upstream.iter().zip(model_calls) {
        let traceparent = request
            .header("traceparent")
            .expect("a traceparent upstream");
        assert_eq!(
            traceparent,
            format!("00-{TRACE_ID}-{}-01", hex(&span.span_id))
        );
    }
}

/// The HTTP server span the run's span is under: named after the route, with the request's
/// `http.*` attributes and its status.
fn assert_request_span<'a>(spans: &'a [Span], run: &Span, route: &str, path: &str) -> &'a Span {
    let request = spans
        .iter()
        .find(|span| span.span_id == run.parent_span_id)
        .expect("the run's span is under the request's");
    assert_eq!(request.name, format!("POST {route}"));
    assert_eq!(request.kind, SpanKind::Server as i32);
    let attr = |key| string_attribute(&request.attributes, key);
    assert_eq!(attr("http.request.method").as_deref(), Some("POST"));
    assert_eq!(attr("http.route").as_deref(), Some(route));
    assert_eq!(attr("url.path").as_deref(), Some(path));
    assert_eq!(attr("url.scheme").as_deref(), Some("http"));
    assert_eq!(attr("server.address").as_deref(), Some("127.0.0.1"));
    assert_eq!(attr("network.protocol.version").as_deref(), Some("1.1"));
    assert_eq!(
        int_attribute(&request.attributes, "http.response.status_code"),
        Some(200)
    );
    assert!(int_attribute(&request.attributes, "server.port").is_some());
    request
}

/// The run's span: an internal span under the request's, with the run's names and outcome.
fn assert_run_span(run: &Span) {
    assert_eq!(run.kind, SpanKind::Internal as i32);
    let run_attr = |key| string_attribute(&run.attributes, key);
    assert_eq!(
        run_attr("gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        run_attr("gen_ai.agent.name").as_deref(),
        Some("backend_tool_rendering")
    );
    assert_eq!(
        run_attr("gen_ai.conversation.id").as_deref(),
        Some("thread-otel")
    );
    assert_eq!(run_attr("agui.run.id").as_deref(), Some("run-otel"));
    assert_eq!(run_attr("agui.run.outcome").as_deref(), Some("finished"));
}

/// A model call's span: the GenAI attributes, its tokens and finish reason, and no content.
fn assert_model_call_span(span: &Span, (input_tokens, output_tokens, finish): (i64, i64, &str)) {
    assert_eq!(span.kind, SpanKind::Client as i32);
    let attrs = &span.attributes;
    assert_eq!(
        string_attribute(attrs, "gen_ai.operation.name").as_deref(),
        Some("chat")
    );
    assert_eq!(
        string_attribute(attrs, "gen_ai.provider.name").as_deref(),
        Some("openai")
    );
    assert_eq!(
        string_attribute(attrs, "gen_ai.request.model").as_deref(),
        Some("gpt-4o-mini")
    );
    assert_eq!(
        int_attribute(attrs, "gen_ai.usage.input_tokens"),
        Some(input_tokens)
    );
    assert_eq!(
        int_attribute(attrs, "gen_ai.usage.output_tokens"),
        Some(output_tokens)
    );
    assert_eq!(
        string_array_attribute(attrs, "gen_ai.response.finish_reasons"),
        [finish]
    );
    // No content unless telemetry.capture_content is on.
    assert!(attribute(attrs, "gen_ai.input.messages").is_none());
    assert!(attribute(attrs, "gen_ai.output.messages").is_none());
}

#[tokio::test]
#[cfg_attr(not(feature = "otel"), ignore = "built without the otel feature")]
async fn captured_content_and_tool_failures_are_on_the_spans() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let fake = FakeLlm::start().await;
    // The demo human_in_the_loop agent has no server tool: the model calls one that does not
    // exist, which fails as a tool call and the model answers.
    fake.push_call_then_text(("call_x", "no_such_tool", "{}"), "Sorry.");
    let server = Server::start(
        &fake,
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                &format!("{endpoint}/v1/traces"),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("APP_TELEMETRY__CAPTURE_CONTENT", "true"),
        ],
    )
    .await;
    let events = post_traced_run(&server, "/", &input(vec![user("Do the thing")])).await;
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    let server_log = server.stop().await;
    receiver.expect_spans(&server_log);

    let spans: Vec<Span> = receiver
        .spans()
        .into_iter()
        .map(|(service, span)| {
            assert_eq!(service, "agui-host", "the default service name");
            span
        })
        .collect();
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool no_such_tool")
        .expect("a tool span");
    assert_eq!(
        string_attribute(&tool.attributes, "error.type").as_deref(),
        Some("unknown_tool")
    );
    let status = tool.status.as_ref().expect("a status");
    assert_eq!(status.code, 2, "STATUS_CODE_ERROR");
    let first_call = spans
        .iter()
        .filter(|s| s.name.starts_with("chat "))
        .min_by_key(|s| s.start_time_unix_nano)
        .unwrap();
    let input: Value = serde_json::from_str(
        &string_attribute(&first_call.attributes, "gen_ai.input.messages").expect("input"),
    )
    .unwrap();
    assert_eq!(
        input.as_array().unwrap().last().unwrap()["parts"][0]["content"],
        "Do the thing"
    );
    let output: Value = serde_json::from_str(
        &string_attribute(&first_call.attributes, "gen_ai.output.messages").expect("output"),
    )
    .unwrap();
    assert_eq!(output[0]["parts"][0]["type"], "tool_call");
    assert_eq!(output[0]["parts"][0]["name"], "no_such_tool");
}

#[tokio::test]
#[cfg_attr(not(feature = "otel"), ignore = "built without the otel feature")]
async fn an_approval_is_an_event_of_the_run_that_asks_and_of_the_run_that_resumes() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let fake = FakeLlm::start().await;
    let call = (
        "call_c1",
        "cancel_subscription",
        r#"{"subscription":"gym"}"#,
    );
    fake.push(Reply::Sse(chunks::tool_calls(&[call], false)));
    fake.push(Reply::Sse(chunks::text_reply(&["Cancelled."])));
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("APP_CONFIG_FILE", "config/examples/banking.toml"),
    ];
    let mut server = Server::start(&fake, &env).await;
    server.address.push_str("/banking");
    let before = vec![user("Cancel my gym subscription")];
    let asked = post_traced_run(&server, "", &input(before.clone())).await;
    let history = client_history(&before, &asked);
    let approval = resolved(&interrupt_id(&asked, "call_c1"), json!({"approved": true}));
    let resumed = post_traced_run(&server, "", &resume_input(history, json!([approval]))).await;
    assert_eq!(last(&resumed)["type"], "RUN_FINISHED");
    let server_log = server.stop().await;
    receiver.expect_spans(&server_log);

    let spans: Vec<Span> = receiver.spans().into_iter().map(|(_, span)| span).collect();
    let run = |run_id: &str| {
        spans
            .iter()
            .find(|s| string_attribute(&s.attributes, "agui.run.id").as_deref() == Some(run_id))
            .unwrap_or_else(|| panic!("a span for run {run_id}"))
    };
    let event_attributes = |span: &Span, name: &str| -> Vec<KeyValue> {
        let event = span.events.iter().find(|e| e.name == name);
        event
            .unwrap_or_else(|| panic!("`{name}` on {}", span.name))
            .attributes
            .clone()
    };
    let first = run(asked[0]["runId"].as_str().unwrap());
    let requested = event_attributes(first, "approval requested");
    assert_eq!(
        string_attribute(&requested, "gen_ai.tool.call.id").as_deref(),
        Some("call_c1")
    );
    assert!(
        spans
            .iter()
            .all(|s| s.name != "execute_tool cancel_subscription"
                || s.parent_span_id != first.span_id)
    );

    let second = run("r2");
    let decided = event_attributes(second, "approval decided");
    assert_eq!(
        string_attribute(&decided, "gen_ai.tool.name").as_deref(),
        Some("cancel_subscription")
    );
    assert_eq!(
        attribute(&decided, "approved"),
        Some(&AnyValue::BoolValue(true))
    );
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool cancel_subscription")
        .expect("the approved call runs in the second run");
    assert_eq!(tool.parent_span_id, second.span_id);
}

#[tokio::test]
#[cfg_attr(not(feature = "otel"), ignore = "built without the otel feature")]
async fn the_always_off_sampler_exports_no_span_even_for_a_sampled_caller() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let fake = FakeLlm::start().await;
    fake.push(Reply::Sse(chunks::text_reply(&["Hi."])));
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_TRACES_SAMPLER", "always_off"),
    ];
    let server = Server::start(&fake, &env).await;
    // The caller's `traceparent` says sampled: the default, parent-based sampler would export.
    let events = post_traced_run(&server, "/", &input(vec![user("Hello")])).await;
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    let server_log = server.stop().await;
    let names: Vec<String> = receiver.spans().into_iter().map(|(_, s)| s.name).collect();
    assert!(
        names.is_empty(),
        "{names:?}; the server's log:\n{server_log}"
    );
}

/// The same receiver over gRPC (the `TraceService` of the OTLP protobuf definitions).
impl TraceService for Receiver {
    fn export<'a, 'b>(
        &'a self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Pin<Box<dyn Future<Output = GrpcResult> + Send + 'b>>
    where
        'a: 'b,
    {
        self.exports.lock().unwrap().push(request.into_inner());
        Box::pin(async { Ok(tonic::Response::new(ExportTraceServiceResponse::default())) })
    }
}

type GrpcResult = Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status>;

#[tokio::test]
#[cfg_attr(not(feature = "otel"), ignore = "built without the otel feature")]
async fn spans_are_exported_over_grpc_too() {
    let receiver = Receiver::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let service = TraceServiceServer::new(receiver.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let fake = FakeLlm::start().await;
    fake.push(Reply::Sse(chunks::with_usage(
        chunks::text_reply(&["Hi."]),
        9,
        2,
    )));
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
    ];
    let server = Server::start(&fake, &env).await;
    let events = post_traced_run(&server, "/", &input(vec![user("Hello")])).await;
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    let server_log = server.stop().await;
    receiver.expect_spans(&server_log);

    let spans: Vec<Span> = receiver.spans().into_iter().map(|(_, span)| span).collect();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"invoke_agent assistant"), "{names:?}");
    let model_call = spans
        .iter()
        .find(|s| s.name == "chat gpt-4o-mini")
        .expect("a model call");
    assert_eq!(
        int_attribute(&model_call.attributes, "gen_ai.usage.output_tokens"),
        Some(2)
    );
    assert!(spans.iter().all(|span| hex(&span.trace_id) == TRACE_ID));
}

#[tokio::test]
async fn without_an_otlp_endpoint_no_trace_context_goes_upstream() {
    // This process installs no exporter: the in-process app is the untraced server.
    let app = spawn_app(|_| {}).await;
    app.fake.push(Reply::Sse(chunks::text_reply(&["Hi."])));
    let response = app
        .client
        .post(format!("{}/", app.address))
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN_ID}-01"))
        .json(&input(vec![user("Hello")]))
        .send()
        .await
        .unwrap();
    let events = parse_sse(&response.text().await.unwrap());
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    let upstream = app.fake.requests();
    assert_eq!(upstream.len(), 1);
    assert_eq!(upstream[0].header("traceparent"), None);
}

/// A run that asks for approval of an MCP tool, and the run that resumes it: the approved call
/// runs over MCP (its server sees the `traceparent` of the call's span in `params._meta`), the
/// model then calls a server tool and answers. Every span continues the caller's trace under
/// its request's HTTP span; content is captured as the GenAI instrumentations' variable asks;
/// the JSON log lines of the run name its trace and span.
#[tokio::test]
#[cfg_attr(not(feature = "otel"), ignore = "built without the otel feature")]
async fn an_approved_mcp_call_carries_the_trace_to_its_server_and_the_logs_name_the_trace() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let fake = FakeLlm::start().await;
    let config = std::env::temp_dir().join(format!("agui-otel-mcp-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        format!(
            r#"
[agents.ops]
instructions = "Help."

[[agents.ops.tools]]
name = "get_weather"
description = "The weather."
kind = "static"
parameters = {{ type = "object", properties = {{ location = {{ type = "string" }} }} }}
result = {{ conditions = "sunny" }}

[[agents.ops.mcp_servers]]
name = "test"
transport = "stdio"
command = "{}"
args = ["stdio"]
include = ["meta"]

[agents.ops.mcp_servers.tools.meta]
approval = "always"
"#,
            crate::mcp::test_server_exe().display()
        ),
    )
    .unwrap();
    fake.push(Reply::Sse(chunks::with_usage(
        chunks::tool_calls(&[("call_m1", "test__meta", "{}")], false),
        20,
        5,
    )));
    fake.push(Reply::Sse(chunks::with_usage(
        chunks::tool_calls(
            &[("call_w1", "get_weather", r#"{"location":"Oslo"}"#)],
            false,
        ),
        40,
        7,
    )));
    fake.push(Reply::Sse(chunks::with_usage(
        chunks::text_reply(&["Sunny."]),
        60,
        3,
    )));
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true"),
        ("APP_CONFIG_FILE", config.to_str().unwrap()),
    ];
    let mut server = Server::start(&fake, &env).await;
    server.address.push_str("/ops");
    let before = vec![user("Show me the meta, then the weather in Oslo")];
    let asked = post_traced_run(&server, "", &input(before.clone())).await;
    let history = client_history(&before, &asked);
    let approval = resolved(&interrupt_id(&asked, "call_m1"), json!({"approved": true}));
    let resumed = post_traced_run(&server, "", &resume_input(history, json!([approval]))).await;
    assert_eq!(last(&resumed)["type"], "RUN_FINISHED");
    let server_log = server.stop().await;
    let _ = std::fs::remove_file(&config);
    receiver.expect_spans(&server_log);
    let spans: Vec<Span> = receiver.spans().into_iter().map(|(_, span)| span).collect();
    assert!(spans.iter().all(|span| hex(&span.trace_id) == TRACE_ID));

    // The resumed run, under its request's span, with its approval, its model's names and the
    // tokens of its two model calls.
    let run = spans
        .iter()
        .find(|s| string_attribute(&s.attributes, "agui.run.id").as_deref() == Some("r2"))
        .expect("the resumed run's span");
    let request = assert_request_span(&spans, run, "/{agent}", "/ops");
    assert_eq!(hex(&request.parent_span_id), CALLER_SPAN_ID);
    assert_eq!(run.kind, SpanKind::Internal as i32);
    assert!(run.events.iter().any(|e| e.name == "approval decided"));
    assert_eq!(
        string_attribute(&run.attributes, "gen_ai.provider.name").as_deref(),
        Some("openai")
    );
    assert_eq!(
        int_attribute(&run.attributes, "gen_ai.usage.input_tokens"),
        Some(100)
    );
    assert_eq!(
        int_attribute(&run.attributes, "gen_ai.usage.output_tokens"),
        Some(10)
    );

    // The MCP tool's span, and under it the MCP request's, whose context the server received.
    let tool = spans
        .iter()
        .find(|s| s.name == "execute_tool test__meta")
        .expect("the approved MCP call runs");
    assert_eq!(tool.parent_span_id, run.span_id);
    assert_eq!(
        string_attribute(&tool.attributes, "gen_ai.tool.type").as_deref(),
        Some("extension")
    );
    let mcp = spans
        .iter()
        .find(|s| s.name == "tools/call meta")
        .expect("the MCP request's span");
    assert_eq!(mcp.parent_span_id, tool.span_id);
    assert_eq!(mcp.kind, SpanKind::Client as i32);
    let mcp_attr = |key| string_attribute(&mcp.attributes, key);
    assert_eq!(mcp_attr("mcp.method.name").as_deref(), Some("tools/call"));
    assert_eq!(mcp_attr("gen_ai.tool.name").as_deref(), Some("meta"));
    assert_eq!(
        mcp_attr("gen_ai.operation.name").as_deref(),
        Some("execute_tool")
    );
    assert_eq!(mcp_attr("network.transport").as_deref(), Some("pipe"));
    assert!(mcp_attr("mcp.protocol.version").is_some_and(|v| !v.is_empty()));
    assert!(mcp_attr("jsonrpc.request.id").is_some());
    let seen: Value = serde_json::from_str(
        of_type(&resumed, "TOOL_CALL_RESULT")
            .into_iter()
            .find(|e| e["toolCallId"] == "call_m1")
            .expect("the MCP call's result")["content"]
            .as_str()
            .unwrap(),
    )
    .expect("the server's _meta as JSON");
    assert_eq!(
        seen["traceparent"],
        format!("00-{TRACE_ID}-{}-01", hex(&mcp.span_id)),
        "the MCP server sees the call's trace context: {seen}"
    );

    // The server tool's span, and the model calls' captured output with their finish reasons.
    let weather = spans
        .iter()
        .find(|s| s.name == "execute_tool get_weather")
        .expect("the server tool runs");
    assert_eq!(weather.parent_span_id, run.span_id);
    let mut calls: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat ") && s.parent_span_id == run.span_id)
        .collect();
    calls.sort_by_key(|s| s.start_time_unix_nano);
    let finish_reasons: Vec<Value> = calls
        .iter()
        .map(|call| {
            let output = string_attribute(&call.attributes, "gen_ai.output.messages")
                .expect("the output is captured");
            serde_json::from_str::<Value>(&output).unwrap()[0]["finish_reason"].clone()
        })
        .collect();
    assert_eq!(finish_reasons, [json!("tool_call"), json!("stop")]);

    // The run's log lines name its trace and the span they were written in.
    let ended: Value = server_log
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|line| line["message"] == "run ended" && line["span"]["run_id"] == "r2")
        .unwrap_or_else(|| panic!("a `run ended` line for r2: {server_log}"));
    assert_eq!(ended["trace_id"], TRACE_ID);
    assert_eq!(ended["span_id"], hex(&run.span_id));
}

impl Receiver {
    /// The data points of histogram `name` in the last export that had it (the exporter sends
    /// cumulative totals, so the last is the whole run).
    fn histogram(&self, name: &str) -> Vec<HistogramDataPoint> {
        let exports = self.metric_exports.lock().unwrap();
        exports
            .iter()
            .rev()
            .flat_map(|export| &export.resource_metrics)
            .flat_map(|resource| &resource.scope_metrics)
            .flat_map(|scope| &scope.metrics)
            .find(|metric| metric.name == name)
            .map(|metric| match &metric.data {
                Some(MetricData::Histogram(histogram)) => histogram.data_points.clone(),
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .unwrap_or_default()
    }
}

/// The one data point of `points` whose attributes include every `(key, value)` of `wanted`.
fn point<'a>(points: &'a [HistogramDataPoint], wanted: &[(&str, &str)]) -> &'a HistogramDataPoint {
    let found: Vec<&HistogramDataPoint> = points
        .iter()
        .filter(|point| {
            wanted.iter().all(|(key, value)| {
                string_attribute(&point.attributes, key).as_deref() == Some(*value)
            })
        })
        .collect();
    assert_eq!(found.len(), 1, "one point with {wanted:?} in {points:#?}");
    found[0]
}

/// The GenAI metrics over OTLP (`gen_ai.client.token.usage`, `gen_ai.client.operation.duration`
/// of model calls, the run and its tool call, time to first chunk), and the labelled token
/// series of `/metrics`, for a run with a server tool call.
#[tokio::test]
#[cfg_attr(not(feature = "otel"), ignore = "built without the otel feature")]
async fn the_genai_metrics_reach_an_otlp_receiver_and_prometheus_labels_the_model() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let fake = FakeLlm::start().await;
    push_weather_run(&fake);
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        // Traces off: metric export does not depend on it.
        ("OTEL_TRACES_EXPORTER", "none"),
    ];
    let server = Server::start(&fake, &env).await;
    let events = post_traced_run(
        &server,
        "/backend_tool_rendering",
        &input(vec![user("Weather?")]),
    )
    .await;
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    let prometheus = reqwest::get(format!("{}/metrics", server.address))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let server_log = server.stop().await;
    assert!(receiver.spans().is_empty(), "no trace export was asked for");

    for (direction, count) in [("input", 89), ("output", 18)] {
        let series = format!(
            r#"agui_tokens_total{{agent="backend_tool_rendering",direction="{direction}",provider="openai",model="gpt-4o-mini"}} {count}"#
        );
        assert!(prometheus.contains(&series), "{series} in {prometheus}");
    }

    let tokens = receiver.histogram("gen_ai.client.token.usage");
    assert!(
        !tokens.is_empty(),
        "no token metric arrived; the server's log:\n{server_log}"
    );
    let chat = [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.provider.name", "openai"),
        ("gen_ai.request.model", "gpt-4o-mini"),
    ];
    for (kind, sum) in [("input", 89.0), ("output", 18.0)] {
        let mut wanted = chat.to_vec();
        wanted.push(("gen_ai.token.type", kind));
        let point = point(&tokens, &wanted);
        assert_eq!((point.count, point.sum), (2, Some(sum)), "{kind} tokens");
    }
    let durations = receiver.histogram("gen_ai.client.operation.duration");
    assert_eq!(point(&durations, &chat).count, 2, "both model calls");
    let run = point(
        &durations,
        &[
            ("gen_ai.operation.name", "invoke_agent"),
            ("gen_ai.agent.name", "backend_tool_rendering"),
            ("gen_ai.request.model", "gpt-4o-mini"),
        ],
    );
    assert_eq!(run.count, 1);
    let tool = point(
        &durations,
        &[
            ("gen_ai.operation.name", "execute_tool"),
            ("gen_ai.tool.name", "get_weather"),
        ],
    );
    assert_eq!(tool.count, 1);
    assert!(run.sum.unwrap() >= tool.sum.unwrap());
    let first_chunk = receiver.histogram("gen_ai.client.operation.time_to_first_chunk");
    assert_eq!(point(&first_chunk, &chat).count, 2);
}

/// A subagent runs as an `invoke_agent` span of its own under the parent's `execute_tool`
/// span, with its model calls and tools under it (the demo's travel supervisor).
#[tokio::test]
#[cfg_attr(not(feature = "otel"), ignore = "built without the otel feature")]
async fn a_subagent_is_an_invoke_agent_span_under_its_parents_tool_span() {
    let receiver = Receiver::default();
    let endpoint = receiver.start().await;
    let fake = FakeLlm::start().await;
    fake.push(Reply::Sse(chunks::tool_calls(
        &[("call_1", "travel_flights", r#"{"task":"flights to Rome"}"#)],
        false,
    )));
    fake.push(Reply::Sse(chunks::tool_calls(
        &[("f1", "search_flights", r#"{"destination":"Rome"}"#)],
        false,
    )));
    fake.push(Reply::Sse(chunks::text_reply(&["KLM at 9:40."])));
    fake.push(Reply::Sse(chunks::text_reply(&["Fly KLM."])));
    let server = Server::start(&fake, &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)]).await;
    let events = post_traced_run(&server, "/subgraphs", &input(vec![user("Rome?")])).await;
    assert_eq!(last(&events)["type"], "RUN_FINISHED");
    let server_log = server.stop().await;
    receiver.expect_spans(&server_log);
    let spans: Vec<Span> = receiver.spans().into_iter().map(|(_, span)| span).collect();
    let named = |name: &str| -> &Span {
        spans.iter().find(|s| s.name == name).unwrap_or_else(|| {
            panic!(
                "{name}: {:?}",
                spans.iter().map(|s| &s.name).collect::<Vec<_>>()
            )
        })
    };
    let parent = named("invoke_agent subgraphs");
    let call = named("execute_tool travel_flights");
    let child = named("invoke_agent travel_flights");
    let search = named("execute_tool search_flights");
    assert_eq!(call.parent_span_id, parent.span_id);
    assert_eq!(child.parent_span_id, call.span_id);
    assert_eq!(search.parent_span_id, child.span_id);
    let child_calls: Vec<&Span> = spans
        .iter()
        .filter(|s| s.name.starts_with("chat ") && s.parent_span_id == child.span_id)
        .collect();
    assert_eq!(child_calls.len(), 2, "the child's model calls are its own");
    assert!(spans.iter().all(|span| hex(&span.trace_id) == TRACE_ID));
}
