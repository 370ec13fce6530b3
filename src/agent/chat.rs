//! `ChatAgent`: the base agent. It streams a model's reply as AG-UI events, runs server-side
//! tools, feeds their results back, and loops until the model answers, calls a client tool, or
//! reaches the iteration limit.
//!
//! One model call is a *turn*. Everything a turn produces hangs off one assistant message id:
//! the text message uses it, and every tool call of the turn names it as `parentMessageId` (a
//! client that sees the text start first appends the calls to that message; one that sees a
//! call first creates the message, and the text then appends to it). Tool calls are keyed by the
//! upstream `index`, so interleaved parallel calls stay apart. `TOOL_CALL_END` goes out when the
//! turn ends, because only then are a call's arguments known to be complete.
//!
//! When a turn calls client tools (those listed in the request's `tools`), the server tools of
//! the same turn still run and their results are sent; then the run ends with the client calls
//! pending. The next run carries the client's results and continues.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use futures_util::stream::{self, BoxStream, FuturesOrdered};
use futures_util::{FutureExt, StreamExt};
use serde_json::Value;
use tracing::Instrument;

use super::approval::ApprovalPolicies;
use super::config::{ToolNameClash, ToolStateRule, ToolStateSource};
use super::history::{insert_tool_result, to_chat_messages};
use super::state_view::{apply_update, follow_event, keeping_keys};
use super::trace::{self, ModelCallTrace};
use super::{
    new_id, Agent, AgentError, AgentStream, AgentUpdate, ApprovalRequest, DecisionOutcome,
    RunRequest, ToolDecision, ALREADY_DECIDED,
};
use crate::llm::{ChatMessage, ChatRequest, ChatToolCall, LlmClient, LlmError, LlmEvent, ToolSpec};
use crate::protocol::{EventBody, TokenUsage, ToolResultContent};
use crate::telemetry::genai;
use crate::tools::{self, StateUpdate, ToolContext, ToolError, ToolOutput, ToolRegistry};

/// How a `ChatAgent` behaves, from its `agents.<name>` settings.
#[derive(Debug, Clone)]
pub struct ChatAgentConfig {
    pub name: String,
    pub instructions: String,
    /// Overrides the client's default model.
    pub model: Option<String>,
    pub max_iterations: u32,
    pub tool_timeout: Duration,
    /// Tools whose calls get a timeout of their own instead of `tool_timeout` (subagents,
    /// whose whole run is one call).
    pub tool_timeouts: std::collections::BTreeMap<String, Duration>,
    pub tool_name_clash: ToolNameClash,
    /// Tools whose arguments or results update the shared state.
    pub state_rules: Vec<ToolStateRule>,
    /// The keys of the state its subagents' states live under: a whole-state snapshot of one
    /// of its own tools keeps them.
    pub subagent_state_keys: Vec<String>,
    /// Which server tool calls wait for a person.
    pub approvals: ApprovalPolicies,
    /// The tool result the model sees for a declined call.
    pub rejected_message: String,
    /// Server tools' progress reports are sent as `ACTIVITY_*` events (`chat/activities.rs`).
    pub tool_activities: bool,
    /// The tools whose calls run as background tasks, and those tasks (`chat/background.rs`).
    pub background: tools::background::BackgroundTasks,
    /// When `generate_a2ui` is offered and how it designs a surface (`chat/a2ui.rs`).
    pub a2ui: super::config::A2uiSettings,
}

/// The base agent. Cheap to share: everything is behind `Arc` or `Clone`.
#[derive(Debug, Clone)]
pub struct ChatAgent {
    llm: LlmClient,
    config: Arc<ChatAgentConfig>,
    tools: ToolRegistry,
}

impl ChatAgent {
    pub fn new(llm: LlmClient, config: ChatAgentConfig, tools: ToolRegistry) -> Self {
        ChatAgent {
            llm,
            config: Arc::new(config),
            tools,
        }
    }
}

impl Agent for ChatAgent {
    fn run(&self, request: RunRequest) -> Result<AgentStream, AgentError> {
        let a2ui = A2uiRun::for_run(&self.config.a2ui, &request).map(Arc::new);
        let RunTools {
            server_tools,
            client_tools,
            specs: tool_specs,
        } = self.tools_for_run(&request.tools, a2ui.as_deref())?;

        // Calls a person decided on are answered below, not by the history repair.
        let decided: HashSet<String> = request
            .decisions
            .iter()
            .map(|d| d.tool_call_id.clone())
            .collect();
        let history = to_chat_messages(
            Some(prompt::system_prompt(
                &self.config.instructions,
                &request.prompt_sections,
                &request.context,
            )),
            &a2ui::without_inner_renders(&request.messages),
            &decided,
        );
        if !history
            .iter()
            .any(|m| !matches!(m, ChatMessage::System { .. }))
        {
            // Nothing to answer (e.g. a client hydrating an empty thread): an empty run, rather
            // than a request most providers reject.
            return Ok(stream::empty().boxed());
        }

        let mut state = RunState {
            llm: self.llm.clone(),
            config: self.config.clone(),
            model: agent_model(&self.llm, self.config.model.as_deref()).model,
            server_tools,
            client_tools,
            tool_specs,
            history,
            scope: request.scope,
            thread_id: request.thread_id,
            run_id: request.run_id,
            state: request
                .state
                .unwrap_or_else(|| Value::Object(Default::default())),
            model_calls: 0,
            queue: TurnUpdates::new(),
            phase: Phase::CallModel,
            progress: None,
            tool_events: None,
            a2ui,
            activities: None,
            // The pump calls `run` inside the run's span.
            run_span: tracing::Span::current(),
            run_tokens: (0, 0),
            started: std::time::Instant::now(),
        };
        let (provider, model) = state.provider_and_model();
        trace::record_agent_model(&state.run_span, provider, model);
        state.start_with_decisions(request.decisions);
        state.deliver_background_results();
        Ok(stream::unfold(Box::new(state), RunState::next).boxed())
    }
}

/// The run's tokens go on its span once, when the run is over (finished, failed or dropped):
/// a span attribute recorded twice would be exported twice. Its duration is recorded then too.
impl Drop for RunState {
    fn drop(&mut self) {
        let tokens = (self.model_calls > 0).then_some(self.run_tokens);
        let (provider, model) = self.provider_and_model();
        trace::record_run_end(
            &self.run_span,
            &self.config.name,
            (provider, model),
            tokens,
            self.started,
        );
    }
}

/// The state of one run between two polls.
struct RunState {
    llm: LlmClient,
    config: Arc<ChatAgentConfig>,
    model: String,
    server_tools: ToolRegistry,
    client_tools: HashSet<String>,
    tool_specs: Vec<ToolSpec>,
    /// The conversation as sent upstream, growing with each turn and tool result.
    history: Vec<ChatMessage>,
    /// Who asked (see [`RunRequest::scope`]): tools name their calls with it.
    scope: String,
    thread_id: String,
    run_id: String,
    /// The server's view of the shared state: the client's, plus every update sent since.
    state: Value,
    model_calls: u32,
    /// Updates produced but not yet yielded.
    queue: TurnUpdates,
    phase: Phase,
    /// Made when the run first calls a server tool: most runs call none, and the channel's
    /// first block of slots is 3 KB.
    progress: Option<tools::ProgressChannel>,
    /// Made when the run first calls a server tool, like `progress`: the events its tools put
    /// on the stream themselves.
    tool_events: Option<tools::ToolEventChannel>,
    /// The run's `generate_a2ui`, when it offers one.
    a2ui: Option<Arc<A2uiRun>>,
    /// Made on the first progress report of a run whose agent sends activities.
    activities: Option<Box<ToolActivities>>,
    /// The run's span (`invoke_agent`), which sums the tokens of its model calls.
    run_span: tracing::Span,
    /// Input and output tokens of the run's model calls so far.
    run_tokens: (u64, u64),
    started: std::time::Instant,
}

// Phase lives inside the boxed RunState and is replaced in place, never moved around:
// boxing the streaming turn would buy an allocation per model call and nothing else.
#[allow(clippy::large_enum_variant)]
enum Phase {
    CallModel,
    Streaming {
        events: BoxStream<'static, Result<LlmEvent, LlmError>>,
        turn: Turn,
        trace: ModelCallTrace,
    },
    RunningTools {
        running: FuturesOrdered<BoxFuture<'static, ToolCallOutcome>>,
        /// A client tool is pending: end the run once the server tools are done.
        then_stop: bool,
    },
    Done,
}

impl RunState {
    /// One update. The state is boxed because `stream::unfold` moves it into a new future for
    /// every update: a pointer, not the whole run, is what gets copied per streamed fragment.
    async fn next(mut self: Box<Self>) -> Option<(Result<AgentUpdate, AgentError>, Box<RunState>)> {
        loop {
            if !self.queue.is_empty() {
                let update = self.queue.remove(0);
                if self.queue.is_empty() && self.queue.spilled() {
                    // Back inline: a spilled queue would keep its heap block for the stream.
                    self.queue.shrink_to_fit();
                }
                return Some((Ok(update), self));
            }
            // A streaming turn is polled where it lies: moved out for the wait, as the other
            // phases are, its stream, turn and trace would take a second place in this future
            // beside the one in the state, for the whole of every wait for the model.
            if let Phase::Streaming { events, .. } = &mut self.phase {
                match events.next().await {
                    Some(Ok(event)) => self.on_model_event(event),
                    Some(Err(error)) => {
                        let error = AgentError::from(error);
                        if let Phase::Streaming {
                            events: _events,
                            turn: _turn,
                            trace,
                        } = std::mem::replace(&mut self.phase, Phase::Done)
                        {
                            trace.on_error(error.code());
                        }
                        return Some((Err(error), self));
                    }
                    None => {
                        if let Phase::Streaming {
                            events: _events,
                            turn,
                            trace,
                        } = std::mem::replace(&mut self.phase, Phase::Done)
                        {
                            let calls = turn.calls.iter();
                            trace.on_answer(&turn.text, calls.map(TurnCall::traced));
                            if let Err(error) = self.end_turn(turn) {
                                return Some((Err(error), self));
                            }
                        }
                    }
                }
                continue;
            }
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Done => return None,
                Phase::CallModel => {
                    if let Err(error) = self.call_model() {
                        return Some((Err(error), self));
                    }
                }
                // Polled in place above.
                streaming @ Phase::Streaming { .. } => self.phase = streaming,
                Phase::RunningTools {
                    mut running,
                    then_stop,
                } => tokio::select! {
                    biased;
                    Some(progress) = next_progress(self.progress.as_mut()) => {
                        if self.config.tool_activities {
                            let mut events = Vec::new();
                            self.activities
                                .get_or_insert_with(Box::default)
                                .progress(&progress, &mut events);
                            self.queue.extend(events.into_iter().map(AgentUpdate::Event));
                        }
                        self.queue.push(AgentUpdate::ToolProgress(progress));
                        self.phase = Phase::RunningTools { running, then_stop };
                    }
                    // Before the calls' results: a tool's events come before its result.
                    Some(event) = next_tool_event(self.tool_events.as_mut()) => {
                        follow_event(&mut self.state, &event);
                        self.queue.push(AgentUpdate::Event(event));
                        self.phase = Phase::RunningTools { running, then_stop };
                    }
                    finished = running.next() => match finished {
                        Some(outcome) => {
                            // What the call sent in the poll that finished it is still in
                            // the channel, and goes before its result.
                            if let Some(channel) = self.tool_events.as_mut() {
                                while let Ok(event) = channel.receiver.try_recv() {
                                    follow_event(&mut self.state, &event);
                                    self.queue.push(AgentUpdate::Event(event));
                                }
                            }
                            let asked = self.finish_tool_call(outcome);
                            let then_stop = then_stop || asked;
                            self.phase = Phase::RunningTools { running, then_stop };
                        }
                        None if then_stop => self.phase = Phase::Done,
                        None => self.phase = Phase::CallModel,
                    },
                },
            }
        }
    }

    /// One event of the streaming turn's model: its usage, or what it becomes in the turn.
    fn on_model_event(&mut self, event: LlmEvent) {
        if let Phase::Streaming { trace, .. } = &mut self.phase {
            trace.on_event(&event);
        }
        if let LlmEvent::Usage(usage) = &event {
            self.add_run_tokens(usage);
            let usage = self.token_usage(usage);
            self.queue.push(AgentUpdate::Usage(usage));
        } else if let Phase::Streaming { turn, .. } = &mut self.phase {
            turn.apply(event, &mut self.queue);
        }
    }

    /// Starts the next model call with the history so far, unless the run has used its
    /// `max_iterations`.
    fn call_model(&mut self) -> Result<(), AgentError> {
        if self.model_calls >= self.config.max_iterations {
            return Err(AgentError::MaxIterations(self.model_calls));
        }
        self.model_calls += 1;
        let request = ChatRequest {
            model: Some(self.model.clone()),
            messages: self.history.clone(),
            tools: self.tool_specs.clone(),
            forced_tool: None,
        };
        let (provider, _) = self.provider_and_model();
        let target = self.llm.call_target();
        let trace = ModelCallTrace::start(provider, &self.thread_id, &target, &request);
        self.phase = Phase::Streaming {
            events: trace.traced_events(self.llm.stream_chat(request)),
            turn: Turn::new(),
            trace,
        };
        Ok(())
    }

    /// The provider and model of this run's model calls: the one place the run's usage, its
    /// spans and so its metrics take them from.
    fn provider_and_model(&self) -> (&'static str, &str) {
        (self.llm.provider_id(), &self.model)
    }

    fn add_run_tokens(&mut self, usage: &crate::llm::Usage) {
        let (input, output) = &mut self.run_tokens;
        *input = input.saturating_add(usage.input_tokens);
        *output = output.saturating_add(usage.output_tokens);
    }

    /// A model call's token counts as the run reports them.
    fn token_usage(&self, usage: &crate::llm::Usage) -> TokenUsage {
        let (provider, model) = self.provider_and_model();
        TokenUsage {
            provider: Some(provider.to_owned()),
            model: Some(model.to_owned()),
            input_tokens: Some(usage.input_tokens),
            output_tokens: Some(usage.output_tokens),
            total_tokens: Some(usage.input_tokens.saturating_add(usage.output_tokens)),
            reasoning_tokens: usage.reasoning_tokens,
            cached_input_tokens: usage.cached_input_tokens,
            cache_write_input_tokens: None,
        }
    }

    /// Carries out what a person decided on calls of an earlier run: an approved call runs (its
    /// result answers the original call id; no new `TOOL_CALL_START`), a declined one never runs
    /// and the model is told so. A decision an earlier run acted on runs nothing either: its
    /// call is answered with [`ALREADY_DECIDED`], so the history stays well-formed whatever
    /// the client dropped, and the model does not try again. Then the model continues.
    fn start_with_decisions(&mut self, decisions: Vec<ToolDecision>) {
        let mut running = FuturesOrdered::new();
        for decision in decisions {
            let approved = matches!(
                decision.outcome,
                DecisionOutcome::Approved { .. }
                    | DecisionOutcome::Answered { .. }
                    | DecisionOutcome::Elicited { .. }
            );
            if decision.outcome != DecisionOutcome::AlreadyDecided {
                genai::approval_decided(&decision.tool_name, &decision.tool_call_id, approved);
            }
            match decision.outcome {
                DecisionOutcome::Approved { arguments } => running.push_back(self.run_server_tool(
                    ChatToolCall {
                        id: decision.tool_call_id,
                        name: decision.tool_name,
                        arguments: arguments.to_string(),
                    },
                    None,
                    None,
                )),
                DecisionOutcome::Elicited {
                    arguments,
                    answers,
                    parent_message_id,
                } => running.push_back(self.run_server_tool(
                    ChatToolCall {
                        id: decision.tool_call_id,
                        name: decision.tool_name,
                        arguments: arguments.to_string(),
                    },
                    Some(answers),
                    parent_message_id,
                )),
                DecisionOutcome::Declined => {
                    let content = self
                        .config
                        .approvals
                        .declined_result(&decision.tool_name)
                        .unwrap_or(&self.config.rejected_message)
                        .to_owned();
                    self.emit_tool_result(decision.tool_call_id, content, Vec::new());
                }
                DecisionOutcome::Answered { answer } => {
                    self.emit_tool_result(decision.tool_call_id, answer.to_string(), Vec::new());
                }
                DecisionOutcome::AlreadyDecided => {
                    let content = ALREADY_DECIDED.to_owned();
                    self.emit_tool_result(decision.tool_call_id, content, Vec::new());
                }
            }
        }
        if !running.is_empty() {
            self.phase = Phase::RunningTools {
                running,
                then_stop: false,
            };
        }
    }

    /// Closes the turn, records it in the history, and starts its server tools.
    fn end_turn(&mut self, turn: Turn) -> Result<(), AgentError> {
        let parent_message_id = turn.message_id.clone();
        let TurnOutput {
            text: content,
            calls,
            reasoning,
        } = turn.finish(&mut self.queue)?;
        if content.is_none() && calls.is_empty() {
            return Ok(()); // phase stays Done: the model said all it had to say
        }
        self.history.push(ChatMessage::Assistant {
            reasoning,
            content,
            tool_calls: calls.clone(),
        });
        if calls.is_empty() {
            return Ok(());
        }
        for call in &calls {
            self.apply_argument_rules(call);
        }
        let mut running = FuturesOrdered::new();
        // A client call or an approval leaves something for the client: the run ends after
        // the server tools of this turn.
        let mut waits_for_client = false;
        for call in calls {
            if call.name == a2ui::GENERATE_TOOL && self.a2ui.is_some() {
                running.push_back(self.generate_surface(call, parent_message_id.clone()));
                continue;
            }
            if self.client_tools.contains(&call.name) {
                waits_for_client = true;
                continue;
            }
            if let Ok(arguments) = parse_arguments(&call.arguments) {
                if self
                    .config
                    .approvals
                    .requires_approval(&call.name, &arguments)
                {
                    waits_for_client = true;
                    self.ask_the_client(call, arguments, parent_message_id.clone(), None);
                    continue;
                }
            }
            if self.config.background.runs(&call.name) {
                running.push_back(self.start_in_background(call, parent_message_id.clone()));
                continue;
            }
            running.push_back(self.run_server_tool(call, None, Some(parent_message_id.clone())));
        }
        if running.is_empty() {
            return Ok(()); // the run ends with client calls or approvals pending
        }
        self.phase = Phase::RunningTools {
            running,
            then_stop: waits_for_client,
        };
        Ok(())
    }

    /// The last update of a call's activity (when it reported progress), before its result.
    /// A state update that does not apply fails the call after this, which the result says.
    fn end_activity(&mut self, tool_call_id: &str, ending: Ending) {
        if let Some(activities) = self.activities.as_mut() {
            let mut events = Vec::new();
            activities.finish(tool_call_id, ending, &mut events);
            self.queue
                .extend(events.into_iter().map(AgentUpdate::Event));
        }
    }

    /// Hands a call that waits for a person to the approval gate: for an approval, or with
    /// the questions the tool asked while it ran (`input`).
    fn ask_the_client(
        &mut self,
        call: ChatToolCall,
        arguments: Value,
        parent_message_id: String,
        input: Option<Box<tools::InputRequired>>,
    ) {
        genai::approval_requested(&call.name, &call.id);
        self.queue
            .push(AgentUpdate::ApprovalRequest(ApprovalRequest {
                tool_call_id: call.id,
                tool_name: call.name,
                arguments,
                parent_message_id,
                restore_state: None,
                input,
            }));
    }

    /// One server tool call as a future that always completes: failures are values, and a panic
    /// is contained to the call. `input` carries the user's answers when the call is retried
    /// after it asked; `parent_message_id` is the call's assistant message, where a question it
    /// asks is filed.
    fn run_server_tool(
        &mut self,
        call: ChatToolCall,
        input: Option<Box<tools::InputAnswers>>,
        parent_message_id: Option<String>,
    ) -> BoxFuture<'static, ToolCallOutcome> {
        let progress = self
            .progress
            .get_or_insert_with(tools::ProgressChannel::new)
            .sender
            .clone();
        let events = self
            .tool_events
            .get_or_insert_with(tools::ToolEventChannel::new)
            .sender
            .clone();
        let registered = self.server_tools.get(&call.name).cloned();
        let timeout = if self.config.background.runs(&call.name) {
            self.config.background.timeout()
        } else {
            let own = self.config.tool_timeouts.get(&call.name).copied();
            own.unwrap_or(self.config.tool_timeout)
        };
        let context = ToolContext {
            scope: self.scope.clone(),
            agent: self.config.name.clone(),
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
            tool_call_id: call.id.clone(),
            message_id: parent_message_id.clone(),
            state: Some(self.state.clone()),
            progress: Some(progress),
            input,
            events: Some(events),
        };
        let span = trace::tool_span(&call);
        let traced = span.clone();
        let agent = self.config.name.clone();
        async move {
            let started = std::time::Instant::now();
            let output = async {
                let registered = registered.ok_or_else(|| ToolError::Unknown(call.name.clone()))?;
                let arguments = parse_arguments(&call.arguments)?;
                registered.validate(&arguments)?;
                let invocation =
                    AssertUnwindSafe(registered.tool.call(arguments, context)).catch_unwind();
                match tokio::time::timeout(timeout, invocation).await {
                    Err(_) => Err(ToolError::Timeout(timeout)),
                    Ok(Err(_panic)) => Err(ToolError::Panicked),
                    Ok(Ok(result)) => result,
                }
            }
            .await;
            trace::record_tool_call(&traced, &call, &output);
            trace::record_tool_duration(&agent, &call, &output, started);
            ToolCallOutcome {
                call,
                output,
                parent_message_id,
            }
        }
        .instrument(span)
        .boxed()
    }

    /// Turns a finished server tool call into its result event, its state events, and the tool
    /// message the model sees next. A state update that does not apply makes the call fail, so
    /// the client's state is never corrupted and the model learns why.
    ///
    /// Returns whether the call stopped to ask the user instead: then it has no result yet, its
    /// questions go out as an approval request carrying them, and the run ends once the other
    /// calls are done.
    fn finish_tool_call(&mut self, outcome: ToolCallOutcome) -> bool {
        let ToolCallOutcome {
            call,
            output,
            parent_message_id,
        } = outcome;
        let ending = match &output {
            Ok(_) => Ending::Completed,
            Err(ToolError::NeedsInput(_) | ToolError::AwaitsClient) => Ending::InputRequired,
            Err(_) => Ending::Failed,
        };
        self.end_activity(&call.id, ending);
        match output {
            Err(ToolError::NeedsInput(asked)) => {
                let arguments = parse_arguments(&call.arguments).unwrap_or(Value::Null);
                let parent_message_id = parent_message_id.unwrap_or_else(|| new_id("msg"));
                self.ask_the_client(call, arguments, parent_message_id, Some(asked));
                return true;
            }
            // Left open, as a client tool call is: the client's next run goes on with it.
            Err(ToolError::AwaitsClient) => return true,
            _ => {}
        }
        let mut output = output.and_then(|output| {
            state_rules::with_result_rules(&self.config.state_rules, &call.name, output)
        });
        let activity = output.as_mut().ok().and_then(|o| o.activity.take());
        let mut state_events = Vec::new();
        let content = match output {
            Ok(ToolOutput { content, state, .. }) => {
                let keys = &self.config.subagent_state_keys;
                let state = state.map(|update| keeping_keys(update, &self.state, keys));
                match state.map(|update| apply_update(&mut self.state, update)) {
                    Some(Err(problem)) => Err(ToolError::Failed(format!(
                        "the tool's state update was not applied: {problem}"
                    ))),
                    Some(Ok(events)) => {
                        state_events = events;
                        Ok(tools::result_text(&content))
                    }
                    None => Ok(tools::result_text(&content)),
                }
            }
            Err(error) => Err(error),
        };
        // A call that failed after all (its state update did not apply) shows no app.
        let app = activity
            .filter(|_| content.is_ok())
            .map(|app| activities::result_activity(&call.id, *app));
        let content = content.unwrap_or_else(|error| {
            tracing::warn!(tool = %call.name, tool_call_id = %call.id, %error, "tool call failed");
            serde_json::json!({"error": error.to_string()}).to_string()
        });
        self.emit_tool_result(call.id, content, state_events);
        self.queue.extend(app.map(AgentUpdate::Event));
        false
    }

    /// Sends a tool result (and the state events it caused) and records it in the history,
    /// right after the assistant turn that made the call.
    fn emit_tool_result(
        &mut self,
        tool_call_id: String,
        content: String,
        state_events: Vec<EventBody>,
    ) {
        self.queue
            .push(AgentUpdate::Event(EventBody::tool_call_result(
                new_id("msg"),
                tool_call_id.clone(),
                ToolResultContent::Text(content.clone()),
            )));
        self.queue
            .extend(state_events.into_iter().map(AgentUpdate::Event));
        insert_tool_result(&mut self.history, tool_call_id, content);
    }

    /// Applies the agent's `from = "arguments"` rules once a call's arguments are complete (for
    /// client tools too). Arguments that are not JSON update nothing.
    fn apply_argument_rules(&mut self, call: &ChatToolCall) {
        for rule in &self.config.state_rules {
            let ToolStateSource::Arguments { argument, key } = &rule.source else {
                continue;
            };
            if rule.tool != call.name {
                continue;
            }
            let Ok(arguments) = parse_arguments(&call.arguments) else {
                continue;
            };
            let Some(value) = tools::select_argument(&arguments, argument) else {
                continue;
            };
            let update = StateUpdate::Set(serde_json::Map::from_iter([(key.clone(), value)]));
            match apply_update(&mut self.state, update) {
                Ok(events) => self
                    .queue
                    .extend(events.into_iter().map(AgentUpdate::Event)),
                Err(problem) => {
                    tracing::warn!(tool = %call.name, %problem, "state rule not applied")
                }
            }
        }
    }
}

/// A server tool call and what it produced.
struct ToolCallOutcome {
    call: ChatToolCall,
    output: Result<ToolOutput, ToolError>,
    parent_message_id: Option<String>,
}

/// Parses the model's argument text; an empty text means no arguments.
fn parse_arguments(text: &str) -> Result<Value, ToolError> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Default::default()));
    }
    serde_json::from_str(text)
        .map_err(|e| ToolError::InvalidArguments(format!("the arguments are not valid JSON ({e})")))
}

mod a2ui;
mod activities;
mod background;
mod model;
mod prompt;
mod run_tools;
mod state_rules;
mod turn;
use a2ui::A2uiRun;
pub use a2ui::GENERATE_TOOL as GENERATE_A2UI_TOOL;
use activities::{next_progress, next_tool_event, Ending, ToolActivities};
pub use background::RESULT_TOOL as BACKGROUND_RESULT_TOOL;
pub use model::{agent_model, AgentModel};
use run_tools::RunTools;
use turn::{Turn, TurnCall, TurnOutput, TurnUpdates};

#[cfg(test)]
mod tests;
