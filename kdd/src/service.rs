//! Talking to a service manager (systemd, `Type=notify`; F-D6): `READY=1`
//! with a `STATUS=` once the socket accepts connections, `STOPPING=1` when
//! shutdown begins, and watchdog pings at half `WatchdogSec` when the
//! manager asks for them. Nothing happens without `NOTIFY_SOCKET`; a
//! failure to notify is logged, never fatal, and never waits: a manager
//! whose queue is full (it does not read) loses the notification, which is
//! counted, instead of holding kdd up — shutdown included. Agents never
//! inherit the manager's variables (see [`MANAGER_VARS`]).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// Notifications the manager's full queue could not take.
static DROPPED: AtomicU64 = AtomicU64::new(0);

/// How many notifications were dropped because the manager did not read.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

fn send(states: &[NotifyState<'_>]) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let message: String = states.iter().map(|s| format!("{s}\n")).collect();
    match send_now(&path, message.as_bytes()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
            if DROPPED.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!("the service manager does not read its notifications; dropping them");
            }
        }
        Err(e) => tracing::debug!("cannot notify the service manager: {e}"),
    }
}

/// One datagram to `path` (`@name`: Linux's abstract namespace), sent
/// without waiting.
fn send_now(path: &OsStr, message: &[u8]) -> std::io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    sock.set_nonblocking(true)?;
    let sent = match path.as_bytes().strip_prefix(b"@") {
        Some(name) => send_abstract(&sock, name, message)?,
        None => sock.send_to(message, path)?,
    };
    if sent != message.len() {
        return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "incomplete notification"));
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn send_abstract(sock: &UnixDatagram, name: &[u8], message: &[u8]) -> std::io::Result<usize> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
    sock.send_to_addr(message, &addr)
}

#[cfg(not(target_os = "linux"))]
fn send_abstract(_: &UnixDatagram, _: &[u8], _: &[u8]) -> std::io::Result<usize> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "abstract sockets are Linux's"))
}

/// The socket accepts connections.
pub fn ready(socket: &Path) {
    let status = format!("listening on {}", socket.display());
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
}

/// Shutdown has begun.
pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("stopping")]);
    let n = dropped();
    if n > 0 {
        tracing::warn!("{n} notification(s) to the service manager dropped: it did not read them");
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_is_would_block_not_a_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let manager = UnixDatagram::bind(&path).unwrap();
        let mut sent = 0;
        let err = loop {
            match send_now(path.as_os_str(), b"WATCHDOG=1\n") {
                Ok(()) => sent += 1,
                Err(e) => break e,
            }
        };
        assert_eq!(err.kind(), std::io::ErrorKind::WouldBlock, "{err}");
        assert!(sent > 0);
        let mut buf = [0u8; 64];
        let n = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"WATCHDOG=1\n");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn an_abstract_notify_socket_is_reached() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("kd-test-notify-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let manager = UnixDatagram::bind_addr(&addr).unwrap();
        send_now(OsStr::new(&format!("@{name}")), b"READY=1\n").unwrap();
        let mut buf = [0u8; 64];
        let n = manager.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\n");
    }
}
