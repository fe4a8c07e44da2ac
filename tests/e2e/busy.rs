//! A question to a busy member (F-C5): a request for the message a member
//! is already answering joins that run, but a *new* message for it waits
//! behind the run in flight and then gets a run of its own — never lost,
//! never answered by the earlier answer. Runs are held mid-answer
//! (`FAKE_HOLD`) while the test acts.

use kd_client::prelude::*;
use kd_proto::coord::DeliveryStatus;
use kd_proto::types::{Message, MessageKind, RoundState, RunStatus, ThreadEvent, display_order};
use kd_tests::{Hold, Kdd, Workspace, collect_until, prompt_of, records, within};

/// The fake answers by the question it finds in its prompt; Beta's rule
/// comes first, since a prompt for Beta also holds Alpha in its history.
const RULES: &str = r#"[["Question Gamma","Answer to gamma."],["Question Beta","Answer to beta."],["Question Alpha","Answer to alpha."]]"#;

fn member<'a>(name: &'a str, env: &'a [(&'a str, &'a str)]) -> kd_tests::Member<'a> {
    (name, "claude", env)
}

/// Waits until `member` has streamed something (its run is held there).
async fn until_streaming(sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>, member: &str) {
    collect_until(sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { member: m, .. } if m == member))).await;
}

/// Waits until a run of `member` is announced queued; returns its id.
async fn until_queued(sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>, member: &str) -> String {
    let events = collect_until(sub, |e| {
        e.iter().any(
            |e| matches!(e, ThreadEvent::RunWaiting { run } if run.member == member && run.status == RunStatus::Queued),
        )
    })
    .await;
    events
        .iter()
        .find_map(|e| match e {
            ThreadEvent::RunWaiting { run } if run.status == RunStatus::Queued => Some(run.id.clone()),
            _ => None,
        })
        .expect("a queued run")
}

/// `member`'s answers (kind, body, the message it answers), in display order.
fn answers_of<'a>(messages: &'a [Message], member: &str) -> Vec<(MessageKind, &'a str, Option<u64>)> {
    display_order(messages)
        .into_iter()
        .filter(|m| m.from == member)
        .map(|m| (m.kind, m.body.as_str(), m.reply_to))
        .collect()
}

/// Asks `body` of claude alone, in one round.
async fn ask_claude(c: &kd_client::Client, t: &str, body: &str) -> kd_proto::types::Sent {
    let to = Some(vec!["claude".to_string()]);
    c.council_send(t.into(), body.into(), to, None, None, None, None, Some(0), None, None).await.unwrap()
}

fn seq_of(messages: &[Message], body: &str) -> u64 {
    messages.iter().find(|m| m.body == body).map(|m| m.seq).expect("the message")
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_ask_of_a_busy_member_waits_and_prints_the_answer_to_its_own_question() {
    let hold = Hold::new();
    let record = tempfile::NamedTempFile::new().unwrap();
    let rec = record.path().display().to_string();
    let env = [("FAKE_HOLD", hold.var()), ("FAKE_RULES", RULES), ("FAKE_RECORD", rec.as_str())];
    let ws = Workspace::new(&[member("claude", &env)]);
    let kdd = Kdd::start();
    let mut k = kdd.kd();
    k.current_dir(ws.dir.path()).args(["ask", "--async", "--to", "claude", "Question Alpha"]);
    let out = kd_tests::run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    let t = out.stdout.trim().to_string();
    let c = kdd.client().await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    until_streaming(&mut sub, "claude").await;

    let mut k = kdd.kd();
    k.current_dir(ws.dir.path())
        .args(["ask", "--to", "claude", "Question Beta"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let second = k.spawn().unwrap();
    until_queued(&mut sub, "claude").await;
    hold.release();
    let out = within("the second kd ask", second.wait_with_output()).await.unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("Answer to beta."), "B's own answer: {stdout}");
    assert!(!stdout.contains("Answer to alpha."), "not the answer to A: {stdout}");
    assert!(stderr.contains("kd: claude is still answering an earlier message; yours is queued behind it"), "{stderr}");

    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap().into_vec();
    let (a, b) = (seq_of(&messages, "Question Alpha"), seq_of(&messages, "Question Beta"));
    assert_eq!(
        answers_of(&messages, "claude"),
        [(MessageKind::Agent, "Answer to alpha.", Some(a)), (MessageKind::Agent, "Answer to beta.", Some(b))],
        "each question answered once, by a run of its own"
    );
    // B's run came after A's answer and was given it.
    let prompts: Vec<String> = records(&rec).iter().map(prompt_of).collect();
    assert_eq!(prompts.len(), 2, "claude ran twice");
    assert!(prompts[1].contains("Question Beta") && prompts[1].contains("claude: Answer to alpha."), "{}", prompts[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn council_send_to_two_members_queues_the_busy_one_and_starts_the_other() {
    let hold = Hold::new();
    let record = tempfile::NamedTempFile::new().unwrap();
    let rec = record.path().display().to_string();
    let claude = [("FAKE_HOLD", hold.var()), ("FAKE_RULES", RULES), ("FAKE_RECORD", rec.as_str())];
    let ws = Workspace::new(&[member("claude", &claude), ("codex", "gemini", &[("FAKE_RULES", RULES)])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let a = ask_claude(&c, &t, "Question Alpha").await;
    until_streaming(&mut sub, "claude").await;
    let b = c
        .council_send(t.clone(), "Question Beta".into(), None, None, None, None, None, Some(0), None, None)
        .await
        .unwrap();
    let runs: Vec<(&str, RunStatus, bool)> =
        b.runs.iter().map(|r| (r.run.member.as_str(), r.run.status, r.attached)).collect();
    assert_eq!(
        runs,
        [("claude", RunStatus::Queued, false), ("codex", RunStatus::Waiting, false)],
        "claude's run for B waits behind its answer to A; codex starts at once"
    );
    assert_ne!(b.runs[0].run.id, a.runs[0].run.id, "a run of its own, not A's");
    // codex answers B while claude still holds A.
    collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { member, .. } if member == "codex"))
    })
    .await;
    hold.release();
    let events = collect_until(&mut sub, |e| {
        e.iter().any(|e| {
            matches!(e, ThreadEvent::Round { exchange, state, .. } if *exchange == b.message.seq && *state != RoundState::Running)
        })
    })
    .await;
    assert!(
        events.iter().any(
            |e| matches!(e, ThreadEvent::Round { exchange, state: RoundState::Done, .. } if *exchange == b.message.seq)
        ),
        "B's exchange waited for claude's answer and completed"
    );
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap().into_vec();
    assert_eq!(
        answers_of(&messages, "claude"),
        [
            (MessageKind::Agent, "Answer to alpha.", Some(a.message.seq)),
            (MessageKind::Agent, "Answer to beta.", Some(b.message.seq))
        ]
    );
    assert_eq!(answers_of(&messages, "codex"), [(MessageKind::Agent, "Answer to beta.", Some(b.message.seq))]);
    // claude's run for B saw its own answer to A, but not codex's answer
    // to B: the members of a round answer independently.
    let prompts: Vec<String> = records(&rec).iter().map(prompt_of).collect();
    assert!(prompts[1].contains("claude: Answer to alpha."), "{}", prompts[1]);
    assert!(!prompts[1].contains("codex: Answer to beta."), "{}", prompts[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_routed_message_to_a_busy_member_is_answered_after_its_run_in_flight() {
    let hold = Hold::new();
    let env = [("FAKE_HOLD", hold.var()), ("FAKE_RULES", RULES)];
    let ws = Workspace::new(&[member("claude", &env), ("codex", "gemini", &[])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    ask_claude(&c, &t, "Question Alpha").await;
    until_streaming(&mut sub, "claude").await;
    let routed = c
        .message_route(
            t.clone(),
            "codex".into(),
            "Question Gamma".into(),
            Some(vec!["claude".into()]),
            None,
            None,
            None,
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(routed.deliveries[0].status, DeliveryStatus::AfterRun);
    let queued = routed.deliveries[0].run.clone().expect("the queued run is named");
    hold.release();
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { run, .. } if *run == queued)))
        .await;
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap().into_vec();
    let (alpha, gamma) = (seq_of(&messages, "Question Alpha"), seq_of(&messages, "Question Gamma"));
    assert_eq!(
        answers_of(&messages, "claude"),
        [(MessageKind::Agent, "Answer to alpha.", Some(alpha)), (MessageKind::Agent, "Answer to gamma.", Some(gamma))]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queued_run_can_be_cancelled_before_it_starts_and_the_run_in_flight_goes_on() {
    let hold = Hold::new();
    let env = [("FAKE_HOLD", hold.var()), ("FAKE_RULES", RULES)];
    let ws = Workspace::new(&[member("claude", &env)]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::thread_in(&c, &ws, None).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    kd_tests::send_one_round(&c, &t, "Question Alpha").await;
    until_streaming(&mut sub, "claude").await;
    let b = kd_tests::send_one_round(&c, &t, "Question Beta").await;
    let queued = b.runs[0].run.id.clone();
    assert_eq!(b.runs[0].run.status, RunStatus::Queued);
    let listed = c.run_list(Some(t.clone())).await.unwrap();
    assert_eq!(listed.iter().map(|r| r.status).collect::<Vec<_>>(), [RunStatus::Streaming, RunStatus::Queued]);
    let cancelled = c.run_cancel(t.clone(), None, Some(queued.clone())).await.unwrap();
    assert_eq!(cancelled.len(), 1);
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::RunCancelled { run, .. } if *run == queued)))
        .await;
    hold.release();
    collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { member, .. } if member == "claude"))
    })
    .await;
    let messages = c.thread_messages(t, None, None, None, None).await.unwrap().into_vec();
    assert_eq!(
        answers_of(&messages, "claude").iter().map(|(k, body, _)| (*k, *body)).collect::<Vec<_>>(),
        [(MessageKind::Agent, "Answer to alpha."), (MessageKind::Interrupted, "(stopped before it started)")]
    );
}
