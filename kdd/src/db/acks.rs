//! Acknowledgements owed for emergency broadcasts (F-X4): one per member
//! per broadcast, settled by the member's next answer (a run that was given
//! the broadcast) or by `kd ack`; every settlement is an audit event. Here:
//! what a settlement records and which broadcasts it tells of, for both
//! engines.

use kd_proto::types::Ack;
use serde_json::json;

use super::events::NewEvent;
use super::row::Columns;

/// What `member` settling `a` on `thread` (`how`: by an answer, or `kd
/// ack`) records.
pub(crate) fn settled<'a>(thread: &'a str, member: &'a str, a: &'a Ack, how: &str) -> NewEvent<'a> {
    NewEvent {
        kind: "system.emergency_acknowledge",
        thread: Some(thread),
        agent: Some(member),
        from: Some(member),
        correlation_id: Some(&a.broadcast),
        data: json!({"broadcast": a.broadcast, "seq": a.seq, "how": how}),
        ..Default::default()
    }
}

/// The settled acknowledgements `acked`, one per broadcast: subscribers
/// hear who still owes each.
pub(crate) fn broadcasts(acked: &[Ack]) -> Vec<&Ack> {
    let mut seen = std::collections::HashSet::new();
    acked.iter().filter(|a| seen.insert(a.broadcast.as_str())).collect()
}

/// An acknowledgement as both engines select it: broadcast, thread, seq,
/// member, acked_at, how.
pub(crate) fn read<R: Columns>(r: &R) -> Result<Ack, R::Error> {
    let acked_at = r.opt_int(4)?;
    Ok(Ack {
        broadcast: r.text(0)?,
        thread: r.text(1)?,
        seq: r.count(2)?,
        member: r.text(3)?,
        acknowledged: acked_at.is_some(),
        acked_at_ms: acked_at,
        how: r.opt_text(5)?,
    })
}
