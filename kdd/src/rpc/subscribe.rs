//! `thread.subscribe`: the backlog from the registry, then live events from
//! the hub, in seq order and without a gap or a duplicate.
//!
//! The receiver is registered with the hub *before* the backlog is read, so
//! any message committed after the read is also in the receiver; messages
//! already sent are skipped by seq. The backlog is read a page at a time.
//! After a lag, messages are re-read from the registry from the last seq
//! sent.
//!
//! A run whose message was sent from a backlog (at the start, or again
//! after a lag) is over for the subscriber: its events still in the
//! receiver (waiting, started, deltas, activity) are stale and not sent
//! after it ([`Told`], the last 256 such runs); its end event is.
//!
//! Rounds are told in the order they went: an exchange heard of in what
//! was published since the subscription began is told from there; the
//! others as they stood once the backlog was sent (how they ended, or the
//! round under way) — never an older round after a newer.
//!
//! A *pending* subscription may name a thread that does not exist yet: the
//! client subscribes to the id a `council.send` with `new_thread` is about
//! to create, so it sees everything from the first message on.
//!
//! **A client that stops reading costs nothing but itself.** Every send may
//! wait at most the client timeout for room in the connection's buffer;
//! meanwhile the hub's channel keeps what comes, and a subscriber that
//! falls too far behind gets `lagged` and the messages again. A send that
//! times out ends the subscription and cuts the client's connection. At
//! shutdown, subscriptions deliver what is queued — the runs' ends among it
//! — and end.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use jsonrpsee::Extensions;
use jsonrpsee::core::{SubscriptionResult, async_trait};
use jsonrpsee::server::{PendingSubscriptionSink, SubscriptionMessage, SubscriptionSink};
use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::message::Message;
use kd_proto::registry::RunStatus;
use kd_proto::subscribe::{SubscribeApiServer, ThreadEvent};
use serde_json::value::RawValue;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use super::{Rpc, validate};
use crate::client::ClientId;
use crate::db::messages::Page;
use crate::db::{DbError, DbResult};
use crate::hub::{Published, RunMark};
use crate::state::Daemon;

/// Why a subscription stops sending.
enum Stop {
    /// The client went away or its subscription was dropped.
    Gone,
    /// The client did not read for the client timeout: it is cut off.
    Stalled,
}

/// Sends to one subscriber, each send bounded in time.
struct Out<'a> {
    d: &'a Daemon,
    sink: &'a SubscriptionSink,
    client: Option<ClientId>,
}

impl Out<'_> {
    async fn raw(&self, json: Box<RawValue>) -> Result<(), Stop> {
        use jsonrpsee::core::server::SendTimeoutError;
        match self.sink.send_timeout(SubscriptionMessage::from(json), self.d.client_timeout).await {
            Ok(()) => Ok(()),
            Err(SendTimeoutError::Closed(_)) => Err(Stop::Gone),
            Err(SendTimeoutError::Timeout(_)) => Err(Stop::Stalled),
        }
    }

    async fn event(&self, event: &ThreadEvent) -> Result<(), Stop> {
        match serde_json::value::to_raw_value(event) {
            Ok(json) => self.raw(json).await,
            Err(e) => {
                tracing::error!("cannot serialise a thread event: {e}");
                Err(Stop::Gone)
            }
        }
    }

    /// Sends messages from the registry.
    async fn messages(&self, messages: Vec<Message>, told: &mut Told) -> Result<(), Stop> {
        for message in messages {
            let (seq, run) = (message.seq, message.run.as_ref().and_then(|r| r.run_id.clone()));
            self.event(&ThreadEvent::Message { message: Box::new(message) }).await?;
            told.last = seq;
            if let Some(run) = run {
                told.run_over(run);
            }
        }
        Ok(())
    }

    /// Sends the messages after the last told from the registry, a page at
    /// a time (memory stays bounded however long the thread), until none is
    /// left.
    async fn backlog(&self, thread: &str, told: &mut Told) -> Result<(), Stop> {
        loop {
            match self.d.db.messages(thread.to_string(), backlog_page(self.d, told.last)).await {
                Ok(page) if page.is_empty() => return Ok(()),
                Ok(page) => self.messages(page, told).await?,
                Err(e) => {
                    tracing::warn!(thread, "cannot read the messages to send: {e}");
                    return Err(Stop::Gone);
                }
            }
        }
    }

    /// Cuts off a client that stopped reading.
    fn give_up(&self, thread: &str) {
        tracing::warn!(thread, client = ?self.client, "a subscriber stopped reading; disconnected");
        if let Some(client) = self.client {
            self.d.open.cut(client);
        }
    }
}

#[async_trait]
impl SubscribeApiServer for Rpc {
    async fn thread_subscribe(
        &self,
        pending: PendingSubscriptionSink,
        ext: &Extensions,
        thread: String,
        since_seq: Option<u64>,
        not_yet_created: Option<bool>,
    ) -> SubscriptionResult {
        let client = ext.get::<ClientId>().copied();
        let pending_thread = not_yet_created.unwrap_or(false);
        run(self.d.clone(), pending, client, thread, since_seq, pending_thread, None::<Never>).await
    }
}

/// No first item: `thread.subscribe`'s.
type Never = std::future::Ready<Result<ThreadEvent, ErrorObjectOwned>>;

/// Serves a subscription to `thread`. `first`, when given (`council.ask`),
/// runs once the subscriber's receiver is registered: refused, the
/// subscription is too; its item is the first one sent.
pub(super) async fn run(
    d: Arc<Daemon>,
    pending: PendingSubscriptionSink,
    client: Option<ClientId>,
    thread: String,
    since_seq: Option<u64>,
    pending_thread: bool,
    first: Option<impl Future<Output = Result<ThreadEvent, ErrorObjectOwned>>>,
) -> SubscriptionResult {
    if let Err(e) = validate::thread_id(&thread).and_then(|()| validate::position("since_seq", since_seq)) {
        pending.reject(e).await;
        return Ok(());
    }
    let mut rx = d.hub.subscribe(&thread);
    // The first page of the backlog now (the thread must exist), the rest
    // page by page once the subscription is accepted.
    // A client that has seen the whole thread (`kd ask`, asking next) is
    // told so by the thread's row, without reading messages.
    let start: DbResult<(Vec<Message>, u64)> = match since_seq {
        Some(since) => match d.db.thread(thread.clone()).await {
            Ok(t) if t.last_seq <= since => Ok((Vec::new(), since)),
            Ok(_) => d.db.messages(thread.clone(), backlog_page(&d, since)).await.map(|m| (m, since)),
            Err(e) => Err(e),
        },
        None => d.db.thread(thread.clone()).await.map(|t| (Vec::new(), t.last_seq)),
    };
    let (backlog, last) = match start {
        Ok(s) => s,
        Err(DbError::NotFound(_)) if pending_thread => (Vec::new(), 0),
        Err(e) => {
            pending.reject(ErrorObjectOwned::from(e)).await;
            return Ok(());
        }
    };
    let first = match first {
        Some(first) => match first.await {
            Ok(item) => Some(item),
            Err(e) => {
                pending.reject(e).await;
                return Ok(());
            }
        },
        None => None,
    };
    // Counted before the client hears it was accepted, so a status call
    // that follows the subscribe call sees it.
    let _counted = d.hub.track();
    let sink = pending.accept().await?;
    let out = Out { d: &d, sink: &sink, client };
    let mut told = Told { last, ..Told::default() };
    let mut snapshots: HashMap<String, Seen> = HashMap::new();
    let mut told_rounds: Vec<Box<RawValue>> = Vec::new();
    let result = async {
        if let Some(first) = &first {
            out.event(first).await?;
        }
        if !backlog.is_empty() {
            out.messages(backlog, &mut told).await?;
            out.backlog(&thread, &mut told).await?;
        }
        // Where the thread's exchanges stand: how those begun in the
        // backlog that are over ended (a client subscribing beside the
        // question it sends may come after its end), then the one under
        // way; and what was published since the subscription began, taken
        // after. An exchange heard of there goes on being told as it went;
        // the others are told as they stood (each once: published
        // meanwhile, a round is in the receiver too) — never an older
        // round after a newer.
        let ended = since_seq.map(|since| d.council.exchanges.ended_after(&thread, since)).unwrap_or_default();
        // An exchange whose last round is told but whose end is still being
        // recorded is still the current one: told to whoever joins then,
        // from whatever point (a client reconnecting past its question
        // learns it ended; `exchange.get` may still say open).
        let stood = as_they_stood(ended, d.council.exchanges.current(&thread).and_then(|ex| ex.round_event()));
        let mut since_begun = Vec::new();
        loop {
            match rx.try_recv() {
                Ok(p) => since_begun.push(Ok(p)),
                Err(TryRecvError::Lagged(missed)) => since_begun.push(Err(missed)),
                Err(_) => break,
            }
        }
        let heard: HashSet<u64> =
            since_begun.iter().filter_map(|p| p.as_ref().ok().and_then(|p| round_of(p))).collect();
        for round in stood {
            if exchange_of(&round).is_none_or(|x| heard.contains(&x)) {
                continue;
            }
            if let Ok(json) = serde_json::value::to_raw_value(&round)
                && !told_rounds.iter().any(|told| told.get() == json.get())
            {
                out.raw(json.clone()).await?;
                told_rounds.push(json);
            }
        }
        // Runs in flight: what they streamed so far, then only what is newer.
        for run in d.agents.runs.list(Some(&thread)) {
            let snap = run.snapshot();
            if snap.info.status.is_finished() || told.has_ended(&snap.info.id) {
                continue;
            }
            let (id, member, pid, chars, status) =
                (snap.info.id.clone(), snap.info.member.clone(), snap.info.pid, snap.info.chars, snap.info.status);
            out.event(&ThreadEvent::RunWaiting { run: snap.info }).await?;
            if let Some(pid) = pid {
                out.event(&ThreadEvent::RunStarted { run: id.clone(), member: member.clone(), pid }).await?;
            }
            if !snap.text.is_empty() {
                out.event(&ThreadEvent::Delta { run: id.clone(), member, text: snap.text, chars }).await?;
            }
            let queued = status == RunStatus::Queued;
            snapshots.insert(id, Seen { queued, started: pid.is_some(), chars });
        }
        for p in since_begun {
            match p {
                Ok(p) => forward(&out, &thread, &p, &snapshots, &mut told_rounds, &mut told).await?,
                Err(missed) => {
                    out.event(&ThreadEvent::Lagged { missed }).await?;
                    out.backlog(&thread, &mut told).await?;
                }
            }
        }
        loop {
            tokio::select! {
                _ = sink.closed() => return Err(Stop::Gone),
                _ = d.close.cancelled() => {
                    // Stopping: what is queued (the runs' ends) goes out first.
                    loop {
                        match rx.try_recv() {
                            Ok(p) => forward(&out, &thread, &p, &snapshots, &mut told_rounds, &mut told).await?,
                            Err(TryRecvError::Lagged(_)) => continue,
                            Err(_) => return Ok(()),
                        }
                    }
                }
                event = rx.recv() => match event {
                    Ok(p) => forward(&out, &thread, &p, &snapshots, &mut told_rounds, &mut told).await?,
                    Err(RecvError::Lagged(missed)) => {
                        tracing::debug!(thread, missed, "subscriber lagged");
                        out.event(&ThreadEvent::Lagged { missed }).await?;
                        out.backlog(&thread, &mut told).await?;
                    }
                    Err(RecvError::Closed) => return Ok(()),
                },
            }
        }
    }
    .await;
    if let Err(Stop::Stalled) = result {
        out.give_up(&thread);
    }
    Ok(())
}

/// A page of the backlog after `after`.
fn backlog_page(d: &Daemon, after: u64) -> Page {
    Page { budget: d.page_bytes, ..Page::all_after(after) }
}

/// Sends a live event unless the backlog or a snapshot already covered it
/// (a round told as it stood: `told_rounds`, each skipped once; a run's
/// event after its message: [`Told::covers`]).
async fn forward(
    out: &Out<'_>,
    thread: &str,
    p: &Published,
    snapshots: &HashMap<String, Seen>,
    told_rounds: &mut Vec<Box<RawValue>>,
    told: &mut Told,
) -> Result<(), Stop> {
    if already_sent(snapshots, p.run.as_ref()) || told.covers(p.run.as_ref()) {
        return Ok(());
    }
    // Only an event of no run and no message may be a round: a delta is
    // never compared.
    let maybe_round = p.run.is_none() && p.seq.is_none();
    if maybe_round && let Some(i) = told_rounds.iter().position(|told| told.get() == p.json.get()) {
        told_rounds.swap_remove(i);
        return Ok(());
    }
    if let Some(seq) = p.seq {
        // A seq further on than the next: messages committed before it were
        // not told here (another node's, a lost notification, or published
        // after it): they are read from the registry first, in order.
        if seq > told.last + 1 {
            out.backlog(thread, told).await?;
        }
        if seq <= told.last {
            return Ok(());
        }
        told.last = seq;
    }
    out.raw(p.json.clone()).await
}

/// The rounds told as the exchanges stood: how the `ended` ones ended,
/// then the `current` round — unless its exchange is among them: it is
/// ending, and how it ended is remembered before its round is set, so the
/// end is the newer (told after it, the round under way would be the last
/// word of an exchange that is over).
fn as_they_stood(mut ended: Vec<ThreadEvent>, current: Option<ThreadEvent>) -> Vec<ThreadEvent> {
    if let Some(round) = current
        && !ended.iter().any(|e| exchange_of(e) == exchange_of(&round))
    {
        ended.push(round);
    }
    ended
}

/// The exchange a round event is of.
fn exchange_of(e: &ThreadEvent) -> Option<u64> {
    match e {
        ThreadEvent::Round { exchange, .. } => Some(*exchange),
        _ => None,
    }
}

/// The exchange a published round event is of (a round is of no run and
/// no message).
fn round_of(p: &Published) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Round {
        #[serde(rename = "type")]
        kind: String,
        exchange: Option<u64>,
    }
    if p.run.is_some() || p.seq.is_some() {
        return None;
    }
    serde_json::from_str::<Round>(p.json.get()).ok().filter(|r| r.kind == "round").and_then(|r| r.exchange)
}

/// What a subscriber was told of the thread's messages.
#[derive(Debug, Default)]
struct Told {
    /// The seq of the last message sent.
    last: u64,
    /// The runs whose message a backlog gave, the last [`Told::ENDED`]
    /// (a stale event is of a run that ended as the backlog was read).
    ended: HashSet<String>,
    order: VecDeque<String>,
}

impl Told {
    const ENDED: usize = 256;

    /// `run`'s message was sent from the registry.
    fn run_over(&mut self, run: String) {
        if self.ended.insert(run.clone()) {
            self.order.push_back(run);
            if self.order.len() > Told::ENDED
                && let Some(oldest) = self.order.pop_front()
            {
                self.ended.remove(&oldest);
            }
        }
    }

    fn has_ended(&self, run: &str) -> bool {
        self.ended.contains(run)
    }

    /// Whether a live run event is stale: its run's message was sent.
    fn covers(&self, mark: Option<&RunMark>) -> bool {
        mark.is_some_and(|m| self.has_ended(m.run()))
    }
}

/// What a run's snapshot told a subscriber.
struct Seen {
    /// It was queued behind its member's run in flight.
    queued: bool,
    started: bool,
    chars: u64,
}

/// Whether a live run event was already covered by the run's snapshot.
fn already_sent(snapshots: &HashMap<String, Seen>, mark: Option<&RunMark>) -> bool {
    match mark {
        // A queued run's leaving the queue is news.
        Some(RunMark::Waiting { run, queued }) => snapshots.get(run).is_some_and(|s| *queued || !s.queued),
        Some(RunMark::Started(id)) => snapshots.get(id).is_some_and(|s| s.started),
        Some(RunMark::Delta(id, chars)) => snapshots.get(id).is_some_and(|s| *chars <= s.chars),
        Some(RunMark::Activity(_)) | None => false,
    }
}

#[cfg(test)]
mod tests {
    use kd_proto::types::{RoundState, ThreadEvent};

    use super::{Told, as_they_stood};
    use crate::hub::RunMark;

    fn round(exchange: u64, state: RoundState) -> ThreadEvent {
        ThreadEvent::Round { exchange, round: 1, rounds: 1, state, expected: vec!["claude".into()] }
    }

    #[test]
    fn an_exchange_ended_and_current_is_told_as_it_ended_only() {
        let (done, running) = (round(5, RoundState::Done), round(5, RoundState::Running));
        let told = as_they_stood(vec![done.clone()], Some(running.clone()));
        assert!(matches!(told.as_slice(), [ThreadEvent::Round { state: RoundState::Done, .. }]), "{told:?}");
        // Another exchange under way is told after those that ended.
        assert_eq!(
            as_they_stood(vec![done.clone()], Some(round(7, RoundState::Running))),
            [done, round(7, RoundState::Running)]
        );
        assert_eq!(as_they_stood(vec![], Some(running.clone())), [running]);
    }

    /// A run's events are stale once its message came from a backlog;
    /// another run's are not.
    #[test]
    fn a_runs_events_after_its_message_from_the_backlog_are_stale() {
        let mut told = Told::default();
        told.run_over("r1".into());
        for stale in [
            RunMark::Waiting { run: "r1".into(), queued: false },
            RunMark::Started("r1".into()),
            RunMark::Delta("r1".into(), 12),
            RunMark::Activity("r1".into()),
        ] {
            assert!(told.covers(Some(&stale)), "{stale:?}");
        }
        assert!(!told.covers(Some(&RunMark::Delta("r2".into(), 3))));
        assert!(!told.covers(None), "a message or a round is not a run's event");
        // Only the last ones are kept: a stale event is of a run that ended
        // as the backlog was read.
        for i in 0..Told::ENDED {
            told.run_over(format!("later-{i}"));
        }
        assert!(!told.has_ended("r1") && told.has_ended("later-0") && told.ended.len() == Told::ENDED);
        told.run_over("later-0".into());
        assert_eq!(told.order.len(), Told::ENDED, "a run told twice is kept once");
    }
}
