//! STAND-IN until P2's `pgrun` lands (its locks.rs replaces this whole
//! file): only the fence check `messages::append` needs, with the same
//! signature.

use deadpool_postgres::GenericClient;
use kd_proto::types::Fence;

use crate::db::{DbError, DbResult};

/// Refuses a fenced write unless `fence.token` is the lock's current,
/// unexpired token. The lock row is read `FOR SHARE`: a takeover of the
/// resource waits for the fenced write to commit, or the write sees it.
pub(crate) async fn check_fence(c: &impl GenericClient, now: i64, fence: &Fence) -> DbResult<()> {
    let stmt = c.prepare_cached("SELECT token, expires_at FROM locks WHERE resource = $1 FOR SHARE").await?;
    let held = match c.query_opt(&stmt, &[&fence.resource]).await? {
        Some(r) => Some((r.try_get::<_, i64>(0)? as u64, r.try_get::<_, i64>(1)?)),
        None => None,
    };
    match held {
        Some((token, expires_at)) if token == fence.token && expires_at > now => Ok(()),
        other => Err(DbError::StaleToken {
            resource: fence.resource.clone(),
            token: fence.token,
            current: other.filter(|(_, expires_at)| *expires_at > now).map(|(token, _)| token),
        }),
    }
}
