//! Predictive state, the pure part: an incremental partial-JSON parser ([`PartialJson`]), the
//! [`Projection`] of one tool call's streaming arguments onto state keys as minimal RFC 6902
//! patches, and applying such patches to the server's own copy of the state ([`patch`]).
//!
//! This module is a leaf: it uses `serde_json` and `json_patch` and nothing else of the crate —
//! no tokio, no agent or protocol types, and no clock (time comes in as an argument). The
//! `PredictiveStateDeltas` middleware connects it to tool-call updates, one projection per tool
//! call, so parallel calls never share a parser.
//!
//! # Cost
//! Each fragment costs time proportional to its own length: the parser keeps its stack of open
//! containers and the token in progress between fragments, and patches are generated from parse
//! events (a member or item appeared, a scalar completed, a string grew), never by re-parsing or
//! diffing the value so far. The only work that is not proportional to the fragment is re-sending
//! a growing string, which JSON Patch forces (it has no append); [`Coalescing`] bounds it.

mod partial_json;
pub mod patch;
mod projection;
#[cfg(test)]
mod properties;

pub use partial_json::{Event, PartialJson, Segment, Sink, MAX_DEPTH};
pub use projection::{Argument, Coalescing, Finished, Projection};

/// Why arguments could not be parsed. Only reported by `finish`: a partial parse is not an
/// error, and input after the first error is ignored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    #[error("invalid JSON at byte {offset}: {reason}")]
    InvalidJson { offset: u64, reason: &'static str },
    #[error("the JSON ends before its value is complete")]
    Incomplete,
}
