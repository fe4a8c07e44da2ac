//! How a run ends, whatever its transport: the message of a run that could
//! not start or was stopped before its agent did, why an agent could not be
//! spawned, and the outcome of a run from how it stopped and what it said.

use kd_proto::types::{RunMeta, RunStatus};

use super::parse::Transcript;
use super::process::Invocation;
use super::registry::{EMERGENCY_STOP, Run, StopReason};
use super::spec::Spec;
use crate::config::AgentDef;
use crate::db::runs::Finish;
use crate::prompt;

/// A run that failed for `reason` (said as `member: reason`).
pub(super) fn failed(member: &str, status: RunStatus, reason: String) -> Finish {
    let reason = format!("{member}: {reason}");
    Finish { status, body: reason.clone(), error: Some(reason), meta: RunMeta::default(), session: None, to: vec![] }
}

/// A run stopped before its agent was given the prompt.
pub(super) fn stopped_early(run: &Run) -> Finish {
    let status = match run.stop_reason() {
        Some(StopReason::Shutdown) => RunStatus::Interrupted,
        Some(StopReason::TimedOut) => RunStatus::TimedOut,
        _ => RunStatus::Cancelled,
    };
    Finish {
        status,
        body: "(stopped before it started)".into(),
        error: why_cancelled(run),
        meta: RunMeta::default(),
        session: None,
        to: vec![],
    }
}

/// Why a cancelled run was, when no client asked: a member's emergency
/// broadcast (kept as the end's reason, told with `run_cancelled`).
fn why_cancelled(run: &Run) -> Option<String> {
    (run.stop_reason() == Some(StopReason::Emergency)).then(|| EMERGENCY_STOP.to_string())
}

/// A run cut short while it waited for its agent (see `turn::bounded`):
/// timed out, saying what it waited for, or stopped before it started.
pub(super) fn cut_short(run: &Run, spec: &Spec, waiting_for: &str) -> Finish {
    if run.stop_reason() != Some(StopReason::TimedOut) {
        return stopped_early(run);
    }
    let reason = format!("{}: timed out after {} s waiting for {waiting_for}", run.member, spec.timeout.as_secs());
    Finish {
        status: RunStatus::TimedOut,
        body: reason.clone(),
        error: Some(reason),
        meta: RunMeta::default(),
        session: None,
        to: vec![],
    }
}

/// Why `inv` could not be spawned, and what to do about it.
pub(super) fn spawn_error(inv: &Invocation, agent: &AgentDef, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => crate::config::not_found(agent, &inv.program),
        std::io::ErrorKind::PermissionDenied => {
            format!("{} is not executable — check agents.{}.command", inv.program, agent.name)
        }
        _ => format!("cannot start {}: {e}", inv.program),
    }
}

/// What the run comes to, from how it stopped and what it said.
pub(super) fn outcome(
    run: &Run,
    spec: &Spec,
    t: &Transcript,
    exit: Option<std::process::ExitStatus>,
    stderr: &str,
) -> Finish {
    let member = &run.member;
    let result = t.result.as_ref();
    let meta = RunMeta {
        backend_session_id: t.session_id.clone(),
        cost_usd: result.and_then(|r| r.cost_usd),
        usage: result.and_then(|r| r.usage.clone()),
        exit_status: exit.and_then(|e| e.code()),
        ..RunMeta::default()
    };
    let shown = run.text();
    let with_partial = |reason: String| {
        let text = shown.trim();
        if text.is_empty() { reason } else { format!("{reason}\n\n---\n{text}") }
    };
    let answer = prompt::strip_label(member, &t.answer()).to_string();
    let (status, body, error) = match run.stop_reason() {
        Some(StopReason::TimedOut) => {
            let reason = format!("{member}: timed out after {} s", spec.timeout.as_secs());
            (RunStatus::TimedOut, with_partial(reason.clone()), Some(reason))
        }
        Some(StopReason::TooLong) => {
            let reason = format!(
                "{member}: the answer passed council.max_answer_bytes ({}); it was stopped there and the text up \
                 to it is kept",
                size(spec.max_answer_bytes)
            );
            (RunStatus::Error, with_partial(reason.clone()), Some(reason))
        }
        Some(reason) => {
            let status = if reason == StopReason::Shutdown { RunStatus::Interrupted } else { RunStatus::Cancelled };
            let text = if answer.trim().is_empty() { shown.clone() } else { answer };
            let body = if text.trim().is_empty() { "(cancelled before it said anything)".to_string() } else { text };
            (status, body, why_cancelled(run))
        }
        None => match failure(member, t, exit, stderr) {
            Some(reason) => (RunStatus::Error, with_partial(reason.clone()), Some(reason)),
            None if answer.trim().is_empty() => {
                let reason = format!("{member}: no answer{}", unreadable(t, stderr));
                (RunStatus::Error, reason.clone(), Some(reason))
            }
            None => (RunStatus::Done, answer, None),
        },
    };
    let to = if status == RunStatus::Done { prompt::mentions::addressed(&body, &spec.members, member) } else { vec![] };
    Finish { status, body, error, meta, session: None, to }
}

/// A byte count as people say it: `16 MiB`, `512 KiB`, `1000 bytes`.
fn size(bytes: u64) -> String {
    const KIB: u64 = 1024;
    match bytes {
        b if b >= KIB * KIB && b.is_multiple_of(KIB * KIB) => format!("{} MiB", b / (KIB * KIB)),
        b if b >= KIB && b.is_multiple_of(KIB) => format!("{} KiB", b / KIB),
        b => format!("{b} bytes"),
    }
}

/// Why a run that stopped on its own failed, if it did. Judged by fatal
/// errors, the backend's own `is_error`, and the exit status.
fn failure(member: &str, t: &Transcript, exit: Option<std::process::ExitStatus>, stderr: &str) -> Option<String> {
    if let Some(f) = &t.fatal {
        return Some(format!("{member}: {f}"));
    }
    if let Some(r) = t.result.as_ref().filter(|r| r.is_error) {
        let why = r.text.as_deref().map(str::trim).filter(|s| !s.is_empty()).unwrap_or("the agent reported an error");
        return Some(format!("{member}: {why}"));
    }
    match exit {
        Some(e) if e.success() => None,
        Some(e) => {
            let how = match e.code() {
                Some(code) => format!("exited with status {code}"),
                None => "was killed by a signal".to_string(),
            };
            Some(format!("{member}: {how}{}", explain(stderr).map(|l| format!(": {l}")).unwrap_or_default()))
        }
        None => Some(format!("{member}: its exit status could not be read")),
    }
}

fn unreadable(t: &Transcript, stderr: &str) -> String {
    let mut why = String::new();
    if t.malformed > 0 {
        why.push_str(&format!(
            " ({} unreadable line{} of output)",
            t.malformed,
            if t.malformed == 1 { "" } else { "s" }
        ));
    }
    if let Some(l) = explain(stderr) {
        why.push_str(&format!(": {l}"));
    }
    why
}

/// Bytes of an agent's stderr said in a message.
const STDERR_SAID: usize = 2 * 1024;

/// What an agent's stderr says of why it stopped: its last lines, up to
/// 2 KiB, with its `error:` line first (clap, node and most tools end with
/// a hint such as `For more information, try '--help'.`, after the cause).
/// Blank lines are left out; `None` when there is nothing.
pub(super) fn explain(stderr: &str) -> Option<String> {
    let lines: Vec<&str> = stderr.lines().map(str::trim_end).filter(|l| !l.trim().is_empty()).collect();
    let is_error = |l: &str| {
        let l = l.trim_start().as_bytes();
        l.len() > 5 && l[..5].eq_ignore_ascii_case(b"error") && matches!(l[5], b':' | b'[')
    };
    let error = lines.iter().rposition(|l| is_error(l));
    let mut said = String::new();
    if let Some(at) = error {
        said.push_str(bounded(lines[at].trim_start(), STDERR_SAID));
    }
    // The last lines that fit, in their order.
    let mut tail: Vec<&str> = Vec::new();
    let mut room = STDERR_SAID.saturating_sub(said.len());
    for (i, l) in lines.iter().enumerate().rev() {
        if Some(i) == error {
            continue;
        }
        if l.len() + 1 > room {
            if tail.is_empty() && said.is_empty() {
                tail.push(bounded(l, STDERR_SAID));
            }
            break;
        }
        room -= l.len() + 1;
        tail.push(l);
    }
    for l in tail.iter().rev() {
        if !said.is_empty() {
            said.push('\n');
        }
        said.push_str(l);
    }
    (!said.is_empty()).then_some(said)
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn bounded(s: &str, max: usize) -> &str {
    let end = (0..=max.min(s.len())).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_line_comes_first_then_the_last_lines() {
        // codex 0.169.0 given a `codex exec` flag after `app-server`.
        let clap = "error: unexpected argument '--skip-git-repo-check' found\n\n  tip: to pass \
                    '--skip-git-repo-check' as a value, use '-- --skip-git-repo-check'\n\nUsage: codex app-server \
                    [OPTIONS] [COMMAND]\n\nFor more information, try '--help'.\n";
        assert_eq!(
            explain(clap).as_deref(),
            Some(
                "error: unexpected argument '--skip-git-repo-check' found\n  tip: to pass '--skip-git-repo-check' \
                 as a value, use '-- --skip-git-repo-check'\nUsage: codex app-server [OPTIONS] [COMMAND]\nFor \
                 more information, try '--help'."
            )
        );
        assert_eq!(explain("disk full\n").as_deref(), Some("disk full"));
        assert_eq!(explain("one\nError: two\nthree").as_deref(), Some("Error: two\none\nthree"));
        assert_eq!(explain("ERROR[E0425]: x\n").as_deref(), Some("ERROR[E0425]: x"));
        assert_eq!(explain("errors are fine\n").as_deref(), Some("errors are fine"), "not an error: line");
        assert_eq!(explain("\n  \n"), None);
    }

    #[test]
    fn what_is_said_is_bounded_and_the_error_line_survives_a_long_tail() {
        let noise: String = (0..500).map(|i| format!("warning {i}\n")).collect();
        let said = explain(&format!("error: the cause\n{noise}")).unwrap_or_default();
        assert!(said.len() <= STDERR_SAID, "{}", said.len());
        assert!(said.starts_with("error: the cause\n"), "{said}");
        assert!(said.ends_with("warning 499"), "the last lines are kept");
        let long = "é".repeat(5000);
        let said = explain(&long).unwrap_or_default();
        assert!(said.len() <= STDERR_SAID && !said.is_empty());
    }
}
