//! A tool that cannot finish without the user: the questions it asks ([`InputRequired`]), and
//! the answers it is called again with ([`InputAnswers`]). An MCP server's elicitation
//! (an `input_required` result of `tools/call`) is the source today; the agent carries the
//! questions to the client as interrupts and calls the tool again with the answers.

use serde_json::{Map, Value};

/// Most bytes of a question's schema and its tool's opaque state together: the agent carries
/// both to the client and back inside a signed id, which has room for 8 KiB. A server that
/// asks with more gets its call failed, with a message saying so.
pub const MAX_CARRIED_BYTES: usize = 6 * 1024;

/// Why a tool call stopped: it needs the user's answers before it can finish.
#[derive(Debug, Clone, PartialEq)]
pub struct InputRequired {
    /// The questions, each answered separately; the call is retried once all are.
    pub questions: Vec<InputQuestion>,
    /// Opaque state to hand back with the answers (an MCP server's `requestState`).
    pub state: Option<String>,
    /// Who asks, for the client (an MCP server's configured name).
    pub asker: String,
}

/// One question.
#[derive(Debug, Clone, PartialEq)]
pub struct InputQuestion {
    /// The tool's own name for the question; answers are keyed by it.
    pub key: String,
    /// Markdown for the user.
    pub message: String,
    /// The answer's JSON Schema (an object schema).
    pub schema: Map<String, Value>,
    /// A page the user must visit instead of answering in place (an MCP URL-mode
    /// elicitation); the answer is then only whether they did.
    pub url: Option<String>,
    /// Set when the question is a subagent's, passed up by the call that ran it: how the
    /// client is shown it (as the subagent asked it, not as a question of the call).
    pub forwarded: Option<Box<ForwardedQuestion>>,
}

/// A question a subagent asked (its approval, its input tool's question, or one of its own
/// tools' questions), as its parent's call passes it up.
#[derive(Debug, Clone, PartialEq)]
pub struct ForwardedQuestion {
    /// The interrupt's reason as the subagent gave it (`tool_call`, `input_required`).
    pub reason: String,
    /// The subagent's call the question is about, as the client knows it (prefixed with the
    /// subagent's run id); `None` when the client is not shown the subagent's calls.
    pub tool_call_id: Option<String>,
    /// The subagent's own metadata for the question, with which agent asks (and, for a call
    /// of its own, the call's tool and arguments) under `agui-host`.
    pub metadata: Option<Map<String, Value>>,
    /// The subagents it passed through, outermost first: the direct child, then its own
    /// child… The last is the one that asked. Empty when the client is not shown subagents.
    pub subagent_run_ids: Vec<String>,
    /// The direct child's agent name.
    pub agent: String,
    /// When the subagent's own question expires (ISO 8601, UTC), if it does: the question
    /// cannot be answered after it, whatever its parent's id says.
    pub expires_at: Option<String>,
}

/// The user's answers, for the call's retry.
#[derive(Debug, Clone, PartialEq)]
pub struct InputAnswers {
    /// By question key: the answer as the tool expects it (an MCP `ElicitResult`).
    pub responses: Map<String, Value>,
    /// The state the tool handed out with its questions, exactly as it was.
    pub state: Option<String>,
}

impl InputRequired {
    /// Bytes the agent must carry for each question: its schema and the state.
    pub fn carried_bytes(&self) -> usize {
        let state = self.state.as_ref().map_or(0, String::len);
        self.questions
            .iter()
            .map(|q| Value::Object(q.schema.clone()).to_string().len() + q.key.len())
            .max()
            .unwrap_or(0)
            + state
    }
}
