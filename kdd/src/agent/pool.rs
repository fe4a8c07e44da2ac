//! Long-lived agent processes by what they are started from ([`Started`]):
//! each started on first use and again after it died, never twice at once,
//! a slow start holding up only its own key; all stopped together at
//! shutdown. The codex app-servers and the ACP agents are each a [`Pool`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::peer::{EXIT_GRACE, Peer};
use crate::config::AgentDef;

/// What a long-lived agent process is started from (with its member, the
/// [`Pool`] key: two members never share one).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Started {
    workspace: PathBuf,
    command: String,
    args: Vec<String>,
    env: BTreeMap<String, String>,
    /// The `PATH` it is found on and run with (the asking client's).
    path: Option<String>,
}

impl Started {
    pub fn of(agent: &AgentDef, workspace: &Path) -> Started {
        Started {
            workspace: workspace.to_path_buf(),
            command: agent.command.clone(),
            args: agent.args.clone(),
            env: agent.env.clone(),
            path: agent.path.clone(),
        }
    }
}

type Slot<T> = Arc<tokio::sync::Mutex<Option<Arc<T>>>>;

/// Long-lived processes by key: each started on first use and again after
/// it died, never twice at once; a slow start holds up only its own key.
pub struct Pool<K, T> {
    slots: Mutex<HashMap<K, Slot<T>>>,
    /// The keys whose process was idle at the last [`Pool::stop_idle`].
    idle: Mutex<HashSet<K>>,
}

impl<K, T> Default for Pool<K, T> {
    fn default() -> Pool<K, T> {
        Pool { slots: Mutex::new(HashMap::new()), idle: Mutex::new(HashSet::new()) }
    }
}

impl<K: Eq + std::hash::Hash + Clone, T: AsRef<Peer>> Pool<K, T> {
    /// Stops the processes idle now and at the last call too (called every
    /// idle period: a process nothing asked anything of for that long —
    /// one started from a member's configuration since changed, say — does
    /// not run until the daemon stops). Returns how many.
    pub async fn stop_idle(&self) -> usize {
        let slots: Vec<(K, Slot<T>)> =
            self.slots.lock().map(|s| s.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default();
        let before: HashSet<K> = self.idle.lock().map(|mut i| std::mem::take(&mut *i)).unwrap_or_default();
        let mut idle_now = HashSet::new();
        let mut stopping = Vec::new();
        for (key, slot) in slots {
            // A slot being started or in use is left alone.
            let Ok(mut held) = slot.try_lock() else { continue };
            if !held.as_ref().is_some_and(|t| (**t).as_ref().is_idle()) {
                continue;
            }
            if before.contains(&key) {
                stopping.extend(held.take());
            } else {
                idle_now.insert(key);
            }
        }
        if let Ok(mut i) = self.idle.lock() {
            i.extend(idle_now);
        }
        let n = stopping.len();
        futures_util::future::join_all(stopping.iter().map(|t| (**t).as_ref().stop(EXIT_GRACE))).await;
        n
    }

    /// The live process of `key`, or the one `start` starts.
    pub async fn get_or_start<F, Fut>(&self, key: K, start: F) -> Result<Arc<T>, String>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, String>>,
    {
        // Used now: not idle.
        if let Ok(mut i) = self.idle.lock() {
            i.remove(&key);
        }
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
