//! How an MCP tool call is traced: the `tools/call {tool}` CLIENT span of its request (span
//! builders in `telemetry::genai`), the request id and protocol version once sent, and a
//! failure's JSON-RPC code or kind.

use rmcp::model::RequestId;
use rmcp::RoleClient;
use tracing::Span;

use super::McpServer;
use crate::settings::McpTransportSettings;
use crate::telemetry::genai::{self, McpTransport};

/// The span of one `tools/call` to `server`.
pub(super) fn call_span(server: &McpServer, remote_tool: &str) -> Span {
    if !crate::telemetry::is_exporting() {
        return Span::none();
    }
    let url = match &server.settings.transport {
        McpTransportSettings::Http { url, .. } => url::Url::parse(url).ok(),
        McpTransportSettings::Stdio { .. } => None,
    };
    let transport = match (&server.settings.transport, &url) {
        (McpTransportSettings::Stdio { .. }, _) => McpTransport::Pipe,
        (McpTransportSettings::Http { .. }, url) => McpTransport::Tcp {
            address: url.as_ref().and_then(url::Url::host_str),
            port: url.as_ref().and_then(url::Url::port_or_known_default),
        },
    };
    genai::mcp_call_span(remote_tool, &server.settings.name, transport)
}

/// What the request went out as.
pub(super) fn record_request(span: &Span, peer: &rmcp::Peer<RoleClient>, id: &RequestId) {
    if span.is_disabled() {
        return;
    }
    let version = peer
        .peer_info()
        .map(|info| info.protocol_version.to_string());
    genai::record_mcp_request(span, &id.to_string(), version.as_deref());
}

/// A call that failed: the server's JSON-RPC error code, else the tool error's kind.
pub(super) fn record_failure(span: &Span, error_kind: &str, json_rpc_code: Option<i32>) {
    if span.is_disabled() {
        return;
    }
    let code = json_rpc_code.map(i64::from);
    let error_type = code.map_or_else(|| error_kind.to_owned(), |code| code.to_string());
    genai::record_mcp_failure(span, &error_type, code);
}
