//! Long-lived agent processes by what they are started from ([`Started`]):
//! each started on first use and again after it died, never twice at once,
//! a slow start holding up only its own key; all stopped together at
//! shutdown. The codex app-servers and the ACP agents are each a [`Pool`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::peer::{EXIT_GRACE, Peer};
use crate::config::AgentDef;

/// What a long-lived agent process is started from: two members that share
/// it share one process ([`Pool`] key).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Started {
    workspace: PathBuf,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
}

impl Started {
    pub fn of(agent: &AgentDef, workspace: &Path) -> Started {
        Started {
            workspace: workspace.to_path_buf(),
            command: agent.command.clone(),
            args: agent.args.clone(),
            env: agent.env.clone(),
        }
    }
}

type Slot<T> = Arc<tokio::sync::Mutex<Option<Arc<T>>>>;

/// Long-lived processes by key: each started on first use and again after
/// it died, never twice at once; a slow start holds up only its own key.
pub struct Pool<K, T> {
    slots: Mutex<HashMap<K, Slot<T>>>,
}

impl<K, T> Default for Pool<K, T> {
    fn default() -> Pool<K, T> {
        Pool { slots: Mutex::new(HashMap::new()) }
    }
}

impl<K: Eq + std::hash::Hash, T: AsRef<Peer>> Pool<K, T> {
    /// The live process of `key`, or the one `start` starts.
    pub async fn get_or_start<F, Fut>(&self, key: K, start: F) -> Result<Arc<T>, String>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        let slot = self.slots.lock().map_err(|_| "pool lock poisoned".to_string())?.entry(key).or_default().clone();
        let mut slot = slot.lock().await;
        if let Some(live) = slot.as_ref().filter(|t| !(***t).as_ref().is_gone()) {
            return Ok(live.clone());
        }
        let started = Arc::new(start().await?);
        *slot = Some(started.clone());
        Ok(started)
    }

    /// Stops every process (at shutdown, after the runs ended). A start
    /// still under way (its run stopped waiting for it) is not waited for
    /// long: dropping it ends its process.
    pub async fn stop_all(&self) {
        let slots: Vec<Slot<T>> =
            self.slots.lock().map(|mut s| s.drain().map(|(_, slot)| slot).collect()).unwrap_or_default();
        let mut running = Vec::new();
        for slot in slots {
            match tokio::time::timeout(EXIT_GRACE, slot.lock()).await {
                Ok(mut started) => running.extend(started.take()),
                Err(_) => tracing::warn!("a long-lived agent was still starting at shutdown"),
            }
        }
        futures_util::future::join_all(running.iter().map(|t| (**t).as_ref().stop(EXIT_GRACE))).await;
    }
}
