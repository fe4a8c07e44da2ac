//! The `desktop` sink: a freedesktop notification over the D-Bus session
//! bus (notify-rust on libdbus, built from its own sources; Notification
//! Center on macOS); the answer is the notification's id.
//!
//! libdbus blocks, so the calls are made by one thread of their own, one
//! at a time, [`WAITING`] at most waiting behind it (past them a call is
//! answered at once that the desktop is busy). The caller waits for its
//! answer up to `notify.timeout` and no longer; a call the thread has not
//! started by then is skipped, one it has started ends on its own (libdbus
//! gives up on a reply after 2 s, on a bus that never answers after 25 s).
//! Nothing waits for the thread: it is not the runtime's, so kdd stops
//! without it.

use std::sync::OnceLock;
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant};

use kd_proto::notify::{Notification, SinkAnswer};
use tokio::sync::oneshot;

/// Calls waiting for the desktop's thread.
const WAITING: usize = 4;

/// A notification to show, its answer's channel and when its caller
/// stops waiting.
struct Call {
    note: notify_rust::Notification,
    answer: oneshot::Sender<Result<String, String>>,
    until: Instant,
}

/// The desktop's thread, started at the first call.
static THREAD: OnceLock<Result<SyncSender<Call>, String>> = OnceLock::new();

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
    let thread = THREAD.get_or_init(start).as_ref().map_err(Clone::clone)?;
    let (answer, answered) = oneshot::channel();
    match thread.try_send(Call { note, answer, until: Instant::now() + timeout }) {
        Ok(()) => {}
        Err(TrySendError::Full(_)) => {
            return Err(format!("the desktop has not answered the {WAITING} notifications before this one"));
        }
        Err(TrySendError::Disconnected(_)) => return Err("the desktop's thread has stopped".into()),
    }
    match tokio::time::timeout(timeout, answered).await {
        Ok(Ok(result)) => result,
        Ok(Err(_)) => Err("the desktop's thread has stopped".into()),
        Err(_) => Err(format!("no answer within {} s", timeout.as_secs_f32())),
    }
}

/// Starts the desktop's thread.
fn start() -> Result<SyncSender<Call>, String> {
    let (calls, waiting) = sync_channel::<Call>(WAITING);
    std::thread::Builder::new()
        .name("kd-desktop".into())
        .spawn(move || {
            for call in waiting {
                if Instant::now() >= call.until {
                    continue;
                }
                let result = call.note.show().map(|h| shown(&h)).map_err(|e| super::sinks::describe(&e));
                let _ = call.answer.send(result);
            }
        })
        .map_err(|e| format!("cannot start the desktop's thread: {e}"))?;
    Ok(calls)
}

#[cfg(all(unix, not(target_os = "macos")))]
const TARGET: &str = "org.freedesktop.Notifications";
#[cfg(target_os = "macos")]
const TARGET: &str = "Notification Center";
#[cfg(not(unix))]
const TARGET: &str = "the desktop";

#[cfg(all(unix, not(target_os = "macos")))]
fn shown(h: &notify_rust::NotificationHandle) -> String {
    format!("notification {}", h.id())
}

#[cfg(not(all(unix, not(target_os = "macos"))))]
fn shown<T>(_: &T) -> String {
    "shown".into()
}
