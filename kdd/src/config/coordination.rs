//! The coordination layer's settings: each member's delivery preferences
//! (`agents.NAME.delivery`, F-X3) and the council's `max_hops` and
//! `coordination_hint`.

use kd_proto::types::{DeliveryMode, DeliveryPrefs, Overflow, RouteType};

use super::ConfigError;
use super::raw::RawDelivery;
use super::resolver::Resolver;

/// Hand-offs an exchange may make, by default.
pub const DEFAULT_MAX_HOPS: u32 = 6;
/// The most `council.max_hops` may be.
pub const MAX_HOPS: u32 = 100;
/// Pending messages an inbox holds, by default.
pub const DEFAULT_QUEUE_LIMIT: u32 = 100;
/// The most `queue_limit` may be.
pub const MAX_QUEUE_LIMIT: u32 = 10_000;

/// What members are told about reaching each other (the default
/// `council.coordination_hint: true` adds it after the preamble).
pub const COORDINATION_HINT: &str = "To hand the discussion to another member, start a line of your answer with \
@NAME. From your shell, `kd send --to NAME \"…\"` sends a member a message and `kd inbox` lists the messages \
addressed to you.";

/// The hint for a member whose run has kd's MCP server (`kd mcp`, named
/// `kd`): its tools instead of the shell commands, which a sandboxed agent
/// cannot run.
pub const MCP_HINT: &str = "To hand the discussion to another member, start a line of your answer with @NAME. \
The tools of the MCP server `kd` act for you, as yourself, on this thread: `send` sends members a message, \
`inbox` lists the messages addressed to you, `ack` acknowledges an emergency, `claim` declares that you write \
(or read) a shared resource, `thread` shows the thread's recent messages and `search` searches earlier threads.";

/// A member's delivery preferences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub mode: DeliveryMode,
    pub immediate_types: Vec<RouteType>,
    pub queued_types: Vec<RouteType>,
    pub queue_limit: u32,
    pub overflow: Overflow,
}

impl Default for Delivery {
    fn default() -> Delivery {
        Delivery {
            mode: DeliveryMode::Immediate,
            immediate_types: vec![],
            queued_types: vec![],
            queue_limit: DEFAULT_QUEUE_LIMIT,
            overflow: Overflow::DropOldest,
        }
    }
}

impl Delivery {
    /// How a message of type `t` reaches the member: the per-type lists
    /// first (the `overrides` chosen by `queue.subscribe` over the
    /// configured ones), then the mode. An emergency is always immediate.
    pub fn mode_for(&self, t: RouteType, overrides: &[(RouteType, DeliveryMode)]) -> DeliveryMode {
        if t == RouteType::Emergency {
            return DeliveryMode::Immediate;
        }
        if let Some((_, m)) = overrides.iter().find(|(o, _)| *o == t) {
            return *m;
        }
        if self.immediate_types.contains(&t) {
            DeliveryMode::Immediate
        } else if self.queued_types.contains(&t) {
            DeliveryMode::Queued
        } else {
            self.mode
        }
    }

    /// As the wire shows it, with `overrides` folded into the lists.
    pub fn prefs(&self, member: &str, overrides: &[(RouteType, DeliveryMode)]) -> DeliveryPrefs {
        let mut immediate = self.immediate_types.clone();
        let mut queued = self.queued_types.clone();
        for (t, m) in overrides {
            immediate.retain(|x| x != t);
            queued.retain(|x| x != t);
            match m {
                DeliveryMode::Immediate => immediate.push(*t),
                DeliveryMode::Queued => queued.push(*t),
            }
        }
        DeliveryPrefs {
            member: member.to_string(),
            mode: self.mode,
            immediate_types: immediate,
            queued_types: queued,
            queue_limit: self.queue_limit,
            overflow: self.overflow,
        }
    }
}

/// The council's coordination settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coordination {
    pub max_hops: u32,
    pub hint: bool,
}

impl Default for Coordination {
    fn default() -> Coordination {
        Coordination { max_hops: DEFAULT_MAX_HOPS, hint: true }
    }
}

pub(super) fn coordination(
    r: &mut Resolver,
    max_hops: Option<i64>,
    hint: Option<bool>,
) -> Result<Coordination, ConfigError> {
    r.set("council.max_hops", max_hops.is_some());
    r.set("council.coordination_hint", hint.is_some());
    let max_hops = match max_hops {
        None => DEFAULT_MAX_HOPS,
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| *n <= MAX_HOPS)
            .ok_or_else(|| r.err("council.max_hops", format!("must be between 0 and {MAX_HOPS}, got {n}")))?,
    };
    Ok(Coordination { max_hops, hint: hint.unwrap_or(true) })
}

pub(super) fn delivery(r: &mut Resolver, member: &str, raw: Option<RawDelivery>) -> Result<Delivery, ConfigError> {
    let Some(raw) = raw else { return Ok(Delivery::default()) };
    let key = |k: &str| format!("agents.{member}.delivery.{k}");
    r.set(&format!("agents.{member}.delivery"), true);
    let mode = match raw.mode.as_deref() {
        None | Some("immediate") => DeliveryMode::Immediate,
        Some("queued") => DeliveryMode::Queued,
        Some(other) => return Err(r.err(key("mode"), format!("must be immediate or queued, got {other:?}"))),
    };
    let types = |r: &Resolver, k: &str, v: Option<Vec<String>>| -> Result<Vec<RouteType>, ConfigError> {
        v.unwrap_or_default()
            .iter()
            .map(|t| {
                RouteType::parse(t).ok_or_else(|| {
                    r.err(
                        key(k),
                        format!("unknown type {t:?}; use point_to_point, multicast, broadcast, reply or emergency"),
                    )
                })
            })
            .collect()
    };
    let immediate_types = types(r, "immediate_types", raw.immediate_types)?;
    let queued_types = types(r, "queued_types", raw.queued_types)?;
    let queue_limit = match raw.queue_limit {
        None => DEFAULT_QUEUE_LIMIT,
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| (1..=MAX_QUEUE_LIMIT).contains(n))
            .ok_or_else(|| r.err(key("queue_limit"), format!("must be between 1 and {MAX_QUEUE_LIMIT}, got {n}")))?,
    };
    let overflow = match raw.overflow.as_deref() {
        None | Some("drop_oldest") => Overflow::DropOldest,
        Some("reject_new") => Overflow::RejectNew,
        Some(other) => {
            return Err(r.err(key("overflow"), format!("must be drop_oldest or reject_new, got {other:?}")));
        }
    };
    Ok(Delivery { mode, immediate_types, queued_types, queue_limit, overflow })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_listed_win_over_the_mode_and_subscriptions_over_the_lists() {
        let d = Delivery { mode: DeliveryMode::Queued, immediate_types: vec![RouteType::Reply], ..Delivery::default() };
        assert_eq!(d.mode_for(RouteType::PointToPoint, &[]), DeliveryMode::Queued);
        assert_eq!(d.mode_for(RouteType::Reply, &[]), DeliveryMode::Immediate);
        assert_eq!(d.mode_for(RouteType::Reply, &[(RouteType::Reply, DeliveryMode::Queued)]), DeliveryMode::Queued);
        assert_eq!(
            d.mode_for(RouteType::Emergency, &[(RouteType::Emergency, DeliveryMode::Queued)]),
            DeliveryMode::Immediate
        );
        let p = d.prefs("codex", &[(RouteType::Reply, DeliveryMode::Queued)]);
        assert_eq!((p.immediate_types, p.queued_types), (vec![], vec![RouteType::Reply]));
    }
}
