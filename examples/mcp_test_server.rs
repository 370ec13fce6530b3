//! An MCP server built with `rmcp`, for the MCP integration tests and the MCP benchmark: tools
//! the reference server does not have.
//!
//! - `slow {seconds}`: reports progress every 100 ms, then answers; a cancelled call is counted;
//! - `cancelled_calls {}`: how many `slow` calls were cancelled;
//! - `plan {title, steps}`: answers `structuredContent` (a plan with steps), for state rules;
//! - `add_tool {name}`: adds a tool `name` and sends `notifications/tools/list_changed`;
//! - `stall_listing {}`: sends `notifications/tools/list_changed`, then never answers a
//!   `tools/list` again (a server that hangs);
//! - `whoami {}`: the `x-agui-*` headers of the HTTP request that carried the call;
//! - `meta {}`: the call's `params._meta` (trace context, identity);
//! - `ping {}`: answers `pong` (the benchmark's call);
//! - `client_capabilities {}`: the capabilities the client declared;
//! - `book_table {restaurant}`: asks (MCP 2026-07-28 `input_required`) how many people, with
//!   a `requestState` naming the restaurant, then books on the retry (accept), or says it was
//!   declined or cancelled; a changed `requestState` is refused;
//! - `bookings {}`: how many tables `book_table` booked, in this process;
//! - `plan_trip {city}`: asks two questions at once (the dates, and a URL-mode sign-in), then
//!   answers with both;
//! - `long_report {seconds}`: with a client that declared the tasks extension (SEP-2663),
//!   answers at once with a task that works for `seconds` (status message every 100 ms, polled
//!   every 100 ms) and then completes with the report; otherwise works and answers inline;
//! - `cancelled_tasks {}`: how many `long_report` tasks stopped on a `tasks/cancel`.
//!
//! And an MCP App (SEP-1865), a small weather card (`examples/support/weather_app.html`):
//! - `weather {city}`: the forecast, with the UI resource `ui://weather/app.html`;
//! - `weather_refresh {city}`: visible to the app only (`_meta.ui.visibility: ["app"]`): the
//!   card's Refresh button calls it through the host;
//! - `weather_legacy {}`: names its resource with the legacy key `_meta["ui/resourceUri"]`;
//! - `weather_admin {}`: visible to the model only;
//! - `weather_future {}`: a visibility value no client knows yet (`"robot"`), which must fail
//!   closed;
//! - resources `ui://weather/app.html`, `ui://weather/legacy.html` (`text/html;profile=mcp-app`)
//!   and `notes://secret.txt`, a plain resource no app may read.
//!
//! `cargo run --example mcp_test_server -- stdio` serves on standard input and output;
//! `-- http` serves streamable HTTP on a free local port and prints `http://127.0.0.1:<port>/mcp`
//! as its first line.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelTaskParams, ContentBlock,
    CreateTaskResult, ElicitRequest, ElicitRequestParams, GetTaskParams, GetTaskResult,
    InputRequest, InputRequests, InputRequiredResult, ListResourcesResult, ListToolsResult,
    PaginatedRequestParams, ProgressNotificationParam, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::task_manager::{TaskExit, TaskManager, TaskOptions};
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Map, Value};

/// Calls of `slow` that were cancelled, in this process.
static CANCELLED: AtomicUsize = AtomicUsize::new(0);

/// Tables `book_table` booked, in this process.
static BOOKED: AtomicUsize = AtomicUsize::new(0);

/// `long_report` tasks that stopped on a `tasks/cancel`, in this process.
static CANCELLED_TASKS: AtomicUsize = AtomicUsize::new(0);

/// Set by `stall_listing`: `tools/list` never answers from then on.
static LISTING_STALLED: AtomicBool = AtomicBool::new(false);

#[derive(Clone, Default)]
struct TestServer {
    /// Tools added by `add_tool`, shared by every session of the process.
    added: Arc<Mutex<Vec<String>>>,
    /// The tasks of `long_report`, shared by every session of the process.
    tasks: Arc<TaskManager>,
}

fn schema(value: Value) -> Arc<Map<String, Value>> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => unreachable!("schemas are objects"),
    }
}

impl TestServer {
    fn tools(&self) -> Vec<Tool> {
        let empty = || schema(json!({"type": "object", "properties": {}}));
        let mut tools = vec![
            Tool::new(
                "slow",
                "Waits, reporting progress",
                schema(
                    json!({"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}),
                ),
            ),
            Tool::new(
                "cancelled_calls",
                "How many slow calls were cancelled",
                empty(),
            ),
            Tool::new(
                "plan",
                "Makes a plan",
                schema(json!({"type": "object", "properties": {
                    "title": {"type": "string"},
                    "steps": {"type": "array", "items": {"type": "string"}}
                }, "required": ["title", "steps"]})),
            ),
            Tool::new(
                "add_tool",
                "Adds a tool",
                schema(
                    json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
                ),
            ),
            Tool::new(
                "stall_listing",
                "Stops answering tools/list after announcing a change",
                empty(),
            ),
            Tool::new("whoami", "The identity headers of the call", empty()),
            Tool::new("meta", "The _meta of the call", empty()),
            Tool::new("ping", "Answers pong", empty()),
            Tool::new(
                "client_capabilities",
                "The capabilities the client declared",
                empty(),
            ),
            Tool::new(
                "book_table",
                "Books a table, asking the user for the party",
                schema(
                    json!({"type": "object", "properties": {"restaurant": {"type": "string"}}, "required": ["restaurant"]}),
                ),
            ),
            Tool::new("bookings", "How many tables were booked", empty()),
            Tool::new(
                "long_report",
                "Builds a report, as an MCP task when the client takes tasks",
                schema(
                    json!({"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}),
                ),
            ),
            Tool::new(
                "cancelled_tasks",
                "How many long_report tasks were cancelled",
                empty(),
            ),
            Tool::new(
                "plan_trip",
                "Plans a trip, asking for dates and a sign-in",
                schema(json!({"type": "object", "properties": {"city": {"type": "string"}}})),
            ),
        ];
        tools.extend(weather_tools());
        for name in self.added.lock().unwrap().iter() {
            tools.push(Tool::new(name.clone(), "An added tool", empty()));
        }
        tools
    }

    async fn slow(
        &self,
        arguments: &Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResult {
        let seconds = arguments
            .get("seconds")
            .and_then(Value::as_f64)
            .unwrap_or(1.0);
        let token = context.meta.get_progress_token();
        let steps = ((seconds * 10.0).ceil() as u64).max(1);
        for step in 1..=steps {
            tokio::select! {
                () = context.ct.cancelled() => {
                    CANCELLED.fetch_add(1, Ordering::SeqCst);
                    return CallToolResult::error(vec![ContentBlock::text("cancelled")]);
                }
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            if let Some(token) = &token {
                let progress = ProgressNotificationParam::new(token.clone(), step as f64)
                    .with_total(steps as f64)
                    .with_message(format!("step {step} of {steps}"));
                let _ = context.peer.notify_progress(progress).await;
            }
        }
        CallToolResult::success(vec![ContentBlock::text(format!("slept {seconds} s"))])
    }
}

/// The MCP App's HTML.
const WEATHER_APP: &str = include_str!("support/weather_app.html");

/// The weather app's tools, with their `_meta` as a server writes it.
fn weather_tools() -> Vec<Tool> {
    let city =
        json!({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]});
    let empty = json!({"type": "object", "properties": {}});
    let tool = |name: &str, description: &str, schema: &Value, meta: Value| -> Tool {
        serde_json::from_value(json!({
            "name": name, "description": description, "inputSchema": schema, "_meta": meta
        }))
        .expect("a tool")
    };
    vec![
        tool(
            "weather",
            "Shows the weather of a city",
            &city,
            json!({"ui": {"resourceUri": "ui://weather/app.html"}}),
        ),
        tool(
            "weather_refresh",
            "Refreshes the weather card",
            &city,
            json!({"ui": {"resourceUri": "ui://weather/app.html", "visibility": ["app"]}}),
        ),
        tool(
            "weather_legacy",
            "The weather card, named the old way",
            &empty,
            json!({"ui/resourceUri": "ui://weather/legacy.html"}),
        ),
        tool(
            "weather_admin",
            "Resets the weather station",
            &empty,
            json!({"ui": {"visibility": ["model"]}}),
        ),
        tool(
            "weather_future",
            "A tool for a kind of caller no client knows",
            &empty,
            json!({"ui": {"visibility": ["model", "robot"]}}),
        ),
    ]
}

/// The forecast of `city`: a text for the model and structured content for the app.
fn forecast(city: &str, refreshed: bool) -> CallToolResult {
    let verb = if refreshed { "Still sunny" } else { "Sunny" };
    let mut result =
        CallToolResult::success(vec![ContentBlock::text(format!("{verb} in {city}, 21 °C"))]);
    result.structured_content = Some(json!({"city": city, "temperature": 21, "sky": "sunny"}));
    result
}

fn form_question(message: &str, schema: Value) -> InputRequest {
    InputRequest::Elicitation(ElicitRequest::new(
        ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message.into(),
            requested_schema: serde_json::from_value(schema).expect("an elicitation schema"),
        },
    ))
}

/// `book_table`: one question, then the booking. The state names the restaurant, so a
/// retry with another state is a forgery (a real server would seal it).
fn book_table(request: &CallToolRequestParams) -> Result<CallToolResponse, ErrorData> {
    let restaurant = request
        .arguments
        .as_ref()
        .and_then(|a| a.get("restaurant"))
        .and_then(Value::as_str)
        .unwrap_or("somewhere")
        .to_owned();
    let expected_state = format!("book:{restaurant}");
    let Some(responses) = &request.input_responses else {
        let mut requests = InputRequests::new();
        requests.insert(
            "party".into(),
            form_question(
                &format!("How many people at {restaurant}, and under what name?"),
                json!({"type": "object", "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": 20},
                    "name": {"type": "string"}
                }, "required": ["size"]}),
            ),
        );
        return Ok(InputRequiredResult::new(Some(requests), Some(expected_state)).into());
    };
    if request.request_state.as_deref() != Some(expected_state.as_str()) {
        return Err(ErrorData::invalid_params("requestState was changed", None));
    }
    let answer = responses.get("party").cloned().unwrap_or_default();
    let text = match answer["action"].as_str() {
        Some("accept") => {
            BOOKED.fetch_add(1, Ordering::SeqCst);
            format!(
                "Booked a table for {} at {restaurant}",
                answer["content"]["size"]
            )
        }
        Some("decline") => "The user declined to give the party; nothing was booked".into(),
        _ => "The user cancelled the booking; nothing was booked".into(),
    };
    Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
}

/// `plan_trip`: two questions in one round, one of them a URL to visit.
fn plan_trip(request: &CallToolRequestParams) -> CallToolResponse {
    let Some(responses) = &request.input_responses else {
        let mut requests = InputRequests::new();
        requests.insert(
            "dates".into(),
            form_question(
                "When do you travel?",
                json!({"type": "object", "properties": {"from": {"type": "string"}, "to": {"type": "string"}}, "required": ["from", "to"]}),
            ),
        );
        requests.insert(
            "login".into(),
            InputRequest::Elicitation(ElicitRequest::new(
                ElicitRequestParams::UrlElicitationParams {
                    meta: None,
                    message: "Sign in to your travel account".into(),
                    url: "https://travel.example.test/login".into(),
                    elicitation_id: String::new(),
                },
            )),
        );
        return InputRequiredResult::new(Some(requests), Some("trip".into())).into();
    };
    let dates = &responses.get("dates").cloned().unwrap_or_default();
    let login = responses.get("login").cloned().unwrap_or_default();
    CallToolResult::success(vec![ContentBlock::text(format!(
        "Trip from {} to {}; sign-in {}",
        dates["content"]["from"], dates["content"]["to"], login["action"]
    ))])
    .into()
}

impl TestServer {
    /// `long_report`: a task for a client that takes them, else the work done inline.
    async fn long_report(
        &self,
        arguments: &Map<String, Value>,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let seconds = arguments
            .get("seconds")
            .and_then(Value::as_f64)
            .unwrap_or(1.0);
        let steps = (seconds * 10.0).ceil().max(1.0) as u32;
        let report = format!("The report is ready after {seconds} s");
        let takes_tasks = context
            .client_capabilities()
            .is_some_and(|capabilities| capabilities.supports_tasks());
        if !takes_tasks {
            tokio::time::sleep(Duration::from_millis(100 * u64::from(steps))).await;
            return CallToolResult::success(vec![ContentBlock::text(report)]).into();
        }
        let options = TaskOptions::new().with_poll_interval_ms(100);
        let task = self.tasks.spawn(options, move |task| {
            Box::pin(async move {
                for step in 1..=steps {
                    tokio::select! {
                        () = task.cancelled() => {
                            CANCELLED_TASKS.fetch_add(1, Ordering::SeqCst);
                            return Err(TaskExit::Cancelled);
                        }
                        () = tokio::time::sleep(Duration::from_millis(100)) => {}
                    }
                    task.set_status_message(format!("step {step} of {steps}"));
                }
                Ok(CallToolResult::success(vec![ContentBlock::text(report)]))
            })
        });
        CallToolResponse::Task(CreateTaskResult::new(task))
    }
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_resources()
                .enable_tasks()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        if LISTING_STALLED.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        Ok(serde_json::from_value(json!({"resources": [
            {"uri": "ui://weather/app.html", "name": "weather", "mimeType": "text/html;profile=mcp-app"},
            {"uri": "ui://weather/legacy.html", "name": "weather_legacy", "mimeType": "text/html;profile=mcp-app"},
            {"uri": "notes://secret.txt", "name": "secret", "mimeType": "text/plain"}
        ]}))
        .expect("a resource list"))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let (mime_type, text) = match request.uri.as_str() {
            "ui://weather/app.html" | "ui://weather/legacy.html" => {
                ("text/html;profile=mcp-app", WEATHER_APP)
            }
            "notes://secret.txt" => ("text/plain", "the secret notes"),
            other => {
                return Err(ErrorData::resource_not_found(
                    format!("no resource {other}"),
                    None,
                ))
            }
        };
        let result: ReadResourceResult = serde_json::from_value(json!({"contents": [
            {"uri": request.uri, "mimeType": mime_type, "text": text}
        ]}))
        .expect("a resource");
        Ok(result.into())
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        Ok(GetTaskResult::new(self.tasks.get_task(&request.task_id)?))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.tasks.cancel_task(&request.task_id)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = request.arguments.clone().unwrap_or_default();
        let text = |s: String| CallToolResult::success(vec![ContentBlock::text(s)]);
        let result = match request.name.as_ref() {
            "book_table" => return book_table(&request),
            "plan_trip" => return Ok(plan_trip(&request)),
            "bookings" => text(BOOKED.load(Ordering::SeqCst).to_string()),
            "long_report" => return Ok(self.long_report(&arguments, &context).await),
            "cancelled_tasks" => text(CANCELLED_TASKS.load(Ordering::SeqCst).to_string()),
            "weather" | "weather_refresh" => forecast(
                arguments
                    .get("city")
                    .and_then(Value::as_str)
                    .unwrap_or("nowhere"),
                request.name == "weather_refresh",
            ),
            "weather_legacy" => text("The legacy weather card".into()),
            "weather_admin" => text("The station was reset".into()),
            "weather_future" => text("Called by a robot".into()),
            "slow" => self.slow(&arguments, &context).await,
            "cancelled_calls" => text(CANCELLED.load(Ordering::SeqCst).to_string()),
            "ping" => text("pong".into()),
            "client_capabilities" => CallToolResult::structured(
                serde_json::to_value(context.client_capabilities()).unwrap_or_default(),
            ),
            "plan" => {
                let steps: Vec<Value> = arguments
                    .get("steps")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(|step| json!({"description": step, "done": false}))
                    .collect();
                CallToolResult::structured(
                    json!({"plan": {"title": arguments.get("title"), "steps": steps}}),
                )
            }
            "add_tool" => {
                let name = arguments
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("added")
                    .to_owned();
                self.added.lock().unwrap().push(name.clone());
                let _ = context.peer.notify_tool_list_changed().await;
                text(format!("added {name}"))
            }
            "stall_listing" => {
                LISTING_STALLED.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                text("listing stalled".into())
            }
            "whoami" => {
                let headers: Map<String, Value> = context
                    .extensions
                    .get::<axum::http::request::Parts>()
                    .map(|parts| {
                        parts
                            .headers
                            .iter()
                            .filter(|(name, _)| name.as_str().starts_with("x-agui-"))
                            .map(|(name, value)| {
                                (name.to_string(), json!(value.to_str().unwrap_or_default()))
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                CallToolResult::structured(Value::Object(headers))
            }
            "meta" => {
                let meta = serde_json::to_value(&context.meta).unwrap_or_default();
                // Without the progress token rmcp adds to every request.
                let meta = match meta {
                    Value::Object(mut meta) => {
                        meta.remove("progressToken");
                        Value::Object(meta)
                    }
                    _ => json!({}),
                };
                CallToolResult::structured(meta)
            }
            other if self.added.lock().unwrap().iter().any(|n| n == other) => {
                text(format!("{other} was called"))
            }
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        Ok(CallToolResponse::Complete(result))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mode = std::env::args().nth(1).unwrap_or_else(|| "stdio".into());
    let server = TestServer::default();
    if mode == "http" {
        use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
        use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
        let service = StreamableHttpService::new(
            move || Ok(server.clone()),
            Arc::new(LocalSessionManager::default()),
            StreamableHttpServerConfig::default(),
        );
        let router = axum::Router::new().nest_service("/mcp", service);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("http://{}/mcp", listener.local_addr()?);
        // Without TCP_NODELAY each small SSE answer waits for the client's delayed ACK (~40 ms).
        use axum::serve::ListenerExt;
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, router).await?;
    } else {
        let running = server.serve(rmcp::transport::stdio()).await?;
        running.waiting().await?;
    }
    Ok(())
}
