//! Idle connections do not hold slots forever. A WebSocket that leaves the
//! daemon's pings unanswered is closed by jsonrpsee (see the ping settings
//! in [`super::serve`]); an HTTP connection kept alive after its calls is
//! closed here once it has been idle — no request in flight, no byte in
//! either direction — for the idle timeout. A request is in flight once it
//! was received whole ([`super::http_request`]): one whose head or body
//! stops coming is idle. What a connection's bytes did
//! last is its [`Activity`], kept by the filter every connection's bytes
//! pass through ([`super::frames`]). A connection whose peer stops reading
//! what it is sent — an HTTP answer, a WebSocket's messages — is closed once
//! nothing has gone out for the client timeout, whatever kdd still holds
//! for it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// When a connection's bytes last moved, and whether it became a WebSocket.
#[derive(Debug, Default)]
pub struct Activity {
    /// Milliseconds after [`epoch`].
    last: AtomicU64,
    /// Since when a write waits for the peer to read (milliseconds after
    /// [`epoch`], plus one); 0 while none waits.
    blocked: AtomicU64,
    /// What the socket held unsent at the last look, plus one (0: not
    /// looked at).
    unsent: AtomicU64,
    upgraded: AtomicBool,
    /// HTTP requests being answered.
    in_flight: AtomicUsize,
}

/// The instant activity times count from.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ms() -> u64 {
    u64::try_from(epoch().elapsed().as_millis()).unwrap_or(u64::MAX)
}

impl Activity {
    pub fn new() -> Activity {
        let a = Activity::default();
        a.touch();
        a
    }

    /// Bytes moved.
    pub fn touch(&self) {
        self.last.store(now_ms(), Ordering::Relaxed);
    }

    /// A write found the socket full: the peer has not read what it was
    /// sent. Counted from the first such write since bytes last went out.
    pub fn write_blocked(&self) {
        let _ = self.blocked.compare_exchange(0, now_ms() + 1, Ordering::Relaxed, Ordering::Relaxed);
    }

    /// Bytes went out.
    pub fn wrote(&self) {
        self.blocked.store(0, Ordering::Relaxed);
        self.touch();
    }

    /// What the socket holds unsent now (`None`: the system does not say).
    /// Less than at the last look is progress, though no write could go on
    /// yet: the peer reads, however slowly (a TCP socket takes writes again
    /// only once much of what it holds has gone).
    pub fn unsent_now(&self, unsent: Option<u32>) {
        let Some(n) = unsent else { return };
        let before = self.unsent.swap(u64::from(n) + 1, Ordering::Relaxed);
        if before != 0 && u64::from(n) + 1 < before {
            self.blocked.store(0, Ordering::Relaxed);
        }
    }

    /// Whether what the connection was sent has not moved for `timeout`:
    /// its peer stopped reading (a WebSocket as an HTTP connection).
    pub fn stalled_for(&self, timeout: Duration) -> bool {
        match self.blocked.load(Ordering::Relaxed) {
            0 => false,
            since => Duration::from_millis(now_ms().saturating_sub(since - 1)) >= timeout,
        }
    }

    pub fn set_upgraded(&self) {
        self.upgraded.store(true, Ordering::Relaxed);
    }

    pub fn upgraded(&self) -> bool {
        self.upgraded.load(Ordering::Relaxed)
    }

    /// Counts an HTTP request as in flight until the guard drops.
    pub fn request(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(self)
    }

    /// Whether an HTTP connection has been idle for `timeout`: nothing in
    /// flight and no byte moved. A WebSocket is never idle here (pings
    /// decide whether it is alive).
    pub fn idle_for(&self, timeout: Duration) -> bool {
        let quiet = Duration::from_millis(now_ms().saturating_sub(self.last.load(Ordering::Relaxed)));
        !self.upgraded() && self.in_flight.load(Ordering::Relaxed) == 0 && quiet >= timeout
    }
}

/// An HTTP request in flight; see [`Activity::request`].
pub struct InFlight<'a>(&'a Activity);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_only_with_nothing_in_flight_for_the_whole_timeout() {
        let a = Activity::new();
        assert!(!a.idle_for(Duration::from_secs(60)), "just active");
        assert!(a.idle_for(Duration::ZERO));
        {
            let _req = a.request();
            assert!(!a.idle_for(Duration::ZERO), "a request in flight");
        }
        assert!(a.idle_for(Duration::ZERO));
        a.set_upgraded();
        assert!(!a.idle_for(Duration::ZERO), "a WebSocket is judged by its pings");
    }

    #[test]
    fn stalled_while_a_write_waits_and_not_once_bytes_go_out() {
        let a = Activity::new();
        assert!(!a.stalled_for(Duration::ZERO), "no write waits");
        a.write_blocked();
        assert!(a.stalled_for(Duration::ZERO));
        assert!(!a.stalled_for(Duration::from_secs(60)), "not for that long yet");
        a.write_blocked();
        assert!(a.stalled_for(Duration::ZERO), "counted from the first");
        a.wrote();
        assert!(!a.stalled_for(Duration::ZERO));
    }

    #[test]
    fn less_unsent_than_at_the_last_look_is_progress() {
        let a = Activity::new();
        a.write_blocked();
        a.unsent_now(Some(4000));
        assert!(a.stalled_for(Duration::ZERO), "a first look is no progress");
        a.unsent_now(Some(4000));
        a.unsent_now(None);
        assert!(a.stalled_for(Duration::ZERO), "nothing went, or nothing is known");
        a.unsent_now(Some(3000));
        assert!(!a.stalled_for(Duration::ZERO), "the peer took some");
    }
}
