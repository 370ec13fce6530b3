//! Optional authentication: bearer tokens or API keys from the configuration.
//!
//! A request carries its token as `Authorization: Bearer <token>` (what `@ag-ui/client`'s
//! `HttpAgent` sends when given `headers`) or as `X-API-Key: <token>`. Without a valid one it
//! gets 401 JSON before any stream opens. The probes (`/health`, `/ready`) are always open so an
//! orchestrator needs no secret; `/metrics` is open only when `metrics.require_auth = false`.
//! CORS preflights never get here: the CORS layer sits outside this one and answers them.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::{Choice, ConstantTimeEq};

use super::{ApiError, Code};

/// The accepted tokens and the paths that need none.
#[derive(Clone)]
pub(super) struct Auth {
    tokens: Arc<[Vec<u8>]>,
    metrics_open: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("tokens", &format_args!("[{} redacted]", self.tokens.len()))
            .field("metrics_open", &self.metrics_open)
            .finish()
    }
}

impl Auth {
    /// `None` when no token is configured: authentication is off.
    pub(super) fn new(tokens: &[String], metrics_require_auth: bool) -> Option<Auth> {
        (!tokens.is_empty()).then(|| Auth {
            tokens: tokens.iter().map(|t| t.as_bytes().to_vec()).collect(),
            metrics_open: !metrics_require_auth,
        })
    }

    fn is_exempt(&self, path: &str) -> bool {
        matches!(path, "/health" | "/ready") || (self.metrics_open && path == "/metrics")
    }

    /// Whether `presented` is one of the tokens. Every token is compared, each in constant
    /// time (`subtle`), so the time taken says nothing about which bytes matched. Only a
    /// length mismatch returns early inside `ct_eq`, and a token's length is not its secret.
    fn accepts(&self, presented: &[u8]) -> bool {
        let matched = self
            .tokens
            .iter()
            .fold(Choice::from(0), |any, token| any | token.ct_eq(presented));
        bool::from(matched)
    }
}

/// The token a request presents, if any: a Bearer `Authorization`, else `X-API-Key`. An
/// `Authorization` of another scheme (a proxy's Basic credentials) is not ours, so it does not
/// hide an `X-API-Key`; alone, it presents an empty (invalid) token.
fn presented_token(headers: &HeaderMap) -> Option<&[u8]> {
    let authorization = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
    if let Some(value) = authorization {
        // The scheme is case-insensitive (RFC 9110 §11.1).
        let scheme = b"bearer ";
        if value.len() > scheme.len() && value[..scheme.len()].eq_ignore_ascii_case(scheme) {
            return Some(value[scheme.len()..].trim_ascii());
        }
    }
    match headers.get("x-api-key") {
        Some(value) => Some(value.as_bytes().trim_ascii()),
        None => authorization.map(|_| &b""[..]),
    }
}

/// Who an authenticated request is: a digest of the token it presented, never the token. Put
/// in the request's extensions for the thread scope.
#[derive(Debug, Clone)]
pub(super) struct Principal(pub(super) String);

impl Principal {
    fn of(token: &[u8]) -> Principal {
        use sha2::{Digest, Sha256};
        Principal(crate::text::hex(&Sha256::digest(token)[..16]))
    }
}

/// The middleware: passes authenticated and exempt requests, answers 401 to the rest.
pub(super) async fn require_token(
    State(auth): State<Option<Auth>>,
    mut request: Request,
    next: Next,
) -> Response {
    let Some(auth) = auth else {
        return next.run(request).await;
    };
    if auth.is_exempt(request.uri().path()) {
        return next.run(request).await;
    }
    match presented_token(request.headers()) {
        Some(token) if !token.is_empty() && auth.accepts(token) => {
            let principal = Principal::of(token);
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        presented => {
            // Never log what was presented: a near-miss is still somebody's secret.
            tracing::info!(
                path = request.uri().path(),
                presented = presented.is_some(),
                "request refused: no valid token"
            );
            let (code, message) = if presented.is_some() {
                (Code::InvalidToken, "the token is not valid")
            } else {
                (
                    Code::MissingToken,
                    "this server needs a token: `Authorization: Bearer <token>` or `X-API-Key`",
                )
            };
            let mut response = ApiError::new(code, message).into_response();
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                header::HeaderValue::from_static("Bearer"),
            );
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth() -> Auth {
        Auth::new(&["secret-one".into(), "secret-two".into()], true).unwrap()
    }

    #[test]
    fn accepts_any_configured_token_and_nothing_else() {
        let auth = auth();
        assert!(auth.accepts(b"secret-one"));
        assert!(auth.accepts(b"secret-two"));
        assert!(!auth.accepts(b"secret-on"));
        assert!(!auth.accepts(b"secret-onee"));
        assert!(!auth.accepts(b""));
    }

    #[test]
    fn reads_bearer_in_any_case_and_api_key() {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, "bEaReR  tok ".parse().unwrap());
        assert_eq!(presented_token(&headers), Some(&b"tok"[..]));
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, "Basic dXNlcg==".parse().unwrap());
        assert_eq!(
            presented_token(&headers),
            Some(&b""[..]),
            "not a bearer token"
        );
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", "tok".parse().unwrap());
        assert_eq!(presented_token(&headers), Some(&b"tok"[..]));
        assert_eq!(presented_token(&HeaderMap::new()), None);
    }

    #[test]
    fn probes_are_exempt_and_metrics_follows_the_setting() {
        let auth = auth();
        assert!(auth.is_exempt("/health"));
        assert!(auth.is_exempt("/ready"));
        assert!(!auth.is_exempt("/metrics"));
        assert!(!auth.is_exempt("/"));
        let open = Auth::new(&["t".into()], false).unwrap();
        assert!(open.is_exempt("/metrics"));
        assert!(Auth::new(&[], true).is_none());
    }
}
