//! Following a thread across a restart of `kdd` (issue 24): a
//! subscription that, when the daemon goes away, says so once, connects
//! again (starting `kdd` as [`Client::connect_or_start`] does, so a
//! socket-activated daemon starts on the connect; not with
//! `KD_NO_AUTOSTART=1`) with a backoff from 100 ms doubling to 2 s for at
//! most its patience, and subscribes again after the last message it saw:
//! no message is repeated or lost (the daemon sends the backlog after
//! `since_seq`, then live events). What streamed of a run still in flight
//! comes again as one snapshot delta; [`ThreadEvent::Delta::chars`] tells
//! what is new.

use std::path::PathBuf;
use std::time::Duration;

use jsonrpsee::core::client::Subscription;
use kd_proto::ErrorCode;
use kd_proto::api::prelude::*;
use kd_proto::types::ThreadEvent;
use tokio::time::Instant;

use crate::{Client, ClientError};

/// The first wait before connecting again; it doubles up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// What [`Follow::next`] brings.
#[derive(Debug)]
pub enum Next {
    /// An event of the thread.
    Event(ThreadEvent),
    /// The daemon went away; connecting again (said once per outage).
    Reconnecting,
    /// Subscribed again: the messages missed come next.
    Reconnected,
    /// The end: the daemon did not come back in time, refused, or speaks
    /// another protocol (one line).
    Gone(ClientError),
}

/// A thread's subscription that rides through a restart of the daemon.
pub struct Follow {
    client: Client,
    sub: Option<Subscription<ThreadEvent>>,
    socket: PathBuf,
    thread: String,
    last_seq: u64,
    patience: Duration,
    /// While reconnecting: until when, and the next wait.
    outage: Option<(Instant, Duration)>,
}

impl Follow {
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
        let socket = client.socket().to_path_buf();
        Follow { client, sub: Some(sub), socket, thread, last_seq: since, patience, outage: None }
    }

    /// The connection in use (a new one after a reconnect).
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The last message seen.
    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// The next event, or what happened to the connection. Cancel-safe:
    /// dropped while reconnecting, the next call goes on where it was.
    pub async fn next(&mut self) -> Next {
        if let Some(sub) = &mut self.sub {
            return match sub.next().await {
                Some(Ok(e)) => {
                    if let ThreadEvent::Message { message } = &e {
                        self.last_seq = self.last_seq.max(message.seq);
                    }
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
        let (deadline, mut wait) = self.outage.unwrap_or((Instant::now() + self.patience, FIRST_BACKOFF));
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
        let sub = client.thread_subscribe(self.thread.clone(), Some(self.last_seq), None).await?;
        self.client = client;
        self.sub = Some(sub);
        Ok(())
    }
}

/// The wait after `wait`: doubled, at most [`MAX_BACKOFF`].
pub fn backoff(wait: Duration) -> Duration {
    (wait * 2).min(MAX_BACKOFF)
}

/// Whether connecting again may help: not against a daemon of another
/// protocol, an impostor, or one that refused the thread (but one still
/// shutting down may be followed by a new one).
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
