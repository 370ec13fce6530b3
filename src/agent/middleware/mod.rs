//! Agent middlewares: decorators over [`Agent`](super::Agent), each holding `inner`, named for
//! what it does. Per-run logic lives in an [`UpdateMapper`](super::UpdateMapper) so it is tested
//! with vectors; [`pipeline`](super::pipeline) is the one place that orders them.

mod approval_gate;
mod client_state;
mod predictive_state;
mod status;
mod subagents;

pub use approval_gate::ApprovalGate;
pub use client_state::ClientStateInjection;
pub use predictive_state::{PredictStateRule, PredictiveStateDeltas, PredictiveStateRules};
pub use status::StatusSnapshots;
pub use subagents::{SubagentView, ACTIVITY_TYPE as SUBAGENT_ACTIVITY_TYPE};
