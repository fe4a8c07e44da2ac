//! The open client connections, so that the daemon can end one it has given
//! up on (a client that stopped reading) and, at shutdown, every one still
//! open after the grace period: its socket is shut down under the HTTP and
//! WebSocket machinery, which then ends on its own.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::client::ClientId;

#[derive(Default)]
pub struct Connections {
    sockets: Mutex<HashMap<ClientId, OwnedFd>>,
}

/// A connection's entry, removed when the connection ends.
pub struct Registered {
    client: ClientId,
    connections: Arc<Connections>,
}

impl Registered {
    /// Ends this connection: reads and writes on it fail from now on.
    pub fn cut(&self) -> bool {
        self.connections.cut(self.client)
    }

    /// Bytes its socket holds that the peer has not taken yet; none where
    /// the system does not say.
    pub fn unsent(&self) -> Option<u32> {
        self.connections.map().get(&self.client).and_then(|fd| unsent(fd.as_fd()))
    }
}

/// What a socket holds unsent (`SIOCOUTQ`: for TCP what the peer has not
/// acknowledged, for a Unix socket what it has not read).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn unsent(fd: std::os::fd::BorrowedFd<'_>) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let mut n: libc::c_int = 0;
    // SAFETY: SIOCOUTQ (TIOCOUTQ on a socket) writes one int through the
    // pointer, which is valid for the call; the descriptor is borrowed.
    let done = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut n) };
    if done == 0 { u32::try_from(n).ok() } else { None }
}

#[cfg(not(target_os = "linux"))]
fn unsent(_: std::os::fd::BorrowedFd<'_>) -> Option<u32> {
    None
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.connections.map().remove(&self.client);
    }
}

impl Connections {
    fn map(&self) -> MutexGuard<'_, HashMap<ClientId, OwnedFd>> {
        self.sockets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps a duplicate of the connection's descriptor until the returned
    /// guard drops. Without one (out of descriptors) the connection works
    /// but cannot be cut short.
    pub fn register(self: &Arc<Self>, client: ClientId, stream: &impl AsFd) -> Registered {
        match stream.as_fd().try_clone_to_owned() {
            Ok(fd) => {
                self.map().insert(client, fd);
            }
            Err(e) => tracing::warn!("cannot keep a handle on a connection: {e}"),
        }
        Registered { client, connections: self.clone() }
    }

    /// Ends a client's connection: reads and writes on it fail from now on.
    pub fn cut(&self, client: ClientId) -> bool {
        match self.map().get(&client) {
            Some(fd) => rustix::net::shutdown(fd, rustix::net::Shutdown::Both).is_ok(),
            None => false,
        }
    }

    /// Ends every connection; returns how many there were.
    pub fn cut_all(&self) -> usize {
        let map = self.map();
        for fd in map.values() {
            let _ = rustix::net::shutdown(fd, rustix::net::Shutdown::Both);
        }
        map.len()
    }

    pub fn count(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::UnixStream;

    #[tokio::test]
    async fn a_cut_connection_ends_for_its_peer_and_leaves_the_registry_when_dropped() {
        let connections = Arc::new(Connections::default());
        let (ours, mut theirs) = UnixStream::pair().unwrap();
        let guard = connections.register(ClientId(7), &ours);
        assert_eq!(connections.count(), 1);
        assert!(connections.cut(ClientId(7)));
        let mut buf = [0u8; 1];
        assert_eq!(theirs.read(&mut buf).await.unwrap(), 0, "the peer sees the end");
        let mut ours = ours;
        assert!(ours.write_all(b"x").await.is_err(), "our side cannot write any more");
        drop(guard);
        assert_eq!(connections.count(), 0);
        assert!(!connections.cut(ClientId(7)));
    }
}
