//! The `kd` binary against a real daemon: inspection commands, daemon
//! management, auto-start, and one-line failures.

use std::process::Command;
use std::sync::Arc;

use jsonrpsee::RpcModule;
use kd_client::prelude::*;
use kd_proto::types::Thread;
use kd_tests::{Kdd, TestDb, bin, run, within, workspace};
use tokio::net::UnixListener;

#[tokio::test(flavor = "multi_thread")]
async fn threads_show_sessions_locks_and_events_in_text_and_json() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = c
        .thread_create(
            workspace("cli"),
            Some("main".into()),
            Some("Schema talk".into()),
            Some(vec!["claude".into(), "codex".into()]),
            None,
            None,
            None,
            None,
            None,
        )
        .await
        .unwrap();
    kd_tests::append(&c, &t.id, "king", "What about the schema?", &[]).await;
    c.message_append(
        t.id.clone(),
        "claude".into(),
        "Normalize it.\n\n- joins\n- indexes".into(),
        Some(vec!["king".into()]),
        None,
        Some(1),
        None,
        None,
        None,
        None,
    )
    .await
    .unwrap();
    c.session_start(t.id.clone(), "claude".into(), Some("backend-xyz".into()), Some("tester".into()), None, None)
        .await
        .unwrap();
    c.lock_acquire(t.id.clone(), "tester".into(), 600_000, None).await.unwrap();

    let out = run({
        let mut k = kdd.kd();
        k.arg("threads");
        k
    })
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines[0].starts_with("ID") && lines[0].contains("LAST ACTIVITY"), "{}", out.stdout);
    assert!(
        lines[1].starts_with(&t.id) && lines[1].contains("active") && lines[1].contains("Schema talk"),
        "{}",
        out.stdout
    );
    assert!(lines[1].contains("claude,codex") && lines[1].contains(" 2 "), "{}", out.stdout);

    let json = run({
        let mut k = kdd.kd();
        k.args(["threads", "--json"]);
        k
    })
    .await;
    let threads: Vec<Thread> = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(threads.len(), 1);
    assert_eq!(threads[0].last_seq, 2);

    let show = run({
        let mut k = kdd.kd();
        k.args(["show", &t.id]);
        k
    })
    .await;
    assert!(show.status.success(), "{}", show.stderr);
    assert!(show.stdout.contains("#1 king"), "{}", show.stdout);
    assert!(show.stdout.contains("#2 claude → king (re #1)"), "{}", show.stdout);
    assert!(show.stdout.contains("Normalize it.\n\n- joins\n- indexes\n"), "{}", show.stdout);

    let show_json = run({
        let mut k = kdd.kd();
        k.args(["show", &t.id, "--json"]);
        k
    })
    .await;
    let v: serde_json::Value = serde_json::from_str(&show_json.stdout).unwrap();
    assert_eq!(v["messages"].as_array().unwrap().len(), 2);
    assert_eq!(v["thread"]["id"], t.id);

    let sessions = run({
        let mut k = kdd.kd();
        k.arg("sessions");
        k
    })
    .await;
    assert!(
        sessions.stdout.contains("claude")
            && sessions.stdout.contains("backend-xyz")
            && sessions.stdout.contains("active"),
        "{}",
        sessions.stdout
    );
    let sessions_json = run({
        let mut k = kdd.kd();
        k.args(["sessions", "--json", "--agent", "claude"]);
        k
    })
    .await;
    let v: serde_json::Value = serde_json::from_str(&sessions_json.stdout).unwrap();
    assert_eq!(v[0]["backend_session_id"], "backend-xyz");

    let locks = run({
        let mut k = kdd.kd();
        k.args(["locks"]);
        k
    })
    .await;
    assert!(locks.stdout.contains(&t.id) && locks.stdout.contains("tester"), "{}", locks.stdout);
    let locks_json = run({
        let mut k = kdd.kd();
        k.args(["locks", "--json"]);
        k
    })
    .await;
    let v: serde_json::Value = serde_json::from_str(&locks_json.stdout).unwrap();
    assert_eq!(v[0]["holder"], "tester");

    let events = run({
        let mut k = kdd.kd();
        k.args(["events", "--thread", &t.id]);
        k
    })
    .await;
    for kind in ["thread.create", "message", "session.start", "lock.acquire"] {
        assert!(events.stdout.contains(kind), "{kind} missing: {}", events.stdout);
    }
    let events_json = run({
        let mut k = kdd.kd();
        k.args(["events", "--json", "--kind", "message"]);
        k
    })
    .await;
    let v: serde_json::Value = serde_json::from_str(&events_json.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn show_of_a_missing_thread_is_one_line_and_nonzero() {
    let kdd = Kdd::start();
    let out = run({
        let mut k = kdd.kd();
        k.args(["show", "nope"]);
        k
    })
    .await;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(out.stderr, "kd: thread nope not found\n");
}

/// A socket directory as kdd makes it: `run/` under `parent`, mode 0700.
fn private_dir(parent: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::DirBuilderExt;
    let dir = parent.join("run");
    std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
    dir
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_daemon_is_one_clear_line() {
    let dir = tempfile::tempdir().unwrap();
    let socket = private_dir(dir.path()).join("kdd.sock");
    let out = run({
        let mut k = tokio::process::Command::new(bin("kd"));
        k.arg("--socket").arg(&socket).arg("threads").env("KD_NO_AUTOSTART", "1");
        k
    })
    .await;
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.starts_with("kd: cannot reach kdd at "), "{}", out.stderr);
    assert!(out.stderr.contains("KD_NO_AUTOSTART=1"), "{}", out.stderr);
    assert!(!out.stderr.contains("panicked") && !out.stderr.contains("backtrace"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_speaking_another_protocol_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let socket = private_dir(dir.path()).join("kdd.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let mut module = RpcModule::new(());
    module
        .register_method(
            "daemon.hello",
            |_, _, _| serde_json::json!({"protocol": 99, "version": "9.9.9", "capabilities": [], "pid": 1}),
        )
        .unwrap();
    let (stop, _handle) = jsonrpsee::server::stop_channel();
    let builder = jsonrpsee::server::Server::builder().to_service_builder();
    let methods: jsonrpsee::Methods = module.into();
    let server = tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let svc = builder.clone().build(methods.clone(), stop.clone());
            tokio::spawn(jsonrpsee::server::serve(stream, svc));
        }
    });
    let ws = kd_tests::Workspace::new(&[("claude", "claude", &[])]);
    // Any command; `kd ask` too, which asks for the current thread beside
    // the greeting: nothing is asked of such a daemon.
    for args in [&["threads"][..], &["ask", "Q?"]] {
        let out = run({
            let mut k = tokio::process::Command::new(bin("kd"));
            k.arg("--socket").arg(&socket).args(args).env("KD_NO_AUTOSTART", "1").current_dir(ws.dir.path());
            k
        })
        .await;
        assert_eq!(out.status.code(), Some(3), "{args:?}: {}", out.stderr);
        assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
        assert!(out.stderr.contains("speaks protocol 99 (version 9.9.9), this kd speaks 1"), "{}", out.stderr);
    }
    server.abort();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_refusing_daemon_is_one_clear_line() {
    let kdd = Kdd::start_with(&["--max-connections", "1"]);
    let _holder = kdd.client().await;
    let out = run({
        let mut k = kdd.kd();
        k.arg("threads");
        k
    })
    .await;
    assert_eq!(out.status.code(), Some(3), "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1);
    assert!(out.stderr.contains("refused the connection: too many connections"), "{}", out.stderr);
}

/// `kd` on a socket in `dir`, free to start a kdd on `db`.
fn kd_autostarting(dir: &std::path::Path, db: &TestDb) -> tokio::process::Command {
    let mut k = tokio::process::Command::new(bin("kd"));
    k.arg("--socket")
        .arg(dir.join("run/kdd.sock"))
        .envs(db.env())
        .env("KD_KDD", bin("kdd"))
        .env_remove("KD_NO_AUTOSTART")
        .kill_on_drop(true);
    k
}

/// Stops an auto-started daemon at the end of a test.
struct StopDaemon(std::path::PathBuf);

impl Drop for StopDaemon {
    fn drop(&mut self) {
        let _ =
            Command::new(bin("kd")).arg("--socket").arg(self.0.join("run/kdd.sock")).args(["daemon", "stop"]).output();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_kd_invocations_auto_starting_at_once_end_with_one_daemon() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let db = TestDb::fresh(dir.path().join("data/kd.sqlite3"));
    let _stop = StopDaemon(dir.path().to_path_buf());
    let mut runs = Vec::new();
    for _ in 0..2 {
        let mut threads = kd_autostarting(dir.path(), &db);
        threads.args(["threads", "--json"]);
        runs.push(tokio::spawn(run(threads)));
    }
    for r in runs {
        let out = within("kd threads", r).await.unwrap();
        assert!(out.status.success(), "{}", out.stderr);
        assert_eq!(out.stdout.trim(), "[]");
    }
    let status = run({
        let mut k = kd_autostarting(dir.path(), &db);
        k.args(["daemon", "status", "--json"]);
        k
    })
    .await;
    let v: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    let pid = v["pid"].as_u64().unwrap();
    // Exactly one kdd serves this socket: the one holding its lock file.
    let lock = std::fs::read_to_string(dir.path().join("run/kdd.sock.lock")).unwrap();
    assert_eq!(lock.trim(), pid.to_string());
    let kdds = Command::new("pgrep")
        .args(["-f", &format!("kdd --socket {}", dir.path().join("run/kdd.sock").display())])
        .output()
        .unwrap();
    let pids: Vec<&str> = std::str::from_utf8(&kdds.stdout).unwrap().lines().collect();
    assert_eq!(pids, vec![pid.to_string()], "more than one kdd on the socket");
    assert_eq!(v["db"], db.to_string());
}

#[tokio::test(flavor = "multi_thread")]
async fn daemon_start_status_restart_and_stop() {
    let dir = tempfile::tempdir().unwrap();
    let db = TestDb::fresh(dir.path().join("data/kd.sqlite3"));
    let _stop = StopDaemon(dir.path().to_path_buf());
    let kd = |args: &'static [&'static str]| {
        let mut k = kd_autostarting(dir.path(), &db);
        k.args(args);
        k
    };
    let out = run(kd(&["daemon", "status"])).await;
    assert_eq!(out.status.code(), Some(3));
    assert!(out.stdout.contains("not running"), "{}", out.stdout);
    let out = run(kd(&["daemon", "start"])).await;
    assert!(out.status.success() && out.stdout.starts_with("kdd started (pid "), "{} {}", out.stdout, out.stderr);
    let out = run(kd(&["daemon", "start"])).await;
    assert!(out.stdout.starts_with("kdd already running"), "{}", out.stdout);
    let out = run(kd(&["daemon", "status"])).await;
    assert!(out.status.success() && out.stdout.contains("threads   0"), "{}", out.stdout);
    // The registry's engine is named.
    let engine = match kd_tests::engine() {
        kd_tests::Engine::Sqlite => "(sqlite, schema ",
        kd_tests::Engine::Postgres => "(postgres, schema ",
    };
    assert!(out.stdout.contains(engine), "{}", out.stdout);
    let first_pid = pid_of(&run(kd(&["daemon", "status", "--json"])).await.stdout);
    let out = run(kd(&["daemon", "restart"])).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains(&format!("kdd stopped (pid {first_pid})")), "{}", out.stdout);
    let second_pid = pid_of(&run(kd(&["daemon", "status", "--json"])).await.stdout);
    assert_ne!(first_pid, second_pid);
    let out = run(kd(&["daemon", "stop"])).await;
    assert!(out.status.success() && out.stdout.contains("kdd stopped"), "{}", out.stdout);
    // `stop` returns only once the daemon has exited and removed its socket.
    assert!(!dir.path().join("run/kdd.sock").exists());
    let out = run(kd(&["daemon", "stop"])).await;
    assert!(out.stdout.contains("not running"), "{}", out.stdout);
}

fn pid_of(status_json: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(status_json).unwrap();
    v["pid"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn kd_talks_only_through_the_socket_it_is_given() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    kd_tests::new_thread(&c, &workspace("a")).await;
    // KD_SOCKET is honoured when --socket is absent.
    let out = run({
        let mut k = tokio::process::Command::new(bin("kd"));
        k.args(["threads", "--json"]).env("KD_SOCKET", &kdd.socket).env("KD_NO_AUTOSTART", "1");
        k
    })
    .await;
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
}

/// Runs `kd` with stdout a pipe whose reader has already gone, as in
/// `kd … | head` once head has exited.
async fn kd_into_closed_pipe(kdd: &Kdd, cwd: &std::path::Path, args: &[&str]) -> kd_tests::Output {
    let (reader, writer) = rustix::pipe::pipe().unwrap();
    drop(reader);
    let mut k = kdd.kd();
    k.current_dir(cwd).args(args).stdout(std::process::Stdio::from(writer)).stderr(std::process::Stdio::piped());
    // Not `output()`: it would replace stdout with a pipe of its own.
    let child = k.stdin(std::process::Stdio::null()).spawn().unwrap();
    let out = within("kd into a closed pipe", child.wait_with_output()).await.unwrap();
    kd_tests::Output {
        status: out.status,
        stdout: String::new(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn commands_whose_reader_went_away_end_quietly() {
    let ws = kd_tests::Workspace::new(&[("claude", "claude", &[])]);
    let kdd = Kdd::start();
    let cwd = ws.dir.path();
    let out = run({
        let mut k = kdd.kd();
        k.current_dir(cwd).args(["ask", "--rounds", "0", "Q?"]);
        k
    })
    .await;
    assert!(out.status.success(), "{}", out.stderr);
    for args in [
        &["events"][..],
        &["events", "--json"],
        &["completions", "bash"],
        &["show"],
        &["threads"],
        &["ask", "--json", "--rounds", "0", "Again?"],
        &["ask", "--rounds", "0", "Once more?"],
    ] {
        // A question whose kd went away is still answered by the daemon;
        // the next one starts once its answer is written (not queued
        // behind it: a run writing its message still counts, though it is
        // no longer listed in flight).
        let c = kdd.client().await;
        within("the last question's answer", async {
            loop {
                let t = c.thread_current(ws.path(), None).await.unwrap().expect("the trunk").id;
                let all = c.thread_messages(t, None, None, None, None).await.unwrap().into_vec();
                let last_king = all.iter().rposition(|m| m.from == "king");
                if c.run_list(None).await.unwrap().is_empty()
                    && last_king.is_some_and(|k| all[k..].iter().any(|m| m.from == "claude"))
                {
                    return;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        })
        .await;
        let out = kd_into_closed_pipe(&kdd, cwd, args).await;
        assert_eq!(out.status.code(), Some(0), "kd {args:?}: {}", out.stderr);
        assert_eq!(out.stderr, "", "kd {args:?} must end quietly");
    }
}

#[test]
fn both_binaries_say_their_version_and_the_commit_they_were_built_from() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let head = Command::new("git").args(["-C", root, "rev-parse", "--short=12", "HEAD"]).output().ok();
    let commit = head
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown commit".to_string());
    for name in ["kd", "kdd"] {
        let out = Command::new(bin(name)).arg("--version").output().unwrap();
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(text.trim(), format!("{name} {} ({commit})", env!("CARGO_PKG_VERSION")), "{name}");
    }
}

/// On glibc 2.36 or newer, both binaries carry their relative relocations
/// packed (a `SHT_RELR` section; `build/relr.rs`): 18 KB instead of 1.4 MB
/// the loader reads at each start, ~3 MB less of kdd resident at idle.
#[test]
fn both_binaries_pack_their_relative_relocations_where_glibc_applies_them() {
    let glibc = Command::new("getconf").arg("GNU_LIBC_VERSION").output().ok();
    let version = glibc.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default();
    let Some((major, minor)) = version.strip_prefix("glibc ").and_then(|v| v.split_once('.')) else {
        eprintln!("skipped: not glibc ({version:?})");
        return;
    };
    let minor: u32 = minor.split('.').next().and_then(|m| m.parse().ok()).unwrap_or(0);
    if (major.parse::<u32>().unwrap_or(0), minor) < (2, 36) || std::env::var_os("KD_NO_RELR").is_some() {
        eprintln!("skipped: {version} does not apply packed relocations");
        return;
    }
    for name in ["kd", "kdd"] {
        let elf = std::fs::read(bin(name)).unwrap();
        assert!(section_types(&elf).contains(&SHT_RELR), "{name} has no packed relocations");
    }
}

const SHT_RELR: u32 = 19;

/// On glibc, kd carries its unwinder (`libgcc_eh.a`) instead of loading
/// `libgcc_s.so.1` at each start (issue 31, item 17; kd's `main.rs`).
#[test]
fn kd_loads_no_libgcc_s_at_its_start() {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    let out = Command::new("readelf").arg("--dynamic").arg(bin("kd")).output().expect("readelf (binutils)");
    let dynamic = String::from_utf8_lossy(&out.stdout);
    assert!(dynamic.contains("(NEEDED)") && dynamic.contains("libc.so"), "{dynamic}");
    assert!(!dynamic.contains("libgcc_s"), "{dynamic}");
}

/// The types of an ELF64 little-endian file's sections.
fn section_types(elf: &[u8]) -> Vec<u32> {
    assert_eq!(&elf[..6], b"\x7fELF\x02\x01", "an ELF64 little-endian file");
    let u16_at = |at: usize| u16::from_le_bytes([elf[at], elf[at + 1]]) as usize;
    let u32_at = |at: usize| u32::from_le_bytes(elf[at..at + 4].try_into().unwrap());
    let table = u64::from_le_bytes(elf[0x28..0x30].try_into().unwrap()) as usize;
    let (size, count) = (u16_at(0x3a), u16_at(0x3c));
    (0..count).map(|i| u32_at(table + i * size + 4)).collect()
}

/// A listener on a socket kd is not allowed to connect to: the socket is
/// mode 000, so `connect()` fails with EACCES as it does inside an agent's
/// sandbox that forbids Unix sockets. As root (who passes any mode) the
/// listener and kd run as another user. The listener lives as long as this.
struct Forbidden {
    socket: std::path::PathBuf,
    dir: std::path::PathBuf,
    _listener: Option<std::os::unix::net::UnixListener>,
    impostor: Option<std::process::Child>,
    kd: Option<kd_tests::other_user::Runnable>,
}

impl Forbidden {
    fn new() -> Forbidden {
        use std::os::unix::fs::PermissionsExt;
        let dir = kd_tests::other_user::unique("kd-forbidden");
        let socket = dir.join("kdd.sock");
        let root = rustix::process::getuid().is_root();
        let (listener, impostor, kd) = if root {
            // A listener of the other user's in its own private directory.
            let l = kd_tests::other_user::runnable("unix-listener");
            let mut child = kd_tests::other_user::command(&l)
                .arg(&socket)
                .arg("--make-dir")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("a listener as another user");
            let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
            let mut line = String::new();
            std::io::BufRead::read_line(&mut out, &mut line).unwrap();
            assert_eq!(line.trim(), "ready");
            (None, Some(child), Some(kd_tests::other_user::runnable("kd")))
        } else {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
            (Some(std::os::unix::net::UnixListener::bind(&socket).unwrap()), None, None)
        };
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o000)).unwrap();
        Forbidden { socket, dir, _listener: listener, impostor, kd }
    }

    /// `kd --socket SOCKET ARGS…` as the socket's user; auto-start would run
    /// a kdd that is not there.
    fn kd(&self, args: &[&str]) -> tokio::process::Command {
        let mut k = match &self.kd {
            Some(kd) => tokio::process::Command::from(kd_tests::other_user::command(kd)),
            None => tokio::process::Command::new(bin("kd")),
        };
        k.arg("--socket")
            .arg(&self.socket)
            .args(args)
            .env("KD_KDD", "/nonexistent/kdd")
            .env_remove("KD_NO_AUTOSTART")
            .kill_on_drop(true);
        k
    }
}

impl Drop for Forbidden {
    fn drop(&mut self) {
        if let Some(c) = &mut self.impostor {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_socket_kd_may_not_connect_to_is_not_a_missing_daemon() {
    if rustix::process::getuid().is_root()
        && !kd_tests::other_user::available("a_socket_kd_may_not_connect_to_is_not_a_missing_daemon")
    {
        return;
    }
    let f = Forbidden::new();
    let expected = format!(
        "kd: permission denied connecting to kdd at {} (a sandbox may forbid Unix sockets)",
        f.socket.display()
    );
    for (args, no_autostart) in [
        (&["threads"][..], false),
        (&["threads"][..], true),
        (&["daemon", "start"][..], false),
        (&["daemon", "status"][..], false),
    ] {
        let mut k = f.kd(args);
        if no_autostart {
            k.env("KD_NO_AUTOSTART", "1");
        }
        let out = run(k).await;
        assert_eq!(out.status.code(), Some(3), "kd {args:?}: {}{}", out.stdout, out.stderr);
        assert_eq!(out.stderr.trim_end(), expected, "kd {args:?}");
        assert!(!out.stdout.contains("not running"), "kd {args:?}: {}", out.stdout);
    }
    // No start was attempted: a starter takes the start lock first.
    assert!(!f.dir.join("kdd.sock.start.lock").exists(), "kd tried to start a second kdd");
}

/// `kd events` is `tail`: the newest events (oldest first among them), a
/// line saying where the older ones are, `--before`/`--since` to page, and
/// a `--limit` over one page of the daemon fetched page by page, not cut
/// (issue 21 item 10).
#[tokio::test(flavor = "multi_thread")]
async fn kd_events_shows_the_newest_and_says_where_the_older_ones_are() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = c.thread_create(workspace("tail"), None, None, None, None, None, None, None, None).await.unwrap().id;
    kd_tests::fill(&kdd, &t, 1100, 4, |i| format!("m{i}")).await;
    let events = |args: &[&str]| {
        let mut k = kdd.kd();
        k.args(["events", "--thread", &t]).args(args);
        run(k)
    };
    let ids = |json: &str| -> Vec<u64> {
        let v: Vec<kd_proto::types::Event> = serde_json::from_str(json).unwrap();
        v.iter().map(|e| e.id).collect()
    };
    let all = ids(&events(&["--json", "--since", "0", "--limit", "5000"]).await.stdout);
    assert_eq!(all.len(), 1101, "thread.create and 1,100 messages, past one page of 1,000");
    let newest = *all.last().unwrap();

    let out = events(&["--limit", "3"]).await;
    assert!(out.status.success(), "{}", out.stderr);
    let rows: Vec<&str> = out.stdout.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{}", out.stdout);
    assert!(rows[2].starts_with(&format!("{newest} ")), "the newest last: {}", out.stdout);
    let oldest_shown = all[all.len() - 3];
    assert!(rows[0].starts_with(&format!("{oldest_shown} ")), "{}", out.stdout);
    assert!(out.stderr.contains(&format!("kd events --before {oldest_shown}")), "{}", out.stderr);

    let tail = ids(&events(&["--json", "--limit", "1050"]).await.stdout);
    assert_eq!(tail, all[all.len() - 1050..], "more than a page, the newest, in order");
    let back = ids(&events(&["--json", "--limit", "2", "--before", &oldest_shown.to_string()]).await.stdout);
    assert_eq!(back, all[all.len() - 5..all.len() - 3]);
    let forward = ids(&events(&["--json", "--limit", "2", "--since", &all[0].to_string()]).await.stdout);
    assert_eq!(forward, all[1..3]);
    // Everything shown: nothing more to say.
    let out = events(&["--limit", "2000"]).await;
    assert_eq!(out.stdout.lines().count(), 1 + 1101);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
}
