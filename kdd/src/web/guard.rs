//! The browser's threats, answered on every request before anything else:
//! the `Host` a request names must be one this listener is known by (a
//! DNS-rebinding page reaches kdd under its own name: refused 421), a
//! WebSocket's `Origin` (and a POST's, when sent) must be the page's own
//! (cross-site WebSocket hijacking: refused 403), and every response
//! carries the headers that keep the page to its own code
//! ([`secure_headers`]: no inline script, no framing, no sniffing, no
//! referrer).

use std::net::{IpAddr, SocketAddr};

/// The Content-Security-Policy of every response: only the page's own
/// files, no inline script or style, no framing.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/// The names a listener answers to, as `host:port` (lowercase).
#[derive(Debug, Clone)]
pub struct Names {
    hosts: Vec<String>,
    tls: bool,
}

impl Names {
    /// The names of a listener on `addr`: on a loopback address,
    /// `localhost`, `127.0.0.1` and `[::1]` (also what an SSH tunnel to it
    /// gives, on the same port); else the address itself when it is not a
    /// wildcard, the machine's host name (and `NAME.local`) and loopback's
    /// names; on any address, the `extra` names (`web.names`, a wildcard's
    /// interface addresses).
    pub fn new(addr: SocketAddr, tls: bool, host_name: &str, extra: &[String]) -> Names {
        let port = addr.port();
        let mut names: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "[::1]".into()];
        if !addr.ip().is_loopback() {
            if !addr.ip().is_unspecified() {
                names.push(match addr.ip() {
                    IpAddr::V4(ip) => ip.to_string(),
                    IpAddr::V6(ip) => format!("[{ip}]"),
                });
            }
            if !host_name.is_empty() {
                names.push(host_name.to_lowercase());
                names.push(format!("{}.local", host_name.to_lowercase()));
            }
        }
        names.extend(extra.iter().map(|n| n.to_lowercase()));
        let default_port = if tls { 443 } else { 80 };
        let mut hosts = Vec::new();
        for n in names {
            hosts.push(format!("{n}:{port}"));
            if port == default_port {
                hosts.push(n);
            }
        }
        Names { hosts, tls }
    }

    /// The request's `Host` when it is one of ours (lowercased), else
    /// `None`.
    pub fn host(&self, headers: &http::HeaderMap) -> Option<String> {
        let host = headers.get(http::header::HOST)?.to_str().ok()?.to_ascii_lowercase();
        self.hosts.contains(&host).then_some(host)
    }

    /// The page's origin when reached as `host`.
    pub fn origin(&self, host: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{host}")
    }

    /// Whether the request's `Origin` is the page's own (reached as `host`);
    /// `required`: a missing one is refused too.
    pub fn same_origin(&self, headers: &http::HeaderMap, host: &str, required: bool) -> bool {
        match headers.get(http::header::ORIGIN) {
            None => !required,
            Some(o) => o.to_str().is_ok_and(|o| o.eq_ignore_ascii_case(&self.origin(host))),
        }
    }
}

/// The headers every response carries.
pub fn secure_headers(headers: &mut http::HeaderMap) {
    use http::HeaderValue;
    headers.insert(http::header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(http::header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(http::header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(http::header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(http::header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(http::header::HeaderName, &str)]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for (k, v) in pairs {
            h.insert(k.clone(), v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_loopback_listener_answers_to_loopbacks_names_on_its_port_only() {
        let names = Names::new("127.0.0.1:7433".parse().unwrap(), false, "box", &[]);
        for ok in ["127.0.0.1:7433", "localhost:7433", "LOCALHOST:7433", "[::1]:7433"] {
            assert!(names.host(&headers(&[(http::header::HOST, ok)])).is_some(), "{ok}");
        }
        for refused in ["evil.example:7433", "127.0.0.1:80", "localhost", "box:7433", "127.0.0.1:7433.evil"] {
            assert!(names.host(&headers(&[(http::header::HOST, refused)])).is_none(), "{refused}");
        }
        assert!(names.host(&http::HeaderMap::new()).is_none(), "no Host");
        // A name the King gave (a reverse proxy on this machine) is one too.
        let named = Names::new("127.0.0.1:7433".parse().unwrap(), false, "box", &["kd.example.lan".into()]);
        assert!(named.host(&headers(&[(http::header::HOST, "kd.example.lan:7433")])).is_some());
        assert!(named.host(&headers(&[(http::header::HOST, "box:7433")])).is_none());
    }

    #[test]
    fn a_lan_listener_answers_to_its_address_and_the_machines_name() {
        let names = Names::new("0.0.0.0:443".parse().unwrap(), true, "Box", &["kd.lan".into()]);
        for ok in ["box:443", "box", "box.local", "kd.lan", "localhost:443"] {
            assert!(names.host(&headers(&[(http::header::HOST, ok)])).is_some(), "{ok}");
        }
        assert!(names.host(&headers(&[(http::header::HOST, "0.0.0.0:443")])).is_none());
        let names = Names::new("192.168.1.9:7433".parse().unwrap(), true, "box", &[]);
        assert!(names.host(&headers(&[(http::header::HOST, "192.168.1.9:7433")])).is_some());
    }

    #[test]
    fn only_the_pages_own_origin_is_same_origin() {
        let names = Names::new("127.0.0.1:7433".parse().unwrap(), false, "box", &[]);
        let h = |o: &str| headers(&[(http::header::ORIGIN, o)]);
        assert!(names.same_origin(&h("http://127.0.0.1:7433"), "127.0.0.1:7433", true));
        assert!(!names.same_origin(&h("http://localhost:7433"), "127.0.0.1:7433", true), "another origin");
        assert!(!names.same_origin(&h("https://127.0.0.1:7433"), "127.0.0.1:7433", true), "another scheme");
        assert!(!names.same_origin(&h("null"), "127.0.0.1:7433", true));
        assert!(!names.same_origin(&http::HeaderMap::new(), "127.0.0.1:7433", true));
        assert!(names.same_origin(&http::HeaderMap::new(), "127.0.0.1:7433", false));
    }
}
