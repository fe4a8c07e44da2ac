//! The coordination layer end to end (issue 10): hand-offs bounded by the
//! hop limit, cc, delivery modes and inbox overflow, `kd send`/`kd inbox`
//! from inside an agent's run, multicast completions (first, vote,
//! synthesis), emergency broadcasts with acknowledgements, race checks —
//! with a real kdd and fake agents.

use kd_client::prelude::*;
use kd_proto::types::*;
use kd_tests::{Fake, Kdd, Workspace, bin, collect_until, prompt_of, records, run, within};

fn config(ws: &Workspace, members: &[Fake<'_>], council: serde_json::Value) {
    ws.configure(members, council);
}

/// `FAKE_RULES` of a member that answers a ballot and a synthesis prompt so.
fn ballot_rules(ballot: &str, synthesis: &str) -> String {
    serde_json::json!([["[Evaluation]", ballot], ["[Synthesis]", synthesis]]).to_string()
}

/// claude, codex and cursor answering "Use a queue.", "Use a lock." and
/// "Use a channel.", each with its ballot (and synthesis) rules.
fn three_voters(ws: &Workspace, rules: [&str; 3]) {
    config(
        ws,
        &[
            ("claude", &[("FAKE_TEXT", "Use a queue."), ("FAKE_RULES", rules[0])], none()),
            ("codex", &[("FAKE_TEXT", "Use a lock."), ("FAKE_RULES", rules[1])], none()),
            ("cursor", &[("FAKE_TEXT", "Use a channel."), ("FAKE_RULES", rules[2])], none()),
        ],
        none(),
    );
}

fn none() -> serde_json::Value {
    serde_json::json!({})
}

async fn kinds(c: &kd_client::Client, thread: &str) -> Vec<String> {
    let events = c.events_list(Some(thread.into()), None, None, None, Some(1000), None).await.unwrap();
    events.into_iter().map(|e| e.kind).collect()
}

async fn until_exchange_ends(sub: &mut jsonrpsee::core::client::Subscription<ThreadEvent>, king: u64) {
    collect_until(sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::Round { exchange, state, .. } if *exchange == king && *state != RoundState::Running))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hand_off_chain_stops_at_the_hop_limit() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let r = record.as_str();
    config(
        &ws,
        &[
            ("claude", &[("FAKE_RECORD", r), ("FAKE_TEXT", "Parser done.\n@codex please review it.")], none()),
            ("codex", &[("FAKE_RECORD", r), ("FAKE_TEXT", "Looks right.\n@cursor your turn.")], none()),
            ("cursor", &[("FAKE_RECORD", r), ("FAKE_TEXT", "@claude back to you.")], none()),
        ],
        serde_json::json!({"max_hops": 2, "coordination_hint": false}),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = c
        .council_send(t.clone(), "@claude write the parser".into(), None, None, None, None, None, None, None, None)
        .await
        .unwrap();
    until_exchange_ends(&mut sub, sent.message.seq).await;
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let answers: Vec<(&str, Vec<String>, Option<RouteType>)> = messages
        .iter()
        .filter(|m| m.kind == MessageKind::Agent)
        .map(|m| (m.from.as_str(), m.to.clone(), m.route))
        .collect();
    let p2p = Some(RouteType::PointToPoint);
    assert_eq!(
        answers,
        [
            ("claude", vec!["codex".to_string()], p2p),
            ("codex", vec!["cursor".to_string()], p2p),
            ("cursor", vec!["claude".to_string()], p2p),
        ],
        "two hops, then the limit: claude is not asked again"
    );
    assert_eq!(records(&record).len(), 3);
    // codex was given claude's hand-off as the message it answers.
    let codex = records(&record).into_iter().map(|r| prompt_of(&r)).find(|p| p.contains("You are codex")).unwrap();
    assert!(codex.contains("claude (to codex): Parser done."), "{codex}");
    let k = kinds(&c, &t).await;
    assert_eq!(k.iter().filter(|k| *k == "routing.point_to_point").count(), 2, "{k:?}");
    assert_eq!(k.iter().filter(|k| *k == "delivery.immediate").count(), 2, "{k:?}");
    assert_eq!(k.iter().filter(|k| *k == "routing.hop_limit").count(), 1, "{k:?}");
    assert!(k.contains(&"delivery.prompt".to_string()), "{k:?}");
    // The King is told, in the thread and by kd ask.
    let notice = messages.iter().find(|m| m.kind == MessageKind::System).expect("a notice from kd");
    assert_eq!(
        notice.body,
        "cursor's hand-off to claude was not delivered: this exchange reached council.max_hops (2)."
    );
    let mut k = kdd.kd();
    k.current_dir(ws.path()).args(["ask", "--thread", &t, "@claude write the parser"]);
    let out = kd_tests::run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains(&format!("\nkd: {}\n", notice.body)), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copied_member_is_not_run_and_sees_the_message_once_in_its_next_prompt() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let r = record.as_str();
    config(&ws, &[("codex", &[("FAKE_RECORD", r)], none()), ("cursor", &[("FAKE_RECORD", r)], none())], none());
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let routed = c
        .message_route(
            t.clone(),
            "king".into(),
            "Rename the crate to kd-core.".into(),
            // Named twice, and copied too: codex is still run once.
            Some(vec!["codex".into(), "codex".into()]),
            Some(vec!["cursor".into(), "codex".into(), "cursor".into()]),
            None,
            None,
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!((routed.message.to.clone(), routed.message.cc.clone()), (vec!["codex".into()], vec!["cursor".into()]));
    assert_eq!(routed.route_type, RouteType::PointToPoint);
    let status: Vec<(&str, DeliveryStatus)> = routed.deliveries.iter().map(|d| (d.member.as_str(), d.status)).collect();
    assert_eq!(status, [("codex", DeliveryStatus::Started), ("cursor", DeliveryStatus::Copied)]);
    assert_eq!(routed.participants, ["king", "codex", "cursor"]);
    collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    assert_eq!(records(&record).len(), 1, "only codex ran");
    let inbox = c.queue_read("cursor".into(), Some(t.clone()), None, None, None, None).await.unwrap();
    assert_eq!((inbox.len(), inbox[0].role, inbox[0].body.as_str()), (1, Role::Cc, "Rename the crate to kd-core."));
    // cursor's next turn carries it, once, and its inbox is then empty.
    let sent = c
        .council_send(t.clone(), "@cursor anything to add?".into(), None, None, None, None, None, None, None, None)
        .await
        .unwrap();
    until_exchange_ends(&mut sub, sent.message.seq).await;
    let cursor = records(&record).into_iter().map(|r| prompt_of(&r)).find(|p| p.contains("You are cursor")).unwrap();
    assert_eq!(cursor.matches("Rename the crate to kd-core.").count(), 1, "{cursor}");
    assert!(cursor.contains("`kd send --to NAME"), "the preamble says how to reach members: {cursor}");
    assert!(c.queue_read("cursor".into(), Some(t.clone()), None, None, None, None).await.unwrap().is_empty());
    let done =
        c.queue_read("cursor".into(), Some(t.clone()), None, Some(InboxStatus::Processed), None, None).await.unwrap();
    assert_eq!(done.len(), 1);
    let k = kinds(&c, &t).await;
    assert!(k.contains(&"delivery.copied".to_string()) && k.contains(&"queue.read".to_string()), "{k:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn queued_members_keep_messages_and_full_inboxes_drop_or_refuse() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let r = record.as_str();
    let queued =
        |overflow: &str| serde_json::json!({"delivery": {"mode": "queued", "queue_limit": 2, "overflow": overflow}});
    config(
        &ws,
        &[
            ("claude", &[("FAKE_RECORD", r)], none()),
            ("codex", &[("FAKE_RECORD", r)], queued("drop_oldest")),
            ("cursor", &[("FAKE_RECORD", r)], queued("reject_new")),
        ],
        none(),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut last = None;
    for i in 1..=3 {
        let to = Some(vec!["codex".to_string(), "cursor".to_string()]);
        last = Some(
            c.message_route(t.clone(), "claude".into(), format!("note {i}"), to, None, None, None, None, None)
                .await
                .unwrap(),
        );
    }
    let last = last.unwrap();
    assert_eq!(last.route_type, RouteType::Multicast);
    let codex = &last.deliveries[0];
    assert_eq!((codex.status, codex.queue_size, codex.dropped.is_some()), (DeliveryStatus::Queued, Some(2), true));
    let cursor = &last.deliveries[1];
    assert_eq!(cursor.status, DeliveryStatus::Rejected);
    assert!(cursor.reason.as_deref().is_some_and(|r| r.contains("reject_new")), "{cursor:?}");
    let bodies = |items: Vec<InboxItem>| items.into_iter().map(|i| i.body).collect::<Vec<_>>();
    let read = |m: &str| c.queue_read(m.into(), Some(t.clone()), None, None, None, None);
    assert_eq!(bodies(read("codex").await.unwrap()), ["note 2", "note 3"], "the oldest was dropped");
    assert_eq!(bodies(read("cursor").await.unwrap()), ["note 1", "note 2"], "the newest was refused");
    assert!(records(&record).is_empty(), "queued members are not run");
    // Marking read, then processing, empties the pending view.
    let items = c.queue_read("codex".into(), Some(t.clone()), None, None, Some(1), Some(true)).await.unwrap();
    assert_eq!(items[0].status, InboxStatus::Read);
    let p = c.queue_process("codex".into(), vec![items[0].id], None).await.unwrap();
    assert_eq!(p.updated, 1);
    assert_eq!(bodies(read("codex").await.unwrap()), ["note 3"]);
    // An immediate member is run at once; queue.subscribe turns that off per type.
    let prefs = c
        .queue_subscribe(t.clone(), "claude".into(), vec![RouteType::PointToPoint], DeliveryMode::Queued)
        .await
        .unwrap();
    assert_eq!(prefs.queued_types, [RouteType::PointToPoint]);
    let routed = c
        .message_route(
            t.clone(),
            "codex".into(),
            "later".into(),
            Some(vec!["claude".into()]),
            None,
            None,
            None,
            None,
            None,
        )
        .await
        .unwrap();
    assert_eq!(routed.deliveries[0].status, DeliveryStatus::Queued);
    let k = kinds(&c, &t).await;
    for kind in
        ["routing.multicast", "delivery.queued", "queue.dropped", "queue.rejected", "delivery.rejected", "queue.read"]
    {
        assert!(k.contains(&kind.to_string()), "{kind} missing: {k:?}");
    }
    // A member's own queue decisions concern no one thread.
    for kind in ["queue.process", "queue.subscribe"] {
        let e = c.events_list(None, None, Some(kind.into()), None, None, None).await.unwrap();
        assert_eq!(e.len(), 1, "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_send_and_kd_inbox_inside_a_run_act_as_that_member() {
    let ws = Workspace::new(&[]);
    let kd = bin("kd").display().to_string();
    let send = format!("{kd} send --to codex 'ping from the shell' && {kd} inbox");
    config(
        &ws,
        &[
            ("claude", &[("FAKE_RUN", &send), ("FAKE_TEXT", "Ran: {run}")], none()),
            ("codex", &[], serde_json::json!({"delivery": {"mode": "queued"}})),
        ],
        none(),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = c
        .council_send(t.clone(), "@claude tell codex".into(), None, None, None, None, None, None, None, None)
        .await
        .unwrap();
    until_exchange_ends(&mut sub, sent.message.seq).await;
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let ping = messages.iter().find(|m| m.body == "ping from the shell").expect("the shell's message is in the thread");
    assert_eq!(
        (ping.from.as_str(), ping.to.clone(), ping.route),
        ("claude", vec!["codex".to_string()], Some(RouteType::PointToPoint))
    );
    let answer = messages.iter().find(|m| m.from == "claude" && m.body.starts_with("Ran:")).unwrap();
    assert!(answer.body.contains("queued in its inbox (1 pending)"), "{}", answer.body);
    assert!(answer.body.contains("claude's inbox is empty"), "kd inbox ran as claude: {}", answer.body);
    let inbox = c.queue_read("codex".into(), Some(t.clone()), None, None, None, None).await.unwrap();
    assert_eq!((inbox.len(), inbox[0].from.as_str()), (1, "claude"));
    // And from outside, as the King would: kd inbox --as codex.
    let mut k = kdd.kd();
    k.args(["inbox", "--as", "codex", "--thread", &t]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("from claude") && out.stdout.contains("ping from the shell"), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn first_takes_one_answer_and_cancels_the_others() {
    let ws = Workspace::new(&[]);
    config(&ws, &[("claude", &[("FAKE_TEXT", "Fast.")], none()), ("codex", &[("FAKE_HANG", "1")], none())], none());
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let done = within(
        "the completion",
        c.completion_agents(t.clone(), "Quick?".into(), None, Some(Wait::First), None, None, None, None, None, None),
    )
    .await
    .unwrap();
    let parts: Vec<(&str, PartStatus)> = done.parts.iter().map(|p| (p.member.as_str(), p.status)).collect();
    assert_eq!(parts, [("claude", PartStatus::Done), ("codex", PartStatus::Cancelled)]);
    assert_eq!((done.summary.completed, done.summary.cancelled), (1, 1));
    let k = kinds(&c, &t).await;
    assert!(k.contains(&"completion.cancelled".to_string()) && k.contains(&"completion.done".to_string()), "{k:?}");
    // The thread lists the council it asked, as after council.send (a
    // thread made for a completion had none: `kd threads` showed no members).
    assert_eq!(c.thread_get(t).await.unwrap().members, ["claude", "codex"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vote_tallies_anonymised_rankings_and_a_chair_synthesizes() {
    let ws = Workspace::new(&[]);
    let record = ws.file("record.jsonl");
    let r = record.as_str();
    let rules = |ranking: &str| ballot_rules(&format!("Fine.\nFINAL RANKING:\n{ranking}"), "Final: use a lock.");
    // Each votes by content; the labels are drawn afresh for each vote.
    let (a, b, c3) = (
        rules("1. {label:Use a lock.}\n2. {label:Use a channel.}"),
        rules("1. {label:Use a queue.}\n2. {label:Use a channel.}"),
        rules("1. {label:Use a lock.}\n2. {label:Use a queue.}"),
    );
    config(
        &ws,
        &[
            ("claude", &[("FAKE_RECORD", r), ("FAKE_TEXT", "Use a queue."), ("FAKE_RULES", &a)], none()),
            ("codex", &[("FAKE_RECORD", r), ("FAKE_TEXT", "Use a lock."), ("FAKE_RULES", &b)], none()),
            ("cursor", &[("FAKE_RECORD", r), ("FAKE_TEXT", "Use a channel."), ("FAKE_RULES", &c3)], none()),
        ],
        none(),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let done = within(
        "the vote",
        c.completion_agents(
            t.clone(),
            "How do we share the cache?".into(),
            None,
            None,
            None,
            Some(Aggregation::Synthesize),
            Some(true),
            Some("cursor".into()),
            None,
            None,
        ),
    )
    .await
    .unwrap();
    let tally = done.tally.clone().unwrap();
    let mut members: Vec<&str> = tally.labels.iter().map(|l| l.member.as_str()).collect();
    members.sort_unstable();
    assert_eq!(members, ["claude", "codex", "cursor"], "one label each");
    let said = |member: &str| match member {
        "claude" => "Use a queue.",
        "codex" => "Use a lock.",
        _ => "Use a channel.",
    };
    let scores: Vec<(&str, u32)> = tally.scores.iter().map(|s| (s.member.as_str(), s.points)).collect();
    assert_eq!(scores, [("codex", 2), ("claude", 1), ("cursor", 0)]);
    assert_eq!(tally.winner.as_deref(), Some("codex"));
    let synthesis = done.synthesis.clone().unwrap();
    assert_eq!((synthesis.member.as_str(), synthesis.text.as_str()), ("cursor", "Final: use a lock."));
    let prompts: Vec<String> = records(&record).iter().map(prompt_of).collect();
    let ballots: Vec<&String> = prompts.iter().filter(|p| p.contains("[Evaluation]")).collect();
    assert_eq!(ballots.len(), 3);
    for p in &ballots {
        for name in ["claude", "codex", "cursor"] {
            assert!(!p.contains(name), "a ballot names {name}: {p}");
        }
        // The tally maps each label back to the member whose answer it headed.
        for l in &tally.labels {
            let shown = format!("{}:\n{}", l.label, said(&l.member));
            assert!(p.contains(&shown) || !p.contains(said(&l.member)), "{} is not {}'s: {p}", l.label, l.member);
        }
    }
    let chair = prompts.iter().find(|p| p.contains("[Synthesis]")).unwrap();
    assert!(chair.contains("codex:\nUse a lock.") && chair.contains("codex (2 points)"), "{chair}");
    // Stored in the thread: answers, ballots, the tally, the synthesis.
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let tally_msg = messages.iter().find(|m| Some(m.seq) == tally.seq).unwrap();
    assert!(tally_msg.body.starts_with("Vote: codex wins."), "{}", tally_msg.body);
    assert_eq!(messages.iter().filter(|m| m.kind == MessageKind::Agent).count(), 3 + 3 + 1);
    let purposes: Vec<(&str, Option<Purpose>)> =
        messages.iter().filter(|m| m.from != "king").map(|m| (m.from.as_str(), m.purpose)).collect();
    assert_eq!(purposes.iter().filter(|p| p.1.is_none()).count(), 3, "three plain answers: {purposes:?}");
    assert_eq!(purposes.iter().filter(|p| p.1 == Some(Purpose::Ballot)).count(), 3, "{purposes:?}");
    assert_eq!(
        purposes.iter().filter(|p| p.1 == Some(Purpose::Tally)).collect::<Vec<_>>(),
        [&("kd", Some(Purpose::Tally))]
    );
    assert_eq!(
        purposes.iter().filter(|p| p.1 == Some(Purpose::Synthesis)).collect::<Vec<_>>(),
        [&("cursor", Some(Purpose::Synthesis))]
    );
    let k = kinds(&c, &t).await;
    for kind in ["completion.start", "completion.result", "completion.vote", "completion.synthesis", "completion.done"]
    {
        assert!(k.contains(&kind.to_string()), "{kind} missing: {k:?}");
    }
    // kd show renders it.
    let mut show = kdd.kd();
    show.args(["show", &t]);
    let out = run(show).await;
    assert!(out.stdout.contains("Vote: codex wins.") && out.stdout.contains("Final: use a lock."), "{}", out.stdout);
    for label in ["kd → king (re #1) [system] [tally]", "[ballot]", "cursor → king (re #8) · round 1 [synthesis]"]
    {
        assert!(out.stdout.contains(label), "{label:?} missing: {}", out.stdout);
    }
    assert!(
        out.stdout.find("[tally]") < out.stdout.find("[synthesis]"),
        "the tally, then the synthesis: {}",
        out.stdout
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn all_waits_up_to_the_timeout_reports_the_late_and_merges_what_came() {
    let ws = Workspace::new(&[]);
    config(
        &ws,
        &[
            ("claude", &[("FAKE_TEXT", "Use a queue.")], none()),
            ("codex", &[("FAKE_HANG", "1")], none()),
            ("cursor", &[("FAKE_TEXT", "Use a channel.")], none()),
        ],
        none(),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let done = within(
        "the completion",
        c.completion_agents(
            t.clone(),
            "How?".into(),
            None,
            Some(Wait::All),
            Some(1),
            Some(Aggregation::Merge),
            None,
            None,
            None,
            None,
        ),
    )
    .await
    .unwrap();
    let parts: Vec<(&str, PartStatus)> = done.parts.iter().map(|p| (p.member.as_str(), p.status)).collect();
    assert_eq!(parts, [("claude", PartStatus::Done), ("codex", PartStatus::Timeout), ("cursor", PartStatus::Done)]);
    let s = &done.summary;
    assert_eq!((s.total, s.completed, s.timeouts, s.errors, s.cancelled), (3, 2, 1, 0, 0));
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let merged = messages.iter().find(|m| Some(m.seq) == done.merged).unwrap();
    assert_eq!(merged.body, "**claude**:\nUse a queue.\n\n**cursor**:\nUse a channel.");
    assert_eq!((merged.from.as_str(), merged.purpose), ("kd", Some(Purpose::Merge)));
    let late = c.events_list(Some(t.clone()), None, Some("completion.timeout".into()), None, None, None).await.unwrap();
    assert_eq!(late.iter().map(|e| e.agent.as_deref()).collect::<Vec<_>>(), [Some("codex")]);
    assert!(kinds(&c, &t).await.contains(&"completion.merge".to_string()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chair_outside_the_asked_members_keeps_its_inbox_for_its_next_turn() {
    let ws = Workspace::new(&[]);
    let rules = serde_json::json!([["[Synthesis]", "Chair: both."]]).to_string();
    config(
        &ws,
        &[
            ("claude", &[], none()),
            ("codex", &[], none()),
            ("cursor", &[("FAKE_RULES", &rules)], serde_json::json!({"delivery": {"mode": "queued"}})),
        ],
        none(),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let to = Some(vec!["cursor".to_string()]);
    c.message_route(t.clone(), "claude".into(), "note for later".into(), to, None, None, None, None, None)
        .await
        .unwrap();
    let asked = Some(vec!["claude".to_string(), "codex".to_string()]);
    let done = within(
        "the synthesis",
        c.completion_agents(
            t.clone(),
            "Which?".into(),
            asked,
            None,
            None,
            Some(Aggregation::Synthesize),
            None,
            Some("cursor".into()),
            None,
            None,
        ),
    )
    .await
    .unwrap();
    assert_eq!(done.synthesis.map(|s| s.text), Some("Chair: both.".to_string()));
    // The synthesis prompt did not carry the note: it still waits.
    let inbox =
        c.queue_read("cursor".into(), Some(t.clone()), None, Some(InboxStatus::Pending), None, None).await.unwrap();
    assert_eq!(inbox.iter().map(|i| i.body.as_str()).collect::<Vec<_>>(), ["note for later"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn each_vote_draws_its_labels_afresh_and_the_tally_maps_them_back() {
    let ws = Workspace::new(&[]);
    let rules = |first: &str, second: &str| {
        ballot_rules(&format!("FINAL RANKING:\n1. {{label:{first}}}\n2. {{label:{second}}}"), "")
    };
    let (a, b, c3) = (
        rules("Use a lock.", "Use a channel."),
        rules("Use a queue.", "Use a channel."),
        rules("Use a lock.", "Use a queue."),
    );
    three_voters(&ws, [&a, &b, &c3]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut codex_labels = std::collections::HashSet::new();
    // Until codex has been given two different labels (1 in 6 votes draws
    // the same order again; 20 votes all alike would be a fixed order).
    for _ in 0..20 {
        let done = within(
            "a vote",
            c.completion_agents(
                t.clone(),
                "Which?".into(),
                None,
                None,
                None,
                Some(Aggregation::Vote),
                Some(true),
                None,
                None,
                None,
            ),
        )
        .await
        .unwrap();
        let tally = done.tally.unwrap();
        let label = tally.labels.iter().find(|l| l.member == "codex").unwrap().label.clone();
        // Whatever the labels, the points go to who wrote the answer.
        let scores: Vec<(&str, u32)> = tally.scores.iter().map(|s| (s.member.as_str(), s.points)).collect();
        assert_eq!(scores, [("codex", 2), ("claude", 1), ("cursor", 0)], "{tally:?}");
        assert_eq!(tally.winner.as_deref(), Some("codex"));
        codex_labels.insert(label);
        if codex_labels.len() > 1 {
            return;
        }
    }
    panic!("20 votes gave codex the same label: {codex_labels:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_ask_vote_streams_the_answers_and_ballots_then_prints_the_tally() {
    let ws = Workspace::new(&[]);
    let rules = |ranking: &str| ballot_rules(&format!("Weighed.\nFINAL RANKING:\n{ranking}"), "Chair says: lock.");
    let (a, b) = (rules("1. {label:Use a lock.}"), rules("1. {label:Use a queue.}"));
    let c3 = rules("1. {label:Use a lock.}\n2. {label:Use a queue.}");
    three_voters(&ws, [&a, &b, &c3]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut ask = kdd.kd();
    ask.current_dir(ws.path()).args(["ask", "--thread", &t, "--vote", "--synthesize", "claude", "Share the cache?"]);
    let out = run(ask).await;
    assert!(out.status.success(), "{}", out.stderr);
    let o = &out.stdout;
    for needle in [
        "── claude ─",
        "Use a queue.",
        "── codex · ballot ─",
        "FINAL RANKING:",
        "── claude · synthesis ─",
        "Chair says: lock.",
        "── vote ──",
        "Vote: codex wins.",
        "3 asked · 3 answered",
    ] {
        assert!(o.contains(needle), "{needle:?} missing from:\n{o}");
    }
    assert_eq!(o.matches("Chair says: lock.").count(), 1, "the synthesis is shown once:\n{o}");
    assert!(o.find("── vote ──") < o.find("── claude · synthesis"), "the tally before the synthesis:\n{o}");
    assert_eq!(o.matches("Use a queue.").count(), 1, "each answer once:\n{o}");
}

/// claude ("Use a queue.") and codex ("Use a lock."), each ranking the
/// other's answer first: a tie on points and on first places.
fn two_each_ranking_the_other(ws: &Workspace) {
    let rules = |ranking: &str| ballot_rules(&format!("Fine.\nFINAL RANKING:\n{ranking}"), "Chair: both work.");
    config(
        ws,
        &[
            ("claude", &[("FAKE_TEXT", "Use a queue."), ("FAKE_RULES", &rules("1. {label:Use a lock.}"))], none()),
            ("codex", &[("FAKE_TEXT", "Use a lock."), ("FAKE_RULES", &rules("1. {label:Use a queue.}"))], none()),
        ],
        none(),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tie_is_a_tie_left_to_the_king_in_the_thread_and_in_kd_ask() {
    let ws = Workspace::new(&[]);
    two_each_ranking_the_other(&ws);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let vote =
        c.completion_agents(t.clone(), "Q?".into(), None, None, None, Some(Aggregation::Vote), None, None, None, None);
    let done = within("the vote", vote).await.unwrap();
    let tally = done.tally.clone().unwrap();
    assert_eq!(tally.winner, None, "nobody wins a tie nothing breaks: {tally:?}");
    let tie = tally.tie.clone().expect("a tie");
    assert_eq!((tie.members.len(), tie.broken_by), (2, TieBreak::King));
    let verdict = "Vote: tie between claude and codex on 0 points and 1 first place each: left to the King.";
    let verdict_swapped = verdict.replace("claude and codex", "codex and claude");
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let stored = messages.iter().find(|m| Some(m.seq) == tally.seq).unwrap();
    assert!(stored.body.starts_with(verdict) || stored.body.starts_with(&verdict_swapped), "{}", stored.body);
    // kd ask --vote says so as it streams; --json carries no winner.
    let mut ask = kdd.kd();
    ask.current_dir(ws.path()).args(["ask", "--thread", &t, "--vote", "Again?"]);
    let out = run(ask).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains(verdict) || out.stdout.contains(&verdict_swapped), "{}", out.stdout);
    assert!(!out.stdout.contains(" wins."), "{}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tie_still_tied_on_first_places_goes_to_the_chairs_ballot() {
    let ws = Workspace::new(&[]);
    two_each_ranking_the_other(&ws);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let vote = c.completion_agents(
        t.clone(),
        "Q?".into(),
        None,
        None,
        None,
        Some(Aggregation::Synthesize),
        Some(true),
        Some("claude".into()),
        None,
        None,
    );
    let done = within("the vote", vote).await.unwrap();
    let tally = done.tally.clone().unwrap();
    // claude chairs and ranked codex's answer first.
    assert_eq!(tally.winner.as_deref(), Some("codex"), "{tally:?}");
    assert_eq!(tally.scores[0].member, "codex", "the winner heads the scores: {tally:?}");
    let tie = tally.tie.clone().expect("a tie");
    assert_eq!((tie.broken_by, tie.chair.as_deref()), (TieBreak::Chair, Some("claude")));
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let stored = messages.iter().find(|m| Some(m.seq) == tally.seq).unwrap();
    let broken =
        "on 0 points and 1 first place each, broken by the chair's ballot (claude ranks codex higher): codex wins.";
    assert!(stored.body.starts_with("Vote: tie between ") && stored.body.contains(broken), "{}", stored.body);
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_broadcast_emergency_stop_stops_the_runs_in_flight_then_asks_each_member() {
    let ws = Workspace::new(&[]);
    let hold = kd_tests::Hold::new();
    config(&ws, &[("claude", &[("FAKE_HOLD", &hold.env())], none()), ("codex", &[], none())], none());
    let kdd = Kdd::start_with(&["--kill-grace-ms", "300"]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = c.council_send(t.clone(), "@claude long task".into(), None, None, None, None, None, None, None, None);
    let long = sent.await.unwrap().runs[0].run.id.clone();
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    let mut k = kdd.kd();
    k.current_dir(ws.path()).args(["broadcast", "--emergency", "--stop", "--thread", &t, "Stop", "pushing."]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains(&format!("runs in flight stopped: {long}")), "{}", out.stdout);
    // The long task is cancelled, not told and left running.
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::RunCancelled { run, .. } if *run == long)))
        .await;
    hold.release();
    // Each member then answers the emergency, which acknowledges it.
    collect_until(&mut sub, |e| {
        e.iter().any(|e| matches!(e, ThreadEvent::Emergency { pending, .. } if pending.is_empty()))
    })
    .await;
    let all = c.emergency_pending(Some(t.clone()), Some(true)).await.unwrap();
    let how: Vec<(&str, Option<&str>)> = all.iter().map(|a| (a.member.as_str(), a.how.as_deref())).collect();
    assert_eq!(how, [("claude", Some("answer")), ("codex", Some("answer"))]);
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let claude: Vec<MessageKind> = messages.iter().filter(|m| m.from == "claude").map(|m| m.kind).collect();
    assert_eq!(claude, [MessageKind::Interrupted, MessageKind::Agent], "stopped, then the emergency answered");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_emergency_reaches_a_busy_member_and_is_tracked_until_every_ack() {
    let ws = Workspace::new(&[]);
    let hold = ws.file("hold");
    std::fs::write(&hold, b"").unwrap();
    config(
        &ws,
        &[
            ("claude", &[("FAKE_HOLD", &hold)], none()),
            ("codex", &[], serde_json::json!({"delivery": {"mode": "queued"}})),
        ],
        none(),
    );
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    c.council_send(t.clone(), "@claude long task".into(), None, None, None, None, None, None, None, None)
        .await
        .unwrap();
    collect_until(&mut sub, |e| e.iter().any(|e| matches!(e, ThreadEvent::Delta { .. }))).await;
    let e = c.emergency_broadcast(t.clone(), "Stop pushing to main.".into(), None, None, None).await.unwrap();
    assert_eq!(e.members, ["claude", "codex"]);
    assert_eq!(e.told_runs.len(), 1, "claude's run in flight is told");
    assert!(e.stopped_runs.is_empty());
    // codex is queued, but an emergency bypasses that: it answers, which acknowledges.
    collect_until(&mut sub, |ev| {
        ev.iter().any(|x| matches!(x, ThreadEvent::Emergency { pending, .. } if pending == &["claude".to_string()]))
    })
    .await;
    let pending = c.emergency_pending(Some(t.clone()), None).await.unwrap();
    assert_eq!(pending.iter().map(|a| a.member.as_str()).collect::<Vec<_>>(), ["claude"]);
    let mut acks = kdd.kd();
    acks.args(["acks", "--thread", &t]);
    assert!(run(acks).await.stdout.contains("pending"));
    // claude acknowledges from its shell; its held run then finishes, and
    // the emergency's own run for it after that.
    // Only a member owes acknowledgements: the King or a stranger is told so.
    for who in ["king", "gpt"] {
        let e = c.emergency_ack(t.clone(), who.into(), None).await.unwrap_err();
        assert!(e.to_string().contains("the members are claude, codex"), "{who}: {e}");
    }
    let mut ack = kdd.kd();
    ack.args(["ack", "--as", "claude", "--thread", &t]);
    let out = run(ack).await;
    assert!(out.stdout.contains(&format!("claude acknowledged {}", e.broadcast)), "{}", out.stdout);
    std::fs::remove_file(&hold).unwrap();
    collect_until(&mut sub, |ev| kd_tests::ended(ev) >= 3).await;
    assert!(c.emergency_pending(Some(t.clone()), None).await.unwrap().is_empty());
    let all = c.emergency_pending(Some(t.clone()), Some(true)).await.unwrap();
    let how: Vec<(&str, Option<&str>)> = all.iter().map(|a| (a.member.as_str(), a.how.as_deref())).collect();
    assert_eq!(how, [("claude", Some("kd ack")), ("codex", Some("answer"))]);
    let mut show = kdd.kd();
    show.args(["show", &t]);
    let out = run(show).await;
    assert!(out.stdout.contains("king → claude, codex [emergency]"), "kd show marks it: {}", out.stdout);
    let k = kinds(&c, &t).await;
    for kind in [
        "system.emergency_broadcast",
        "system.emergency_told",
        "system.emergency_acknowledge",
        "delivery.emergency",
        "routing.emergency",
    ] {
        assert!(k.contains(&kind.to_string()), "{kind} missing: {k:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_writer_is_rejected_with_a_backoff_and_a_reader_warned() {
    let ws = Workspace::new(&[]);
    config(&ws, &[("claude", &[], none()), ("codex", &[], none())], none());
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let first = c.resource_write("src/lib.rs".into(), "claude".into(), Some(t.clone()), Some(60_000)).await.unwrap();
    assert_eq!(first.status, RaceStatus::Ok);
    let mut claim = kdd.kd();
    claim.args(["claim", "src/lib.rs", "--as", "codex", "--thread", &t]);
    let out = run(claim).await;
    assert_eq!(out.status.code(), Some(5), "{}", out.stderr);
    assert!(out.stderr.contains("being written by claude; retry in"), "{}", out.stderr);
    let read = c.resource_read("src/lib.rs".into(), "codex".into(), Some(t.clone())).await.unwrap();
    assert_eq!((read.status, read.writers.clone()), (RaceStatus::Warning, vec!["claude".to_string()]));
    let other = c.resource_write("src/main.rs".into(), "codex".into(), Some(t.clone()), None).await.unwrap();
    assert_eq!(other.status, RaceStatus::Ok);
    let k = kinds(&c, &t).await;
    for kind in ["resource.write", "race.write_write", "race.read_write"] {
        assert!(k.contains(&kind.to_string()), "{kind} missing: {k:?}");
    }
    // A family of kinds at once: `race.*`, over RPC and with kd events.
    let races = c.events_list(Some(t.clone()), None, Some("race.*".into()), None, None, None).await.unwrap();
    let race_kinds: Vec<&str> = races.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(race_kinds, ["race.write_write", "race.read_write"]);
    let mut events = kdd.kd();
    events.args(["events", "--thread", &t, "--kind", "race.*", "--json"]);
    let out = run(events).await;
    assert!(out.status.success(), "{}", out.stderr);
    let listed: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(listed.iter().map(|e| e["kind"].as_str().unwrap()).collect::<Vec<_>>(), race_kinds);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_forked_backend_session_and_a_second_copy_resumed_at_once_are_races() {
    let ws = Workspace::new(&[]);
    config(&ws, &[("claude", &[("FAKE_FORK", "1")], none())], none());
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = c
        .thread_create(ws.path(), None, None, None, None, None, None, None, Some(ContextMode::Resume))
        .await
        .unwrap()
        .id;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    for q in ["One?", "Two?"] {
        c.council_send(t.clone(), q.into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
        collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    }
    // The second run resumed the first one's backend session and reported another.
    let messages = c.thread_messages(t.clone(), None, None, None, None).await.unwrap();
    let ids: Vec<String> =
        messages.iter().filter_map(|m| m.run.as_ref().and_then(|r| r.backend_session_id.clone())).collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
    let forks = c.events_list(Some(t.clone()), None, Some("race.session_fork".into()), None, None, None).await.unwrap();
    assert_eq!(forks.len(), 1, "{forks:?}");
    assert_eq!((&forks[0].data["expected"], &forks[0].data["got"]), (&ids[0].clone().into(), &ids[1].clone().into()));
    assert_eq!(forks[0].agent.as_deref(), Some("claude"));
    // The conversation goes on where the backend now keeps it.
    let sessions = c.session_list(Some(t.clone()), Some("claude".into()), None).await.unwrap();
    assert_eq!(sessions[0].backend_session_id.as_deref(), Some(ids[1].as_str()));

    // Two clients resuming divergent copies of one backend conversation at once:
    // the same session again, or a second session carrying the same backend id.
    let held = c.session_resume(sessions[0].id.clone(), Some("tool A".into()), None).await.unwrap();
    assert_eq!(held.status, SessionStatus::Active);
    let other = kd_tests::new_thread(&c, &ws.path()).await;
    let copy = c.session_start(other.clone(), "claude".into(), Some(ids[1].clone()), Some("tool B".into()), None, None);
    let again = c.session_resume(sessions[0].id.clone(), Some("tool B".into()), None);
    for refused in [copy.await.unwrap_err(), again.await.unwrap_err()] {
        let e = kd_client::ClientError::from(refused);
        assert_eq!(e.code(), Some(kd_proto::ErrorCode::SessionActive), "{e}");
        assert!(e.to_string().contains("tool A"), "{e}");
    }
    let conflicts = c.events_list(None, None, Some("race.resume_conflict".into()), None, None, None).await.unwrap();
    assert_eq!(conflicts.len(), 2, "{conflicts:?}");
    for e in &conflicts {
        assert_eq!((e.data["holder"].as_str(), e.data["requested_by"].as_str()), (Some("tool A"), Some("tool B")));
        assert_eq!(e.data["backend_session_id"].as_str(), Some(ids[1].as_str()));
    }
    // One after the other is no fork: once A lets go, B may carry it on.
    c.session_end(held.id.clone(), Some(SessionStatus::Idle), None).await.unwrap();
    c.session_start(other, "claude".into(), Some(ids[1].clone()), Some("tool B".into()), None, None).await.unwrap();
}
