//! `config.get`: every effective value with where it came from — the file,
//! another key of it that kd maps (Kingdom's), or a default; an
//! `approvals` rule, the file it is in (the user's or the workspace's).

use kd_proto::types::{ConfigEntry, ConfigView};
use serde_json::{Value, json};

use std::path::Path;

use super::{Backend, Config, Env, Permissions, Transport, find_program};

impl Config {
    /// The members whose runs are to get kd's MCP server: on for them
    /// (`mcp`) and their backend takes one.
    pub fn mcp_members(&self) -> Vec<&str> {
        let takes = |m: &&String| self.agent(m).is_some_and(|a| a.mcp && a.backend.takes_mcp());
        self.council.members.iter().filter(takes).map(String::as_str).collect()
    }

    /// What to say when members are to get kd's MCP server and `kd` (`kd`,
    /// see [`super::find_kd`]) was not found: they run without it.
    pub fn mcp_missing(&self, kd: Option<&Path>) -> Option<String> {
        let members = self.mcp_members();
        (kd.is_none() && !members.is_empty()).then(|| {
            format!(
                "council.mcp: no kd found beside kdd, in KD_KD or on PATH to serve kd's MCP server (kd mcp): {} \
                 run without kd's tools",
                members.join(", ")
            )
        })
    }

    /// Every effective value with where it came from (`kd config show`);
    /// `kd` is the `kd` that serves kd's MCP server, if one was found.
    pub fn view(&self, workspace: &str, env: &Env<'_>, kd: Option<&Path>) -> ConfigView {
        let file = self.file.as_ref().map(|f| f.display().to_string());
        // The file when it sets any of `keys`; the key kd mapped, when one.
        let source = |keys: &[&str], default: &str| match &file {
            Some(f) => match keys.iter().find_map(|k| self.mapped_from.get(*k)) {
                Some(from) => format!("{f} ({from})"),
                None if keys.iter().any(|k| self.set_keys.contains(*k)) => f.clone(),
                None => default.to_string(),
            },
            None => default.to_string(),
        };
        let mut entries = Vec::new();
        let mut add = |key: String, value: Value, source: String| entries.push(ConfigEntry { key, value, source });
        let c = &self.council;
        let members_default = if c.members_detected { "found on PATH" } else { "default" };
        add("council.members".into(), json!(c.members), source(&["council.members"], members_default));
        add("council.timeout".into(), json!(c.timeout_s), source(&["council.timeout"], "default"));
        add(
            "council.max_answer_bytes".into(),
            json!(c.max_answer_bytes),
            source(&["council.max_answer_bytes"], "default"),
        );
        add("council.mode".into(), json!(c.ask.mode.as_str()), source(&["council.mode"], "default"));
        add("council.auto_rounds".into(), json!(c.ask.auto_rounds), source(&["council.auto_rounds"], "default"));
        add(
            "council.chat.mode".into(),
            json!(c.chat.mode.as_str()),
            source(&["council.chat.mode"], "default (council.mode)"),
        );
        add(
            "council.chat.auto_rounds".into(),
            json!(c.chat.auto_rounds),
            source(&["council.chat.auto_rounds", "council.chat.mode"], "default (council.auto_rounds)"),
        );
        add("council.preamble".into(), json!(c.preamble), source(&["council.preamble", "council.writable"], "default"));
        add(
            "council.chat_preamble".into(),
            json!(c.chat_preamble),
            source(&["council.chat_preamble", "council.writable"], "default"),
        );
        add("council.work_preamble".into(), json!(c.work_preamble), source(&["council.work_preamble"], "default"));
        let secs = |d: std::time::Duration| json!(d.as_secs());
        add("council.budget_usd".into(), json!(c.budget_usd), source(&["council.budget_usd"], "default (none)"));
        add(
            "council.resume_within".into(),
            secs(c.resume_within),
            source(&["council.resume_within"], "default (24 h)"),
        );
        add(
            "council.resume_attempts".into(),
            json!(c.resume_attempts),
            source(&["council.resume_attempts"], "default"),
        );
        add("council.max_hops".into(), json!(self.coordination.max_hops), source(&["council.max_hops"], "default"));
        add("council.mcp".into(), json!(c.mcp), source(&["council.mcp"], "default"));
        add(
            "lifecycle.idle_after".into(),
            secs(self.lifecycle.idle_after),
            source(&["lifecycle.idle_after"], "default (24 h)"),
        );
        add(
            "lifecycle.archive_after".into(),
            secs(self.lifecycle.archive_after),
            source(&["lifecycle.archive_after"], "default (72 h)"),
        );
        add(
            "lifecycle.summarizer".into(),
            json!(self.lifecycle.summarizer),
            source(&["lifecycle.summarizer"], "default (none: extractive)"),
        );
        add(
            "lifecycle.summary_to_trunk".into(),
            json!(self.lifecycle.summary_to_trunk),
            source(&["lifecycle.summary_to_trunk"], "default"),
        );
        add("lifecycle.bundle".into(), json!(self.lifecycle.bundle), source(&["lifecycle.bundle"], "default"));
        add(
            "lifecycle.fork_carry".into(),
            json!(self.lifecycle.fork_carry.as_str()),
            source(&["lifecycle.fork_carry"], "default"),
        );
        let w = &self.work;
        add("work.allowed_tools".into(), json!(w.allowed_tools), source(&["work.allowed_tools"], "default"));
        add("work.copy".into(), json!(w.copy), source(&["work.copy"], "default (.worktreeinclude's entries)"));
        add("work.setup".into(), json!(w.setup), source(&["work.setup"], "default (none)"));
        add("work.check".into(), json!(w.check), source(&["work.check"], "default (none)"));
        add(
            "work.check_timeout".into(),
            json!(w.check_timeout.as_secs()),
            source(&["work.check_timeout"], "default (10 min)"),
        );
        add("work.fix_rounds".into(), json!(w.fix_rounds), source(&["work.fix_rounds"], "default"));
        // The user's file's and the workspace's together: each from its own.
        let from = |f: Option<&Path>| f.map_or_else(|| "set".to_string(), |f| f.display().to_string());
        let a = &self.approvals;
        let timeout_from = a.timeout_source().map_or_else(|| "default (10 min)".to_string(), from);
        add("approvals.timeout".into(), secs(a.timeout), timeout_from);
        for (key, verdict, file) in a.rules() {
            add(key, json!(verdict.as_str()), from(file));
        }
        add("work.remote".into(), json!(w.remote), source(&["work.remote"], "default"));
        let shown = self.agents.iter().filter(|(n, _)| {
            c.members.contains(n) || self.set_keys.iter().any(|k| k.starts_with(&format!("agents.{n}.")))
        });
        for (name, a) in shown {
            let k = |f: &str| format!("agents.{name}.{f}");
            add(k("backend"), json!(a.backend.as_str()), source(&[&k("backend")], "default"));
            let found = match find_program(&a.command, env) {
                Some(p) => format!("default (found: {})", p.display()),
                None => "default (not found on PATH)".to_string(),
            };
            add(k("command"), json!(a.command), source(&[&k("command")], &found));
            add(k("args"), json!(a.args), source(&[&k("args"), &k("extra_flags"), &k("effort")], "default"));
            add(k("env"), json!(a.env), source(&[&k("env")], "default"));
            add(k("model"), json!(a.model), source(&[&k("model")], "default"));
            add(
                k("timeout"),
                json!(a.timeout_s.unwrap_or(c.timeout_s)),
                source(&[&k("timeout")], "default (council.timeout)"),
            );
            let prompt_keys = [k("prompts.council"), k("prompt"), "prompts.council".to_string()];
            let prompt_keys: Vec<&str> = prompt_keys.iter().map(String::as_str).collect();
            add(k("prompts.council"), json!(a.prompt_council), source(&prompt_keys, "default"));
            let chat_keys = [k("prompts.chat"), k("prompts.council"), k("prompt"), "prompts.council".to_string()];
            let chat_keys: Vec<&str> = chat_keys.iter().map(String::as_str).collect();
            add(k("prompts.chat"), json!(a.prompt_chat), source(&chat_keys, "default (prompts.council)"));
            add(k("color"), json!(a.color), source(&[&k("color")], "default (by name)"));
            add(k("mcp"), json!(a.mcp), source(&[&k("mcp")], "default (council.mcp)"));
            if a.backend == Backend::Command {
                add(k("format"), json!(a.format.as_str()), source(&[&k("format")], "default"));
            }
            if a.backend == Backend::Codex {
                let transport = if a.transport == Transport::AppServer { "app-server" } else { "exec" };
                add(k("transport"), json!(transport), source(&[&k("transport")], "default"));
                if a.transport == Transport::AppServer {
                    add(k("sandbox"), json!(a.policy.sandbox), source(&[&k("sandbox")], "default"));
                    add(k("approval"), json!(a.policy.approval), source(&[&k("approval")], "default"));
                }
            }
            if a.backend == Backend::Acp {
                let p = match a.permissions {
                    Permissions::ReadOnly => "read-only",
                    Permissions::Allow => "allow",
                    Permissions::Deny => "deny",
                };
                add(k("permissions"), json!(p), source(&[&k("permissions")], "default"));
            }
        }
        let notice = if c.members.is_empty() {
            Some("no council members: install claude, codex, cursor (agent) or gemini, or list members in .kd/config.json".into())
        } else if c.members_detected {
            Some(format!(
                "no council is configured, so the agent CLIs found on PATH are the members: {}",
                c.members.join(", ")
            ))
        } else {
            None
        };
        ConfigView {
            workspace: workspace.to_string(),
            file,
            entries,
            notice,
            notices: self.notices.clone(),
            warnings: self.warnings.iter().cloned().chain(self.mcp_missing(kd)).collect(),
        }
    }
}
