//! One run of a check: its argv (never a shell unless it says so) in the
//! worktree, confined there ([`super::sandbox`]), in a session and process
//! group of its own that dies with kdd; killed as a group at its timeout or
//! when it is stopped (a newer check, the daemon stopping); the tail of
//! what it printed kept.

use std::path::Path;
use std::time::{Duration, Instant};

use kd_proto::work::CheckStatus;
use rustix::process::Signal;
use tokio_util::sync::CancellationToken;

use super::sandbox::Sandbox;
use crate::agent::process::{self, Invocation};

/// Bytes of a check's output kept (its tail).
pub const TAIL: usize = 16 * 1024;

/// Marks what a check starts, so nothing of it outlives it (`KD_CHECK=
/// c-…@SOCKET`).
use crate::identity::CHECK_MARKER as MARKER;

/// How a check came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub status: CheckStatus,
    pub exit_code: Option<i32>,
    pub duration_ms: u64,
    pub output: String,
}

/// What a check is run with.
pub struct Spec<'a> {
    pub argv: &'a [String],
    /// The worktree: its working directory, where alone it may write.
    pub dir: &'a Path,
    /// Its temporary directory (`TMPDIR`), writable too.
    pub tmp: Option<&'a Path>,
    /// The `PATH` it is found on and runs with (none: kdd's).
    pub path: Option<&'a str>,
    pub timeout: Duration,
    /// How long a signalled check has before SIGKILL.
    pub grace: Duration,
    /// Names it in its marker.
    pub id: &'a str,
}

/// Runs the check; `None` when `stop` fired first (it was killed, and
/// nothing is to be recorded of it).
pub async fn run(spec: &Spec<'_>, stop: &CancellationToken) -> Option<Outcome> {
    let started = Instant::now();
    let error = |output: String| Outcome {
        status: CheckStatus::Error,
        exit_code: None,
        duration_ms: started.elapsed().as_millis() as u64,
        output,
    };
    let Some((program, args)) = spec.argv.split_first() else {
        return Some(error("work.check names no program".into()));
    };
    let mut dirs = vec![spec.dir];
    dirs.extend(spec.tmp);
    let sandbox = match Sandbox::new(&dirs) {
        Ok(s) => s,
        Err(e) => return Some(error(e)),
    };
    let mut env: Vec<(String, String)> = spec.path.iter().map(|p| ("PATH".to_string(), p.to_string())).collect();
    if let Some(tmp) = spec.tmp {
        env.push(("TMPDIR".into(), tmp.display().to_string()));
    }
    env.push((MARKER.into(), spec.id.to_string()));
    let inv = Invocation { program: program.clone(), args: args.to_vec(), stdin: None, env };
    let mut child = match process::spawn_confined(&inv, spec.dir, sandbox.restrict()) {
        Ok(c) => c,
        Err(e) => return Some(error(format!("cannot run {program}: {e}"))),
    };
    drop(sandbox);
    let pid = child.id().unwrap_or(0);
    let born = process::start_time(pid);
    let out = child.stdout.take().map(|o| crate::agent::lines::tail(o, TAIL));
    let err = child.stderr.take().map(|e| crate::agent::lines::tail(e, TAIL));
    enum End {
        Exited(Option<std::process::ExitStatus>),
        TimedOut,
        Stopped,
    }
    let end = tokio::select! {
        status = child.wait() => End::Exited(status.ok()),
        _ = tokio::time::sleep(spec.timeout) => End::TimedOut,
        _ = stop.cancelled() => End::Stopped,
    };
    if !matches!(end, End::Exited(_)) {
        process::signal_group(pid, Signal::TERM);
        if tokio::time::timeout(spec.grace, child.wait()).await.is_err() {
            process::signal_group(pid, Signal::KILL);
            let _ = child.wait().await;
        }
    }
    let duration_ms = started.elapsed().as_millis() as u64;
    // What it left behind (moved to a group or session of its own) goes too.
    let marker = process::marker(MARKER, spec.id);
    let _ = tokio::task::spawn_blocking(move || process::kill_tree(pid, born, &marker)).await;
    let read = |h: Option<tokio::task::JoinHandle<String>>| async move {
        match h {
            Some(h) => {
                tokio::time::timeout(Duration::from_secs(2), h).await.ok().and_then(Result::ok).unwrap_or_default()
            }
            None => String::new(),
        }
    };
    let said = format!("{}{}", read(out).await, read(err).await);
    let output = tail(&said, TAIL);
    Some(match end {
        End::Stopped => return None,
        End::TimedOut => Outcome { status: CheckStatus::Timeout, exit_code: None, duration_ms, output },
        End::Exited(Some(s)) if s.success() => {
            Outcome { status: CheckStatus::Pass, exit_code: Some(0), duration_ms, output }
        }
        End::Exited(Some(s)) => Outcome { status: CheckStatus::Fail, exit_code: s.code(), duration_ms, output },
        End::Exited(None) => Outcome {
            status: CheckStatus::Error,
            exit_code: None,
            duration_ms,
            output: format!("{output}\n(kd lost the check's exit status)"),
        },
    })
}

/// The last `max` bytes of `s` (on a character boundary).
pub fn tail(s: &str, max: usize) -> String {
    let mut at = s.len().saturating_sub(max);
    while !s.is_char_boundary(at) {
        at += 1;
    }
    s[at..].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each its own marker: the tests run at once, and the one's kill of
    /// what its check left must not find the other's (it did: a check
    /// killed by another test's clean-up read `fail`).
    fn spec<'a>(argv: &'a [String], dir: &'a Path, timeout: Duration) -> Spec<'a> {
        let id = Box::leak(format!("c-test-{}", crate::db::random_id(8)).into_boxed_str());
        Spec { argv, dir, tmp: None, path: None, timeout, grace: Duration::from_millis(500), id }
    }

    fn argv(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn landlock() -> bool {
        Sandbox::new(&[Path::new("/tmp")]).is_ok()
    }

    #[tokio::test]
    async fn a_check_passes_fails_or_times_out_and_keeps_its_outputs_tail() {
        if !landlock() {
            return eprintln!("skipped: no Landlock here");
        }
        let dir = tempfile::tempdir().unwrap();
        let stop = CancellationToken::new();
        let pass = run(&spec(&argv(&["true"]), dir.path(), Duration::from_secs(30)), &stop).await.unwrap();
        assert_eq!((pass.status, pass.exit_code), (CheckStatus::Pass, Some(0)));
        let big = argv(&["sh", "-c", "yes abcdefgh | head -c 100000; echo FAILED >&2; exit 3"]);
        let fail = run(&spec(&big, dir.path(), Duration::from_secs(30)), &stop).await.unwrap();
        assert_eq!((fail.status, fail.exit_code), (CheckStatus::Fail, Some(3)));
        assert!(fail.output.len() <= TAIL && fail.output.ends_with("FAILED\n"), "{}", fail.output.len());
        let slow = argv(&["sh", "-c", "sleep 30 & sleep 30"]);
        let t = run(&spec(&slow, dir.path(), Duration::from_millis(300)), &stop).await.unwrap();
        assert_eq!((t.status, t.exit_code), (CheckStatus::Timeout, None));
        assert!(t.duration_ms < 10_000, "killed as a group at its timeout: {}", t.duration_ms);
        let missing = run(&spec(&argv(&["no-such-program-kd"]), dir.path(), Duration::from_secs(5)), &stop).await;
        assert_eq!(missing.unwrap().status, CheckStatus::Error);
    }

    #[tokio::test]
    async fn a_stopped_check_is_killed_and_records_nothing() {
        if !landlock() {
            return eprintln!("skipped: no Landlock here");
        }
        let dir = tempfile::tempdir().unwrap();
        let stop = CancellationToken::new();
        let slow = argv(&["sleep", "30"]);
        let s = spec(&slow, dir.path(), Duration::from_secs(60));
        let (stopper, begun) = (stop.clone(), Instant::now());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            stopper.cancel();
        });
        assert_eq!(run(&s, &stop).await, None);
        assert!(begun.elapsed() < Duration::from_secs(10));
    }
}
