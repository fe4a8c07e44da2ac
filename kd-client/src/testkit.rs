//! Wire values for the binary's unit tests (`kd ask` output, the chat).

use kd_proto::types::{ContextMode, Lineage, Message, MessageKind, RunInfo, RunMeta, RunStatus, Thread, ThreadStatus};

/// Thread of every fixture.
pub const THREAD: &str = "a8b3c1";

/// [`THREAD`] in `/repo` on `main`, with claude, codex and cursor, empty.
pub fn thread() -> Thread {
    Thread {
        id: THREAD.into(),
        workspace: "/repo".into(),
        branch: Some("main".into()),
        title: None,
        status: ThreadStatus::Active,
        lineage: Lineage::Trunk,
        parent: None,
        members: vec!["claude".into(), "codex".into(), "cursor".into()],
        context: ContextMode::History,
        created_at_ms: 0,
        last_activity_at_ms: 0,
        last_seq: 0,
        origin: None,
        summary: None,
    }
}

/// A stored message of [`THREAD`]: the King's goes to all, a member's answers
/// message 1 in round 1; `run` names the run that produced it.
pub fn message(seq: u64, from: &str, kind: MessageKind, body: &str, run: Option<&str>) -> Message {
    let king = from == "king";
    Message {
        thread: THREAD.into(),
        seq,
        from: from.into(),
        to: vec![if king { "all" } else { "king" }.into()],
        cc: vec![],
        reply_to: (!king).then_some(1),
        kind,
        body: body.into(),
        round: (!king).then_some(1),
        created_at_ms: 0,
        run: run.map(|r| RunMeta { run_id: Some(r.into()), ..RunMeta::default() }),
        replaces: None,
        refs: vec![],
        route: None,
        purpose: None,
    }
}

/// [`message`] of a run that started `ordinal`-th.
pub fn answer(seq: u64, from: &str, body: &str, run: &str, ordinal: u64) -> Message {
    let mut m = message(seq, from, MessageKind::Agent, body, Some(run));
    if let Some(meta) = m.run.as_mut() {
        meta.ordinal = Some(ordinal);
    }
    m
}

/// [`run_info`] of a run that started `ordinal`-th.
pub fn run_at(id: &str, member: &str, ordinal: u64) -> RunInfo {
    RunInfo { ordinal, ..run_info(id, member) }
}

/// A run of `member` answering message 1 in round 1, waiting to start.
pub fn run_info(id: &str, member: &str) -> RunInfo {
    RunInfo {
        status: RunStatus::Waiting,
        reply_to: Some(1),
        round: Some(1),
        exchange: Some(1),
        ..RunInfo::new(id, THREAD, member)
    }
}
