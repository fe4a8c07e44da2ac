//! `thread.*`: creating threads, the current one, archiving, summaries,
//! forks, titles, deleting, imports. A thread's messages are
//! [`super::messages`]'s, its live events [`super::subscribe`]'s.

// Parameter lists are the wire format (see kd_proto::thread).
#![allow(clippy::too_many_arguments)]

use jsonrpsee::core::async_trait;
use kd_proto::RpcResult;
use kd_proto::message::{MessageKind, RunMeta};
use kd_proto::names::{ALL, KING};
use kd_proto::thread::*;

use super::error::invalid;
use super::{Rpc, validate};
use crate::agent::registry::StopReason;
use crate::db::messages::NewMessage;
use crate::db::threads::NewThread as NewThreadRow;
use crate::lifecycle;
use crate::state::Daemon;

#[async_trait]
impl ThreadApiServer for Rpc {
    async fn thread_create(
        &self,
        workspace: String,
        branch: Option<String>,
        title: Option<String>,
        members: Option<Vec<String>>,
        id: Option<String>,
        lineage: Option<Lineage>,
        parent: Option<String>,
        set_current: Option<bool>,
        context_mode: Option<ContextMode>,
    ) -> RpcResult<Thread> {
        let members = members.unwrap_or_default();
        validate::new_thread(&workspace, branch.as_deref(), title.as_deref(), &members, id.as_deref())?;
        let title = validate::title("title", title.as_deref())?;
        if let Some(parent) = &parent {
            validate::thread_id(parent)?;
        }
        let t = NewThreadRow {
            id,
            workspace,
            branch,
            title,
            members,
            lineage,
            parent,
            set_current: set_current.unwrap_or(false),
            context: context_mode.unwrap_or_default(),
            origin: None,
        };
        // A branch starts with its context bundle.
        Ok(lifecycle::create(&self.d.db, t).await?)
    }

    async fn thread_list(
        &self,
        workspace: Option<String>,
        status: Option<ThreadStatus>,
        limit: Option<u32>,
    ) -> RpcResult<Vec<Thread>> {
        validate::path("workspace", workspace.as_deref())?;
        let threads = lifecycle::check_all(
            &self.d.db,
            &self.d.council.archived,
            self.d.db.threads(workspace, status, limit).await?,
        )
        .await;
        // Aged on reading: a status filter holds for what is returned.
        Ok(threads.into_iter().filter(|t| status.is_none_or(|s| t.status == s)).collect())
    }

    async fn thread_get(&self, thread: String) -> RpcResult<Thread> {
        validate::thread_id(&thread)?;
        Ok(lifecycle::check(
            &self.d.db,
            &self.d.council.archived,
            self.d.db.thread(thread).await?,
            &mut Default::default(),
        )
        .await)
    }

    async fn thread_current(&self, workspace: String, branch: Option<String>) -> RpcResult<Option<Thread>> {
        validate::workspace(&workspace)?;
        current(&self.d, workspace, branch, &mut lifecycle::Settings::default()).await
    }

    async fn thread_set_current(&self, workspace: String, branch: Option<String>, thread: String) -> RpcResult<Thread> {
        validate::workspace(&workspace)?;
        validate::label("branch", branch.as_deref())?;
        validate::thread_id(&thread)?;
        Ok(self.d.db.set_current_thread(workspace, branch, thread).await?)
    }

    /// Archives a thread; its runs in flight and pending auto-turns are
    /// stopped first, so that their ends are in the summary.
    async fn thread_archive(&self, thread: String) -> RpcResult<Thread> {
        validate::thread_id(&thread)?;
        self.d.db.thread(thread.clone()).await?;
        stop_runs(&self.d, &thread).await;
        // The summarizer's summary and the offer to the trunk follow.
        let archived = lifecycle::archive(&self.d.db, &self.d.council.archived, thread.clone()).await?;
        // Members' worktrees go with it when nothing in them could be lost;
        // the others stay (work.list shows them).
        crate::work::settle::tidy(&self.d.db, &self.d.hub, &thread, false).await?;
        Ok(archived)
    }

    async fn thread_summarize(&self, thread: String, path: Option<String>) -> RpcResult<Thread> {
        validate::thread_id(&thread)?;
        validate::search_path(path.as_deref())?;
        crate::council::runs_here(&self.d.db, &thread).await?;
        Ok(crate::summary::now(&self.d.council, thread, path).await?)
    }

    /// Forks a branch carrying what `carry` says of its parent (by default
    /// the workspace's `lifecycle.fork_carry`); a summary's run finds its
    /// member on `path` (the asking client's `PATH`).
    async fn thread_fork(
        &self,
        thread: String,
        title: Option<String>,
        carry: Option<Carry>,
        path: Option<String>,
    ) -> RpcResult<Thread> {
        validate::thread_id(&thread)?;
        let title = validate::title("title", title.as_deref())?;
        validate::search_path(path.as_deref())?;
        let parent = self.d.db.thread(thread.clone()).await?;
        let carried = match carry.unwrap_or_else(|| lifecycle::settings(&parent.workspace).fork_carry) {
            Carry::None => lifecycle::Carried::Nothing,
            Carry::Conversation => lifecycle::Carried::Conversation,
            Carry::Summary => {
                lifecycle::Carried::Summary(crate::summary::at_fork(&self.d.council, &parent, path.as_deref()).await?)
            }
        };
        Ok(lifecycle::fork(&self.d.db, thread, title, carried).await?)
    }

    async fn thread_unarchive(&self, thread: String) -> RpcResult<Thread> {
        validate::thread_id(&thread)?;
        Ok(self.d.db.set_thread_status(thread, ThreadStatus::Active, "unarchive", None).await?)
    }

    /// Deletes a thread; with `force`, its runs in flight are cancelled (and
    /// their ends recorded) first, and its pending auto-turns stopped.
    async fn thread_delete(&self, thread: String, force: Option<bool>) -> RpcResult<Deleted> {
        validate::thread_id(&thread)?;
        self.d.db.thread(thread.clone()).await?;
        let force = force.unwrap_or(false);
        if !force {
            // Members' work not accepted or rejected is never lost unasked.
            crate::work::settle::check_delete(&self.d.db, &thread).await?;
        }
        if force {
            // Its runs are stopped, and its worktrees removed, where they are.
            crate::council::runs_here(&self.d.db, &thread).await?;
        }
        let cancelled = if force { stop_runs(&self.d, &thread).await } else { 0 };
        crate::work::settle::tidy(&self.d.db, &self.d.hub, &thread, force).await?;
        let messages = self.d.db.delete_thread(thread.clone()).await?;
        Ok(Deleted { thread, messages, cancelled_runs: cancelled })
    }

    async fn thread_set_title(&self, thread: String, title: String) -> RpcResult<Thread> {
        validate::thread_id(&thread)?;
        let title = validate::title("title", Some(&title))?.unwrap_or_default();
        Ok(self.d.db.set_thread_title(thread, title).await?)
    }

    async fn thread_import(
        &self,
        workspace: String,
        branch: Option<String>,
        id: Option<String>,
        title: Option<String>,
        members: Option<Vec<String>>,
        created_at_ms: Option<i64>,
        messages: Vec<ImportedMessage>,
        origin: Option<String>,
    ) -> RpcResult<Thread> {
        let members = members.unwrap_or_default();
        validate::new_thread(&workspace, branch.as_deref(), title.as_deref(), &members, id.as_deref())?;
        let title = validate::title("title", title.as_deref())?;
        validate::path("origin", origin.as_deref())?;
        let mut imported = Vec::with_capacity(messages.len());
        for (i, m) in messages.into_iter().enumerate() {
            validate::member(&m.from).map_err(|e| invalid(format!("messages[{i}].from: {}", e.message())))?;
            let (to, _) =
                validate::recipients(m.to, vec![]).map_err(|e| invalid(format!("messages[{i}].{}", e.message())))?;
            validate::list_len(&format!("messages[{i}].refs"), &m.refs)?;
            for r in &m.refs {
                validate::path(&format!("messages[{i}].refs"), Some(r))?;
            }
            validate::label(&format!("messages[{i}].backend"), m.backend.as_deref())?;
            validate::label(&format!("messages[{i}].model"), m.model.as_deref())?;
            let run = (m.backend.is_some() || m.model.is_some()).then(|| RunMeta {
                backend: m.backend,
                model: m.model,
                ..RunMeta::default()
            });
            let kind = m.kind.unwrap_or(if m.from == KING { MessageKind::King } else { MessageKind::Agent });
            let to = if to.is_empty() { vec![ALL.to_string()] } else { to };
            imported.push((
                m.created_at_ms,
                NewMessage { run, refs: m.refs, ..NewMessage::new("", &m.from, to, kind, m.body) },
            ));
        }
        let created = created_at_ms.or_else(|| imported.first().map(|m| m.0)).unwrap_or_else(crate::db::now_ms);
        let t = NewThreadRow {
            id,
            workspace,
            branch,
            title,
            members,
            lineage: None,
            parent: None,
            set_current: false,
            context: ContextMode::History,
            origin,
        };
        Ok(self.d.db.import_thread(t, created, imported).await?)
    }
}

/// Stops the thread's pending auto-turns and runs in flight, and waits
/// until their ends are recorded; how many runs there were.
async fn stop_runs(d: &Daemon, thread: &str) -> u32 {
    d.council.exchanges.stop(thread);
    let runs = d.agents.runs.list(Some(thread));
    for r in &runs {
        r.stop(StopReason::Cancelled);
    }
    for r in &runs {
        r.done().await;
    }
    runs.len() as u32
}

/// The current thread of `workspace` on `branch` (`thread.current`, and
/// where `council.ask` asks), aged as it is due; an archived branch or a
/// deleted thread gives way to the trunk.
pub(super) async fn current(
    d: &Daemon,
    workspace: String,
    branch: Option<String>,
    settings: &mut lifecycle::Settings,
) -> RpcResult<Option<Thread>> {
    let current = match d.db.current_thread(workspace.clone(), branch.clone()).await? {
        Some(t) => Some(lifecycle::check(&d.db, &d.council.archived, t, settings).await),
        None => None,
    };
    if let Some(t) = current.as_ref().filter(|t| t.status != ThreadStatus::Archived || t.lineage == Lineage::Trunk) {
        return Ok(Some(t.clone()));
    }
    // An archived branch is no place to ask, and a deleted one is gone: the
    // trunk, the workspace's default context, is current again.
    match d.db.trunk(workspace.clone(), branch.clone()).await? {
        Some(trunk) => {
            let trunk = d.db.set_current_thread(workspace, branch, trunk).await?;
            Ok(Some(lifecycle::check(&d.db, &d.council.archived, trunk, settings).await))
        }
        None => Ok(current),
    }
}
