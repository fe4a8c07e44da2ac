//! kd web for the tests: serving a test daemon's web client on a free
//! loopback port, pairing, and plain HTTP/1.1 over TCP (what a browser's
//! requests are, without a browser: the refusals are tested this way).

use std::io::{Read, Write};
use std::net::TcpStream;

use kd_client::prelude::*;

use crate::{DEADLINE, Kdd};

/// A test daemon's web client: where it listens and a pairing URL.
pub struct Served {
    /// `127.0.0.1:PORT`.
    pub addr: String,
    pub url: String,
}

/// Serves the web client of `kdd` on a free loopback port.
pub async fn serve(kdd: &Kdd) -> Served {
    let c = kdd.client().await;
    let s = c.web_serve(Some("127.0.0.1:0".into()), None, None, None, None).await.expect("web.serve");
    Served { addr: s.listen, url: s.url }
}

/// A new pairing URL of the web client `kdd` serves.
pub async fn token_url(kdd: &Kdd) -> String {
    kdd.client().await.web_serve(None, None, None, None, None).await.expect("web.serve").url
}

/// An HTTP answer: status, headers (names lowercased), body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// Sends `request` (a whole HTTP/1.1 request, `Connection: close`) to
/// `addr` and reads the answer to its end — or, for `101 Switching
/// Protocols`, its head only.
pub fn http(addr: &str, request: &str) -> Answer {
    let mut s = TcpStream::connect(addr).expect("connect to kd web");
    s.set_read_timeout(Some(DEADLINE)).expect("timeout");
    s.write_all(request.as_bytes()).expect("send");
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) => panic!("reading kd web's answer: {e} (so far {:?})", String::from_utf8_lossy(&raw)),
        }
        if raw.starts_with(b"HTTP/1.1 101") && raw.windows(4).any(|w| w == b"\r\n\r\n") {
            break;
        }
    }
    parse(&raw)
}

fn parse(raw: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Answer { status, headers, body: body.to_string() }
}

/// `GET path` with `Host: host` and extra header lines (each ending `\r\n`).
pub fn get(addr: &str, host: &str, path: &str, extra: &str) -> Answer {
    http(addr, &format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n"))
}

/// `POST /rpc` of a JSON body with `Host: host` and extra header lines.
pub fn post_rpc(addr: &str, host: &str, extra: &str, body: &str) -> Answer {
    http(
        addr,
        &format!(
            "POST /rpc HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        ),
    )
}

/// A WebSocket upgrade of `/rpc` with extra header lines.
pub fn upgrade(addr: &str, host: &str, extra: &str) -> Answer {
    http(
        addr,
        &format!(
            "GET /rpc HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        ),
    )
}

/// Opens a pairing URL (its path and query on `addr`): the session
/// cookie's `name=value`.
pub fn pair(addr: &str, url: &str) -> String {
    let path = &url[url.find("/pair").expect("a pairing URL")..];
    let a = get(addr, addr, path, "");
    assert_eq!(a.status, 303, "{a:?}");
    let cookie = a.header("set-cookie").expect("a session cookie");
    cookie.split(';').next().expect("name=value").to_string()
}
