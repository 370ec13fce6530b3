//! The model client: everything between the agent and a language model.
//!
//! This module owns the provider-neutral chat types the agent speaks ([`ChatMessage`],
//! [`ChatRequest`], [`LlmEvent`]), the error type with its stable RUN_ERROR codes ([`LlmError`]),
//! and [`LlmClient`], which turns a request into a stream of events from one of its backends:
//! an OpenAI-compatible server, Azure OpenAI, Anthropic's Messages API, or the built-in offline
//! model; [`ModelClients`] holds one client per model profile. It is the only module in the
//! crate that names `async_openai` types, so a change of that crate stays here.
//!
//! Layout:
//! - `openai.rs`: the HTTP backend (request body, headers, retries, timeouts), for every
//!   provider;
//! - `sse.rs`: an incremental server-sent-events decoder over raw body bytes (public: the
//!   terminal client reads AG-UI streams with the same decoder);
//! - `decoder.rs`: bytes of a streaming body to events, with the end-of-body rules every
//!   dialect shares;
//! - `chunk.rs`: tolerant parsing of streamed chat-completion chunks into [`LlmEvent`]s,
//!   including the tool-call index normalization real servers need;
//! - `anthropic.rs`: the Messages request body and history rules, and its events;
//! - `responses.rs`: the Responses request body (stateless) and its events;
//! - `clients.rs`: the client of each model profile;
//! - `offline.rs`: the deterministic offline model used when no API key is configured;
//! - `error.rs`: [`LlmError`] and the redaction helpers that keep secrets out of messages.
//!
//! We read the SSE body ourselves instead of using async-openai's client: its stream drops
//! fields real servers send (`reasoning_content`, `reasoning`) and mishandles error objects sent
//! as frames mid-stream. async-openai is used only for its request types, so the body we send
//! follows the official schema.

mod anthropic;
mod chunk;
mod clients;
mod decoder;
mod error;
mod offline;
mod openai;
mod responses;
pub mod sse;

use std::fmt;
use std::sync::Arc;

use futures_util::stream::BoxStream;

use crate::settings::{LlmProvider, LlmSettings};

pub use clients::ModelClients;
pub use error::{LlmError, TimeoutPhase, UnreachableCause};

/// Decodes the body of an OpenAI-compatible streaming reply (SSE `chat.completion.chunk`s, then
/// `[DONE]`) into [`LlmEvent`]s, exactly as the HTTP backend does: the tolerant parser, the
/// normalized tool-call indexes and the end-of-body rules. Public so that the parser's cost can
/// be benchmarked (`benches/upstream.rs`) and an embedder reading a stream itself can reuse it.
#[derive(Debug)]
pub struct CompletionStreamDecoder(chunk::StreamDecoder<chunk::ChunkParser>);

impl Default for CompletionStreamDecoder {
    fn default() -> Self {
        Self(chunk::StreamDecoder::new(error::Redactor::new(
            std::iter::empty(),
        )))
    }
}

impl CompletionStreamDecoder {
    /// Decodes the next fragment of the body (any split, even inside a UTF-8 character),
    /// appending what it completes to `out`. After an `Err` nothing more is produced.
    pub fn feed(&mut self, bytes: &[u8], out: &mut Vec<Result<LlmEvent, LlmError>>) {
        self.0.feed(bytes, out);
    }

    /// The body ended: a reply without `[DONE]` is complete only if it had a finish reason,
    /// otherwise it ends with [`LlmError::StreamCut`].
    pub fn finish(&mut self, out: &mut Vec<Result<LlmEvent, LlmError>>) {
        self.0.end_with(None, out);
    }
}

/// A provider-neutral chat message (the agent converts AG-UI history into these).
///
/// There is no developer role: the agent maps it to [`ChatMessage::System`], which every
/// OpenAI-compatible server understands.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatMessage {
    System {
        content: String,
    },
    User {
        content: Vec<UserPart>,
    },
    Assistant {
        content: Option<String>,
        tool_calls: Vec<ChatToolCall>,
        /// The reasoning the model produced before this turn, sent back to providers that
        /// need it (Anthropic's signed thinking blocks); empty for most turns.
        reasoning: Vec<ChatReasoning>,
    },
    Tool {
        tool_call_id: String,
        content: String,
    },
}

impl ChatMessage {
    /// An assistant turn without reasoning.
    pub fn assistant(content: Option<String>, tool_calls: Vec<ChatToolCall>) -> Self {
        ChatMessage::Assistant {
            content,
            tool_calls,
            reasoning: Vec::new(),
        }
    }

    /// A user message made of one text part.
    pub fn user_text(text: impl Into<String>) -> Self {
        ChatMessage::User {
            content: vec![UserPart::Text(text.into())],
        }
    }
}

/// One part of a user message.
#[derive(Debug, Clone, PartialEq)]
pub enum UserPart {
    Text(String),
    /// An image by URL; a `data:` URL (base64 image) is passed through unchanged.
    ImageUrl {
        url: String,
    },
}

/// One stretch of reasoning of an assistant turn: its text, and the opaque value its provider
/// needs back to accept it again (the protocol's `encryptedValue`: a thinking block's
/// signature, a Responses encrypted reasoning item). Without that value it is not sent back.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ChatReasoning {
    pub text: String,
    pub encrypted: Option<String>,
}

/// A tool call the assistant made earlier in the conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as the JSON text the model produced.
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments (`null` means "no parameters"). Shared: a server tool's
    /// schema is offered on every run and model call, and copying it each time would cost a
    /// deep clone per open stream.
    pub parameters: std::sync::Arc<serde_json::Value>,
}

/// One model call.
#[derive(Debug, Clone, Default)]
pub struct ChatRequest {
    /// Overrides `settings.model` (ignored by Azure, where the deployment names the model,
    /// and by the offline model).
    pub model: Option<String>,
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<ToolSpec>,
    /// The one tool the model must call (`tool_choice` naming a function). Anthropic models
    /// with extended thinking accept no forced choice, so there it is left to the model.
    pub forced_tool: Option<String>,
}

/// What a model stream yields.
///
/// A stream that ends without an error has yielded exactly one [`LlmEvent::Finished`]; a
/// [`LlmEvent::Usage`], when the server reported one, comes after it as the last event.
#[derive(Debug, Clone, PartialEq)]
pub enum LlmEvent {
    TextDelta(String),
    /// `reasoning_content` (DeepSeek, vLLM) or `reasoning` (OpenRouter, Ollama) delta fields;
    /// Anthropic's thinking.
    ReasoningDelta(String),
    /// The opaque value that ends a stretch of reasoning and must go back with it on a later
    /// call (Anthropic's thinking signature, a redacted thinking block's data, a Responses
    /// reasoning item's encrypted content).
    ReasoningEncrypted(String),
    /// `index` is OUR normalized per-call sequence number within this completion (0,1,2...),
    /// `id`/`name` are Some only the first time a call is seen (even if the server repeats them in
    /// every chunk), `arguments` is the fragment (may be empty).
    ///
    /// When a server sends no id for a call, one of the form `call_<32 hex digits>` is made up,
    /// so the first delta of every call carries an id.
    ToolCallDelta {
        index: usize,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Usage(Usage),
    /// The completion's `id` and the `model` that answered, from the first chunk's head; sent
    /// once, before anything else, when the server names either.
    Response {
        id: Option<String>,
        model: Option<String>,
    },
    Finished {
        reason: FinishReason,
    },
}

/// Token counts of one completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: Option<u64>,
    pub cached_input_tokens: Option<u64>,
}

/// Why the model stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    /// `tool_calls`, or the legacy `function_call`.
    ToolCalls,
    Length,
    ContentFilter,
    /// Any other value a server sends, verbatim.
    Other(String),
}

impl FinishReason {
    /// Maps a wire `finish_reason` value.
    pub fn from_wire(value: &str) -> Self {
        match value {
            "stop" => FinishReason::Stop,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "length" => FinishReason::Length,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_owned()),
        }
    }
}

/// The model client. Cheap to clone (the HTTP backend is shared).
#[derive(Clone)]
pub struct LlmClient {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Offline,
    Http(Arc<openai::HttpBackend>),
}

// Written by hand so that no field, and above all no key or header value, is ever printed.
impl fmt::Debug for LlmClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmClient")
            .field("backend", &self.describe())
            .finish()
    }
}

impl LlmClient {
    /// Builds the client for `settings.effective_provider()`. Fails with
    /// [`LlmError::Config`] (code `upstream_config`) on a bad base URL, header or TLS setup.
    pub fn new(settings: &LlmSettings) -> Result<Self, LlmError> {
        let flavor = match settings.effective_provider() {
            LlmProvider::Offline => {
                return Ok(Self {
                    backend: Backend::Offline,
                })
            }
            // `effective_provider` never returns `Auto`; treating it as OpenAI keeps this total.
            LlmProvider::Auto | LlmProvider::Openai => openai::Flavor::OpenAi,
            LlmProvider::Azure => openai::Flavor::Azure,
            LlmProvider::Anthropic => openai::Flavor::Anthropic,
            LlmProvider::OpenaiResponses => openai::Flavor::Responses,
        };
        let backend = Backend::Http(Arc::new(openai::HttpBackend::new(settings, flavor)?));
        Ok(Self { backend })
    }

    /// The built-in offline model, whatever the settings say (for tests and demos).
    pub fn offline() -> Self {
        Self {
            backend: Backend::Offline,
        }
    }

    /// Lazy: nothing is sent until polled. Dropping the stream closes the upstream connection
    /// immediately (no task is spawned). After an `Err` item the stream yields nothing more.
    pub fn stream_chat(
        &self,
        request: ChatRequest,
    ) -> BoxStream<'static, Result<LlmEvent, LlmError>> {
        match &self.backend {
            Backend::Offline => offline::stream(request),
            Backend::Http(backend) => {
                openai::HttpBackend::stream_chat(Arc::clone(backend), request)
            }
        }
    }

    /// A one-line description for the startup log; never contains the key.
    pub fn describe(&self) -> String {
        match &self.backend {
            Backend::Offline => "offline model (built-in, deterministic)".to_owned(),
            Backend::Http(backend) => backend.describe(),
        }
    }

    /// Lowercase vendor id for usage reporting: `openai`, `azure`, `anthropic` or `offline`.
    pub fn provider_id(&self) -> &'static str {
        match &self.backend {
            Backend::Offline => "offline",
            Backend::Http(backend) => backend.provider_id(),
        }
    }

    /// The model used when a request names none: `settings.model`, the Azure deployment name
    /// for Azure (the deployment decides the model there), or `offline`.
    pub fn default_model(&self) -> &str {
        match &self.backend {
            Backend::Offline => offline::MODEL_NAME,
            Backend::Http(backend) => backend.default_model(),
        }
    }

    pub fn is_offline(&self) -> bool {
        matches!(self.backend, Backend::Offline)
    }

    /// Where this client's model calls go and the sampling settings they carry, as traces name
    /// them; nothing for the offline model.
    pub fn call_target(&self) -> CallTarget {
        match &self.backend {
            Backend::Offline => CallTarget::default(),
            Backend::Http(backend) => backend.call_target(),
        }
    }
}

/// See [`LlmClient::call_target`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CallTarget {
    /// The model server's host, and its port (the scheme's default when the URL names none).
    pub server_address: Option<String>,
    pub server_port: Option<u16>,
    pub temperature: Option<f32>,
    pub max_tokens: Option<u32>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::Settings;

    fn settings() -> LlmSettings {
        Settings::embedded_default()
            .expect("embedded defaults load")
            .llm
    }

    #[test]
    fn default_settings_give_the_offline_model() {
        let client = LlmClient::new(&settings()).expect("client");
        assert!(client.is_offline());
        assert_eq!(client.provider_id(), "offline");
        assert_eq!(client.default_model(), "offline");
        assert_eq!(client.describe(), "offline model (built-in, deterministic)");
    }

    #[test]
    fn openai_client_describes_itself_without_the_key() {
        let mut s = settings();
        s.api_key = "sk-test-very-secret-key-1234567890".into();
        s.base_url = "http://user:pass@localhost:11434/v1/".into();
        s.model = "llama3".into();
        s.extra_headers
            .insert("x-gateway-token".into(), "gateway-secret-value".into());
        let client = LlmClient::new(&s).expect("client");
        assert!(!client.is_offline());
        assert_eq!(client.provider_id(), "openai");
        assert_eq!(client.default_model(), "llama3");
        let described = client.describe();
        assert_eq!(
            described,
            "openai-compatible http://localhost:11434/v1 model llama3"
        );
        let debugged = format!("{client:?}");
        for text in [&described, &debugged] {
            assert!(!text.contains("secret"), "{text}");
            assert!(!text.contains("pass"), "{text}");
        }
    }

    #[test]
    fn azure_client_uses_the_deployment() {
        let mut s = settings();
        s.provider = LlmProvider::Azure;
        s.api_key = "azure-secret".into();
        s.base_url = "https://myres.openai.azure.com".into();
        s.azure_deployment = "gpt4o-prod".into();
        let client = LlmClient::new(&s).expect("client");
        assert_eq!(client.provider_id(), "azure");
        assert_eq!(client.default_model(), "gpt4o-prod");
        assert_eq!(
            client.describe(),
            "azure-openai https://myres.openai.azure.com deployment gpt4o-prod (api-version 2024-10-21)"
        );
    }

    #[test]
    fn messages_and_responses_clients_default_to_their_vendors_urls() {
        for (provider, id, described) in [
            (
                LlmProvider::Anthropic,
                "anthropic",
                "anthropic-messages https://api.anthropic.com/v1 model m",
            ),
            (
                LlmProvider::OpenaiResponses,
                "openai",
                "openai-responses https://api.openai.com/v1 model m",
            ),
        ] {
            let mut s = settings();
            s.provider = provider;
            s.api_key = "sk-secret-key".into();
            s.model = "m".into();
            let client = LlmClient::new(&s).expect("client");
            assert_eq!(client.provider_id(), id);
            assert_eq!(client.default_model(), "m");
            assert_eq!(client.describe(), described);
            assert!(!format!("{client:?}").contains("secret"));
        }
    }

    #[test]
    fn bad_configuration_is_upstream_config() {
        let mut s = settings();
        s.provider = LlmProvider::Openai;
        s.base_url = "not a url".into();
        let err = LlmClient::new(&s).expect_err("bad url");
        assert_eq!(err.code(), "upstream_config");

        let mut s = settings();
        s.provider = LlmProvider::Openai;
        s.base_url = "ftp://example.com/v1".into();
        assert_eq!(
            LlmClient::new(&s).expect_err("bad scheme").code(),
            "upstream_config"
        );

        let mut s = settings();
        s.provider = LlmProvider::Azure;
        s.base_url = String::new();
        s.azure_deployment = "d".into();
        assert_eq!(
            LlmClient::new(&s).expect_err("azure without url").code(),
            "upstream_config"
        );

        let mut s = settings();
        s.api_key = "line\nbreak".into();
        let err = LlmClient::new(&s).expect_err("bad key");
        assert_eq!(err.code(), "upstream_config");
        assert!(!err.to_string().contains("line"));

        let mut s = settings();
        s.api_key = "k".into();
        s.extra_headers.insert("bad header".into(), "v".into());
        assert_eq!(
            LlmClient::new(&s).expect_err("bad header").code(),
            "upstream_config"
        );
    }

    #[test]
    fn finish_reasons_map() {
        assert_eq!(FinishReason::from_wire("stop"), FinishReason::Stop);
        assert_eq!(
            FinishReason::from_wire("tool_calls"),
            FinishReason::ToolCalls
        );
        assert_eq!(
            FinishReason::from_wire("function_call"),
            FinishReason::ToolCalls
        );
        assert_eq!(FinishReason::from_wire("length"), FinishReason::Length);
        assert_eq!(
            FinishReason::from_wire("content_filter"),
            FinishReason::ContentFilter
        );
        assert_eq!(
            FinishReason::from_wire("eos"),
            FinishReason::Other("eos".into())
        );
    }
}
