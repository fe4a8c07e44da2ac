//! `council.ask`: `kd ask`'s question in one call — asked in the
//! workspace's current thread (or a new trunk made with it), subscribed to
//! from before the question, refused whole.

use kd_client::ClientError;
use kd_client::prelude::*;
use kd_proto::types::{Lineage, MessageKind, NewThread, RoundState, ThreadEvent};
use kd_proto::{ErrorCode, PROTOCOL_VERSION};
use kd_tests::{Kdd, Workspace, collect_until, within};

type Sub = jsonrpsee::core::client::Subscription<ThreadEvent>;

/// What `kd ask` asks with: the workspace's trunk, when it has none.
fn trunk(ws: &Workspace) -> NewThread {
    NewThread {
        workspace: ws.path(),
        branch: None,
        title: None,
        context: None,
        set_current: true,
        lineage: Some(Lineage::Trunk),
    }
}

async fn ask(c: &kd_client::Client, ws: &Workspace, id: &str, body: &str) -> Result<Sub, ClientError> {
    c.council_ask(PROTOCOL_VERSION, id.into(), trunk(ws), body.into(), None, None, None, Some(0), None)
        .await
        .map_err(ClientError::from)
}

/// The first item, which must be `asked`: its thread and the seq after
/// which the thread's events follow.
async fn asked(sub: &mut Sub) -> (String, u64, u64) {
    match within("the first item", sub.next()).await {
        Some(Ok(ThreadEvent::Asked { thread, since, sent })) => (thread, since, sent.message.seq),
        other => panic!("not asked first: {other:?}"),
    }
}

/// Events until exchange `king` is over.
async fn to_the_end(sub: &mut Sub, king: u64) -> Vec<ThreadEvent> {
    collect_until(sub, |e| {
        e.iter().any(
            |e| matches!(e, ThreadEvent::Round { exchange, state, .. } if *exchange == king && *state != RoundState::Running),
        )
    })
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn asks_the_current_thread_and_tells_its_exchange_from_the_question_on() {
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    kd_tests::append(&c, &t, "king", "before", &[]).await;
    assert_eq!(c.thread_current(ws.path(), None).await.unwrap().map(|t| t.id), Some(t.clone()));

    let mut sub = ask(&c, &ws, "unused01", "Q?").await.unwrap();
    let (thread, since, king) = asked(&mut sub).await;
    assert_eq!((thread.as_str(), since, king), (t.as_str(), 1, 2), "asked in the current thread after seq 1");
    let events = to_the_end(&mut sub, king).await;
    let messages: Vec<(u64, &str, &str)> = events
        .iter()
        .filter_map(|e| match e {
            ThreadEvent::Message { message } => Some((message.seq, message.from.as_str(), message.body.as_str())),
            _ => None,
        })
        .collect();
    assert_eq!(messages, [(2, "king", "Q?"), (3, "claude", "Answer from claude.")], "{events:?}");
    assert!(events.iter().any(|e| matches!(e, ThreadEvent::RunFinished { member, seq: 3, .. } if member == "claude")));
    assert!(!events.iter().any(|e| matches!(e, ThreadEvent::Asked { .. })), "asked once, first");
    assert!(c.thread_get("unused01".into()).await.is_err(), "no thread of the unused id");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workspace_without_a_thread_gets_its_trunk_with_the_question() {
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    assert!(c.thread_current(ws.path(), None).await.unwrap().is_none());

    let mut sub = ask(&c, &ws, "newtrunk", "First?").await.unwrap();
    let (thread, since, king) = asked(&mut sub).await;
    assert_eq!((thread.as_str(), since), ("newtrunk", 0));
    let events = to_the_end(&mut sub, king).await;
    assert!(events.iter().any(|e| matches!(e, ThreadEvent::Message { message } if message.kind == MessageKind::King && message.body == "First?")), "{events:?}");
    assert!(
        events.iter().any(|e| matches!(e, ThreadEvent::Message { message } if message.from == "claude")),
        "{events:?}"
    );
    let current = c.thread_current(ws.path(), None).await.unwrap().expect("a current thread");
    assert_eq!((current.id.as_str(), current.lineage), ("newtrunk", Lineage::Trunk));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refused_question_asks_nothing_and_makes_no_thread() {
    let ws = Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start();
    let c = kdd.client().await;
    // A client of another protocol, an empty question, a member not in the
    // council: refused before anything is written.
    let other = c
        .council_ask(PROTOCOL_VERSION + 1, "refused1".into(), trunk(&ws), "Q?".into(), None, None, None, None, None)
        .await
        .map_err(ClientError::from)
        .unwrap_err();
    assert_eq!(other.code(), Some(ErrorCode::InvalidArgument), "{other}");
    assert!(other.to_string().contains("protocol"), "{other}");
    let empty = ask(&c, &ws, "refused2", "  ").await.unwrap_err();
    assert_eq!(empty.code(), Some(ErrorCode::InvalidArgument), "{empty}");
    let stranger = c
        .council_ask(
            PROTOCOL_VERSION,
            "refused3".into(),
            trunk(&ws),
            "Q?".into(),
            Some(vec!["gpt".into()]),
            None,
            None,
            None,
            None,
        )
        .await
        .map_err(ClientError::from)
        .unwrap_err();
    assert!(stranger.code().is_some(), "{stranger}");
    assert!(c.thread_current(ws.path(), None).await.unwrap().is_none(), "no thread was made");
    assert!(c.run_list(None).await.unwrap().is_empty(), "nothing was asked");
}
