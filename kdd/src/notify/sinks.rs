//! The sinks a notification goes to, each call bounded by `notify.timeout`
//! and answering a [`SinkAnswer`]:
//! - `webhook`: a POST of the notification as JSON (hyper over rustls with
//!   the ring provider and Mozilla's roots, HTTP/1.1; redirects are not
//!   followed); the answer is the HTTP status, a 2xx is success;
//! - `command`: the argv run directly (no shell), the notification as JSON
//!   on its stdin, stdout discarded, the end of its stderr kept; killed at
//!   the timeout; success is exit status 0;
//! - `desktop`: in [`super::desktop`].

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use kd_proto::notify::{Notification, SinkAnswer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The webhook client.
pub type Http = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// How much of a command's stderr is kept in its answer.
const STDERR_KEPT: usize = 400;
/// How much of a command's stderr or a response's body is read at most.
const READ_AT_MOST: usize = 64 * 1024;

/// A client for webhooks: http and https, Mozilla's roots.
pub fn http() -> Result<Http, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("cannot set up TLS for webhooks: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls).https_or_http().enable_http1().build();
    Ok(Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(https))
}

pub(super) fn answer(sink: &str, target: String, started: Instant, result: Result<String, String>) -> SinkAnswer {
    let ms = started.elapsed().as_millis() as u64;
    match result {
        Ok(answer) => SinkAnswer { sink: sink.into(), target, ok: true, answer, ms },
        Err(answer) => SinkAnswer { sink: sink.into(), target, ok: false, answer, ms },
    }
}

/// The URL as it may be shown: no user info, no query.
pub fn shown_url(url: &str) -> String {
    match url.parse::<http::Uri>() {
        Ok(u) => {
            let host = u.host().unwrap_or("");
            let port = u.port().map(|p| format!(":{p}")).unwrap_or_default();
            format!("{}://{host}{port}{}", u.scheme_str().unwrap_or("http"), u.path())
        }
        Err(_) => "(a bad URL)".into(),
    }
}

/// POSTs `n` to `url`.
pub async fn webhook(http: Result<&Http, &String>, url: &str, n: &Notification, timeout: Duration) -> SinkAnswer {
    let started = Instant::now();
    let result = async {
        let http = http.map_err(|e| e.clone())?;
        let body = serde_json::to_vec(n).map_err(|e| e.to_string())?;
        let req = hyper::Request::post(url)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::USER_AGENT, format!("kd/{}", kd_proto::VERSION))
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| format!("bad request: {e}"))?;
        let call = async {
            let resp = http.request(req).await.map_err(|e| describe(&e))?;
            let status = resp.status();
            // Read (a bounded part of) the body so the connection can be reused.
            let mut body = resp.into_body();
            let mut read = 0;
            while read < READ_AT_MOST {
                match body.frame().await {
                    Some(Ok(f)) => read += f.data_ref().map_or(0, |d| d.len()),
                    _ => break,
                }
            }
            Ok::<_, String>(status)
        };
        let status = tokio::time::timeout(timeout, call)
            .await
            .map_err(|_| format!("no answer within {} s", timeout.as_secs_f32()))??;
        let said = format!("HTTP {}", status.as_u16());
        if status.is_success() { Ok(said) } else { Err(said) }
    }
    .await;
    answer("webhook", shown_url(url), started, result)
}

/// An error with its causes, on one line.
pub(super) fn describe(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s
}

/// Runs `argv` with `n` on its stdin.
pub async fn command(argv: &[String], n: &Notification, timeout: Duration) -> SinkAnswer {
    let started = Instant::now();
    let target = argv.first().cloned().unwrap_or_default();
    let result = async {
        let (program, args) = argv.split_first().ok_or("no program")?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = crate::identity::children::spawn(&mut cmd, crate::identity::children::Origin::Tool)
            .map_err(|e| format!("cannot start: {e}"))?;
        let json = serde_json::to_vec(n).map_err(|e| e.to_string())?;
        let mut stdin = child.stdin.take();
        let mut stderr = child.stderr.take();
        let run = async {
            if let Some(mut i) = stdin.take() {
                // A program that does not read its stdin is not a failure.
                let _ = i.write_all(&json).await;
                let _ = i.write_all(b"\n").await;
            }
            let mut err = Vec::new();
            if let Some(e) = stderr.as_mut() {
                let _ = e.take(READ_AT_MOST as u64).read_to_end(&mut err).await;
            }
            let status = child.wait().await.map_err(|e| e.to_string())?;
            Ok::<_, String>((status, err))
        };
        let (status, err) = match tokio::time::timeout(timeout, run).await {
            Ok(r) => r?,
            Err(_) => return Err(format!("killed after {} s", timeout.as_secs_f32())),
        };
        let err = String::from_utf8_lossy(&err);
        let tail: String = {
            let t = err.trim();
            let skip = t.chars().count().saturating_sub(STDERR_KEPT);
            super::what::clip(&t.chars().skip(skip).collect::<String>(), STDERR_KEPT)
        };
        let said = match status.code() {
            Some(c) => format!("exit status {c}"),
            None => "killed by a signal".to_string(),
        };
        let said = if tail.is_empty() { said } else { format!("{said}: {tail}") };
        if status.success() { Ok(said) } else { Err(said) }
    }
    .await;
    answer("command", target, started, result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kd_proto::notify::NotifyKind;

    fn note() -> Notification {
        Notification {
            id: 0,
            kind: NotifyKind::Test,
            thread: None,
            title: "kd: a test".into(),
            member: None,
            text: "t".into(),
            link: None,
            workspace: None,
            exchange: None,
            approval: None,
            at_ms: 1,
        }
    }

    #[test]
    fn a_shown_url_has_no_secrets() {
        assert_eq!(shown_url("https://u:pw@ntfy.sh:8443/topic?auth=x"), "https://ntfy.sh:8443/topic");
        assert_eq!(shown_url("http://127.0.0.1/a"), "http://127.0.0.1/a");
    }

    #[tokio::test]
    async fn a_command_gets_the_notification_on_stdin_and_its_status_is_said() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("got");
        let sh = |s: &str| vec!["/bin/sh".to_string(), "-c".into(), s.into()];
        let a = command(&sh(&format!("cat > {}", out.display())), &note(), Duration::from_secs(10)).await;
        assert!(a.ok, "{a:?}");
        assert_eq!(a.answer, "exit status 0");
        let got: Notification = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
        assert_eq!(got, note());
        let a = command(&sh("echo nope >&2; exit 3"), &note(), Duration::from_secs(10)).await;
        assert_eq!((a.ok, a.answer.as_str()), (false, "exit status 3: nope"));
        let a = command(&["/nonexistent/kd-notify".to_string()], &note(), Duration::from_secs(10)).await;
        assert!(!a.ok && a.answer.starts_with("cannot start"), "{a:?}");
        let a = command(&sh("exec sleep 30"), &note(), Duration::from_millis(200)).await;
        assert!(!a.ok && a.answer.starts_with("killed after"), "{a:?}");
        assert!(a.ms < 10_000);
    }

    #[tokio::test]
    async fn a_webhook_that_cannot_be_reached_says_why() {
        // A port nothing listens on: bind one, then close it.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let a = webhook(http().as_ref(), &format!("http://127.0.0.1:{port}/x"), &note(), Duration::from_secs(5)).await;
        assert!(!a.ok, "{a:?}");
        assert!(a.answer.to_lowercase().contains("connect"), "{a:?}");
    }
}
