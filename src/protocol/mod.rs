//! The AG-UI 1.0 wire protocol: event and input types, the run encoder, the typed frames it
//! writes, and their SSE spelling.
//!
//! A leaf module: pure serde and byte writing, no tokio, no business logic. Types mirror the
//! `@ag-ui/core` 1.0 schema; the docs on each cite the rule they follow.

mod attribution;
mod capabilities;
mod encoder;
mod error;
mod events;
mod frame;
mod input;
mod limits;
mod media;
mod sse;

pub use attribution::OpenEnds;
pub use capabilities::*;
pub use encoder::{ProtocolVersion, RunEncoder, KEEP_ALIVE_FRAME};
pub use error::EncodeError;
pub use events::*;
pub use frame::{
    write_content_frame, write_event_frame, Batch, ContentKind, EventId, Fragment, Frame, FrameAt,
    FrameOut,
};
pub use input::*;
pub use limits::{InputCode, InputLimits, InputRefusal};
pub use media::check_media;
#[cfg(test)]
pub(crate) use media::tests::PNG_1X1;
pub use sse::{event_id_prefix, now_millis, write_event_id, write_frame};

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
