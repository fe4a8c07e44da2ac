//! Talking to a service manager (systemd, `Type=notify`; F-D6): `READY=1`
//! with a `STATUS=` once the socket accepts connections, `STOPPING=1` when
//! shutdown begins, and watchdog pings at half `WatchdogSec` when the
//! manager asks for them. Nothing happens without `NOTIFY_SOCKET`; a
//! failure to notify is logged, never fatal. Agents never inherit the
//! manager's variables (see [`MANAGER_VARS`]).

use std::path::Path;
use std::time::Duration;

use sd_notify::NotifyState;
use tokio_util::sync::CancellationToken;

/// The service manager's variables for kdd itself, removed from every
/// agent's environment: an agent must not speak for the daemon.
pub const MANAGER_VARS: &[&str] =
    &["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES"];

/// Whether the service manager passed the listening socket.
static SOCKET_ACTIVATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Records that the listening socket came from the service manager.
pub fn set_socket_activated() {
    SOCKET_ACTIVATED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether the listening socket came from the service manager: stopping
/// this daemon does not stop the socket, and the next client starts it again.
pub fn socket_activated() -> bool {
    SOCKET_ACTIVATED.load(std::sync::atomic::Ordering::Relaxed)
}

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(false, states) {
        tracing::debug!("cannot notify the service manager: {e}");
    }
}

/// The socket accepts connections.
pub fn ready(socket: &Path) {
    let status = format!("listening on {}", socket.display());
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

/// Shutdown has begun.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
}

/// Pings the watchdog at half its interval until `stop`, when the manager
/// set one for this process.
pub fn spawn_watchdog(stop: CancellationToken) {
    let mut usec = 0;
    if !sd_notify::watchdog_enabled(false, &mut usec) || usec == 0 {
        return;
    }
    let every = Duration::from_micros(usec / 2).max(Duration::from_millis(10));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => send(&[NotifyState::Watchdog]),
            }
        }
    });
}
