//! kdd under a service manager (issue 12, item 1, in part): `READY=1` and
//! `STOPPING=1` over `NOTIFY_SOCKET`, watchdog pings, and agents that never
//! inherit the manager's variables. The manager is played by a datagram
//! socket, as systemd's is.

use std::os::unix::net::UnixDatagram;

use kd_client::prelude::*;
use kd_tests::{Kdd, TestDb, Workspace, collect_until};

/// The next notification, waiting at most the test deadline.
fn next(sock: &UnixDatagram) -> String {
    sock.set_read_timeout(Some(kd_tests::DEADLINE)).unwrap();
    let mut buf = [0u8; 4096];
    let n = sock.recv(&mut buf).expect("a notification before the deadline");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn kdd_tells_the_manager_it_is_ready_pings_the_watchdog_and_says_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&path).unwrap();
    let ws = Workspace::new(&[]);
    ws.write_config(&serde_json::json!({
        "council": {"members": ["claude"]},
        "agents": {"claude": kd_tests::fake("claude", "claude", &[
            ("FAKE_RUN", "echo notify=${NOTIFY_SOCKET:-none} watchdog=${WATCHDOG_USEC:-none}"),
            ("FAKE_TEXT", "{run}"),
        ])},
    }));
    let notify = path.display().to_string();
    let mut kdd = Kdd::start_env(&[], &[("NOTIFY_SOCKET", &notify)]);
    let ready = next(&manager);
    assert!(ready.contains("READY=1\n"), "{ready:?}");
    assert!(ready.contains(&format!("STATUS=listening on {}", kdd.socket.display())), "{ready:?}");

    // An agent's environment has none of the manager's variables.
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, &ws.path()).await;
    let mut sub = c.thread_subscribe(t.clone(), None, None).await.unwrap();
    c.council_send(t.clone(), "Env?".into(), None, None, None, None, None, Some(0), None, None).await.unwrap();
    collect_until(&mut sub, |e| kd_tests::ended(e) == 1).await;
    let answer = c.thread_messages(t, Some(1), None, None, None).await.unwrap().pop().unwrap();
    assert_eq!(answer.body.trim(), "notify=none watchdog=none");

    kdd.stop();
    let stopping = next(&manager);
    assert!(stopping.contains("STOPPING=1\n"), "{stopping:?}");
}

#[test]
fn kdd_pings_the_watchdog_the_manager_set_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let manager = UnixDatagram::bind(&path).unwrap();
    let private = dir.path().join("run");
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&private).unwrap();
    let db = TestDb::fresh(private.join("kd.sqlite3"));
    // WATCHDOG_PID must be kdd's own pid, as systemd sets it: a shell that
    // exports its pid and then becomes kdd.
    let mut child = std::process::Command::new("sh")
        .arg("-c")
        .arg("WATCHDOG_PID=$$ exec \"$0\" --socket \"$1\" --db \"$2\"")
        .arg(kd_tests::bin("kdd"))
        .arg(private.join("kd.sock"))
        .arg(db.arg())
        .envs(db.data_env())
        .env("NOTIFY_SOCKET", &path)
        .env("WATCHDOG_USEC", "100000")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    assert!(next(&manager).contains("READY=1"));
    // At half the interval: two pings come well within the deadline.
    for _ in 0..2 {
        assert_eq!(next(&manager), "WATCHDOG=1\n");
    }
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).unwrap();
    let mut saw_stopping = false;
    for _ in 0..20 {
        let n = next(&manager);
        if n.contains("STOPPING=1") {
            saw_stopping = true;
            break;
        }
    }
    assert!(saw_stopping, "STOPPING=1 at SIGTERM");
    assert!(child.wait().unwrap().success());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_manager_that_does_not_read_never_holds_kdd_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let _manager = UnixDatagram::bind(&path).unwrap();
    // Its queue is full before kdd starts: a blocking send would wait for
    // ever, for the manager never reads.
    let filler = UnixDatagram::unbound().unwrap();
    filler.set_nonblocking(true).unwrap();
    let mut queued = 0;
    loop {
        match filler.send_to(b"STATUS=filler\n", &path) {
            Ok(_) => queued += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(queued > 0);
    let log = dir.path().join("kdd.log");
    let (log_arg, notify) = (log.display().to_string(), path.display().to_string());
    let mut kdd = Kdd::start_env(&["--log-file", &log_arg], &[("NOTIFY_SOCKET", &notify)]);
    // It serves, and SIGTERM stops it (the harness kills it at the deadline).
    let c = kdd.client().await;
    c.daemon_status().await.unwrap();
    drop(c);
    let status = kdd.stop();
    assert!(status.success(), "kdd exited with {status}");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("2 notification(s) to the service manager dropped"),
        "READY and STOPPING are counted: {text}"
    );
}

#[test]
fn on_the_journal_kdd_logs_priority_prefixed_lines() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let manager = UnixDatagram::bind(dir.path().join("notify.sock")).unwrap();
    let private = dir.path().join("run");
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&private).unwrap();
    let db = TestDb::fresh(private.join("kd.sqlite3"));
    let log = std::fs::File::create(dir.path().join("journal")).unwrap();
    let meta = log.metadata().unwrap();
    let mut child = std::process::Command::new(kd_tests::bin("kdd"))
        .arg("--socket")
        .arg(private.join("kd.sock"))
        .arg("--db")
        .arg(db.arg())
        .envs(db.data_env())
        .env("NOTIFY_SOCKET", dir.path().join("notify.sock"))
        .env("JOURNAL_STREAM", format!("{}:{}", meta.dev(), meta.ino()))
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    assert!(next(&manager).contains("READY=1"));
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).unwrap();
    assert!(child.wait().unwrap().success());
    let text = std::fs::read_to_string(dir.path().join("journal")).unwrap();
    assert!(text.lines().any(|l| l.starts_with("<6>kdd: kdd ") && l.contains("listening")), "{text}");
    assert!(text.lines().all(|l| l.starts_with('<')), "every line has its priority, no timestamp: {text}");
}

/// A private directory (0700) for sockets under `dir`.
fn private_dir(dir: &std::path::Path) -> std::path::PathBuf {
    let private = dir.join("run");
    std::os::unix::fs::DirBuilderExt::mode(&mut std::fs::DirBuilder::new(), 0o700).create(&private).unwrap();
    private
}

/// Whether a system tool is here; when not, the test says why it skips.
fn have(tool: &str) -> bool {
    let found = std::process::Command::new("sh").arg("-c").arg(format!("command -v {tool}")).output();
    let ok = found.is_ok_and(|o| o.status.success());
    if !ok {
        kd_tests::skip("service", &format!("{tool} is not installed (Debian: apt-get install systemd)"));
    }
    ok
}

/// The real `kd` for `socket` and registry `db` (`KD_DB`), allowed to
/// auto-start (KD_KDD names ours).
fn kd_for(socket: &std::path::Path, db: &TestDb) -> std::process::Command {
    let mut cmd = std::process::Command::new(kd_tests::bin("kd"));
    cmd.env("KD_SOCKET", socket)
        .envs(db.env())
        .env("KD_KDD", kd_tests::bin("kdd"))
        .env_remove("KD_NO_AUTOSTART")
        .stdin(std::process::Stdio::null());
    cmd
}

fn status_of(socket: &std::path::Path) -> serde_json::Value {
    let answer = kd_tests::rpc_post(socket, r#"{"jsonrpc":"2.0","id":1,"method":"daemon.status","params":{}}"#);
    answer["result"].clone()
}

#[test]
fn kdd_started_by_socket_activation_serves_kd_and_no_second_daemon_starts() {
    if !have("systemd-socket-activate") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let run = private_dir(dir.path());
    let socket = run.join("kdd.sock");
    let db = TestDb::fresh(dir.path().join("kd.sqlite3"));
    // systemd's own tool: binds, waits for the first connection, then execs
    // kdd with LISTEN_FDS/LISTEN_PID/LISTEN_FDNAMES set, as kdd.socket does.
    let mut manager = std::process::Command::new("systemd-socket-activate")
        .arg("-l")
        .arg(&socket)
        .arg("--fdname=kdd")
        .args(db.env().iter().map(|(k, v)| format!("--setenv={k}={}", v.to_string_lossy())))
        .arg(kd_tests::bin("kdd"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Listening before anything runs: wait for the socket file.
    let deadline = std::time::Instant::now() + kd_tests::DEADLINE;
    while !socket.exists() {
        if let Ok(Some(exit)) = manager.try_wait() {
            let mut said = String::new();
            let _ = std::io::Read::read_to_string(&mut manager.stderr.take().unwrap(), &mut said);
            panic!("systemd-socket-activate exited with {exit}: {said}");
        }
        assert!(std::time::Instant::now() < deadline, "systemd-socket-activate never listened");
        std::thread::yield_now();
    }

    // kd, free to auto-start, connects and is served by the activated kdd.
    let out = kd_for(&socket, &db).args(["threads"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let status = status_of(&socket);
    assert_eq!(status["socket_activated"], true, "{status}");
    // The daemon is the manager's process (it exec'd kdd), and the only one:
    // the lock beside the socket is held by that pid.
    assert_eq!(status["pid"], manager.id(), "{status}");
    let lock = std::fs::read_to_string(run.join("kdd.sock.lock")).unwrap();
    assert_eq!(lock.trim(), manager.id().to_string());

    // kd daemon status says who started it.
    let out = kd_for(&socket, &db).args(["daemon", "status"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("by the service manager"));

    // A kdd started by hand on that path refuses; the manager keeps it.
    let mut by_hand = std::process::Command::new(kd_tests::bin("kdd"));
    by_hand.arg("--socket").arg(&socket).arg("--db").arg(dir.path().join("other.sqlite3"));
    let (started, said) = kd_tests::kdd_outcome(by_hand);
    assert!(!started, "a second daemon started");
    assert!(said.contains(&format!("already running on {} (pid {})", socket.display(), manager.id())), "{said}");

    // kd daemon stop stops it and says the manager still listens.
    let out = kd_for(&socket, &db).args(["daemon", "stop"]).output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.contains("starts kdd on the next connection"), "{said}");
    let exit = manager.wait().unwrap();
    assert!(exit.success(), "kdd exited with {exit}");
    assert!(socket.exists(), "kdd removed the socket its manager made");
}

#[test]
fn kd_daemon_install_writes_units_systemd_verifies_and_uninstall_removes() {
    let dir = tempfile::tempdir().unwrap();
    let run = private_dir(dir.path());
    let socket = run.join("kdd.sock");
    let config = dir.path().join("config");
    // The units carry KD_DB: the file, or the PostgreSQL URL.
    let db = TestDb::fresh(dir.path().join("kd.sqlite3"));
    let kd = |args: &[&str]| {
        let out = kd_for(&socket, &db).args(args).env("XDG_CONFIG_HOME", &config).output().unwrap();
        assert!(out.status.success(), "kd {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let units = config.join("systemd/user");

    // --dry-run shows the units and the commands, and writes nothing.
    let shown = kd(&["daemon", "install", "--dry-run"]);
    assert!(shown.contains(&format!("ListenStream={}", socket.display())), "{shown}");
    assert!(shown.contains(&format!("ExecStart={}", kd_tests::bin("kdd").canonicalize().unwrap().display())));
    assert!(shown.contains("would run: systemctl --user enable --now kdd.socket"), "{shown}");
    assert!(!units.exists(), "--dry-run wrote files");

    kd(&["daemon", "install", "--files-only"]);
    for unit in ["kdd.socket", "kdd.service"] {
        let meta = std::fs::metadata(units.join(unit)).unwrap();
        assert_eq!(std::os::unix::fs::MetadataExt::mode(&meta) & 0o777, 0o600, "{unit}");
    }
    let service = std::fs::read_to_string(units.join("kdd.service")).unwrap();
    assert!(service.contains("Type=notify") && service.contains("WatchdogSec="), "{service}");
    let carried = format!("Environment=KD_DB={}\n", db.to_string().replace('%', "%%"));
    assert!(service.contains(&carried), "the unit's kdd runs on the same registry: {service}");
    // And with the installing shell's PATH, for requests that carry none.
    let path = std::env::var("PATH").unwrap().replace('%', "%%").replace('$', "$$");
    assert!(
        service.contains(&format!("Environment=PATH={path}\n"))
            || service.contains(&format!("Environment=\"PATH={path}\"\n")),
        "{service}"
    );

    if have("systemd-analyze") {
        // A user manager needs a runtime directory; a private one will do.
        std::fs::create_dir(dir.path().join("xdg")).unwrap();
        let runtime = private_dir(&dir.path().join("xdg"));
        let out = std::process::Command::new("systemd-analyze")
            .args(["verify", "--user", "--man=no"])
            .arg(units.join("kdd.socket"))
            .arg(units.join("kdd.service"))
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("XDG_CONFIG_HOME", &config)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
    }

    let said = kd(&["daemon", "uninstall", "--files-only"]);
    assert!(said.contains("removed"), "{said}");
    assert!(!units.join("kdd.socket").exists() && !units.join("kdd.service").exists());
}

#[test]
fn installed_units_survive_cargo_clean_and_a_new_runtime_dir() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    std::fs::create_dir(dir.path().join("xdg")).unwrap();
    let runtime = private_dir(&dir.path().join("xdg"));
    let db = TestDb::fresh(dir.path().join("kd.sqlite3"));
    // The default socket, $XDG_RUNTIME_DIR/kd/kdd.sock; kdd is the one in
    // cargo's build directory (KD_KDD, target/debug).
    let out = kd_for(&runtime.join("kd/kdd.sock"), &db)
        .env_remove("KD_SOCKET")
        .env("XDG_RUNTIME_DIR", &runtime)
        .env("XDG_CONFIG_HOME", &config)
        .args(["daemon", "install", "--systemd", "--files-only"])
        .output()
        .unwrap();
    let (said, warned) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{warned}");
    let units = config.join("systemd/user");
    // The socket is written as systemd's runtime directory, %t, not as it is today.
    let socket = std::fs::read_to_string(units.join("kdd.socket")).unwrap();
    assert!(socket.contains("ListenStream=%t/kd/kdd.sock\n"), "{socket}");
    if have("systemd-analyze") {
        let out = std::process::Command::new("systemd-analyze")
            .args(["verify", "--user", "--man=no"])
            .arg(units.join("kdd.socket"))
            .arg(units.join("kdd.service"))
            .env("XDG_RUNTIME_DIR", &runtime)
            .env("XDG_CONFIG_HOME", &config)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && said.trim().is_empty(), "systemd-analyze verify: {said}");
    }
    // The commands to load it, under one heading.
    assert_eq!(said.matches("to load it").count(), 1, "{said}");
    assert!(said.contains("  systemctl --user daemon-reload\n  systemctl --user enable --now kdd.socket\n"), "{said}");
    // A kdd that `cargo clean` would remove is warned of, naming the way to install it.
    let kdd = kd_tests::bin("kdd").canonicalize().unwrap();
    assert!(warned.contains(&kdd.display().to_string()) && warned.contains("cargo install --path kdd"), "{warned}");
}

#[test]
fn the_launchd_plist_is_well_formed_and_names_the_socket() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("run/kdd.sock");
    let out = kd_for(&socket, &TestDb::file(dir.path().join("kd.sqlite3")))
        .args(["daemon", "install", "--launchd", "--dry-run"])
        .env("HOME", dir.path())
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(shown.contains("Library/LaunchAgents/dev.kd.kdd.plist"), "{shown}");
    assert!(shown.contains("would run: launchctl bootstrap gui/"), "{shown}");
    let start = shown.find("<?xml").expect("a plist");
    let end = shown.find("</plist>").expect("a whole plist") + "</plist>".len();
    let plist: plist::Value = plist::from_bytes(&shown.as_bytes()[start..end]).expect("a well-formed plist");
    let job = plist.as_dictionary().expect("a dictionary");
    assert_eq!(job["Label"].as_string(), Some("dev.kd.kdd"));
    let program = job["ProgramArguments"].as_array().unwrap()[0].as_string().unwrap();
    assert_eq!(std::path::Path::new(program), kd_tests::bin("kdd").canonicalize().unwrap());
    let sock = job["Sockets"].as_dictionary().unwrap()["kdd"].as_dictionary().unwrap();
    assert_eq!(sock["SockPathName"].as_string(), Some(socket.to_str().unwrap()));
    assert_eq!(sock["SockPathMode"].as_signed_integer(), Some(0o600));
    assert_eq!(job["KeepAlive"].as_dictionary().unwrap()["SuccessfulExit"].as_boolean(), Some(false));
    assert_eq!(job["RunAtLoad"].as_boolean(), Some(false));
    let env = job["EnvironmentVariables"].as_dictionary().unwrap();
    assert!(env["PATH"].as_string().is_some_and(|p| !p.is_empty()));
}

#[test]
fn a_value_with_a_control_character_never_reaches_a_unit_or_plist() {
    let injected = "/x\nExecStartPre=/bin/touch /tmp/p\nX=";
    for (var, manager) in [
        ("KD_DB", "--systemd"),
        ("PATH", "--systemd"),
        ("XDG_DATA_HOME", "--systemd"),
        ("KD_SOCKET", "--systemd"),
        ("KD_DB", "--launchd"),
        ("KD_SOCKET", "--launchd"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let run = private_dir(dir.path());
        let config = dir.path().join("config");
        let mut kd = kd_for(&run.join("kdd.sock"), &TestDb::file(dir.path().join("kd.sqlite3")));
        kd.args(["daemon", "install", manager, "--files-only"]).env("XDG_CONFIG_HOME", &config).env("HOME", dir.path());
        // PATH is still the test's for finding programs: kd_for names kdd by KD_KDD.
        kd.env(var, format!("{}{injected}", if var == "PATH" { "/usr/bin:" } else { "" }));
        let out = kd.output().unwrap();
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{var} {manager}: {}", String::from_utf8_lossy(&out.stdout));
        assert!(said.contains(var) && said.contains("control character"), "{var} {manager}: {said}");
        let written: Vec<_> = walk(dir.path()).into_iter().filter(|p| !p.starts_with(&run)).collect();
        assert!(written.is_empty(), "{var} {manager}: wrote {written:?}");
    }
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() { files.extend(walk(&p)) } else { files.push(p) }
    }
    files
}
