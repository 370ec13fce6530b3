//! The way out of the approval gate: a call waiting for a person (an approval, or an input
//! tool's question) becomes an interrupt for a 1.0 client, or a client tool call
//! (`request_approval`, `request_input`) for a 0.x client, under a freshly signed id.

use serde_json::json;

use crate::agent::approval::{ApprovalPolicies, ApprovalSigner, ApprovalSubject};
use crate::agent::{AgentError, AgentUpdate, ApprovalRequest, UpdateMapper, Updates};
use crate::protocol::{EventBody, Interrupt};

pub(super) struct GateMapper {
    /// Ask through a client tool call (0.x clients) rather than an interrupt.
    pub(super) client_tool: bool,
    pub(super) client_tool_name: String,
    pub(super) input_tool_name: String,
    pub(super) scope: String,
    pub(super) thread_id: String,
    pub(super) policies: ApprovalPolicies,
    pub(super) signer: ApprovalSigner,
}

impl UpdateMapper for GateMapper {
    fn on_update(&mut self, update: AgentUpdate, out: &mut Updates) -> Result<(), AgentError> {
        let AgentUpdate::ApprovalRequest(request) = update else {
            out.push(update);
            return Ok(());
        };
        let ApprovalRequest {
            tool_call_id,
            tool_name,
            arguments,
            parent_message_id,
            restore_state,
        } = request;
        let approval_id = self.signer.mint(
            ApprovalSubject {
                scope: &self.scope,
                thread_id: &self.thread_id,
                tool_call_id: &tool_call_id,
                tool_name: &tool_name,
                arguments: &arguments,
            },
            restore_state.as_deref(),
        );
        let id = approval_id.to_string();
        let input = self.policies.input(&tool_name);
        let message = match input {
            Some(input) => input.message(&tool_name, &arguments),
            None => self.policies.message(&tool_name, &arguments),
        };
        if self.client_tool {
            let (client_tool, call_arguments) = match input {
                Some(input) => (
                    &self.input_tool_name,
                    json!({
                        "toolCallId": tool_call_id,
                        "toolName": tool_name,
                        "arguments": arguments,
                        "message": message,
                        "responseSchema": input.response_schema(),
                    }),
                ),
                None => (
                    &self.client_tool_name,
                    json!({
                        "toolCallId": tool_call_id,
                        "toolName": tool_name,
                        "arguments": arguments,
                        "message": message,
                        "allowEdit": self.policies.allows_edit(&tool_name),
                    }),
                ),
            };
            out.push(AgentUpdate::Event(EventBody::tool_call_start(
                id.clone(),
                client_tool.clone(),
                Some(parent_message_id),
            )));
            out.push(AgentUpdate::Event(EventBody::tool_call_args(
                id.clone(),
                call_arguments.to_string(),
            )));
            out.push(AgentUpdate::Event(EventBody::tool_call_end(id)));
        } else {
            let (reason, response_schema, metadata) = match input {
                // The model's arguments ride along, so a page can offer what the model proposed
                // (the slots it found, the options it listed).
                Some(input) => (
                    "input_required",
                    input.response_schema().clone(),
                    Some(serde_json::Map::from_iter([(
                        "agui-host".to_owned(),
                        json!({"tool": tool_name, "arguments": arguments}),
                    )])),
                ),
                None => ("tool_call", self.policies.response_schema(&tool_name), None),
            };
            out.push(AgentUpdate::Interrupt(Box::new(Interrupt {
                expires_at: ApprovalSigner::expires_at(&approval_id),
                id,
                reason: reason.to_owned(),
                message: Some(message),
                tool_call_id: Some(tool_call_id),
                response_schema: Some(response_schema),
                metadata,
                subagent_run_id: None,
            })));
        }
        Ok(())
    }
}
