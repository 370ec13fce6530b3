//! The way out of the approval gate: a call waiting for a person becomes an interrupt for a
//! 1.0 client, or a client tool call for a 0.x client, under a freshly signed id. A call waits
//! for one of three things: an approval (`request_approval`), an input tool's question, or the
//! questions a tool asked while it ran (both `request_input`, one per question).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{json, Map, Value};

use crate::agent::approval::{ApprovalPolicies, ApprovalSigner, ApprovalSubject};
use crate::agent::approval_id::ApprovalId;
use crate::agent::elicitation::CarriedQuestion;
use crate::agent::{AgentError, AgentUpdate, ApprovalRequest, UpdateMapper, Updates};
use crate::protocol::{EventBody, Interrupt, SubagentFinished, SubagentOutcome};
use crate::tools::{ForwardedQuestion, InputQuestion, InputRequired};

pub(super) struct GateMapper {
    /// Ask through a client tool call (0.x clients) rather than an interrupt.
    pub(super) client_tool: bool,
    pub(super) client_tool_name: String,
    pub(super) input_tool_name: String,
    pub(super) scope: String,
    pub(super) thread_id: String,
    pub(super) policies: ApprovalPolicies,
    pub(super) signer: ApprovalSigner,
    /// The longest id a client may send back (`server.input_limits.max_id_bytes`).
    pub(super) client_id_limit: usize,
    /// Subagents that ended suspended, held until the questions they asked have their ids
    /// (`SUBAGENT_FINISHED.outcome.interruptIds`).
    pub(super) suspended: Vec<SubagentFinished>,
}

/// One question on its way out, in both shapes.
struct Question {
    id: String,
    expires_at: Option<String>,
    reason: &'static str,
    message: String,
    response_schema: Map<String, Value>,
    metadata: Option<Map<String, Value>>,
    /// The 0.x client tool that asks it, and that call's arguments.
    client_tool: String,
    client_arguments: Value,
    /// For a subagent's question: the call it is about as the client knows it, and the
    /// subagents it came through (outermost first).
    tool_call_id: Option<String>,
    subagent_run_ids: Vec<String>,
}

impl UpdateMapper for GateMapper {
    fn on_update(&mut self, update: AgentUpdate, out: &mut Updates) -> Result<(), AgentError> {
        let request = match update {
            AgentUpdate::ApprovalRequest(request) => request,
            AgentUpdate::Event(EventBody::SubagentFinished(finished))
                if matches!(
                    finished.outcome,
                    Some(SubagentOutcome::Suspended {
                        interrupt_ids: None
                    })
                ) =>
            {
                self.suspended.push(finished);
                return Ok(());
            }
            update => {
                out.push(update);
                return Ok(());
            }
        };
        let questions = match &request.input {
            Some(asked) => self.tools_questions(&request, asked),
            None => vec![self.approval_or_input(&request)],
        };
        let mut asked = Vec::new();
        for question in questions {
            asked.push((question.id.clone(), question.subagent_run_ids.clone()));
            self.ask(question, &request, out);
        }
        self.finish_suspended(&asked, out);
        Ok(())
    }

    fn on_end(&mut self, out: &mut Updates) -> Result<(), AgentError> {
        // A suspended subagent none of whose questions came (a wiring bug) still ends.
        for finished in self.suspended.drain(..) {
            out.push(AgentUpdate::Event(EventBody::SubagentFinished(finished)));
        }
        Ok(())
    }
}

impl GateMapper {
    fn subject<'a>(&'a self, request: &'a ApprovalRequest) -> ApprovalSubject<'a> {
        ApprovalSubject {
            scope: &self.scope,
            thread_id: &self.thread_id,
            tool_call_id: &request.tool_call_id,
            tool_name: &request.tool_name,
            arguments: &request.arguments,
        }
    }

    /// An approval, or an input tool's question.
    fn approval_or_input(&self, request: &ApprovalRequest) -> Question {
        let ApprovalRequest {
            tool_call_id,
            tool_name,
            arguments,
            restore_state,
            ..
        } = request;
        let approval_id = self
            .signer
            .mint(self.subject(request), restore_state.as_deref());
        let id = approval_id.to_string();
        let expires_at = ApprovalSigner::expires_at(&approval_id);
        match self.policies.input(tool_name) {
            Some(input) => {
                let message = input.message(tool_name, arguments);
                Question {
                    client_arguments: json!({
                        "toolCallId": tool_call_id,
                        "toolName": tool_name,
                        "arguments": arguments,
                        "message": message,
                        "responseSchema": input.response_schema(),
                    }),
                    id,
                    expires_at,
                    reason: "input_required",
                    message,
                    response_schema: input.response_schema().clone(),
                    // The model's arguments ride along, so a page can offer what the model
                    // proposed (the slots it found, the options it listed).
                    metadata: Some(ours(json!({"tool": tool_name, "arguments": arguments}))),
                    client_tool: self.input_tool_name.clone(),
                    tool_call_id: None,
                    subagent_run_ids: Vec::new(),
                }
            }
            None => {
                let message = self.policies.message(tool_name, arguments);
                Question {
                    client_arguments: json!({
                        "toolCallId": tool_call_id,
                        "toolName": tool_name,
                        "arguments": arguments,
                        "message": message,
                        "allowEdit": self.policies.allows_edit(tool_name),
                    }),
                    id,
                    expires_at,
                    reason: "tool_call",
                    message,
                    response_schema: self.policies.response_schema(tool_name),
                    metadata: None,
                    client_tool: self.client_tool_name.clone(),
                    tool_call_id: None,
                    subagent_run_ids: Vec::new(),
                }
            }
        }
    }

    /// The questions a tool asked while it ran: one each, every id carrying what the retry
    /// needs (see `crate::agent::elicitation`).
    fn tools_questions(&self, request: &ApprovalRequest, asked: &InputRequired) -> Vec<Question> {
        asked
            .questions
            .iter()
            .map(|question| {
                let carried = CarriedQuestion::of(asked, question).encode();
                let approval_id = self
                    .signer
                    .mint_carrying(self.subject(request), Some(carried));
                if let Some(forwarded) = &question.forwarded {
                    return self.subagents_question(request, question, forwarded, &approval_id);
                }
                let mut about =
                    json!({"source": "mcp", "server": asked.asker, "tool": request.tool_name});
                if let Some(url) = &question.url {
                    about["url"] = json!(url);
                }
                Question {
                    client_arguments: json!({
                        "toolCallId": request.tool_call_id,
                        "toolName": request.tool_name,
                        "message": question.message,
                        "responseSchema": question.schema,
                        "source": about,
                    }),
                    id: approval_id.to_string(),
                    expires_at: ApprovalSigner::expires_at(&approval_id),
                    reason: "input_required",
                    message: question.message.clone(),
                    response_schema: question.schema.clone(),
                    metadata: Some(ours(about)),
                    client_tool: self.input_tool_name.clone(),
                    tool_call_id: None,
                    subagent_run_ids: Vec::new(),
                }
            })
            .collect()
    }

    /// A subagent's question, passed up by the call that ran it: shown as the subagent asked
    /// it (its reason, its call, its run id), answered through the parent's call. A 0.x
    /// client gets a subagent's approval as an approval call, with the subagent's tool and
    /// arguments, and its other questions as input calls.
    fn subagents_question(
        &self,
        request: &ApprovalRequest,
        question: &InputQuestion,
        forwarded: &ForwardedQuestion,
        approval_id: &ApprovalId,
    ) -> Question {
        let about = forwarded
            .metadata
            .as_ref()
            .and_then(|metadata| metadata.get("agui-host"));
        let detail = |key: &str| about.and_then(|a| a.get(key)).cloned();
        let approval = forwarded.reason == "tool_call";
        let client_arguments = json!({
            // The parent's call: the answer is the parent's call's to carry.
            "toolCallId": request.tool_call_id,
            "toolName": detail("tool").unwrap_or_else(|| json!(request.tool_name)),
            "arguments": detail("arguments").unwrap_or_else(|| json!({})),
            "message": question.message,
            "responseSchema": question.schema,
            "allowEdit": approval && question.schema.get("properties").and_then(|p| p.get("editedArgs")).is_some(),
            "agent": forwarded.agent,
        });
        Question {
            client_arguments,
            id: approval_id.to_string(),
            // The earlier of the two: the subagent refuses its own question once it expired.
            expires_at: earliest(
                ApprovalSigner::expires_at(approval_id),
                forwarded.expires_at.clone(),
            ),
            reason: if approval {
                "tool_call"
            } else {
                "input_required"
            },
            message: question.message.clone(),
            response_schema: question.schema.clone(),
            metadata: forwarded.metadata.clone(),
            client_tool: if approval {
                self.client_tool_name.clone()
            } else {
                self.input_tool_name.clone()
            },
            tool_call_id: forwarded.tool_call_id.clone(),
            subagent_run_ids: forwarded.subagent_run_ids.clone(),
        }
    }

    /// Sends the held ends of the subagents that asked the questions just asked (`asked`: each
    /// question's id and the subagents it came through), naming the questions.
    fn finish_suspended(&mut self, asked: &[(String, Vec<String>)], out: &mut Updates) {
        let mut held = Vec::new();
        for mut finished in self.suspended.drain(..) {
            let ids: Vec<String> = asked
                .iter()
                .filter(|(_, through)| through.contains(&finished.subagent_run_id))
                .map(|(id, _)| id.clone())
                .collect();
            if ids.is_empty() {
                held.push(finished);
                continue;
            }
            finished.outcome = Some(SubagentOutcome::Suspended {
                interrupt_ids: Some(ids),
            });
            out.push(AgentUpdate::Event(EventBody::SubagentFinished(finished)));
        }
        self.suspended = held;
    }

    fn ask(&self, question: Question, request: &ApprovalRequest, out: &mut Updates) {
        if self.client_tool {
            let (id, arguments) = self.client_call(question.id, question.client_arguments);
            out.push(AgentUpdate::Event(EventBody::tool_call_start(
                id.clone(),
                question.client_tool,
                Some(request.parent_message_id.clone()),
            )));
            out.push(AgentUpdate::Event(EventBody::tool_call_args(
                id.clone(),
                arguments.to_string(),
            )));
            out.push(AgentUpdate::Event(EventBody::tool_call_end(id)));
            return;
        }
        out.push(AgentUpdate::Interrupt(Box::new(Interrupt {
            expires_at: question.expires_at,
            id: question.id,
            reason: question.reason.to_owned(),
            message: Some(question.message),
            tool_call_id: Some(
                question
                    .tool_call_id
                    .unwrap_or_else(|| request.tool_call_id.clone()),
            ),
            response_schema: Some(question.response_schema),
            metadata: question.metadata,
            subagent_run_id: question.subagent_run_ids.last().cloned(),
        })));
    }
}

impl GateMapper {
    /// A 0.x question's call id and arguments. The client sends the call back with every
    /// later request, where ids are bounded (`max_id_bytes`): an id too long for that (one
    /// carrying restore data or a tool's question) leaves its data out, and the data rides in
    /// the call's `carried` argument, put back before the tag is checked (see `elicited.rs`).
    fn client_call(&self, id: String, mut arguments: Value) -> (String, Value) {
        if id.len() <= self.client_id_limit {
            return (id, arguments);
        }
        let Ok(mut parsed) = id.parse::<ApprovalId>() else {
            return (id, arguments);
        };
        let Some(data) = parsed.restore.take() else {
            return (id, arguments);
        };
        arguments["carried"] = json!(URL_SAFE_NO_PAD.encode(data));
        (parsed.to_string(), arguments)
    }
}

/// The earlier of two expiries (ISO 8601 UTC in one format, so they compare as text).
fn earliest(a: Option<String>, b: Option<String>) -> Option<String> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `metadata` under this server's own key.
fn ours(value: Value) -> Map<String, Value> {
    Map::from_iter([("agui-host".to_owned(), value)])
}
