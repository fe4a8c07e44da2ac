//! `thread.subscribe`: the backlog from the registry, then live events from
//! the hub, in seq order and without a gap or a duplicate.
//!
//! The receiver is registered with the hub *before* the backlog is read, so
//! any message committed after the read is also in the receiver; messages
//! already sent are skipped by seq. After a lag, messages are re-read from
//! the registry from the last seq sent.
//!
//! A *pending* subscription may name a thread that does not exist yet: the
//! client subscribes to the id a `council.send` with `new_thread` is about
//! to create, so it sees everything from the first message on.

use std::collections::HashMap;
use std::sync::Arc;

use jsonrpsee::core::SubscriptionResult;
use jsonrpsee::server::{PendingSubscriptionSink, SubscriptionMessage, SubscriptionSink};
use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::types::{Message, ThreadEvent};
use tokio::sync::broadcast::error::RecvError;

use super::validate;
use crate::db::{DbError, DbResult};
use crate::hub::RunMark;
use crate::state::Daemon;

pub async fn run(
    d: Arc<Daemon>,
    pending: PendingSubscriptionSink,
    thread: String,
    since_seq: Option<u64>,
    pending_thread: bool,
) -> SubscriptionResult {
    if let Err(e) = validate::thread_id(&thread) {
        pending.reject(e).await;
        return Ok(());
    }
    let mut rx = d.hub.subscribe(&thread);
    let start: DbResult<(Vec<Message>, u64)> = match since_seq {
        Some(since) => d.db.messages(thread.clone(), since, None).await.map(|m| (m, since)),
        None => d.db.thread(thread.clone()).await.map(|t| (Vec::new(), t.last_seq)),
    };
    let (backlog, mut last) = match start {
        Ok(s) => s,
        Err(DbError::NotFound(_)) if pending_thread => (Vec::new(), 0),
        Err(e) => {
            pending.reject(ErrorObjectOwned::from(e)).await;
            return Ok(());
        }
    };
    // Counted before the client hears it was accepted, so a status call
    // that follows the subscribe call sees it.
    let _counted = d.hub.track();
    let sink = pending.accept().await?;
    if !send_messages(&sink, backlog, &mut last).await {
        return Ok(());
    }
    // Where the thread's exchange stands.
    if let Some(round) = d.council.exchanges.current(&thread).and_then(|ex| ex.round_event())
        && !send(&sink, &round).await
    {
        return Ok(());
    }
    // Runs in flight: what they streamed so far, then only what is newer.
    let mut snapshots: HashMap<String, (bool, u64)> = HashMap::new();
    for run in d.agents.runs.list(Some(&thread)) {
        let snap = run.snapshot();
        if snap.info.status.is_finished() {
            continue;
        }
        let (id, member, pid, chars) = (snap.info.id.clone(), snap.info.member.clone(), snap.info.pid, snap.info.chars);
        let mut ok = send(&sink, &ThreadEvent::RunWaiting { run: snap.info }).await;
        if let Some(pid) = pid {
            ok &= send(&sink, &ThreadEvent::RunStarted { run: id.clone(), member: member.clone(), pid }).await;
        }
        if !snap.text.is_empty() {
            ok &= send(&sink, &ThreadEvent::Delta { run: id.clone(), member, text: snap.text, chars }).await;
        }
        if !ok {
            return Ok(());
        }
        snapshots.insert(id, (pid.is_some(), chars));
    }
    loop {
        tokio::select! {
            _ = sink.closed() => break,
            _ = d.shutdown.cancelled() => break,
            event = rx.recv() => match event {
                Ok(p) => {
                    if already_sent(&snapshots, p.run.as_ref()) {
                        continue;
                    }
                    if let Some(seq) = p.seq {
                        if seq <= last {
                            continue;
                        }
                        last = seq;
                    }
                    if sink.send(SubscriptionMessage::from(p.json.clone())).await.is_err() {
                        break;
                    }
                }
                Err(RecvError::Lagged(missed)) => {
                    tracing::debug!(thread, missed, "subscriber lagged");
                    if !send(&sink, &ThreadEvent::Lagged { missed }).await {
                        break;
                    }
                    match d.db.messages(thread.clone(), last, None).await {
                        Ok(missed) => {
                            if !send_messages(&sink, missed, &mut last).await {
                                break;
                            }
                        }
                        Err(e) => {
                            tracing::warn!(thread, "cannot resend messages after lag: {e}");
                            break;
                        }
                    }
                }
                Err(RecvError::Closed) => break,
            },
        }
    }
    Ok(())
}

/// Whether a live run event was already covered by the run's snapshot.
fn already_sent(snapshots: &HashMap<String, (bool, u64)>, mark: Option<&RunMark>) -> bool {
    match mark {
        Some(RunMark::Waiting(id)) => snapshots.contains_key(id),
        Some(RunMark::Started(id)) => snapshots.get(id).is_some_and(|(started, _)| *started),
        Some(RunMark::Delta(id, chars)) => snapshots.get(id).is_some_and(|(_, seen)| chars <= seen),
        None => false,
    }
}

async fn send_messages(sink: &SubscriptionSink, messages: Vec<Message>, last: &mut u64) -> bool {
    for message in messages {
        let seq = message.seq;
        if !send(sink, &ThreadEvent::Message { message: Box::new(message) }).await {
            return false;
        }
        *last = seq;
    }
    true
}

async fn send(sink: &SubscriptionSink, event: &ThreadEvent) -> bool {
    match serde_json::value::to_raw_value(event) {
        Ok(json) => sink.send(SubscriptionMessage::from(json)).await.is_ok(),
        Err(e) => {
            tracing::error!("cannot serialise a thread event: {e}");
            false
        }
    }
}
