//! A request to kubelet's API as the routes see it: the head (with the header fields the
//! routes read), its query, and which endpoint it names. Pure: bytes in, values out.

use crate::base::httphead;
use crate::server::http::{bounded_head, HeadError, MAX_HEADERS};
use crate::server::routes::{parse_query, percent_decode};

/// A parsed request head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Head {
    /// `GET`, `POST`, …
    pub method: String,
    /// The path, before `?`, percent-decoded.
    pub path: String,
    /// The query, after `?`, as sent.
    pub query: String,
    /// Every header field, names lowercased, in order.
    pub headers: Vec<(String, String)>,
    /// The connection closes after the response (HTTP/1.0, `Connection: close`).
    pub close: bool,
    /// It announces a body (kubelet's endpoints take none).
    pub has_body: bool,
    /// The request head as received, to pass on to a runtime's streaming server.
    pub raw: Vec<u8>,
}

impl Head {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// Every value of header `name`, comma-separated lists split.
    pub fn header_values(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n == name)
            .flat_map(|(_, v)| v.split(','))
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .collect()
    }

    /// The `Upgrade` protocol asked for, lowercased, when `Connection` names `upgrade`.
    pub fn upgrade(&self) -> Option<String> {
        let asked = self.header_values("connection").iter().any(|t| t.eq_ignore_ascii_case("upgrade"));
        asked.then(|| self.header("upgrade").unwrap_or("").to_ascii_lowercase())
    }

    /// The bearer token of `Authorization`, if it has one.
    pub fn bearer(&self) -> Option<&str> {
        let v = self.header("authorization")?;
        let (scheme, token) = v.split_once(' ')?;
        (scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty()).then(|| token.trim())
    }

    /// The query's parameters, decoded, in order (a key may repeat: `command`).
    pub fn params(&self) -> Vec<(String, String)> {
        parse_query(&self.query)
    }
}

/// The outcome of looking at the bytes received so far.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// More bytes are needed (and allowed).
    Incomplete,
    /// A head, and how many bytes of the buffer it used.
    Complete(Head, usize),
    /// The head breaks a rule: answer `status()` and close.
    Refused(HeadError),
}

/// Looks for one request head at the start of `buf`, with the local API's bounds
/// (`MAX_REQUEST_LINE`, `MAX_HEADER_BYTES`, `MAX_HEADERS`), checked on partial input too.
pub fn parse(buf: &[u8]) -> Parsed {
    let mut fields = [httphead::EMPTY_HEADER; MAX_HEADERS];
    let head = match bounded_head(buf, &mut fields) {
        Ok(Some(head)) => head,
        Ok(None) => return Parsed::Incomplete,
        Err(e) => return Parsed::Refused(e),
    };
    let mut headers = Vec::with_capacity(head.headers.len());
    for f in head.headers.iter() {
        let Ok(value) = std::str::from_utf8(f.value) else {
            return Parsed::Refused(HeadError::Malformed("header field is not UTF-8"));
        };
        headers.push((f.name.to_ascii_lowercase(), value.trim().to_string()));
    }
    let (path, query) = head.target.split_once('?').unwrap_or((head.target, ""));
    let mut out = Head {
        method: head.method.to_string(),
        // A `+` in a path is itself.
        path: percent_decode(&path.replace('+', "%2B")),
        query: query.to_string(),
        headers,
        close: head.minor == 0,
        has_body: false,
        raw: buf[..head.len].to_vec(),
    };
    let tokens = out.header_values("connection");
    let close = tokens.iter().any(|t| t.eq_ignore_ascii_case("close"));
    let keep_alive = tokens.iter().any(|t| t.eq_ignore_ascii_case("keep-alive"));
    out.close = close || (head.minor == 0 && !keep_alive);
    out.has_body = out.header("transfer-encoding").is_some() || out.header("content-length").is_some_and(|v| v != "0");
    Parsed::Complete(out, head.len)
}

/// What a path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/healthz`.
    Healthz,
    /// `/pods`.
    Pods,
    /// `/configz`.
    Configz,
    /// `/metrics`, `/metrics/probes`.
    Metrics,
    /// `/metrics/resource`: kubelet's resource metrics (what metrics-server scrapes).
    MetricsResource,
    /// `/stats/summary`: kubelet's stats `Summary`.
    StatsSummary,
    /// `/containerLogs/{namespace}/{pod}/{container}`.
    ContainerLogs(PodPath),
    /// `/exec/{namespace}/{pod}/{container}` (an optional uid before the container, as kubelet).
    Exec(PodPath),
    /// `/attach/{namespace}/{pod}/{container}`.
    Attach(PodPath),
    /// `/portForward/{namespace}/{pod}`.
    PortForward(PodPath),
    /// Paths kubelet serves that ferrolet does not (`/run`, `/runningpods`, `/debug/pprof`,
    /// `/logs`, `/checkpoint`, `/cri`, `/metrics/cadvisor`), `/stats` other than
    /// `/stats/summary` (current kubelets serve no other), and anything else.
    NotFound,
}

/// The pod (and container) a path names.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodPath {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub pod: String,
    /// Its uid, when the path gives one.
    pub uid: Option<String>,
    /// The container (empty for `portForward`).
    pub container: String,
}

/// The endpoint `path` names (kubelet's routes).
pub fn endpoint(path: &str) -> Endpoint {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let pod = |rest: &[&str], with_container: bool| -> Option<PodPath> {
        let (namespace, pod, rest) = match rest {
            [ns, pod, rest @ ..] if !ns.is_empty() && !pod.is_empty() => (ns, pod, rest),
            _ => return None,
        };
        let (uid, container) = match (with_container, rest) {
            (true, [c]) => (None, *c),
            (true, [uid, c]) => (Some(uid.to_string()), *c),
            (false, []) => (None, ""),
            (false, [uid]) => (Some(uid.to_string()), ""),
            _ => return None,
        };
        if with_container && container.is_empty() {
            return None;
        }
        Some(PodPath { namespace: namespace.to_string(), pod: pod.to_string(), uid, container: container.into() })
    };
    let found = match parts.as_slice() {
        ["healthz"] => Some(Endpoint::Healthz),
        ["pods"] | ["pods", ""] => Some(Endpoint::Pods),
        ["configz"] => Some(Endpoint::Configz),
        ["metrics"] | ["metrics", "probes"] => Some(Endpoint::Metrics),
        ["metrics", "resource"] => Some(Endpoint::MetricsResource),
        ["stats", "summary"] => Some(Endpoint::StatsSummary),
        ["containerLogs", rest @ ..] => pod(rest, true).map(Endpoint::ContainerLogs),
        ["exec", rest @ ..] => pod(rest, true).map(Endpoint::Exec),
        ["attach", rest @ ..] => pod(rest, true).map(Endpoint::Attach),
        ["portForward", rest @ ..] => pod(rest, false).map(Endpoint::PortForward),
        _ => None,
    };
    found.unwrap_or(Endpoint::NotFound)
}

/// The subresource of `nodes` a path is authorized as (kubelet's mapping): `stats` for
/// `/stats`, `metrics` for `/metrics`, `log` for `/logs`, `proxy` for the rest.
pub fn subresource(path: &str) -> &'static str {
    let under = |prefix: &str| path == prefix || path.starts_with(&format!("{prefix}/"));
    if under("/stats") {
        "stats"
    } else if under("/metrics") {
        "metrics"
    } else if under("/logs") {
        "log"
    } else {
        "proxy"
    }
}

/// The verb a method is authorized as (kubelet's mapping; other methods are `""`).
pub fn verb(method: &str) -> &'static str {
    match method {
        "POST" => "create",
        "GET" | "HEAD" => "get",
        "PUT" => "update",
        "PATCH" => "patch",
        "DELETE" => "delete",
        _ => "",
    }
}

/// A boolean query value as Go's `strconv.ParseBool` reads it (kubelet's decoder).
pub fn is_true(v: &str) -> bool {
    matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::http::{MAX_HEADER_BYTES, MAX_REQUEST_LINE};

    fn head(text: &str) -> Head {
        match parse(text.as_bytes()) {
            Parsed::Complete(h, n) => {
                assert_eq!(n, text.len());
                h
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_head_keeps_its_fields_query_and_upgrade() {
        let h = head(
            "POST /exec/default/web/c?command=sh&command=-c&command=echo%20hi&stdin=1 HTTP/1.1\r\n\
             Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\
             X-Stream-Protocol-Version: v3.channel.k8s.io, v2.channel.k8s.io\r\nAuthorization: Bearer abc\r\n\r\n",
        );
        assert_eq!(h.method, "POST");
        assert_eq!(h.upgrade().as_deref(), Some("spdy/3.1"));
        assert_eq!(h.bearer(), Some("abc"));
        assert_eq!(
            h.header_values("x-stream-protocol-version"),
            ["v4.channel.k8s.io", "v3.channel.k8s.io", "v2.channel.k8s.io"]
        );
        let commands: Vec<String> = h.params().into_iter().filter(|(k, _)| k == "command").map(|(_, v)| v).collect();
        assert_eq!(commands, ["sh", "-c", "echo hi"]);
        assert!(!h.close && !h.has_body);
        assert!(head("GET / HTTP/1.0\r\n\r\n").close);
        assert!(head("GET / HTTP/1.1\r\nContent-Length: 3\r\n\r\n").has_body);
        assert_eq!(head("GET / HTTP/1.1\r\nUpgrade: websocket\r\n\r\n").upgrade(), None);
    }

    #[test]
    fn heads_past_their_bounds_are_refused_before_they_are_complete() {
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_REQUEST_LINE));
        assert_eq!(parse(long.as_bytes()), Parsed::Refused(HeadError::LineTooLong));
        let fat = format!("GET / HTTP/1.1\r\nX-A: {}\r\n", "b".repeat(MAX_HEADER_BYTES));
        assert_eq!(parse(fat.as_bytes()), Parsed::Refused(HeadError::HeadersTooLarge));
        assert_eq!(parse(b"GET / HTTP/1.1\r\nHost: x\r\n"), Parsed::Incomplete);
        assert!(matches!(parse(b"GET x HTTP/1.1\r\n\r\n"), Parsed::Refused(HeadError::Malformed(_))));
    }

    #[test]
    fn paths_name_kubelets_endpoints() {
        let p = |ns: &str, pod: &str, uid: Option<&str>, c: &str| PodPath {
            namespace: ns.into(),
            pod: pod.into(),
            uid: uid.map(Into::into),
            container: c.into(),
        };
        assert_eq!(endpoint("/containerLogs/default/web/c"), Endpoint::ContainerLogs(p("default", "web", None, "c")));
        assert_eq!(endpoint("/exec/ns/web/uid-1/c"), Endpoint::Exec(p("ns", "web", Some("uid-1"), "c")));
        assert_eq!(endpoint("/attach/ns/web/c"), Endpoint::Attach(p("ns", "web", None, "c")));
        assert_eq!(endpoint("/portForward/ns/web"), Endpoint::PortForward(p("ns", "web", None, "")));
        assert_eq!(endpoint("/portForward/ns/web/u"), Endpoint::PortForward(p("ns", "web", Some("u"), "")));
        for missing in
            ["/exec/ns/web", "/exec/ns", "/containerLogs//web/c", "/run/ns/web/c", "/runningpods/", "/debug/pprof/"]
        {
            assert_eq!(endpoint(missing), Endpoint::NotFound, "{missing}");
        }
        assert_eq!(endpoint("/pods"), Endpoint::Pods);
        assert_eq!(endpoint("/metrics/probes"), Endpoint::Metrics);
        assert_eq!(endpoint("/metrics/resource"), Endpoint::MetricsResource);
        assert_eq!(endpoint("/stats/summary"), Endpoint::StatsSummary);
        for other in [
            "/stats",
            "/stats/",
            "/stats/container",
            "/stats/default/web/uid/c",
            "/stats/summary/x",
            "/metrics/cadvisor",
        ] {
            assert_eq!(endpoint(other), Endpoint::NotFound, "{other}");
        }
    }

    #[test]
    fn requests_are_authorized_as_kubelet_maps_them() {
        assert_eq!(subresource("/stats/summary"), "stats");
        assert_eq!(subresource("/metrics/resource"), "metrics");
        assert_eq!(subresource("/metrics"), "metrics");
        assert_eq!(subresource("/logs/syslog"), "log");
        assert_eq!(subresource("/exec/a/b/c"), "proxy");
        assert_eq!(subresource("/statsx"), "proxy");
        assert_eq!(
            (verb("POST"), verb("GET"), verb("PUT"), verb("PATCH"), verb("DELETE")),
            ("create", "get", "update", "patch", "delete")
        );
    }
}
