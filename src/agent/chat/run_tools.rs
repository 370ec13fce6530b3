//! The tools of one run: the agent's server tools as their sources list them now, and the
//! client's, checked and with a name clash settled by the agent's `tool_name_clash`; and the
//! run's `generate_a2ui` when it offers one.

use std::collections::HashSet;
use std::sync::Arc;

use super::a2ui::{A2uiRun, GENERATE_TOOL};
use super::ChatAgent;
use crate::agent::config::ToolNameClash;
use crate::agent::AgentError;
use crate::llm::ToolSpec;
use crate::tools::{self, ToolRegistry};

/// The tools of one run: the server's (as its sources list them now) and the client's.
pub(super) struct RunTools {
    pub(super) server_tools: ToolRegistry,
    pub(super) client_tools: HashSet<String>,
    /// What the model is offered: the server tools, then the client tools.
    pub(super) specs: Vec<ToolSpec>,
}

impl ChatAgent {
    /// The run's tools: the server's, and the client's after their names are checked and a
    /// clash with a server tool is settled by the agent's `tool_name_clash` policy.
    pub(super) fn tools_for_run(
        &self,
        requested: &[crate::protocol::Tool],
        a2ui: Option<&A2uiRun>,
    ) -> Result<RunTools, AgentError> {
        let mut server_tools = self.tools.for_run();
        let mut client_tools: HashSet<String> = HashSet::new();
        let mut client_specs: Vec<ToolSpec> = Vec::new();
        for tool in requested {
            if !tools::is_valid_tool_name(&tool.name) {
                return Err(AgentError::InvalidInput {
                    code: "invalid_tool",
                    message: format!(
                        "tool name `{}` is not valid: use 1 to 64 ASCII letters, digits, `_` or `-`",
                        tool.name.chars().take(80).collect::<String>()
                    ),
                });
            }
            // The generator calls the client's render tool itself, and its own name is the
            // server's: neither is the run's model's to call as a client tool.
            if a2ui
                .is_some_and(|a2ui| tool.name == a2ui.render_tool() || tool.name == GENERATE_TOOL)
            {
                continue;
            }
            if server_tools.contains(&tool.name) {
                match self.config.tool_name_clash {
                    ToolNameClash::PreferServer => {
                        tracing::debug!(tool = %tool.name, "client tool shadowed by the server tool of the same name");
                        continue;
                    }
                    ToolNameClash::PreferClient => {
                        server_tools = server_tools.without(&tool.name);
                    }
                    ToolNameClash::Reject => {
                        return Err(AgentError::InvalidInput {
                            code: "tool_name_clash",
                            message: format!(
                                "the client tool `{}` has the name of a server tool of agent `{}`",
                                tool.name, self.config.name
                            ),
                        });
                    }
                }
            }
            if client_tools.insert(tool.name.clone()) {
                client_specs.push(client_spec(tool));
            }
        }
        let mut specs: Vec<ToolSpec> = server_tools
            .registered()
            .map(|registered| {
                let definition = registered.tool.definition();
                ToolSpec {
                    name: definition.name.clone(),
                    description: definition.description.clone(),
                    parameters: Arc::clone(registered.parameters()),
                }
            })
            .collect();
        if a2ui.is_some() {
            specs.push(A2uiRun::spec());
        }
        specs.extend(client_specs);
        Ok(RunTools {
            server_tools,
            client_tools,
            specs,
        })
    }
}

/// A client tool as the model is offered it; no parameters (or `{}`) means an empty object.
fn client_spec(tool: &crate::protocol::Tool) -> ToolSpec {
    ToolSpec {
        name: tool.name.clone(),
        description: tool.description.clone(),
        parameters: Arc::new(
            tool.parameters
                .clone()
                .filter(|p| p.as_object().is_some_and(|o| !o.is_empty()))
                .unwrap_or_else(tools::empty_object_schema),
        ),
    }
}
