//! Following a subscription across a restart of `kdd` (issue 24): a
//! subscription that, when the daemon goes away, says so once, connects
//! again (starting `kdd` as [`Client::connect_or_start`] does, so a
//! socket-activated daemon starts on the connect; not with
//! `KD_NO_AUTOSTART=1`) with a backoff from 100 ms doubling to 2 s for at
//! most its patience, and subscribes again as its [`Feed`] says.
//!
//! A thread's ([`Follow`], [`ThreadFeed`]) subscribes again after the last
//! message it saw: no message is repeated or lost (the daemon sends the
//! backlog after `since_seq`, then live events). What streamed of a run
//! still in flight comes again as one snapshot delta;
//! [`ThreadEvent::Delta::chars`] tells what is new. The approvals'
//! ([`ApprovalFeed`], `kd approvals --follow`) subscribes again from the
//! pending ones: what was decided meanwhile is the follower's to ask
//! (`approval.list`) on [`Next::Reconnected`].

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use jsonrpsee::core::client::Subscription;
use kd_proto::ErrorCode;
use kd_proto::api::prelude::*;
use kd_proto::approval::ApprovalEvent;
use kd_proto::types::ThreadEvent;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::{Client, ClientError};

/// The first wait before connecting again; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// What [`Following::next`] brings.
#[derive(Debug)]
pub enum Next<T = ThreadEvent> {
    /// An item of the subscription.
    Event(T),
    /// The daemon went away; connecting again (said once per outage).
    Reconnecting,
    /// Subscribed again: the items missed come next (as the feed can).
    Reconnected,
    /// The end: the daemon did not come back in time, refused, or speaks
    /// another protocol (one line).
    Gone(ClientError),
}

/// What is followed: how to subscribe again after what was seen.
pub trait Feed: Send {
    /// An item of the subscription.
    type Item: DeserializeOwned + Send + 'static;

    /// Notes an item seen (to subscribe again after it).
    fn seen(&mut self, item: &Self::Item);

    /// Subscribes again on `client`.
    fn subscribe<'a>(
        &'a self,
        client: &'a Client,
    ) -> impl Future<Output = Result<Subscription<Self::Item>, ClientError>> + Send + 'a;
}

/// A thread's messages, after the last one seen.
#[derive(Debug, Clone)]
pub struct ThreadFeed {
    thread: String,
    last_seq: u64,
}

impl Feed for ThreadFeed {
    type Item = ThreadEvent;

    fn seen(&mut self, e: &ThreadEvent) {
        if let ThreadEvent::Message { message } = e {
            self.last_seq = self.last_seq.max(message.seq);
        }
    }

    async fn subscribe<'a>(&'a self, client: &'a Client) -> Result<Subscription<ThreadEvent>, ClientError> {
        Ok(client.thread_subscribe(self.thread.clone(), Some(self.last_seq), None).await?)
    }
}

/// Every thread's approvals (`approval.subscribe`): subscribed again, the
/// pending ones come first.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApprovalFeed;

impl Feed for ApprovalFeed {
    type Item = ApprovalEvent;

    fn seen(&mut self, _: &ApprovalEvent) {}

    async fn subscribe<'a>(&'a self, client: &'a Client) -> Result<Subscription<ApprovalEvent>, ClientError> {
        Ok(client.approval_subscribe().await?)
    }
}

/// A subscription that rides through a restart of the daemon.
pub struct Following<F: Feed> {
    /// None while the daemon that went away before the first subscription
    /// was made is reconnected to.
    client: Option<Client>,
    sub: Option<Subscription<F::Item>>,
    socket: PathBuf,
    feed: F,
    patience: Duration,
    /// While reconnecting: until when, and the next wait.
    outage: Option<(Instant, Duration)>,
}

/// A thread's subscription that rides through a restart of the daemon.
pub type Follow = Following<ThreadFeed>;

impl Following<ThreadFeed> {
    /// Follows `sub`, a subscription of `thread` made on `client` after
    /// message `since`; `patience` is how long to try to reconnect (zero:
    /// the first disconnection is the end).
    pub fn new(
        client: Client,
        sub: Subscription<ThreadEvent>,
        thread: String,
        since: u64,
        patience: Duration,
    ) -> Follow {
        Following::of(client, sub, ThreadFeed { thread, last_seq: since }, patience)
    }

    /// Follows `thread` after message `since` on `connected`, a
    /// connection of its own — or, when the daemon went away before the
    /// subscription was made, from reconnecting ([`Following::start`]).
    pub async fn start_after(
        connected: Result<Client, ClientError>,
        socket: &Path,
        thread: String,
        since: u64,
        patience: Duration,
    ) -> Result<Follow, ClientError> {
        Following::start(connected, socket, ThreadFeed { thread, last_seq: since }, patience).await
    }

    /// The last message seen.
    pub fn last_seq(&self) -> u64 {
        self.feed.last_seq
    }
}

impl<F: Feed> Following<F> {
    /// Follows `sub`, made on `client` as `feed` makes one; `patience` is
    /// how long to try to reconnect (zero: the first disconnection is the
    /// end).
    pub fn of(client: Client, sub: Subscription<F::Item>, feed: F, patience: Duration) -> Following<F> {
        let socket = client.socket().to_path_buf();
        Following { client: Some(client), sub: Some(sub), socket, feed, patience, outage: None }
    }

    /// Follows `feed` from a subscription made on `connected`, a new
    /// connection to `socket` — or, when the daemon went away before it
    /// was made (a connection error: the daemon that answered the request
    /// to follow is gone), from reconnecting: the first item is then
    /// [`Next::Reconnecting`].
    pub async fn start(
        connected: Result<Client, ClientError>,
        socket: &Path,
        feed: F,
        patience: Duration,
    ) -> Result<Following<F>, ClientError> {
        let lost = match connected {
            Ok(client) => match feed.subscribe(&client).await {
                Ok(sub) => return Ok(Following::of(client, sub, feed, patience)),
                Err(e) => e,
            },
            Err(e) => e,
        };
        // Gone, or going (a daemon shutting down is followed by the next).
        let going = lost.is_connection() || lost.code() == Some(ErrorCode::ShuttingDown);
        if patience.is_zero() || !going || !retried(&lost) {
            return Err(lost);
        }
        Ok(Following { client: None, sub: None, socket: socket.to_path_buf(), feed, patience, outage: None })
    }

    /// The connection in use (a new one after a reconnect); none while the
    /// first subscription is still to be made.
    pub fn client(&self) -> Result<&Client, ClientError> {
        self.client.as_ref().ok_or_else(|| ClientError::Transport("kdd went away; reconnecting".into()))
    }

    /// The next item, or what happened to the connection. Cancel-safe:
    /// dropped while reconnecting, the next call goes on where it was.
    pub async fn next(&mut self) -> Next<F::Item> {
        if let Some(sub) = &mut self.sub {
            return match sub.next().await {
                Some(Ok(e)) => {
                    self.feed.seen(&e);
                    Next::Event(e)
                }
                Some(Err(e)) => Next::Gone(ClientError::Transport(format!("bad event from kdd: {e}"))),
                None => {
                    self.sub = None;
                    if self.patience.is_zero() {
                        return Next::Gone(ClientError::Transport("the daemon closed the subscription".into()));
                    }
                    self.outage = Some((Instant::now() + self.patience, FIRST_BACKOFF));
                    Next::Reconnecting
                }
            };
        }
        let Some((deadline, mut wait)) = self.outage else {
            // Gone before the first subscription was made: said first.
            self.outage = Some((Instant::now() + self.patience, FIRST_BACKOFF));
            return Next::Reconnecting;
        };
        loop {
            let why = match self.resubscribe().await {
                Ok(()) => {
                    self.outage = None;
                    return Next::Reconnected;
                }
                Err(e) if !retried(&e) => return Next::Gone(e),
                Err(e) => e,
            };
            let now = Instant::now();
            if now >= deadline {
                return Next::Gone(why);
            }
            let pause = wait.min(deadline - now);
            wait = backoff(wait);
            self.outage = Some((deadline, wait));
            tokio::time::sleep(pause).await;
        }
    }

    async fn resubscribe(&mut self) -> Result<(), ClientError> {
        let client = Client::connect_or_start(&self.socket).await?;
        let sub = self.feed.subscribe(&client).await?;
        self.client = Some(client);
        self.sub = Some(sub);
        Ok(())
    }
}

/// The wait after `wait`: doubled, at most [`MAX_BACKOFF`].
pub fn backoff(wait: Duration) -> Duration {
    (wait * 2).min(MAX_BACKOFF)
}

/// Whether connecting again may help: not against a daemon of another
/// protocol, an impostor, or one that refused the subscription (but one
/// still shutting down may be followed by a new one).
fn retried(e: &ClientError) -> bool {
    match e {
        ClientError::Protocol { .. } | ClientError::Untrusted { .. } => false,
        ClientError::Rpc { .. } => e.code() == Some(ErrorCode::ShuttingDown),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_from_100_ms_up_to_2_s() {
        let mut wait = FIRST_BACKOFF;
        let mut waits = vec![wait];
        for _ in 0..6 {
            wait = backoff(wait);
            waits.push(wait);
        }
        let ms: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(ms, [100, 200, 400, 800, 1600, 2000, 2000]);
    }

    #[test]
    fn another_protocol_or_a_refusal_ends_the_follow_and_an_outage_does_not() {
        let socket = PathBuf::from("/s");
        let protocol = ClientError::Protocol { socket: socket.clone(), theirs: 2, ours: 1, version: "9".into() };
        let refused = ClientError::Rpc { code: -32004, message: "no thread".into(), data: None };
        let away = ClientError::Unreachable { socket, reason: "gone".into(), hint: "", nothing_listens: true };
        assert!(!retried(&protocol) && !retried(&refused));
        assert!(retried(&away) && retried(&ClientError::Transport("closed".into())));
        let stopping =
            ClientError::Rpc { code: ErrorCode::ShuttingDown.code(), message: "stopping".into(), data: None };
        assert!(retried(&stopping), "a daemon on its way out is followed by the next");
    }
}
