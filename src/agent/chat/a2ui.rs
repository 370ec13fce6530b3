//! `generate_a2ui`: a server tool that designs an A2UI surface with a model call of its own.
//!
//! The run's model calls `generate_a2ui {intent, description, target_surface_id, changes}`;
//! the tool makes an inner model call forced to call `render_a2ui {surfaceId, components,
//! data}` and streams that call onto the run's stream as `TOOL_CALL_START` / `TOOL_CALL_ARGS` /
//! `TOOL_CALL_END` under the outer call's message, so a client's A2UI middleware shows the
//! surface being built and paints it as the arguments arrive. The finished tree is checked
//! against the catalog the client registered (`tools::a2ui::validate`); a tree that fails is
//! never the result: the next attempt is told what was wrong, up to `max_attempts`. The outer
//! call's result is the surface's operations envelope, or, when every attempt failed,
//! `{"code": "a2ui_recovery_exhausted", "error", "attempts"}`, which the middleware shows as a
//! failure while the conversation goes on.
//!
//! Each inner call gets a result of its own (`{"status": "rendered"}` or `"invalid"` with the
//! problems), so the client's history stays well formed. Inner calls are the tool's own
//! business: their ids start with [`RENDER_ID_PREFIX`], and they are left out of what later
//! model calls see ([`without_inner_renders`]).
//!
//! The tool is offered when the agent's `a2ui.generate` says so: `always`, or `when_asked`
//! by a run whose `forwardedProps.injectA2UITool` is set (CopilotKit's A2UI middleware sends
//! it, with its own `render_a2ui` in the client tools, which the run's model is then not
//! offered: the generator is what calls it).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt};
use serde_json::{json, Value};
use tokio::sync::mpsc::Sender;
use tokio::time::Instant;
use tracing::Instrument;

use super::{parse_arguments, RunState, ToolCallOutcome};
use crate::agent::config::{A2uiGenerate, A2uiSettings};
use crate::agent::trace::{self, ModelCallTrace};
use crate::agent::{new_id, AgentError, RunRequest};
use crate::llm::{ChatMessage, ChatRequest, ChatToolCall, LlmClient, LlmEvent, ToolSpec};
use crate::protocol::{EventBody, Message, ToolResultContent};
use crate::tools::a2ui::{self, Catalog, Problem};
use crate::tools::{self, ToolError, ToolOutput};

/// The generator's name, as the model is offered it.
pub const GENERATE_TOOL: &str = "generate_a2ui";
/// The inner call's tool, unless the client's middleware named its own.
const RENDER_TOOL: &str = "render_a2ui";
/// The ids of inner calls start with this, which tells them apart in a later run's history.
pub(super) const RENDER_ID_PREFIX: &str = "a2ui_render_";
/// The surface id of a new surface whose model named none (or an unusable one).
const DEFAULT_SURFACE_ID: &str = "dynamic-surface";
/// The most argument text one inner call may stream: a bigger tree is refused unread.
const MAX_ARGUMENT_BYTES: usize = 256 * 1024;

const DESCRIPTION: &str = "Show the user a rich, interactive UI surface (cards, lists, forms, \
comparisons, dashboards) designed from the conversation by a second model call. Use \
intent='create' for new content; intent='update' with target_surface_id (and changes) to \
change a surface shown earlier. Do not repeat the surface's content in text afterwards.";

/// What one run knows for generating surfaces; present when the run offers the tool.
#[derive(Debug)]
pub(super) struct A2uiRun {
    /// The inner call's tool name: the one the client's middleware watches.
    render_tool: String,
    catalog: Option<Catalog>,
    /// The catalog a new surface names.
    catalog_id: String,
    /// The run's other context entries, for the inner call's prompt.
    context: String,
    guidelines: Option<String>,
    max_attempts: u32,
    timeout: Duration,
}

impl A2uiRun {
    /// The run's generator, if its agent's settings and the client's request offer one.
    pub(super) fn for_run(settings: &A2uiSettings, request: &RunRequest) -> Option<A2uiRun> {
        let injected = request
            .forwarded_props
            .as_ref()
            .and_then(|props| props.get("injectA2UITool"))
            .and_then(|inject| match inject {
                Value::Bool(true) => Some(RENDER_TOOL.to_owned()),
                Value::String(name) if tools::is_valid_tool_name(name) => Some(name.clone()),
                _ => None,
            });
        let offered = match settings.generate {
            A2uiGenerate::Always => true,
            A2uiGenerate::Never => false,
            A2uiGenerate::WhenAsked => injected.is_some(),
        };
        if !offered {
            return None;
        }
        let catalog = Catalog::from_context(&request.context);
        let catalog_id = settings
            .catalog_id
            .clone()
            .or_else(|| catalog.as_ref().and_then(|c| c.id.clone()))
            .unwrap_or_else(|| a2ui::BASIC_CATALOG_ID.to_owned());
        let context = request
            .context
            .iter()
            .filter(|entry| entry.description != a2ui::SCHEMA_CONTEXT_DESCRIPTION)
            .map(|entry| format!("## {}\n{}\n", entry.description, entry.value))
            .collect::<Vec<_>>()
            .join("\n");
        Some(A2uiRun {
            render_tool: injected.unwrap_or_else(|| RENDER_TOOL.to_owned()),
            catalog,
            catalog_id,
            context,
            guidelines: settings.guidelines.clone(),
            max_attempts: settings.max_attempts.max(1),
            timeout: Duration::from_secs(settings.timeout_secs),
        })
    }

    /// The client tool the run's model is not offered, since the generator calls it.
    pub(super) fn render_tool(&self) -> &str {
        &self.render_tool
    }

    /// `generate_a2ui` as the run's model is offered it.
    pub(super) fn spec() -> ToolSpec {
        ToolSpec {
            name: GENERATE_TOOL.to_owned(),
            description: DESCRIPTION.to_owned(),
            parameters: Arc::new(json!({
                "type": "object",
                "properties": {
                    "intent": {
                        "type": "string",
                        "enum": ["create", "update"],
                        "description": "'create' (the default) for a new surface, 'update' to change one shown earlier."
                    },
                    "description": {
                        "type": "string",
                        "description": "What the surface should show, with the data to show in it."
                    },
                    "target_surface_id": {
                        "type": "string",
                        "description": "With intent='update': the id of the surface to change."
                    },
                    "changes": {
                        "type": "string",
                        "description": "With intent='update': what to change."
                    }
                }
            })),
        }
    }

    /// The inner call's tool.
    fn render_spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.render_tool.clone(),
            description: "Render an A2UI v0.9 surface.".to_owned(),
            parameters: Arc::new(json!({
                "type": "object",
                "properties": {
                    "surfaceId": {"type": "string", "description": "A short id naming the surface."},
                    "components": {
                        "type": "array",
                        "items": {"type": "object"},
                        "description": "The flat A2UI v0.9 component array; the root component has id \"root\"."
                    },
                    "data": {"type": "object", "description": "The surface's data model, written at \"/\"."}
                },
                "required": ["surfaceId", "components"]
            })),
        }
    }

    /// The inner call's instructions: how to design, the catalog, the run's context, and
    /// for an update the surface as it stands.
    fn prompt(&self, prior: Option<(&str, &a2ui::PriorSurface)>) -> String {
        let render = &self.render_tool;
        let mut prompt = self.guidelines.clone().unwrap_or_else(|| {
            format!(
                "You design one user interface surface with A2UI v0.9 for the conversation \
                 below. Call `{render}` once with:\n\
                 - `surfaceId`: a short kebab-case id naming what the surface shows;\n\
                 - `components`: a flat array. Each component has a unique `id` and a \
                 `component` type from the catalog; the root has id \"root\" and is a layout \
                 component (Column, Row or Card). Children are referenced by id with `child` or \
                 `children`; `\"children\": {{\"componentId\": \"card\", \"path\": \"/items\"}}` \
                 repeats the `card` template for each item of the data model's `items`. A \
                 component never references itself;\n\
                 - `data`: the data model. Bind a property to it with `{{\"path\": \"/key\"}}`, \
                 or with a relative path (`{{\"path\": \"name\"}}`) inside a repeated template.\n\
                 Use only the components and properties the catalog lists, and real content, \
                 not placeholders."
            )
        });
        prompt.push_str("\n\n## Available Components\n");
        match &self.catalog {
            Some(catalog) => prompt.push_str(&catalog.text),
            None => prompt.push_str(&format!(
                "A2UI's basic catalog ({}).",
                a2ui::BASIC_CATALOG_ID
            )),
        }
        if !self.context.is_empty() {
            prompt.push_str("\n\n");
            prompt.push_str(&self.context);
        }
        if let Some((surface_id, prior)) = prior {
            prompt.push_str(&format!(
                "\n\n## Editing surface '{surface_id}'\nProduce the whole updated components \
                 array and data model, not a difference, with the same surfaceId. Keep the ids \
                 of components the user did not ask to change.\n### Components now\n{}\n### \
                 Data now\n{}\n",
                prior.components,
                prior.data.clone().unwrap_or(Value::Null)
            ));
        }
        prompt
    }
}

/// A client's history without the generator's inner calls and their results: they are the
/// tool's own business, and a model offered no such tool should not see calls of it.
pub(super) fn without_inner_renders(messages: &[Message]) -> Cow<'_, [Message]> {
    let inner = |id: &str| id.starts_with(RENDER_ID_PREFIX);
    let any = messages.iter().any(|message| match message {
        Message::Assistant(m) => m.tool_calls.iter().any(|c| inner(&c.id)),
        Message::Tool(m) => inner(&m.tool_call_id),
        _ => false,
    });
    if !any {
        return Cow::Borrowed(messages);
    }
    let kept = messages
        .iter()
        .filter_map(|message| match message {
            Message::Tool(m) if inner(&m.tool_call_id) => None,
            Message::Assistant(m) if m.tool_calls.iter().any(|c| inner(&c.id)) => {
                let mut m = m.clone();
                m.tool_calls.retain(|c| !inner(&c.id));
                let empty =
                    m.tool_calls.is_empty() && m.content.as_deref().unwrap_or("").is_empty();
                (!empty).then_some(Message::Assistant(m))
            }
            other => Some(other.clone()),
        })
        .collect();
    Cow::Owned(kept)
}

impl RunState {
    /// A `generate_a2ui` call as a future that always completes, like a server tool call.
    pub(super) fn generate_surface(
        &mut self,
        call: ChatToolCall,
        parent_message_id: String,
    ) -> BoxFuture<'static, ToolCallOutcome> {
        let events = self
            .tool_events
            .get_or_insert_with(tools::ToolEventChannel::new)
            .sender
            .clone();
        // The conversation before the turn that made the call: what the surface is about.
        let upto = self
            .history
            .iter()
            .rposition(|m| {
                matches!(m, ChatMessage::Assistant { tool_calls, .. }
                    if tool_calls.iter().any(|c| c.id == call.id))
            })
            .unwrap_or(self.history.len());
        let conversation: Vec<ChatMessage> = self.history[..upto]
            .iter()
            .filter(|m| !matches!(m, ChatMessage::System { .. }))
            .cloned()
            .collect();
        let results: Vec<String> = self
            .history
            .iter()
            .filter_map(|m| match m {
                ChatMessage::Tool { content, .. } => Some(content.clone()),
                _ => None,
            })
            .collect();
        let generation = Generation {
            llm: self.llm.clone(),
            model: self.model.clone(),
            thread_id: self.thread_id.clone(),
            run: self.a2ui.clone(),
            events,
            parent_message_id: parent_message_id.clone(),
            conversation,
            results,
        };
        let span = trace::tool_span(&call);
        let traced = span.clone();
        let agent = self.config.name.clone();
        async move {
            let started = std::time::Instant::now();
            let output = generation.run(&call).await;
            trace::record_tool_call(&traced, &call, &output);
            trace::record_tool_duration(&agent, &call, &output, started);
            ToolCallOutcome {
                call,
                output,
                parent_message_id: Some(parent_message_id),
            }
        }
        .instrument(span)
        .boxed()
    }
}

/// One `generate_a2ui` call: everything it needs, owned, so it runs beside the run's other
/// tool calls.
struct Generation {
    llm: LlmClient,
    model: String,
    thread_id: String,
    run: Option<Arc<A2uiRun>>,
    events: Sender<EventBody>,
    parent_message_id: String,
    conversation: Vec<ChatMessage>,
    /// The run's tool results so far, where an earlier surface is found for an update.
    results: Vec<String>,
}

/// How one attempt went.
enum Attempt {
    /// The tree passed: the envelope to answer with.
    Painted(Value),
    Failed(Vec<Problem>),
}

impl Generation {
    async fn run(self, call: &ChatToolCall) -> Result<ToolOutput, ToolError> {
        let run = self
            .run
            .clone()
            .ok_or_else(|| ToolError::Unknown(call.name.clone()))?;
        let arguments = parse_arguments(&call.arguments)?;
        let text = |key: &str| arguments.get(key).and_then(Value::as_str).map(str::trim);
        let update = text("intent") == Some("update");
        let target = text("target_surface_id").filter(|id| !id.is_empty());
        let prior = match (update, target) {
            (false, _) => None,
            (true, None) => {
                return Err(ToolError::InvalidArguments(
                    "intent 'update' needs target_surface_id".into(),
                ))
            }
            (true, Some(id)) => {
                let texts = self.results.iter().map(String::as_str);
                let prior = a2ui::prior_surface(texts, id).ok_or_else(|| {
                    ToolError::Failed(format!("no surface '{id}' was shown in this conversation"))
                })?;
                Some((id.to_owned(), prior))
            }
        };
        // What to show goes in the instructions, not in a message of its own: the
        // conversation's last message stays the user's (or a tool's), as it was for the call.
        let mut prompt = run.prompt(prior.as_ref().map(|(id, p)| (id.as_str(), p)));
        for (key, heading) in [
            ("description", "What to show"),
            ("changes", "What to change"),
        ] {
            if let Some(value) = text(key).filter(|v| !v.is_empty()) {
                prompt.push_str(&format!("\n\n## {heading}\n{value}"));
            }
        }
        let deadline = Instant::now() + run.timeout;
        let mut attempts = Vec::new();
        let mut problems: Vec<Problem> = Vec::new();
        for attempt in 1..=run.max_attempts {
            let mut system = prompt.clone();
            if !problems.is_empty() {
                system.push_str(
                    // The heading other A2UI generators use, which test fixtures look for.
                    "\n\n## Previous attempt was invalid: fix these and call again\n",
                );
                for problem in &problems {
                    system.push_str(&format!(
                        "- [{}] {}: {}\n",
                        problem.code, problem.path, problem.message
                    ));
                }
            }
            let mut messages = Vec::with_capacity(self.conversation.len() + 1);
            messages.push(ChatMessage::System { content: system });
            messages.extend(self.conversation.iter().cloned());
            let request = ChatRequest {
                model: Some(self.model.clone()),
                messages,
                tools: vec![run.render_spec()],
                forced_tool: Some(run.render_tool.clone()),
            };
            let target = prior.as_ref().map(|(id, p)| (id.as_str(), p));
            match self.attempt(&run, request, target, deadline).await? {
                Attempt::Painted(envelope) => {
                    return Ok(ToolOutput {
                        content: envelope,
                        state: None,
                        activity: None,
                    })
                }
                Attempt::Failed(found) => {
                    attempts.push(json!({"attempt": attempt, "ok": false, "errors": found}));
                    problems = found;
                }
            }
        }
        tracing::warn!(
            attempts = run.max_attempts,
            "no valid A2UI surface was generated"
        );
        Ok(ToolOutput {
            content: json!({
                "error": format!(
                    "Failed to generate valid A2UI after {} attempt(s)",
                    run.max_attempts
                ),
                "code": "a2ui_recovery_exhausted",
                "attempts": attempts,
            }),
            state: None,
            activity: None,
        })
    }

    /// One inner model call, streamed onto the run's stream and checked. `Err` ends the
    /// generation: its time is up, or the run is gone.
    async fn attempt(
        &self,
        run: &A2uiRun,
        request: ChatRequest,
        prior: Option<(&str, &a2ui::PriorSurface)>,
        deadline: Instant,
    ) -> Result<Attempt, ToolError> {
        // A model call like the run's: its own span (under the tool's), metrics and tokens.
        let target = self.llm.call_target();
        let mut trace =
            ModelCallTrace::start(self.llm.provider_id(), &self.thread_id, &target, &request);
        let mut stream = trace.traced_events(self.llm.stream_chat(request));
        let call_id = format!("{RENDER_ID_PREFIX}{}", new_id("call"));
        let mut index = None;
        let mut arguments = String::new();
        let mut failure: Option<Problem> = None;
        loop {
            let Ok(next) = tokio::time::timeout_at(deadline, stream.next()).await else {
                if index.is_some() {
                    let status = json!({"status": "timeout"});
                    self.close(&call_id, status).await?;
                }
                return Err(ToolError::Timeout(run.timeout));
            };
            match next {
                None => break,
                Some(Err(error)) => {
                    let error = AgentError::from(error);
                    trace.on_error(error.code());
                    failure = Some(problem(
                        "model_error",
                        format!("the model call failed: {}", error.public_message()),
                    ));
                    break;
                }
                Some(Ok(event)) => {
                    trace.on_event(&event);
                    let LlmEvent::ToolCallDelta {
                        index: at,
                        name,
                        arguments: fragment,
                        ..
                    } = event
                    else {
                        continue;
                    };
                    if index.is_none() && name.as_deref() == Some(run.render_tool.as_str()) {
                        index = Some(at);
                        self.send(EventBody::tool_call_start(
                            call_id.clone(),
                            run.render_tool.clone(),
                            Some(self.parent_message_id.clone()),
                        ))
                        .await?;
                    }
                    if index != Some(at) || fragment.is_empty() {
                        continue;
                    }
                    if arguments.len() + fragment.len() > MAX_ARGUMENT_BYTES {
                        failure = Some(problem(
                            "too_large",
                            format!("the surface is over {MAX_ARGUMENT_BYTES} bytes"),
                        ));
                        break;
                    }
                    arguments.push_str(&fragment);
                    self.send(EventBody::tool_call_args(call_id.clone(), fragment))
                        .await?;
                }
            }
        }
        drop(stream);
        if failure.is_none() {
            let call = index.map(|_| {
                (
                    call_id.as_str(),
                    Some(run.render_tool.as_str()),
                    arguments.as_str(),
                )
            });
            trace.on_answer("", call.into_iter());
        }
        if index.is_none() {
            let missing = problem(
                "empty_components",
                format!("the model did not call {}", run.render_tool),
            );
            return Ok(Attempt::Failed(vec![failure.unwrap_or(missing)]));
        }
        let checked = match failure {
            Some(failure) => Err(vec![failure]),
            None => self.check(run, &arguments, prior),
        };
        match checked {
            Ok((surface_id, envelope)) => {
                let status = json!({"status": "rendered", "surfaceId": surface_id});
                self.close(&call_id, status).await?;
                Ok(Attempt::Painted(envelope))
            }
            Err(problems) => {
                let status = json!({"status": "invalid", "errors": problems});
                self.close(&call_id, status).await?;
                Ok(Attempt::Failed(problems))
            }
        }
    }

    /// The surface an inner call's arguments describe, as its envelope, or what is wrong.
    fn check(
        &self,
        run: &A2uiRun,
        arguments: &str,
        prior: Option<(&str, &a2ui::PriorSurface)>,
    ) -> Result<(String, Value), Vec<Problem>> {
        let parsed: Value = serde_json::from_str(arguments).map_err(|e| {
            vec![problem(
                "invalid_arguments",
                format!("the arguments are not valid JSON ({e})"),
            )]
        })?;
        let components = parsed.get("components").cloned().unwrap_or(Value::Null);
        let data = match parsed.get("data") {
            Some(Value::Object(data)) => Value::Object(data.clone()),
            _ => json!({}),
        };
        let problems = a2ui::validate(&components, Some(&data), run.catalog.as_ref());
        if !problems.is_empty() {
            return Err(problems);
        }
        let (surface_id, catalog_id) = match prior {
            // An existing surface is updated in place: `createSurface` again is invalid.
            Some((id, _)) => (id.to_owned(), None),
            None => {
                let named = parsed
                    .get("surfaceId")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty() && id.len() <= 128)
                    .unwrap_or(DEFAULT_SURFACE_ID);
                (named.to_owned(), Some(run.catalog_id.as_str()))
            }
        };
        let envelope = a2ui::operations(&surface_id, catalog_id, components, Some(data));
        Ok((surface_id, envelope))
    }

    /// Ends an inner call: its `TOOL_CALL_END` and its result.
    async fn close(&self, call_id: &str, status: Value) -> Result<(), ToolError> {
        self.send(EventBody::tool_call_end(call_id.to_owned()))
            .await?;
        self.send(EventBody::tool_call_result(
            new_id("msg"),
            call_id.to_owned(),
            ToolResultContent::Text(status.to_string()),
        ))
        .await
    }

    async fn send(&self, event: EventBody) -> Result<(), ToolError> {
        self.events
            .send(event)
            .await
            .map_err(|_| ToolError::Failed("the run is over".into()))
    }
}

fn problem(code: &'static str, message: String) -> Problem {
    Problem {
        code,
        path: "components".into(),
        message,
    }
}
