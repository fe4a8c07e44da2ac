//! Agents' processes are confined by their ancestry (issue 22, F-B6): a
//! process that descends from an agent kd runs acts at most as that agent's
//! member, on its thread, by its run's capability — whatever it claims —
//! and is refused the King's actions; an orphan it double-forks is
//! reparented to kdd (the agents' child subreaper), stays confined, and is
//! reaped without kdd ever taking a child it waits for itself. A human's
//! shell is the King's as before. Real kdd, fake agents, the real `kd`.

use kd_client::prelude::*;
use kd_proto::types::*;
use kd_tests::{Fake, Hold, Kdd, Workspace, collect_until, run, within};

fn config(ws: &Workspace, members: &[Fake<'_>]) {
    ws.configure(members, serde_json::json!({}));
}

fn none() -> serde_json::Value {
    serde_json::json!({})
}

/// codex as a process per run (codex exec), answering "Got it.".
fn codex() -> Fake<'static> {
    ("codex", &[("FAKE_TEXT", "Got it.")], serde_json::json!({"transport": "exec"}))
}

fn kd() -> String {
    kd_tests::bin("kd").display().to_string()
}

/// Asks `member` on thread `t` (one round) and waits until the runs of
/// `members` have ended; the thread's messages.
async fn ask(c: &kd_client::Client, t: &str, member: &str, runs: usize) -> Vec<Message> {
    let mut sub = c.thread_subscribe(t.into(), None, None).await.unwrap();
    c.council_send(t.into(), format!("@{member} go"), None, None, None, None, None, Some(0), None, None).await.unwrap();
    collect_until(&mut sub, |e| kd_tests::ended(e) >= runs).await;
    c.thread_messages(t.into(), None, None, None, None).await.unwrap().into_vec()
}

fn answer_of<'a>(messages: &'a [Message], member: &str) -> &'a str {
    messages.iter().find(|m| m.from == member && m.body.starts_with("Ran:")).map(|m| m.body.as_str()).unwrap_or("")
}

#[tokio::test(flavor = "multi_thread")]
async fn an_agents_shell_without_its_token_acts_neither_as_the_king_nor_as_another_member() {
    let ws = Workspace::new(&[]);
    let kd = kd();
    let shell = [
        "unset KD_RUN_TOKEN".to_string(),
        format!("{kd} send --to codex 'no token'; echo send=$?"),
        format!("{kd} send --as king --to codex 'as the king'; echo as_king=$?"),
        format!("KD_MEMBER=codex {kd} send --to claude 'as codex'; echo env_member=$?"),
        format!("{kd} ack --as codex; echo ack_other=$?"),
        format!("{kd} cancel; echo cancel=$?"),
        format!("{kd} daemon stop; echo stop=$?"),
    ]
    .join("; ");
    config(&ws, &[("claude", &[("FAKE_RUN", &shell), ("FAKE_TEXT", "Ran: {run}")], none()), codex()]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let messages = ask(&c, &t, "claude", 1).await;
    let answer = answer_of(&messages, "claude");
    for refused in ["send=1", "as_king=1", "env_member=1", "ack_other=1", "cancel=1", "stop=1"] {
        assert!(answer.contains(refused), "{refused} missing from: {answer}");
    }
    for why in ["message.route is refused: this process is claude's agent's (run r-", "emergency.ack is refused"] {
        assert!(answer.contains(why), "{why:?} missing from: {answer}");
    }
    assert!(answer.contains("KD_RUN_TOKEN"), "the reason names what to use: {answer}");
    let kinds: Vec<(&str, MessageKind)> = messages.iter().map(|m| (m.from.as_str(), m.kind)).collect();
    assert_eq!(kinds, [("king", MessageKind::King), ("claude", MessageKind::Agent)], "nothing else was posted");
    // A human's shell is the King's, as before: kd send --as codex works (and
    // the daemon the agent's shell tried to stop still runs).
    let mut k = kdd.kd();
    k.args(["send", "--as", "codex", "--thread", &t, "--to", "claude", "from the King's shell"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    let last = kd_tests::last_message(&c, &t).await;
    assert_eq!((last.from.as_str(), last.body.as_str()), ("codex", "from the King's shell"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_codex_app_servers_shell_does_not_post_as_the_king() {
    let ws = Workspace::new(&[]);
    let shell = format!("{} send --to claude 'from codex'; echo send=$?", kd());
    // codex's default transport: an app-server of the member's, whose runs
    // carry no token in their shell.
    config(&ws, &[("claude", &[], none()), ("codex", &[("FAKE_RUN", &shell), ("FAKE_TEXT", "Ran: {run}")], none())]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let messages = ask(&c, &t, "codex", 1).await;
    let answer = answer_of(&messages, "codex");
    assert!(answer.contains("send=1"), "{answer}");
    assert!(answer.contains("is refused: this process is codex's agent's"), "{answer}");
    assert!(!messages.iter().any(|m| m.body == "from codex"), "nothing was posted, as the King or anyone");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runs_process_cannot_use_the_token_of_another_run_or_thread() {
    let ws = Workspace::new(&[]);
    let hold = Hold::new();
    let token_file = ws.file("token");
    let kd = kd();
    let write_token = format!("printf %s \"$KD_RUN_TOKEN\" > {token_file}");
    // codex's run on thread B presents claude's token of thread A.
    let stolen = [
        // Nothing of its own environment gives it away to the client.
        format!("unset KD_MEMBER KD_THREAD; export KD_RUN_TOKEN=$(cat {token_file})"),
        format!("{kd} send --to claude 'with a stolen token'; echo send=$?"),
        format!("{kd} inbox; echo inbox=$?"),
    ]
    .join("; ");
    config(
        &ws,
        &[
            ("claude", &[("FAKE_RUN", &write_token), ("FAKE_HOLD", hold.var())], none()),
            ("codex", &[("FAKE_RUN", &stolen), ("FAKE_TEXT", "Ran: {run}")], serde_json::json!({"transport": "exec"})),
        ],
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let a = kd_tests::new_thread(&c, &ws.path()).await;
    let b = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub_a = c.thread_subscribe(a.clone(), None, None).await.unwrap();
    c.council_send(a.clone(), "@claude go".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    collect_until(&mut sub_a, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    let messages = ask(&c, &b, "codex", 1).await;
    let answer = answer_of(&messages, "codex");
    assert!(answer.contains("send=1") && answer.contains("inbox=1"), "{answer}");
    assert!(answer.contains("this process is codex's agent's (run r-") && answer.contains("not its run's"), "{answer}");
    hold.release();
    collect_until(&mut sub_a, |e| kd_tests::ended(e) == 1).await;
    let on_a = c.thread_messages(a, None, None, None, None).await.unwrap().into_vec();
    assert!(!on_a.iter().chain(&messages).any(|m| m.body == "with a stolen token"), "nothing was sent");
}

/// Two codex members of the same configuration (app-server transport):
/// the one's process finds the other's `kd mcp` in `/proc` and presents
/// its capability. It is refused — each member has an app-server of its
/// own, whose processes act only as that member — and nothing is posted as
/// the other.
#[tokio::test(flavor = "multi_thread")]
async fn a_codex_member_cannot_use_the_capability_of_another_codex_member() {
    let ws = Workspace::new(&[]);
    let hold = Hold::new();
    let now = ws.file("steal-now");
    let kd = kd();
    let steal = format!(
        "[ -f {now} ] || exit 0; for e in /proc/[0-9]*/environ; do \
         tr '\\0' '\\n' < $e 2>/dev/null | grep -qx KD_MEMBER=codex-b || continue; \
         TOK=$(tr '\\0' '\\n' < $e | sed -n 's/^KD_RUN_TOKEN=//p'); [ -n \"$TOK\" ] || continue; \
         echo found; KD_RUN_TOKEN=$TOK {kd} send --to claude 'as codex-b'; echo send=$?; break; done"
    );
    let env: &[(&str, &str)] = &[
        ("FAKE_MCP_START", "1"),
        ("FAKE_RUN", &steal),
        ("FAKE_TEXT", "Ran: {run}"),
        ("FAKE_HOLD", hold.var()),
        ("FAKE_HOLD_WHEN", "hold-me"),
    ];
    config(&ws, &[("claude", &[], none()), ("codex-a", env, none()), ("codex-b", env, none())]);
    for m in ["codex-a", "codex-b"] {
        ws.set_agent(m, "backend", "codex".into());
    }
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let (a, b) = (kd_tests::new_thread(&c, &ws.path()).await, kd_tests::new_thread(&c, &ws.path()).await);
    let mut sub_b = c.thread_subscribe(b.clone(), None, None).await.unwrap();
    c.council_send(b.clone(), "@codex-b hold-me".into(), None, None, None, None, None, Some(0), None, None)
        .await
        .unwrap();
    collect_until(&mut sub_b, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    std::fs::write(&now, "").unwrap();
    let messages = ask(&c, &a, "codex-a", 1).await;
    let answer = answer_of(&messages, "codex-a");
    assert!(answer.contains("found") && answer.contains("send=1"), "{answer}");
    assert!(answer.contains("not its run's"), "{answer}");
    hold.release();
    collect_until(&mut sub_b, |e| kd_tests::ended(e) == 1).await;
    let on_b = c.thread_messages(b, None, None, None, None).await.unwrap().into_vec();
    assert!(!on_b.iter().chain(&messages).any(|m| m.body == "as codex-b"), "nothing was sent as codex-b");
}

/// The pid kdd's `/proc` stat gives as `pid`'s parent.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// Whether `pid` is a zombie child of `parent`.
fn zombie_children(parent: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let fields: Vec<&str> =
                stat.rsplit_once(')').map(|(_, f)| f.split_whitespace().collect()).unwrap_or_default();
            fields.first() == Some(&"Z") && fields.get(1) == Some(&parent.to_string().as_str())
        })
        .collect()
}

/// Waits until `done` holds, looking again every few milliseconds.
async fn until(what: &str, done: impl Fn() -> bool) {
    within(what, async {
        while !done() {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_orphan_an_agent_double_forks_is_reparented_to_kdd_stays_confined_and_is_reaped() {
    let ws = Workspace::new(&[]);
    let hold = Hold::new();
    let kdd = Kdd::start();
    let (kd, out) = (kd(), ws.file("orphan.out"));
    // The orphan waits until its parent is kdd, then acts, then lets the run end.
    let script = ws.file("orphan.sh");
    let lines = [
        format!("while [ \"$(cut -d' ' -f4 /proc/$$/stat)\" != {} ]; do sleep 0.01; done", kdd.pid),
        "{".to_string(),
        "echo pid=$$".to_string(),
        format!("env -u KD_RUN_TOKEN {kd} send --as king --to codex 'orphan as the king'; echo as_king=$?"),
        format!("env -u KD_RUN_TOKEN {kd} send --to codex 'orphan without its token'; echo no_token=$?"),
        format!("{kd} send --to codex 'from the orphan' >/dev/null; echo with_token=$?"),
        format!("}} > {out} 2>&1"),
        format!("rm -f {}", hold.var()),
    ];
    std::fs::write(&script, lines.join("\n")).unwrap();
    let fork = format!("(sh {script} </dev/null >/dev/null 2>&1 &)");
    config(&ws, &[("claude", &[("FAKE_RUN", &fork), ("FAKE_HOLD", hold.var())], none()), codex()]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let messages = ask(&c, &t, "claude", 2).await;
    let said = std::fs::read_to_string(&out).unwrap();
    for line in ["as_king=1", "no_token=1", "with_token=0", "this process is claude's agent's (run r-"] {
        assert!(said.contains(line), "{line:?} missing from the orphan's output: {said}");
    }
    let sent = messages.iter().find(|m| m.body == "from the orphan").expect("the orphan's message, by its token");
    assert_eq!((sent.from.as_str(), sent.to.clone()), ("claude", vec!["codex".to_string()]));
    assert!(!messages.iter().any(|m| m.body.starts_with("orphan ")), "nothing else was posted");
    // Once it exits, kdd reaps it: no zombie is left.
    let orphan: u32 = said.lines().find_map(|l| l.strip_prefix("pid=")?.parse().ok()).unwrap();
    until("the orphan to be reaped", || parent_of(orphan) != Some(kdd.pid)).await;
    assert!(zombie_children(kdd.pid).is_empty());
}

/// A member's process reads another member's marker and token from
/// `/proc/PID/environ` (same user: it may) and double-forks a process
/// carrying them, which is reparented to kdd: it is still the first
/// member's, by the session kd started its run in, and the token is
/// refused — by `kd send` and by `kd mcp` — whatever it carries.
#[tokio::test(flavor = "multi_thread")]
async fn an_orphan_carrying_another_runs_marker_and_token_is_refused() {
    let ws = Workspace::new(&[]);
    let hold = Hold::new();
    let kdd = Kdd::start();
    let kd = kd();
    let (pid_file, out, done, fifo, mcp_out) =
        (ws.file("victim.pid"), ws.file("orphan.out"), ws.file("orphan.done"), ws.file("mcp.in"), ws.file("mcp.out"));
    // claude (the victim) says where its agent is, then is held mid-run.
    let victim = format!("printf %s $PPID > {pid_file}");
    // codex's orphan: waits until kdd is its parent, then presents claude's token.
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"0"}}}"#;
    let initialized = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
    let call = r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"send","arguments":{"to":["codex"],"body":"forged by kd mcp"}}}"#;
    let script = ws.file("orphan.sh");
    let lines = [
        format!("while [ \"$(cut -d' ' -f4 /proc/$$/stat)\" != {} ]; do sleep 0.01; done", kdd.pid),
        "{".to_string(),
        "echo \"as run=$KD_RUN member=$KD_MEMBER\"".to_string(),
        format!("{kd} send --to codex 'forged by kd send'; echo send=$?"),
        format!("mkfifo {fifo}; {kd} mcp < {fifo} > {mcp_out} 2>&1 &"),
        format!("exec 3>{fifo}"),
        format!("printf '%s\\n' '{init}' '{initialized}' '{call}' >&3"),
        format!("while ! grep -q '\"id\":2' {mcp_out}; do sleep 0.02; done"),
        "exec 3>&-".to_string(),
        format!("cat {mcp_out}"),
        format!("}} > {out} 2>&1"),
        format!("touch {done}"),
    ];
    std::fs::write(&script, lines.join("\n")).unwrap();
    let stolen = [
        format!("victim=$(cat {pid_file})"),
        "of() { tr '\\0' '\\n' < /proc/$victim/environ | grep \"^$1=\" | head -n 1 | cut -d= -f2-; }".to_string(),
        "export KD_RUN=$(of KD_RUN) KD_MEMBER=$(of KD_MEMBER) KD_RUN_TOKEN=$(of KD_RUN_TOKEN) KD_THREAD=$(of KD_THREAD)"
            .to_string(),
        format!("(sh {script} </dev/null >/dev/null 2>&1 &)"),
        format!("while [ ! -f {done} ]; do sleep 0.02; done"),
        format!("cat {out}"),
    ]
    .join("; ");
    config(
        &ws,
        &[
            ("claude", &[("FAKE_RUN", &victim), ("FAKE_HOLD", hold.var())], none()),
            ("codex", &[("FAKE_RUN", &stolen), ("FAKE_TEXT", "Ran: {run}")], serde_json::json!({"transport": "exec"})),
        ],
    );
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    c.council_send(t.clone(), "@claude go".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    let messages = ask(&c, &t, "codex", 1).await;
    let said = answer_of(&messages, "codex");
    assert!(said.contains("as run=r-") && said.contains("member=claude"), "it carried claude's marker: {said}");
    assert!(said.contains("send=1"), "kd send with claude's token: {said}");
    assert!(said.contains("this process is codex's agent's (run r-") && said.contains("not its run's"), "{said}");
    assert!(said.contains(r#""id":2"#) && said.contains(r#""isError":true"#), "kd mcp with claude's token: {said}");
    hold.release();
    collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    let all = c.thread_messages(t, None, None, None, None).await.unwrap().into_vec();
    assert!(!all.iter().any(|m| m.body.starts_with("forged")), "nothing was posted as claude: {all:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_whose_agents_leave_orphans_all_end_with_their_own_exit_status() {
    let orphan = ("FAKE_RUN", "(true </dev/null >/dev/null 2>&1 &); (sleep 0 </dev/null >/dev/null 2>&1 &)");
    let members: Vec<kd_tests::Member<'_>> = ["m1", "m2", "m3", "m4"]
        .iter()
        .map(|name| -> kd_tests::Member<'_> { (name, "claude", std::slice::from_ref(&orphan)) })
        .collect();
    let ws = Workspace::new(&members);
    let kdd = Kdd::start();
    let kd_tests::Watched { c, t, mut sub } = kd_tests::Watched::open(&kdd, &ws, None).await;
    for round in 1..=6 {
        kd_tests::send_one_round(&c, &t, "Go.").await;
        collect_until(&mut sub, |e| kd_tests::ended(e) == 4).await;
        let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap().into_vec();
        let answers: Vec<&Message> = messages.iter().filter(|m| m.from.starts_with('m')).collect();
        assert_eq!(answers.len(), 4 * round);
        for m in answers {
            let exit = m.run.as_ref().and_then(|r| r.exit_status);
            assert_eq!((m.kind, exit), (MessageKind::Agent, Some(0)), "tokio saw its agent's exit: {m:?}");
        }
    }
    until("the orphans to be reaped", || zombie_children(kdd.pid).is_empty()).await;
}

/// Only the King decides approvals (issue 33): an agent's shell, with its
/// run's token or without, can neither list nor decide them.
#[tokio::test(flavor = "multi_thread")]
async fn an_agents_shell_can_neither_list_nor_decide_approvals() {
    let ws = Workspace::new(&[]);
    let kd = kd();
    let shell = [
        format!("{kd} approvals; echo list=$?"),
        format!("{kd} approve ap-x1; echo approve=$?"),
        format!("{kd} deny ap-x1; echo deny=$?"),
        "unset KD_RUN_TOKEN".to_string(),
        format!("{kd} approvals --all; echo list_no_token=$?"),
    ]
    .join("; ");
    config(&ws, &[("claude", &[("FAKE_RUN", &shell), ("FAKE_TEXT", "Ran: {run}")], none()), codex()]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let messages = ask(&c, &t, "claude", 1).await;
    let answer = answer_of(&messages, "claude");
    for refused in ["list=1", "approve=1", "deny=1", "list_no_token=1"] {
        assert!(answer.contains(refused), "{refused} missing from: {answer}");
    }
    for why in ["approval.list is refused", "approval.decide is refused"] {
        assert!(answer.contains(why), "{why:?} missing from: {answer}");
    }
}
