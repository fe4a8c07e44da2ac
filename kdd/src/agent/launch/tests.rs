use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use super::*;

fn env_with_path(path: Option<&str>) -> Vec<(OsString, OsString)> {
    path.map(|p| vec![("PATH".into(), p.into())]).unwrap_or_default()
}

fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
fn a_program_is_found_on_the_path_it_is_given_as_execvp_finds_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    make_executable(&b.join("agent"));
    std::fs::write(a.join("agent"), "not executable").unwrap();
    let path = format!("{}:{}", a.display(), b.display());
    let found = |program: &str, path: Option<&str>| found(program, &env_with_path(path), tmp.path());
    let kind = |r: io::Result<PathBuf>| r.unwrap_err().kind();
    // An empty entry is the working directory, as for execvp.
    make_executable(&tmp.path().join("here"));
    assert_eq!(found("here", Some(":/nonexistent")).unwrap(), tmp.path().join("./here"));
    assert_eq!(found("agent", Some(&path)).unwrap(), b.join("agent"), "one that cannot run is passed over");
    assert_eq!(kind(found("agent", Some(&a.display().to_string()))), io::ErrorKind::PermissionDenied);
    assert_eq!(kind(found("kd-no-such-agent", Some(&path))), io::ErrorKind::NotFound);
    make_executable(&tmp.path().join("agent"));
    assert_eq!(kind(found("agent", None)), io::ErrorKind::NotFound, "no PATH: not the working directory");
    assert_eq!(found("sh", None).unwrap(), PathBuf::from("/bin/sh"), "no PATH: the system's");
    make_executable(&tmp.path().join("x"));
    assert_eq!(found("./x", Some("")).unwrap(), PathBuf::from("./x"), "a path as it is");
    assert_eq!(kind(found("/opt/none/agent", None)), io::ErrorKind::NotFound, "a path to nothing");
    assert_eq!(kind(found("a/agent", None)), io::ErrorKind::PermissionDenied);
    // A relative directory of PATH is where the program starts.
    assert_eq!(found("agent", Some("b")).unwrap(), tmp.path().join("b/agent"));
}

fn inv(program: &str, args: &[&str], env: &[(&str, &str)]) -> Invocation {
    Invocation {
        program: program.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        stdin: None,
        env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
    }
}

#[test]
fn an_agent_gets_kdds_environment_without_markers_secrets_or_the_managers_and_with_its_own() {
    let own = [
        ("HOME", "/home/king"),
        ("PATH", "/kdd/bin"),
        (RUN_MARKER, "r-of-kdds-shell"),
        (TOKEN_VAR, "kdcap_kdds"),
        ("PGPASSWORD", "secret"),
        ("KD_DB", "postgres://kd:secret@db/kd"),
        ("NOTIFY_SOCKET", "/run/systemd/notify"),
    ]
    .map(|(k, v)| (OsString::from(k), OsString::from(v)));
    let env = environment_from(
        own.into_iter(),
        &inv("agent", &[], &[("PATH", "/king/bin"), (RUN_MARKER, "r-1"), ("PGPASSWORD", "again")]),
    );
    let get = |k: &str| env.iter().find(|(key, _)| key == k).map(|(_, v)| v.to_str().unwrap().to_string());
    assert_eq!(get("HOME").as_deref(), Some("/home/king"));
    assert_eq!(get("PATH").as_deref(), Some("/king/bin"), "the invocation's PATH wins");
    assert_eq!(get(RUN_MARKER).as_deref(), Some("r-1"), "the invocation's marker, not kdd's");
    assert_eq!(get(TOKEN_VAR), None, "no capability but the invocation's");
    for gone in ["PGPASSWORD", "KD_DB", "NOTIFY_SOCKET"] {
        assert_eq!(get(gone), None, "{gone} is kdd's");
    }
    assert_eq!(get(kd_proto::paths::ENV_NO_AUTOSTART).as_deref(), Some("1"));
    let file_db = [(OsString::from("KD_DB"), OsString::from("/var/lib/kd/registry.sqlite3"))];
    let env = environment_from(file_db.into_iter(), &inv("agent", &[], &[]));
    assert!(env.iter().any(|(k, _)| k == "KD_DB"), "a path to a file is no secret");
}

/// What `/proc/PID/status` says on `line` (e.g. `SigIgn:`), for a child
/// that printed its own status.
fn status_line<'a>(status: &'a str, line: &str) -> &'a str {
    status.lines().find_map(|l| l.strip_prefix(line)).unwrap_or_else(|| panic!("{line} in {status}")).trim()
}

/// A child started here leads a session of its own, has the user's umask,
/// its argv0 as given, its cwd, no signal blocked or ignored (kdd's
/// runtime ignores SIGPIPE), its parent-death signal and its pipes.
#[tokio::test]
async fn a_child_is_set_up_as_an_agent_must_be() {
    let tmp = tempfile::tempdir().unwrap();
    // A signal ignored and one blocked in kdd: neither reaches the child.
    // SAFETY: sets this test thread's SIGPIPE action (Rust ignores it
    // already) and its mask.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        let mut usr1: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut usr1);
        libc::sigaddset(&mut usr1, libc::SIGUSR1);
        libc::pthread_sigmask(libc::SIG_BLOCK, &usr1, std::ptr::null_mut());
    }
    let script = "cat /proc/self/status; echo \"cwd=$(pwd)\"; echo \"argv0=$0\"; echo \"x=$KD_X\"; \
                  ps -o sid= -p $$ | sed 's/^ */sid=/'; echo oops >&2";
    let mut inv = inv("sh", &["-c", script], &[("KD_X", "1")]);
    inv.program = "sh".into();
    let child = start(&inv, tmp.path(), Origin::Tool, None).unwrap();
    let pid = child.id().unwrap();
    let out = child.wait_with_output().await.unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    // `cat` is sh's child: what it shows of signals it inherited from sh,
    // which inherited them from the child kdd started.
    assert_eq!(u64::from_str_radix(status_line(&text, "SigBlk:"), 16).unwrap(), 0, "nothing blocked");
    let ignored = u64::from_str_radix(status_line(&text, "SigIgn:"), 16).unwrap();
    assert_eq!(ignored & (1 << (libc::SIGPIPE - 1)), 0, "SIGPIPE is not ignored: {ignored:x}");
    let umask = crate::private::inherited_umask().bits();
    assert_eq!(u32::from_str_radix(status_line(&text, "Umask:"), 8).unwrap(), umask);
    let cwd = tmp.path().canonicalize().unwrap();
    assert_eq!(status_line(&text, "cwd="), cwd.to_str().unwrap());
    assert_eq!(status_line(&text, "argv0="), "sh");
    assert_eq!(status_line(&text, "x="), "1");
    assert_eq!(status_line(&text, "sid="), pid.to_string(), "it leads its own session");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "oops\n");
}

#[tokio::test]
async fn a_child_reads_its_input_and_its_exit_is_told() {
    let mut inv = inv("sh", &["-c", "read line; echo \"got $line\"; exit 3"], &[]);
    inv.stdin = Some("hello\n".into());
    let mut child = start(&inv, Path::new("/"), Origin::Tool, None).unwrap();
    let mut stdin = child.stdin.take().expect("stdin is piped when there is input");
    tokio::io::AsyncWriteExt::write_all(&mut stdin, b"hello\n").await.unwrap();
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "got hello\n");
}

/// The death signal follows the thread that started the child (as kdd's
/// spawning threads, which live as long as kdd).
#[tokio::test]
async fn a_child_dies_when_the_thread_that_started_it_exits() {
    let runtime = tokio::runtime::Handle::current();
    let (child_tx, child_rx) = std::sync::mpsc::channel();
    let (exit_tx, exit_rx) = std::sync::mpsc::channel::<()>();
    let starter = std::thread::spawn(move || {
        let _runtime = runtime.enter();
        child_tx.send(start(&inv("sleep", &["60"], &[]), Path::new("/"), Origin::Tool, None).unwrap()).unwrap();
        let _ = exit_rx.recv();
    });
    let mut child = child_rx.recv().unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(100), child.wait()).await;
    assert!(waited.is_err(), "sleep runs while its starter does");
    exit_tx.send(()).unwrap();
    starter.join().unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait()).await.expect("it dies").unwrap();
    assert_eq!(status.signal(), Some(9), "killed by its parent-death signal: {status:?}");
}

#[tokio::test]
async fn what_cannot_start_is_an_error_of_the_spawn_and_leaves_no_process() {
    let tmp = tempfile::tempdir().unwrap();
    let err = |inv: &Invocation, cwd: &Path, confine: Option<Confine>| match start(inv, cwd, Origin::Tool, confine) {
        Ok(_) => panic!("{inv:?} started"),
        Err(e) => e,
    };
    assert_eq!(err(&inv("kd-no-such-agent", &[], &[]), tmp.path(), None).kind(), io::ErrorKind::NotFound);
    std::fs::write(tmp.path().join("plain"), "").unwrap();
    assert_eq!(err(&inv("./plain", &[], &[]), tmp.path(), None).kind(), io::ErrorKind::PermissionDenied);
    let gone = tmp.path().join("gone");
    let e = err(&inv("true", &[], &[]), &gone, None);
    assert!(e.to_string().contains("cannot enter") && e.to_string().contains("gone"), "{e}");
    let refuse: Confine = Box::new(|| Err(io::Error::from_raw_os_error(libc::EPERM)));
    let e = err(&inv("true", &[], &[]), tmp.path(), Some(refuse));
    assert!(e.to_string().starts_with("cannot confine it"), "{e}");
    let nul = err(&inv("true", &["a\0b"], &[]), tmp.path(), None);
    assert_eq!(nul.kind(), io::ErrorKind::InvalidInput);
}

/// Dropped before it was waited for, a child is killed.
#[tokio::test]
async fn a_child_dropped_unwaited_is_killed() {
    let child = start(&inv("sleep", &["60"], &[]), Path::new("/"), Origin::Tool, None).unwrap();
    let pid = child.id().unwrap();
    let started = crate::identity::children::start_time(pid);
    drop(child);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let alive = crate::identity::ancestry::stat(pid).is_some_and(|s| !s.is_zombie() && Some(s.start) == started);
        if !alive {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "sleep outlived its handle");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The fork kdd falls back on sets the child up the same way.
#[tokio::test]
async fn a_forked_child_is_set_up_as_a_cloned_one() {
    let tmp = tempfile::tempdir().unwrap();
    let inv = inv("sh", &["-c", "umask; ps -o sid= -p $$"], &[]);
    let env = environment(&inv);
    let child = forked(&inv, tmp.path(), env, Origin::Tool, None).unwrap();
    let pid = child.id().unwrap();
    let out = child.wait_with_output().await.unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    assert_eq!(u32::from_str_radix(lines[0], 8).unwrap(), crate::private::inherited_umask().bits());
    assert_eq!(lines[1], pid.to_string(), "its own session");
}

/// Outside kdd's runtime a child cannot be waited for: the start is an
/// error, not a panic, and nothing is started.
#[test]
fn a_start_outside_the_runtime_is_refused_without_a_panic() {
    let started =
        std::thread::spawn(|| start(&inv("sleep", &["60"], &[]), Path::new("/"), Origin::Tool, None).map(drop))
            .join()
            .expect("no panic");
    let e = started.expect_err("refused");
    assert!(e.to_string().contains("runtime"), "{e}");
}
