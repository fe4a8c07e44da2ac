//! What the engines' tests and the contract suite build alike: a run, a
//! member's worktree, messages of every shape. Only the interface's types:
//! both engines' tests take them from here.

use kd_proto::types::{MessageKind, Purpose, RouteType, RunInfo, RunMeta, RunStatus};
use kd_proto::work::{WorkState, Worktree};

use super::messages::NewMessage;

/// Run `id` of `member` on thread `t1`, waiting, for round 1 of the
/// exchange begun by message 1.
pub(crate) fn run_of(id: &str, member: &str) -> RunInfo {
    RunInfo {
        id: id.into(),
        thread: "t1".into(),
        member: member.into(),
        backend: "claude".into(),
        status: RunStatus::Waiting,
        pid: None,
        started_at_ms: 0,
        chars: 0,
        reply_to: Some(1),
        round: Some(1),
        exchange: Some(1),
        replaces: None,
        ordinal: 1,
        purpose: None,
        approval: None,
    }
}

/// A member's worktree on thread `t1` of `/w`, made at `at`.
pub(crate) fn worktree(member: &str, at: i64) -> Worktree {
    Worktree {
        thread: "t1".into(),
        member: member.into(),
        task: "do it".into(),
        repo: "/w".into(),
        path: format!("/data/worktrees/w-t1/{member}"),
        branch: format!("kd/t1/{member}"),
        base: "b".repeat(40),
        head: "b".repeat(40),
        state: WorkState::Working,
        files: 0,
        added: 0,
        removed: 0,
        removed_at_ms: None,
        created_at_ms: at,
        last_run: None,
        check: None,
        until_green: 0,
        fixes: 0,
        shipped: None,
        uncommitted: None,
    }
}

/// Messages of every shape for thread `thread`: escapes and controls in
/// bodies and names, runs, refs, routes, purposes, replies, retries, cc.
/// Four of them, `rounds` times over.
pub(crate) fn varied_messages(thread: &str, rounds: usize) -> Vec<NewMessage> {
    let bodies = ["plain", "quote \" backslash \\ tab \t nl \n", "\u{1b}[31mred\u{7} é 漢 🦀", ""];
    let mut all = Vec::new();
    for (i, body) in bodies.iter().cycle().take(4 * rounds).enumerate() {
        let mut m = NewMessage::new(thread, "king", vec!["all".into()], MessageKind::King, body.to_string());
        if i % 2 == 1 {
            m.from = "claude".into();
            m.to = vec!["king".into(), "co\"dex".into()];
            m.cc = vec!["gemini".into()];
            m.kind = MessageKind::Agent;
            m.reply_to = Some(1);
            m.round = Some(2);
            m.run = Some(RunMeta {
                cost_usd: Some(0.25),
                usage: Some(serde_json::json!({"input_tokens": 3})),
                run_id: Some("r1".into()),
                ..Default::default()
            });
            m.refs = vec!["src/a.rs".into()];
            m.route = Some(RouteType::Multicast);
            m.purpose = Some(Purpose::Ballot);
            m.replaces = Some(1);
        }
        all.push(m);
    }
    all
}
