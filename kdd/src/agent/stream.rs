//! What a run tells as it goes, whatever its transport: that its agent
//! started (to subscribers and the registry), and the text it streams,
//! capped by `council.max_answer_bytes`.

use super::Runner;
use super::prepare::Held;
use super::registry::{Run, StopReason};

/// The run's agent is `pid` (started at `started`): said to subscribers
/// and recorded, with the session the run holds.
/// Refused (`Err`, saying why) when the registry has the member answering
/// on the thread already, on another node: the run must not go on.
pub(super) async fn record_start(
    d: &Runner,
    run: &Run,
    pid: u32,
    started: Option<u64>,
    held: Option<&Held>,
) -> Result<(), String> {
    run.set_started(pid);
    let what = format!("the start of the agent of the run {}", run.id);
    let session = held.map(|h| h.id.clone());
    // A try after a failure may follow a commit whose answer was lost.
    let write = |again| d.db.run_started(run.info(), pid, started, session.clone(), again);
    let recorded = d.db.until_back(&what, || d.is_closed(), write).await;
    match recorded {
        Ok(()) => Ok(()),
        Err(e @ crate::db::DbError::MemberBusy { .. }) => Err(e.to_string()),
        Err(e) => {
            tracing::error!(run = run.id, "cannot record the pid: {e}");
            Ok(())
        }
    }
}

/// Streams `text` to subscribers as far as the answer's cap allows. Past
/// the cap the rest is dropped, the run is stopped, and false is returned.
pub(super) fn publish(d: &Runner, run: &Run, text: &str, cap: usize) -> bool {
    let room = cap.saturating_sub(run.text_len());
    let (kept, fits) =
        if text.len() <= room { (text, true) } else { (&text[..floor_char_boundary(text, room)], false) };
    if !kept.is_empty() {
        run.push_delta(&d.hub, kept);
    }
    if !fits {
        run.stop(StopReason::TooLong);
    }
    fits
}

/// The largest char boundary of `s` at or before `at`.
fn floor_char_boundary(s: &str, at: usize) -> usize {
    (0..=at.min(s.len())).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0)
}
