//! The `desktop` sink: a freedesktop notification over the D-Bus session
//! bus (notify-rust on libdbus; Notification Center on macOS, where the
//! answer is `shown`: it is handed over, its delivery is not told); the
//! answer is the notification's id.
//!
//! libdbus blocks, so the calls are made by a thread of their own, one at
//! a time, [`WAITING`] at most waiting behind it (past them a call is
//! answered at once that the desktop is busy). The caller waits for its
//! answer up to `notify.timeout` and no longer; a call the thread has not
//! started by then, or whose caller has gone, is skipped. A call started
//! is bounded by libdbus where the bus answers (the `Notify` call 2 s, the
//! connection's greeting 25 s), not where its `connect` hangs (a bus that
//! stopped accepting): a thread held by one call for [`STUCK`] is left to
//! end on its own and a new one takes the calls after it, [`THREADS`] at
//! most in all. A thread that could not start, or stopped, is started
//! again at the next call. Nothing waits for these threads: they are not
//! the runtime's, so kdd stops without them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kd_proto::notify::{Notification, SinkAnswer};
use tokio::sync::oneshot;

/// Calls waiting for the desktop's thread.
const WAITING: usize = 4;
/// How long one call may hold the thread before a new one takes over.
const STUCK: Duration = Duration::from_secs(60);
/// The desktop's threads at most, the ones left held included.
const THREADS: usize = 3;

/// A notification to show, its answer's channel and when its caller
/// stops waiting.
struct Call {
    note: notify_rust::Notification,
    answer: oneshot::Sender<Result<String, String>>,
    until: Instant,
}

/// The thread taking the calls: its queue, and since when the call it
/// makes has held it.
struct Thread {
    calls: SyncSender<Call>,
    busy_since: Arc<Mutex<Option<Instant>>>,
}

/// The thread the next call goes to.
static CURRENT: Mutex<Option<Thread>> = Mutex::new(None);
/// The desktop's threads alive.
static ALIVE: AtomicUsize = AtomicUsize::new(0);

/// Shows `n` on the desktop.
pub async fn desktop(n: &Notification, timeout: Duration) -> SinkAnswer {
    let started = Instant::now();
    let mut note = notify_rust::Notification::new();
    note.appname("kd").summary(&n.title).body(&n.text);
    #[cfg(all(unix, not(target_os = "macos")))]
    {
        note.hint(notify_rust::Hint::Category(format!("kd.{}", n.kind.as_str())));
        if n.kind == kd_proto::notify::NotifyKind::Approval {
            note.urgency(notify_rust::Urgency::Critical);
        }
    }
    let result = call(note, timeout).await;
    super::sinks::answer("desktop", TARGET.into(), started, result)
}

/// Hands `note` to the desktop's thread and waits for its answer up to
/// `timeout`.
async fn call(note: notify_rust::Notification, timeout: Duration) -> Result<String, String> {
    let (answer, answered) = oneshot::channel();
    let call = Call { note, answer, until: Instant::now() + timeout };
    {
        let mut current = CURRENT.lock().unwrap_or_else(PoisonError::into_inner);
        let thread = match current.take().filter(|t| !held(t)) {
            Some(t) => t,
            None => start()?,
        };
        match thread.calls.try_send(call) {
            Ok(()) => *current = Some(thread),
            Err(TrySendError::Full(_)) => {
                *current = Some(thread);
                return Err(format!("the desktop has not answered the {WAITING} notifications before this one"));
            }
            Err(TrySendError::Disconnected(_)) => return Err("the desktop's thread had stopped".into()),
        }
    }
    match tokio::time::timeout(timeout, answered).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err("the desktop's thread stopped".into()),
        Err(_) => Err(format!("no answer within {} s", timeout.as_secs_f32())),
    }
}

/// Whether one call has held `t` for [`STUCK`].
fn held(t: &Thread) -> bool {
    let since = *t.busy_since.lock().unwrap_or_else(PoisonError::into_inner);
    since.is_some_and(|s| s.elapsed() >= STUCK)
}

/// Starts a desktop's thread, unless [`THREADS`] are alive.
fn start() -> Result<Thread, String> {
    if ALIVE.fetch_add(1, Ordering::SeqCst) >= THREADS {
        ALIVE.fetch_sub(1, Ordering::SeqCst);
        return Err(format!("the desktop has held {THREADS} calls for over {} s", STUCK.as_secs()));
    }
    let (calls, waiting) = sync_channel::<Call>(WAITING);
    let busy_since = Arc::new(Mutex::new(None));
    let busy = busy_since.clone();
    let spawned = std::thread::Builder::new().name("kd-desktop".into()).spawn(move || {
        for call in waiting {
            if Instant::now() >= call.until || call.answer.is_closed() {
                continue;
            }
            *busy.lock().unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
            let shown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call.note.show()));
            *busy.lock().unwrap_or_else(PoisonError::into_inner) = None;
            let result = match shown {
                Ok(Ok(h)) => Ok(shown_as(&h)),
                Ok(Err(e)) => Err(super::sinks::describe(&e)),
                Err(_) => Err("the desktop's call failed".into()),
            };
            let _ = call.answer.send(result);
        }
        ALIVE.fetch_sub(1, Ordering::SeqCst);
    });
    match spawned {
        Ok(_) => Ok(Thread { calls, busy_since }),
        Err(e) => {
            ALIVE.fetch_sub(1, Ordering::SeqCst);
            Err(format!("cannot start the desktop's thread: {e}"))
        }
    }
}

#[cfg(all(unix, not(target_os = "macos")))]
const TARGET: &str = "org.freedesktop.Notifications";
#[cfg(target_os = "macos")]
const TARGET: &str = "Notification Center";
#[cfg(not(unix))]
const TARGET: &str = "the desktop";

#[cfg(all(unix, not(target_os = "macos")))]
fn shown_as(h: &notify_rust::NotificationHandle) -> String {
    format!("notification {}", h.id())
}

#[cfg(not(all(unix, not(target_os = "macos"))))]
fn shown_as<T>(_: &T) -> String {
    "shown".into()
}
