//! From the file as written to the effective [`Config`]: defaults, value
//! checks that name the key, and Kingdom's keys mapped where kd has their
//! meaning (`claude_code`, `extra_flags`, `effort`, `prompt`, top-level
//! `prompts`, `council.ask`, `council.chat`, `council.writable`, and the
//! earlier releases' `council.auto_messages` and `reasoning_effort`) or
//! ignored with one notice each (`peasant`, `lord`,
//! `council.review_members`, `council.thinking_visibility`,
//! design/review/peasant prompts, `codex exec` flags the app-server has no
//! use for).

use std::collections::BTreeMap;
use std::path::PathBuf;

use kd_proto::names;
use serde_json::Value;

use super::programs::{builtin, detect_members};
use super::raw::{RawAgent, RawConfig, RawCouncil, RawPrompts};
use super::resolver::Resolver;
use super::*;

/// Most rounds after the first that a configuration may ask for.
pub const MAX_AUTO_ROUNDS: u32 = 100;

/// codex's sandboxes and approval policies (`agents.NAME.sandbox`, `approval`).
const SANDBOXES: &[&str] = &["read-only", "workspace-write", "danger-full-access"];
const APPROVALS: &[&str] = &["never", "on-request", "on-failure", "untrusted"];

/// Reasoning efforts Kingdom accepts per backend.
const CLAUDE_EFFORTS: &[&str] = &["low", "medium", "high", "xhigh", "max"];
const CODEX_EFFORTS: &[&str] = &["low", "medium", "high", "xhigh", "max", "ultra"];

pub(super) fn resolve(raw: RawConfig, file: Option<PathBuf>, env: &Env<'_>) -> Result<Config, ConfigError> {
    let mut r = Resolver::new(file);
    let top_prompts = raw.prompts.unwrap_or_default();
    ignore_phases(&mut r, "prompts", &top_prompts);
    if let Some(p) = &raw.peasant {
        for (key, value) in [("peasant.max_iterations", p.max_iterations), ("peasant.timeout", p.timeout)] {
            if let Some(n) = value.filter(|n| *n <= 0) {
                return Err(r.err(key, format!("must be positive, got {n}")));
            }
        }
        r.ignore("peasant", "Kingdom's worker settings; kd runs no workers");
    }
    if let Some(l) = &raw.lord {
        if let Some(n) = l.max_cycles.filter(|n| *n <= 0) {
            return Err(r.err("lord.max_cycles", format!("must be positive, got {n}")));
        }
        r.ignore("lord", "Kingdom's epic supervisor settings; kd has no supervisor");
    }

    let raw_council = raw.council.unwrap_or_default();
    // kd's MCP server for every member, unless the council or the member says no.
    let mcp = raw_council.mcp.unwrap_or(true);
    r.set("council.mcp", raw_council.mcp.is_some());
    let mut agents = BTreeMap::new();
    for backend in Backend::BUILTIN {
        let mut a = builtin(backend, env);
        a.mcp = mcp;
        set_prompts(&mut a, None, None, &top_prompts);
        agents.insert(backend.as_str().to_string(), a);
    }
    for (name, a) in raw.agents.unwrap_or_default() {
        let def = agent(&mut r, &name, a, &top_prompts, env, mcp)?;
        agents.insert(name, def);
    }

    let coordination = super::coordination::coordination(&mut r, raw_council.max_hops, raw_council.coordination_hint)?;
    let lifecycle = super::lifecycle::lifecycle(&mut r, raw.lifecycle.unwrap_or_default())?;
    let council = council(&mut r, raw_council, &agents, env)?;
    let work = super::work::work(&mut r, raw.work.unwrap_or_default())?;
    let approvals = super::approvals::approvals(&mut r, raw.approvals.unwrap_or_default(), &agents)?;
    // Checked here so a bad section is said at once; the notifier reads
    // the user's and the workspace's sections itself (`notify::load`).
    super::notify::section(&mut r, raw.notify)?;
    // kd web reads the user's section itself (`web::load`).
    super::web::section(&mut r, raw.web)?;
    Ok(Config {
        approvals,
        file: r.file,
        council,
        coordination,
        lifecycle,
        work,
        agents,
        set_keys: r.set_keys,
        mapped_from: r.mapped_from,
        notices: r.notices,
        warnings: r.warnings,
        path: None,
    })
}

/// Kingdom's design, review and peasant prompts: kd has no such phases.
fn ignore_phases(r: &mut Resolver, prefix: &str, p: &RawPrompts) {
    for (phase, set) in
        [("design", p.design.is_some()), ("review", p.review.is_some()), ("peasant", p.peasant.is_some())]
    {
        if set {
            r.ignore(&format!("{prefix}.{phase}"), &format!("kd has no {phase} phase"));
        }
    }
}

/// The agent's prompts for each style: its own phase prompt (else the
/// top-level one), then Kingdom's always-additive `prompt`. Chat uses
/// `prompts.chat` when set, else the council prompt.
fn set_prompts(a: &mut AgentDef, own: Option<&RawPrompts>, additive: Option<&str>, top: &RawPrompts) {
    fn nonempty(s: Option<&String>) -> Option<&str> {
        s.map(String::as_str).filter(|p| !p.trim().is_empty())
    }
    let council = nonempty(own.and_then(|p| p.council.as_ref())).or(nonempty(top.council.as_ref()));
    let chat = nonempty(own.and_then(|p| p.chat.as_ref())).or(nonempty(top.chat.as_ref())).or(council);
    let additive = additive.filter(|p| !p.trim().is_empty());
    let join = |phase: Option<&str>| {
        let parts: Vec<&str> = phase.into_iter().chain(additive).map(str::trim_end).collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    };
    a.prompt_council = join(council);
    a.prompt_chat = join(chat);
}

fn agent(
    r: &mut Resolver,
    name: &str,
    a: RawAgent,
    top: &RawPrompts,
    env: &Env<'_>,
    council_mcp: bool,
) -> Result<AgentDef, ConfigError> {
    let key = |field: &str| format!("agents.{name}.{field}");
    names::check_member_name(name).map_err(|e| r.err(format!("agents.{name}"), e.to_string()))?;
    let own_prompts = a.prompts.as_ref();
    for (field, set) in [
        ("backend", a.backend.is_some()),
        ("command", a.command.is_some()),
        ("args", a.args.is_some()),
        ("env", a.env.is_some()),
        ("model", a.model.is_some()),
        ("timeout", a.timeout.is_some()),
        ("format", a.format.is_some()),
        ("color", a.color.is_some()),
        ("prompt", a.prompt.is_some()),
        ("extra_flags", a.extra_flags.is_some()),
        ("effort", a.effort.is_some()),
        ("reasoning_effort", a.reasoning_effort.is_some()),
        ("transport", a.transport.is_some()),
        ("sandbox", a.sandbox.is_some()),
        ("approval", a.approval.is_some()),
        ("permissions", a.permissions.is_some()),
        ("mcp", a.mcp.is_some()),
        ("prompts.council", own_prompts.is_some_and(|p| p.council.is_some())),
        ("prompts.chat", own_prompts.is_some_and(|p| p.chat.is_some())),
    ] {
        r.set(&key(field), set);
    }
    if let Some(p) = own_prompts {
        ignore_phases(r, &format!("agents.{name}.prompts"), p);
    }
    let backend = match a.backend.as_deref() {
        Some(b) => Backend::parse(b)
            .ok_or_else(|| r.err(key("backend"), format!("unknown backend {b:?}; use {}", Backend::NAMES)))?,
        None => Backend::parse(name).filter(|b| *b != Backend::Command).ok_or_else(|| {
            r.err(key("backend"), format!("missing: say which backend runs this agent ({})", Backend::NAMES))
        })?,
    };
    let base = if matches!(backend, Backend::Command | Backend::Acp) { None } else { Some(builtin(backend, env)) };
    let command = match (a.command, &base) {
        (Some(c), _) if c.trim().is_empty() => return Err(r.err(key("command"), "is empty")),
        (Some(c), _) => c,
        (None, Some(b)) => b.command.clone(),
        (None, None) => {
            return Err(
                r.err(key("command"), format!("missing: a {} backend needs the program to run", backend.as_str()))
            );
        }
    };
    let format = match (backend, a.format.as_deref()) {
        (Backend::Command, Some(f)) => Format::parse(f).ok_or_else(|| {
            r.err(key("format"), format!("unknown format {f:?}; use text, claude, codex, cursor or gemini"))
        })?,
        (Backend::Command, None) => Format::Text,
        (_, Some(_)) => return Err(r.err(key("format"), "only a command backend takes a format")),
        (b, None) => b.format(),
    };
    let timeout_s = r.timeout(&key("timeout"), a.timeout)?;
    let color = match &a.color {
        None => None,
        Some(Value::String(s)) => {
            kd_proto::color::parse(s).map_err(|e| r.err(key("color"), e))?;
            Some(s.clone())
        }
        Some(Value::Number(n)) if n.as_u64().is_some_and(|i| i <= 255) => Some(n.to_string()),
        Some(other) => {
            return Err(r.err(key("color"), format!("{other} is not a colour; use a name, 0-255, or #rrggbb")));
        }
    };
    let delivery = super::coordination::delivery(r, name, a.delivery)?;
    let mut transport = match (backend, a.transport.as_deref()) {
        (_, None) => Transport::default_for(backend),
        (Backend::Codex, Some(t)) => Transport::parse(t)
            .ok_or_else(|| r.err(key("transport"), format!("unknown transport {t:?}; use app-server or exec")))?,
        (other, Some(_)) => {
            return Err(r.err(key("transport"), format!("only codex has a transport, not {}", other.as_str())));
        }
    };
    let permissions = match (backend, a.permissions.as_deref()) {
        (_, None) => Permissions::default(),
        (Backend::Acp, Some(p)) => Permissions::parse(p)
            .ok_or_else(|| r.err(key("permissions"), format!("must be one of read-only, allow, deny, got {p:?}")))?,
        (other, Some(_)) => {
            return Err(r.err(key("permissions"), format!("only an acp member takes it, not {}", other.as_str())));
        }
    };
    // The app-server was asked for: by name, or by its own keys.
    let appserver_asked = a.transport.is_some() || a.sandbox.is_some() || a.approval.is_some();
    let mut policy = CodexPolicy::default();
    for (field, value, allowed, slot) in [
        ("sandbox", a.sandbox, SANDBOXES, &mut policy.sandbox),
        ("approval", a.approval, APPROVALS, &mut policy.approval),
    ] {
        let Some(v) = value else { continue };
        if transport != Transport::AppServer {
            return Err(r.err(key(field), "only codex through app-server takes it (codex exec: use args)"));
        }
        if !allowed.contains(&v.as_str()) {
            return Err(r.err(key(field), format!("must be one of {}, got {v:?}", allowed.join(", "))));
        }
        *slot = v;
    }
    let (mut given_args, mut given_flags) = (a.args.unwrap_or_default(), a.extra_flags.unwrap_or_default());
    if transport == Transport::AppServer {
        codex_args(
            r,
            name,
            appserver_asked,
            &mut transport,
            [("args", &mut given_args), ("extra_flags", &mut given_flags)],
        );
    }
    if a.mcp == Some(true) && !backend.takes_mcp() {
        r.warnings.push(format!(
            "{}: kd cannot give a {} member its MCP server for a run (see docs/configuration.md); it reaches the \
             council with `kd send` from its shell",
            key("mcp"),
            backend.as_str()
        ));
    }
    let effort = match (a.effort, a.reasoning_effort) {
        (Some(_), Some(_)) => {
            return Err(r.err(key("reasoning_effort"), "is Kingdom's earlier name of effort: set only effort"));
        }
        (Some(e), None) => Some((e, "effort")),
        (None, Some(e)) => Some((e, "reasoning_effort")),
        (None, None) => None,
    };
    let mut args = match &effort {
        Some((e, field)) => effort_args(r, name, field, backend, e)?,
        None => vec![],
    };
    args.extend(given_args);
    args.extend(given_flags);
    let mut def = AgentDef {
        name: name.to_string(),
        backend,
        command,
        args,
        env: a.env.unwrap_or_default(),
        model: a.model.filter(|m| !m.is_empty()),
        timeout_s,
        prompt_council: None,
        prompt_chat: None,
        format,
        color,
        delivery,
        transport,
        policy,
        permissions,
        mcp: a.mcp.unwrap_or(council_mcp),
        path: None,
    };
    set_prompts(&mut def, own_prompts, a.prompt.as_deref(), top);
    Ok(def)
}

/// A codex member's `args` and `extra_flags` (`fields`) for the
/// app-server: flags of `codex exec` it has no use for are left out, each
/// said in a notice; one it refuses that means something runs the member
/// through `codex exec`, as Kingdom does, every argument kept — unless the
/// app-server was `asked` for, when it is warned of (the member cannot
/// start).
fn codex_args<const N: usize>(
    r: &mut Resolver,
    name: &str,
    asked: bool,
    transport: &mut Transport,
    fields: [(&str, &mut Vec<String>); N],
) {
    let key = |field: &str| format!("agents.{name}.{field}");
    let split: Vec<_> = fields.iter().map(|(_, given)| super::codex::for_appserver(given)).collect();
    if !asked && split.iter().any(|s| !s.refused.is_empty()) {
        *transport = Transport::Exec;
        for ((field, _), s) in fields.iter().zip(&split).filter(|(_, s)| !s.refused.is_empty()) {
            r.mapped_from.insert(key("transport"), key(field));
            let (flags, these) = if s.refused.len() == 1 { ("a flag", "it") } else { ("flags", "them") };
            r.notices.push(format!(
                "{}: codex app-server does not take {} ({flags} of codex exec or its TUI): this member runs codex \
                 exec, as Kingdom does, its answers whole instead of streamed; to stream, {}",
                key(field),
                s.refused.join(", "),
                super::codex::to_stream(&s.refused, name).replace("remove it", &format!("remove {these}"))
            ));
        }
        return;
    }
    for ((field, given), s) in fields.into_iter().zip(split) {
        for flag in &s.left_out {
            r.ignore(
                &key(field),
                &format!("{flag} is a flag of codex exec, which kd's codex app-server has no use for and refuses"),
            );
        }
        for flag in &s.refused {
            r.warnings.push(format!(
                "{}: codex app-server does not take {flag} (a flag of codex exec or its TUI): the member cannot \
                 start; {}",
                key(field),
                super::codex::instead(flag, name)
            ));
        }
        *given = s.args;
    }
}

/// Kingdom's `effort` (`field`: or `reasoning_effort`, its earlier name) as
/// the backend's own flag.
fn effort_args(
    r: &mut Resolver,
    name: &str,
    field: &str,
    backend: Backend,
    effort: &str,
) -> Result<Vec<String>, ConfigError> {
    if effort.is_empty() {
        return Ok(vec![]);
    }
    let key = format!("agents.{name}.{field}");
    let (allowed, args) = match backend {
        Backend::Claude => (CLAUDE_EFFORTS, vec!["--effort".to_string(), effort.to_string()]),
        Backend::Codex => (CODEX_EFFORTS, vec!["-c".to_string(), format!("model_reasoning_effort={effort}")]),
        other => {
            r.ignore(&key, &format!("the {} backend has no effort setting", other.as_str()));
            return Ok(vec![]);
        }
    };
    if !allowed.contains(&effort) {
        return Err(r.err(key, format!("must be one of {}, got {effort:?}", allowed.join(", "))));
    }
    Ok(args)
}

fn council(
    r: &mut Resolver,
    c: RawCouncil,
    agents: &BTreeMap<String, AgentDef>,
    env: &Env<'_>,
) -> Result<Council, ConfigError> {
    for (key, set) in [
        ("members", c.members.is_some()),
        ("timeout", c.timeout.is_some()),
        ("max_answer_bytes", c.max_answer_bytes.is_some()),
        ("auto_rounds", c.auto_rounds.is_some()),
        ("mode", c.mode.is_some()),
        ("preamble", c.preamble.is_some()),
        ("chat_preamble", c.chat_preamble.is_some()),
        ("work_preamble", c.work_preamble.is_some()),
        ("writable", c.writable.is_some()),
        ("chat.mode", c.chat.as_ref().is_some_and(|ch| ch.mode.is_some())),
        ("chat.auto_rounds", c.chat.as_ref().is_some_and(|ch| ch.auto_rounds.is_some())),
        ("resume_within", c.resume_within.is_some()),
        ("resume_attempts", c.resume_attempts.is_some()),
    ] {
        r.set(&format!("council.{key}"), set);
    }
    if c.review_members.is_some() {
        r.ignore("council.review_members", "Kingdom's review council; kd has no review phase");
    }
    if let Some(v) = &c.thinking_visibility {
        if !["auto", "show", "hide"].contains(&v.as_str()) {
            return Err(r.err("council.thinking_visibility", format!("must be auto, show or hide, got {v:?}")));
        }
        r.ignore("council.thinking_visibility", "kd does not show thinking");
    }

    let timeout_s = r.timeout("council.timeout", c.timeout)?.unwrap_or(DEFAULT_TIMEOUT_S);
    let max_answer_bytes = match c.max_answer_bytes {
        Some(n) if n == 0 || n > MAX_ANSWER_BYTES => {
            return Err(r.err("council.max_answer_bytes", format!("must be between 1 and {MAX_ANSWER_BYTES}, got {n}")));
        }
        Some(n) => n,
        None => DEFAULT_MAX_ANSWER_BYTES,
    };
    let writable = c.writable.unwrap_or(false);
    if writable {
        r.notices.push(
            "council.writable: members get the writable preambles; kd passes no permission flags \
             (add them with agents.NAME.args)"
                .into(),
        );
    }
    let preamble = non_empty(r, "council.preamble", c.preamble)?
        .unwrap_or_else(|| if writable { WRITABLE_COUNCIL_PREAMBLE } else { COUNCIL_PREAMBLE }.to_string());
    let chat_preamble = non_empty(r, "council.chat_preamble", c.chat_preamble)?
        .unwrap_or_else(|| if writable { WRITABLE_CHAT_PREAMBLE } else { CHAT_PREAMBLE }.to_string());
    let work_preamble =
        non_empty(r, "council.work_preamble", c.work_preamble)?.unwrap_or_else(|| work::WORK_PREAMBLE.to_string());

    let (members, members_detected) = match c.members {
        Some(m) if m.is_empty() => return Err(r.err("council.members", "is empty: name at least one member")),
        Some(m) => (m, false),
        None => (detect_members(env), true),
    };
    for (i, m) in members.iter().enumerate() {
        names::check_member_name(m).map_err(|e| r.err("council.members", e.to_string()))?;
        if names::is_reserved(m) {
            return Err(r.err("council.members", format!("{m:?} is reserved and cannot be a member")));
        }
        if members[..i].contains(m) {
            return Err(r.err("council.members", format!("{m:?} is listed twice")));
        }
        if !agents.contains_key(m) {
            return Err(r.err(
                "council.members",
                format!(
                    "member {m:?} has no agent: add agents.{m} with a backend (claude, codex, cursor, gemini or command)"
                ),
            ));
        }
    }

    // Kingdom 0.1's `council.auto_messages` is 0.2's `council.ask.auto_messages`.
    let (auto_messages, auto_messages_key) = match (c.auto_messages, c.ask.as_ref().and_then(|a| a.auto_messages)) {
        (Some(_), Some(_)) => {
            return Err(r.err(
                "council.auto_messages",
                "is Kingdom 0.1's place of council.ask.auto_messages: set only one of them",
            ));
        }
        (Some(n), None) => (Some(n), "council.auto_messages"),
        (None, n) => (n, "council.ask.auto_messages"),
    };
    let kingdom_mode = c.ask.as_ref().and_then(|a| a.mode.as_deref());
    let ask = ask_rounds(
        r,
        c.mode.as_deref(),
        c.auto_rounds,
        kingdom_mode,
        (auto_messages, auto_messages_key),
        members.len(),
    )?;
    let chat = chat_rounds(r, c.chat.as_ref(), ask)?;
    r.set("council.budget_usd", c.budget_usd.is_some());
    if let Some(b) = c.budget_usd.filter(|b| !(b.is_finite() && *b > 0.0)) {
        return Err(r.err("council.budget_usd", format!("must be a positive amount of US dollars, got {b}")));
    }
    let budget_usd = c.budget_usd;
    let resume_within = match &c.resume_within {
        None => super::DEFAULT_RESUME_WITHIN,
        // 0 turns resuming off.
        Some(v) if v.as_u64() == Some(0) || v.as_str().map(str::trim) == Some("0") => std::time::Duration::ZERO,
        Some(v) => super::lifecycle::duration(v).map_err(|e| r.err("council.resume_within", e))?,
    };
    let resume_attempts = match c.resume_attempts {
        None => super::DEFAULT_RESUME_ATTEMPTS,
        Some(n) if (1..=1000).contains(&n) => n as u32,
        Some(n) => return Err(r.err("council.resume_attempts", format!("must be between 1 and 1000, got {n}"))),
    };
    Ok(Council {
        members,
        members_detected,
        timeout_s,
        max_answer_bytes,
        ask,
        chat,
        preamble,
        chat_preamble,
        work_preamble,
        budget_usd,
        mcp: c.mcp.unwrap_or(true),
        resume_within,
        resume_attempts,
    })
}

fn non_empty(r: &Resolver, key: &str, value: Option<String>) -> Result<Option<String>, ConfigError> {
    match value {
        Some(p) if p.trim().is_empty() => Err(r.err(key, "must be a non-empty string")),
        other => Ok(other),
    }
}

fn rounds_in_range(r: &Resolver, key: &str, n: i64, min: i64) -> Result<u32, ConfigError> {
    if n < min {
        let what = if min > 0 { "a positive integer" } else { "0 or more" };
        return Err(r.err(key, format!("must be {what}, got {n}")));
    }
    u32::try_from(n)
        .ok()
        .filter(|n| *n <= MAX_AUTO_ROUNDS)
        .ok_or_else(|| r.err(key, format!("must be at most {MAX_AUTO_ROUNDS}, got {n}")))
}

/// `kd ask`: kd's `council.mode` / `council.auto_rounds`, else Kingdom's
/// `council.ask` (`auto_messages`: -1 auto, 0 none, N answers → enough
/// rounds of the council for N).
fn ask_rounds(
    r: &mut Resolver,
    mode: Option<&str>,
    auto_rounds: Option<i64>,
    kingdom_mode: Option<&str>,
    (auto_messages, auto_messages_key): (Option<i64>, &str),
    members: usize,
) -> Result<Rounds, ConfigError> {
    let parse_mode = |r: &Resolver, key: &str, m: &str| match m {
        "broadcast" => Ok(Mode::Broadcast),
        "sequential" => Ok(Mode::Sequential),
        other => Err(r.err(key, format!("must be \"broadcast\" or \"sequential\", got {other:?}"))),
    };
    let kingdom_mode = kingdom_mode.map(|m| parse_mode(r, "council.ask.mode", m)).transpose()?;
    let mode = match (mode, kingdom_mode) {
        (Some(m), _) => parse_mode(r, "council.mode", m)?,
        (None, Some(m)) => {
            r.mapped_from.insert("council.mode".into(), "council.ask.mode".into());
            m
        }
        (None, None) => Mode::Broadcast,
    };
    let from_messages = match auto_messages {
        Some(n) if n < -1 => {
            return Err(r.err(auto_messages_key, format!("must be -1 (auto), 0 (none) or a positive integer, got {n}")));
        }
        Some(-1) | None => None,
        Some(n) => {
            let per_round = members.max(1) as i64;
            Some(rounds_in_range(r, auto_messages_key, (n + per_round - 1) / per_round, 0)?)
        }
    };
    let auto_rounds = match (auto_rounds, from_messages) {
        (Some(n), _) => rounds_in_range(r, "council.auto_rounds", n, 1)?,
        (None, Some(n)) => {
            r.mapped_from.insert("council.auto_rounds".into(), auto_messages_key.into());
            n
        }
        (None, None) => DEFAULT_AUTO_ROUNDS,
    };
    Ok(Rounds { mode, auto_rounds })
}

/// `kd chat`: `council.chat` (Kingdom's modes mapped: natural and broadcast
/// → broadcast, round_robin → sequential, manual → no auto-rounds), else
/// what `kd ask` does.
fn chat_rounds(r: &mut Resolver, chat: Option<&super::raw::RawChat>, ask: Rounds) -> Result<Rounds, ConfigError> {
    let Some(chat) = chat else { return Ok(ask) };
    let (mode, manual) = match chat.mode.as_deref() {
        None => (ask.mode, false),
        Some("broadcast") | Some("natural") => (Mode::Broadcast, false),
        Some("sequential") | Some("round_robin") => (Mode::Sequential, false),
        Some("manual") => (Mode::Broadcast, true),
        Some(other) => {
            return Err(r.err(
                "council.chat.mode",
                format!("must be broadcast, sequential, natural, round_robin or manual, got {other:?}"),
            ));
        }
    };
    let auto_rounds = match chat.auto_rounds {
        Some(n) => rounds_in_range(r, "council.chat.auto_rounds", n, 0)?,
        None if manual => 0,
        None => ask.auto_rounds,
    };
    Ok(Rounds { mode, auto_rounds })
}

#[cfg(test)]
mod tests;
