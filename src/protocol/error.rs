//! Why an event could not be written: shared by the encoder (what may be written when) and the
//! SSE codec (how it is spelt).

/// An event the agent produced that would make the stream invalid: a wiring bug, never input.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("protocol violation: {0}")]
    ProtocolViolation(String),
    #[error("event failed to serialize: {0}")]
    Serialize(#[from] serde_json::Error),
}
