//! Conversation locks (F-R5): TTL, fencing tokens that grow with every
//! acquisition (persisted, so they keep growing across restarts), and
//! dead-holder detection. Expiry uses wall-clock times stored in the row, so
//! a lock expires correctly across a daemon restart.

pub(crate) struct Held {
    pub(crate) holder: String,
    pub(crate) pid: Option<u32>,
    pub(crate) token: u64,
    pub(crate) acquired_at: i64,
    pub(crate) expires_at: i64,
}

impl Held {
    /// Free when the TTL passed or the holder process died.
    pub(crate) fn is_free(&self, now: i64, alive: &dyn Fn(u32) -> bool) -> Option<&'static str> {
        if self.expires_at <= now {
            Some("expired")
        } else if self.pid.is_some_and(|p| !alive(p)) {
            Some("holder_dead")
        } else {
            None
        }
    }
}
