//! The member surface (`kd_proto::member`, F-B6): what an agent does as
//! itself, on its own thread, by the capability kd gave its run. Every
//! method first turns the token into the grant it stands for, or refuses
//! the call (`forbidden`), and then acts as exactly that member on exactly
//! that thread — through the same paths as the
//! King's methods (`message.route`'s delivery, `queue.read`,
//! `emergency.ack`, `resource.*`, the agents' history, `search.query`).

// Parameter lists are the wire format (see kd_proto::member).
#![allow(clippy::too_many_arguments)]

use std::sync::Arc;

use jsonrpsee::Extensions;
use jsonrpsee::core::async_trait;
use kd_proto::member::{ClaimMode, Grant, MemberApiServer};
use kd_proto::names::{ALL, KING};
use kd_proto::types::{Access, Ack, InboxItem, InboxStatus, RaceCheck, RouteType, Routed, SearchHit};
use kd_proto::{ErrorCode, RpcResult};

use super::error::invalid;
use super::{Rpc, coordination, library, validate};
use crate::agent::registry::Run;
use crate::client::ClientId;
use crate::coord::route::{self, FromRun};
use crate::db::inbox::Query;
use crate::db::messages::Page;
use crate::identity::Peer;

/// Default and largest `member.thread` page, in messages.
const THREAD_LAST: u32 = 20;
const THREAD_MAX: u32 = 200;
/// Default and largest `member.inbox` page.
const INBOX_PAGE: u32 = 10;
const INBOX_MAX: u32 = 1000;
/// Default and largest `member.search` page.
const SEARCH_HITS: u32 = 10;
const SEARCH_MAX: u32 = 50;

impl Rpc {
    /// The grant `token` stands for, while its run is in flight — if the
    /// calling process may use it: the King's may, an agent's process only
    /// its own run's (see [`crate::identity::Peer::may_use`]).
    fn grant(&self, ext: &Extensions, token: &str) -> RpcResult<Grant> {
        let g = self
            .d
            .agents
            .grants
            .check(token, &self.d.agents.runs)
            .map_err(|e| ErrorCode::Forbidden.error(e.to_string()))?;
        if let Some(peer) = ext.get::<Peer>() {
            peer.may_use(g.run.as_deref(), &g.member, &g.workspace).map_err(|why| ErrorCode::Forbidden.error(why))?;
        }
        Ok(Grant { thread: g.thread, member: g.member, run: g.run, workspace: g.workspace })
    }

    /// The run the member acts from: the grant's, or (a grant kept across
    /// runs) the member's run on the thread that is not waiting its turn.
    fn run_of(&self, g: &Grant) -> Option<Arc<Run>> {
        let runs = self.d.agents.runs.list(Some(&g.thread));
        match &g.run {
            Some(id) => runs.into_iter().find(|r| &r.id == id),
            None => runs.into_iter().filter(|r| r.member == g.member && !r.is_queued()).min_by_key(|r| r.ordinal),
        }
    }
}

/// Refuses addressing oneself or the King: a member's message goes to
/// other members.
fn others_only(g: &Grant, param: &str, names: &[String], members: &[String]) -> RpcResult<()> {
    let others: Vec<&str> = members.iter().map(String::as_str).filter(|m| *m != g.member).collect();
    let others = if others.is_empty() { "none".to_string() } else { others.join(", ") };
    for n in names {
        if *n == g.member {
            return Err(invalid(format!("{param}: you are {n}; send to the other members ({others}) or {ALL}")));
        }
        if n == KING {
            return Err(invalid(format!(
                "{param}: the King reads the thread and is not sent to; the other members are {others}"
            )));
        }
    }
    Ok(())
}

#[async_trait]
impl MemberApiServer for Rpc {
    async fn member_whoami(&self, ext: &Extensions, token: String) -> RpcResult<Grant> {
        self.grant(ext, &token)
    }

    async fn member_send(
        &self,
        ext: &Extensions,
        token: String,
        to: Vec<String>,
        body: String,
        cc: Option<Vec<String>>,
        route_type: Option<RouteType>,
    ) -> RpcResult<Routed> {
        let g = self.grant(ext, &token)?;
        if body.trim().is_empty() {
            return Err(invalid("body is empty"));
        }
        let (to, cc) = validate::recipients(to, cc.unwrap_or_default())?;
        // What it hands off runs as the sending run did: found on its PATH.
        let run = self.run_of(&g);
        let path = run.as_ref().and_then(|r| r.path.clone());
        let (_, config) = self.d.coord.thread(&g.thread, path.as_deref()).await?;
        others_only(&g, "to", &to, &config.council.members)?;
        others_only(&g, "cc", &cc, &config.council.members)?;
        let from_run = run.map(|r| FromRun { exchange: r.exchange.or(r.reply_to), round: r.round });
        let p = route::Params {
            thread: g.thread,
            from: g.member,
            body,
            to,
            cc,
            reply_to: None,
            route: route_type,
            correlation_id: None,
            client: ext.get::<ClientId>().copied(),
            from_run,
            path,
        };
        route::route(&self.d.coord, p).await
    }

    async fn member_inbox(
        &self,
        ext: &Extensions,
        token: String,
        unread: Option<bool>,
        types: Option<Vec<RouteType>>,
        limit: Option<u32>,
        mark_read: Option<bool>,
    ) -> RpcResult<Vec<InboxItem>> {
        let g = self.grant(ext, &token)?;
        let types = types.unwrap_or_default();
        validate::list_len("types", &types)?;
        let limit = limit.unwrap_or(INBOX_PAGE);
        if limit == 0 || limit > INBOX_MAX {
            return Err(invalid(format!("limit must be between 1 and {INBOX_MAX}")));
        }
        let q = Query {
            member: g.member,
            thread: Some(g.thread),
            types,
            status: Some(InboxStatus::Pending),
            also_read: !unread.unwrap_or(true),
            limit,
            mark_read: mark_read.unwrap_or(false),
        };
        Ok(self.d.db.inbox(q).await?)
    }

    async fn member_ack(&self, ext: &Extensions, token: String, broadcast: Option<String>) -> RpcResult<Vec<Ack>> {
        let g = self.grant(ext, &token)?;
        validate::label("broadcast", broadcast.as_deref())?;
        Ok(self.d.db.acknowledge(g.thread, g.member, broadcast).await?)
    }

    async fn member_claim(
        &self,
        ext: &Extensions,
        token: String,
        resource: String,
        mode: Option<ClaimMode>,
    ) -> RpcResult<RaceCheck> {
        let g = self.grant(ext, &token)?;
        let access = match mode.unwrap_or_default() {
            ClaimMode::Write => Access::Write,
            ClaimMode::Read => Access::Read,
        };
        coordination::resource(&self.d, resource, g.member, Some(g.thread), access, None).await
    }

    async fn member_thread(&self, ext: &Extensions, token: String, last: Option<u32>) -> RpcResult<String> {
        let g = self.grant(ext, &token)?;
        let last = last.unwrap_or(THREAD_LAST);
        if last == 0 || last > THREAD_MAX {
            return Err(invalid(format!("last must be between 1 and {THREAD_MAX}")));
        }
        let page =
            Page { after: 0, before: None, limit: Some(last), from_end: true, bodies: true, budget: self.d.page_bytes };
        let messages = self.d.db.messages(g.thread.clone(), page).await?;
        let shown = format!("The last {} message(s) of thread {}; you are {}.", messages.len(), g.thread, g.member);
        Ok(crate::prompt::format_thread_history(&messages, &g.member, Some(&shown)))
    }

    async fn member_search(
        &self,
        ext: &Extensions,
        token: String,
        query: String,
        limit: Option<u32>,
    ) -> RpcResult<Vec<SearchHit>> {
        let g = self.grant(ext, &token)?;
        // As search.query does: a limit past the bound is the bound.
        let limit = limit.unwrap_or(SEARCH_HITS).clamp(1, SEARCH_MAX);
        let f = crate::db::search::Filter { workspace: Some(g.workspace), limit: Some(limit), ..Default::default() };
        library::search_in(&self.d, query, f).await
    }

    async fn member_permission(
        &self,
        ext: &Extensions,
        token: String,
        tool_name: String,
        input: serde_json::Value,
        tool_use_id: Option<String>,
    ) -> RpcResult<kd_proto::approval::PermissionAnswer> {
        let g = self.grant(ext, &token)?;
        if tool_name.is_empty() || tool_name.len() > 200 {
            return Err(invalid("tool_name must name the tool (at most 200 bytes)"));
        }
        if tool_use_id.as_ref().is_some_and(|id| id.len() > 200) {
            return Err(invalid("tool_use_id is longer than 200 bytes"));
        }
        if !input.is_object() {
            return Err(invalid("input must be the tool's input, a JSON object"));
        }
        use crate::approvals::{Ask, claude};
        let tool = claude::tool(&tool_name, &input);
        let today = claude::today(&tool);
        let backend = self.run_of(&g).and_then(|r| crate::config::Backend::parse(&r.backend));
        let mut ask = Ask::new(&g.thread, &g.member, backend.unwrap_or(crate::config::Backend::Claude), tool);
        ask.run = g.run.clone();
        // kd honours the broader grants itself: claude asks again each time.
        ask.scopes =
            vec![kd_proto::approval::Scope::Once, kd_proto::approval::Scope::Run, kd_proto::approval::Scope::Thread];
        ask.worktree = match self.d.db.worktree(g.thread.clone(), g.member.clone()).await {
            Ok(Some(w)) if w.removed_at_ms.is_none() => Some(std::path::PathBuf::from(w.path)),
            _ => None,
        };
        let answer = self.d.agents.approvals.ask(ask, today).await;
        Ok(claude::answer(&answer, input))
    }
}
