//! The member surface end to end (issue 22, F-B6): a run's agent acts
//! through kd as its member, on its thread, by the capability its run was
//! given (`KD_RUN_TOKEN`) — `member.*` called directly with the token a
//! held run wrote out, and `kd send`/`kd inbox`/`kd ack`/`kd claim` run from
//! the agent's shell — with a real kdd and fake agents.

use jsonrpsee::core::ClientError;
use kd_client::Client;
use kd_client::prelude::*;
use kd_proto::ErrorCode;
use kd_proto::types::*;
use kd_tests::{Fake, Hold, Kdd, Workspace, collect_until};

fn config(ws: &Workspace, members: &[Fake<'_>], council: serde_json::Value) {
    ws.configure(members, council);
}

fn none() -> serde_json::Value {
    serde_json::json!({})
}

/// The `FAKE_RUN` of a member whose run writes its capability to `file`.
fn token_to(file: &str) -> String {
    format!("printf %s \"$KD_RUN_TOKEN\" > {file}")
}

/// The error code of a refused call.
fn code(e: &ClientError) -> i32 {
    match e {
        ClientError::Call(e) => e.code(),
        other => panic!("not a call error: {other}"),
    }
}

fn message(e: &ClientError) -> String {
    match e {
        ClientError::Call(e) => e.message().to_string(),
        other => panic!("not a call error: {other}"),
    }
}

/// Waits until `member`'s run on the subscribed thread has streamed its
/// first piece (its `FAKE_RUN` has run: the fake runs it first); its id.
async fn first_piece(sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>, member: &str) -> String {
    let events =
        collect_until(sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { member: m, .. } if m == member)))
            .await;
    events
        .iter()
        .find_map(|e| match e {
            ThreadEvent::Delta { run, member: m, .. } if m == member => Some(run.clone()),
            _ => None,
        })
        .unwrap_or_default()
}

/// claude holding its run mid-stream after writing its token to a file;
/// `others` more members. The kdd, a client, the thread, its subscription,
/// the hold and the token file.
struct Held {
    kdd: Kdd,
    c: Client,
    t: String,
    sub: jsonrpsee::core::client::Subscription<ThreadEvent>,
    hold: Hold,
    ws: Workspace,
    token_file: String,
}

impl Held {
    async fn start(others: &[Fake<'_>], council: serde_json::Value) -> Held {
        let ws = Workspace::new(&[]);
        let hold = Hold::new();
        let token_file = ws.file("token");
        let run = token_to(&token_file);
        let env = [("FAKE_RUN", run.as_str()), ("FAKE_HOLD", hold.var())];
        let mut members: Vec<Fake<'_>> = vec![("claude", &env[..], none())];
        members.extend(others.iter().cloned());
        config(&ws, &members, council);
        let kdd = Kdd::start();
        let c = kdd.client().await;
        let t = kd_tests::new_thread(&c, &ws.path()).await;
        let sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
        Held { kdd, c, t, sub, hold, ws, token_file }
    }

    /// Asks claude and waits for its run to hold; its token and run id.
    async fn ask_claude(&mut self) -> (String, String) {
        self.c
            .council_send(self.t.clone(), "@claude go".into(), None, None, None, None, None, Some(0), None, None)
            .await
            .unwrap();
        let run = first_piece(&mut self.sub, "claude").await;
        (std::fs::read_to_string(&self.token_file).unwrap_or_default(), run)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_given_its_capability_which_names_its_member_thread_and_run_until_it_ends() {
    let mut h = Held::start(&[], none()).await;
    let (token, run) = h.ask_claude().await;
    assert!(token.starts_with("kdcap_") && token.len() == 70, "KD_RUN_TOKEN of the run: {token:?}");
    let grant = h.c.member_whoami(token.clone()).await.unwrap();
    assert_eq!(
        (grant.member.as_str(), grant.thread.as_str(), grant.run.as_deref(), grant.workspace.as_str()),
        ("claude", h.t.as_str(), Some(run.as_str()), h.ws.path().as_str())
    );
    let forged = format!("kdcap_{}", "0".repeat(64));
    let e = h.c.member_whoami(forged).await.unwrap_err();
    assert_eq!(code(&e), ErrorCode::Forbidden.code(), "{e}");
    h.hold.release();
    collect_until(&mut h.sub, |e| kd_tests::ended(e) == 1).await;
    let e = h.c.member_whoami(token.clone()).await.unwrap_err();
    assert_eq!(code(&e), ErrorCode::Forbidden.code(), "a stale token: {e}");
    let e = h.c.member_send(token, vec!["codex".into()], "late".into(), None, None).await.unwrap_err();
    assert_eq!(code(&e), ErrorCode::Forbidden.code(), "nothing is sent by a stale token: {e}");
    // Nor by a forged one from a shell.
    let mut k = h.kdd.kd();
    k.env("KD_RUN_TOKEN", format!("kdcap_{}", "1".repeat(64))).args(["send", "--to", "codex", "forged"]);
    let out = kd_tests::run(k).await;
    assert!(!out.status.success() && out.stderr.contains("unknown capability"), "{}", out.stderr);
    let messages = h.c.thread_messages(h.t.clone(), None, None, None, None).await.unwrap().into_vec();
    assert!(!messages.iter().any(|m| m.body == "late" || m.body == "forged"));
}

#[tokio::test(flavor = "multi_thread")]
async fn member_send_routes_as_the_member_and_starts_the_addressees_run() {
    let codex: Fake<'_> = ("codex", &[("FAKE_TEXT", "Got it.")], none());
    let mut h = Held::start(&[codex], none()).await;
    let (token, _) = h.ask_claude().await;
    let routed =
        h.c.member_send(token.clone(), vec!["codex".into()], "ping from claude".into(), None, None).await.unwrap();
    let m = &routed.message;
    assert_eq!(
        (m.from.as_str(), m.to.clone(), m.kind, routed.route_type),
        ("claude", vec!["codex".to_string()], MessageKind::Agent, RouteType::PointToPoint)
    );
    let d = &routed.deliveries[0];
    assert_eq!((d.member.as_str(), d.status), ("codex", DeliveryStatus::Started), "codex is immediate: {d:?}");
    let codex_run = d.run.clone().unwrap();
    let events = collect_until(&mut h.sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { run, .. } if *run == codex_run))
    })
    .await;
    assert!(!events.is_empty());
    let messages = h.c.thread_messages(h.t.clone(), None, None, None, None).await.unwrap().into_vec();
    let answer = messages.iter().find(|x| x.from == "codex").expect("codex answered");
    assert_eq!((answer.body.as_str(), answer.reply_to), ("Got it.", Some(m.seq)));
    // Not to oneself, not to the King, not to a stranger: each names the members.
    for (to, says) in [("claude", "you are claude"), ("king", "other members are codex"), ("nobody", "unknown member")]
    {
        let e = h.c.member_send(token.clone(), vec![to.into()], "hi".into(), None, None).await.unwrap_err();
        assert_eq!(code(&e), ErrorCode::InvalidArgument.code(), "{to}: {e}");
        assert!(message(&e).contains(says) && message(&e).contains("codex"), "{to}: {e}");
    }
    let e = h.c.member_send(token.clone(), vec!["codex".into()], "hi".into(), Some(vec!["king".into()]), None).await;
    assert_eq!(code(&e.unwrap_err()), ErrorCode::InvalidArgument.code(), "nor a copy to the King");
    let e = h.c.member_send(token, vec!["codex".into()], " ".into(), None, None).await.unwrap_err();
    assert_eq!(code(&e), ErrorCode::InvalidArgument.code(), "an empty body");
    h.hold.release();
}

#[tokio::test(flavor = "multi_thread")]
async fn member_inbox_ack_claim_thread_and_search_act_as_the_member_on_its_thread() {
    // codex's run the emergency starts holds (its answer would acknowledge
    // the emergency) until the end, so codex still owes one when asked.
    let hold = Hold::new();
    let env = [("FAKE_HOLD", hold.var()), ("FAKE_HOLD_WHEN", "Stop pushing.")];
    let codex: Fake<'_> = ("codex", &env[..], serde_json::json!({"delivery": {"mode": "queued"}}));
    let mut h = Held::start(&[codex], none()).await;
    let (token, _) = h.ask_claude().await;
    let (c, t) = (&h.c, h.t.clone());
    // A copy for claude on its thread, and one on another thread of the workspace.
    let other = kd_tests::new_thread(c, &h.ws.path()).await;
    for (thread, body) in [(&t, "note for you"), (&other, "elsewhere")] {
        c.message_route(
            thread.clone(),
            "king".into(),
            body.into(),
            Some(vec!["codex".into()]),
            Some(vec!["claude".into()]),
            None,
            None,
            None,
            None,
        )
        .await
        .unwrap();
    }
    let inbox = c.member_inbox(token.clone(), None, None, None, Some(true)).await.unwrap();
    let seen: Vec<(&str, &str, Role)> = inbox.iter().map(|i| (i.body.as_str(), i.from.as_str(), i.role)).collect();
    assert_eq!(seen, [("note for you", "king", Role::Cc)], "claude's inbox on its own thread");
    assert!(c.member_inbox(token.clone(), None, None, None, None).await.unwrap().is_empty(), "marked read");
    let all = c.member_inbox(token.clone(), Some(false), None, None, None).await.unwrap();
    assert_eq!(all.iter().map(|i| i.status).collect::<Vec<_>>(), [InboxStatus::Read]);
    let e = c.member_inbox(token.clone(), None, None, Some(0), None).await.unwrap_err();
    assert_eq!(code(&e), ErrorCode::InvalidArgument.code());

    // An emergency: claude acknowledges as itself, codex still owes one.
    let em = c.emergency_broadcast(t.clone(), "Stop pushing.".into(), None, None, None).await.unwrap();
    let acked = c.member_ack(token.clone(), None).await.unwrap();
    assert_eq!(
        acked.iter().map(|a| (a.member.as_str(), a.broadcast.as_str())).collect::<Vec<_>>(),
        [("claude", em.broadcast.as_str())]
    );
    let pending = c.emergency_pending(Some(t.clone()), None).await.unwrap();
    assert_eq!(pending.iter().map(|a| a.member.as_str()).collect::<Vec<_>>(), ["codex"]);

    // A claim as claude on its thread: codex's write of the same file is refused.
    let claim = c.member_claim(token.clone(), "src/lib.rs".into(), None).await.unwrap();
    assert_eq!(claim.status, RaceStatus::Ok);
    let race = c.resource_write("src/lib.rs".into(), "codex".into(), None, None).await.unwrap();
    assert_eq!((race.status, race.writers.clone()), (RaceStatus::Rejected, vec!["claude".to_string()]));
    let events = c
        .events_list(Some(t.clone()), Some("claude".into()), Some("resource.write".into()), None, None, None)
        .await
        .unwrap();
    assert!(!events.is_empty(), "the claim is claude's, on its thread");

    // The thread as agents' history shows it.
    let history = c.member_thread(token.clone(), Some(50)).await.unwrap();
    assert!(history.starts_with("[Previous conversation]\nking (to claude): @claude go"), "{history}");
    assert!(history.contains("king (to codex): note for you") && !history.contains("elsewhere"), "{history}");
    assert!(history.ends_with(&format!("of thread {t}; you are claude.")), "{history}");
    let last = c.member_thread(token.clone(), Some(1)).await.unwrap();
    assert!(!last.contains("@claude go"), "only the last message: {last}");
    for bad in [0, 201] {
        let e = c.member_thread(token.clone(), Some(bad)).await.unwrap_err();
        assert_eq!(code(&e), ErrorCode::InvalidArgument.code(), "last {bad}");
    }

    // Search: the threads of claude's workspace, not another's.
    let ws2 = Workspace::new(&[("claude", "claude", &[])]);
    let t2 = kd_tests::new_thread(c, &ws2.path()).await;
    kd_tests::append(c, &t2, "king", "needle far away", &[]).await;
    kd_tests::append(c, &t, "king", "needle close by", &[]).await;
    let everywhere = c.search_query("needle".into(), None, None, None, None).await.unwrap();
    assert!(everywhere.iter().any(|h| h.thread == t2) && everywhere.iter().any(|h| h.thread == t), "{everywhere:?}");
    let hits = c.member_search(token.clone(), "needle".into(), None).await.unwrap();
    assert!(!hits.is_empty() && hits.iter().all(|h| h.thread == t), "{hits:?}");
    let most = c.member_search(token, "needle".into(), Some(1000)).await.unwrap();
    // The same hits (their rank moves as the index takes in more messages).
    let found =
        |hits: &[kd_proto::types::SearchHit]| hits.iter().map(|h| (h.thread.clone(), h.seq)).collect::<Vec<_>>();
    assert_eq!(found(&most), found(&hits), "a limit past 50 is taken as 50, not refused");
    h.hold.release();
    hold.release();
}

/// Waits until the exchange of King message `king` has ended and every
/// member in `members` has finished a run.
async fn until_done(sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>, king: u64, members: &[&str]) {
    collect_until(sub, |e| {
        let ended = e.iter().any(
            |e| matches!(e, ThreadEvent::Round { exchange, state, .. } if *exchange == king && *state != RoundState::Running),
        );
        ended
            && members.iter().all(|m| e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { member, .. } if member == m)))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_commands_in_an_agents_shell_act_by_the_runs_capability_and_refuse_any_other_name() {
    let ws = Workspace::new(&[]);
    let kd = kd_tests::bin("kd").display().to_string();
    let shell = [
        format!("{kd} send --to codex 'ping from the shell' >/dev/null; echo send=$?"),
        format!("{kd} send --as king --to codex 'as the king'; echo as_king=$?"),
        format!("KD_MEMBER=codex {kd} send --to cursor 'as codex'; echo env_member=$?"),
        format!("{kd} ack --as codex; echo ack_other=$?"),
        format!("{kd} send --thread t-other --to codex 'elsewhere'; echo other_thread=$?"),
        format!("{kd} claim src/a.rs >/dev/null; echo claim=$?"),
        format!("{kd} inbox --all-threads; echo all_threads=$?"),
        format!("{kd} inbox; echo inbox=$?"),
    ]
    .join("; ");
    config(
        &ws,
        &[
            ("claude", &[("FAKE_RUN", &shell), ("FAKE_TEXT", "Ran: {run}")], none()),
            ("codex", &[("FAKE_TEXT", "Got it.")], none()),
            ("cursor", &[], serde_json::json!({"delivery": {"mode": "queued"}})),
        ],
        none(),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let other =
        c.thread_create(ws.path(), None, None, None, Some("t-other".into()), None, None, None, None).await.unwrap();
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = c
        .council_send(t.clone(), "@claude go".into(), None, None, None, None, None, Some(0), None, None)
        .await
        .unwrap();
    until_done(&mut sub, sent.message.seq, &["claude", "codex"]).await;
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap().into_vec();
    let answer = messages.iter().find(|m| m.from == "claude" && m.body.starts_with("Ran:")).expect("claude answered");
    for said in [
        "send=0",
        "as_king=1",
        "env_member=1",
        "ack_other=1",
        "other_thread=1",
        "claim=0",
        "all_threads=1",
        "claude's inbox is empty",
        "inbox=0",
        "--as names king, but this shell is claude's on thread",
        "KD_MEMBER names codex",
        "--thread names t-other",
    ] {
        assert!(answer.body.contains(said), "{said:?} missing from: {}", answer.body);
    }
    let ping = messages.iter().find(|m| m.body == "ping from the shell").expect("the shell's message");
    assert_eq!((ping.from.as_str(), ping.to.clone()), ("claude", vec!["codex".to_string()]), "stored as claude");
    let got = messages.iter().find(|m| m.from == "codex").expect("codex was run");
    assert_eq!((got.body.as_str(), got.reply_to), ("Got it.", Some(ping.seq)), "codex answered claude's message");
    let others = c.thread_messages(other.id, None, None, None, None).await.unwrap().into_vec();
    assert!(others.is_empty(), "nothing reached the other thread");
    assert!(!messages.iter().any(|m| m.from == "king" && m.body != "@claude go"), "nothing posted as the King");
    assert!(!messages.iter().any(|m| m.body == "as codex"), "nothing posted as codex");
    let claims = c.events_list(Some(t), Some("claude".into()), Some("resource.write".into()), None, None, None).await;
    assert_eq!(claims.unwrap().len(), 1, "the claim was claude's, on its thread");
}

#[tokio::test(flavor = "multi_thread")]
async fn two_agents_sending_to_each_other_stop_at_the_exchanges_hop_limit() {
    let ws = Workspace::new(&[]);
    let kd = kd_tests::bin("kd").display().to_string();
    let claude = format!("{kd} send --to codex ping; echo rc=$?");
    let codex = format!("{kd} send --to claude pong; echo rc=$?");
    config(
        &ws,
        &[
            ("claude", &[("FAKE_RUN", &claude), ("FAKE_TEXT", "Ran: {run}")], none()),
            // A run of its own (codex exec), given its token as claude's is.
            ("codex", &[("FAKE_RUN", &codex), ("FAKE_TEXT", "Ran: {run}")], serde_json::json!({"transport": "exec"})),
        ],
        serde_json::json!({"max_hops": 3}),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    c.council_send(t.clone(), "@claude go".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    // claude → codex → claude → codex (three hand-offs), whose send is refused.
    collect_until(&mut sub, |e| kd_tests::ended(e) == 4).await;
    let left = c.run_list(Some(t.clone())).await.unwrap();
    assert!(left.is_empty(), "no fifth run: {left:?}");
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap().into_vec();
    let sent: Vec<&str> = messages.iter().filter(|m| m.route.is_some()).map(|m| m.body.as_str()).collect();
    assert_eq!(sent, ["ping", "pong", "ping"], "three hand-offs delivered");
    let last = messages.iter().rev().find(|m| m.from == "codex" && m.body.starts_with("Ran:")).unwrap();
    assert!(last.body.contains("rc=1") && last.body.contains("council.max_hops (3)"), "{}", last.body);
    let notice = messages.iter().find(|m| m.from == "kd").expect("kd's notice to the King");
    assert_eq!(notice.body, "codex's message to claude was not delivered: this exchange reached council.max_hops (3).");
    let limits = c.events_list(Some(t), None, Some("routing.hop_limit".into()), None, None, None).await.unwrap();
    assert_eq!(limits.len(), 1, "{limits:?}");
    assert_eq!((limits[0].data["hops"].as_u64(), limits[0].data["via"].as_str()), (Some(3), Some("send")));
}
