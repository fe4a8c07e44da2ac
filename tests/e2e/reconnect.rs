//! Clients riding through a restart of `kdd` (issue 24): `kd watch` and
//! `kd ask` reconnect and go on from the last message they saw; the wire
//! they rely on (`exchange.get`, `daemon.shutdown`'s `resume`, the
//! `exchanges.durable` capability).

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use kd_client::prelude::*;
use kd_proto::ErrorCode;
use kd_proto::types::ThreadEvent;
use kd_tests::{Kdd, Workspace, append, within};
use tokio::io::AsyncReadExt;

/// A `kd` process whose stdout and stderr are read as they come (also
/// used by other modules: `crate::reconnect::Piped`).
pub(crate) struct Piped {
    child: tokio::process::Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
}

impl Piped {
    pub(crate) fn spawn(mut cmd: tokio::process::Command) -> Piped {
        let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let out = Arc::new(Mutex::new(String::new()));
        let err = Arc::new(Mutex::new(String::new()));
        collect(child.stdout.take().unwrap(), out.clone());
        collect(child.stderr.take().unwrap(), err.clone());
        Piped { child, out, err }
    }

    pub(crate) fn stdout(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    pub(crate) fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    /// Waits until stdout (or stderr) holds `needle`.
    pub(crate) async fn until(&self, stderr: bool, needle: &str) {
        let text = if stderr { &self.err } else { &self.out };
        let said = tokio::time::timeout(kd_tests::DEADLINE, async {
            while !text.lock().unwrap().contains(needle) {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await;
        if said.is_err() {
            panic!("kd did not say {needle:?}; stdout: {}\nstderr: {}", self.stdout(), self.stderr());
        }
    }

    /// Waits for the exit; the status code.
    pub(crate) async fn exit(&mut self) -> Option<i32> {
        let Ok(status) = tokio::time::timeout(kd_tests::DEADLINE, self.child.wait()).await else {
            panic!("kd did not exit; stdout: {}\nstderr: {}", self.stdout(), self.stderr());
        };
        let status = status.unwrap();
        // What it wrote last is read to the end once it exited.
        within("kd's output", async {
            while Arc::strong_count(&self.out) > 1 || Arc::strong_count(&self.err) > 1 {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await;
        status.code()
    }

    pub(crate) fn interrupt(&self) {
        let pid = rustix::process::Pid::from_raw(self.child.id().unwrap() as i32).unwrap();
        rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    }
}

/// Reads `from` into `to` until its end (then lets go of `to`).
fn collect(mut from: impl tokio::io::AsyncRead + Unpin + Send + 'static, to: Arc<Mutex<String>>) {
    tokio::spawn(async move {
        let mut buf = [0u8; 4096];
        while let Ok(n) = from.read(&mut buf).await {
            if n == 0 {
                break;
            }
            to.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
}

/// A new thread of `ws` and `kd watch --reconnect 30` of it, watching.
async fn watching(kdd: &Kdd, ws: &Workspace) -> (kd_client::Client, String, Piped) {
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut k = kdd.kd();
    k.args(["watch", &t, "--reconnect", "30"]);
    let watch = Piped::spawn(k);
    watch.until(false, "watching thread").await;
    (c, t, watch)
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_watch_rides_through_a_kill_9_and_shows_every_message_once() {
    let ws = Workspace::new(&[]);
    let mut kdd = Kdd::start();
    let (c, t, mut watch) = watching(&kdd, &ws).await;
    append(&c, &t, "king", "before the crash", &[]).await;
    watch.until(false, "before the crash").await;
    drop(c);

    kdd.kill9();
    watch.until(true, "kd: kdd went away; reconnecting (up to 30 s)…").await;
    kdd.launch().expect("kdd starts again");
    let c = kdd.client().await;
    // Perhaps before the watch is back: it comes with the backlog then.
    append(&c, &t, "king", "right after the restart", &[]).await;
    watch.until(false, "right after the restart").await;
    watch.until(true, "kd: reconnected").await;
    append(&c, &t, "king", "later on", &[]).await;
    watch.until(false, "later on").await;

    watch.interrupt();
    assert_eq!(watch.exit().await, Some(0), "{}", watch.stderr());
    let out = watch.stdout();
    for said in ["before the crash", "right after the restart", "later on"] {
        assert_eq!(out.matches(said).count(), 1, "{said:?} once: {out}");
    }
    let err = watch.stderr();
    assert_eq!(err.matches("reconnecting").count(), 1, "said once per outage: {err}");
}

/// `kd ask --rounds 0 QUESTION` in `ws`, its output piped.
fn ask_piped(kdd: &Kdd, ws: &Workspace, reconnect: &str, question: &str) -> Piped {
    let mut k = kdd.kd();
    k.current_dir(ws.dir.path()).args(["ask", "--rounds", "0", "--reconnect", reconnect, question]);
    Piped::spawn(k)
}

/// `kd ask` in `ws` with its output piped, once its member is streaming.
async fn ask_held(kdd: &Kdd, ws: &Workspace, reconnect: &str) -> Piped {
    let ask = ask_piped(kdd, ws, reconnect, "Long one?");
    ask.until(false, "── claude").await;
    ask
}

/// A workspace of claude alone, holding while `hold` is there.
fn claude_holding(hold: &kd_tests::Hold) -> Workspace {
    Workspace::new(&[("claude", "claude", &[("FAKE_HOLD", hold.var())])])
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_ask_reconnects_after_a_kill_9_and_reports_the_member_interrupted() {
    // Resuming is off: the held member's run was recorded interrupted when
    // kdd started again, which is what kd ask reports.
    let hold = kd_tests::Hold::new();
    let ws = Workspace::new(&[(
        "claude",
        "claude",
        &[("FAKE_HOLD", hold.var()), ("FAKE_TEXT", "First half. Second half.")],
    )]);
    ws.without_resume();
    let mut kdd = Kdd::start();
    let mut ask = ask_held(&kdd, &ws, "30").await;
    kdd.kill9();
    ask.until(true, "kd: kdd went away; reconnecting (up to 30 s)…").await;
    kdd.launch().expect("kdd starts again");
    let code = ask.exit().await;
    let (out, err) = (ask.stdout(), ask.stderr());
    assert_eq!(code, Some(4), "{out}\n{err}");
    assert!(err.contains("kd: reconnected"), "{err}");
    assert!(err.contains("kd: claude: interrupted (kdd stopped)"), "{err}");
    assert_eq!(out.matches("── claude").count(), 1, "the answer's header once: {out}");
    assert!(!out.contains("reconnect"), "stdout is the answers alone: {out}");
    // What it had streamed before the kill, once (nothing again from the
    // backlog), and that it was cut.
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!("First half. Second half.".starts_with(lines[1]) && !lines[1].is_empty(), "{out}");
    assert_eq!(lines[2], "(interrupted)", "{out}");
    hold.release();
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_ask_with_reconnect_0_exits_when_kdd_goes_away() {
    let hold = kd_tests::Hold::new();
    let ws = claude_holding(&hold);
    let mut kdd = Kdd::start();
    let mut ask = ask_held(&kdd, &ws, "0").await;
    kdd.kill9();
    let code = ask.exit().await;
    let err = ask.stderr();
    assert_eq!(code, Some(3), "kd's exit for a daemon it lost: {err}");
    assert!(err.contains("lost the connection to kdd") && !err.contains("reconnecting"), "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    hold.release();
}

#[tokio::test(flavor = "multi_thread")]
async fn exchange_get_answers_not_found_for_a_message_that_began_none() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    assert!(c.hello().capabilities.iter().any(|x| x == "exchanges.durable"), "{:?}", c.hello().capabilities);
    let t = kd_tests::new_thread(&c, &kd_tests::workspace("exchange-get")).await;
    let m = append(&c, &t, "claude", "Said on its own.", &[]).await;
    for seq in [m.seq, 999] {
        let e = c.exchange_get(t.clone(), seq).await.map_err(kd_client::ClientError::from).unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::NotFound), "{e}");
    }
    let e = c.exchange_get("../x".into(), 1).await.map_err(kd_client::ClientError::from).unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidArgument), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_daemon_stop_no_resume_is_accepted_and_stops_kdd() {
    let mut kdd = Kdd::start();
    let mut k = kdd.kd();
    k.args(["daemon", "stop", "--no-resume"]);
    let out = kd_tests::run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("kdd stopped"), "{}", out.stdout);
    assert!(kdd.wait_exit().success());
    // The parameter as the wire has it: a bool, nothing else.
    kdd.launch().expect("kdd starts again");
    let bad = kd_tests::rpc_post(
        &kdd.socket,
        r#"{"jsonrpc":"2.0","id":1,"method":"daemon.shutdown","params":{"resume":"no"}}"#,
    );
    assert_eq!(bad["error"]["code"], -32602, "{bad}");
}

/// How a run ended, from the first end event of a run among `events`.
fn cancelled(events: &[ThreadEvent]) -> Option<bool> {
    events.iter().find_map(|e| match e {
        ThreadEvent::RunCancelled { interrupted, .. } => Some(*interrupted),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_cut_by_a_graceful_stop_ends_interrupted_and_a_cancelled_one_does_not() {
    let hold = kd_tests::Hold::new();
    let ws = claude_holding(&hold);
    let mut kdd = Kdd::start_with(&["--kill-grace-ms", "300"]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let streaming = |e: &[ThreadEvent]| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }));

    kd_tests::send_one_round(&c, &t, "Cancel me.").await;
    kd_tests::collect_until(&mut sub, streaming).await;
    c.run_cancel(t.clone(), Some("claude".into()), None).await.unwrap();
    let events = kd_tests::collect_until(&mut sub, |e| cancelled(e).is_some()).await;
    assert_eq!(cancelled(&events), Some(false), "cancelled by the King");

    kd_tests::send_one_round(&c, &t, "Cut me.").await;
    kd_tests::collect_until(&mut sub, streaming).await;
    c.daemon_shutdown(None).await.unwrap();
    // The runs' ends go out before the subscription ends.
    let events = kd_tests::collect_until(&mut sub, |e| cancelled(e).is_some()).await;
    assert_eq!(cancelled(&events), Some(true), "cut by kdd stopping: {events:?}");
    assert!(kdd.wait_exit().success());
    hold.release();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_of_another_protocol_after_a_restart_ends_kd_watch_in_one_line() {
    let ws = Workspace::new(&[]);
    let mut kdd = Kdd::start();
    let (c, _, mut watch) = watching(&kdd, &ws).await;
    drop(c);
    kdd.kill9();
    watch.until(true, "reconnecting").await;
    // An upgrade to a kdd that speaks another protocol.
    let _ = std::fs::remove_file(&kdd.socket);
    let listener = tokio::net::UnixListener::bind(&kdd.socket).unwrap();
    let mut module = jsonrpsee::RpcModule::new(());
    module
        .register_method(
            "daemon.hello",
            |_, _, _| serde_json::json!({"protocol": 99, "version": "9.9.9", "capabilities": [], "pid": 1}),
        )
        .unwrap();
    let (stop, _handle) = jsonrpsee::server::stop_channel();
    let builder = jsonrpsee::server::Server::builder().to_service_builder();
    let methods: jsonrpsee::Methods = module.into();
    let server = tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let svc = builder.clone().build(methods.clone(), stop.clone());
            tokio::spawn(jsonrpsee::server::serve(stream, svc));
        }
    });
    let code = watch.exit().await;
    server.abort();
    let err = watch.stderr();
    assert_eq!(code, Some(3), "{err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "the notice, then one line: {err}");
    assert!(lines[1].contains("speaks protocol 99 (version 9.9.9), this kd speaks 1"), "{err}");
}

/// `kd ask` of a council of three, a first round and an auto-round, codex
/// holding in the second; started before kdd goes away.
async fn ask_a_council(kdd: &Kdd, ws: &Workspace) -> Piped {
    let mut k = kdd.kd();
    k.current_dir(ws.dir.path()).args(["ask", "--rounds", "1", "--reconnect", "30", "Plan it?"]);
    let ask = Piped::spawn(k);
    // codex's second turn has begun: its header is out for the second time.
    within("codex's second turn", async {
        while ask.stdout().matches("── codex").count() < 2 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    ask
}

fn council_holding_codex(hold: &kd_tests::Hold) -> Workspace {
    let held: &[(&str, &str)] = &[("FAKE_HOLD", hold.var()), ("FAKE_HOLD_WHEN", "Answer from cursor")];
    Workspace::new(&[("claude", "claude", &[]), ("codex", "gemini", held), ("cursor", "cursor", &[])])
}

/// Every answer's text once on stdout, nothing else there, exit 0.
async fn printed_every_answer_once(ask: &mut Piped) {
    let code = ask.exit().await;
    let (out, err) = (ask.stdout(), ask.stderr());
    assert_eq!(code, Some(0), "{out}\n{err}");
    for member in ["claude", "codex", "cursor"] {
        let answer = format!("Answer from {member}.");
        assert_eq!(out.matches(&answer).count(), 2, "{member}'s two answers, each once: {out}\n{err}");
    }
    assert!(!out.contains("reconnect"), "stdout is the answers alone: {out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_ask_started_before_a_kill_9_prints_every_answer_once_and_exits_0() {
    let hold = kd_tests::Hold::new();
    let ws = council_holding_codex(&hold);
    let mut kdd = Kdd::start();
    let mut ask = ask_a_council(&kdd, &ws).await;
    kdd.kill9();
    ask.until(true, "kd: kdd went away; reconnecting (up to 30 s)…").await;
    hold.release();
    kdd.launch().expect("kdd starts again");
    printed_every_answer_once(&mut ask).await;
    let err = ask.stderr();
    assert!(err.contains("kd: reconnected"), "{err}");
    assert!(ask.stdout().contains("interrupted (kdd restarted); asked again"), "{}", ask.stdout());
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_ask_rides_through_kd_daemon_restart_and_the_round_completes() {
    let hold = kd_tests::Hold::new();
    let ws = council_holding_codex(&hold);
    let kdd = Kdd::start();
    let mut ask = ask_a_council(&kdd, &ws).await;
    // codex is cut while it holds; asked again, it is told what it had
    // written and its prompt no longer holds it.
    let mut k = kdd.kd();
    k.args(["daemon", "restart"]);
    let out = kd_tests::run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    printed_every_answer_once(&mut ask).await;
    hold.release();
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_watch_shows_the_answers_given_while_kdd_was_away() {
    let hold = kd_tests::Hold::new();
    let ws = Workspace::new(&[("claude", "claude", &[("FAKE_HOLD", hold.var()), ("FAKE_TEXT", "Whole answer.")])]);
    let mut kdd = Kdd::start();
    let (c, t, mut watch) = watching(&kdd, &ws).await;
    c.council_send(t.clone(), "Q?".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    watch.until(false, "── claude").await;
    drop(c);
    kdd.kill9();
    watch.until(true, "kd: kdd went away").await;
    hold.release();
    kdd.launch().expect("kdd starts again");
    // The resumed run answered (perhaps before kd watch was back).
    kd_tests::settled(&kdd.db, &t).await;
    watch.until(false, "Whole answer.").await;
    watch.interrupt();
    assert_eq!(watch.exit().await, Some(0), "{}", watch.stderr());
    assert_eq!(watch.stdout().matches("Whole answer.").count(), 1, "{}", watch.stdout());
}

#[tokio::test(flavor = "multi_thread")]
async fn with_resuming_off_kd_ask_reports_every_cut_member_after_a_kill_9() {
    // Found trying it: kd ask hung after "kd: reconnected" when two of the
    // three cut answers had not been shown before kdd went away.
    let hold = kd_tests::Hold::new();
    let held: &[(&str, &str)] = &[("FAKE_HOLD", hold.var())];
    let ws = Workspace::new(&[("claude", "claude", held), ("codex", "gemini", held), ("cursor", "cursor", held)]);
    ws.without_resume();
    let mut kdd = Kdd::start();
    let mut ask = ask_piped(&kdd, &ws, "30", "Long one?");
    ask.until(false, "── ").await;
    kdd.kill9();
    ask.until(true, "kd: kdd went away").await;
    kdd.launch().expect("kdd starts again");
    let code = ask.exit().await;
    hold.release();
    let err = ask.stderr();
    assert_eq!(code, Some(4), "{}\n{err}", ask.stdout());
    for m in ["claude", "codex", "cursor"] {
        assert!(err.contains(&format!("kd: {m}: interrupted (kdd stopped)")), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_ask_queued_behind_another_ask_answers_after_a_kill_9_and_exits_0() {
    // Found trying it: the queued run was never recorded, so the restart
    // asks its member again in a run of another id; kd ask showed the
    // answer and still said "interrupted (kdd stopped)", exit 4.
    let hold = kd_tests::Hold::new();
    let ws = claude_holding(&hold);
    let mut kdd = Kdd::start();
    let mut first = ask_held(&kdd, &ws, "30").await;
    let mut queued = ask_piped(&kdd, &ws, "30", "Short one?");
    queued.until(true, "yours is queued behind it").await;
    kdd.kill9();
    queued.until(true, "kd: kdd went away").await;
    hold.release();
    kdd.launch().expect("kdd starts again");
    let code = queued.exit().await;
    let (out, err) = (queued.stdout(), queued.stderr());
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(err.contains("kd: reconnected"), "{err}");
    assert!(!err.contains("interrupted"), "{err}");
    assert_eq!(out.matches("Answer from claude.").count(), 1, "{out}\n{err}");
    first.exit().await;
}

/// `kd work` rides through a kill -9 of kdd as `kd ask` does: it says so,
/// waits for the member's resumed run, and prints the line of the work
/// that run left (it exited 3, "lost the connection", first printing the
/// line of the interrupted run's commit as if the work were done).
#[tokio::test(flavor = "multi_thread")]
async fn kd_work_reconnects_after_a_kill_9_and_waits_for_the_resumed_run() {
    let hold = kd_tests::Hold::new();
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\n")], &[]);
    let run = "if test -f .git; then echo more >> a.txt; fi";
    let claude = kd_tests::fake("claude", "claude", &[("FAKE_RUN", run), ("FAKE_HOLD", hold.var())]);
    ws.write_config(&serde_json::json!({"council": {"members": ["claude"]}, "agents": {"claude": claude}}));
    let mut kdd = Kdd::start();
    let mut k = kdd.kd();
    k.current_dir(ws.dir.path()).args(["work", "Add a line"]);
    let mut work = Piped::spawn(k);
    let c = kdd.client().await;
    // claude at work, and kd work following it: its approvals' and the
    // thread's subscriptions made (killed before the second, kd work lost
    // the connection instead of riding through it: a flake under load).
    within("claude at work, followed", async {
        while !c.run_list(None).await.unwrap().iter().any(|r| r.chars > 0)
            || c.daemon_status().await.unwrap().subscriptions < 2
        {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    drop(c);
    kdd.kill9();
    work.until(true, "kd: kdd went away; reconnecting (up to 60 s)…").await;
    kdd.launch().expect("kdd starts again");
    work.until(true, "kd: reconnected").await;
    hold.release();
    let code = work.exit().await;
    let (out, err) = (work.stdout(), work.stderr());
    assert_eq!(code, Some(0), "{out}\n{err}");
    let lines: Vec<&str> = out.lines().filter(|l| l.starts_with("claude")).collect();
    assert_eq!(lines.len(), 1, "one line, of the work as the resumed run left it: {out}");
    assert!(lines[0].contains("done") && !lines[0].contains("interrupted"), "{out}");
}

/// claude's work on line two of a.txt, then a commit of yours changing the
/// same line, and `kd rebase claude` (piped) once claude resolves the
/// conflict — holding, until `hold` is released, before it writes both
/// sides' line two. Your commit too.
async fn rebase_resolving(hold: &kd_tests::Hold) -> (Workspace, Kdd, Piped, String) {
    let ws = Workspace::new(&[]);
    ws.git_init(&[("a.txt", "one\ntwo\n")], &[]);
    let run = format!(
        "if test -f .git; then if grep -q '^<<<<<<<' a.txt; then while test -f {}; do sleep 0.02; done; \
         printf 'one\\nking and claude\\n' > a.txt; else printf 'one\\nclaude\\n' > a.txt; fi; fi",
        hold.var()
    );
    let claude = kd_tests::fake("claude", "claude", &[("FAKE_RUN", run.as_str())]);
    ws.write_config(&serde_json::json!({"council": {"members": ["claude"]}, "agents": {"claude": claude}}));
    let kdd = Kdd::start();
    let worked = crate::ship::kd(&kdd, &ws, &["work", "Change line two"]).await;
    assert!(worked.status.success(), "{}{}", worked.stdout, worked.stderr);
    let king = crate::ship::king_commits(ws.dir.path(), "a.txt", "one\nking\n");
    let mut k = kdd.kd();
    k.current_dir(ws.dir.path()).args(["rebase", "claude"]);
    let rebase = Piped::spawn(k);
    rebase.until(true, "conflicts with claude's work in a.txt").await;
    let c = kdd.client().await;
    within("claude resolving", async {
        while c.run_list(None).await.unwrap().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
    (ws, kdd, rebase, king)
}

/// [`rebase_resolving`], and a kill -9 of kdd cut it and kdd runs again,
/// once `meanwhile` had its way with the workspace.
async fn rebase_cut(hold: &kd_tests::Hold, meanwhile: fn(&Workspace)) -> (Workspace, Kdd, Piped, String) {
    let (ws, mut kdd, rebase, king) = rebase_resolving(hold).await;
    kdd.kill9();
    rebase.until(true, "kd: kdd went away; reconnecting").await;
    meanwhile(&ws);
    kdd.launch().expect("kdd starts again");
    rebase.until(true, "kd: reconnected").await;
    (ws, kdd, rebase, king)
}

/// What kd said on the thread of `w` in answer to your requests.
async fn rebase_said(kdd: &Kdd, w: &kd_proto::work::Worktree) -> Vec<String> {
    let c = kdd.client().await;
    let messages = c.thread_messages(w.thread.clone(), None, None, None, None).await.unwrap().into_vec();
    let asked: Vec<u64> = messages.iter().filter(|m| m.from == "king").map(|m| m.seq).collect();
    let answers = messages.into_iter().filter(|m| m.from == "kd" && m.reply_to.is_some_and(|r| asked.contains(&r)));
    answers.map(|m| m.body).collect()
}

/// `kd rebase` rides through a kill -9 of kdd while the member resolves
/// the conflicts: kdd resumes the member's run, concludes the merge once
/// it ended and says so, and `kd rebase` (reconnected) prints that and
/// exits 0. It lost the connection before ("kd: lost the connection"),
/// and the restarted kdd never said how the rebase ended.
#[tokio::test(flavor = "multi_thread")]
async fn kd_rebase_rides_through_a_kill_9_while_the_member_resolves_and_says_the_outcome() {
    let hold = kd_tests::Hold::new();
    let (_ws, kdd, mut rebase, king) = rebase_cut(&hold, |_| {}).await;
    hold.release();
    let code = rebase.exit().await;
    let (out, err) = (rebase.stdout(), rebase.stderr());
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("claude's work is up to date with main"), "{out}\n{err}");
    let c = kdd.client().await;
    let w = c.work_list(None, None).await.unwrap().remove(0);
    let path = std::path::Path::new(&w.path);
    assert_eq!(std::fs::read_to_string(path.join("a.txt")).unwrap(), "one\nking and claude\n");
    let parents = kd_tests::git(path, &["log", "-1", "--format=%P"]);
    assert!(parents.ends_with(&king), "the merge of your commit concluded: {parents}");
    assert_eq!(w.base, king, "its base is your commit merged in: {w:?}");
    assert_eq!(rebase_said(&kdd, &w).await.len(), 1, "kd said the outcome once");
}

/// The same with resuming off: the member's run is not asked again, so
/// the restarted kdd undoes the merge at once (markers are left), every
/// commit of the member's kept, says so, and `kd rebase` exits 1.
#[tokio::test(flavor = "multi_thread")]
async fn kd_rebase_cut_by_a_kill_9_with_resuming_off_is_told_the_merge_undone() {
    let hold = kd_tests::Hold::new();
    let (_ws, kdd, mut rebase, king) = rebase_cut(&hold, Workspace::without_resume).await;
    let code = rebase.exit().await;
    let (out, err) = (rebase.stdout(), rebase.stderr());
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(out.contains("claude's work was not brought up to date"), "{out}\n{err}");
    assert!(out.contains("kd undid the merge"), "{out}\n{err}");
    let c = kdd.client().await;
    let w = c.work_list(None, None).await.unwrap().remove(0);
    let path = std::path::Path::new(&w.path);
    assert_eq!(std::fs::read_to_string(path.join("a.txt")).unwrap(), "one\nclaude\n", "its branch as it was");
    assert_ne!(w.base, king, "not brought up to date: {w:?}");
    let said = rebase_said(&kdd, &w).await;
    assert_eq!(said.len(), 1, "kd said the outcome once: {said:?}");
    let why = "kd restarted and did not resume this request: resuming is off (council.resume_within is 0). ";
    assert!(said[0].starts_with(why), "kd says first why: {said:?}");
    hold.release();
}

/// The restarted kdd cannot resume the member's run (the workspace's
/// configuration broke meanwhile): it undoes the merge and says once why
/// and how the rebase ended, and `kd rebase` prints both and exits 1. It
/// said why in a notice of its own first, which `kd rebase` took for the
/// outcome (exit 0, the merge still being undone after it).
#[tokio::test(flavor = "multi_thread")]
async fn kd_rebase_not_resumed_for_a_broken_configuration_is_told_why_and_the_merge_undone_once() {
    let hold = kd_tests::Hold::new();
    let broken = |ws: &Workspace| ws.write_config(&serde_json::json!({"council": {"rounds": "many"}}));
    let (_ws, kdd, mut rebase, king) = rebase_cut(&hold, broken).await;
    let code = rebase.exit().await;
    let (out, err) = (rebase.stdout(), rebase.stderr());
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(out.contains("could not resume this exchange: configuration"), "{out}\n{err}");
    assert!(out.contains("kd undid the merge"), "{out}\n{err}");
    let c = kdd.client().await;
    let w = c.work_list(None, None).await.unwrap().remove(0);
    assert_ne!(w.base, king, "not brought up to date: {w:?}");
    let said = rebase_said(&kdd, &w).await;
    assert_eq!(said.len(), 1, "kd said why and the outcome once: {said:?}");
    assert!(said[0].contains("configuration") && said[0].contains("undid the merge"), "{said:?}");
    hold.release();
}

/// `kd daemon stop --no-resume` while the member resolves: nothing is
/// left to follow, so the restarted kdd says nothing of the rebase, and
/// `kd rebase` (reconnected, the request's exchange stopped) says so and
/// what to do, and exits 1. It waited for kd's word forever.
#[tokio::test(flavor = "multi_thread")]
async fn kd_rebase_whose_request_a_restart_left_stopped_says_so_and_exits_1() {
    let hold = kd_tests::Hold::new();
    let (_ws, mut kdd, mut rebase, _) = rebase_resolving(&hold).await;
    let mut k = kdd.kd();
    k.args(["daemon", "stop", "--no-resume"]);
    let stopped = kd_tests::run(k).await;
    assert!(stopped.status.success(), "{}", stopped.stderr);
    assert!(kdd.wait_exit().success());
    rebase.until(true, "kd: kdd went away; reconnecting").await;
    kdd.launch().expect("kdd starts again");
    let code = rebase.exit().await;
    let (out, err) = (rebase.stdout(), rebase.stderr());
    assert_eq!(code, Some(1), "{out}\n{err}");
    assert!(err.contains("kd: reconnected"), "{err}");
    assert!(err.contains("did not say how bringing claude's work up to date ended: kd rebase claude"), "{err}");
    hold.release();
}

/// A follower whose daemon went away before its first subscription was
/// made (`kd work` and `kd rebase` subscribe once their request was
/// answered) says so, reconnects and brings every message after the one
/// it follows from. They failed at once ("lost the connection to kdd").
/// What cannot be helped by connecting again is the end.
#[tokio::test(flavor = "multi_thread")]
async fn a_follow_whose_first_subscription_was_never_made_reconnects_and_misses_nothing() {
    use kd_client::ClientError;
    use kd_client::follow::{Follow, Next};
    let kdd = Kdd::start();
    let ws = Workspace::new(&[]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let asked = append(&c, &t, "king", "the request", &[]).await;
    append(&c, &t, "kd", "its outcome", &[]).await;
    let patience = std::time::Duration::from_secs(30);
    let gone = || Err(ClientError::Transport("kdd went away".into()));
    let mut follow = Follow::start_after(gone(), &kdd.socket, t.clone(), asked.seq, patience).await.unwrap();
    assert!(follow.client().is_err(), "no connection yet");
    assert!(matches!(follow.next().await, Next::Reconnecting));
    assert!(matches!(follow.next().await, Next::Reconnected));
    let message = within("the outcome", async {
        loop {
            match follow.next().await {
                Next::Event(ThreadEvent::Message { message }) => break message,
                Next::Event(_) => continue,
                _ => panic!("the follow ended"),
            }
        }
    })
    .await;
    assert_eq!((message.from.as_str(), message.body.as_str()), ("kd", "its outcome"));
    assert!(follow.client().is_ok());
    // A daemon shutting down (`kd daemon restart`) is followed by the next.
    let going = ClientError::Rpc { code: ErrorCode::ShuttingDown.code(), message: "stopping".into(), data: None };
    let mut follow = Follow::start_after(Err(going), &kdd.socket, t.clone(), asked.seq, patience).await.unwrap();
    assert!(matches!(follow.next().await, Next::Reconnecting));
    assert!(matches!(follow.next().await, Next::Reconnected));
    // Not retried: no patience, and a refusal.
    let none = Follow::start_after(gone(), &kdd.socket, t.clone(), 0, std::time::Duration::ZERO).await;
    assert!(matches!(none, Err(ClientError::Transport(_))), "no patience: the end");
    let refused = ClientError::Rpc { code: -32602, message: "no".into(), data: None };
    let refused = Follow::start_after(Err(refused), &kdd.socket, t, 0, patience).await;
    assert!(matches!(refused, Err(ClientError::Rpc { .. })), "a refusal: the end");
}
