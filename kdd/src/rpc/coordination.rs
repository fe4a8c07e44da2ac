//! The coordination layer's methods (SPEC §7): `message.route`, `queue.*`,
//! `completion.agents`, `emergency.*` and `resource.*` — each checks its
//! parameters and calls [`crate::coord`] or the registry.

use std::time::Duration;

use jsonrpsee::Extensions;
use jsonrpsee::core::async_trait;
use kd_proto::RpcResult;
use kd_proto::coord::*;
use serde_json::json;

use super::error::invalid;
use super::{Rpc, validate};
use crate::client::ClientId;
use crate::coord::{completion, emergency, races, route};
use crate::db::events::Record;
use crate::db::inbox::Query;
use crate::state::Daemon;

/// Default and largest page of `queue.read`.
const QUEUE_PAGE: u32 = 10;
const QUEUE_MAX: u32 = 1000;

fn body(b: &str) -> RpcResult<()> {
    if b.trim().is_empty() { Err(invalid("body is empty")) } else { Ok(()) }
}

#[async_trait]
impl CoordinationApiServer for Rpc {
    async fn message_route(
        &self,
        ext: &Extensions,
        thread: String,
        from: String,
        text: String,
        to: Option<Vec<String>>,
        cc: Option<Vec<String>>,
        reply_to: Option<u64>,
        route_type: Option<RouteType>,
        correlation_id: Option<String>,
        path: Option<String>,
    ) -> RpcResult<Routed> {
        validate::thread_id(&thread)?;
        validate::member(&from)?;
        validate::search_path(path.as_deref())?;
        body(&text)?;
        let (to, cc) = validate::recipients(to.unwrap_or_default(), cc.unwrap_or_default())?;
        validate::position("reply_to", reply_to)?;
        validate::label("correlation_id", correlation_id.as_deref())?;
        crate::council::runs_here(&self.d.db, &thread).await?;
        let p = route::Params {
            thread,
            from,
            body: text,
            to,
            cc,
            reply_to,
            route: route_type,
            correlation_id,
            client: ext.get::<ClientId>().copied(),
            from_run: None,
            path,
        };
        route::route(&self.d.coord, p).await
    }

    async fn queue_read(
        &self,
        member: String,
        thread: Option<String>,
        types: Option<Vec<RouteType>>,
        status: Option<InboxStatus>,
        limit: Option<u32>,
        mark_read: Option<bool>,
    ) -> RpcResult<Vec<InboxItem>> {
        validate::member(&member)?;
        validate::label("thread", thread.as_deref())?;
        let types = types.unwrap_or_default();
        validate::list_len("types", &types)?;
        let limit = limit.unwrap_or(QUEUE_PAGE);
        if limit == 0 || limit > QUEUE_MAX {
            return Err(invalid(format!("limit must be between 1 and {QUEUE_MAX}")));
        }
        let q = Query { member, thread, types, status, also_read: false, limit, mark_read: mark_read.unwrap_or(false) };
        Ok(self.d.db.inbox(q).await?)
    }

    async fn queue_process(&self, member: String, ids: Vec<u64>, action: Option<InboxStatus>) -> RpcResult<Processed> {
        validate::member(&member)?;
        validate::list_len("ids", &ids)?;
        let status = action.unwrap_or(InboxStatus::Processed);
        if status == InboxStatus::Dropped {
            return Err(invalid("action: dropped is kd's own; use processed, dismissed, deferred, read or pending"));
        }
        let updated = self.d.db.inbox_process(member, ids, status).await?;
        Ok(Processed { updated, status })
    }

    async fn queue_subscribe(
        &self,
        thread: String,
        member: String,
        types: Vec<RouteType>,
        mode: DeliveryMode,
    ) -> RpcResult<DeliveryPrefs> {
        validate::thread_id(&thread)?;
        validate::member(&member)?;
        validate::list_len("types", &types)?;
        let (thread, config) = self.d.coord.thread(&thread, None).await?;
        crate::coord::check_members(&config, std::slice::from_ref(&member), false)?;
        self.d.db.delivery_subscribe(thread.workspace.clone(), member.clone(), types, mode).await?;
        let overrides = self.d.db.delivery_overrides(thread.workspace, member.clone()).await?;
        Ok(config.delivery(&member).prefs(&member, &overrides))
    }

    async fn completion_agents(
        &self,
        ext: &Extensions,
        thread: String,
        text: String,
        agents: Option<Vec<String>>,
        wait: Option<Wait>,
        timeout_s: Option<u64>,
        aggregation: Option<Aggregation>,
        vote: Option<bool>,
        chair: Option<String>,
        id: Option<String>,
        path: Option<String>,
    ) -> RpcResult<Completion> {
        validate::thread_id(&thread)?;
        body(&text)?;
        validate::search_path(path.as_deref())?;
        // The client's own name for the completion: a second call with it
        // attaches to the first (after a reconnect, or a restart of kdd).
        if let Some(id) = &id {
            completion_id(id)?;
        }
        if let Some(a) = &agents {
            validate::addressees("agents", a)?;
        }
        crate::council::runs_here(&self.d.db, &thread).await?;
        if let Some(c) = &chair {
            validate::member(c)?;
        }
        let p = completion::Params {
            thread,
            body: text,
            agents,
            wait: wait.unwrap_or_default(),
            timeout: validate::timeout(timeout_s)?,
            aggregation: aggregation.unwrap_or_default(),
            vote: vote.unwrap_or(false),
            chair,
            client: ext.get::<ClientId>().copied(),
            id,
            path,
        };
        completion::complete(&self.d.coord, p).await
    }

    async fn emergency_broadcast(
        &self,
        ext: &Extensions,
        thread: String,
        text: String,
        from: Option<String>,
        stop: Option<bool>,
        path: Option<String>,
    ) -> RpcResult<Emergency> {
        validate::thread_id(&thread)?;
        body(&text)?;
        validate::search_path(path.as_deref())?;
        let from = from.unwrap_or_else(|| kd_proto::names::KING.to_string());
        validate::member(&from)?;
        let client = ext.get::<ClientId>().copied();
        emergency::broadcast(&self.d.coord, thread, from, text, (stop.unwrap_or(false), client, path)).await
    }

    async fn emergency_ack(&self, thread: String, member: String, broadcast: Option<String>) -> RpcResult<Vec<Ack>> {
        validate::thread_id(&thread)?;
        validate::member(&member)?;
        validate::label("broadcast", broadcast.as_deref())?;
        let (_, config) = self.d.coord.thread(&thread, None).await?;
        crate::coord::check_members(&config, std::slice::from_ref(&member), false)?;
        Ok(self.d.db.acknowledge(thread, member, broadcast).await?)
    }

    async fn emergency_pending(&self, thread: Option<String>, all: Option<bool>) -> RpcResult<Vec<Ack>> {
        validate::label("thread", thread.as_deref())?;
        Ok(self.d.db.acks(thread, all.unwrap_or(false)).await?)
    }

    async fn resource_write(
        &self,
        resource: String,
        agent: String,
        thread: Option<String>,
        window_ms: Option<u64>,
    ) -> RpcResult<RaceCheck> {
        self::resource(&self.d, resource, agent, thread, Access::Write, window_ms).await
    }

    async fn resource_read(&self, resource: String, agent: String, thread: Option<String>) -> RpcResult<RaceCheck> {
        self::resource(&self.d, resource, agent, thread, Access::Read, None).await
    }
}

/// Longest client-chosen completion id after its `c-`.
const COMPLETION_ID_MAX: usize = 64;

/// A completion id a client chose: `c-` and 1 to 64 of `[A-Za-z0-9_-]`.
fn completion_id(id: &str) -> RpcResult<()> {
    let ok = id.strip_prefix("c-").is_some_and(|rest| {
        !rest.is_empty()
            && rest.len() <= COMPLETION_ID_MAX
            && rest.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    });
    if ok { Ok(()) } else { Err(invalid(format!("id must be c- and 1 to {COMPLETION_ID_MAX} of A-Z a-z 0-9 _ -"))) }
}

/// A declared read or write of a shared resource (`resource.*`,
/// `member.claim`): the race check, recorded in the event log.
pub async fn resource(
    d: &Daemon,
    resource: String,
    agent: String,
    thread: Option<String>,
    access: Access,
    window_ms: Option<u64>,
) -> RpcResult<RaceCheck> {
    if resource.trim().is_empty() {
        return Err(invalid("resource is empty"));
    }
    validate::path("resource", Some(&resource))?;
    validate::member(&agent)?;
    validate::label("thread", thread.as_deref())?;
    let window = match window_ms {
        None => races::DEFAULT_WINDOW,
        Some(ms) if ms == 0 || ms > races::MAX_WINDOW.as_millis() as u64 => {
            return Err(invalid(format!("window_ms must be between 1 and {}", races::MAX_WINDOW.as_millis())));
        }
        Some(ms) => Duration::from_millis(ms),
    };
    let check = d.coord.races.check(&resource, &agent, access, window);
    let event = Record {
        kind: races::Races::event_kind(&check).to_string(),
        thread,
        agent: Some(agent.clone()),
        from: Some(agent),
        to: check.writers.clone(),
        correlation_id: Some(format!("r-{resource}")),
        data: json!({"resource": resource, "access": access, "status": check.status, "writers": check.writers,
                     "backoff_ms": check.backoff_ms, "held_until_ms": check.held_until_ms}),
    };
    d.db.record(vec![event]).await?;
    Ok(check)
}

#[cfg(test)]
mod tests {
    use super::completion_id;

    #[test]
    fn a_completion_id_is_c_and_a_bounded_label() {
        for good in ["c-1", "c-Ab_9-x", &format!("c-{}", "a".repeat(64))] {
            assert!(completion_id(good).is_ok(), "{good}");
        }
        for bad in ["", "c-", "x-1", "c-a b", "c-é", "c-a\n", &format!("c-{}", "a".repeat(65))] {
            assert!(completion_id(bad).is_err(), "{bad:?}");
        }
    }
}
