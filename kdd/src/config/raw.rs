//! The configuration file as written: kd's keys and Kingdom's — those of
//! every kingdom-cli release's `kingdom/config.py`, 0.1.4 to 1.1.0, so that
//! a file any of them wrote or read is read (`kd init` of 0.1 and 0.2 wrote
//! `peasant.timeout`, which later releases refuse) — each struct refusing
//! keys in neither. Kingdom-only keys are marked; [`super::resolve`] maps
//! or ignores them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::ConfigError;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub council: Option<RawCouncil>,
    pub agents: Option<BTreeMap<String, RawAgent>>,
    /// Kingdom: phase prompts for every agent (an agent's own win).
    pub prompts: Option<RawPrompts>,
    /// Kingdom: worker settings (ignored).
    pub peasant: Option<RawPeasant>,
    /// Kingdom: epic supervisor settings (ignored).
    pub lord: Option<RawLord>,
    /// When threads go idle and are archived.
    pub lifecycle: Option<RawLifecycle>,
    /// Members' work in their worktrees.
    pub work: Option<RawWork>,
    /// What members' CLIs may do without asking the King.
    pub approvals: Option<super::approvals::RawApprovals>,
    /// Where kd calls the King when it is needed.
    pub notify: Option<super::notify::RawNotify>,
    /// Where kd web serves (the user's file only).
    pub web: Option<super::web::RawWeb>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWork {
    /// claude's tools allowed in a worktree, e.g. `Bash(cargo test:*)`.
    pub allowed_tools: Option<Vec<String>>,
    /// Paths copied from the King's tree into a new worktree.
    pub copy: Option<Vec<String>>,
    /// The command run once in a new worktree: an argv (or plain words).
    pub setup: Option<Value>,
    /// The check run in a worktree after each commit: an argv (or plain words).
    pub check: Option<Value>,
    /// Seconds, or "30s", "10m".
    pub check_timeout: Option<Value>,
    /// How many times a member whose check fails is sent back to fix it.
    pub fix_rounds: Option<u32>,
    /// The git remote `kd pr` pushes members' branches to.
    pub remote: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLifecycle {
    /// Seconds, or "30m", "24h", "3d".
    pub idle_after: Option<Value>,
    pub archive_after: Option<Value>,
    /// Files of the workspace a fork gives its branch.
    pub bundle: Option<Vec<String>>,
    /// The member who writes summaries.
    pub summarizer: Option<String>,
    /// Whether a branch's summary is posted to its parent at archive.
    pub summary_to_trunk: Option<bool>,
    /// What a fork carries of its parent: conversation, summary or none.
    pub fork_carry: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCouncil {
    pub members: Option<Vec<String>>,
    pub timeout: Option<u64>,
    pub max_answer_bytes: Option<u64>,
    pub auto_rounds: Option<i64>,
    pub mode: Option<String>,
    pub preamble: Option<String>,
    pub chat_preamble: Option<String>,
    /// The preamble of a run in a member's worktree.
    pub work_preamble: Option<String>,
    /// Kingdom: who reviews (ignored: kd has no review phase).
    pub review_members: Option<Vec<String>>,
    /// Kingdom: auto, show or hide (ignored: kd does not show thinking).
    pub thinking_visibility: Option<String>,
    /// Kingdom: members may write (mapped to the writable preambles).
    pub writable: Option<bool>,
    /// Kingdom: `kd council ask` settings.
    pub ask: Option<RawAsk>,
    /// Kingdom 0.1: what 0.2 moved to `council.ask.auto_messages`.
    pub auto_messages: Option<i64>,
    /// Kingdom: chat settings.
    pub chat: Option<RawChat>,
    /// Hand-offs one exchange may make (agents addressing agents).
    pub max_hops: Option<i64>,
    /// Whether the preamble tells members about `kd send` and `kd inbox`.
    pub coordination_hint: Option<bool>,
    /// What one exchange may cost before its pending auto-turns stop.
    pub budget_usd: Option<f64>,
    /// Whether members get kd's MCP server (`kd mcp`) for their runs.
    pub mcp: Option<bool>,
    /// How old an exchange cut by a restart may be and still be resumed
    /// (a duration; 0 turns resuming off).
    pub resume_within: Option<serde_json::Value>,
    /// Runs a step may have had cut before it is given up.
    pub resume_attempts: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAsk {
    /// broadcast or sequential.
    pub mode: Option<String>,
    /// -1 (auto), 0 (none) or how many follow-up answers.
    pub auto_messages: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawChat {
    /// natural, round_robin, manual or broadcast (Kingdom), or sequential.
    pub mode: Option<String>,
    /// Rounds after the first, 0 or more.
    pub auto_rounds: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAgent {
    pub backend: Option<String>,
    pub command: Option<String>,
    pub args: Option<Vec<String>>,
    pub env: Option<BTreeMap<String, String>>,
    pub model: Option<String>,
    pub timeout: Option<u64>,
    pub prompts: Option<RawPrompts>,
    pub format: Option<String>,
    /// A name, a 256-colour index or `#rrggbb` (checked by resolve).
    pub color: Option<Value>,
    /// Kingdom: always appended after the phase prompt.
    pub prompt: Option<String>,
    /// Kingdom: extra CLI flags (appended to `args`).
    pub extra_flags: Option<Vec<String>>,
    /// Kingdom: reasoning effort (claude `--effort`, codex
    /// `model_reasoning_effort`).
    pub effort: Option<String>,
    /// Kingdom 0.5 to 1.0: codex's `effort`, under its earlier name.
    pub reasoning_effort: Option<String>,
    /// How messages addressed to the member are delivered (F-X3).
    pub delivery: Option<RawDelivery>,
    /// codex: `app-server` (default) or `exec`.
    pub transport: Option<String>,
    /// codex app-server: the sandbox of the member's threads (`read-only` by default).
    pub sandbox: Option<String>,
    /// codex app-server: when codex asks before acting (`never` by default).
    pub approval: Option<String>,
    /// acp: how permission requests are answered (`read-only` by default).
    pub permissions: Option<String>,
    /// Whether the member gets kd's MCP server (`council.mcp` by default).
    pub mcp: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawDelivery {
    /// immediate or queued.
    pub mode: Option<String>,
    pub immediate_types: Option<Vec<String>>,
    pub queued_types: Option<Vec<String>>,
    pub queue_limit: Option<i64>,
    /// drop_oldest or reject_new.
    pub overflow: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPrompts {
    pub council: Option<String>,
    pub chat: Option<String>,
    /// Kingdom phases kd does not have (ignored).
    pub design: Option<String>,
    pub review: Option<String>,
    pub peasant: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPeasant {
    /// Read only to check its type: kd ignores it.
    #[allow(dead_code)]
    pub agent: Option<String>,
    /// Kingdom 0.1 and 0.2 (`kd init` wrote it).
    pub timeout: Option<i64>,
    pub max_iterations: Option<i64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLord {
    /// Read only to check its type: kd ignores it.
    #[allow(dead_code)]
    pub agent: Option<String>,
    pub max_cycles: Option<i64>,
}

/// Reads the file; an empty one (or `{}`) is all defaults, as in Kingdom.
pub fn read(file: &Path) -> Result<RawConfig, ConfigError> {
    let err =
        |key: &str, message: String| ConfigError { file: Some(file.to_path_buf()), key: key.to_string(), message };
    let text = std::fs::read_to_string(file).map_err(|e| err("(file)", format!("cannot read: {e}")))?;
    parse(&text, file)
}

/// Parses a configuration's text (`file` names it in errors).
pub fn parse(text: &str, file: &Path) -> Result<RawConfig, ConfigError> {
    let err =
        |key: &str, message: String| ConfigError { file: Some(file.to_path_buf()), key: key.to_string(), message };
    if text.trim().is_empty() {
        return Ok(RawConfig::default());
    }
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let e = e.into_inner();
        // Where the text stops being JSON, the path is the parser's, no key.
        let key = match e.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => "not JSON".to_string(),
            _ if path == "." => "(top level)".to_string(),
            _ => path,
        };
        err(&key, e.to_string())
    })
}
