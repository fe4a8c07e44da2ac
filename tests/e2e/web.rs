//! kd web (issue 35): kdd serves the web client on a TCP address, paired
//! by a one-time token. Here its refusals, with a plain HTTP client (what a
//! hostile page or another local user can send): nothing without a
//! session, a foreign Host (DNS rebinding), a WebSocket from a foreign
//! Origin (cross-site WebSocket hijacking); and `/rpc` being the socket's
//! API exactly. The page in a real browser: `web_browser.rs`.

use kd_client::prelude::*;
use kd_tests::Kdd;
use kd_tests::web::{get, http, pair, post_rpc, serve, token_url, upgrade};

const HELLO: &str = r#"{"jsonrpc":"2.0","id":1,"method":"daemon.hello"}"#;
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; \
                   frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

#[tokio::test(flavor = "multi_thread")]
async fn without_a_session_nothing_is_served_but_how_to_pair() {
    let kdd = Kdd::start();
    let web = serve(&kdd).await;
    let a = &web.addr;
    for path in ["/", "/t/t-1", "/approvals", "/app.js", "/style.css"] {
        let page = get(a, a, path, "");
        assert_eq!(page.status, 401, "{path}: {page:?}");
        assert!(page.body.contains("Pair first") && !page.body.contains("<script"), "{path}: {}", page.body);
        assert_eq!(page.header("content-security-policy"), Some(CSP), "{path}");
    }
    let rpc = post_rpc(a, a, "", HELLO);
    assert_eq!(rpc.status, 401, "{rpc:?}");
    assert!(rpc.body.contains("pair this browser first"), "{}", rpc.body);
    let ws = upgrade(a, a, &format!("Origin: http://{a}\r\n"));
    assert_eq!(ws.status, 401, "a WebSocket without a session: {ws:?}");
    // A cookie kd did not make is no session.
    let forged = post_rpc(a, a, "Cookie: kd_session=0123456789abcdef\r\n", HELLO);
    assert_eq!(forged.status, 401, "{forged:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pairing_token_becomes_a_session_cookie_once() {
    let kdd = Kdd::start();
    let web = serve(&kdd).await;
    let a = &web.addr;
    assert!(web.url.starts_with(&format!("http://{a}/pair?token=")), "{}", web.url);
    let path = &web.url[web.url.find("/pair").unwrap()..];
    let paired = get(a, a, path, "User-Agent: TestBrowser/1\r\n");
    assert_eq!((paired.status, paired.header("location")), (303, Some("/")), "{paired:?}");
    let set = paired.header("set-cookie").expect("a session cookie");
    assert!(set.starts_with("kd_session=") && set.ends_with("; HttpOnly; SameSite=Strict; Path=/"), "{set}");
    let cookie = set.split(';').next().unwrap().to_string();
    // Used once.
    let again = get(a, a, path, "");
    assert_eq!(again.status, 403, "{again:?}");
    assert!(again.header("set-cookie").is_none());
    // The session opens the page and /rpc.
    let page = get(a, a, "/", &format!("Cookie: {cookie}\r\n"));
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.contains("<script type=\"module\" src=\"/app.js\">"), "{}", page.body);
    for (h, v) in
        [("content-security-policy", CSP), ("x-content-type-options", "nosniff"), ("referrer-policy", "no-referrer")]
    {
        assert_eq!(page.header(h), Some(v), "{h}");
    }
    let hello = post_rpc(a, a, &format!("Cookie: {cookie}\r\n"), HELLO);
    assert_eq!(hello.status, 200, "{hello:?}");
    assert!(hello.body.contains("\"protocol\":1"), "{}", hello.body);
    // kd web sessions lists it; revoked, its cookie is refused.
    let c = kdd.client().await;
    let sessions = c.web_sessions().await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].user_agent.as_deref(), Some("TestBrowser/1"));
    let out = kd_tests::run({
        let mut kd = kdd.kd();
        kd.args(["web", "revoke", &sessions[0].id]);
        kd
    })
    .await;
    assert!(out.status.success(), "{} {}", out.stdout, out.stderr);
    assert_eq!(post_rpc(a, a, &format!("Cookie: {cookie}\r\n"), HELLO).status, 401, "revoked");
    assert!(c.web_sessions().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_foreign_host_is_refused_whatever_it_carries() {
    let kdd = Kdd::start();
    let web = serve(&kdd).await;
    let a = &web.addr;
    let port = a.rsplit(':').next().unwrap();
    let cookie = pair(a, &token_url(&kdd).await);
    let evil = format!("rebind.evil.example:{port}");
    // A page of evil.example whose name now resolves to 127.0.0.1.
    for path in ["/", "/app.js"] {
        let page = get(a, &evil, path, &format!("Cookie: {cookie}\r\n"));
        assert_eq!(page.status, 421, "{path}: {page:?}");
    }
    let rpc = post_rpc(a, &evil, &format!("Cookie: {cookie}\r\n"), HELLO);
    assert_eq!(rpc.status, 421, "{rpc:?}");
    let url = token_url(&kdd).await;
    let pairing = get(a, &evil, &url[url.find("/pair").unwrap()..], "");
    assert_eq!(pairing.status, 421, "{pairing:?}");
    assert_eq!(http(a, "GET / HTTP/1.0\r\n\r\n").status, 421, "no Host at all");
    // The names of loopback (an SSH tunnel's too) are kd web's.
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        assert_eq!(post_rpc(a, &host, &format!("Cookie: {cookie}\r\n"), HELLO).status, 200, "{host}");
    }
    // The token was not spent by the refused request.
    pair(a, &url);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_websocket_from_another_origin_is_refused() {
    let kdd = Kdd::start();
    let web = serve(&kdd).await;
    let a = &web.addr;
    let cookie = pair(a, &web.url);
    // A page of evil.example opening a WebSocket to kd web: the browser
    // sends the cookie (a WebSocket is not held to SameSite by every
    // browser) and its own Origin.
    let hijack = upgrade(a, a, &format!("Cookie: {cookie}\r\nOrigin: http://evil.example\r\n"));
    assert_eq!(hijack.status, 403, "{hijack:?}");
    let no_origin = upgrade(a, a, &format!("Cookie: {cookie}\r\n"));
    assert_eq!(no_origin.status, 403, "{no_origin:?}");
    let page = upgrade(a, a, &format!("Cookie: {cookie}\r\nOrigin: http://{a}\r\n"));
    assert_eq!(page.status, 101, "the page's own WebSocket: {page:?}");
    // A POST carrying another Origin is refused too.
    let post = post_rpc(a, a, &format!("Cookie: {cookie}\r\nOrigin: http://evil.example\r\n"), HELLO);
    assert_eq!(post.status, 403, "{post:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn rpc_answers_as_the_socket_does() {
    let kdd = Kdd::start();
    let web = serve(&kdd).await;
    let a = &web.addr;
    let cookie = pair(a, &web.url);
    for body in [
        r#"{"jsonrpc":"2.0","id":7,"method":"no.such"}"#,
        r#"{"jsonrpc":"2.0","id":8,"method":"thread.get","params":{"thread":"t-none"}}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"thread.list","params":{"nope":1}}"#,
        r#"{"jsonrpc":"2.0","id":{"an":"object"},"method":"daemon.hello"}"#,
        r#"{not json"#,
    ] {
        let socket = kd_tests::http_post(&kdd.socket, body).unwrap();
        let web = post_rpc(a, a, &format!("Cookie: {cookie}\r\n"), body);
        let strip = |s: &str| s.replace(&format!("\"pid\":{}", kdd.pid), "");
        assert_eq!((web.status, strip(&web.body)), (socket.0, strip(&socket.1)), "{body}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn web_stop_closes_the_listener_and_a_lan_address_wants_tls() {
    let kdd = Kdd::start();
    let web = serve(&kdd).await;
    let c = kdd.client().await;
    // Another address while serving: refused, naming the one served.
    let e = c.web_serve(Some("127.0.0.2:7999".into()), None, None, None, None).await.unwrap_err();
    assert!(e.to_string().contains(&format!("serves on {} already", web.addr)), "{e}");
    assert!(c.web_stop().await.unwrap().stopped);
    assert!(std::net::TcpStream::connect(&web.addr).is_err(), "the listener is closed");
    assert!(!c.web_stop().await.unwrap().stopped);
    // A non-loopback address: TLS with kd's own certificate, or plain HTTP
    // only when asked.
    let lan = c.web_serve(Some("0.0.0.0:0".into()), None, None, None, None).await.unwrap();
    assert!(lan.tls && lan.self_signed && lan.url.starts_with("https://"), "{lan:?}");
    assert_eq!(lan.fingerprint.as_deref().map(str::len), Some(95), "{lan:?}");
    c.web_stop().await.unwrap();
    let again = c.web_serve(Some("0.0.0.0:0".into()), None, None, None, None).await.unwrap();
    assert_eq!(again.fingerprint, lan.fingerprint, "kd's certificate is kept");
    c.web_stop().await.unwrap();
    let plain = c.web_serve(Some("0.0.0.0:0".into()), Some(true), None, None, None).await.unwrap();
    assert!(!plain.tls && plain.url.starts_with("http://"), "{plain:?}");
    c.web_stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_web_prints_the_pairing_url_on_its_last_line_and_a_qr_code() {
    let kdd = Kdd::start();
    let mut kd = kdd.kd();
    kd.args(["web", "--listen", "127.0.0.1:0", "--qr"]);
    let out = kd_tests::run(kd).await;
    assert!(out.status.success(), "{} {}", out.stdout, out.stderr);
    let last = out.stdout.lines().last().unwrap_or_default();
    assert!(last.starts_with("http://127.0.0.1:") && last.contains("/pair?token="), "{}", out.stdout);
    assert!(out.stdout.contains('▀') || out.stdout.contains('▄'), "a QR code: {}", out.stdout);
    let mut kd = kdd.kd();
    kd.args(["web", "--stop"]);
    let out = kd_tests::run(kd).await;
    assert!(out.status.success() && out.stdout.contains("kd web stopped."), "{} {}", out.stdout, out.stderr);
}

/// `kd web --open` gives the browser a page of the user's own that forwards
/// to the one-time link, never the link: a program's arguments are there
/// for any local user to read (`/proc/PID/cmdline`), and whoever opens the
/// link first is paired as the King.
#[tokio::test(flavor = "multi_thread")]
async fn kd_web_open_never_puts_the_pairing_link_on_a_command_line() {
    use std::os::unix::fs::PermissionsExt;
    let kdd = Kdd::start();
    let bin = tempfile::tempdir().unwrap();
    let said = bin.path().join("argv");
    let opener = bin.path().join("xdg-open");
    std::fs::write(&opener, format!("#!/bin/sh\nprintf '%s\\n' \"$@\" > {}.tmp && mv {0}.tmp {0}\n", said.display()))
        .unwrap();
    std::fs::set_permissions(&opener, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut kd = kdd.kd();
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    kd.env("PATH", path).args(["web", "--listen", "127.0.0.1:0", "--open"]);
    let out = kd_tests::run(kd).await;
    assert!(out.status.success(), "{} {}", out.stdout, out.stderr);
    let url = out.stdout.lines().last().unwrap_or_default().to_string();
    assert!(url.contains("/pair?token="), "{}", out.stdout);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let argv = loop {
        if let Ok(argv) = std::fs::read_to_string(&said) {
            break argv;
        }
        assert!(std::time::Instant::now() < deadline, "xdg-open was not run");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert!(!argv.contains("token"), "the link on xdg-open's command line: {argv}");
    let page = std::path::PathBuf::from(argv.trim());
    let meta = std::fs::symlink_metadata(&page).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{}", page.display());
    let dir = std::fs::metadata(page.parent().unwrap()).unwrap();
    assert_eq!(dir.permissions().mode() & 0o777, 0o700);
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains(&format!("content=\"0;url={url}\"")) && !html.contains("<script"), "{html}");
    // The link is still the browser's to use, once.
    let addr = url.trim_start_matches("http://").split('/').next().unwrap().to_string();
    let paired = get(&addr, &addr, &url[url.find("/pair").unwrap()..], "");
    assert_eq!(paired.status, 303, "{paired:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_with_a_page_open_stops_at_once() {
    let mut kdd = Kdd::start();
    let web = serve(&kdd).await;
    let a = &web.addr;
    let cookie = pair(a, &web.url);
    // A WebSocket kept open and a connection that sends half a request.
    let mut ws = std::net::TcpStream::connect(a).unwrap();
    use std::io::Write;
    ws.write_all(
        format!(
            "GET /rpc HTTP/1.1\r\nHost: {a}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: \
             dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nCookie: {cookie}\r\nOrigin: http://{a}\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut half = std::net::TcpStream::connect(a).unwrap();
    half.write_all(b"POST /rpc HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{").unwrap();
    let started = std::time::Instant::now();
    let status = kdd.stop();
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "{:?}", started.elapsed());
}

mod attention;
mod browser;
mod thread;
mod work;

#[tokio::test(flavor = "multi_thread")]
async fn web_listen_in_the_users_configuration_serves_from_the_start() {
    let config = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::create_dir_all(config.path().join("kd")).unwrap();
    std::fs::write(
        config.path().join("kd/config.json"),
        serde_json::json!({"web": {"listen": format!("127.0.0.1:{port}")}}).to_string(),
    )
    .unwrap();
    let xdg = config.path().display().to_string();
    let kdd = Kdd::start_env(&[], &[("XDG_CONFIG_HOME", xdg.as_str())]);
    let a = format!("127.0.0.1:{port}");
    // Served before any kd web: nothing without a session.
    assert_eq!(get(&a, &a, "/", "").status, 401);
    let mut kd = kdd.kd();
    kd.arg("web");
    let out = kd_tests::run(kd).await;
    assert!(out.status.success(), "{} {}", out.stdout, out.stderr);
    let url = out.stdout.lines().last().unwrap_or_default().to_string();
    assert!(url.starts_with(&format!("http://{a}/pair?token=")), "{}", out.stdout);
    pair(&a, &url);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lan_address_pairs_over_tls_with_a_secure_cookie() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let lan = c.web_serve(Some("0.0.0.0:0".into()), None, None, None, None).await.unwrap();
    let port = lan.listen.rsplit(':').next().unwrap().to_string();
    let a = format!("127.0.0.1:{port}");
    let path = &lan.url[lan.url.find("/pair").unwrap()..];
    // curl over TLS (-k: kd's certificate is self-signed; its fingerprint is
    // what the King checks), headers only.
    let curl = |path: &str| {
        let out = std::process::Command::new("curl")
            .args(["-sk", "-o", "/dev/null", "-D", "-", "--max-time", "20", &format!("https://{a}{path}")])
            .output()
            .expect("curl");
        String::from_utf8_lossy(&out.stdout).to_ascii_lowercase()
    };
    let paired = curl(path);
    assert!(paired.starts_with("http/1.1 303"), "{paired}");
    assert!(paired.contains("; httponly; samesite=strict; path=/; secure"), "a Secure cookie over TLS: {paired}");
    assert!(curl("/").starts_with("http/1.1 401"), "no session, over TLS too");
    // Plain HTTP to the TLS port is no HTTP answer.
    let mut plain = std::net::TcpStream::connect(&a).unwrap();
    use std::io::{Read, Write};
    plain.set_read_timeout(Some(kd_tests::DEADLINE)).unwrap();
    plain.write_all(format!("GET / HTTP/1.1\r\nHost: {a}\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(
        !got.starts_with(b"HTTP/1.1 200") && !got.starts_with(b"HTTP/1.1 401"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    c.web_stop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_session_loses_its_open_websocket() {
    use std::io::{Read, Write};
    let kdd = Kdd::start();
    let web = serve(&kdd).await;
    let a = &web.addr;
    let cookie = pair(a, &web.url);
    let mut ws = std::net::TcpStream::connect(a).unwrap();
    ws.set_read_timeout(Some(kd_tests::DEADLINE)).unwrap();
    ws.write_all(
        format!(
            "GET /rpc HTTP/1.1\r\nHost: {a}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: \
             dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nCookie: {cookie}\r\nOrigin: http://{a}\r\n\r\n"
        )
        .as_bytes(),
    )
    .unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        ws.read_exact(&mut byte).expect("the upgrade's answer");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    let c = kdd.client().await;
    assert_eq!(c.web_revoke(None, Some(true)).await.unwrap().revoked, 1);
    // The page's WebSocket ends (EOF or a reset), well before any ping.
    let mut rest = Vec::new();
    let started = std::time::Instant::now();
    let _ = ws.read_to_end(&mut rest);
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lan_listener_answers_to_the_names_given_and_the_machines_addresses_only() {
    let kdd = Kdd::start();
    let mut kd = kdd.kd();
    kd.args(["web", "--listen", "0.0.0.0:0", "--insecure-http", "--name", "KD.Example.LAN", "--json"]);
    let out = kd_tests::run(kd).await;
    assert!(out.status.success(), "{} {}", out.stdout, out.stderr);
    let serving: kd_proto::web::WebServing = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(serving.names.first().map(String::as_str), Some("kd.example.lan"), "{serving:?}");
    let port = serving.listen.rsplit(':').next().unwrap().to_string();
    let a = format!("127.0.0.1:{port}");
    // The given name and each interface address are kd web's (pair first:
    // 401); any other name is a rebinding (421).
    for name in &serving.names {
        let page = get(&a, &format!("{name}:{port}"), "/", "");
        assert_eq!(page.status, 401, "{name}: {page:?}");
    }
    assert!(serving.names.len() > 1, "the machine's interface addresses: {serving:?}");
    assert_eq!(get(&a, &format!("evil.example:{port}"), "/", "").status, 421);
    // A name it was not started with: refused while it serves.
    let mut kd = kdd.kd();
    kd.args(["web", "--name", "other.lan"]);
    let out = kd_tests::run(kd).await;
    assert!(!out.status.success() && out.stderr.contains("not as other.lan"), "{} {}", out.stdout, out.stderr);
    // A bad name: a clear error.
    let c = kdd.client().await;
    let e = c.web_serve(None, None, None, None, Some(vec!["evil.com:80".into()])).await.unwrap_err();
    assert!(e.to_string().contains("not a host name"), "{e}");
    c.web_stop().await.unwrap();
}
