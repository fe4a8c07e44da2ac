//! `thread.subscribe`: backlog, then live messages, in order and without gaps.

use kd_client::ClientError;
use kd_client::prelude::*;
use kd_proto::ErrorCode;
use kd_proto::types::ThreadEvent;
use kd_tests::{Kdd, within, workspace};

async fn thread_with(c: &kd_client::Client, n: usize) -> String {
    let t = kd_tests::new_thread(c, &workspace("sub")).await;
    for i in 0..n {
        kd_tests::append(c, &t, "king", format!("m{i}"), &[]).await;
    }
    t
}

#[tokio::test(flavor = "multi_thread")]
async fn backlog_since_a_seq_then_live_messages_from_other_clients_in_order() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_with(&c, 10).await;
    let mut sub = c.thread_subscribe(t.clone(), Some(5), None).await.unwrap();

    // Four other clients append concurrently while we read.
    let mut writers = Vec::new();
    for w in 0..4 {
        let other = kdd.client().await;
        let t = t.clone();
        writers.push(tokio::spawn(async move {
            for i in 0..50 {
                kd_tests::append(&other, &t, "codex", format!("w{w}-{i}"), &[]).await;
            }
        }));
    }
    let mut seqs = Vec::new();
    within("all messages on the subscription", async {
        while seqs.last() != Some(&210) {
            match sub.next().await.expect("subscription open").unwrap() {
                ThreadEvent::Message { message } => seqs.push(message.seq),
                other => panic!("unexpected {other:?}"),
            }
        }
    })
    .await;
    for w in writers {
        w.await.unwrap();
    }
    assert_eq!(seqs, (6..=210).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread")]
async fn without_since_seq_only_new_messages_arrive_and_zero_means_everything() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_with(&c, 3).await;
    let mut live = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let mut all = c.thread_subscribe(t.clone(), Some(0), None).await.unwrap();
    kd_tests::append(&c, &t, "claude", "new", &[]).await;
    let first_live = within("live", live.next()).await.unwrap().unwrap();
    assert!(matches!(first_live, ThreadEvent::Message { ref message } if message.seq == 4 && message.body == "new"));
    let mut seqs = Vec::new();
    while seqs.len() < 4 {
        if let ThreadEvent::Message { message } = within("all", all.next()).await.unwrap().unwrap() {
            seqs.push(message.seq);
        }
    }
    assert_eq!(seqs, vec![1, 2, 3, 4]);
    assert_eq!(c.daemon_status().await.unwrap().subscriptions, 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn subscribing_to_a_missing_or_invalid_thread_is_an_error() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let e = ClientError::from(c.thread_subscribe("nope".into(), Some(0), None).await.unwrap_err());
    assert_eq!(e.code(), Some(ErrorCode::NotFound), "{e}");
    let e = ClientError::from(c.thread_subscribe("../x".into(), None, None).await.unwrap_err());
    assert_eq!(e.code(), Some(ErrorCode::InvalidArgument), "{e}");
    // The connection is still usable.
    assert_eq!(c.daemon_status().await.unwrap().subscriptions, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn many_subscribers_on_one_thread_all_get_every_message() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = thread_with(&c, 0).await;
    let mut subs = Vec::new();
    for _ in 0..10 {
        let client = kdd.client().await;
        let sub = client.thread_subscribe(t.clone(), None, None).await.unwrap();
        subs.push((client, sub));
    }
    for i in 0..100 {
        kd_tests::append(&c, &t, "king", format!("{i}"), &[]).await;
    }
    for (_client, mut sub) in subs {
        let mut seqs = Vec::new();
        while seqs.len() < 100 {
            if let ThreadEvent::Message { message } = within("fan-out", sub.next()).await.unwrap().unwrap() {
                seqs.push(message.seq);
            }
        }
        assert_eq!(seqs, (1..=100).collect::<Vec<u64>>());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn subscriptions_over_the_per_connection_bound_get_an_error() {
    let kdd = Kdd::start_with(&["--max-subscriptions", "2"]);
    let c = kdd.client().await;
    let t = thread_with(&c, 1).await;
    let _a = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let _b = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let err = c.thread_subscribe(t.clone(), None, None).await.unwrap_err();
    assert!(err.to_string().to_lowercase().contains("subscription"), "{err}");
    // The connection and the two subscriptions keep working; another connection has its own bound.
    assert_eq!(c.daemon_status().await.unwrap().subscriptions, 2);
    let other = kdd.client().await;
    let _c = other.thread_subscribe(t, None, None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_subscription_begun_after_an_exchange_ended_is_told_how_it_ended() {
    // `kd ask` subscribes beside its question: kdd may take the question
    // first, and the exchange may be over before the subscription is.
    let ws = kd_tests::Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.dir.path().display().to_string()).await;
    let mut live = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = c.council_send(t.clone(), "Q?".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    let king = sent.message.seq;
    let ended = |e: &ThreadEvent| matches!(e, ThreadEvent::Round { exchange, state, .. } if *exchange == king && *state != kd_proto::types::RoundState::Running);
    within("the exchange's end, live", async { while !ended(&live.next().await.expect("open").unwrap()) {} }).await;
    let mut late = c.thread_subscribe(t.clone(), Some(king - 1), None).await.unwrap();
    let mut told = Vec::new();
    within("the backlog, then how the exchange ended", async {
        loop {
            let e = late.next().await.expect("open").unwrap();
            if ended(&e) {
                break;
            }
            told.push(e);
        }
    })
    .await;
    let seqs: Vec<u64> = told
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Message { message } => Some(message.seq),
            _ => None,
        })
        .collect();
    assert_eq!(seqs, [king, king + 1], "the question and the answer first: {told:?}");
    // A subscriber from a later point is not told of it — but while its
    // end is being recorded (told before it is written), once: the
    // exchange is still the thread's current one then.
    let mut after = c.thread_subscribe(t.clone(), Some(king + 1), None).await.unwrap();
    c.council_send(t.clone(), "Next?".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    let mut first = within("the next question", after.next()).await.expect("open").unwrap();
    if ended(&first) {
        first = within("the next question", after.next()).await.expect("open").unwrap();
    }
    assert!(matches!(first, ThreadEvent::Message { ref message } if message.seq == king + 2), "{first:?}");
}

/// A thread of 4,000 messages — more than the subscription's and the
/// socket's buffers hold — with one member, and a subscriber from its
/// start that reads nothing yet: kdd is held sending it the backlog.
struct Slow {
    _ws: kd_tests::Workspace,
    kdd: Kdd,
    c: kd_client::Client,
    t: String,
    slow: std::os::unix::net::UnixStream,
}

impl Slow {
    async fn subscribed(claude_env: &[(&str, &str)]) -> Slow {
        let ws = kd_tests::Workspace::new(&[("claude", "claude", claude_env)]);
        let kdd = Kdd::start_with(&["--client-timeout-ms", "120000"]);
        let c = kdd.client().await;
        let t = kd_tests::new_thread(&c, &ws.dir.path().display().to_string()).await;
        kd_tests::fill(&kdd, &t, 4_000, 4, |i| format!("message {i} {}", "x".repeat(300))).await;
        let subscribe = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"thread.subscribe","params":{{"thread":"{t}","since_seq":0}}}}"#
        );
        let mut slow = kd_tests::stalled_websocket(&kdd.socket, &[&subscribe]);
        let answer: serde_json::Value = serde_json::from_str(&kd_tests::ws_read_text(&mut slow)).unwrap();
        assert!(!answer["result"].is_null(), "subscribed: {answer}");
        Slow { _ws: ws, kdd, c, t, slow }
    }
}

/// Waits on `live` for exchange `x` to end.
async fn ended(live: &mut jsonrpsee::core::client::Subscription<ThreadEvent>, x: u64) {
    let over = |e: &ThreadEvent| matches!(e, ThreadEvent::Round { exchange, state, .. } if *exchange == x && *state != kd_proto::types::RoundState::Running);
    within("the exchange's end, live", async { while !over(&live.next().await.expect("open").unwrap()) {} }).await
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exchange_begun_and_ended_while_the_backlog_is_sent_is_told_in_order_ending_over() {
    // A subscriber reading a long backlog slowly: the question asked
    // meanwhile begins and ends before kdd has sent the backlog. It must
    // hear the exchange's rounds in the order they happened, the last
    // saying it is over (a `kd ask` waited forever when it heard `done`
    // first, then `running`: 1 ask in a few hundred to an instant member).
    let Slow { _ws, kdd: _kdd, c, t, mut slow } = Slow::subscribed(&[]).await;
    let mut live = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = c.council_send(t.clone(), "Q?".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    let king = sent.message.seq;
    let over =
        |x: u64| move |e: &serde_json::Value| e["type"] == "round" && e["exchange"] == x && e["state"] != "running";
    ended(&mut live, king).await;
    // A second question, begun and ended as well: the last said of it on
    // the slow subscription ends the reading.
    let next =
        c.council_send(t.clone(), "Next?".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    let last = next.message.seq;
    ended(&mut live, last).await;
    let rounds = tokio::task::spawn_blocking(move || {
        let mut rounds = Vec::new();
        loop {
            let frame: serde_json::Value = serde_json::from_str(&kd_tests::ws_read_text(&mut slow)).unwrap();
            let e = &frame["params"]["result"];
            if over(last)(e) {
                return rounds;
            }
            if e["type"] == "round" && e["exchange"] == king {
                rounds.push(e["state"].as_str().unwrap_or_default().to_string());
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(rounds.first().map(String::as_str), Some("running"), "{rounds:?}");
    assert_eq!(rounds.last().map(String::as_str), Some("done"), "{rounds:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runs_events_are_not_told_after_its_message_came_in_the_backlog() {
    // A subscriber reading a long backlog slowly while a member answers:
    // the answer comes in the backlog, the run's events published
    // meanwhile wait in the receiver (sent after the answer, the web page
    // showed the run writing again, with no end).
    let Slow { _ws, kdd: _kdd, c, t, mut slow } = Slow::subscribed(&[("FAKE_DELTAS", "20")]).await;
    let mut live = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    let sent = c.council_send(t.clone(), "Q?".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    let king = sent.message.seq;
    ended(&mut live, king).await;
    let events = tokio::task::spawn_blocking(move || {
        let mut events = Vec::new();
        loop {
            let frame: serde_json::Value = serde_json::from_str(&kd_tests::ws_read_text(&mut slow)).unwrap();
            let e = frame["params"]["result"].clone();
            let end = e["type"] == "round" && e["exchange"] == king && e["state"] != "running";
            events.push(e);
            if end {
                return events;
            }
        }
    })
    .await
    .unwrap();
    let answered =
        events.iter().position(|e| e["type"] == "message" && e["message"]["seq"] == king + 1).unwrap_or_else(|| {
            panic!("the answer, in the backlog: {:?}", events.iter().map(|e| &e["type"]).collect::<Vec<_>>())
        });
    let run = events[answered]["message"]["run"]["run_id"].as_str().expect("the answer's run").to_string();
    // Its end is told (`run_finished`); nothing that says it is under way.
    let in_flight = ["run_waiting", "run_started", "delta", "activity"];
    let of_run = |e: &serde_json::Value| e["run"] == run.as_str() || e["run"]["id"] == run.as_str();
    let after: Vec<&serde_json::Value> =
        events[answered..].iter().filter(|e| of_run(e) && in_flight.iter().any(|t| e["type"] == *t)).collect();
    assert!(after.is_empty(), "the run's events after its message: {after:?}");
    assert!(
        events[answered..].iter().any(|e| e["type"] == "run_finished" && e["run"] == run.as_str()),
        "its end is told: {events:?}"
    );
}
