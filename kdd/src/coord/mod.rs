//! The coordination layer (SPEC §7, seed 002): what makes a council a
//! team. It owns
//!
//! - [`route`]: `message.route` — a message from a member or the King to
//!   members (`to`, `cc`, `reply_to`, a conversation type), delivered by
//!   each member's delivery mode through [`crate::council::deliver`];
//! - [`completion`]: `completion.agents` — one prompt to several members in
//!   parallel, waiting for all (with a timeout) or the first, and combining
//!   the answers (merge, an anonymised vote, a chair's synthesis);
//! - [`emergency`]: emergency broadcasts that bypass queues and modes, and
//!   the acknowledgements they are owed;
//! - [`races`]: declared reads and writes of shared resources, and the
//!   write-write and read-while-write races among them;
//! - [`claims`]: a member's work claimed by one task at a time (the
//!   follower of a `kd rebase`).
//!
//! It sits beside the council and above it: it asks members through the
//! council's [`crate::council::Launch`] and delivery, and reaches the
//! registry only through [`crate::db`]. Every decision is an event.

pub mod claims;
pub mod completion;
pub mod emergency;
pub mod races;
pub mod route;

use std::sync::Arc;

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::ErrorCode;
use kd_proto::names::{ALL, KING};
use kd_proto::types::Thread;

use crate::config::Config;
use crate::council::Council;

/// What the coordination layer keeps between calls.
pub struct Coord {
    pub council: Arc<Council>,
    pub races: races::Races,
    /// The completions this daemon drives, for calls that attach to them.
    pub completions: completion::Driven,
    /// The works whose bringing up to date this daemon follows
    /// (`work::rebase`): one follower each.
    pub rebasing: Arc<claims::Claims>,
}

impl Coord {
    pub fn new(council: Arc<Council>) -> Coord {
        Coord { council, races: races::Races::default(), completions: Default::default(), rebasing: Default::default() }
    }

    /// A thread and its workspace's configuration, read afresh; its agents
    /// found on `path`, the asking client's `PATH` (none: kdd's own).
    pub async fn thread(&self, thread: &str, path: Option<&str>) -> Result<(Thread, Config), ErrorObjectOwned> {
        let thread = self.council.agents.db.thread(thread.to_string()).await?;
        let config = crate::council::send::read_config(&thread.workspace, path)?;
        Ok((thread, config))
    }
}

/// Checks that every name is a member (or `all` where `all_ok`).
pub fn check_members(config: &Config, names: &[String], all_ok: bool) -> Result<(), ErrorObjectOwned> {
    let members = &config.council.members;
    match names.iter().find(|n| !(members.contains(n) || (all_ok && *n == ALL))) {
        Some(n) => {
            Err(ErrorCode::InvalidArgument.error(format!("unknown member {n}; the members are {}", members.join(", "))))
        }
        None => Ok(()),
    }
}

/// Checks that a sender is the King or a member.
pub fn check_sender(config: &Config, from: &str) -> Result<(), ErrorObjectOwned> {
    if from == KING || config.council.members.iter().any(|m| m == from) {
        Ok(())
    } else {
        Err(ErrorCode::InvalidArgument.error(format!(
            "unknown sender {from}; a message comes from king or a member ({})",
            config.council.members.join(", ")
        )))
    }
}
