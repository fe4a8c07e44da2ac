//! The JSON-RPC methods: `KdApiServer` implemented over the daemon's state.
//! Handlers check parameter values ([`validate`]), call the registry, and
//! let [`error`] turn registry errors into stable error codes.

pub mod error;
pub mod params;
mod subscribe;
pub mod validate;

use std::sync::Arc;

use jsonrpsee::core::{SubscriptionResult, async_trait};
use jsonrpsee::server::PendingSubscriptionSink;
use jsonrpsee::{Extensions, RpcModule};
use kd_proto::names::{ALL, KING};
use kd_proto::types::*;
use kd_proto::{KdApiServer, PROTOCOL_VERSION, RpcResult, VERSION};

use crate::agent::registry::StopReason;
use crate::client::ClientId;
use crate::council::{retry, send};
use crate::db::events::EventFilter;
use crate::db::messages::NewMessage;
use crate::db::sessions::{NewSession, SessionEnd};
use crate::db::threads::NewThread as NewThreadRow;
use crate::state::Daemon;
use error::invalid;

/// What this daemon offers beyond the basic protocol.
pub const CAPABILITIES: &[&str] = &["subscriptions", "sessions", "locks", "events", "openrpc"];

/// Default and largest page of `events.list`.
const EVENTS_PAGE: u32 = 1000;

pub struct Rpc {
    d: Arc<Daemon>,
}

/// The method table served on every connection.
pub fn module(d: Arc<Daemon>) -> RpcModule<Rpc> {
    Rpc { d }.into_rpc()
}

#[async_trait]
impl KdApiServer for Rpc {
    async fn daemon_hello(&self) -> RpcResult<Hello> {
        Ok(Hello {
            protocol: PROTOCOL_VERSION,
            version: VERSION.to_string(),
            capabilities: CAPABILITIES.iter().map(|c| c.to_string()).collect(),
            pid: std::process::id(),
        })
    }

    async fn daemon_status(&self) -> RpcResult<DaemonStatus> {
        let d = &self.d;
        Ok(DaemonStatus {
            version: VERSION.to_string(),
            protocol: PROTOCOL_VERSION,
            pid: std::process::id(),
            uptime_ms: d.started.elapsed().as_millis() as u64,
            socket: d.socket.display().to_string(),
            db: d.db.path().display().to_string(),
            schema_version: d.db.schema_version(),
            threads: d.db.thread_count(),
            runs_in_flight: d.agents.runs.count() as u64,
            clients: d.open_connections(),
            subscriptions: d.hub.subscription_count(),
        })
    }

    async fn daemon_shutdown(&self) -> RpcResult<ShutdownAck> {
        tracing::info!("shutdown requested over RPC");
        let runs = self.d.agents.runs.count() as u64;
        self.d.shutdown.cancel();
        Ok(ShutdownAck { stopping: true, runs_cancelled: runs })
    }

    async fn daemon_doctor(&self, workspace: String) -> RpcResult<Vec<Check>> {
        validate::workspace(&workspace)?;
        Ok(crate::doctor::run(&self.d.db, std::path::Path::new(&workspace)).await)
    }

    async fn rpc_discover(&self) -> RpcResult<serde_json::Value> {
        Ok(kd_proto::openrpc::document().clone())
    }

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
        validate::workspace(&workspace)?;
        validate::label("branch", branch.as_deref())?;
        validate::label("title", title.as_deref())?;
        let members = members.unwrap_or_default();
        validate::members(&members)?;
        if let Some(id) = &id {
            validate::thread_id(id)?;
        }
        if let Some(parent) = &parent {
            validate::thread_id(parent)?;
        }
        let lineage = lineage.unwrap_or(if parent.is_some() { Lineage::Branch } else { Lineage::Trunk });
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
        Ok(self.d.db.create_thread(t).await?)
    }

    async fn thread_list(
        &self,
        workspace: Option<String>,
        status: Option<ThreadStatus>,
        limit: Option<u32>,
    ) -> RpcResult<Vec<Thread>> {
        Ok(self.d.db.threads(workspace, status, limit).await?)
    }

    async fn thread_get(&self, thread: String) -> RpcResult<Thread> {
        validate::thread_id(&thread)?;
        Ok(self.d.db.thread(thread).await?)
    }

    async fn thread_current(&self, workspace: String, branch: Option<String>) -> RpcResult<Option<Thread>> {
        validate::workspace(&workspace)?;
        Ok(self.d.db.current_thread(workspace, branch).await?)
    }

    async fn thread_set_current(&self, workspace: String, branch: Option<String>, thread: String) -> RpcResult<Thread> {
        validate::workspace(&workspace)?;
        validate::label("branch", branch.as_deref())?;
        validate::thread_id(&thread)?;
        Ok(self.d.db.set_current_thread(workspace, branch, thread).await?)
    }

    async fn thread_archive(&self, thread: String) -> RpcResult<Thread> {
        validate::thread_id(&thread)?;
        Ok(self.d.db.archive_thread(thread).await?)
    }

    async fn thread_messages(
        &self,
        thread: String,
        since_seq: Option<u64>,
        limit: Option<u32>,
    ) -> RpcResult<Vec<Message>> {
        validate::thread_id(&thread)?;
        Ok(self.d.db.messages(thread, since_seq.unwrap_or(0), limit).await?)
    }

    async fn message_append(
        &self,
        thread: String,
        from: String,
        body: String,
        to: Option<Vec<String>>,
        cc: Option<Vec<String>>,
        reply_to: Option<u64>,
        kind: Option<MessageKind>,
        round: Option<u32>,
        correlation_id: Option<String>,
        fence: Option<Fence>,
    ) -> RpcResult<Message> {
        validate::thread_id(&thread)?;
        validate::member(&from).map_err(|e| invalid(format!("from: {}", e.message())))?;
        let to = to.unwrap_or_else(|| vec![ALL.to_string()]);
        if to.is_empty() {
            return Err(invalid("to is empty; omit it or use [\"all\"] to address everyone"));
        }
        validate::addressees("to", &to)?;
        let cc = cc.unwrap_or_default();
        validate::addressees("cc", &cc)?;
        validate::label("correlation_id", correlation_id.as_deref())?;
        let kind = kind.unwrap_or(if from == KING { MessageKind::King } else { MessageKind::Agent });
        let m = NewMessage {
            thread,
            from,
            to,
            cc,
            reply_to,
            kind,
            body,
            round,
            run: None,
            correlation_id,
            fence,
            replaces: None,
            refs: vec![],
        };
        Ok(self.d.db.append_message(m).await?)
    }

    async fn thread_subscribe(
        &self,
        pending: PendingSubscriptionSink,
        thread: String,
        since_seq: Option<u64>,
        not_yet_created: Option<bool>,
    ) -> SubscriptionResult {
        subscribe::run(self.d.clone(), pending, thread, since_seq, not_yet_created.unwrap_or(false)).await
    }

    async fn council_send(
        &self,
        ext: &Extensions,
        thread: String,
        body: String,
        to: Option<Vec<String>>,
        mute: Option<Vec<String>>,
        style: Option<Style>,
        timeout_s: Option<u64>,
        correlation_id: Option<String>,
        rounds: Option<u32>,
        new_thread: Option<NewThread>,
    ) -> RpcResult<Sent> {
        validate::thread_id(&thread)?;
        if let Some(new) = &new_thread {
            validate::workspace(&new.workspace)?;
            validate::label("new_thread.branch", new.branch.as_deref())?;
            validate::label("new_thread.title", new.title.as_deref())?;
        }
        if body.trim().is_empty() {
            return Err(invalid("body is empty"));
        }
        if let Some(to) = &to {
            if to.is_empty() {
                return Err(invalid("to is empty; omit it to address every member"));
            }
            validate::addressees("to", to)?;
        }
        let mute = mute.unwrap_or_default();
        validate::addressees("mute", &mute)?;
        validate::label("correlation_id", correlation_id.as_deref())?;
        let timeout = validate::timeout(timeout_s)?;
        if rounds.is_some_and(|r| r > validate::MAX_ROUNDS) {
            return Err(invalid(format!("rounds must be at most {}", validate::MAX_ROUNDS)));
        }
        let req = send::Request {
            thread,
            body,
            to,
            mute,
            style: style.unwrap_or_default(),
            timeout,
            correlation_id,
            rounds,
            client: ext.get::<ClientId>().copied(),
            new_thread,
        };
        send::send(&self.d.council, req).await
    }

    async fn council_interrupt(&self, ext: &Extensions, thread: String, all: Option<bool>) -> RpcResult<Interrupted> {
        validate::thread_id(&thread)?;
        self.d.db.thread(thread.clone()).await?;
        let stopped_exchange = self.d.council.exchanges.stop(&thread);
        let caller = ext.get::<ClientId>().copied();
        let all = all.unwrap_or(false);
        let runs: Vec<_> = self
            .d
            .agents
            .runs
            .list(Some(&thread))
            .into_iter()
            .filter(|r| all || (caller.is_some() && r.client == caller))
            .collect();
        for r in &runs {
            r.stop(StopReason::Cancelled);
        }
        Ok(Interrupted { runs: runs.iter().map(|r| r.info()).collect(), stopped_exchange })
    }

    async fn council_retry(
        &self,
        ext: &Extensions,
        thread: String,
        style: Option<Style>,
        timeout_s: Option<u64>,
    ) -> RpcResult<Vec<RunInfo>> {
        validate::thread_id(&thread)?;
        let timeout = validate::timeout(timeout_s)?;
        retry::retry(&self.d.council, thread, style.unwrap_or_default(), timeout, ext.get::<ClientId>().copied()).await
    }

    async fn config_get(&self, workspace: String) -> RpcResult<ConfigView> {
        validate::workspace(&workspace)?;
        let env = crate::config::Env::process();
        let config = crate::config::load_with(std::path::Path::new(&workspace), &env)
            .map_err(|e| invalid(format!("configuration: {e}")))?;
        Ok(config.view(&workspace, &env))
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
        validate::workspace(&workspace)?;
        validate::path("origin", origin.as_deref())?;
        validate::label("branch", branch.as_deref())?;
        validate::label("title", title.as_deref())?;
        let members = members.unwrap_or_default();
        validate::members(&members)?;
        if let Some(id) = &id {
            validate::thread_id(id)?;
        }
        let mut imported = Vec::with_capacity(messages.len());
        for (i, m) in messages.into_iter().enumerate() {
            validate::member(&m.from).map_err(|e| invalid(format!("messages[{i}].from: {}", e.message())))?;
            validate::addressees(&format!("messages[{i}].to"), &m.to)?;
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
            let to = if m.to.is_empty() { vec![ALL.to_string()] } else { m.to };
            imported.push((
                m.created_at_ms,
                NewMessage {
                    thread: String::new(),
                    from: m.from,
                    to,
                    cc: vec![],
                    reply_to: None,
                    kind,
                    body: m.body,
                    round: None,
                    run,
                    correlation_id: None,
                    fence: None,
                    replaces: None,
                    refs: m.refs,
                },
            ));
        }
        let created = created_at_ms.or_else(|| imported.first().map(|m| m.0)).unwrap_or_else(crate::db::now_ms);
        let t = NewThreadRow {
            id,
            workspace,
            branch,
            title,
            members,
            lineage: Lineage::Trunk,
            parent: None,
            set_current: false,
            context: ContextMode::History,
            origin,
        };
        Ok(self.d.db.import_thread(t, created, imported).await?)
    }

    async fn run_list(&self, thread: Option<String>) -> RpcResult<Vec<RunInfo>> {
        Ok(self.d.agents.runs.list(thread.as_deref()).iter().map(|r| r.info()).collect())
    }

    async fn run_cancel(&self, thread: String, member: Option<String>, run: Option<String>) -> RpcResult<Vec<RunInfo>> {
        validate::thread_id(&thread)?;
        self.d.db.thread(thread.clone()).await?;
        let chosen: Vec<_> = self
            .d
            .agents
            .runs
            .list(Some(&thread))
            .into_iter()
            .filter(|r| member.as_ref().is_none_or(|m| &r.member == m) && run.as_ref().is_none_or(|id| &r.id == id))
            .collect();
        for r in &chosen {
            r.stop(StopReason::Cancelled);
        }
        Ok(chosen.iter().map(|r| r.info()).collect())
    }

    async fn session_start(
        &self,
        thread: String,
        agent: String,
        backend_session_id: Option<String>,
        holder: Option<String>,
        pid: Option<u32>,
        metadata: Option<serde_json::Value>,
    ) -> RpcResult<Session> {
        validate::thread_id(&thread)?;
        validate::member(&agent)?;
        validate::label("backend_session_id", backend_session_id.as_deref())?;
        validate::label("holder", holder.as_deref())?;
        validate::pid(pid)?;
        let metadata = metadata.unwrap_or_else(|| serde_json::json!({}));
        if !metadata.is_object() {
            return Err(invalid("metadata must be a JSON object"));
        }
        let s = NewSession { thread, agent, backend_session_id, holder, pid, metadata };
        Ok(self.d.db.start_session(s).await?)
    }

    async fn session_resume(&self, session: String, holder: Option<String>, pid: Option<u32>) -> RpcResult<Session> {
        validate::label("session", Some(&session))?;
        validate::label("holder", holder.as_deref())?;
        validate::pid(pid)?;
        Ok(self.d.db.resume_session(session, holder, pid).await?)
    }

    async fn session_end(
        &self,
        session: String,
        status: Option<SessionStatus>,
        backend_session_id: Option<String>,
    ) -> RpcResult<Session> {
        validate::label("session", Some(&session))?;
        validate::label("backend_session_id", backend_session_id.as_deref())?;
        let status = status.unwrap_or(SessionStatus::Completed);
        let end = SessionEnd { id: session, status, backend_session_id, seen_seq: None };
        Ok(self.d.db.end_session(end).await?)
    }

    async fn session_list(
        &self,
        thread: Option<String>,
        agent: Option<String>,
        status: Option<SessionStatus>,
    ) -> RpcResult<Vec<Session>> {
        Ok(self.d.db.sessions(thread, agent, status).await?)
    }

    async fn session_get(&self, session: String) -> RpcResult<Session> {
        validate::label("session", Some(&session))?;
        Ok(self.d.db.session(session).await?)
    }

    async fn lock_acquire(
        &self,
        resource: String,
        holder: String,
        ttl_ms: u64,
        pid: Option<u32>,
    ) -> RpcResult<LockOutcome> {
        validate::required_label("resource", &resource)?;
        validate::required_label("holder", &holder)?;
        validate::ttl(ttl_ms)?;
        validate::pid(pid)?;
        Ok(self.d.db.acquire_lock(resource, holder, ttl_ms, pid).await?)
    }

    async fn lock_release(&self, resource: String, token: u64) -> RpcResult<LockReleased> {
        validate::required_label("resource", &resource)?;
        Ok(self.d.db.release_lock(resource, token).await?)
    }

    async fn lock_list(&self, resource: Option<String>) -> RpcResult<Vec<Lock>> {
        Ok(self.d.db.locks(resource).await?)
    }

    async fn events_list(
        &self,
        thread: Option<String>,
        agent: Option<String>,
        kind: Option<String>,
        since_id: Option<u64>,
        limit: Option<u32>,
    ) -> RpcResult<Vec<Event>> {
        let limit = limit.unwrap_or(EVENTS_PAGE).min(EVENTS_PAGE);
        Ok(self.d.db.events(EventFilter { thread, agent, kind, since_id, limit }).await?)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::db::Db;
    use crate::hub::Hub;

    #[tokio::test]
    async fn every_served_method_is_documented_and_every_documented_method_is_served() {
        let tmp = tempfile::tempdir().unwrap();
        let hub = Arc::new(Hub::new());
        let db = Db::open(&tmp.path().join("kd.sqlite3"), hub.clone()).unwrap();
        let module = module(Arc::new(Daemon::new(db, hub, tmp.path().join("s"), 1, std::time::Duration::from_secs(1))));
        let served: BTreeSet<&str> = module.method_names().collect();
        let documented: BTreeSet<&str> = kd_proto::openrpc::methods()
            .iter()
            .flat_map(|m| std::iter::once(m.name).chain(m.subscription.map(|(_, unsubscribe)| unsubscribe)))
            .collect();
        assert_eq!(served, documented);
    }
}
