//! The AG-UI 1.0 wire protocol: event and input types, and the run encoder that writes SSE.
//!
//! A leaf module: pure serde and byte writing, no tokio, no business logic. Types mirror the
//! `@ag-ui/core` 1.0 schema; the docs on each cite the rule they follow.

mod capabilities;
mod encoder;
mod error;
mod events;
mod input;
mod limits;
mod media;
mod sse;

pub use capabilities::*;
pub use encoder::{ProtocolVersion, RunEncoder, KEEP_ALIVE_FRAME};
pub use error::EncodeError;
pub use events::*;
pub use input::*;
pub use limits::{InputCode, InputLimits, InputRefusal};
pub use media::check_media;
#[cfg(test)]
pub(crate) use media::tests::PNG_1X1;
pub use sse::{
    event_id_prefix, now_millis, split_event_id, write_event_id, write_frame, ContentFrame,
};

/// Checks `input` against `limits` (`server.input_limits`): the counts and sizes (the first
/// limit broken), the ids, then every media part.
///
/// # Errors
/// The limit broken.
pub fn check_input(input: &RunAgentInput, limits: &InputLimits) -> Result<(), InputRefusal> {
    limits::check_limits(input, limits)?;
    media::check_media(&input.messages, limits)
}

#[cfg(test)]
mod tests;
