//! Live across nodes: what one kdd publishes reaches the subscribers of
//! every other kdd on the same database.
//!
//! **NOTIFY wakes, seq is the truth.** Events are never notified inside a
//! write: PostgreSQL serialises the commits of notifying transactions
//! cluster-wide. Instead every event this node publishes goes, after its
//! commit, to the **relay** (a bounded queue and one task), which packs what
//! is queued into as few `pg_notify('kd_events', …)` calls as fit PostgreSQL's
//! 8,000-byte payload, waiting at most [`LINGER`] for more: token deltas of a
//! busy run travel a few per notification. A message travels as a reference
//! (thread and seq) — bodies may be megabytes —, any other event inline.
//!
//! The **listener** holds one connection of its own (`LISTEN kd_events`),
//! skips what this node sent, reads each referenced message once and
//! publishes what came from elsewhere to this node's hub (never relayed
//! again). A notification can be lost (the relay's queue full, the listener
//! reconnecting): subscribers then see a seq further on than the last they
//! sent and read what they missed from the registry (`rpc/subscribe.rs`);
//! after a reconnect the listener hands every watched thread its last
//! message, which makes them look. Deltas lost so are lost (the message
//! that ends the run carries the whole answer).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use kd_proto::types::ThreadEvent;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, Connection};

use super::Pg;
use crate::hub::{Hub, Published};

/// The channel every node notifies and listens on.
pub const CHANNEL: &str = "kd_events";
/// The channel that wakes a node when work is routed to it (its name as
/// the payload, [`super::leases`]).
pub const WORK: &str = "kd_work";
/// The channel that asks a node to stop runs of one of its threads.
pub const CANCEL: &str = "kd_cancel";
/// The longest a notification may be (PostgreSQL's limit is 8,000 bytes).
const MAX_PAYLOAD: usize = 7_900;
/// How long the relay waits for more events before it notifies.
pub const LINGER: Duration = Duration::from_millis(4);
/// Events waiting for the relay; beyond, they are dropped (and counted).
const QUEUE: usize = 8_192;
/// The longest wait between two attempts to listen again.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// One notification: who sent it, and its items in order.
#[derive(Serialize, Deserialize)]
struct Batch<'a> {
    n: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    i: Vec<Item<'a>>,
}

/// An event of a thread: a message by reference, anything else inline.
#[derive(Serialize, Deserialize)]
struct Item<'a> {
    t: std::borrow::Cow<'a, str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    s: Option<u64>,
    #[serde(default, borrow, skip_serializing_if = "Option::is_none")]
    e: Option<&'a RawValue>,
}

/// What the relay dropped because its queue was full.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Events the relay could not keep up with since start.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Starts the relay and the listener of node `node` for `pg`, whose writes
/// publish to `hub`. They run until the pool closes.
pub(crate) fn start(pg: Arc<Pg>, url: String, node: String, hub: Arc<Hub>) {
    let (tx, rx) = mpsc::channel::<(Arc<str>, Arc<Published>)>(QUEUE);
    hub.relay_to(move |thread, published| {
        if tx.try_send((thread, published)).is_err() {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    });
    tokio::spawn(relay(pg.clone(), node.clone(), rx));
    tokio::spawn(listen(pg, url, node, hub));
}

/// Packs queued events into notifications until the queue closes.
async fn relay(pg: Arc<Pg>, node: String, mut rx: mpsc::Receiver<(Arc<str>, Arc<Published>)>) {
    let mut next = None;
    // Events not told while the registry is away, said once per outage.
    let mut untold = 0usize;
    loop {
        let first = match next.take() {
            Some(first) => first,
            None => match rx.recv().await {
                Some(first) => first,
                None => return,
            },
        };
        tokio::time::sleep(LINGER).await;
        let mut items = vec![first];
        let mut size = 64 + node.len() + weight(&items[0]);
        while let Ok(more) = rx.try_recv() {
            let w = weight(&more);
            if size + w > MAX_PAYLOAD {
                next = Some(more);
                break;
            }
            size += w;
            items.push(more);
        }
        let batch = Batch {
            n: node.as_str().into(),
            i: items
                .iter()
                .filter_map(|(t, p)| {
                    let inline = p.seq.is_none().then_some(&*p.json);
                    // An event too long for any notification is not sent.
                    if inline.is_some_and(|e| 64 + node.len() + t.len() + e.get().len() > MAX_PAYLOAD) {
                        DROPPED.fetch_add(1, Ordering::Relaxed);
                        return None;
                    }
                    Some(Item { t: (&**t).into(), s: p.seq, e: inline })
                })
                .collect(),
        };
        if batch.i.is_empty() {
            continue;
        }
        let Ok(payload) = serde_json::to_string(&batch) else { continue };
        let sent = match pg.conn().await {
            Ok(c) => c
                .execute("SELECT pg_notify($1, $2)", &[&CHANNEL, &payload])
                .await
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        match sent {
            Err(_) if pg.is_closed() => return,
            Err(e) => {
                if untold == 0 {
                    tracing::warn!(
                        "cannot tell the other nodes of {} event(s): {e} (said once until the registry answers)",
                        batch.i.len()
                    );
                }
                untold += batch.i.len();
            }
            Ok(()) if untold > 0 => {
                tracing::info!("the other nodes are told events again ({untold} could not be told)");
                untold = 0;
            }
            Ok(()) => {}
        }
    }
}

/// The bytes an item takes in a notification.
fn weight((thread, p): &(Arc<str>, Arc<Published>)) -> usize {
    24 + thread.len() + if p.seq.is_some() { 20 } else { p.json.get().len() }
}

/// Listens for the other nodes' events until the pool closes, connecting
/// again (with backoff) whenever the connection is lost.
async fn listen(pg: Arc<Pg>, url: String, node: String, hub: Arc<Hub>) {
    let mut wait = Duration::from_millis(100);
    let mut first = true;
    // Whether not listening was said (once per loss, however many tries).
    let mut lost = false;
    while !pg.is_closed() {
        match listen_once(&pg, &url, &node, &hub, &mut first, &mut lost).await {
            Ok(()) => wait = Duration::from_millis(100),
            Err(e) => {
                if pg.is_closed() {
                    return;
                }
                if lost {
                    tracing::debug!("not listening to the other nodes ({e}); again in {} ms", wait.as_millis());
                } else {
                    tracing::warn!(
                        "not listening to the other nodes ({e}); trying again, every {} s at most",
                        MAX_BACKOFF.as_secs()
                    );
                    lost = true;
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(MAX_BACKOFF);
            }
        }
    }
}

/// One connection's worth of listening.
async fn listen_once(
    pg: &Arc<Pg>,
    url: &str,
    node: &str,
    hub: &Arc<Hub>,
    first: &mut bool,
    lost: &mut bool,
) -> Result<(), String> {
    let (client, mut notes, driver) = connect(url).await?;
    client
        .batch_execute(&format!("LISTEN {CHANNEL}; LISTEN {WORK}; LISTEN {CANCEL}"))
        .await
        .map_err(|e| e.to_string())?;
    if std::mem::take(lost) {
        tracing::info!("listening to the other nodes again");
    }
    // Work routed here while this node was not listening is found by the
    // next claim pass: a wake-up is never the only way in.
    pg.work.notify_one();
    if !std::mem::take(first) {
        // Back after a loss: what was missed is read by seq.
        for thread in hub.watched() {
            let last = match pg.thread(thread.clone()).await {
                Ok(t) if t.last_seq > 0 => pg.message(thread.clone(), t.last_seq).await,
                _ => continue,
            };
            if let Ok(last) = last {
                hub.publish_here(&thread, ThreadEvent::Message { message: Box::new(last) });
            }
        }
    }
    while let Some((channel, payload)) = notes.recv().await {
        if channel == WORK {
            if payload == node {
                pg.work.notify_one();
            }
            continue;
        }
        if channel == CANCEL {
            #[derive(serde::Deserialize)]
            struct Asked {
                node: String,
                cancel: crate::db::runs::Cancel,
            }
            match serde_json::from_str::<Asked>(&payload) {
                Ok(a) if a.node == node => {
                    if pg.cancels.0.try_send(a.cancel).is_err() {
                        tracing::warn!("a cancellation from another node was dropped (queue full)");
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!("an unreadable notification on {CANCEL}: {e}"),
            }
            continue;
        }
        let Ok(batch) = serde_json::from_str::<Batch<'_>>(&payload) else {
            tracing::warn!("an unreadable notification on {CHANNEL}");
            continue;
        };
        if batch.n == node {
            continue;
        }
        for item in batch.i {
            if !hub.is_watched(&item.t) {
                continue;
            }
            if let Some(seq) = item.s {
                match pg.message(item.t.to_string(), seq).await {
                    Ok(m) => hub.publish_here(&item.t, ThreadEvent::Message { message: Box::new(m) }),
                    Err(e) => tracing::warn!(thread = %item.t, seq, "cannot read another node's message: {e}"),
                }
            } else if let Some(e) = item.e {
                match serde_json::from_str::<ThreadEvent>(e.get()) {
                    Ok(event) => hub.publish_here(&item.t, event),
                    Err(e) => tracing::warn!(thread = %item.t, "an unreadable event from node {}: {e}", batch.n),
                }
            }
        }
    }
    driver.abort();
    Err("the connection was lost".into())
}

/// A connection of its own to `url` (not pooled: it keeps listening), and
/// the payloads of the notifications it receives, from a task driving it.
async fn connect(url: &str) -> Result<(Client, mpsc::Receiver<(String, String)>, tokio::task::JoinHandle<()>), String> {
    let target = super::url::parse(url).map_err(|e| e.to_string())?;
    match &target.tls {
        super::url::Tls::None => {
            Ok(drive(target.config.connect(tokio_postgres::NoTls).await.map_err(|e| e.to_string())?))
        }
        super::url::Tls::Verified(roots) => {
            let tls = tokio_postgres_rustls::MakeRustlsConnect::new(
                super::url::rustls_config(roots).map_err(|e| e.to_string())?,
            );
            Ok(drive(target.config.connect(tls).await.map_err(|e| e.to_string())?))
        }
    }
}

/// Drives `connection`, handing out its notifications' payloads.
fn drive<S, T>(
    (client, mut connection): (Client, Connection<S, T>),
) -> (Client, mpsc::Receiver<(String, String)>, tokio::task::JoinHandle<()>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::channel(QUEUE);
    let driver = tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(AsyncMessage::Notification(n)) => {
                    match tx.try_send((n.channel().to_string(), n.payload().to_string())) {
                        Ok(()) => {}
                        // Behind: what is dropped is read by seq later.
                        Err(mpsc::error::TrySendError::Full(_)) => {
                            DROPPED.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(mpsc::error::TrySendError::Closed(_)) => return,
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!("the listening connection ended: {e}");
                    return;
                }
            }
        }
    });
    (client, rx, driver)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kd_proto::paths::DbLocation;
    use kd_proto::types::{MessageKind, ThreadEvent};

    use crate::db::messages::NewMessage;
    use crate::db::threads::NewThread;
    use crate::db::{Db, Node};
    use crate::hub::Hub;

    fn delta(chars: u64) -> ThreadEvent {
        ThreadEvent::Delta { run: "r1".into(), member: "claude".into(), text: "x".into(), chars }
    }

    fn seen(rx: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<crate::hub::Published>>) -> Vec<ThreadEvent> {
        let mut out = Vec::new();
        while let Ok(p) = rx.try_recv() {
            out.push(serde_json::from_str(p.json.get()).unwrap());
        }
        out
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn what_one_node_publishes_reaches_the_others_subscribers_in_order() {
        let Some((pg, keep)) = crate::db::pg::testing::fresh().await else { return };
        pg.close().await;
        let url = DbLocation::Url(keep.url().to_string());
        let (hub_a, hub_b) = (std::sync::Arc::new(Hub::new()), std::sync::Arc::new(Hub::new()));
        let a = Db::open(&url, hub_a.clone(), Node::here("a")).await.unwrap();
        let b = Db::open(&url, hub_b.clone(), Node::here("b")).await.unwrap();
        let t = a.create_thread(NewThread { members: vec![], ..NewThread::in_workspace("/w") }).await.unwrap();
        let mut on_b = hub_b.subscribe(&t.id);
        // Until b listens, what a says is lost to it: a says it again.
        let mut chars = 0;
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                chars += 1;
                hub_a.publish(&t.id, delta(chars));
                tokio::time::sleep(Duration::from_millis(20)).await;
                if !seen(&mut on_b).is_empty() {
                    return;
                }
            }
        })
        .await
        .expect("node b hears node a");
        let first = chars + 1;
        for c in first..first + 50 {
            hub_a.publish(&t.id, delta(c));
        }
        let m =
            a.append_message(NewMessage::new(&t.id, "king", vec![], MessageKind::King, "hello".into())).await.unwrap();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                got.extend(seen(&mut on_b));
                if got.iter().any(|e| matches!(e, ThreadEvent::Message { .. })) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("node b hears the message");
        let deltas: Vec<u64> = got
            .iter()
            .filter_map(|e| match e {
                ThreadEvent::Delta { chars, .. } if *chars >= first => Some(*chars),
                _ => None,
            })
            .collect();
        assert_eq!(deltas, (first..first + 50).collect::<Vec<_>>(), "every delta, in order");
        match got.last() {
            Some(ThreadEvent::Message { message }) => {
                assert_eq!((message.seq, message.body.as_str()), (m.seq, "hello"))
            }
            other => panic!("the message last: {other:?}"),
        }
        // And the other way.
        let mut on_a = hub_a.subscribe(&t.id);
        hub_b.publish(&t.id, delta(999));
        b.append_message(NewMessage::new(&t.id, "king", vec![], MessageKind::King, "from b".into())).await.unwrap();
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if seen(&mut on_a)
                    .iter()
                    .any(|e| matches!(e, ThreadEvent::Message { message } if message.body == "from b"))
                {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("node a hears node b");
        a.close().await;
        b.close().await;
    }
}
