//! # kd-tests — end-to-end test support
//!
//! Every test starts its own real `kdd` ([`Kdd`]) on a socket and database
//! in a fresh temporary directory, and drives it with the real `kd` binary
//! ([`Kdd::kd`]), the Rust client ([`Kdd::client`]) or raw HTTP
//! ([`http_post`]). Binaries are taken from the cargo target directory, so
//! build them first: `cargo build --workspace --bins` (the README's test
//! command does). The registry is a SQLite file, or with
//! `KD_TEST_DB=postgres` a database of its own on a PostgreSQL cluster
//! (see [`registry`]).
//!
//! Waiting is always on an event with a deadline ([`within`]), never a sleep.

pub mod bench;
pub mod browser;
pub mod commit_cut;
pub mod kd_mcp;
pub mod order;
pub mod other_user;
pub mod outage;
pub mod registry;
pub mod tmux;
pub mod web;

pub use registry::{Engine, TestDb, Val, engine};

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use kd_client::Client;
use tempfile::TempDir;

/// Says that `test` is skipped here and why — or, under CI (`CI` set, as
/// `.ci/run` and CI services set it), fails it: CI installs what every test
/// needs and runs as root, so a skip there hides a test that never ran.
pub fn skip(test: &str, why: &str) {
    skip_in(std::env::var("CI").ok().as_deref(), test, why);
}

/// [`skip`] with `CI`'s value given.
fn skip_in(ci: Option<&str>, test: &str, why: &str) {
    if ci.is_some_and(|v| !v.is_empty() && v != "false" && v != "0") {
        panic!("{test} would be skipped under CI: {why}");
    }
    eprintln!("skipped {test}: {why}");
}

#[cfg(test)]
mod skip_tests {
    use super::skip_in;

    #[test]
    fn a_skip_under_ci_fails_and_elsewhere_only_says_why() {
        for ci in ["true", "1", "yes"] {
            let failed = std::panic::catch_unwind(|| skip_in(Some(ci), "t", "needs root"));
            assert!(failed.is_err(), "CI={ci}: a skip must fail");
        }
        for ci in [None, Some(""), Some("false"), Some("0")] {
            skip_in(ci, "t", "needs root");
        }
    }
}

/// Default deadline for anything a test waits on.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// The directory holding the workspace's built binaries (`target/debug`).
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("KD_TEST_BIN_DIR") {
        return PathBuf::from(dir);
    }
    // Integration tests run from target/<profile>/deps/.
    let exe = std::env::current_exe().expect("current_exe");
    let deps = exe.parent().expect("deps dir");
    deps.parent().expect("profile dir").to_path_buf()
}

/// A built binary of the workspace, e.g. `bin("kdd")`.
pub fn bin(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(path.is_file(), "{} is not built; run `cargo build --workspace --bins` before the tests", path.display());
    path
}

/// A new thread in `workspace` with nothing else set; its id.
pub async fn new_thread(c: &Client, workspace: &str) -> String {
    use kd_client::prelude::*;
    c.thread_create(workspace.into(), None, None, None, None, None, None, None, None).await.expect("thread.create").id
}

/// A `FAKE_HOLD` file, in place: a fake that reaches its first piece waits
/// while it exists. `release` removes it.
pub struct Hold {
    _dir: TempDir,
    pub path: PathBuf,
}

impl Hold {
    pub fn new() -> Hold {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("hold");
        std::fs::write(&path, b"").expect("hold file");
        Hold { _dir: dir, path }
    }

    /// The path, for `FAKE_HOLD`.
    pub fn env(&self) -> String {
        self.path.display().to_string()
    }

    /// The path as a `&str`, for a `FAKE_HOLD` in a list of `(&str, &str)`.
    pub fn var(&self) -> &str {
        self.path.to_str().expect("a temporary path is UTF-8")
    }

    pub fn release(&self) {
        std::fs::remove_file(&self.path).expect("release the hold");
    }
}

impl Default for Hold {
    fn default() -> Hold {
        Hold::new()
    }
}

/// A client of `kdd`, a new thread in a workspace and a subscription to it.
pub struct Watched {
    pub c: Client,
    pub t: String,
    pub sub: jsonrpsee::core::client::Subscription<kd_proto::types::ThreadEvent>,
}

impl Watched {
    pub async fn open(kdd: &Kdd, ws: &Workspace, context: Option<kd_proto::types::ContextMode>) -> Watched {
        use kd_client::prelude::*;
        let c = kdd.client().await;
        let t = thread_in(&c, ws, context).await;
        let sub = c.thread_subscribe(t.clone(), None, None).await.expect("thread.subscribe");
        Watched { c, t, sub }
    }
}

/// A thread in `ws` with the given context mode; its id.
pub async fn thread_in(c: &Client, ws: &Workspace, context: Option<kd_proto::types::ContextMode>) -> String {
    use kd_client::prelude::*;
    c.thread_create(ws.path(), None, None, None, None, None, None, None, context).await.expect("thread.create").id
}

/// Sends a King message answered in one round (no auto-rounds).
pub async fn send_one_round(c: &Client, thread: &str, body: &str) -> kd_proto::types::Sent {
    use kd_client::prelude::*;
    c.council_send(thread.into(), body.into(), None, None, None, None, None, Some(0), None, None)
        .await
        .expect("council.send")
}

/// Waits until run `run` has saved some of its text (what a kill keeps).
pub async fn saved(db: &registry::TestDb, run: &str) {
    within("partial text saved", async {
        loop {
            let n = db
                .try_query("SELECT count(*) FROM run_partials WHERE run_id = $1", &[run.into()])
                .map_or(0, |rows| rows[0][0].int());
            if n > 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await;
}

/// The last message of a thread.
pub async fn last_message(c: &Client, thread: &str) -> kd_proto::types::Message {
    use kd_client::prelude::*;
    let page = c.thread_messages(thread.into(), None, None, None, None).await.expect("thread.messages");
    page.into_vec().pop().expect("a message")
}

/// Appends `body` from `from` to `to` (everyone when empty), as `message.append` defaults the rest.
pub async fn append(
    c: &Client,
    thread: &str,
    from: &str,
    body: impl Into<String>,
    to: &[&str],
) -> kd_proto::types::Message {
    try_append(c, thread, from, body, to).await.expect("message.append")
}

/// Appends messages `0..n` to `thread` from `writers` clients at once,
/// message `i` being `body(i)`, from the King and claude by turns.
pub async fn fill(kdd: &Kdd, thread: &str, n: u64, writers: u64, body: fn(u64) -> String) {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let c = kdd.client().await;
        let thread = thread.to_string();
        tasks.push(tokio::spawn(async move {
            for i in (w..n).step_by(writers as usize) {
                append(&c, &thread, if i % 2 == 0 { "king" } else { "claude" }, body(i), &[]).await;
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer");
    }
}

/// [`append`], giving back the error (a daemon that may be gone).
pub async fn try_append(
    c: &Client,
    thread: &str,
    from: &str,
    body: impl Into<String>,
    to: &[&str],
) -> Result<kd_proto::types::Message, jsonrpsee::core::ClientError> {
    use kd_client::prelude::*;
    let to = (!to.is_empty()).then(|| to.iter().map(|s| s.to_string()).collect());
    c.message_append(thread.into(), from.into(), body.into(), to, None, None, None, None, None, None).await
}

/// Awaits `fut`, failing the test if it takes longer than [`DEADLINE`].
pub async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(DEADLINE, fut).await {
        Ok(v) => v,
        Err(_) => panic!("timed out after {DEADLINE:?} waiting for {what}"),
    }
}

/// The first worktree of `thread` of which `done` holds, polled until
/// one does (within the deadline): e.g. the work a restarted daemon
/// recovers, beside serving.
pub async fn worktree_until(
    kdd: &Kdd,
    thread: &str,
    what: &str,
    done: impl Fn(&kd_proto::work::Worktree) -> bool,
) -> kd_proto::work::Worktree {
    use kd_client::prelude::*;
    let c = kdd.client().await;
    within(what, async {
        loop {
            let trees = c.work_list(None, Some(thread.to_string())).await.expect("work.list");
            if let Some(w) = trees.into_iter().find(|w| done(w)) {
                return w;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// Reads `from` into `seen` until `seen` holds `wanted` (within the
/// deadline); all of `seen`, as text. A process's output read piece by
/// piece, e.g. to see what it wrote before it goes on.
pub async fn read_until(from: &mut (impl tokio::io::AsyncRead + Unpin), seen: &mut Vec<u8>, wanted: &str) -> String {
    use tokio::io::AsyncReadExt;
    within(&format!("{wanted:?} in the output"), async {
        while !String::from_utf8_lossy(seen).contains(wanted) {
            let mut buf = [0; 4096];
            let n = from.read(&mut buf).await.expect("read the output");
            assert!(n > 0, "the output ended first: {}", String::from_utf8_lossy(seen));
            seen.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    String::from_utf8_lossy(seen).into_owned()
}

/// The state and reason of each exchange of `thread`, as the journal holds
/// them (oldest first).
pub fn exchanges(db: &TestDb, thread: &str) -> Vec<(String, Option<String>)> {
    let rows = db.query("SELECT state, reason FROM exchanges WHERE thread_id = $1 ORDER BY id", &[thread.into()]);
    rows.iter().map(|r| (r[0].text().to_string(), r[1].opt_text())).collect()
}

/// kd's git of that pid (a child of `kdd` running `git … add`), once there is one.
pub async fn kds_git_add(kdd: u32) -> u32 {
    within("kd's git add", async {
        loop {
            let found = std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()).find_map(|e| {
                let pid: u32 = e.file_name().to_str()?.parse().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let ppid: u32 = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()?;
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
                let words: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
                (ppid == kdd && words.first().is_some_and(|w| w.ends_with(b"git")) && words.contains(&&b"add"[..]))
                    .then_some(pid)
            });
            if let Some(pid) = found {
                return pid;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await
}

/// Waits until no exchange of `thread` is open (the journal says so).
pub async fn settled(db: &TestDb, thread: &str) -> Vec<(String, Option<String>)> {
    within("the exchange to end", async {
        loop {
            let x = exchanges(db, thread);
            if !x.is_empty() && x.iter().all(|(state, _)| state != "open") {
                return x;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    })
    .await
}

/// A real `kdd` process on a private socket and database.
pub struct Kdd {
    pub dir: TempDir,
    pub socket: PathBuf,
    /// Its registry, on the engine of the run ([`registry::engine`]); kept
    /// across restarts ([`Kdd::launch`] again), dropped after the process.
    pub db: TestDb,
    pub pid: u32,
    args: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
    stderr: Stderr,
    /// The read end of a stderr pipe nobody reads ([`Stderr::Stuck`]).
    stuck_reader: Option<std::os::fd::OwnedFd>,
    /// No `--db`: the database is found in `$XDG_DATA_HOME/kd` as a user's is.
    default_db: bool,
    /// The umask kdd is started with (the test runner's when `None`).
    umask: Option<String>,
    /// The `kdd` binary run (the built one when `None`), see [`Beside`].
    exe: Option<PathBuf>,
}

/// What sits beside a test's `kdd`, where kdd looks first for the `kd`
/// that serves agents kd's MCP server (`kd mcp`): the built `kd` (the
/// usual [`Kdd::start`]), or, for [`Kdd::start_beside`], the fake agent's
/// stand-in (`fake-agent mcp`, see its `mcp.rs`), or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Beside {
    StandIn,
    Nothing,
}

/// Where a test daemon's stderr goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stderr {
    /// A pipe the harness reads (for failure messages).
    Drained,
    /// A pipe whose reader is already gone: every write fails (EPIPE), as
    /// after the terminal that started kdd was closed.
    Closed,
    /// A pipe nobody reads: it fills up and writes would block.
    Stuck,
}

impl Kdd {
    /// Starts a daemon with default limits and waits until it is ready.
    pub fn start() -> Kdd {
        Kdd::start_with(&[])
    }

    /// Starts a daemon with extra command-line arguments.
    pub fn start_with(args: &[&str]) -> Kdd {
        Kdd::start_env(args, &[])
    }

    /// Starts a daemon with extra arguments and environment (e.g. `PATH`).
    pub fn start_env(args: &[&str], env: &[(&str, &str)]) -> Kdd {
        Kdd::start_full(args, env, Stderr::Drained)
    }

    /// Starts a daemon as `kd` auto-starts one: no `--db`, so the database
    /// is found at `$XDG_DATA_HOME/kd/kd.sqlite3` (`XDG_DATA_HOME` in the
    /// daemon's directory), and `--log-file` beside it; with `umask` (e.g.
    /// `0022`) as a user's shell would have it, whatever the test runner's.
    /// Always SQLite: the default place is a file.
    pub fn start_in_data_home(umask: &str) -> Kdd {
        let mut kdd = Kdd::unstarted_on(&[], &[], Stderr::Drained, |dir| {
            TestDb::file(dir.join("data").join("kd").join("kd.sqlite3"))
        });
        kdd.default_db = true;
        kdd.umask = Some(umask.to_string());
        kdd.args = vec!["--log-file".into(), kd_proto::paths::log_path(kdd.db.path()).display().to_string()];
        kdd.launch().unwrap_or_else(|e| panic!("kdd did not start: {e}"));
        kdd
    }

    /// Starts a second node beside `other`, on its registry (PostgreSQL),
    /// with arguments (e.g. `--node b`).
    pub fn start_node_beside(other: &Kdd, args: &[&str]) -> Kdd {
        Kdd::try_start_node_beside(other, args).unwrap_or_else(|e| panic!("kdd did not start: {e}"))
    }

    /// [`Kdd::start_node_beside`], giving back why it did not start.
    pub fn try_start_node_beside(other: &Kdd, args: &[&str]) -> Result<Kdd, String> {
        Kdd::try_start_on(other.db.shared(), args)
    }

    /// A daemon on registry `db`, or why it did not start.
    pub fn try_start_on(db: TestDb, args: &[&str]) -> Result<Kdd, String> {
        let mut kdd = Kdd::unstarted_on(args, &[], Stderr::Drained, |_| db);
        kdd.launch()?;
        Ok(kdd)
    }

    /// Starts a daemon whose stderr goes where `stderr` says.
    pub fn start_full(args: &[&str], env: &[(&str, &str)], stderr: Stderr) -> Kdd {
        let mut kdd = Kdd::unstarted(args, env, stderr);
        kdd.launch().unwrap_or_else(|e| panic!("kdd did not start: {e}"));
        kdd
    }

    fn unstarted(args: &[&str], env: &[(&str, &str)], stderr: Stderr) -> Kdd {
        Kdd::unstarted_on(args, env, stderr, |dir| TestDb::fresh(dir.join("data").join("kd.sqlite3")))
    }

    /// An unstarted daemon whose registry `db` makes, given its directory.
    fn unstarted_on(args: &[&str], env: &[(&str, &str)], stderr: Stderr, db: impl FnOnce(&Path) -> TestDb) -> Kdd {
        let dir = tempfile::Builder::new().prefix("kd-e2e-").tempdir().expect("tempdir");
        let socket = dir.path().join("run").join("kdd.sock");
        let db = db(dir.path());
        Kdd {
            dir,
            socket,
            db,
            pid: 0,
            args: args.iter().map(|s| s.to_string()).collect(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            child: None,
            stderr,
            stuck_reader: None,
            default_db: false,
            umask: None,
            exe: None,
        }
    }

    /// Starts a daemon whose executable sits in a directory of its own
    /// with `beside` as its `kd`, and extra environment (e.g. `PATH`).
    pub fn start_beside(beside: Beside, env: &[(&str, &str)]) -> Kdd {
        let mut kdd = Kdd::unstarted(&[], env, Stderr::Drained);
        let dir = kdd.dir.path().join("bin");
        std::fs::create_dir_all(&dir).expect("bin dir");
        link_or_copy(&bin("kdd"), &dir.join("kdd"));
        if beside == Beside::StandIn {
            link_or_copy(&bin("fake-agent"), &dir.join("kd"));
        }
        kdd.exe = Some(dir.join("kdd"));
        kdd.launch().unwrap_or_else(|e| panic!("kdd did not start: {e}"));
        kdd
    }

    /// Starts a daemon run by `exe` in place of the built `kdd` (e.g. a
    /// script running it under a profiler), on the daemon's arguments.
    pub fn start_as(exe: PathBuf) -> Kdd {
        let mut kdd = Kdd::unstarted(&[], &[], Stderr::Drained);
        kdd.exe = Some(exe);
        kdd.launch().unwrap_or_else(|e| panic!("kdd did not start: {e}"));
        kdd
    }

    /// The `kd` beside this daemon (see [`Beside`]).
    pub fn kd_beside(&self) -> PathBuf {
        self.exe.as_ref().and_then(|e| e.parent()).map(|d| d.join("kd")).unwrap_or_else(|| bin("kd"))
    }

    /// The command line this daemon runs with.
    pub fn command(&self) -> Command {
        let mut cmd = match &self.umask {
            // The shell sets the umask and becomes kdd (same pid).
            Some(umask) => {
                let mut sh = Command::new("sh");
                sh.args(["-c", r#"umask "$0" && exec "$@""#, umask]).arg(self.kdd_exe());
                sh
            }
            None => Command::new(self.kdd_exe()),
        };
        cmd.arg("--socket").arg(&self.socket);
        if self.default_db {
            cmd.env("XDG_DATA_HOME", self.dir.path().join("data"));
        } else {
            cmd.arg("--db").arg(self.db.arg()).envs(self.db.data_env());
        }
        cmd.args(&self.args)
            .env("RUST_LOG", "info")
            // No user configuration leaks in: workspaces bring their own.
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env_remove("KD_SOCKET")
            .env_remove("KD_DB")
            .env_remove("KD_KD")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd
    }

    fn kdd_exe(&self) -> PathBuf {
        self.exe.clone().unwrap_or_else(|| bin("kdd"))
    }

    /// Starts the process and waits for its `kdd ready` line; on failure
    /// returns what it printed on stderr.
    pub fn launch(&mut self) -> Result<(), String> {
        let stderr_to = match self.stderr {
            Stderr::Drained => Stdio::piped(),
            Stderr::Closed | Stderr::Stuck => {
                let (reader, writer) = rustix::pipe::pipe().map_err(|e| e.to_string())?;
                if self.stderr == Stderr::Stuck {
                    self.stuck_reader = Some(reader);
                }
                Stdio::from(writer)
            }
        };
        let mut child = self
            .command()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr_to)
            .spawn()
            .map_err(|e| format!("cannot run kdd: {e}"))?;
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        // Keep draining stderr so the daemon never blocks on a full pipe;
        // collect it for failure messages.
        let (etx, erx) = mpsc::channel();
        if let Some(stderr) = stderr {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = BufReader::new(stderr).read_to_string(&mut text);
                let _ = etx.send(text);
            });
        }
        match rx.recv_timeout(DEADLINE) {
            Ok(line) if line.starts_with("kdd ready") => {
                self.pid = child.id();
                self.child = Some(child);
                Ok(())
            }
            Ok(_) => {
                let status = child.wait().map_err(|e| e.to_string())?;
                let err = erx.recv_timeout(DEADLINE).unwrap_or_default();
                Err(format!("kdd exited with {status}: {err}"))
            }
            Err(_) => {
                let _ = child.kill();
                Err("kdd did not become ready in time".into())
            }
        }
    }

    /// A Rust client connected to this daemon.
    pub async fn client(&self) -> Client {
        within("connect", Client::connect(&self.socket)).await.expect("connect to kdd")
    }

    /// The real `kd` binary pointed at this daemon, never auto-starting.
    pub fn kd(&self) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(bin("kd"));
        cmd.arg("--socket")
            .arg(&self.socket)
            .env("KD_NO_AUTOSTART", "1")
            .env("KD_DB", self.db.arg())
            .env_remove("KD_SOCKET")
            .kill_on_drop(true);
        cmd
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("kdd is running");
        signal(child.id(), rustix::process::Signal::TERM);
        wait_with_deadline(&mut child)
    }

    /// Kills the daemon with SIGKILL, as a crash would.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("kdd is running");
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits for the daemon to exit on its own (e.g. after `daemon.shutdown`).
    pub fn wait_exit(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("kdd is running");
        wait_with_deadline(&mut child)
    }

    /// Stops the daemon (SIGTERM) and starts it again on the same socket and database.
    pub fn restart(&mut self) {
        let status = self.stop();
        assert!(status.success(), "kdd exited with {status} on SIGTERM");
        self.launch().unwrap_or_else(|e| panic!("kdd did not restart: {e}"));
    }

    /// Stops the daemon in its tracks (SIGSTOP), as a suspended laptop is;
    /// [`Kdd::resume`] lets it go on.
    pub fn pause(&self) {
        signal(self.pid, rustix::process::Signal::STOP);
    }

    /// Lets a paused daemon go on (SIGCONT).
    pub fn resume(&self) {
        signal(self.pid, rustix::process::Signal::CONT);
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The read end of the stderr pipe nobody reads ([`Stderr::Stuck`]), to
    /// see how full it is.
    pub fn stuck_stderr(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.stuck_reader.as_ref().map(|r| r.as_fd())
    }
}

impl Drop for Kdd {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // A daemon the test's kd started on this socket (`kd daemon
        // restart`, an auto-start) is no child of the harness: it goes too,
        // or it would outlive the test; and so does what its agents started
        // that outlived them (their environment names the socket).
        kill_strays(self.dir.path(), &self.socket);
    }
}

/// Kills every `kdd` of this user serving a socket under `dir`, and every
/// other process whose environment says `KD_SOCKET=socket` (what a test's
/// agents started, orphaned when their daemon was killed), but this one.
fn kill_strays(dir: &Path, socket: &Path) {
    let Ok(procs) = std::fs::read_dir("/proc") else { return };
    let dir = dir.as_os_str().as_encoded_bytes();
    let mut marker = b"KD_SOCKET=".to_vec();
    marker.extend_from_slice(socket.as_os_str().as_encoded_bytes());
    let me = std::process::id();
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_kdd = args.first().is_some_and(|a| a.ends_with(b"/kdd") || *a == b"kdd");
        let under = |s: &[u8]| s.strip_prefix(dir).is_some_and(|rest| rest.starts_with(b"/"));
        let ours = is_kdd && args.windows(2).any(|w| w[0] == b"--socket" && under(w[1]));
        let orphan =
            || std::fs::read(entry.path().join("environ")).is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == marker));
        if ours || orphan() {
            signal(pid, rustix::process::Signal::KILL);
        }
    }
}

/// The `kdd --socket SOCKET` processes of this user.
pub fn daemons_on(socket: &Path) -> Vec<u32> {
    let Ok(procs) = std::fs::read_dir("/proc") else { return Vec::new() };
    let socket = socket.as_os_str().as_encoded_bytes();
    let mut pids = Vec::new();
    for entry in procs.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else { continue };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        let is_kdd = args.first().is_some_and(|a| a.ends_with(b"/kdd") || *a == b"kdd");
        if is_kdd && args.windows(2).any(|w| w[0] == b"--socket" && w[1] == socket) && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// A hard link of `from` at `to` (same file system), else a copy.
fn link_or_copy(from: &Path, to: &Path) {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).unwrap_or_else(|e| panic!("cannot copy {} to {}: {e}", from.display(), to.display()));
    }
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(pid as i32).expect("pid");
    let _ = rustix::process::kill_process(pid, sig);
}

fn wait_with_deadline(child: &mut Child) -> ExitStatus {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // Wakes the waiter if the process hangs: SIGKILL after the deadline.
        if rx.recv_timeout(DEADLINE).is_err() {
            signal(pid, rustix::process::Signal::KILL);
        }
    });
    let status = child.wait().expect("wait for kdd");
    let _ = tx.send(());
    status
}

/// A raw HTTP/1.1 exchange on the socket: returns the status code and body.
/// `request` is the full request text (head and body) as bytes.
pub fn http_raw(socket: &Path, request: &[u8]) -> std::io::Result<(u16, String)> {
    let mut s = StdUnixStream::connect(socket)?;
    s.set_read_timeout(Some(DEADLINE))?;
    s.write_all(request)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    parse_http_response(&raw)
}

/// A WebSocket client frame (text, masked) carrying `payload`.
pub fn ws_frame(payload: &[u8]) -> Vec<u8> {
    let mask = [0x37u8, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x81];
    match payload.len() {
        n if n < 126 => frame.push(0x80 | n as u8),
        n if n < 65536 => {
            frame.push(0x80 | 126);
            frame.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            frame.push(0x80 | 127);
            frame.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// A raw WebSocket connection: upgraded, with `calls` sent as text
/// frames — and then never read from again, like a client that hangs.
pub fn stalled_websocket(socket: &Path, calls: &[&str]) -> StdUnixStream {
    let mut s = websocket(socket);
    for call in calls {
        s.write_all(&ws_frame(call.as_bytes())).expect("a frame");
    }
    s
}

/// The payload of the next text frame the server sends (pings and other
/// control frames are skipped), within [`DEADLINE`].
pub fn ws_read_text(s: &mut StdUnixStream) -> String {
    s.set_read_timeout(Some(DEADLINE)).expect("timeout");
    loop {
        let mut head = [0u8; 2];
        s.read_exact(&mut head).expect("a frame header");
        let len = match head[1] & 0x7f {
            126 => {
                let mut b = [0u8; 2];
                s.read_exact(&mut b).expect("length");
                u16::from_be_bytes(b) as usize
            }
            127 => {
                let mut b = [0u8; 8];
                s.read_exact(&mut b).expect("length");
                u64::from_be_bytes(b) as usize
            }
            n => n as usize,
        };
        let mut payload = vec![0u8; len];
        s.read_exact(&mut payload).expect("a frame payload");
        if head[0] & 0x0f == 1 {
            return String::from_utf8(payload).expect("a text frame is UTF-8");
        }
    }
}

/// A raw WebSocket connection, upgraded and nothing sent yet.
pub fn websocket(socket: &Path) -> StdUnixStream {
    let mut s = StdUnixStream::connect(socket).expect("connect");
    s.write_all(
        b"GET / HTTP/1.1\r\nHost: kd\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .expect("upgrade request");
    // Read the 101 response, byte by byte up to its end, and nothing more.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).expect("upgrade response");
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"), "{}", String::from_utf8_lossy(&head));
    s
}

/// POSTs a JSON-RPC body with `Connection: close`; returns status and body.
pub fn http_post(socket: &Path, body: &str) -> std::io::Result<(u16, String)> {
    http_raw(socket, post_request(body).as_bytes())
}

/// A JSON-RPC POST carrying `body`, closing the connection after.
fn post_request(body: &str) -> String {
    format!(
        "POST / HTTP/1.1\r\nHost: kd\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
        body.len(),
        body
    )
}

/// POSTs `body` on a connection of its own and returns the answer's bytes
/// as they came, head and all.
pub fn http_post_bytes(socket: &Path, body: &str) -> std::io::Result<Vec<u8>> {
    let mut s = StdUnixStream::connect(socket)?;
    s.set_read_timeout(Some(DEADLINE))?;
    s.write_all(post_request(body).as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    Ok(raw)
}

/// POSTs and parses the body as JSON.
pub fn rpc_post(socket: &Path, body: &str) -> serde_json::Value {
    let (_, text) = http_post(socket, body).expect("http post");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn parse_http_response(raw: &[u8]) -> std::io::Result<(u16, String)> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| bad("no header end"))?;
    let status: u16 =
        head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| bad("no status code"))?;
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    if !chunked {
        return Ok((status, body.to_string()));
    }
    let mut out = String::new();
    let mut rest = body;
    loop {
        let (size, after) = rest.split_once("\r\n").ok_or_else(|| bad("bad chunk"))?;
        let size = usize::from_str_radix(size.trim(), 16).map_err(|_| bad("bad chunk size"))?;
        if size == 0 {
            break;
        }
        out.push_str(after.get(..size).ok_or_else(|| bad("short chunk"))?);
        rest = after.get(size + 2..).unwrap_or("");
    }
    Ok((status, out))
}

/// Output of a finished `kd` command.
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs a command to completion within the deadline.
pub async fn run(mut cmd: tokio::process::Command) -> Output {
    let out = within("a kd command", cmd.stdin(Stdio::null()).output()).await.expect("run command");
    Output {
        status: out.status,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// An absolute workspace path for tests (nothing is created there).
pub fn workspace(name: &str) -> String {
    format!("/tmp/kd-e2e-workspace/{name}")
}

/// A fake member: its name, its backend, its `FAKE_*` environment.
pub type Member<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

/// A workspace directory with a `.kd/config.json` whose members are fake
/// agents.
pub struct Workspace {
    pub dir: TempDir,
}

impl Workspace {
    /// A workspace whose `council.members` are `members`, each a fake agent
    /// of the given backend with the given `FAKE_*` environment.
    pub fn new(members: &[Member<'_>]) -> Workspace {
        let ws = Workspace { dir: tempfile::Builder::new().prefix("kd-ws-").tempdir().expect("tempdir") };
        let mut agents = serde_json::Map::new();
        for (name, backend, env) in members {
            agents.insert(name.to_string(), fake(backend, name, env));
        }
        let names: Vec<&str> = members.iter().map(|m| m.0).collect();
        ws.write_config(&serde_json::json!({ "council": { "members": names }, "agents": agents }));
        ws
    }

    pub fn path(&self) -> String {
        self.dir.path().display().to_string()
    }

    pub fn write_config(&self, config: &serde_json::Value) {
        let kd = self.dir.path().join(".kd");
        std::fs::create_dir_all(&kd).expect("mkdir .kd");
        std::fs::write(kd.join("config.json"), serde_json::to_vec_pretty(config).expect("json")).expect("write config");
    }

    /// Sets `agents.NAME.KEY` in the workspace's configuration.
    pub fn set_agent(&self, name: &str, key: &str, value: serde_json::Value) {
        let path = self.dir.path().join(".kd/config.json");
        let mut config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read config")).expect("config json");
        config["agents"][name][key] = value;
        self.write_config(&config);
    }

    /// Sets `council.KEY` in the workspace's configuration.
    pub fn set_council(&self, key: &str, value: serde_json::Value) {
        let path = self.dir.path().join(".kd/config.json");
        let mut config: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read config")).expect("config json");
        config["council"][key] = value;
        self.write_config(&config);
    }

    /// Turns resuming off (`council.resume_within: 0`): a test of what a
    /// restart records, not of what it resumes.
    pub fn without_resume(&self) {
        self.set_council("resume_within", serde_json::json!("0"));
    }

    /// A file in the workspace (e.g. for `FAKE_RECORD`).
    pub fn file(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }
}

/// A fake member named for its backend (`claude` is a claude fake): its
/// name, its `FAKE_*` environment, more keys of its agent.
pub type Fake<'a> = (&'a str, &'a [(&'a str, &'a str)], serde_json::Value);

impl Workspace {
    /// Writes a council of `members`, each a fake of the backend it is
    /// named for, with `council`'s other keys.
    pub fn configure(&self, members: &[Fake<'_>], council: serde_json::Value) {
        let mut agents = serde_json::Map::new();
        for (name, env, extra) in members {
            let mut a = fake(name, name, env);
            if let (Some(a), Some(extra)) = (a.as_object_mut(), extra.as_object()) {
                a.extend(extra.clone());
            }
            agents.insert(name.to_string(), a);
        }
        let mut council = council;
        council["members"] = members.iter().map(|m| m.0).collect::<Vec<_>>().into();
        self.write_config(&serde_json::json!({"council": council, "agents": agents}));
    }
}

/// `git ARGS` in `dir`, which must succeed; what it printed, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().expect("git");
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Workspace {
    /// Makes the workspace a git repository: branch `main`, the King's own
    /// identity, `.kd/` and `ignored` in `.gitignore`, and one commit of
    /// `files` (path, text), their directories made.
    pub fn git_init(&self, files: &[(&str, &str)], ignored: &[&str]) {
        let dir = self.dir.path();
        git(dir, &["init", "--quiet", "-b", "main"]);
        git(dir, &["config", "user.name", "King"]);
        git(dir, &["config", "user.email", "king@example.com"]);
        let mut ignore = String::from(".kd/\n");
        for i in ignored {
            ignore.push_str(&format!("{i}\n"));
        }
        std::fs::write(dir.join(".gitignore"), ignore).expect("write .gitignore");
        for (path, text) in files {
            let path = dir.join(path);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent).expect("mkdir");
            }
            std::fs::write(path, text).expect("write");
        }
        git(dir, &["add", "--all"]);
        git(dir, &["commit", "--quiet", "-m", "first"]);
    }
}

/// The agent definition of a fake agent named `name` for `backend`.
pub fn fake(backend: &str, name: &str, env: &[(&str, &str)]) -> serde_json::Value {
    let mut vars = serde_json::Map::new();
    vars.insert("FAKE_NAME".into(), name.into());
    for (k, v) in env {
        vars.insert(k.to_string(), v.to_string().into());
    }
    serde_json::json!({ "backend": backend, "command": bin("fake-agent"), "env": vars })
}

/// Reads `FAKE_RECORD` lines: what each fake invocation received.
pub fn records(path: &str) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("record line"))
        .collect()
}

/// The prompt a fake agent received: its stdin, or (codex) its last argument.
pub fn prompt_of(record: &serde_json::Value) -> String {
    match record["stdin"].as_str() {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => record["argv"].as_array().and_then(|a| a.last()).and_then(|a| a.as_str()).unwrap_or_default().to_string(),
    }
}

/// Collects subscription events until `done` says the list is complete.
pub async fn collect_until(
    sub: &mut jsonrpsee::core::client::Subscription<kd_proto::types::ThreadEvent>,
    mut done: impl FnMut(&[kd_proto::types::ThreadEvent]) -> bool,
) -> Vec<kd_proto::types::ThreadEvent> {
    let mut events = Vec::new();
    within("subscription events", async {
        while !done(&events) {
            match sub.next().await {
                Some(Ok(e)) => events.push(e),
                Some(Err(e)) => panic!("bad event: {e}"),
                None => panic!("subscription closed; got {events:?}"),
            }
        }
    })
    .await;
    events
}

/// How many runs in `events` have ended (finished, failed or cancelled).
pub fn ended(events: &[kd_proto::types::ThreadEvent]) -> usize {
    use kd_proto::types::ThreadEvent as E;
    events.iter().filter(|e| matches!(e, E::RunFinished { .. } | E::RunError { .. } | E::RunCancelled { .. })).count()
}

/// The pid of the first run started among `events`.
pub fn run_pid(events: &[kd_proto::types::ThreadEvent]) -> u32 {
    use kd_proto::types::ThreadEvent as E;
    events
        .iter()
        .find_map(|e| if let E::RunStarted { pid, .. } = e { Some(*pid) } else { None })
        .expect("a run started")
}

/// Waits until process `pid` is gone, failing the test after [`DEADLINE`].
pub async fn until_gone(pid: u32, what: &str) {
    within(what, async {
        while alive(pid) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    })
    .await;
}

/// Whether a process exists (it may be a zombie of ours: reap before asking).
/// One reaped between two looks is gone: its `stat` is read once, and a
/// `stat` that cannot be read is no process.
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| !stat.contains(") Z "))
}

/// Runs `cmd` (a `kdd` command line) expecting it to refuse to start:
/// whether it started or succeeded, and what it said on stderr. One that
/// starts is stopped at once.
pub fn kdd_outcome(mut cmd: Command) -> (bool, String) {
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run kdd");
    let mut ready = String::new();
    if let Some(out) = child.stdout.take() {
        let _ = BufReader::new(out).read_line(&mut ready);
    }
    if ready.starts_with("kdd ready") {
        let _ = child.kill();
        let _ = child.wait();
        return (true, "kdd started".into());
    }
    match child.wait_with_output() {
        Ok(out) => (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned()),
        Err(e) => (false, e.to_string()),
    }
}
