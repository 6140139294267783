//! Cross-site checks, so a web page a user visits cannot drive the API
//! through the user's browser (the API can pause, disable, discard and
//! ingest):
//!
//! - `Origin`, when a browser sends it, must be this server's own;
//! - on a listener without an admin token, `Host` must be a loopback name,
//!   or a page could rebind its own DNS name to 127.0.0.1 and be "same
//!   origin" with us;
//! - a state-changing request must carry a JSON content type, an
//!   `X-Abrq-Actor` header or an `Authorization` header. A plain HTML form
//!   can send none of these; a script can only after a CORS preflight,
//!   which abrq never grants.
//!
//! Probes (`/healthz`, `/readyz`, `/metrics`, `/v1/openapi.json`) and the
//! console's static files (`/`, `/console/*`, which hold no data) are read
//! with plain GETs and pass unchecked.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// What a path is, for the checks and for admin authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Probe,
    Ingest,
    Admin,
}

pub fn classify(path: &str) -> Class {
    match path {
        "/healthz" | "/readyz" | "/metrics" | "/v1/openapi.json" => Class::Probe,
        p if super::console::is_console(p) => Class::Probe,
        _ => {
            let parts: Vec<&str> = path.split('/').collect();
            match parts.as_slice() {
                ["", "v1", "streams", s, "records"] if !s.is_empty() => Class::Ingest,
                _ => Class::Admin,
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Guard {
    /// The listener speaks HTTPS, so its own origin is `https://…`.
    pub tls: bool,
    pub admin_token: bool,
}

pub async fn check(State(g): State<Guard>, req: Request, next: Next) -> Response {
    match g.admit(req.method(), req.uri().path(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

impl Guard {
    fn admit(&self, method: &Method, path: &str, headers: &HeaderMap) -> Result<(), ApiError> {
        let class = classify(path);
        let writes = !method.is_safe();
        if class == Class::Probe && !writes {
            return Ok(());
        }
        let host = header_str(headers, header::HOST);
        // With a token, a rebound name reaches nothing: the page cannot
        // make the browser send the token (no cookies, no ambient
        // credential). And a listener with a token is reached by names
        // abrq cannot know (DNS names, load balancers), so Host is free.
        if !self.admin_token && !host.is_some_and(is_loopback_host) {
            return Err(forbidden(format!(
                "Host {:?} is not a loopback name; without server.admin_token only \
                 localhost, 127.0.0.1 and [::1] are served",
                host.unwrap_or("")
            )));
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("");
            if !host.is_some_and(|h| self.same_origin(origin, h)) {
                return Err(forbidden(format!(
                    "cross-origin request refused: Origin {origin:?} is not this server"
                )));
            }
        }
        if writes && !has_custom_header(headers) && !json_body(headers, class) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                match class {
                    Class::Ingest => {
                        "ingest needs Content-Type application/json, application/x-ndjson \
                         or application/jsonl (or an X-Abrq-Actor header)"
                    }
                    _ => "send Content-Type: application/json or an X-Abrq-Actor header",
                },
            ));
        }
        Ok(())
    }

    /// `origin` is `scheme://host[:port]` of this listener, as reached
    /// through `host`.
    fn same_origin(&self, origin: &str, host: &str) -> bool {
        let scheme = if self.tls { "https" } else { "http" };
        let Some(rest) = origin
            .strip_prefix(scheme)
            .and_then(|r| r.strip_prefix("://"))
        else {
            return false;
        };
        let default = if self.tls { 443 } else { 80 };
        match (split_host(rest), split_host(host)) {
            (Some((oh, op)), Some((hh, hp))) => {
                oh.eq_ignore_ascii_case(hh) && op.unwrap_or(default) == hp.unwrap_or(default)
            }
            _ => false,
        }
    }
}

/// `server.allowed_hosts`: when set, a request whose Host is not listed
/// (nor a loopback name) is refused, whatever its path.
#[derive(Debug, Clone, Default)]
pub struct AllowedHosts(Vec<String>);

impl AllowedHosts {
    pub fn new(hosts: &[String]) -> AllowedHosts {
        AllowedHosts(hosts.iter().map(|h| h.to_ascii_lowercase()).collect())
    }

    fn admits(&self, host: Option<&str>) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let Some(host) = host else { return false };
        if is_loopback_host(host) {
            return true;
        }
        let Some((name, port)) = split_host(host) else {
            return false;
        };
        self.0.iter().any(|allowed| match split_host(allowed) {
            Some((n, None)) => n.eq_ignore_ascii_case(name),
            Some((n, p)) => n.eq_ignore_ascii_case(name) && p == port,
            None => false,
        })
    }
}

pub async fn check_host(State(hosts): State<AllowedHosts>, req: Request, next: Next) -> Response {
    let host = header_str(req.headers(), header::HOST);
    if hosts.admits(host) {
        return next.run(req).await;
    }
    forbidden(format!(
        "Host {:?} is not in server.allowed_hosts",
        host.unwrap_or("")
    ))
    .into_response()
}

fn forbidden(msg: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, msg)
}

fn header_str(headers: &HeaderMap, name: header::HeaderName) -> Option<&str> {
    headers.get(name)?.to_str().ok()
}

/// `host[:port]` with the IPv6 brackets kept; None if it is not that.
fn split_host(s: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if s.starts_with('[') {
        let end = s.find(']')?;
        let (h, rest) = s.split_at(end + 1);
        match rest {
            "" => (h, None),
            _ => (h, Some(rest.strip_prefix(':')?)),
        }
    } else {
        match s.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let ok = !host.is_empty() && !host.contains(['/', '@', '?', '#', ' ']);
    let port = match port {
        None => None,
        Some(p) => Some(p.parse().ok()?),
    };
    ok.then_some((host, port))
}

fn is_loopback_host(host: &str) -> bool {
    split_host(host).is_some_and(|(h, _)| {
        h.eq_ignore_ascii_case("localhost") || h == "127.0.0.1" || h == "[::1]"
    })
}

fn has_custom_header(headers: &HeaderMap) -> bool {
    headers.contains_key("x-abrq-actor") || headers.contains_key(header::AUTHORIZATION)
}

fn json_body(headers: &HeaderMap, class: Class) -> bool {
    let Some(ct) = header_str(headers, header::CONTENT_TYPE) else {
        return false;
    };
    let essence = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match class {
        Class::Ingest => matches!(
            essence.as_str(),
            "application/json" | "application/x-ndjson" | "application/jsonl"
        ),
        _ => essence == "application/json",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    const OPEN: Guard = Guard {
        tls: false,
        admin_token: false,
    };

    #[test]
    fn allowed_hosts_admit_names_ports_and_loopback() {
        let any = AllowedHosts::default();
        assert!(any.admits(Some("evil.example")) && any.admits(None));
        let set = AllowedHosts::new(&["abrq.internal".into(), "10.0.0.5:8080".into()]);
        for ok in [
            "abrq.internal",
            "ABRQ.internal:9000",
            "10.0.0.5:8080",
            "localhost:8080",
            "[::1]",
        ] {
            assert!(set.admits(Some(ok)), "{ok}");
        }
        for refused in [
            "evil.example",
            "10.0.0.5",
            "10.0.0.5:80",
            "abrq.internal.evil",
        ] {
            assert!(!set.admits(Some(refused)), "{refused}");
        }
        assert!(!set.admits(None));
    }

    #[test]
    fn classifies_paths() {
        assert_eq!(classify("/healthz"), Class::Probe);
        assert_eq!(classify("/v1/openapi.json"), Class::Probe);
        assert_eq!(classify("/"), Class::Probe);
        assert_eq!(classify("/console/app.js"), Class::Probe);
        assert_eq!(classify("/console/other"), Class::Admin);
        assert_eq!(classify("/v1/streams/s/records"), Class::Ingest);
        assert_eq!(classify("/v1/streams//records"), Class::Admin);
        assert_eq!(classify("/v1/streams/s"), Class::Admin);
        assert_eq!(classify("/v1/nope"), Class::Admin);
    }

    #[test]
    fn own_origin_only() {
        let own = |g: Guard, o, h| g.same_origin(o, h);
        assert!(own(OPEN, "http://127.0.0.1:8480", "127.0.0.1:8480"));
        assert!(own(OPEN, "http://LOCALHOST", "localhost:80"));
        assert!(own(OPEN, "http://[::1]:9", "[::1]:9"));
        assert!(!own(OPEN, "http://127.0.0.1:8481", "127.0.0.1:8480"));
        assert!(!own(OPEN, "https://127.0.0.1:8480", "127.0.0.1:8480"));
        assert!(!own(OPEN, "http://evil.example", "127.0.0.1:8480"));
        assert!(!own(OPEN, "null", "127.0.0.1:8480"));
        let tls = Guard { tls: true, ..OPEN };
        assert!(own(tls, "https://a.example", "a.example:443"));
        assert!(!own(tls, "http://a.example:443", "a.example:443"));
    }

    #[test]
    fn loopback_names() {
        for h in [
            "localhost",
            "localhost:8480",
            "127.0.0.1",
            "127.0.0.1:1",
            "[::1]",
            "[::1]:8480",
        ] {
            assert!(is_loopback_host(h), "{h}");
        }
        for h in [
            "evil.example",
            "evil.example:8480",
            "127.0.0.1.evil.example",
            "localhost:x",
            "[::1]x",
            "10.0.0.1",
        ] {
            assert!(!is_loopback_host(h), "{h}");
        }
    }

    #[test]
    fn writes_need_json_or_a_custom_header() {
        let post = |h: &[(&'static str, &str)], path| {
            OPEN.admit(&Method::POST, path, &headers(h))
                .map_err(|e| e.status.as_u16())
        };
        let pause = "/v1/streams/s/destinations/d/pause";
        let ingest = "/v1/streams/s/records";
        let host = ("host", "127.0.0.1:8480");
        assert_eq!(post(&[host], pause), Err(415));
        assert_eq!(
            post(&[host, ("content-type", "text/plain")], pause),
            Err(415)
        );
        assert_eq!(
            post(
                &[host, ("content-type", "application/x-www-form-urlencoded")],
                ingest
            ),
            Err(415)
        );
        assert_eq!(
            post(
                &[host, ("content-type", "application/json; charset=utf-8")],
                pause
            ),
            Ok(())
        );
        assert_eq!(
            post(&[host, ("content-type", "application/x-ndjson")], pause),
            Err(415)
        );
        assert_eq!(
            post(&[host, ("content-type", "application/x-ndjson")], ingest),
            Ok(())
        );
        assert_eq!(post(&[host, ("x-abrq-actor", "cli:me")], pause), Ok(()));
        assert_eq!(post(&[host, ("authorization", "Bearer t")], ingest), Ok(()));
        let evil = ("origin", "http://evil.example");
        assert_eq!(post(&[host, evil, ("x-abrq-actor", "a")], pause), Err(403));
        assert_eq!(
            post(&[("host", "evil.example"), ("x-abrq-actor", "a")], pause),
            Err(403)
        );
        assert_eq!(
            post(&[("x-abrq-actor", "a")], pause),
            Err(403),
            "no Host at all"
        );
        // Probes are plain GETs, whatever the headers.
        let probe = OPEN.admit(
            &Method::GET,
            "/metrics",
            &headers(&[evil, ("host", "evil.example")]),
        );
        assert!(probe.is_ok());
    }
}
