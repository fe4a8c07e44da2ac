//! What a run over a long-lived agent (codex app-server, ACP) shares with
//! the other: the text it streams (label stripped, capped by
//! `council.max_answer_bytes`, saved about once a second), its clocks (the
//! run's timeout, the grace after a stop, the save tick), and the bound on
//! every wait for the agent before the turn ([`bounded`]): the run's
//! timeout and its stop.

use std::os::unix::process::ExitStatusExt;
use std::pin::Pin;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::time::{Instant, Interval, Sleep};

use super::Runner;
use super::outcome::outcome;
use super::parse::{Parsed, Transcript};
use super::prepare::Held;
use super::registry::{Run, StopReason};
use super::spec::Spec;
use super::stream::publish;
use crate::db::runs::Finish;
use crate::prompt::LabelStripper;

/// How often the text streamed so far is saved.
const SAVE_EVERY: Duration = Duration::from_secs(1);

/// The text a run streams.
pub(super) struct Streamed<'a> {
    d: &'a Runner,
    run: &'a Run,
    label: LabelStripper,
    cap: usize,
    over_cap: bool,
    saved: usize,
    /// The last activity told.
    activity: Option<String>,
}

impl<'a> Streamed<'a> {
    pub fn new(d: &'a Runner, run: &'a Run, spec: &Spec) -> Streamed<'a> {
        Streamed {
            d,
            run,
            label: LabelStripper::new(&run.member),
            cap: usize::try_from(spec.max_answer_bytes).unwrap_or(usize::MAX),
            over_cap: false,
            saved: 0,
            activity: None,
        }
    }

    /// Folds `items` into the transcript and streams the text they add;
    /// an activity goes to subscribers when it differs from the last one.
    pub fn take(&mut self, transcript: &mut Transcript, items: Vec<Parsed>) {
        let mut delta = String::new();
        for item in items {
            if let Parsed::Activity(what) = &item {
                if self.activity.as_deref() != Some(what) {
                    self.run.push_activity(&self.d.hub, what);
                    self.activity = Some(what.clone());
                }
                continue;
            }
            if let Some(text) = transcript.apply(item) {
                delta.push_str(&text);
            }
        }
        if !self.over_cap && !delta.is_empty() {
            self.over_cap = !publish(self.d, self.run, &self.label.push(&delta), self.cap);
        }
    }

    /// Saves what was streamed since the last save.
    pub async fn save(&mut self) {
        let (new, len) = self.run.text_since(self.saved);
        if !new.is_empty() {
            self.saved = len;
            if let Err(e) = self.d.db.append_run_partial(self.run.id.clone(), new).await {
                tracing::warn!(run = self.run.id, "cannot save partial text: {e}");
            }
        }
    }

    /// Streams what the label stripper still held.
    pub fn finish(&mut self) {
        if !self.over_cap {
            publish(self.d, self.run, &self.label.finish(), self.cap);
        }
    }
}

/// A turn's clocks, for its `select!`.
pub(super) struct Clocks {
    /// The run's timeout.
    pub timeout: Pin<Box<Sleep>>,
    /// Once the run is stopped: how long the agent has to end the turn.
    pub give_up: Pin<Box<Sleep>>,
    pub save: Interval,
}

impl Clocks {
    /// The clocks of a turn that must end by `deadline` (the run's).
    pub async fn new(deadline: Instant) -> Clocks {
        let mut save = tokio::time::interval(SAVE_EVERY);
        save.tick().await;
        Clocks {
            timeout: Box::pin(tokio::time::sleep_until(deadline)),
            give_up: Box::pin(tokio::time::sleep(Duration::from_secs(365 * 24 * 3600))),
            save,
        }
    }

    /// The run was stopped: the agent has `grace` to end its turn.
    pub fn stopping(&mut self, grace: Duration) {
        self.give_up.as_mut().reset(Instant::now() + grace);
    }
}

/// Awaits `wait` — the agent's start, or its answer to a request — for as
/// long as the run may wait: `None` once the run was stopped (a cancel, the
/// daemon's stop) or reached `deadline`, its timeout (the run is then
/// stopped as timed out). Dropping `wait` abandons it (a start abandoned
/// mid-handshake ends its process).
pub(super) async fn bounded<T>(run: &Run, deadline: Instant, wait: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        v = wait => Some(v),
        _ = run.stopped() => None,
        _ = tokio::time::sleep_until(deadline) => {
            run.stop(StopReason::TimedOut);
            None
        }
    }
}

/// The run's end from its transcript; the session remembers the prompt.
pub(super) fn finish(run: &Run, spec: &Spec, transcript: &Transcript, held: Option<&Held>) -> Finish {
    // A turn has no exit status: how it ended is in the transcript.
    let mut finish = outcome(run, spec, transcript, Some(ExitStatus::from_raw(0)), "");
    finish.meta.exit_status = None;
    finish.session = held.map(|h| h.end(true));
    finish
}
