//! The AG-UI 1.0 wire protocol: event and input types, and the run encoder that writes SSE.
//!
//! A leaf module: pure serde and byte writing, no tokio, no business logic. Types mirror the
//! `@ag-ui/core` 1.0 schema; the docs on each cite the rule they follow.

mod capabilities;
mod encoder;
mod error;
mod events;
mod input;
mod sse;

pub use capabilities::*;
pub use encoder::{ProtocolVersion, RunEncoder, KEEP_ALIVE_FRAME};
pub use error::EncodeError;
pub use events::*;
pub use input::*;
pub use sse::{
    event_id_prefix, now_millis, split_event_id, write_event_id, write_frame, ContentFrame,
};

#[cfg(test)]
mod tests;
