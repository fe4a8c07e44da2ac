//! Conversation locks (F-R5): TTL, fencing tokens that grow with every
//! acquisition (persisted, so they keep growing across restarts), and
//! dead-holder detection. Expiry uses wall-clock times stored in the row, so
//! a lock expires correctly across a daemon restart. Here: the rules both
//! engines decide by — whether a lock is free ([`Held::is_free`]), what an
//! acquisition does ([`acquiring`]), what it records and answers, and when
//! a token is stale.

use kd_proto::types::{Fence, Lock, LockOutcome};
use serde_json::{Value, json};

use super::row::Columns;
use super::{DbError, DbResult};

/// A lock as its row holds it.
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

    /// The lock on `resource` as `locks.list` shows it, unless it is free.
    pub(crate) fn shown(self, resource: String, now: i64, alive: &dyn Fn(u32) -> bool) -> Option<Lock> {
        self.is_free(now, alive).is_none().then(|| Lock {
            resource,
            holder: self.holder,
            pid: self.pid,
            token: self.token,
            acquired_at_ms: self.acquired_at,
            expires_at_ms: self.expires_at,
            expires_in_ms: (self.expires_at - now).max(0) as u64,
        })
    }
}

/// What an acquisition of a lock does, given who holds it.
pub(crate) enum Acquire {
    /// The holder's own lock (same holder and pid): its TTL is renewed.
    Renew { token: u64 },
    /// Held by another, live: refused.
    Deny { holder: String, pid: Option<u32>, expires_in_ms: u64 },
    /// Free: taken with a new token; `freed`: why its previous holder lost
    /// it, who it was and its token.
    Take { freed: Option<(&'static str, String, u64)> },
}

/// What `holder` (`pid`) acquiring a lock `previous` holds does at `now`.
pub(crate) fn acquiring(
    previous: Option<&Held>,
    now: i64,
    holder: &str,
    pid: Option<u32>,
    alive: &dyn Fn(u32) -> bool,
) -> Acquire {
    let Some(h) = previous else { return Acquire::Take { freed: None } };
    match h.is_free(now, alive) {
        None if h.holder == holder && h.pid == pid => Acquire::Renew { token: h.token },
        None => {
            Acquire::Deny { holder: h.holder.clone(), pid: h.pid, expires_in_ms: (h.expires_at - now).max(0) as u64 }
        }
        Some(reason) => Acquire::Take { freed: Some((reason, h.holder.clone(), h.token)) },
    }
}

impl Acquire {
    /// What the acquisition records (`lock.renew`, `lock.deny`,
    /// `lock.acquire`; `token`: the new one, when taken) and answers,
    /// the lock then expiring at `expires_at`.
    pub(crate) fn outcome(
        self,
        resource: &str,
        token: u64,
        ttl_ms: u64,
        pid: Option<u32>,
        expires_at: i64,
    ) -> (&'static str, Value, LockOutcome) {
        let acquired = |token, renewed| LockOutcome::Acquired {
            resource: resource.into(),
            token,
            expires_at_ms: expires_at,
            renewed,
        };
        match self {
            Acquire::Renew { token } => {
                ("lock.renew", json!({"token": token, "ttl_ms": ttl_ms}), acquired(token, true))
            }
            Acquire::Deny { holder, pid, expires_in_ms } => (
                "lock.deny",
                json!({"holder": holder, "pid": pid, "expires_in_ms": expires_in_ms}),
                LockOutcome::Denied { resource: resource.into(), holder, pid, expires_in_ms },
            ),
            Acquire::Take { freed: Some((reason, prev, prev_token)) } => (
                "lock.acquire",
                json!({"token": token, "ttl_ms": ttl_ms, "pid": pid, "freed": reason, "previous_holder": prev,
                       "previous_token": prev_token}),
                acquired(token, false),
            ),
            Acquire::Take { freed: None } => {
                ("lock.acquire", json!({"token": token, "ttl_ms": ttl_ms, "pid": pid}), acquired(token, false))
            }
        }
    }
}

/// Whether a fenced write may go on: `fence.token` is the lock's current,
/// unexpired token (the lock `held` now).
pub(crate) fn check_fence(held: Option<Held>, now: i64, fence: &Fence) -> DbResult<()> {
    match held {
        Some(h) if h.token == fence.token && h.expires_at > now => Ok(()),
        other => Err(DbError::StaleToken {
            resource: fence.resource.clone(),
            token: fence.token,
            current: other.filter(|h| h.expires_at > now).map(|h| h.token),
        }),
    }
}

/// A release with a token the lock (`held`) no longer carries.
pub(crate) fn stale(resource: &str, token: u64, held: Option<Held>) -> DbError {
    DbError::StaleToken { resource: resource.into(), token, current: held.map(|h| h.token) }
}

/// A lock's holder as both engines select it: resource, holder, pid,
/// token, acquired_at, expires_at.
pub(crate) fn read<R: Columns>(r: &R) -> Result<Held, R::Error> {
    Ok(Held {
        holder: r.text(1)?,
        pid: r.opt_int(2)?.map(|p| p as u32),
        token: r.count(3)?,
        acquired_at: r.int(4)?,
        expires_at: r.int(5)?,
    })
}
