//! The run's metrics as one of its observers: the session tells the [`RunGuard`] what the
//! agent produced, what was written and how the run ended.

use super::RunGuard;
use crate::agent::AgentUpdate;
use crate::protocol::EventBody;
use crate::session::{Outcome, RunObserver};

impl RunObserver for RunGuard {
    fn on_update(&mut self, update: &AgentUpdate) {
        match update {
            AgentUpdate::Event(body) => {
                self.on_update();
                if is_content(body) {
                    self.on_content();
                }
            }
            AgentUpdate::Usage(usage) => {
                self.on_update();
                self.on_usage(usage);
            }
            // Not output of the model: neither times the upstream.
            AgentUpdate::Interrupt(_)
            | AgentUpdate::ToolProgress(_)
            | AgentUpdate::ApprovalRequest(_) => {}
        }
    }

    fn on_write(&mut self, events: u64, bytes: usize) {
        RunGuard::on_write(self, events, bytes);
    }

    fn on_end(&mut self, outcome: Outcome<'_>) {
        match outcome {
            Outcome::Finished => self.succeeded(),
            Outcome::Stopped => self.failed("cancelled"),
            Outcome::Failed { code } => self.failed(code),
            // Counted as cancelled when the guard drops.
            Outcome::Disconnected => {}
        }
    }
}

/// Whether the user sees model output in this event: what time-to-first-token measures.
fn is_content(body: &EventBody) -> bool {
    matches!(
        body,
        EventBody::TextMessageContent(_)
            | EventBody::TextMessageChunk(_)
            | EventBody::ReasoningMessageContent(_)
            | EventBody::ReasoningMessageChunk(_)
            | EventBody::ToolCallStart(_)
            | EventBody::ToolCallChunk(_)
    )
}
