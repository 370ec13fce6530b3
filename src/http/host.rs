//! The `Host` allow-list (`server.allowed_hosts`), against DNS rebinding.
//!
//! A page on `rebind.attacker.example` can re-point its own name at 127.0.0.1; the browser then
//! treats the developer's local server as that page's own origin, so CORS does not apply and
//! the page may read threads, delete them, and start or stop runs. What such a request cannot
//! hide is the name it was sent to: `Host` (HTTP/1) or `:authority` (HTTP/2) carries the
//! attacker's name. So a server on a loopback address answers loopback names only by default:
//! `localhost`, `*.localhost` (which browsers resolve to loopback themselves), `127.x.x.x` and
//! `[::1]`, any port. A server on any other address with no list answers any name: it is meant
//! to be reached from elsewhere (a container behind a proxy, a pod whose probes use its IP), and
//! a name it would be reached by is not known here; `server.allowed_hosts` narrows it then.
//!
//! `/health` and `/ready` answer whatever the name: a health check may address the machine
//! any way it likes, and they reveal nothing a rebinding page could use.

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::{ApiError, Code};
use crate::settings::ServerSettings;

/// Which host names are answered.
#[derive(Debug, Clone)]
pub(super) enum HostPolicy {
    Any,
    /// The default on a loopback address.
    Loopback,
    /// `server.allowed_hosts`: exact names, and suffixes (`.example.com` from `*.example.com`).
    Listed {
        exact: Vec<String>,
        suffixes: Vec<String>,
    },
}

impl HostPolicy {
    pub(super) fn new(server: &ServerSettings) -> Self {
        let hosts = &server.allowed_hosts;
        if hosts.iter().any(|host| host == "*") {
            return HostPolicy::Any;
        }
        if hosts.is_empty() {
            return if server.binds_loopback() {
                HostPolicy::Loopback
            } else {
                HostPolicy::Any
            };
        }
        let (mut exact, mut suffixes) = (Vec::new(), Vec::new());
        for host in hosts {
            let host = normalize(host);
            match host.strip_prefix('*') {
                Some(suffix) => suffixes.push(suffix.to_owned()),
                None => exact.push(host),
            }
        }
        HostPolicy::Listed { exact, suffixes }
    }

    /// Whether a request to `name` (lower case, port and trailing dot removed) is answered.
    fn allows(&self, name: &str) -> bool {
        match self {
            HostPolicy::Any => true,
            HostPolicy::Loopback => is_loopback_name(name),
            HostPolicy::Listed { exact, suffixes } => {
                exact.iter().any(|host| host == name)
                    || suffixes
                        .iter()
                        .any(|suffix| name.len() > suffix.len() && name.ends_with(suffix.as_str()))
            }
        }
    }
}

/// The middleware: 403 `host_not_allowed` for a name the policy does not answer (and for a
/// request that names none, which no browser sends), before authentication and any handler.
pub(super) async fn require_allowed_host(
    State(policy): State<HostPolicy>,
    request: Request,
    next: Next,
) -> Response {
    if matches!(policy, HostPolicy::Any) || matches!(request.uri().path(), "/health" | "/ready") {
        return next.run(request).await;
    }
    // HTTP/2 names the host in `:authority` (the URI's authority here); HTTP/1 in `Host`. When
    // both are present, both must be answered.
    let authority = request.uri().authority().map(|a| a.as_str().to_owned());
    let host_header = request
        .headers()
        .get(header::HOST)
        .map(|value| value.to_str().map(str::to_owned));
    let mut names = Vec::with_capacity(2);
    let mut unreadable = false;
    match host_header {
        Some(Ok(value)) => names.push(value),
        Some(Err(_)) => unreadable = true,
        None => {}
    }
    names.extend(authority);
    let allowed = !unreadable
        && !names.is_empty()
        && names
            .iter()
            .all(|name| host_name(name).is_some_and(|name| policy.allows(&name)));
    if allowed {
        return next.run(request).await;
    }
    let shown = names
        .first()
        .map(|name| crate::text::truncate_chars(name, 80));
    ApiError::new(
        Code::HostNotAllowed,
        match shown {
            Some(name) => format!(
                "this server does not answer requests for the host `{name}` (server.allowed_hosts)"
            ),
            None => "the request names no host (Host header); this server answers only the \
                     hosts of server.allowed_hosts"
                .to_owned(),
        },
    )
    .into_response()
}

/// The host name of a `Host` value or an authority: the port removed (an IPv6 literal keeps
/// its brackets), lower case, without a trailing dot. `None` when it is not of that form.
fn host_name(authority: &str) -> Option<String> {
    let authority = authority.trim();
    // Userinfo never belongs in a Host header; refuse rather than guess which part is the name.
    if authority.contains('@') {
        return None;
    }
    let (name, port) = if authority.starts_with('[') {
        let end = authority.find(']')?;
        (&authority[..=end], &authority[end + 1..])
    } else {
        match authority.split_once(':') {
            Some((name, _)) => (name, &authority[name.len()..]),
            None => (authority, ""),
        }
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()));
    if name.is_empty() || !port_ok {
        return None;
    }
    Some(normalize(name))
}

/// Lower case, without the trailing dot of a fully qualified name (`localhost.` is `localhost`
/// to a resolver).
fn normalize(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// Names that only ever reach this machine.
fn is_loopback_name(name: &str) -> bool {
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    if let Some(v6) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return v6
            .parse::<std::net::Ipv6Addr>()
            .is_ok_and(|ip| ip.is_loopback());
    }
    name.parse::<std::net::Ipv4Addr>()
        .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_name_is_read_without_port_case_or_trailing_dot() {
        for (value, name) in [
            ("localhost:8080", Some("localhost")),
            ("LocalHost.", Some("localhost")),
            ("[::1]:3000", Some("[::1]")),
            ("[::1]", Some("[::1]")),
            ("127.0.0.1", Some("127.0.0.1")),
            ("example.com:80", Some("example.com")),
            ("example.com:http", None),
            ("user@localhost", None),
            ("", None),
            (":8080", None),
        ] {
            assert_eq!(host_name(value).as_deref(), name, "{value:?}");
        }
    }

    #[test]
    fn loopback_names_are_localhost_its_subdomains_and_loopback_addresses() {
        for name in [
            "localhost",
            "app.localhost",
            "127.0.0.1",
            "127.1.2.3",
            "[::1]",
        ] {
            assert!(is_loopback_name(name), "{name}");
        }
        for name in [
            "localhost.attacker.example",
            "127.0.0.1.attacker.example",
            "attacker-localhost",
            "10.0.0.1",
            "0.0.0.0",
            "[::]",
            "[::ffff:8.8.8.8]",
        ] {
            assert!(!is_loopback_name(name), "{name}");
        }
    }

    #[test]
    fn a_list_holds_exact_names_and_subdomains_of_a_wildcard() {
        let policy = HostPolicy::Listed {
            exact: vec!["agents.example.com".into()],
            suffixes: vec![".internal.example".into()],
        };
        assert!(policy.allows("agents.example.com"));
        assert!(policy.allows("a.b.internal.example"));
        assert!(!policy.allows("internal.example"));
        assert!(!policy.allows("xinternal.example"));
        assert!(!policy.allows("example.com"));
    }
}
