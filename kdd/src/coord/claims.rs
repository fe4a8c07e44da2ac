//! Claims on a member's work: what one task at a time may do to it (the
//! follower of a `kd rebase` that may still conclude, ask again or undo
//! the merge in its worktree). A claim is held until dropped.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

/// The works (thread, member) claimed now.
#[derive(Debug, Default)]
pub struct Claims(Mutex<HashSet<(String, String)>>);

/// A work claimed: released when dropped.
#[derive(Debug)]
pub struct Claim {
    of: Arc<Claims>,
    key: (String, String),
}

impl Claims {
    /// Claims `member`'s work on `thread`; none while another claim holds it.
    pub fn take(self: &Arc<Self>, thread: &str, member: &str) -> Option<Claim> {
        let key = (thread.to_string(), member.to_string());
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        held.insert(key.clone()).then(|| Claim { of: self.clone(), key })
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.of.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_work_is_claimed_once_until_its_claim_is_dropped() {
        let claims = Arc::new(Claims::default());
        let claim = claims.take("t", "claude").expect("the first claim");
        assert!(claims.take("t", "claude").is_none(), "a second claim of the same work");
        let other = claims.take("t", "codex").expect("another member's work");
        assert!(claims.take("u", "claude").is_some(), "the same member on another thread");
        drop(claim);
        assert!(claims.take("t", "claude").is_some(), "claimed again once released");
        drop(other);
    }
}
