//! How `View` shows an exchange and a watched thread.

use super::*;
use crate::testkit::{self, run_info};
use kd_proto::types::{Message, MessageKind, SentRun};

fn sent(members: &[&str]) -> Sent {
    Sent {
        message: message(1, "king", "q", None),
        members: members.iter().map(|m| m.to_string()).collect(),
        rounds: 1,
        mode: kd_proto::types::Mode::Broadcast,
        notice: None,
        runs: members.iter().map(|m| SentRun { run: run_info(&format!("r-{m}"), m), attached: false }).collect(),
    }
}

fn message(seq: u64, from: &str, body: &str, run: Option<&str>) -> Message {
    let kind = if from == "king" { MessageKind::King } else { MessageKind::Agent };
    testkit::message(seq, from, kind, body, run)
}

fn delta(member: &str, text: &str) -> ThreadEvent {
    ThreadEvent::Delta { run: format!("r-{member}"), member: member.into(), text: text.into(), chars: 0 }
}

fn finished(member: &str, seq: u64, body: &str) -> Vec<ThreadEvent> {
    vec![
        ThreadEvent::Message { message: Box::new(message(seq, member, body, Some(&format!("r-{member}")))) },
        ThreadEvent::RunFinished { run: format!("r-{member}"), member: member.into(), seq },
    ]
}

fn over() -> ThreadEvent {
    ThreadEvent::Round { exchange: 1, round: 1, rounds: 1, state: kd_proto::types::RoundState::Done, expected: vec![] }
}

fn play(view: &mut View, events: Vec<ThreadEvent>) -> String {
    let mut out = Vec::new();
    for e in events {
        view.on_event(&e, &mut out).unwrap();
    }
    String::from_utf8(out).unwrap()
}

/// A member cancelled while another's answer is on the screen: what it had
/// said (kept as its message) is shown when its turn comes, before
/// `(cancelled)` — as for a member cut by kdd stopping.
#[test]
fn a_cancelled_answer_waiting_its_turn_shows_what_it_had_said() {
    let mut v = View::new(&sent(&["claude", "codex"]), false, false);
    let mut events = vec![delta("claude", "Hel"), delta("codex", "codex streams a long an")];
    events.push(cut("codex", 2, "codex streams a long an"));
    events.push(cancelled("codex", 2, false));
    events.extend(finished("claude", 3, "Hello."));
    let out = play(&mut v, events);
    assert!(out.contains("Hello.\n"), "{out}");
    assert!(out.ends_with("codex streams a long an\n(cancelled)\n"), "{out}");
    assert_eq!(v.failures(), vec!["codex: cancelled"]);
}

#[test]
fn answers_never_interleave_and_waiting_ones_follow_whole() {
    let mut v = View::new(&sent(&["claude", "codex"]), false, false);
    let mut events = vec![delta("claude", "Hel"), delta("codex", "I think"), delta("claude", "lo.")];
    events.extend(finished("codex", 2, "I think so."));
    events.push(delta("claude", "\nMore."));
    events.extend(finished("claude", 3, "Hello.\nMore."));
    let out = play(&mut v, events);
    assert!(!v.all_done(), "not before the exchange ends");
    play(&mut v, vec![over()]);
    let rule = |m: &str| format!("── {m} {}", "─".repeat(40 - 4 - m.len()));
    assert_eq!(out, format!("{}\nHello.\nMore.\n\n{}\nI think so.\n", rule("claude"), rule("codex")));
    assert!(v.all_done());
    assert!(v.failures().is_empty());
}

#[test]
fn later_rounds_join_the_view_with_their_round_in_the_header() {
    let mut s = sent(&["claude"]);
    s.rounds = 2;
    let mut v = View::new(&s, false, false);
    let mut second = s.runs[0].run.clone();
    second.id = "r-claude-2".into();
    second.round = Some(2);
    let mut events = vec![delta("claude", "one")];
    events.extend(finished("claude", 2, "one"));
    events.push(ThreadEvent::RunWaiting { run: second.clone() });
    events.push(ThreadEvent::Delta { run: second.id.clone(), member: "claude".into(), text: "two".into(), chars: 3 });
    events.push(ThreadEvent::Message { message: Box::new(message(3, "claude", "two", Some("r-claude-2"))) });
    events.push(ThreadEvent::RunFinished { run: second.id.clone(), member: "claude".into(), seq: 3 });
    events.push(ThreadEvent::Round {
        exchange: 1,
        round: 2,
        rounds: 2,
        state: kd_proto::types::RoundState::Done,
        expected: vec![],
    });
    let out = play(&mut v, events);
    assert!(out.contains("── claude · round 1 ─"), "{out}");
    assert!(out.contains("── claude · round 2 ─"), "{out}");
    assert!(out.ends_with("two\n"), "{out}");
    assert!(v.all_done());
}

#[test]
fn failures_are_shown_and_listed() {
    let mut v = View::new(&sent(&["claude", "codex"]), false, false);
    let out = play(
        &mut v,
        vec![
            ThreadEvent::RunError {
                run: "r-codex".into(),
                member: "codex".into(),
                error: "codex: timed out after 1 s".into(),
                timed_out: true,
                seq: 2,
            },
            delta("claude", "ok"),
            cancelled("claude", 3, false),
        ],
    );
    assert!(out.contains("── codex"), "{out}");
    assert!(out.contains("✗ codex: timed out after 1 s"), "{out}");
    assert!(out.contains("ok\n(cancelled)"), "{out}");
    assert_eq!(v.failures(), vec!["claude: cancelled", "codex: timed out after 1 s"], "in member order");
}

#[test]
fn a_live_answer_ends_with_the_stored_answer_when_they_differ() {
    let mut v = View::new(&sent(&["cursor", "codex"]), false, false);
    let mut events = vec![delta("cursor", "cursor: Hello"), delta("cursor", " Hello there.")];
    events.extend(finished("cursor", 2, "Hello there."));
    events.push(delta("codex", "Same."));
    events.extend(finished("codex", 3, "Same."));
    events.push(over());
    let out = play(&mut v, events);
    let rule = |m: &str| format!("── {m} {}", "─".repeat(40 - 4 - m.len()));
    let kept = format!("── cursor · as kd keeps it {}", "─".repeat(40 - 27));
    assert_eq!(
        out,
        format!("{}\ncursor: Hello Hello there.\n{kept}\nHello there.\n\n{}\nSame.\n", rule("cursor"), rule("codex"))
    );
}

#[test]
fn kds_word_on_the_exchange_waits_for_the_live_answer_and_is_marked() {
    let mut v = View::new(&sent(&["claude", "codex"]), false, false);
    let mut note = testkit::message(4, "kd", MessageKind::System, "Budget reached.", None);
    note.reply_to = Some(2);
    let mut elsewhere = testkit::message(5, "kd", MessageKind::System, "Not about this exchange.", None);
    elsewhere.reply_to = Some(99);
    let mut events = vec![delta("claude", "Yes")];
    events.extend(finished("codex", 2, "No."));
    events.push(ThreadEvent::Message { message: Box::new(note) });
    events.push(ThreadEvent::Message { message: Box::new(elsewhere) });
    events.push(delta("claude", "."));
    events.extend(finished("claude", 3, "Yes."));
    let out = play(&mut v, events);
    assert!(out.ends_with("No.\nkd: Budget reached.\n"), "after the answers, not inside one: {out}");
    assert!(!out.contains("Not about this exchange"), "{out}");
}

#[test]
fn json_mode_carries_the_stored_answer_before_the_end_of_its_run() {
    let mut v = View::new(&sent(&["cursor"]), false, true);
    let mut events = vec![delta("cursor", "cursor: Hi")];
    events.extend(finished("cursor", 2, "Hi."));
    let out = play(&mut v, events);
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines[1]["type"], "message");
    assert_eq!(lines[1]["message"]["body"], "Hi.");
    assert_eq!(lines[2]["type"], "run_finished");
}

#[test]
fn on_a_terminal_labels_are_coloured_per_member() {
    let mut v = View::new(&sent(&["claude"]), true, false);
    let out = play(&mut v, vec![delta("claude", "hi")]);
    assert!(out.starts_with("\x1b[1m\x1b[38;5;166m── claude "), "{out:?}");
    assert!(out.ends_with("\x1b[0m\x1b[0m\nhi"), "{out:?}");
}

#[test]
fn json_mode_prints_this_sends_events_as_lines() {
    let mut v = View::new(&sent(&["claude"]), false, true);
    let mut events = vec![delta("claude", "x"), delta("other", "not ours")];
    events.extend(finished("claude", 2, "x"));
    events.push(over());
    let out = play(&mut v, events);
    let lines: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0]["type"], "delta");
    assert_eq!(lines[2]["type"], "run_finished");
    assert_eq!(lines[3]["type"], "round");
    assert!(v.all_done());
}

#[test]
fn watching_shows_the_kings_messages_and_every_exchanges_runs_in_turn() {
    let mut v = View::watching(false, Palette::default());
    let mut r1 = run_info("r-claude", "claude");
    r1.exchange = Some(7);
    let mut events = vec![
        ThreadEvent::Message { message: Box::new(message(7, "king", "Who is there?", None)) },
        ThreadEvent::RunWaiting { run: r1 },
        delta("claude", "Me."),
    ];
    events.extend(finished("claude", 8, "Me."));
    events.push(ThreadEvent::Message { message: Box::new(message(9, "king", "Anyone else?", None)) });
    let out = play(&mut v, events);
    let rule = |m: &str| format!("── {m} {}", "─".repeat(40 - 4 - m.len()));
    assert_eq!(
        out,
        format!("{}\nWho is there?\n\n{}\nMe.\n\n{}\nAnyone else?\n", rule("king"), rule("claude"), rule("king"))
    );
    assert!(!v.all_done(), "watching goes on");
    assert!(v.runs.is_empty(), "what is on the screen is forgotten");
}

fn cut(member: &str, seq: u64, partial: &str) -> ThreadEvent {
    let run = format!("r-{member}");
    ThreadEvent::Message {
        message: Box::new(testkit::message(seq, member, MessageKind::Interrupted, partial, Some(&run))),
    }
}

/// The run asking `member` again in place of message `replaces`.
fn asked_again(member: &str, replaces: u64) -> (ThreadEvent, String) {
    let mut run = run_info(&format!("r-{member}-again"), member);
    run.replaces = Some(replaces);
    let id = run.id.clone();
    (ThreadEvent::RunWaiting { run }, id)
}

#[test]
fn after_a_reconnect_a_runs_message_alone_ends_it() {
    // The backlog after a restart carries messages, no run events.
    let mut v = View::new(&sent(&["claude", "codex", "cursor"]), false, false);
    let mut error = testkit::message(3, "codex", MessageKind::Error, "exit status 1\nmore", Some("r-codex"));
    error.reply_to = Some(1);
    let out = play(
        &mut v,
        vec![
            delta("claude", "Hi"),
            ThreadEvent::Message { message: Box::new(message(2, "claude", "Hi.", Some("r-claude"))) },
            ThreadEvent::Message { message: Box::new(error) },
            cut("cursor", 4, "Half"),
            over(),
        ],
    );
    assert!(v.all_done(), "every run ended by its message: {out}");
    v.finish(&mut Vec::new()).unwrap();
    assert_eq!(v.failures(), vec!["codex: exit status 1", "cursor: interrupted (kdd stopped)"]);
    assert!(out.contains("Hi\n── claude · as kd keeps it"), "{out}");
    assert!(out.contains("── cursor ─") && out.contains("Half\n(interrupted)"), "{out}");
}

#[test]
fn a_failure_read_from_its_message_names_the_member_once() {
    // kdd's error message names the member; its end event may come after
    // the message, or (after a reconnect) not at all.
    let error = "claude: API Error: 400 prompt is too long";
    for with_end in [false, true] {
        let mut v = View::new(&sent(&["claude"]), false, false);
        let mut events = vec![ThreadEvent::Message {
            message: Box::new(testkit::message(2, "claude", MessageKind::Error, error, Some("r-claude"))),
        }];
        if with_end {
            events.push(ThreadEvent::RunError {
                run: "r-claude".into(),
                member: "claude".into(),
                error: error.into(),
                timed_out: false,
                seq: 2,
            });
        }
        events.push(over());
        let out = play(&mut v, events);
        v.finish(&mut Vec::new()).unwrap();
        assert!(!out.contains("claude: claude:"), "{out}");
        assert_eq!(v.failures(), vec![error], "{out}");
    }
}

#[test]
fn a_runs_end_event_after_its_message_says_how_it_ended() {
    // Ctrl+C: the interrupted message, then the run's cancellation.
    let mut v = View::new(&sent(&["claude"]), false, false);
    let out = play(&mut v, vec![delta("claude", "ok"), cut("claude", 2, "ok"), cancelled("claude", 2, false), over()]);
    assert!(out.ends_with("ok\n(cancelled)\n"), "{out}");
    assert_eq!(v.failures(), vec!["claude: cancelled"]);
}

#[test]
fn an_interrupted_run_asked_again_is_no_failure_and_its_partial_stays() {
    let mut v = View::new(&sent(&["claude"]), false, false);
    let (again, id) = asked_again("claude", 2);
    let mut answer = message(3, "claude", "Hello there.", Some(&id));
    answer.replaces = Some(2);
    let out = play(
        &mut v,
        vec![
            delta("claude", "Hel"),
            // kdd was killed; the backlog after the reconnect:
            cut("claude", 2, "Hel"),
            again,
            ThreadEvent::Delta { run: id.clone(), member: "claude".into(), text: "Hello there.".into(), chars: 12 },
            ThreadEvent::Message { message: Box::new(answer) },
            ThreadEvent::RunFinished { run: id, member: "claude".into(), seq: 3 },
            over(),
        ],
    );
    let rule = |l: &str| format!("{l}{}", "─".repeat(40usize.saturating_sub(l.chars().count()).max(2)));
    assert_eq!(
        out,
        format!(
            "{}\nHel\n(interrupted)\n{}\n\n{}\nHello there.\n",
            rule("── claude "),
            rule("── claude · interrupted (kdd restarted); asked again "),
            rule("── claude ")
        )
    );
    assert!(v.all_done());
    assert!(v.failures().is_empty(), "{:?}", v.failures());
}

#[test]
fn a_cut_run_not_yet_shown_gives_way_to_the_one_asked_again() {
    let mut v = View::new(&sent(&["claude", "codex"]), false, false);
    let (again, id) = asked_again("codex", 3);
    let out = play(
        &mut v,
        vec![
            delta("claude", "Yes"),
            cut("codex", 3, "Mm"),
            again,
            ThreadEvent::Delta { run: id.clone(), member: "codex".into(), text: "No.".into(), chars: 3 },
            ThreadEvent::Message { message: Box::new(message(4, "codex", "No.", Some(&id))) },
            ThreadEvent::Message { message: Box::new(message(2, "claude", "Yes", Some("r-claude"))) },
            over(),
        ],
    );
    v.finish(&mut Vec::new()).unwrap();
    assert!(!out.contains("Mm") && !out.contains("interrupted"), "nothing of it was shown: {out}");
    assert!(out.contains("── codex ─") && out.ends_with("No.\n"), "{out}");
    assert!(v.all_done() && v.failures().is_empty(), "{:?}", v.failures());
}

#[test]
fn a_snapshot_delta_shows_only_what_is_new() {
    let mut v = View::new(&sent(&["claude"]), false, false);
    let d = |text: &str, chars: u64| ThreadEvent::Delta {
        run: "r-claude".into(),
        member: "claude".into(),
        text: text.into(),
        chars,
    };
    let out = play(
        &mut v,
        vec![
            d("Hel", 3),
            // Resubscribed: the run's snapshot, whole, then live deltas.
            d("Hello", 5),
            d("Hello", 5),
            d("lo", 5),
            d(" wörld", 11),
        ],
    );
    assert!(out.ends_with("\nHello wörld"), "{out:?}");
}

#[test]
fn watching_says_when_a_shown_cut_answer_is_asked_again() {
    let mut v = View::watching(false, Palette::default());
    let (again, id) = asked_again("claude", 8);
    let mut first = run_info("r-claude", "claude");
    first.exchange = Some(7);
    let out = play(
        &mut v,
        vec![
            ThreadEvent::RunWaiting { run: first },
            delta("claude", "Par"),
            cut("claude", 8, "Par"),
            again,
            ThreadEvent::Delta { run: id, member: "claude".into(), text: "Whole.".into(), chars: 6 },
        ],
    );
    assert!(out.contains("Par\n(interrupted)\n── claude · interrupted (kdd restarted); asked again"), "{out}");
    assert!(out.ends_with(&format!("── claude {}\nWhole.", "─".repeat(30))), "{out}");
}

#[test]
fn a_run_cut_by_kdd_stopping_is_interrupted_not_cancelled() {
    // A graceful stop (kd daemon restart, an upgrade) ends the runs in
    // flight live, before the subscription ends.
    let mut v = View::new(&sent(&["claude"]), false, false);
    let out = play(&mut v, vec![delta("claude", "Hal"), cut("claude", 2, "Hal"), cancelled("claude", 2, true)]);
    assert!(out.ends_with("Hal\n(interrupted)\n"), "{out}");
    assert_eq!(v.failures(), vec!["claude: interrupted (kdd stopped)"]);
}

#[test]
fn a_run_a_members_emergency_stopped_says_so_not_cancelled() {
    let mut v = View::new(&sent(&["claude"]), false, false);
    let why = "stopped by a member's emergency broadcast";
    let stopped = ThreadEvent::RunCancelled {
        run: "r-claude".into(),
        member: "claude".into(),
        seq: 2,
        interrupted: false,
        reason: Some(why.into()),
    };
    let out = play(&mut v, vec![delta("claude", "Hal"), cut("claude", 2, "Hal"), stopped]);
    assert!(out.ends_with(&format!("Hal\n({why})\n")), "{out}");
    assert_eq!(v.failures(), vec![format!("claude: {why}")]);
}

#[test]
fn after_a_reconnect_answers_of_runs_never_seen_are_shown_and_the_end_waits_for_them() {
    // kdd was away while codex's cut answer was asked again and cursor's
    // next turn ran: the backlog brings their messages alone.
    let mut v = View::new(&sent(&["claude", "codex"]), false, false);
    let mut out = play(&mut v, vec![delta("codex", "Half")]);
    let answer = |seq: u64, from: &str, body: &str, run: &str, replaces: Option<u64>| {
        let mut m = message(seq, from, body, Some(run));
        (m.reply_to, m.round, m.replaces) = (Some(1), Some(2), replaces);
        ThreadEvent::Message { message: Box::new(m) }
    };
    // Before a reconnect, a message of a run never seen is not this view's.
    let mut before = View::new(&sent(&["claude", "codex"]), false, false);
    let not_ours = play(&mut before, vec![answer(9, "cursor", "Not ours.", "r-other", None)]);
    assert!(!not_ours.contains("Not ours."), "{not_ours}");
    v.reconnected();
    v.exchange_ends_at(5);
    out += &play(
        &mut v,
        vec![
            cut("codex", 3, "Half"),
            ThreadEvent::Message { message: Box::new(message(2, "claude", "Claude's.", Some("r-claude"))) },
        ],
    );
    assert!(!v.all_done(), "the backlog up to 5 is still to come");
    out += &play(
        &mut v,
        vec![
            answer(4, "codex", "Codex again.", "r-codex-2", Some(3)),
            answer(5, "claude", "Claude's second.", "r-claude-2", None),
        ],
    );
    v.finish(&mut Vec::new()).unwrap();
    assert!(v.all_done(), "{out}");
    assert!(v.failures().is_empty(), "the cut answer was asked again: {:?}", v.failures());
    for said in ["Codex again.", "Claude's second.", "interrupted (kdd restarted); asked again"] {
        assert_eq!(out.matches(said).count(), 1, "{said:?} once: {out}");
    }
}

#[test]
fn a_backlog_that_ends_with_a_cut_answer_not_yet_shown_still_ends_the_view() {
    // Resuming off: kdd came back, recorded every run interrupted and
    // stopped the exchange; the backlog is the three cut answers, and no
    // event follows them (found trying it: kd ask hung).
    let mut v = View::new(&sent(&["claude", "codex", "cursor"]), false, false);
    let mut out = play(&mut v, vec![delta("cursor", "Half")]);
    v.reconnected();
    v.exchange_ends_at(0);
    out += &play(&mut v, vec![cut("cursor", 2, "Half"), cut("claude", 3, ""), cut("codex", 4, "")]);
    assert!(v.all_done(), "nothing more will come: {out}");
    let mut end = Vec::new();
    v.finish(&mut end).unwrap();
    let out = out + &String::from_utf8(end).unwrap();
    for m in ["claude", "codex", "cursor"] {
        assert_eq!(out.matches(&format!("── {m}")).count(), 1, "{out}");
    }
    assert_eq!(v.failures().len(), 3, "{:?}", v.failures());
}

#[test]
fn cut_answers_that_had_all_streamed_end_the_view_whichever_was_live() {
    // CI found kd ask hanging: every member had streamed, claude was live;
    // after the restart closing claude's answer made cursor live before its
    // own cut message came, and codex's, which came first, was never shown.
    let mut v = View::new(&sent(&["claude", "codex", "cursor"]), false, false);
    let mut out = play(&mut v, vec![delta("claude", "Answer"), delta("codex", "Answer"), delta("cursor", "Answer")]);
    v.reconnected();
    v.exchange_ends_at(4);
    out += &play(&mut v, vec![cut("claude", 2, "Answer"), cut("codex", 3, "Answer"), cut("cursor", 4, "Answer")]);
    assert!(v.all_done(), "nothing more will come: {out}");
    let mut end = Vec::new();
    v.finish(&mut end).unwrap();
    let out = out + &String::from_utf8(end).unwrap();
    for m in ["claude", "codex", "cursor"] {
        assert_eq!(out.matches(&format!("── {m}")).count(), 1, "{out}");
    }
    assert_eq!(out.matches("(interrupted)").count(), 3, "{out}");
}

#[test]
fn runs_never_recorded_before_the_kill_end_the_view_once_the_exchange_is_over() {
    // Found on PostgreSQL: kdd was killed before two of the three runs had
    // their rows; with resuming off their steps were cancelled and no
    // message of theirs ever comes, so kd ask waited for them forever.
    let mut v = View::new(&sent(&["claude", "codex", "cursor"]), false, false);
    let mut out = play(&mut v, vec![delta("claude", "Half")]);
    v.reconnected();
    v.exchange_ends_at(2);
    out += &play(&mut v, vec![cut("claude", 2, "Half")]);
    assert!(v.all_done(), "nothing more will come: {out}");
    let mut end = Vec::new();
    v.finish(&mut end).unwrap();
    let out = out + &String::from_utf8(end).unwrap();
    assert_eq!(out.matches("── claude").count(), 1, "{out}");
    assert_eq!(
        v.failures(),
        vec![
            "claude: interrupted (kdd stopped)",
            "codex: interrupted (kdd stopped)",
            "cursor: interrupted (kdd stopped)"
        ]
    );
}

#[test]
fn an_answer_given_up_after_its_cuts_is_reported_by_kds_word_on_it() {
    // kd gave codex up after council.resume_attempts cuts: its error
    // message, which no run wrote, replaces the cut answer.
    let mut v = View::new(&sent(&["codex"]), false, false);
    let mut out = play(&mut v, vec![delta("codex", "Half")]);
    v.reconnected();
    v.exchange_ends_at(3);
    let mut given_up =
        testkit::message(3, "codex", MessageKind::Error, "codex was cut 2 times …; `kd retry` asks it", None);
    (given_up.reply_to, given_up.replaces) = (Some(1), Some(2));
    out += &play(&mut v, vec![cut("codex", 2, "Half"), ThreadEvent::Message { message: Box::new(given_up) }]);
    let mut end = Vec::new();
    v.finish(&mut end).unwrap();
    assert!(v.all_done(), "{out}");
    assert_eq!(v.failures(), vec!["codex: codex was cut 2 times …; `kd retry` asks it"]);
}

#[test]
fn a_run_asked_again_on_another_node_before_the_cut_one_is_heard_of_still_replaces_it() {
    // Node a stopped gracefully mid-answer; node b, watched here, asked
    // claude again at once: its run's start arrives before a's interrupted
    // message, relayed from a.
    let mut v = View::new(&sent(&["claude"]), false, false);
    let (again, id) = asked_again("claude", 2);
    let mut answer = message(3, "claude", "Hello there.", Some(&id));
    answer.replaces = Some(2);
    play(
        &mut v,
        vec![
            delta("claude", "Hel"),
            again,
            cut("claude", 2, "Hel"),
            cancelled("claude", 2, true),
            ThreadEvent::Delta { run: id.clone(), member: "claude".into(), text: "Hello there.".into(), chars: 12 },
            ThreadEvent::Message { message: Box::new(answer) },
            ThreadEvent::RunFinished { run: id, member: "claude".into(), seq: 3 },
            over(),
        ],
    );
    assert!(v.all_done());
    assert!(v.failures().is_empty(), "{:?}", v.failures());
}

/// A subscription that began as a run ended may bring the run's message
/// (from the registry) before the deltas it streamed (live): the answer is
/// shown once, whole.
#[test]
fn deltas_that_come_after_their_runs_message_are_not_shown_again() {
    let mut v = View::new(&sent(&["claude"]), false, false);
    let mut events = vec![ThreadEvent::Message { message: Box::new(message(2, "claude", "Hello.", Some("r-claude"))) }];
    events.extend([delta("claude", "Hel"), delta("claude", "lo.")]);
    events.push(ThreadEvent::RunFinished { run: "r-claude".into(), member: "claude".into(), seq: 2 });
    events.push(over());
    let mut out = play(&mut v, events).into_bytes();
    v.finish(&mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    let rule = format!("── claude {}", "─".repeat(40 - 4 - 6));
    assert_eq!(out, format!("{rule}\nHello.\n"), "once");
    assert!(v.all_done());
}

/// kdd sends no run's events after its message, which a subscription that
/// falls behind (or, watching, begins as the run ends) has from the
/// registry: the message alone shows the answer.
#[test]
fn after_lagged_or_watching_an_answer_of_a_run_never_seen_is_shown_from_its_message() {
    let answer = |seq: u64, from: &str, body: &str, run: &str| {
        let mut m = message(seq, from, body, Some(run));
        (m.reply_to, m.round) = (Some(1), Some(2));
        ThreadEvent::Message { message: Box::new(m) }
    };
    let mut asking = View::new(&sent(&["claude"]), false, false);
    let out = play(
        &mut asking,
        vec![
            delta("claude", "Mine."),
            ThreadEvent::Lagged { missed: 40 },
            answer(2, "claude", "Mine.", "r-claude"),
            answer(3, "codex", "Codex's turn.", "r-codex-2"),
        ],
    );
    assert_eq!(out.matches("Codex's turn.").count(), 1, "{out}");
    assert_eq!(out.matches("Mine.").count(), 1, "{out}");
    let mut watching = View::watching(false, Palette::default());
    let out = play(&mut watching, vec![answer(5, "gemini", "Seen whole.", "r-gemini")]);
    assert_eq!(out.matches("Seen whole.").count(), 1, "{out}");
}

/// `member`'s run `r-<member>` cancelled (by a client), or cut by kdd
/// stopping when `interrupted`.
fn cancelled(member: &str, seq: u64, interrupted: bool) -> ThreadEvent {
    ThreadEvent::RunCancelled { run: format!("r-{member}"), member: member.into(), seq, interrupted, reason: None }
}
