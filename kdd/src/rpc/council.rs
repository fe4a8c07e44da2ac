//! `council.*` and `config.get`: a thin adapter onto [`crate::council`].

// Parameter lists are the wire format (see kd_proto::council).
#![allow(clippy::too_many_arguments)]

use jsonrpsee::Extensions;
use jsonrpsee::core::{SubscriptionResult, async_trait};
use jsonrpsee::server::PendingSubscriptionSink;
use kd_proto::PROTOCOL_VERSION;
use kd_proto::RpcResult;
use kd_proto::council::*;
use kd_proto::registry::RunInfo;
use kd_proto::subscribe::ThreadEvent;

use super::error::invalid;
use super::{Rpc, validate};
use crate::agent::registry::StopReason;
use crate::client::ClientId;
use crate::council::{retry, send};

#[async_trait]
impl CouncilApiServer for Rpc {
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
        path: Option<String>,
    ) -> RpcResult<Sent> {
        let req = request(ext, thread, body, to, mute, style, timeout_s, correlation_id, rounds, new_thread, path)?;
        let sent = send::send(&self.d.council, req).await?;
        runs_first().await;
        Ok(sent)
    }

    async fn council_ask(
        &self,
        pending: PendingSubscriptionSink,
        ext: &Extensions,
        protocol: u32,
        thread: String,
        new_thread: NewThread,
        body: String,
        to: Option<Vec<String>>,
        mute: Option<Vec<String>>,
        timeout_s: Option<u64>,
        rounds: Option<u32>,
        path: Option<String>,
    ) -> SubscriptionResult {
        let client = ext.get::<ClientId>().copied();
        let (workspace, branch) = (new_thread.workspace.clone(), new_thread.branch.clone());
        let asked = async {
            if protocol != PROTOCOL_VERSION {
                return Err(invalid(format!(
                    "this daemon speaks protocol {PROTOCOL_VERSION}, the client {protocol}: nothing was asked"
                )));
            }
            // Every parameter checked before the current thread is looked
            // up (which may age it, as `thread.current` does).
            let mut req = request(ext, thread, body, to, mute, None, timeout_s, None, rounds, Some(new_thread), path)?;
            // The configuration, read once: it ages the current thread
            // here, and the question is asked by it.
            let config = send::read_config(&workspace, req.path.as_deref())?;
            let mut settings = crate::lifecycle::Settings::with(&workspace, config.lifecycle.clone());
            req.config = Some((workspace.clone(), config));
            // The current thread, or the new one the question makes.
            let since = match super::threads::current(&self.d, workspace, branch, &mut settings).await? {
                Some(t) => {
                    (req.thread, req.new_thread) = (t.id, None);
                    t.last_seq
                }
                None => 0,
            };
            Ok((req, since))
        };
        let (req, since) = match asked.await {
            Ok(asked) => asked,
            Err(e) => {
                pending.reject(e).await;
                return Ok(());
            }
        };
        let (council, thread, pending_thread) = (self.d.council.clone(), req.thread.clone(), req.new_thread.is_some());
        let first = async move {
            let thread = req.thread.clone();
            let sent = send::send(&council, req).await?;
            runs_first().await;
            Ok(ThreadEvent::Asked { thread, since, sent: Box::new(sent) })
        };
        super::subscribe::run(self.d.clone(), pending, client, thread, Some(since), pending_thread, Some(first)).await
    }

    async fn council_interrupt(&self, ext: &Extensions, thread: String, all: Option<bool>) -> RpcResult<Interrupted> {
        validate::thread_id(&thread)?;
        self.d.db.thread(thread.clone()).await?;
        let stopped_exchange = self.d.council.exchanges.stop(&thread);
        // For good: nothing of the thread's exchanges resumes (F-J2).
        let stopped_journal = self.d.db.stop_thread_exchanges(thread.clone(), "cancelled by the King".into()).await?;
        let stopped_exchange = stopped_exchange || !stopped_journal.is_empty();
        // The thread's members run on another node: it stops them there.
        if let Some(owner) = crate::council::live_owner(&self.d.db, &thread).await? {
            let cancel = crate::db::runs::Cancel { thread, member: None, run: None, turns: true };
            let runs = self.d.db.cancel_on_node(owner, cancel).await?;
            return Ok(Interrupted { stopped_exchange: stopped_exchange || !runs.is_empty(), runs });
        }
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
        path: Option<String>,
    ) -> RpcResult<Vec<RunInfo>> {
        validate::thread_id(&thread)?;
        validate::search_path(path.as_deref())?;
        let timeout = validate::timeout(timeout_s)?;
        crate::council::runs_here(&self.d.db, &thread).await?;
        let client = ext.get::<ClientId>().copied();
        retry::retry(&self.d.council, thread, style.unwrap_or_default(), timeout, client, path).await
    }

    /// The configuration as a request of the client whose `PATH` is
    /// `path` would run it.
    async fn config_get(&self, workspace: String, path: Option<String>) -> RpcResult<ConfigView> {
        validate::workspace(&workspace)?;
        validate::search_path(path.as_deref())?;
        let config = send::read_config(&workspace, path.as_deref())?;
        let kd = crate::config::find_kd(&crate::config::Env::process());
        let var = |k: &str| match (k, &path) {
            ("PATH", Some(p)) => Some(std::ffi::OsString::from(p)),
            _ => std::env::var_os(k),
        };
        Ok(config.view(&workspace, &crate::config::Env { var: &var }, kd.as_deref()))
    }
}

/// A King's message to send, its parameters checked (`council.send`,
/// `council.ask`).
fn request(
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
    path: Option<String>,
) -> RpcResult<send::Request> {
    validate::thread_id(&thread)?;
    validate::search_path(path.as_deref())?;
    let mut new_thread = new_thread;
    if let Some(new) = &mut new_thread {
        validate::workspace(&new.workspace)?;
        validate::label("new_thread.branch", new.branch.as_deref())?;
        new.title = validate::title("new_thread.title", new.title.as_deref())?;
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
    Ok(send::Request {
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
        vote: false,
        path,
        beside: false,
        tag: None,
        config: None,
    })
}

/// Lets the runs a question started take kdd's worker up to their agents'
/// spawns before the client is answered: the answer (and, for
/// `council.ask`, its subscription's first items) goes out while the
/// agents start (issue 31, item 17). Only where a call is answered — a
/// caller of `send::send` that goes on after it is not held.
async fn runs_first() {
    tokio::task::yield_now().await;
}
