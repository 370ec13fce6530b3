//! `ApprovalGate`: carries approval requests to the client and verified decisions back.
//!
//! Out: the base agent does not run a call that needs approval; it emits an `ApprovalRequest`.
//! For a 1.0 client the gate turns it into an interrupt (`reason: "tool_call"`, the call's id,
//! a question, a `responseSchema` with `approved` and, where the tool allows it, `editedArgs`),
//! so the run ends with an `interrupt` outcome. A 0.x client has no interrupts: it gets a client
//! tool call (`request_approval` by default) whose arguments name the call, answered by a tool
//! message `{"approved": bool}` (CopilotKit's `{"accepted": bool}` too).
//!
//! In: `resume` entries (1.0) and answered approval calls (0.x) become `ToolDecision`s, each
//! verified against the signed id (see [`crate::agent::approval`]): unknown, forged, swapped,
//! expired, duplicated or missing answers end the run with `RUN_ERROR` and a specific code, and
//! the tool never runs. With a thread store (the run carries [`DecisionClaims`]) every
//! approval is then claimed in the server's decision ledger before the inner agent sees it: an
//! approval an earlier run claimed becomes [`DecisionOutcome::AlreadyDecided`], so a call runs
//! at most once whatever the client's history says (truncated, or its thread deleted), even
//! for replays racing each other; a claim that fails ends the run with `RUN_ERROR` and nothing
//! runs. A decline runs nothing, so it claims nothing (the person may still approve while the
//! id is valid, as before), but a decline on a call whose approval was claimed becomes
//! `AlreadyDecided` too, so the model is never told a call that ran was declined. The claims
//! are asynchronous and `Agent::run` is not, so such a run's stream first awaits them and only
//! then starts the inner agent (a refusal of the inner agent's `run` then arrives as
//! `RUN_ERROR` rather than a 4xx).
//!
//! The same way carries questions for the user: an input tool's (`kind = "input"`, its answer
//! checked against the tool's schema and given to the model as the call's result) and those a
//! tool asked while it ran (an MCP server's elicitation, whose signed ids carry the questions
//! and the server's state, and whose answers retry the call once all are in: see
//! `crate::agent::elicitation`). Both go out as `input_required` interrupts (1.0) or
//! `request_input` client tool calls (0.x), in `ask.rs`.
//!
//! The approval protocol never reaches the model: the approval tool is not
//! offered to it, and its calls and answers (and CopilotKit's echo of an interrupt answer) are
//! removed from the history, so the provider sees one clean call/result pair.

use std::collections::HashSet;
use std::sync::Arc;

use futures_util::stream::{self, StreamExt, TryStreamExt};
use serde_json::Value;

use crate::agent::approval::{ApprovalPolicies, ApprovalSigner, ApprovalSubject, IdCheck};
use crate::agent::approval_id::{abbreviate as abbreviated, ApprovalId};
use crate::agent::config::ApprovalSettings;
use crate::agent::elicitation::{self, CarriedQuestion};
use crate::agent::input::ClientAnswer;
use crate::agent::{
    map_updates, new_id, Agent, AgentError, AgentStream, AgentUpdate, DecisionClaims,
    DecisionOutcome, RestoreState, RunRequest, ToolDecision,
};
use crate::protocol::{EventBody, Message, ProtocolVersion, ResumeStatus};

mod ask;
mod elicited;
mod history;

use ask::GateMapper;
use elicited::{carried_question, with_carried, ElicitedCalls, Refusal};
use history::{strip_protocol, Channel, History, HistoryCall};

/// Cloned into a run whose decisions are claimed first (see the module docs): every field is
/// shared or small.
#[derive(Clone)]
pub struct ApprovalGate {
    inner: Arc<dyn Agent>,
    policies: ApprovalPolicies,
    signer: ApprovalSigner,
    settings: ApprovalSettings,
    /// Whether a server tool may stop to ask the user while it runs (an MCP server's
    /// elicitation): its questions must be carried out even without approval policies.
    tools_may_ask: bool,
    /// The longest id a 0.x client may send back (see `ask.rs`).
    client_id_limit: usize,
}

impl std::fmt::Debug for ApprovalGate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApprovalGate")
            .field("policies", &self.policies)
            .finish_non_exhaustive()
    }
}

/// Whose thread an approval id is about: the caller's scope and the thread id.
#[derive(Clone, Copy)]
struct Asker<'a> {
    scope: &'a str,
    thread_id: &'a str,
}

impl<'a> Asker<'a> {
    fn of(request: &'a RunRequest) -> Asker<'a> {
        Asker {
            scope: &request.scope,
            thread_id: &request.thread_id,
        }
    }
}

impl ApprovalGate {
    pub fn new(
        inner: Arc<dyn Agent>,
        policies: ApprovalPolicies,
        signer: ApprovalSigner,
        settings: ApprovalSettings,
    ) -> Self {
        ApprovalGate {
            inner,
            policies,
            signer,
            settings,
            tools_may_ask: false,
            client_id_limit: usize::MAX,
        }
    }

    /// The longest call id a 0.x client may send back (`server.input_limits.max_id_bytes`): a
    /// longer approval id travels split (see `ask.rs`).
    #[must_use]
    pub fn with_client_id_limit(mut self, max_id_bytes: usize) -> Self {
        self.client_id_limit = max_id_bytes;
        self
    }

    /// Carries the questions server tools ask while they run (the agent has MCP servers).
    #[must_use]
    pub fn with_tools_that_ask(mut self, tools_may_ask: bool) -> Self {
        self.tools_may_ask = tools_may_ask;
        self
    }

    /// Whether `name` is one of the client tools the gate asks 0.x clients through.
    fn is_protocol_tool(&self, name: &str) -> bool {
        name == self.settings.client_tool_name || name == self.settings.input_tool_name
    }

    fn subject<'a>(&self, asker: Asker<'a>, call: &'a HistoryCall) -> ApprovalSubject<'a> {
        ApprovalSubject {
            scope: asker.scope,
            thread_id: asker.thread_id,
            tool_call_id: &call.id,
            tool_name: &call.name,
            arguments: &call.arguments,
        }
    }

    /// Verifies every answer the request carries and removes the approval protocol from its
    /// history. See the module docs for the rules.
    fn take_decisions(&self, request: &mut RunRequest) -> Result<Decisions, AgentError> {
        let history = History::of(&request.messages, &request.recorded_results);
        let mut taken = Taken::default();
        self.take_client_tool_answers(Asker::of(request), &history, &mut taken)?;
        self.take_resume_entries(request, &history, &mut taken)?;
        taken.finish_elicited()?;
        self.check_last_turn_answered(request, &history, &taken)?;
        strip_protocol(
            &mut request.messages,
            &taken.protocol_calls,
            &taken.protocol_answers,
        );
        Ok(Decisions {
            decisions: taken.decisions,
        })
    }

    /// 0.x: every answered approval tool call in the history. Answers to calls that already
    /// have their result (every earlier approval, on every later run) are history, not
    /// decisions: they are removed and nothing runs again.
    fn take_client_tool_answers(
        &self,
        asker: Asker<'_>,
        history: &History<'_>,
        taken: &mut Taken,
    ) -> Result<(), AgentError> {
        for approval in history
            .calls
            .iter()
            .filter(|c| self.is_protocol_tool(&c.name))
        {
            taken.protocol_calls.insert(approval.id.clone());
            taken.protocol_answers.insert(approval.id.clone());
            let Some(answer) = history.answer_to(&approval.id) else {
                continue; // never answered: the user moved on, the call is dropped
            };
            // The approval call's arguments name the call, but a page may echo other
            // arguments (CopilotKit's `confirm_changes` takes none): the signed id decides.
            let target = approval.arguments.get("toolCallId").and_then(Value::as_str);
            let candidates: Vec<&HistoryCall> = history
                .calls
                .iter()
                .filter(|c| !self.is_protocol_tool(&c.name))
                .filter(|c| target.is_none_or(|t| t == c.id))
                .collect();
            // Whoever signed it, an answer about calls that all have their result acts on
            // nothing (every earlier approval, even one signed with a key since retired): it
            // needs no check, and must not end the thread.
            let carried_out =
                |call: &HistoryCall| history.carried_out(&call.id, Channel::ApprovalCall);
            if !candidates.is_empty() && candidates.iter().all(|c| carried_out(c)) {
                continue;
            }
            let signed = self
                .find_signed_call(
                    &with_carried(&approval.id, &approval.arguments),
                    asker,
                    &candidates,
                )
                .ok_or_else(|| unknown(&approval.id))?;
            let call = signed.call;
            if carried_out(call) {
                continue;
            }
            fresh(&signed)?;
            if let Some(question) = carried_question(&signed.id) {
                let response = question.client_answer(answer);
                taken.elicited(&signed, question, response)?;
                continue;
            }
            let outcome = self.client_answer(&call.name, &call.arguments, answer);
            taken.decide(&signed, outcome)?;
        }
        Ok(())
    }

    /// 1.0: `resume` entries. A replayed entry whose call already has its result changes
    /// nothing, whether or not its id has expired since.
    fn take_resume_entries(
        &self,
        request: &RunRequest,
        history: &History<'_>,
        taken: &mut Taken,
    ) -> Result<(), AgentError> {
        let candidates: Vec<&HistoryCall> = history
            .calls
            .iter()
            .filter(|c| !self.is_protocol_tool(&c.name))
            .collect();
        let mut seen_interrupts: HashSet<&str> = HashSet::new();
        for entry in &request.resume {
            if !seen_interrupts.insert(entry.interrupt_id.as_str()) {
                return Err(answered_twice(&entry.interrupt_id));
            }
            let signed = self
                .find_signed_call(&entry.interrupt_id, Asker::of(request), &candidates)
                .ok_or_else(|| unknown(&entry.interrupt_id))?;
            let call = signed.call;
            if history.carried_out(&call.id, Channel::Resume) {
                continue;
            }
            fresh(&signed)?;
            if let Some(question) = carried_question(&signed.id) {
                let response = match entry.status {
                    ResumeStatus::Cancelled => elicitation::cancel(),
                    ResumeStatus::Resolved => question
                        .resolved(entry.payload.as_ref())
                        .map_err(|why| invalid_payload(&entry.interrupt_id, &why))?,
                };
                taken.elicited(&signed, question, response)?;
                continue;
            }
            let outcome = match entry.status {
                ResumeStatus::Cancelled => DecisionOutcome::Declined,
                ResumeStatus::Resolved => self.resume_answer(
                    &entry.interrupt_id,
                    &call.name,
                    &call.arguments,
                    entry.payload.as_ref(),
                )?,
            };
            taken.decide(&signed, outcome)?;
        }
        Ok(())
    }

    /// A call of the latest turn still waiting for approval must be answered now, unless the
    /// user has moved on (a new user message after it).
    fn check_last_turn_answered(
        &self,
        request: &RunRequest,
        history: &History<'_>,
        taken: &Taken,
    ) -> Result<(), AgentError> {
        let Some(last_turn) = history.calls.iter().map(|c| c.message_index).max() else {
            return Ok(());
        };
        let moved_on = request.messages[last_turn + 1..]
            .iter()
            .any(|m| matches!(m, Message::User(_)));
        if moved_on {
            return Ok(());
        }
        let waiting = history.calls.iter().find(|call| {
            call.message_index == last_turn
                && !self.is_protocol_tool(&call.name)
                && !taken.decided.contains(&call.id)
                && history.answer_to(&call.id).is_none()
                && self.policies.requires_approval(&call.name, &call.arguments)
        });
        let waits_for = |call: &HistoryCall| match self.policies.input(&call.name) {
            Some(_) => "the user's input",
            None => "approval",
        };
        match waiting {
            Some(call) => Err(AgentError::Resume {
                code: "interrupt_unanswered",
                message: format!(
                    "the call `{}` of `{}` is waiting for {}: answer its interrupt in `resume`",
                    call.id,
                    call.name,
                    waits_for(call)
                ),
            }),
            None => Ok(()),
        }
    }

    /// The call among `candidates` that `id` was signed for, and whether the id is still
    /// fresh. The tag decides which call it is; expiry is judged separately, so a call that
    /// was carried out long ago is still recognised.
    fn find_signed_call<'h>(
        &self,
        id: &str,
        asker: Asker<'_>,
        candidates: &[&'h HistoryCall],
    ) -> Option<SignedCall<'h>> {
        let id: ApprovalId = id.parse().ok()?;
        candidates.iter().find_map(
            |call| match self.signer.check(&id, self.subject(asker, call)) {
                IdCheck::Mismatch => None,
                check => Some(SignedCall {
                    call,
                    check,
                    id: id.clone(),
                }),
            },
        )
    }

    /// A 1.0 resume payload: `{approved: bool, editedArgs?: object}` (`accepted` is read as
    /// `approved`). Anything else fails the interrupt's `responseSchema`.
    fn resume_answer(
        &self,
        interrupt_id: &str,
        tool: &str,
        arguments: &Value,
        payload: Option<&Value>,
    ) -> Result<DecisionOutcome, AgentError> {
        let invalid = |why: &str| invalid_payload(interrupt_id, why);
        if let Some(input) = self.policies.input(tool) {
            let answer = payload.ok_or_else(|| invalid("has no payload"))?;
            input.check(answer).map_err(|why| invalid(&why))?;
            return Ok(DecisionOutcome::Answered {
                answer: answer.clone(),
            });
        }
        let payload = payload
            .and_then(Value::as_object)
            .ok_or_else(|| invalid("must be an object with `approved`"))?;
        let approved = payload
            .get("approved")
            .or_else(|| payload.get("accepted"))
            .and_then(Value::as_bool)
            .ok_or_else(|| invalid("must have a boolean `approved`"))?;
        if !approved {
            return Ok(DecisionOutcome::Declined);
        }
        match payload.get("editedArgs") {
            None | Some(Value::Null) => Ok(DecisionOutcome::Approved {
                arguments: arguments.clone(),
            }),
            Some(_) if !self.policies.allows_edit(tool) => Err(invalid(&format!(
                "edits the arguments, which `{tool}` does not allow"
            ))),
            Some(edited @ Value::Object(_)) => Ok(DecisionOutcome::Approved {
                arguments: edited.clone(),
            }),
            Some(_) => Err(invalid("has `editedArgs` that is not an object")),
        }
    }

    /// A 0.x answer (a tool message's text). A person's click cannot be re-asked inside a 0.x
    /// conversation, so an answer that cannot be read declines rather than failing the thread.
    fn client_answer(&self, tool: &str, arguments: &Value, text: &str) -> DecisionOutcome {
        if let Some(input) = self.policies.input(tool) {
            return match input.read_client_answer(text) {
                Ok(ClientAnswer::Answered(answer)) => DecisionOutcome::Answered { answer },
                Ok(ClientAnswer::Cancelled) => DecisionOutcome::Declined,
                Err(why) => {
                    tracing::warn!(tool, %why, "unreadable answer to an input request: cancelled");
                    DecisionOutcome::Declined
                }
            };
        }
        let payload: Option<Value> = serde_json::from_str(text).ok();
        match self.resume_answer("(approval tool call)", tool, arguments, payload.as_ref()) {
            Ok(outcome) => outcome,
            Err(error) => {
                tracing::warn!(%error, "unreadable approval answer: declined");
                DecisionOutcome::Declined
            }
        }
    }
}

/// The decisions taken so far from one request, and the approval protocol to remove from it.
#[derive(Default)]
struct Taken {
    decisions: Vec<TakenDecision>,
    decided: HashSet<String>,
    protocol_calls: HashSet<String>,
    protocol_answers: HashSet<String>,
    /// Answers to the questions tools asked while they ran, by call: a call is retried only
    /// once every question of it is answered.
    elicited: ElicitedCalls,
}

impl Taken {
    /// Records the decision `id` carries about `call`; a second decision about one call is
    /// refused, whichever way it came.
    fn decide(
        &mut self,
        signed: &SignedCall<'_>,
        outcome: DecisionOutcome,
    ) -> Result<(), AgentError> {
        let call = signed.call;
        if !self.decided.insert(call.id.clone()) {
            return Err(answered_twice(&signed.id.to_string()));
        }
        // A decision is taken only while its call is not carried out, so a tool message for
        // the call can only be a client's echo of the decision (CopilotKit appends one): not a
        // tool result, so it goes.
        self.protocol_answers.insert(call.id.clone());
        self.decisions.push(TakenDecision {
            confirmation: Confirmation::of(&signed.id, &outcome),
            expires: ApprovalSigner::expires_unix(&signed.id),
            approval: crate::text::hex(&signed.id.tag),
            decision: ToolDecision {
                tool_call_id: call.id.clone(),
                tool_name: call.name.clone(),
                outcome,
            },
        });
        Ok(())
    }
}

impl Taken {
    /// Records the answer to one of the questions a tool asked (see `elicited.rs`).
    fn elicited(
        &mut self,
        signed: &SignedCall<'_>,
        question: CarriedQuestion,
        response: Value,
    ) -> Result<(), AgentError> {
        let call = signed.call;
        let id = signed.id.to_string();
        if self.decided.contains(&call.id) {
            return Err(answered_twice(&id));
        }
        self.elicited
            .add(call, &signed.id, question, response)
            .map_err(|refusal| match refusal {
                Refusal::OtherAsking => unknown(&id),
                _ => answered_twice(&id),
            })?;
        // A message on the call can only be a client's echo of an answer (as for approvals).
        self.protocol_answers.insert(call.id.clone());
        Ok(())
    }

    /// Turns each call whose questions are all answered into a decision to retry it; a call
    /// with a question left unanswered is refused.
    fn finish_elicited(&mut self) -> Result<(), AgentError> {
        let retries = std::mem::take(&mut self.elicited)
            .finish()
            .map_err(|refusal| AgentError::Resume {
                code: "interrupt_unanswered",
                message: refusal.to_string(),
            })?;
        for retry in retries {
            self.decided.insert(retry.decision.tool_call_id.clone());
            self.decisions.push(TakenDecision {
                confirmation: None,
                expires: retry.expires,
                approval: retry.approval,
                decision: retry.decision,
            });
        }
        Ok(())
    }
}

/// A history call an approval id was signed for.
struct SignedCall<'h> {
    call: &'h HistoryCall,
    /// `Valid` or `Expired`.
    check: IdCheck,
    id: ApprovalId,
}

/// Refuses an id past its expiry.
fn fresh(signed: &SignedCall<'_>) -> Result<(), AgentError> {
    match signed.check {
        IdCheck::Expired => Err(expired_error(&signed.id.to_string())),
        IdCheck::Valid | IdCheck::Mismatch => Ok(()),
    }
}

/// What a request's answers decided.
struct Decisions {
    decisions: Vec<TakenDecision>,
}

/// One verified decision, with what acting on it involves besides the tool.
struct TakenDecision {
    decision: ToolDecision,
    /// The answer to a confirmation of predicted state, when the call is one.
    confirmation: Option<Confirmation>,
    /// When its approval id stops verifying (Unix seconds; `None`: never): the ledger must
    /// remember the claim at least that long.
    expires: Option<u64>,
    /// Its approval id's tag (hex): which asking the decision answers, for a call id a model
    /// reused.
    approval: String,
}

impl Decisions {
    /// Claims every approval (see the module docs): one an earlier run claimed is acted on no
    /// more, and a confirmation it carried is not settled again. A decline only looks.
    async fn claim(mut self, claims: &dyn DecisionClaims) -> Result<Decisions, AgentError> {
        for taken in &mut self.decisions {
            let call = &taken.decision.tool_call_id;
            let first = match taken.decision.outcome {
                // An answer is claimed like an approval: it becomes the call's result once, and
                // a tool's questions answered retry the call once.
                DecisionOutcome::Approved { .. }
                | DecisionOutcome::Answered { .. }
                | DecisionOutcome::Elicited { .. } => {
                    claims.claim(call, &taken.approval, taken.expires).await?
                }
                _ => !claims.is_claimed(call, &taken.approval).await?,
            };
            if !first {
                tracing::info!(tool_call_id = %call, "a decision acted on in an earlier run was answered again: not acted on");
                taken.decision.outcome = DecisionOutcome::AlreadyDecided;
                taken.confirmation = None;
            }
        }
        Ok(self)
    }
}

/// An answer to a confirmation of predicted state: keep the prediction, or put back the
/// values the id carries.
struct Confirmation {
    accepted: bool,
    restore: RestoreState,
}

impl Confirmation {
    fn of(id: &ApprovalId, outcome: &DecisionOutcome) -> Option<Confirmation> {
        Some(Confirmation {
            accepted: matches!(outcome, DecisionOutcome::Approved { .. }),
            restore: ApprovalSigner::restore_state(id)?,
        })
    }
}

impl ApprovalGate {
    /// Confirmed predictions are committed with a snapshot of the client's state (which already
    /// holds them); rejected ones are undone with a snapshot that puts back the values from
    /// before the prediction. Either way the snapshot opens the run, so the client and the
    /// agent continue from the same state.
    fn settle_predictions(
        &self,
        request: &mut RunRequest,
        confirmations: &[Confirmation],
        prefix: &mut Vec<AgentUpdate>,
    ) {
        let mut state = match request.state.take() {
            Some(Value::Object(object)) => object,
            _ => serde_json::Map::new(),
        };
        for confirmation in confirmations.iter().filter(|c| !c.accepted) {
            for (key, value) in &confirmation.restore {
                match value {
                    Some(value) => state.insert(key.clone(), value.clone()),
                    None => state.remove(key),
                };
            }
        }
        let state = Value::Object(state);
        prefix.push(AgentUpdate::Event(EventBody::state_snapshot(state.clone())));
        request.state = Some(state);
        let message = if confirmations.iter().all(|c| c.accepted) {
            &self.settings.state_confirmed_message
        } else {
            &self.settings.state_rejected_message
        };
        if !message.is_empty() {
            text_message(message, prefix);
        }
    }
}

impl Agent for ApprovalGate {
    fn run(&self, mut request: RunRequest) -> Result<AgentStream, AgentError> {
        // The approval and input tools are the gate's own protocol, never tools the model may
        // call.
        request
            .tools
            .retain(|tool| !self.is_protocol_tool(&tool.name));
        let decisions = match self.take_decisions(&mut request) {
            Ok(decisions) => decisions,
            Err(error) => return Ok(stream::once(async move { Err(error) }).boxed()),
        };
        let claims = match &request.decision_claims {
            Some(claims) if !decisions.decisions.is_empty() => Arc::clone(claims),
            _ => return self.act_on(request, decisions),
        };
        // Claimed before anything is acted on; the inner agent starts only after the claims.
        let gate = self.clone();
        let run = async move {
            let decisions = decisions.claim(claims.as_ref()).await?;
            gate.act_on(request, decisions)
        };
        Ok(stream::once(run).try_flatten().boxed())
    }
}

impl ApprovalGate {
    /// Hands the decisions to the inner agent, after the state snapshot that settles
    /// confirmations of predicted state and the accepted message, and maps its approval
    /// requests on the way out.
    fn act_on(
        &self,
        mut request: RunRequest,
        decisions: Decisions,
    ) -> Result<AgentStream, AgentError> {
        let mut confirmations = Vec::new();
        let decisions: Vec<ToolDecision> = decisions
            .decisions
            .into_iter()
            .map(|taken| {
                confirmations.extend(taken.confirmation);
                taken.decision
            })
            .collect();
        let mut prefix = Vec::new();
        if !confirmations.is_empty() {
            self.settle_predictions(&mut request, &confirmations, &mut prefix);
        }
        let any_approved = decisions
            .iter()
            .any(|d| matches!(d.outcome, DecisionOutcome::Approved { .. }));
        if any_approved && !self.settings.accepted_message.is_empty() {
            text_message(&self.settings.accepted_message, &mut prefix);
        }
        request.decisions = decisions;
        let asks = !self.policies.is_empty() || self.tools_may_ask;
        let mapper = asks.then(|| GateMapper {
            client_tool: request.version == ProtocolVersion::Legacy && self.settings.client_tool,
            client_tool_name: self.settings.client_tool_name.clone(),
            input_tool_name: self.settings.input_tool_name.clone(),
            scope: request.scope.clone(),
            thread_id: request.thread_id.clone(),
            policies: self.policies.clone(),
            signer: self.signer.clone(),
            client_id_limit: self.client_id_limit,
            suspended: Vec::new(),
        });
        let updates = self.inner.run(request)?;
        // Without policies or tools that ask the base agent never asks: no per-event mapping.
        let updates = match mapper {
            Some(mapper) => map_updates(updates, mapper),
            None => updates,
        };
        if prefix.is_empty() {
            return Ok(updates);
        }
        Ok(stream::iter(prefix.into_iter().map(Ok))
            .chain(updates)
            .boxed())
    }
}

fn text_message(text: &str, out: &mut Vec<AgentUpdate>) {
    let message_id = new_id("msg");
    out.push(AgentUpdate::Event(EventBody::text_start(
        message_id.clone(),
    )));
    out.push(AgentUpdate::Event(EventBody::text_content(
        message_id.clone(),
        text,
    )));
    out.push(AgentUpdate::Event(EventBody::text_end(message_id)));
}

fn unknown(id: &str) -> AgentError {
    AgentError::Resume {
        code: "interrupt_unknown",
        message: format!(
            "`{}` matches no approval pending in this thread's history",
            abbreviated(id)
        ),
    }
}

fn invalid_payload(interrupt_id: &str, why: &str) -> AgentError {
    AgentError::Resume {
        code: "invalid_resume_payload",
        message: format!(
            "the answer to interrupt `{}` {why}",
            abbreviated(interrupt_id)
        ),
    }
}

fn expired_error(id: &str) -> AgentError {
    AgentError::Resume {
        code: "interrupt_expired",
        message: format!("the approval `{}` has expired; ask again", abbreviated(id)),
    }
}

fn answered_twice(id: &str) -> AgentError {
    AgentError::Resume {
        code: "interrupt_answered_twice",
        message: format!(
            "the approval `{}` is answered more than once",
            abbreviated(id)
        ),
    }
}
