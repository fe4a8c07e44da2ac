//! A PostgreSQL connection cut as it commits: the commit goes through, its
//! answer never reaches kdd (the server restarted, the network cut at that
//! moment). kdd sees a failed write and tries it again (`db::outage`); the
//! second try must find what the first wrote.
//!
//! [`CommitCut`] sits between kdd and the test cluster on a Unix socket of
//! its own (the cluster listens on one only, `.ci/pg`), passing the
//! protocol's messages on as they come. Armed with a piece of SQL, it
//! watches each connection's transaction (`BEGIN` … `COMMIT`, as simple
//! queries, the statements in between by the names their `Parse` gave
//! them): the first transaction that ran a statement with that SQL has its
//! `COMMIT` passed to the server, the server's answer to it read and
//! dropped, and the connection closed both ways. Or, armed late
//! ([`CommitCut::arm_late`]), kdd's side is closed first and the `COMMIT`
//! reaches the server a while after: kdd tries again while its first try
//! is still open on the server — what kdd sent on its other connections
//! meanwhile is kept ([`CommitCut::sent_while_held`]), for a test to see
//! that it did. Once: the next transactions pass.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The cluster's socket file in its directory (`.ci/pg`: the default port).
const SOCKET: &str = ".s.PGSQL.5432";

/// The proxy: its directory holds the socket kdd connects to.
pub struct CommitCut {
    dir: tempfile::TempDir,
    state: Arc<State>,
}

#[derive(Default)]
struct State {
    /// SQL whose transaction's commit is cut next, until one is, and how
    /// long the commit is held back from the server (cut late).
    armed: Mutex<Option<(String, Option<Duration>)>>,
    /// Commits cut so far.
    cuts: AtomicUsize,
    /// A commit cut late is held back from the server now.
    holding: AtomicBool,
    /// The SQL kdd ran on other connections while a commit was held back.
    while_held: Mutex<Vec<String>>,
}

impl CommitCut {
    /// A proxy in front of the cluster `url` names (its socket directory
    /// is the URL's host); `None` when the URL names no directory.
    pub fn start(url: &str) -> Option<CommitCut> {
        let upstream = socket_dir(url)?.join(SOCKET);
        let dir = tempfile::Builder::new().prefix("kd-cut-").tempdir().expect("tempdir");
        let listener = UnixListener::bind(dir.path().join(SOCKET)).expect("the proxy's socket");
        let state = Arc::new(State::default());
        let shared = state.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let (state, upstream) = (shared.clone(), upstream.clone());
                std::thread::spawn(move || {
                    if let Ok(server) = UnixStream::connect(&upstream) {
                        relay(client, server, &state);
                    }
                });
            }
        });
        Some(CommitCut { dir, state })
    }

    /// `url` with the proxy in place of the cluster's socket directory.
    pub fn url(&self, url: &str) -> String {
        let theirs = url_dir(url).expect("a URL with a socket directory");
        let ours = self.dir.path().to_str().expect("a temporary path is UTF-8").replace('/', "%2F");
        url.replacen(theirs, &ours, 1)
    }

    /// Cuts the commit of the next transaction that runs a statement
    /// whose SQL holds `sql`.
    pub fn arm(&self, sql: &str) {
        *self.state.armed.lock().expect("lock") = Some((sql.to_string(), None));
    }

    /// Cuts kdd's side of the next transaction that runs a statement whose
    /// SQL holds `sql` as it commits, and passes the `COMMIT` to the server
    /// `after` that.
    pub fn arm_late(&self, sql: &str, after: Duration) {
        *self.state.armed.lock().expect("lock") = Some((sql.to_string(), Some(after)));
    }

    /// The SQL kdd ran on its other connections while a commit cut late
    /// was held back from the server.
    pub fn sent_while_held(&self) -> Vec<String> {
        self.state.while_held.lock().expect("lock").clone()
    }

    /// How many commits were cut.
    pub fn cuts(&self) -> usize {
        self.state.cuts.load(Ordering::SeqCst)
    }
}

/// The socket directory of a `postgres://user@%2Fdir/db` URL, as written.
fn url_dir(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let host = rest.split('/').next()?;
    let host = host.rsplit_once('@').map_or(host, |(_, h)| h);
    host.starts_with("%2F").then_some(host)
}

fn socket_dir(url: &str) -> Option<PathBuf> {
    Some(PathBuf::from(url_dir(url)?.replace("%2F", "/")))
}

/// Passes messages both ways until either side closes, or the armed
/// commit is cut.
fn relay(client: UnixStream, server: UnixStream, state: &State) {
    let (mut from_client, mut to_server) = (client.try_clone().expect("clone"), server.try_clone().expect("clone"));
    let (mut from_server, mut to_client) = (server, client);
    // Set by the client's side once it passed the armed COMMIT on: the
    // server's side then drops what comes, up to the commit's answer, and
    // closes both.
    let cutting = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = cutting.clone();
    let answers = std::thread::spawn(move || {
        // Before the first typed message: SSLRequest's one-byte answer.
        let mut startup = true;
        loop {
            let mut kind = [0u8; 1];
            if from_server.read_exact(&mut kind).is_err() {
                break;
            }
            if startup && (kind[0] == b'N' || kind[0] == b'S') {
                if to_client.write_all(&kind).is_err() {
                    break;
                }
                continue;
            }
            startup = false;
            let Some(body) = read_body(&mut from_server) else { break };
            if seen.load(Ordering::SeqCst) {
                // The commit's answer: dropped; then both ends closed.
                if kind[0] == b'Z' {
                    let _ = to_client.shutdown(std::net::Shutdown::Both);
                    let _ = from_server.shutdown(std::net::Shutdown::Both);
                    break;
                }
                continue;
            }
            let mut frame = kind.to_vec();
            frame.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
            frame.extend_from_slice(&body);
            if to_client.write_all(&frame).is_err() {
                break;
            }
        }
        // The server closed: so is kdd's side.
        let _ = to_client.shutdown(std::net::Shutdown::Both);
    });
    let mut statements: HashMap<String, String> = HashMap::new();
    let mut touched = false;
    // The untyped start (an SSLRequest, then the StartupMessage).
    loop {
        let Some(body) = read_body(&mut from_client) else { return };
        let mut frame = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(&body);
        if to_server.write_all(&frame).is_err() {
            return;
        }
        // SSLRequest's code: the StartupMessage comes next.
        if body.get(..4) != Some(&80877103u32.to_be_bytes()[..]) {
            break;
        }
    }
    loop {
        let mut kind = [0u8; 1];
        if from_client.read_exact(&mut kind).is_err() {
            break;
        }
        let Some(body) = read_body(&mut from_client) else { break };
        let cut = match kind[0] {
            b'P' => {
                let mut parts = body.split(|b| *b == 0);
                let name = String::from_utf8_lossy(parts.next().unwrap_or_default()).to_string();
                let sql = String::from_utf8_lossy(parts.next().unwrap_or_default()).to_string();
                touched |= armed_for(state, &sql);
                statements.insert(name, sql);
                None
            }
            b'B' => {
                let mut parts = body.split(|b| *b == 0);
                let _portal = parts.next();
                let name = String::from_utf8_lossy(parts.next().unwrap_or_default()).to_string();
                touched |= statements.get(&name).is_some_and(|sql| armed_for(state, sql));
                if state.holding.load(Ordering::SeqCst)
                    && let Some(sql) = statements.get(&name)
                {
                    state.while_held.lock().expect("lock").push(sql.clone());
                }
                None
            }
            b'Q' => {
                let sql = String::from_utf8_lossy(&body).trim_end_matches('\0').trim().to_uppercase();
                if sql == "BEGIN" || sql.starts_with("START TRANSACTION") {
                    touched = false;
                }
                if sql == "COMMIT" && touched { state.armed.lock().expect("lock").take() } else { None }
            }
            _ => None,
        };
        let mut frame = kind.to_vec();
        frame.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        frame.extend_from_slice(&body);
        if let Some((_, late)) = &cut {
            cutting.store(true, Ordering::SeqCst);
            state.cuts.fetch_add(1, Ordering::SeqCst);
            if let Some(after) = late {
                // kdd's side first; the commit reaches the server later.
                let _ = from_client.shutdown(std::net::Shutdown::Both);
                state.holding.store(true, Ordering::SeqCst);
                std::thread::sleep(*after);
            }
        }
        let written = to_server.write_all(&frame);
        if cut.is_some() {
            // The commit held back (if it was) is on its way now.
            state.holding.store(false, Ordering::SeqCst);
        }
        if written.is_err() {
            break;
        }
        if cut.is_some() {
            // The server's side closes both once the commit is answered.
            let _ = answers.join();
            return;
        }
    }
    let _ = to_server.shutdown(std::net::Shutdown::Both);
    let _ = answers.join();
}

/// Whether the commit is armed for a statement of `sql`.
fn armed_for(state: &State, sql: &str) -> bool {
    state.armed.lock().expect("lock").as_ref().is_some_and(|(armed, _)| sql.contains(armed.as_str()))
}

/// A message's length (which counts itself) and the rest of it.
fn read_body(from: &mut UnixStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 4];
    from.read_exact(&mut len).ok()?;
    let len = u32::from_be_bytes(len) as usize;
    let mut body = vec![0u8; len.checked_sub(4)?];
    from.read_exact(&mut body).ok()?;
    Some(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_its_socket_directory() {
        let url = "postgres://postgres@%2Ftmp%2Fkd-pg.abc/kd_e2e_1";
        assert_eq!(socket_dir(url), Some(PathBuf::from("/tmp/kd-pg.abc")));
        assert_eq!(url_dir("postgres://u@localhost:5432/db"), None);
    }
}
