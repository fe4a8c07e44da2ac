//! What a subscriber gets when it falls behind (SPEC §10): a subscriber
//! that stopped reading while more than the hub holds was said is told it
//! lagged, then given the backlog from the last message it had — every
//! message once, in seq order, no gap and no duplicate.

use kd_tests::{Kdd, workspace};

/// The seq of a `thread.event` notification carrying a message, or
/// whether it says the subscriber lagged.
enum Seen {
    Message(u64),
    Lagged,
    Other,
}

fn seen(frame: &str) -> Seen {
    let v: serde_json::Value = serde_json::from_str(frame).expect("a JSON frame");
    let event = &v["params"]["result"];
    match event["type"].as_str() {
        Some("message") => Seen::Message(event["message"]["seq"].as_u64().expect("a seq")),
        Some("lagged") => Seen::Lagged,
        _ => Seen::Other,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lagged_subscriber_recovers_every_message_once_in_order() {
    // Long enough a client timeout that only lagging can happen here.
    let kdd = Kdd::start_with(&["--client-timeout-ms", "120000"]);
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &workspace("lagged")).await;
    let subscribe = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"thread.subscribe","params":{{"thread":"{t}"}}}}"#);
    let mut ws = kd_tests::stalled_websocket(&kdd.socket, &[&subscribe]);
    let answer: serde_json::Value = serde_json::from_str(&kd_tests::ws_read_text(&mut ws)).unwrap();
    assert!(!answer["result"].is_null(), "subscribed: {answer}");
    // Not read meanwhile: far more than the hub keeps for a subscriber
    // (8,192 events) and the socket's buffers hold.
    let n = 12_000;
    kd_tests::fill(&kdd, &t, n, 8, |i| format!("message {i} {}", "x".repeat(100))).await;
    let reading = tokio::task::spawn_blocking(move || {
        let (mut seqs, mut lagged) = (Vec::new(), false);
        while seqs.last() != Some(&n) {
            match seen(&kd_tests::ws_read_text(&mut ws)) {
                Seen::Message(seq) => seqs.push(seq),
                Seen::Lagged => lagged = true,
                Seen::Other => {}
            }
        }
        (seqs, lagged)
    });
    let (seqs, lagged) = kd_tests::within("every message", reading).await.unwrap();
    assert!(lagged, "the subscriber was told it lagged");
    let expected: Vec<u64> = (1..=n).collect();
    assert!(seqs == expected, "a gap or a duplicate: {} messages, first wrong at {:?}", seqs.len(), {
        seqs.iter().zip(&expected).position(|(a, b)| a != b)
    });
}
