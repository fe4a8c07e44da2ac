//! Attention (issue 33, item 6): kd tells the King through the `notify`
//! sinks — a webhook (a loopback HTTP server here), a command (a shell
//! writing each event it reads to a file) and the desktop (a notification
//! server of the test's own on a private D-Bus session bus) — at most once
//! per exchange and kind; a sink that hangs never holds an exchange; `kd
//! notify test` says what each sink answered.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

use kd_client::prelude::*;
use kd_proto::notify::{Notification, NotifyEvent, NotifyKind, NotifyTest};
use kd_proto::types::*;
use kd_tests::{Kdd, Workspace, collect_until, run, within};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// A loopback webhook: every POST's JSON body, answered `status` (none:
/// never answered).
struct Hook {
    url: String,
    got: mpsc::UnboundedReceiver<Notification>,
}

impl Hook {
    async fn start(status: Option<u16>) -> Hook {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/kd-topic", listener.local_addr().unwrap());
        let (tx, got) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let tx = tx.clone();
                tokio::spawn(async move {
                    let Some(body) = read_request(&mut s).await else { return };
                    tx.send(serde_json::from_slice(&body).expect("a notification")).unwrap();
                    match status {
                        Some(code) => {
                            let answer =
                                format!("HTTP/1.1 {code} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
                            let _ = s.write_all(answer.as_bytes()).await;
                        }
                        None => {
                            let _ = s.read(&mut [0u8; 1]).await;
                        }
                    }
                });
            }
        });
        Hook { url, got }
    }

    /// The next `n` notifications.
    async fn next(&mut self, n: usize) -> Vec<Notification> {
        let mut out = Vec::new();
        within("webhook notifications", async {
            while out.len() < n {
                out.push(self.got.recv().await.unwrap());
            }
        })
        .await;
        out
    }
}

/// A POST's body (its head read up to the blank line, then content-length bytes).
async fn read_request(s: &mut tokio::net::TcpStream) -> Option<Vec<u8>> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    assert!(head.starts_with("post /kd-topic http/1.1"), "{head}");
    assert!(head.contains("content-type: application/json"), "{head}");
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .expect("content-length");
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(buf[head_end..head_end + len].to_vec())
}

/// A command sink writing each event it reads into a file of its own in `dir`.
fn writer(dir: &Path) -> serde_json::Value {
    serde_json::json!(["/bin/sh", "-c", "cat > \"$0/$$.json.part\" && mv \"$0/$$.json.part\" \"$0/$$.json\"", dir])
}

/// The notifications the command sink wrote, once there are `n`.
async fn written(dir: &Path, n: usize) -> Vec<Notification> {
    within("command notifications", async {
        loop {
            let files: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .filter_map(|e| e.ok())
                .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
                .collect();
            if files.len() >= n {
                return files
                    .iter()
                    .map(|f| serde_json::from_slice(&std::fs::read(f.path()).unwrap()).unwrap())
                    .collect::<Vec<Notification>>();
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// claude answers, codex and gemini fail; `notify` as given.
fn council(ws: &Workspace, notify: serde_json::Value) {
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude", "codex", "gemini"]},
        "agents": {
            "claude": kd_tests::fake("claude", "claude", &[]),
            "codex": kd_tests::fake("codex", "codex", &[("FAKE_ERROR", "codex broke")]),
            "gemini": kd_tests::fake("gemini", "gemini", &[("FAKE_ERROR", "gemini broke")]),
        },
        "notify": notify,
    }));
}

/// Asks `body` in `t` with `rounds` auto-rounds and waits for the exchange's end; its id.
async fn ask(c: &kd_client::Client, t: &str, body: &str, rounds: u32) -> u64 {
    let mut sub = c.thread_subscribe(t.into(), None, None).await.unwrap();
    let sent =
        c.council_send(t.into(), body.into(), None, None, None, None, None, Some(rounds), None, None).await.unwrap();
    let king = sent.message.seq;
    collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::Round { exchange, state, .. } if *exchange == king && *state != RoundState::Running))
    })
    .await;
    king
}

fn kinds(notes: &[Notification]) -> BTreeSet<(NotifyKind, Option<u64>)> {
    notes.iter().map(|n| (n.kind, n.exchange)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_and_a_command_are_told_each_end_and_failure_once_per_exchange() {
    let mut hook = Hook::start(Some(200)).await;
    let out = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&[]);
    council(
        &ws,
        serde_json::json!({"webhook": hook.url, "command": writer(out.path()), "link": "kd://thread/{thread}"}),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;

    // Two rounds: codex and gemini fail (one `failed` for both), the
    // exchange ends once.
    let x1 = ask(&c, &t, "Plan the release", 1).await;
    let first = hook.next(2).await;
    assert_eq!(kinds(&first), BTreeSet::from([(NotifyKind::Failed, Some(x1)), (NotifyKind::Done, Some(x1))]));
    // The next exchange is told again: the first one's are not repeated before it.
    let x2 = ask(&c, &t, "And the changelog?", 0).await;
    let second = hook.next(2).await;
    assert_eq!(kinds(&second), BTreeSet::from([(NotifyKind::Failed, Some(x2)), (NotifyKind::Done, Some(x2))]));

    let failed = first.iter().find(|n| n.kind == NotifyKind::Failed).unwrap();
    let member = failed.member.clone().unwrap();
    assert!(member == "codex" || member == "gemini", "{member}");
    assert!(failed.title.starts_with(&format!("kd: {member} failed")), "{}", failed.title);
    assert!(failed.text.contains(&format!("{member} broke")), "{}", failed.text);
    for n in first.iter().chain(&second) {
        assert_eq!(n.thread.as_deref(), Some(t.as_str()));
        assert_eq!(n.workspace.as_deref(), Some(ws.path().as_str()));
        assert_eq!(n.link.as_deref(), Some(format!("kd://thread/{t}").as_str()));
    }
    let done = first.iter().find(|n| n.kind == NotifyKind::Done).unwrap();
    assert!(done.text.contains("claude"), "{}", done.text);

    // The command got the same four, each once.
    let mut by_command = kinds(&written(out.path(), 4).await).into_iter().collect::<Vec<_>>();
    let mut by_hook = kinds(&first).into_iter().chain(kinds(&second)).collect::<Vec<_>>();
    by_command.sort();
    by_hook.sort();
    assert_eq!(by_command, by_hook);
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 4, "one file per notification");

    // Kinds not listed in notify.kinds are not sent.
    council(&ws, serde_json::json!({"webhook": hook.url, "kinds": ["done"]}));
    let x3 = ask(&c, &t, "Once more", 0).await;
    assert_eq!(kinds(&hook.next(1).await), BTreeSet::from([(NotifyKind::Done, Some(x3))]));
    let x4 = ask(&c, &t, "Last", 0).await;
    assert_eq!(kinds(&hook.next(1).await), BTreeSet::from([(NotifyKind::Done, Some(x4))]), "no failed of x3 came");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sink_that_hangs_never_holds_an_exchange() {
    let mut hook = Hook::start(None).await;
    let ws = Workspace::new(&[]);
    council(
        &ws,
        serde_json::json!({"webhook": hook.url, "command": ["/bin/sh", "-c", "exec sleep 600"], "timeout": "120s"}),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    // Each exchange ends while the sinks of the one before still hang.
    for i in 0..3 {
        ask(&c, &t, &format!("Question {i}"), 0).await;
        hook.next(2).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_notify_test_says_what_each_sink_answered() {
    let mut ok = Hook::start(Some(200)).await;
    let mut refusing = Hook::start(Some(500)).await;
    let out = tempfile::tempdir().unwrap();
    let ws = Workspace::new(&[]);
    council(
        &ws,
        serde_json::json!({
            "webhook": [ok.url, refusing.url],
            "command": ["/bin/sh", "-c", "cat > \"$0/test.json\"; echo 'no pager here' >&2; exit 3", out.path()],
            "link": "https://kd.example.com/threads/{thread}",
        }),
    );
    let kdd = Kdd::start();
    // A thread of the workspace: the test's link names it.
    let t = kd_tests::new_thread(&kdd.client().await, &ws.path()).await;
    let mut kd = kdd.kd();
    kd.current_dir(ws.dir.path()).args(["notify", "test"]);
    let o = run(kd).await;
    let stdout = &o.stdout;
    assert_eq!(o.status.code(), Some(1), "a sink failed: {stdout} {}", o.stderr.as_str());
    assert!(stdout.contains("HTTP 200"), "{stdout}");
    assert!(stdout.contains("FAILED: HTTP 500"), "{stdout}");
    assert!(stdout.contains("FAILED: exit status 3: no pager here"), "{stdout}");
    assert!(stdout.ends_with('\n') && !stdout.ends_with("\n\n"), "the table ends its last line: {stdout:?}");
    assert_eq!(ok.next(1).await[0].kind, NotifyKind::Test);
    assert_eq!(refusing.next(1).await[0].kind, NotifyKind::Test);
    let got: Notification = serde_json::from_slice(&std::fs::read(out.path().join("test.json")).unwrap()).unwrap();
    assert_eq!((got.kind, got.workspace.as_deref()), (NotifyKind::Test, Some(ws.path().as_str())));
    let link = format!("https://kd.example.com/threads/{t}");
    assert_eq!((got.thread.as_deref(), got.link.as_deref()), (Some(t.as_str()), Some(link.as_str())));

    let mut kd = kdd.kd();
    kd.current_dir(ws.dir.path()).args(["notify", "test", "--json"]);
    let o = run(kd).await;
    let tested: NotifyTest = serde_json::from_str(&o.stdout).unwrap();
    let answers: Vec<(&str, bool)> = tested.sinks.iter().map(|s| (s.sink.as_str(), s.ok)).collect();
    assert_eq!(answers, [("webhook", true), ("webhook", false), ("command", false)]);
    assert!(tested.stats.sent >= 2 && tested.stats.failed >= 4, "{:?}", tested.stats);

    // Nothing configured: said, and not a failure.
    council(&ws, serde_json::json!({}));
    let mut kd = kdd.kd();
    kd.current_dir(ws.dir.path()).args(["notify", "test"]);
    let o = run(kd).await;
    assert!(o.status.success());
    assert!(o.stdout.as_str().contains("No notification sink is configured"));
    assert!(o.stdout.ends_with(".\n"), "one whole line: {:?}", o.stdout);

    // A bad section is refused with its key.
    council(&ws, serde_json::json!({"webhook": "ftp://example.com/x"}));
    let mut kd = kdd.kd();
    kd.current_dir(ws.dir.path()).args(["notify", "test"]);
    let o = run(kd).await;
    assert!(!o.status.success());
    assert!(o.stderr.as_str().contains("notify.webhook"), "{}", o.stderr.as_str());
}

/// The freedesktop notification server of the test: each notification's
/// application, summary, body and category.
struct Desktop {
    tx: mpsc::UnboundedSender<(String, String, String, String)>,
    next: u32,
}

#[zbus::interface(name = "org.freedesktop.Notifications")]
impl Desktop {
    #[allow(clippy::too_many_arguments)]
    async fn notify(
        &mut self,
        app_name: String,
        _replaces_id: u32,
        _app_icon: String,
        summary: String,
        body: String,
        _actions: Vec<String>,
        hints: HashMap<String, zbus::OwnedVariant>,
        _expire_timeout: i32,
    ) -> u32 {
        let category = hints.get("category").and_then(|v| String::try_from(v.clone()).ok()).unwrap_or_default();
        let _ = self.tx.send((app_name, summary, body, category));
        self.next += 1;
        self.next
    }
}

/// A private session bus (`dbus-daemon`), killed when dropped.
struct Bus(std::process::Child);

impl Drop for Bus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_desktop_is_told_over_the_session_bus() {
    let dir = tempfile::tempdir().unwrap();
    let spawned = std::process::Command::new("dbus-daemon")
        .args(["--session", "--nofork", "--nosyslog", "--print-address=1"])
        .arg(format!("--address=unix:path={}", dir.path().join("bus").display()))
        .stdout(std::process::Stdio::piped())
        .spawn();
    let Ok(mut child) = spawned else {
        kd_tests::skip("the_desktop_is_told_over_the_session_bus", "no dbus-daemon (Debian: dbus-daemon)");
        return;
    };
    let stdout = child.stdout.take().unwrap();
    let _bus = Bus(child);
    let address = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).unwrap();
        line.trim().to_string()
    })
    .await
    .unwrap();
    assert!(address.starts_with("unix:"), "{address}");
    let (tx, mut shown) = mpsc::unbounded_channel();
    let _server = zbus::conn::Builder::address(address.as_str())
        .name("org.freedesktop.Notifications")
        .serve_at("/org/freedesktop/Notifications", Desktop { tx, next: 0 })
        .build()
        .await
        .unwrap();

    let ws = Workspace::new(&[]);
    council(&ws, serde_json::json!({"desktop": true}));
    let kdd = Kdd::start_env(&[], &[("DBUS_SESSION_BUS_ADDRESS", &address)]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    c.thread_set_title(t.clone(), "Release plan".into()).await.unwrap();
    ask(&c, &t, "Plan the release", 1).await;
    let mut got = Vec::new();
    within("desktop notifications", async {
        while got.len() < 2 {
            got.push(shown.recv().await.unwrap());
        }
    })
    .await;
    got.sort_by(|a, b| a.3.cmp(&b.3));
    assert_eq!(got[0].0, "kd");
    assert_eq!((got[0].1.as_str(), got[0].3.as_str()), ("kd: the council answered — Release plan", "kd.done"));
    assert_eq!(got[1].3.as_str(), "kd.failed");
    assert!(got[1].1.ends_with(" failed — Release plan") && got[1].2.contains(" broke"), "{:?}", got[1]);

    let tested = c.notify_test(ws.path()).await.unwrap();
    assert_eq!(tested.sinks.len(), 1);
    assert!(tested.sinks[0].ok && tested.sinks[0].answer.starts_with("notification "), "{:?}", tested.sinks);
    assert_eq!(within("the test notification", shown.recv()).await.unwrap().1, "kd: a test notification");
}

/// A session bus that takes kdd's connection and never answers: each `kd
/// notify test` is answered at `notify.timeout` (the desktop's call is
/// left to end on its own), the calls behind it are not held longer or
/// are answered at once that the desktop is busy, and kdd stops without
/// waiting for the held call.
#[tokio::test(flavor = "multi_thread")]
async fn a_desktop_that_never_answers_is_given_up_at_the_timeout_and_holds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bus");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for s in listener.incoming() {
            kept.push(s);
        }
    });
    let ws = Workspace::new(&[]);
    council(&ws, serde_json::json!({"desktop": true, "timeout": "1s"}));
    let mut kdd = Kdd::start_env(&[], &[("DBUS_SESSION_BUS_ADDRESS", &format!("unix:path={}", path.display()))]);
    let c = kdd.client().await;
    let mut answers = Vec::new();
    for _ in 0..8 {
        let tested = within("notify.test", c.notify_test(ws.path())).await.unwrap();
        assert_eq!(tested.sinks.len(), 1);
        let a = &tested.sinks[0];
        assert!(!a.ok && a.ms < 10_000, "{a:?}");
        answers.push(a.answer.clone());
    }
    // The first holds the desktop's thread (libdbus waits 25 s for the
    // bus's greeting), four wait behind it, the rest are refused at once.
    let timed_out = "no answer within 1 s";
    let busy = "the desktop has not answered the 4 notifications before this one";
    assert_eq!(answers, [[timed_out; 5].as_slice(), &[busy; 3]].concat());
    // Nothing waits for the held call (a thread of the runtime's would be
    // waited for until libdbus gave up).
    let stopping = std::time::Instant::now();
    let status = kdd.stop();
    assert!(status.success(), "{status}");
    assert!(stopping.elapsed() < Duration::from_secs(10), "kdd took {:?} to stop", stopping.elapsed());
}

/// The other kinds, end to end: an approval that waits for the King (the
/// event names it), a member timed out, and a work task ended — each told
/// once for its exchange.
#[tokio::test(flavor = "multi_thread")]
async fn the_king_is_told_an_approval_waits_a_member_timed_out_and_work_ended() {
    let mut hook = Hook::start(Some(200)).await;
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let file = ws.file("x-notified");
    let asked = serde_json::json!({"tool_name": "Bash", "input": {"command": format!("touch {file}")}}).to_string();
    let mut codex = kd_tests::fake("codex", "codex", &[("FAKE_HANG", "1")]);
    codex["timeout"] = 1.into();
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude", "codex"]},
        "agents": {
            "claude": kd_tests::fake("claude", "claude", &[("FAKE_PERMISSION", asked.as_str())]),
            "codex": codex,
        },
        "notify": {"webhook": hook.url, "kinds": ["approval", "timeout", "work"]},
    }));
    let kdd = Kdd::start_with(&["--kill-grace-ms", "300"]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent =
        c.council_send(t.clone(), "Touch it.".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    let x = sent.message.seq;
    let approval = collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::ApprovalRequested { .. })))
        .await
        .into_iter()
        .find_map(|e| match e {
            ThreadEvent::ApprovalRequested { approval } => Some(approval.id),
            _ => None,
        })
        .unwrap();
    let told = hook.next(2).await;
    assert_eq!(kinds(&told), BTreeSet::from([(NotifyKind::Approval, Some(x)), (NotifyKind::Timeout, Some(x))]));
    let waits = told.iter().find(|n| n.kind == NotifyKind::Approval).unwrap();
    assert_eq!((waits.approval.as_deref(), waits.member.as_deref()), (Some(approval.as_str()), Some("claude")));
    let timed_out = told.iter().find(|n| n.kind == NotifyKind::Timeout).unwrap();
    assert_eq!(timed_out.member.as_deref(), Some("codex"));
    c.approval_decide(approval, kd_proto::approval::Decision::Approve, None, None).await.unwrap();
    collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::Round { exchange, state, .. } if *exchange == x && *state != RoundState::Running))
    })
    .await;

    // A work task: told once when the members' work is committed.
    let started =
        c.work_start(ws.path(), "Write notes.".into(), Some(vec!["claude".into()]), None, None, None).await.unwrap();
    let told = hook.next(1).await;
    assert_eq!(
        (told[0].kind, told[0].thread.as_deref()),
        (NotifyKind::Work, Some(started.thread.as_str())),
        "{told:?}"
    );
}

/// The next `n` notifications of a `notify.subscribe` subscription.
async fn notified(sub: &mut jsonrpsee::core::client::Subscription<NotifyEvent>, n: usize) -> Vec<Notification> {
    let mut out = Vec::new();
    within("notify.subscribe", async {
        while out.len() < n {
            match sub.next().await.unwrap().unwrap() {
                NotifyEvent::Notified { notification } => out.push(*notification),
                NotifyEvent::Lagged { missed } => panic!("lagged {missed}"),
            }
        }
    })
    .await;
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn notify_subscribe_streams_every_notification_without_a_sink_and_keeps_them_for_a_later_page() {
    let ws = Workspace::new(&[]);
    council(&ws, serde_json::json!({}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let mut live = c.notify_subscribe(None).await.unwrap();
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let king = ask(&c, &t, "Anyone?", 0).await;
    // codex and gemini failed, the exchange ended: no sink is configured,
    // the subscriber is told each once (one failure per exchange).
    let got = notified(&mut live, 2).await;
    let want = BTreeSet::from([(NotifyKind::Failed, Some(king)), (NotifyKind::Done, Some(king))]);
    assert_eq!(kinds(&got), want, "{got:?}");
    assert!(got.windows(2).all(|w| w[0].id < w[1].id), "numbered in order: {got:?}");
    assert!(got.iter().all(|n| n.thread.as_deref() == Some(t.as_str())));

    // A page opening later gets the kept ones; one that saw the first gets
    // the rest only.
    let mut later = c.notify_subscribe(None).await.unwrap();
    assert_eq!(notified(&mut later, 2).await, got);
    let mut since = c.notify_subscribe(Some(got[0].id)).await.unwrap();
    assert_eq!(notified(&mut since, 1).await, got[1..]);
}

/// A daemon whose `members` (claude first, held by `FAKE_HOLD` until `hold`
/// is gone) were asked a question claude is answering, watched from the
/// start by a notification subscription (`live`) and the thread's (`sub`).
struct Held {
    _ws: Workspace,
    hold: tempfile::NamedTempFile,
    _kdd: Kdd,
    c: kd_client::Client,
    live: jsonrpsee::core::client::Subscription<NotifyEvent>,
    t: String,
    sub: jsonrpsee::core::client::Subscription<ThreadEvent>,
    sent: u64,
}

impl Held {
    async fn start(members: &[&str]) -> Held {
        let ws = Workspace::new(&[]);
        let hold = tempfile::NamedTempFile::new().unwrap();
        let held = hold.path().display().to_string();
        let agents: serde_json::Map<String, serde_json::Value> = members
            .iter()
            .map(|m| {
                let env: &[(&str, &str)] = if *m == "claude" { &[("FAKE_HOLD", held.as_str())] } else { &[] };
                (m.to_string(), kd_tests::fake(m, m, env))
            })
            .collect();
        ws.write_config(&serde_json::json!({"council": {"members": members}, "agents": agents}));
        let kdd = Kdd::start();
        let c = kdd.client().await;
        let live = c.notify_subscribe(None).await.unwrap();
        let t = kd_tests::new_thread(&c, &ws.path()).await;
        let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
        let to = Some(vec!["claude".to_string()]);
        let sent = c
            .council_send(t.clone(), "Hold on, please.".into(), to, None, None, None, None, Some(0), None, None)
            .await
            .unwrap();
        collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
        Held { _ws: ws, hold, _kdd: kdd, c, live, t, sub, sent: sent.message.seq }
    }

    /// The events until the exchange ended.
    async fn ended(&mut self) -> Vec<ThreadEvent> {
        let seq = self.sent;
        collect_until(&mut self.sub, |e| {
            e.iter().any(|e| matches!(e, ThreadEvent::Round { exchange, state, .. } if *exchange == seq && *state != RoundState::Running))
        })
        .await
    }
}

/// A member's emergency broadcast that stops the others' runs is not the
/// King's cancel: the exchange it ended is notified (it was taken for one
/// the King stopped, and nothing was said).
#[tokio::test(flavor = "multi_thread")]
async fn an_exchange_a_members_emergency_stopped_is_notified() {
    let mut h = Held::start(&["claude", "codex"]).await;
    let e =
        h.c.emergency_broadcast(h.t.clone(), "Stop: main is broken.".into(), Some("codex".into()), Some(true), None)
            .await
            .unwrap();
    assert_eq!(e.stopped_runs.len(), 1, "{e:?}");
    let ended = h.ended().await;
    let cancelled = ended.iter().find_map(|e| match e {
        ThreadEvent::RunCancelled { interrupted: false, reason, .. } => Some(reason.clone()),
        _ => None,
    });
    assert_eq!(cancelled, Some(Some("stopped by a member's emergency broadcast".to_string())), "{ended:?}");
    // Its message keeps why, for every client that shows it later.
    let messages = h.c.thread_messages(h.t.clone(), None, None, None, None).await.unwrap().into_vec();
    let cut = messages.iter().find(|m| m.kind == MessageKind::Interrupted).expect("the stopped run's message");
    let kept = cut.run.as_ref().and_then(|r| r.stopped.as_deref());
    assert_eq!(kept, Some("stopped by a member's emergency broadcast"), "{cut:?}");
    h.hold.close().unwrap();
    let got = notified(&mut h.live, 1).await;
    assert_eq!(kinds(&got), BTreeSet::from([(NotifyKind::Done, Some(h.sent))]), "{got:?}");
}

/// An exchange whose last run you cancelled (`run.cancel`: Ctrl+C of `kd
/// ask` or `kd work`, `kd cancel`) ended because you stopped it: it is not
/// notified as answered; the next one, answered, is.
#[tokio::test(flavor = "multi_thread")]
async fn an_exchange_you_cancelled_is_not_notified_as_answered() {
    let mut h = Held::start(&["claude"]).await;
    let cancelled = h.c.run_cancel(h.t.clone(), Some("claude".into()), None).await.unwrap();
    assert_eq!(cancelled.len(), 1, "{cancelled:?}");
    let ended = h.ended().await;
    assert!(
        ended.iter().any(|e| matches!(e, ThreadEvent::RunCancelled { interrupted: false, reason: None, .. })),
        "{ended:?}"
    );
    h.hold.close().unwrap();
    let answered = ask(&h.c, &h.t, "Anyone?", 0).await;
    // Notifications are sent in order: the first is the answered one's.
    let got = notified(&mut h.live, 1).await;
    assert_eq!(kinds(&got), BTreeSet::from([(NotifyKind::Done, Some(answered))]), "{got:?}");
}
