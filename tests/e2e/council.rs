//! Council rounds with fake agents: broadcast and sequential modes,
//! directed messages, @all, mute, interrupt, failures, retry, a new King
//! message during auto-turns.

use kd_client::ClientError;
use kd_client::prelude::*;
use kd_proto::ErrorCode;
use kd_proto::types::{Message, MessageKind, RoundState, Sent, ThreadEvent, display_order};
use kd_tests::{Kdd, Workspace, collect_until, prompt_of, records, within};

fn config(ws: &Workspace, members: &[kd_tests::Member<'_>], council: serde_json::Value) {
    let mut agents = serde_json::Map::new();
    for (name, backend, env) in members {
        agents.insert(name.to_string(), kd_tests::fake(backend, name, env));
    }
    let mut council = council;
    council["members"] = members.iter().map(|m| m.0).collect::<Vec<_>>().into();
    ws.write_config(&serde_json::json!({"council": council, "agents": agents}));
}

async fn thread(c: &kd_client::Client, ws: &Workspace) -> String {
    kd_tests::new_thread(c, &ws.path()).await
}

async fn send(c: &kd_client::Client, t: &str, body: &str, mute: Option<Vec<String>>) -> Sent {
    c.council_send(t.into(), body.into(), None, mute, None, None, None, None, None, None).await.unwrap()
}

/// Events until the exchange of `king` has ended; returns them and its final state.
async fn until_end(
    sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>,
    king: u64,
) -> (Vec<ThreadEvent>, RoundState) {
    let events = collect_until(sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::Round { exchange, state, .. } if *exchange == king && *state != RoundState::Running))
    })
    .await;
    let state = events
        .iter()
        .rev()
        .find_map(|e| match e {
            ThreadEvent::Round { exchange, state, .. } if *exchange == king => Some(*state),
            _ => None,
        })
        .unwrap();
    (events, state)
}

/// Waits until a turn of `round` is streaming (not merely announced).
async fn until_streaming_in_round(
    sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>,
    round: u32,
) -> Vec<ThreadEvent> {
    collect_until(sub, |e| {
        let start = e.iter().position(|e| matches!(e, ThreadEvent::Round { round: r, .. } if *r == round));
        start.is_some_and(|i| e[i..].iter().any(|e| matches!(e, ThreadEvent::Delta { .. })))
    })
    .await
}

fn answers(messages: &[Message]) -> Vec<(String, u32, MessageKind)> {
    messages.iter().filter(|m| m.from != "king").map(|m| (m.from.clone(), m.round.unwrap_or(0), m.kind)).collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn broadcast_with_three_members_and_three_auto_rounds_gives_twelve_answers_in_order() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let env: &[(&str, &str)] = &[("FAKE_RECORD", &record)];
    config(
        &ws,
        &[("claude", "claude", env), ("codex", "codex", env), ("gemini", "gemini", env)],
        serde_json::json!({"auto_rounds": 3}),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread(&c, &ws).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = send(&c, &t, "Design the schema.", None).await;
    assert_eq!((sent.rounds, sent.members.len(), sent.runs.len()), (4, 3, 3));
    let (events, state) = until_end(&mut sub, sent.message.seq).await;
    assert_eq!(state, RoundState::Done);
    let rounds: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Round { round, state: RoundState::Running, .. } => Some(*round),
            _ => None,
        })
        .collect();
    assert_eq!(rounds, [1, 2, 3, 4]);

    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let all = answers(&messages);
    assert_eq!(all.len(), 3 * (1 + 3), "{all:?}");
    // Round 1 is parallel: the three answer in any order.
    let mut first: Vec<&str> = all[..3].iter().map(|a| a.0.as_str()).collect();
    first.sort();
    assert_eq!(first, ["claude", "codex", "gemini"]);
    assert!(all[..3].iter().all(|a| a.1 == 1 && a.2 == MessageKind::Agent));
    // Rounds 2..4 go round-robin in council order.
    let later: Vec<(&str, u32)> = all[3..].iter().map(|a| (a.0.as_str(), a.1)).collect();
    let expected: Vec<(&str, u32)> =
        (2..=4).flat_map(|r| ["claude", "codex", "gemini"].into_iter().map(move |m| (m, r))).collect();
    assert_eq!(later, expected);

    // Each turn sees the whole thread: the last turn's prompt holds all eleven answers before it.
    let recs = records(&record);
    assert_eq!(recs.len(), 12);
    let prompt = prompt_of(recs.last().unwrap());
    assert_eq!(
        prompt.matches("\n\nclaude: ").count()
            + prompt.matches("\n\ncodex: ").count()
            + prompt.matches("\n\ngemini: ").count(),
        11,
        "{prompt}"
    );
    // …while the first round's prompts stop at the King's message.
    let first_prompts = recs.iter().take(3).map(|r| r.to_string()).collect::<Vec<_>>();
    assert!(first_prompts.iter().all(|p| !p.contains("Answer from")), "round 1 does not see round 1");
}

#[tokio::test(flavor = "multi_thread")]
async fn sequential_mode_goes_round_robin_from_the_start() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let env: &[(&str, &str)] = &[("FAKE_RECORD", &record)];
    config(
        &ws,
        &[("claude", "claude", env), ("codex", "codex", env)],
        serde_json::json!({"mode": "sequential", "auto_rounds": 1}),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread(&c, &ws).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = send(&c, &t, "Go.", None).await;
    assert_eq!(sent.runs.len(), 1, "only the first member starts at once");
    let (_, state) = until_end(&mut sub, sent.message.seq).await;
    assert_eq!(state, RoundState::Done);
    let messages = c.thread_messages(t, None, None, None, None).await.unwrap();
    let order: Vec<(String, u32)> = answers(&messages).into_iter().map(|a| (a.0, a.1)).collect();
    assert_eq!(order, [("claude".into(), 1), ("codex".into(), 1), ("claude".into(), 2), ("codex".into(), 2)]);
    // codex's first turn already sees claude's answer.
    let recs = records(&record);
    assert!(kd_tests::prompt_of(&recs[1]).contains("claude: Answer from claude."), "{}", recs[1]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_directed_message_gets_only_the_addressed_members_and_no_auto_rounds() {
    let ws = Workspace::new(&[]);
    config(
        &ws,
        &[("claude", "claude", &[]), ("codex", "codex", &[]), ("gemini", "gemini", &[])],
        serde_json::json!({}),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread(&c, &ws).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = send(&c, &t, "@Codex and @gemini, what do you mean?", None).await;
    assert_eq!((sent.members.clone(), sent.rounds), (vec!["codex".to_string(), "gemini".into()], 1));
    assert_eq!(sent.message.to, vec!["codex".to_string(), "gemini".into()]);
    let (_, state) = until_end(&mut sub, sent.message.seq).await;
    assert_eq!(state, RoundState::Done);
    let mut who: Vec<String> = answers(&c.thread_messages(t.clone(), None, None, None, None).await.unwrap())
        .into_iter()
        .map(|a| a.0)
        .collect();
    who.sort();
    assert_eq!(who, ["codex", "gemini"]);
    let e = ClientError::from(
        c.council_send(t, "@gpt?".into(), None, None, None, None, None, None, None, None).await.unwrap_err(),
    );
    assert_eq!(e.code(), Some(ErrorCode::InvalidArgument));
    assert_eq!(e.to_string(), "unknown member @gpt; the members are claude, codex, gemini");
}

#[tokio::test(flavor = "multi_thread")]
async fn at_all_addresses_everyone_and_auto_rounds_follow() {
    let ws = Workspace::new(&[]);
    config(&ws, &[("claude", "claude", &[]), ("codex", "codex", &[])], serde_json::json!({"auto_rounds": 1}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread(&c, &ws).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = send(&c, &t, "@all thoughts?", None).await;
    assert_eq!((sent.members.len(), sent.rounds, sent.message.to.clone()), (2, 2, vec!["all".to_string()]));
    until_end(&mut sub, sent.message.seq).await;
    assert_eq!(answers(&c.thread_messages(t, None, None, None, None).await.unwrap()).len(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_muted_member_is_not_queried_at_all() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let env: &[(&str, &str)] = &[("FAKE_RECORD", &record)];
    config(&ws, &[("claude", "claude", env), ("codex", "codex", env)], serde_json::json!({"auto_rounds": 2}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread(&c, &ws).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = send(&c, &t, "Go.", Some(vec!["codex".into()])).await;
    assert_eq!(sent.members, vec!["claude".to_string()]);
    until_end(&mut sub, sent.message.seq).await;
    let who: Vec<String> =
        answers(&c.thread_messages(t, None, None, None, None).await.unwrap()).into_iter().map(|a| a.0).collect();
    // Alone, claude answers once: a council of one does not argue with itself.
    assert_eq!(who, ["claude"]);
    assert!(records(&record).iter().all(|r| !r["argv"].to_string().contains("\"exec\"")), "codex never ran");
}

#[tokio::test(flavor = "multi_thread")]
async fn interrupt_during_auto_rounds_stops_them() {
    let ws = Workspace::new(&[]);
    // claude holds in round 2 (its prompt then has codex's first answer).
    let hold = kd_tests::Hold::new();
    let held = [("FAKE_HOLD", hold.var()), ("FAKE_HOLD_WHEN", "Answer from codex.")];
    config(&ws, &[("claude", "claude", &held), ("codex", "gemini", &[])], serde_json::json!({"auto_rounds": 3}));
    let kdd = Kdd::start_with(&["--kill-grace-ms", "300"]);
    let c = kdd.client().await;
    let t = thread(&c, &ws).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = send(&c, &t, "Discuss.", None).await;
    until_streaming_in_round(&mut sub, 2).await;
    let i = c.council_interrupt(t.clone(), None).await.unwrap();
    assert!(i.stopped_exchange);
    assert_eq!(i.runs.len(), 1, "this client's run in flight is cancelled");
    let (events, state) = until_end(&mut sub, sent.message.seq).await;
    assert_eq!(state, RoundState::Stopped);
    assert!(events.iter().any(|e| matches!(e, ThreadEvent::RunCancelled { .. })), "{events:#?}");
    // The exchange is over: no further run starts.
    let started = c.events_list(Some(t.clone()), None, Some("run.start".into()), None, None, None).await.unwrap().len();
    assert_eq!(started, 3, "two in round 1, one in round 2");
    assert!(c.run_list(Some(t.clone())).await.unwrap().is_empty());
    let last = c.thread_messages(t, None, None, None, None).await.unwrap().pop().unwrap();
    assert_eq!((last.kind, last.round), (MessageKind::Interrupted, Some(2)));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failing_member_is_asked_once_per_exchange_and_one_member_left_does_not_argue_with_itself() {
    let ws = Workspace::new(&[]);
    let record = ws.file("codex.jsonl");
    config(
        &ws,
        &[
            ("claude", "claude", &[]),
            ("codex", "codex", &[("FAKE_ERROR", "rate limited"), ("FAKE_RECORD", &record)]),
            ("gemini", "gemini", &[]),
        ],
        serde_json::json!({"auto_rounds": 2}),
    );
    // A member whose binary is missing fails the same way.
    let mut cfg: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.dir.path().join(".kd/config.json")).unwrap()).unwrap();
    cfg["agents"]["gemini"]["command"] = "/nonexistent/gemini".into();
    ws.write_config(&cfg);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread(&c, &ws).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = send(&c, &t, "Go.", None).await;
    let (events, state) = until_end(&mut sub, sent.message.seq).await;
    assert_eq!(state, RoundState::Done);
    let mut all = answers(&c.thread_messages(t.clone(), None, None, None, None).await.unwrap());
    all[..3].sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        all,
        [
            ("claude".to_string(), 1, MessageKind::Agent),
            ("codex".into(), 1, MessageKind::Error),
            ("gemini".into(), 1, MessageKind::Error),
        ]
    );
    assert_eq!(records(&record).len(), 1, "codex is not run again in the same exchange");
    let later_rounds: Vec<Vec<String>> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Round { round, state: RoundState::Running, expected, .. } if *round > 1 => {
                Some(expected.clone())
            }
            _ => None,
        })
        .collect();
    // The one member left does not argue with itself: no later round.
    assert!(later_rounds.is_empty(), "{later_rounds:?}");
    // The next King message asks everyone again.
    let sent =
        c.council_send(t.clone(), "Again.".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    until_end(&mut sub, sent.message.seq).await;
    assert_eq!(records(&record).len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn retry_replaces_the_failed_answer_in_its_place() {
    let ws = Workspace::new(&[]);
    let failing = |fail: bool| {
        let env: &[(&str, &str)] = if fail { &[("FAKE_ERROR", "overloaded")] } else { &[] };
        config(&ws, &[("claude", "claude", &[]), ("codex", "codex", env)], serde_json::json!({"auto_rounds": 1}));
    };
    failing(true);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread(&c, &ws).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent =
        c.council_send(t.clone(), "Go.".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    until_end(&mut sub, sent.message.seq).await;
    let before = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let failed = before.iter().find(|m| m.kind == MessageKind::Error).unwrap().clone();
    assert_eq!(failed.from, "codex");

    failing(false);
    let runs = c.council_retry(t.clone(), None, None, None).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!((runs[0].member.as_str(), runs[0].replaces, runs[0].round), ("codex", Some(failed.seq), Some(1)));
    collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { member, .. } if member == "codex"))
    })
    .await;
    let after = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    assert_eq!(after.len(), before.len() + 1, "appended, seq stays dense");
    let retried = after.last().unwrap();
    assert_eq!((retried.replaces, retried.round, retried.kind), (Some(failed.seq), Some(1), MessageKind::Agent));
    // Shown in the failure's place, and no round added.
    let shown: Vec<u64> = display_order(&after).iter().map(|m| m.seq).collect();
    let pos = display_order(&before).iter().position(|m| m.seq == failed.seq).unwrap();
    assert_eq!(shown[pos], retried.seq);
    assert_eq!(shown.len(), before.len());
    assert!(c.council_retry(t, None, None, None).await.unwrap().is_empty(), "nothing left to retry");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_king_message_stops_the_pending_turns_and_starts_a_new_exchange() {
    let ws = Workspace::new(&[]);
    let hold = kd_tests::Hold::new();
    let held = [("FAKE_HOLD", hold.var())];
    config(&ws, &[("claude", "claude", &held), ("codex", "gemini", &[])], serde_json::json!({"auto_rounds": 3}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread(&c, &ws).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let first = send(&c, &t, "First topic.", None).await;
    // codex has answered the first round; claude holds its answer.
    let mut before = collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::RunFinished { member, .. } if member == "codex"))
            && e.iter().any(|e| matches!(e, ThreadEvent::Delta { member, .. } if member == "claude"))
    })
    .await;
    let second = c
        .council_send(t.clone(), "New topic.".into(), None, None, None, None, None, Some(1), None, None)
        .await
        .unwrap();
    // claude's answer in flight is to the first topic: the new one gets a
    // run of its own, queued behind it; codex starts at once.
    assert_eq!(
        second.runs.iter().map(|r| (r.run.member.as_str(), r.run.status, r.attached)).collect::<Vec<_>>(),
        [("claude", kd_proto::types::RunStatus::Queued, false), ("codex", kd_proto::types::RunStatus::Waiting, false)]
    );
    hold.release();
    let (events, state) = until_end(&mut sub, first.message.seq).await;
    assert_eq!(state, RoundState::Stopped, "the first exchange stops");
    let (more, state) = within("second exchange", until_end(&mut sub, second.message.seq)).await;
    assert_eq!(state, RoundState::Done);
    before.extend(events);
    before.extend(more);
    // Each run once (a queued run is announced again when it starts),
    // sorted by round then member: round 1 starts in parallel.
    let runs_of = |king: u64| -> Vec<(String, u32)> {
        let mut seen = std::collections::HashSet::new();
        let mut runs: Vec<(String, u32)> = before
            .iter()
            .filter_map(|e| match e {
                ThreadEvent::RunWaiting { run } if run.exchange == Some(king) && seen.insert(run.id.clone()) => {
                    Some((run.member.clone(), run.round.unwrap_or(0)))
                }
                _ => None,
            })
            .collect();
        runs.sort_by(|a, b| (a.1, &a.0).cmp(&(b.1, &b.0)));
        runs
    };
    assert_eq!(
        runs_of(first.message.seq),
        [("claude".to_string(), 1), ("codex".into(), 1)],
        "no turn of the first exchange starts after the new message"
    );
    assert_eq!(
        runs_of(second.message.seq),
        [("claude".to_string(), 1), ("codex".into(), 1), ("claude".into(), 2), ("codex".into(), 2)]
    );
    let messages = c.thread_messages(t, None, None, None, None).await.unwrap();
    assert!(messages.iter().all(|m| m.kind != MessageKind::Interrupted), "the turn in flight finished");
    let claude: Vec<Option<u64>> = messages.iter().filter(|m| m.from == "claude").map(|m| m.reply_to).collect();
    assert_eq!(claude[..2], [Some(first.message.seq), Some(second.message.seq)], "each topic answered by claude");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_send_is_framed_by_the_chat_preamble_and_the_agents_chat_prompt() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let mut agent = kd_tests::fake("claude", "claude", &[("FAKE_RECORD", &record)]);
    agent["prompts"] = serde_json::json!({"council": "Council voice.", "chat": "Chat voice."});
    ws.write_config(&serde_json::json!({"council": {"members": ["claude"], "preamble": "Council preamble.", "coordination_hint": false}, "agents": {"claude": agent}}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread(&c, &ws).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    for style in [kd_proto::types::Style::Chat, kd_proto::types::Style::Council] {
        let sent = c
            .council_send(t.clone(), "Hi.".into(), None, None, Some(style), None, None, Some(0), None, None)
            .await
            .unwrap();
        until_end(&mut sub, sent.message.seq).await;
    }
    let recs = records(&record);
    let chat = recs[0]["stdin"].as_str().unwrap();
    let council = recs[1]["stdin"].as_str().unwrap();
    assert!(chat.starts_with("You are in a group chat with the King"), "{chat}");
    assert!(chat.contains("\n\nChat voice.\n\n[Previous conversation]\nking: Hi."), "{chat}");
    assert!(council.starts_with("Council preamble.\n\nCouncil voice.\n\n[Previous conversation]\n"), "{council}");
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_falls_back_to_the_council_prompt_and_takes_a_configured_chat_preamble() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let mut agent = kd_tests::fake("codex", "codex", &[("FAKE_RECORD", &record)]);
    agent["prompts"] = serde_json::json!({"council": "Only a council voice."});
    ws.write_config(&serde_json::json!({
        "council": {"members": ["codex"], "chat_preamble": "Chat like a pirate.", "coordination_hint": false},
        "agents": {"codex": agent}
    }));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread(&c, &ws).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = c
        .council_send(
            t.clone(),
            "Hi.".into(),
            None,
            None,
            Some(kd_proto::types::Style::Chat),
            None,
            None,
            Some(0),
            None,
            None,
        )
        .await
        .unwrap();
    until_end(&mut sub, sent.message.seq).await;
    let prompt = prompt_of(&records(&record)[0]);
    assert!(
        prompt.starts_with("Chat like a pirate.\n\nOnly a council voice.\n\n[Previous conversation]\nking: Hi."),
        "{prompt}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_council_of_one_does_not_argue_with_itself() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let rec: &[(&str, &str)] = &[("FAKE_RECORD", &record)];
    config(&ws, &[("claude", "claude", rec), ("codex", "gemini", rec)], serde_json::json!({"auto_rounds": 3}));
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread(&c, &ws).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    // Everyone is addressed, but only claude is left to answer.
    let sent = send(&c, &t, "Alone?", Some(vec!["codex".into()])).await;
    assert_eq!(sent.rounds, 1, "no auto-rounds for a single member");
    let (_, state) = until_end(&mut sub, sent.message.seq).await;
    assert_eq!(state, RoundState::Done);
    assert_eq!(records(&record).len(), 1, "claude ran once");
    // A council of one member: the same.
    let one = Workspace::new(&[("claude", "claude", rec)]);
    let mut k = kdd.kd();
    k.current_dir(one.dir.path()).args(["ask", "Just you?"]);
    let out = kd_tests::run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert_eq!(records(&record).len(), 2, "one more run, not four");
    assert!(!out.stdout.contains("round 2"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn interrupt_cancels_only_the_calling_clients_runs_unless_all() {
    let ws = Workspace::new(&[]);
    let hold = kd_tests::Hold::new();
    let held = [("FAKE_HOLD", hold.var())];
    config(&ws, &[("claude", "claude", &held), ("codex", "gemini", &held)], serde_json::json!({}));
    let kdd = Kdd::start_with(&["--kill-grace-ms", "300"]);
    let (a, b) = (kdd.client().await, kdd.client().await);
    let t = thread(&a, &ws).await;
    let mut sub = a.thread_subscribe(t.clone(), None, None).await.unwrap();
    let to = |m: &str| Some(vec![m.to_string()]);
    let mine =
        a.council_send(t.clone(), "Yours, claude.".into(), to("claude"), None, None, None, None, None, None, None);
    let mine = mine.await.unwrap();
    let theirs =
        b.council_send(t.clone(), "Yours, codex.".into(), to("codex"), None, None, None, None, None, None, None);
    let theirs = theirs.await.unwrap();
    collect_until(&mut sub, |e| {
        ["claude", "codex"]
            .iter()
            .all(|m| e.iter().any(|e| matches!(e, ThreadEvent::Delta { member, .. } if member == m)))
    })
    .await;
    // A's interrupt cancels A's run only.
    let i = a.council_interrupt(t.clone(), None).await.unwrap();
    assert_eq!(i.runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [mine.runs[0].run.id.as_str()]);
    collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::RunCancelled { member, .. } if member == "claude"))
    })
    .await;
    let running: Vec<String> = a.run_list(Some(t.clone())).await.unwrap().into_iter().map(|r| r.id).collect();
    assert_eq!(running, [theirs.runs[0].run.id.clone()], "B's run goes on");
    // With all, every run on the thread.
    let i = a.council_interrupt(t.clone(), Some(true)).await.unwrap();
    assert_eq!(i.runs.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), [theirs.runs[0].run.id.as_str()]);
    collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::RunCancelled { member, .. } if member == "codex"))
    })
    .await;
    assert!(a.run_list(Some(t)).await.unwrap().is_empty());
}
