//! What kdd does while its registry is away (SPEC §10): PostgreSQL stopped
//! or out of reach, a SQLite file's disk full or read-only, another process
//! holding its write lock. Such a failure is an *outage*
//! ([`DbError::is_outage`]): the operation failed because the database is
//! away, not because it was wrong, and the same operation goes through once
//! the database is back.
//!
//! What a client asks fails at once (`unavailable`): nothing was
//! acknowledged, the client may ask again. What kdd owes the registry for
//! what it is already doing — a run's start and end, the exchange
//! journal's steps — it keeps in memory and writes again
//! ([`Db::until_back`]): in order (each caller waits for its own write
//! before it goes on, so a run's end is written after its start, and the
//! exchange's next turn after it), [`RETRY_FIRST`] after the first failure,
//! doubling up to every [`RETRY_MAX`], for as long as kdd runs. What is kept
//! is bounded by what was in flight when the outage began: nothing new
//! starts without the registry (a run recorded as its agent is spawned,
//! `agent::prepare::Deferred`, is not so recorded while an outage is
//! known). An exchange therefore waits where it stands and goes on by
//! itself when the registry is back. If kdd stops
//! first, what was not written is what the next start's recovery handles:
//! the run is recorded interrupted and its member asked again.
//!
//! An outage is said once in the log when an operation first finds the
//! registry away, and once when one goes through again; each write kept
//! says so once, and how long it waited.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Db, DbError, DbResult};

/// How long a write kept in an outage waits before its first retry.
pub const RETRY_FIRST: Duration = Duration::from_millis(50);
/// The longest wait between two retries: a write kept in an outage is
/// written at most this long after the registry is back.
pub const RETRY_MAX: Duration = Duration::from_secs(1);

impl DbError {
    /// Whether the operation failed because the database is away for now
    /// (see the module): the same operation may go through later.
    pub fn is_outage(&self) -> bool {
        match self {
            DbError::Unavailable(_) | DbError::ReadOnly { .. } => true,
            DbError::Engine { cause, .. } => *cause != super::Cause::Failed,
            _ => false,
        }
    }
}

/// The wait after `wait` between two tries of a write kept.
fn next_wait(wait: Duration) -> Duration {
    (wait * 2).min(RETRY_MAX)
}

/// Since when the registry has been away, as the writes kept see it.
#[derive(Default)]
pub(super) struct Outage {
    since: Mutex<Option<Instant>>,
}

impl Outage {
    /// An operation found the registry away (`e`): said when it is the first.
    fn failed(&self, e: &DbError) {
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        if since.is_none() {
            *since = Some(Instant::now());
            tracing::warn!(
                "the registry is unavailable ({e}): kdd keeps what it has to write and writes it once the registry \
                 is back"
            );
        }
    }

    /// An operation went through: the outage, if there was one, is over.
    fn went_through(&self) {
        let mut since = self.since.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = since.take() {
            tracing::info!("the registry answers again, after {} ms", t.elapsed().as_millis());
        }
    }
}

/// Whether a write is a second try: kept through an outage
/// ([`Db::until_back`]), it may have failed *after* its commit —
/// PostgreSQL's connection cut as it committed, the answer lost. A write
/// that cannot be written twice then finds what its first try wrote and
/// answers it — no second row, no journal step refused to its own run, no
/// end or check result refused as another's — and does what the first try
/// could not (its events go out only after a commit that answered): a
/// run's start (`db::runs::RunStart::written`), its agent's start
/// (`db::runs::start_written`), its end (`db::runs::Finish::wrote`), a
/// check's end (`db::check::rules::written`). Else the run would fail
/// with its agent started, its answer never be told, or a failing member
/// never be sent back, and its exchange or work wait until kdd restarts.
/// The other writes kept are idempotent (the journal's steps, an
/// exchange's end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Again {
    /// The first try.
    First,
    /// A later try: what the write finds of its own may be its first try's.
    Retry,
}

impl Db {
    /// Runs `op` until it goes through or fails for another reason than an
    /// outage — retried as the module says while the registry is away,
    /// unless `stop` (the daemon stopping) says to give up, which then
    /// returns the outage's error. `op` is told whether it is tried
    /// [`Again`]. `what` names what is written, for the log (`the end of
    /// the run r-…`).
    pub async fn until_back<T, F, Fut>(&self, what: &str, stop: impl Fn() -> bool, op: F) -> DbResult<T>
    where
        F: FnMut(Again) -> Fut,
        Fut: Future<Output = DbResult<T>>,
    {
        self.outage.until_back(what, stop, op).await
    }

    /// Whether the registry is away, as the writes kept found it last
    /// (an outage said and not yet over).
    pub fn is_away(&self) -> bool {
        self.outage.is_on()
    }
}

impl Outage {
    async fn until_back<T, F, Fut>(&self, what: &str, stop: impl Fn() -> bool, mut op: F) -> DbResult<T>
    where
        F: FnMut(Again) -> Fut,
        Fut: Future<Output = DbResult<T>>,
    {
        let mut wait = RETRY_FIRST;
        let mut kept: Option<Instant> = None;
        loop {
            let again = if kept.is_some() { Again::Retry } else { Again::First };
            match op(again).await {
                Err(e) if e.is_outage() && !stop() => {
                    self.failed(&e);
                    if kept.is_none() {
                        tracing::warn!("{what} waits for the registry: {e}");
                        kept = Some(Instant::now());
                    }
                    tokio::time::sleep(wait).await;
                    wait = next_wait(wait);
                }
                result => {
                    if result.is_ok() {
                        self.went_through();
                        if let Some(t) = kept {
                            tracing::info!("{what} is written, {} ms late", t.elapsed().as_millis());
                        }
                    }
                    return result;
                }
            }
        }
    }

    /// Whether an outage is going on, as the writes kept see it.
    fn is_on(&self) -> bool {
        self.since.lock().unwrap_or_else(|p| p.into_inner()).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_database_away_is_an_outage_and_a_wrong_operation_is_not() {
        let engine = |cause| DbError::Engine { text: "x".into(), cause };
        assert!(engine(super::super::Cause::Away).is_outage());
        assert!(engine(super::super::Cause::ReadOnly).is_outage());
        assert!(DbError::Unavailable("connection refused".into()).is_outage());
        assert!(DbError::ReadOnly { path: "/x".into(), reason: "x".into() }.is_outage());
        for not in [
            DbError::NotFound("x".into()),
            DbError::Closed,
            DbError::Internal("x".into()),
            DbError::StepTaken(1),
            DbError::engine("syntax error [42601]"),
        ] {
            assert!(!not.is_outage(), "{not}");
        }
    }

    #[test]
    fn the_wait_between_tries_doubles_up_to_a_second() {
        let waits: Vec<u128> =
            std::iter::successors(Some(RETRY_FIRST), |w| Some(next_wait(*w))).take(8).map(|w| w.as_millis()).collect();
        assert_eq!(waits, [50, 100, 200, 400, 800, 1000, 1000, 1000]);
    }

    #[tokio::test]
    async fn a_write_is_tried_again_while_the_registry_is_away_and_goes_through_once_it_is_back() {
        let outage = Outage::default();
        let tries = std::cell::Cell::new(0);
        let started = Instant::now();
        let written = outage
            .until_back(
                "a test write",
                || false,
                |again| {
                    assert_eq!(again == Again::Retry, tries.get() > 0, "a try after a failure says so");
                    tries.set(tries.get() + 1);
                    let n = tries.get();
                    async move { if n < 4 { Err(DbError::Unavailable("refused".into())) } else { Ok(n) } }
                },
            )
            .await;
        assert_eq!(written.unwrap(), 4);
        // 50, 100, 200 ms between the tries (doubling up to RETRY_MAX).
        assert!(started.elapsed() >= Duration::from_millis(50 + 100 + 200), "{:?}", started.elapsed());
        assert!(!outage.is_on(), "the outage is over once a write went through");
    }

    #[tokio::test]
    async fn a_wrong_write_fails_at_once_and_a_stopping_daemon_gives_up() {
        let outage = Outage::default();
        let tries = std::cell::Cell::new(0);
        let wrong = outage
            .until_back(
                "a test write",
                || false,
                |_| {
                    tries.set(tries.get() + 1);
                    async { Err::<(), _>(DbError::NotFound("thread t".into())) }
                },
            )
            .await;
        assert!(matches!(wrong, Err(DbError::NotFound(_))));
        assert_eq!(tries.get(), 1);
        let stopping = std::cell::Cell::new(false);
        let given_up = outage
            .until_back(
                "a test write",
                || stopping.get(),
                |_| {
                    tries.set(tries.get() + 1);
                    if tries.get() == 4 {
                        stopping.set(true);
                    }
                    async { Err::<(), _>(DbError::Unavailable("refused".into())) }
                },
            )
            .await;
        assert!(matches!(given_up, Err(DbError::Unavailable(_))));
        assert_eq!(tries.get(), 4, "given up at the first failure after the daemon began to stop");
        assert!(outage.is_on());
    }
}
