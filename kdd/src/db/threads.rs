//! Threads, their members, and each workspace+branch's current thread:
//! what a new thread is given ([`NewThread`]), the one-trunk rule
//! ([`lineage_of`]), how fresh ids are drawn, what creating a thread or
//! moving a workspace onto one records, and the text forms of a thread's
//! columns, for both engines.

use kd_proto::types::{ContextMode, Lineage, ThreadStatus};
use serde_json::json;

use super::events::NewEvent;
use super::row::Columns;
use super::{DbError, DbResult, random_id};

/// Parameters of a new thread, already validated.
#[derive(Debug, Clone)]
pub struct NewThread {
    pub id: Option<String>,
    pub workspace: String,
    pub branch: Option<String>,
    pub title: Option<String>,
    pub members: Vec<String>,
    /// `None`: the trunk of its workspace and branch when there is none yet,
    /// else a branch of that trunk (unless `parent` names another).
    pub lineage: Option<Lineage>,
    pub parent: Option<String>,
    pub set_current: bool,
    pub context: ContextMode,
    /// Where an imported thread comes from (unique).
    pub origin: Option<String>,
}

#[cfg(test)]
impl NewThread {
    /// A thread of `workspace` with claude as its member, made as kd makes
    /// one with nothing more said (tests).
    pub fn in_workspace(workspace: &str) -> NewThread {
        NewThread {
            id: None,
            workspace: workspace.into(),
            branch: None,
            title: None,
            members: vec!["claude".into()],
            lineage: None,
            parent: None,
            set_current: false,
            context: ContextMode::History,
            origin: None,
        }
    }
}

/// The lineage of new thread `t` given its workspace and branch's `trunk`:
/// one trunk per workspace and git branch; what is not it branches off.
pub(crate) fn lineage_of(t: &NewThread, trunk: &Option<String>) -> DbResult<Lineage> {
    Ok(match (t.lineage, &t.parent, trunk) {
        (Some(Lineage::Trunk), Some(_), _) => {
            return Err(DbError::Invalid("a trunk thread has no parent; omit parent or make it a branch".into()));
        }
        (Some(Lineage::Trunk), None, Some(existing)) => {
            return Err(DbError::TrunkExists {
                workspace: t.workspace.clone(),
                branch: t.branch.clone(),
                thread: existing.clone(),
            });
        }
        (Some(Lineage::Branch), None, None) => return Err(DbError::Invalid("a branch thread needs a parent".into())),
        (Some(l), _, _) => l,
        (None, Some(_), _) => Lineage::Branch,
        (None, None, None) => Lineage::Trunk,
        (None, None, Some(_)) => Lineage::Branch,
    })
}

pub(crate) fn parse_status(s: &str) -> ThreadStatus {
    match s {
        "idle" => ThreadStatus::Idle,
        "archived" => ThreadStatus::Archived,
        _ => ThreadStatus::Active,
    }
}

pub(crate) fn parse_lineage(s: &str) -> Lineage {
    match s {
        "branch" => Lineage::Branch,
        _ => Lineage::Trunk,
    }
}

pub(crate) fn parse_context(s: &str) -> ContextMode {
    match s {
        "resume" => ContextMode::Resume,
        _ => ContextMode::History,
    }
}

pub(crate) fn status_str(s: ThreadStatus) -> &'static str {
    match s {
        ThreadStatus::Active => "active",
        ThreadStatus::Idle => "idle",
        ThreadStatus::Archived => "archived",
    }
}

pub(crate) fn lineage_str(l: Lineage) -> &'static str {
    match l {
        Lineage::Trunk => "trunk",
        Lineage::Branch => "branch",
    }
}

/// How many fresh ids a new thread draws before giving up.
pub(crate) const ID_ATTEMPTS: usize = 16;

/// The `attempt`-th fresh thread id to try: 6 random characters, longer
/// after collisions.
pub(crate) fn candidate_id(attempt: usize) -> String {
    random_id(6 + attempt / 4)
}

/// No fresh thread id was free.
pub(crate) fn no_free_id() -> DbError {
    DbError::Internal("cannot find a free thread id".into())
}

/// What creating thread `id` (`t`, of `lineage`) records.
pub(crate) fn created<'a>(t: &'a NewThread, id: &'a str, lineage: Lineage) -> NewEvent<'a> {
    NewEvent {
        kind: "thread.create",
        thread: Some(id),
        to: &t.members,
        data: json!({"workspace": t.workspace, "branch": t.branch, "lineage": lineage_str(lineage), "parent": t.parent}),
        ..Default::default()
    }
}

/// What putting a workspace and git branch on thread `id` records.
pub(crate) fn made_current<'a>(id: &'a str, workspace: &str, branch: Option<&str>) -> NewEvent<'a> {
    NewEvent {
        kind: "thread.set_current",
        thread: Some(id),
        data: json!({"workspace": workspace, "branch": branch}),
        ..Default::default()
    }
}

/// A thread as both engines select it: id, workspace, branch, title,
/// status, lineage, parent, members, created_at, last_activity_at,
/// last_seq, context, origin, summary.
pub(crate) fn read<R: Columns>(r: &R) -> Result<kd_proto::types::Thread, R::Error> {
    Ok(kd_proto::types::Thread {
        id: r.text(0)?,
        workspace: r.text(1)?,
        branch: r.opt_text(2)?,
        title: r.opt_text(3)?,
        status: parse_status(&r.text(4)?),
        lineage: parse_lineage(&r.text(5)?),
        parent: r.opt_text(6)?,
        members: super::parse_list(&r.text(7)?),
        created_at_ms: r.int(8)?,
        last_activity_at_ms: r.int(9)?,
        last_seq: r.count(10)?,
        context: parse_context(&r.text(11)?),
        origin: r.opt_text(12)?,
        summary: r.opt_text(13)?,
    })
}
