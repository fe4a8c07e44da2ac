//! kd's answer when an ACP agent asks permission for a tool call, by the
//! member's `agents.NAME.permissions`.
//!
//! The request need not say what the tool does: claude-code-acp's
//! `session/request_permission` carries only the call's id, title and input,
//! its `kind` (read, edit, execute, fetch…) having been announced in the
//! `tool_call` update with the same `toolCallId` just before. So each
//! agent's [`ToolCalls`] remembers, from the session updates, what each
//! call in flight announced (kind, title, locations), and the decision is
//! taken on that, updated by whatever the request itself says. A refusal
//! is said to the run ([`REFUSED`]) so that its message names the tool and
//! the policy instead of the agent's own error.

use std::collections::VecDeque;
use std::path::{Component, Path, PathBuf};

use agent_client_protocol_schema::v1::{
    PermissionOption, PermissionOptionKind, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionNotification, SessionUpdate, ToolCallStatus,
    ToolCallUpdateFields, ToolKind,
};
use serde_json::{Value, json};

use crate::agent::mcp;
use crate::config::Permissions;

/// Tool calls remembered per agent process (the oldest is forgotten first).
const MAX_CALLS: usize = 256;
/// Characters kept of a title or a path.
const MAX_TEXT: usize = 300;
/// Locations kept per tool call.
const MAX_LOCATIONS: usize = 4;

/// The method of the note a run gets when the policy refused one of its
/// tool calls; its params are `{"reason": "refused by policy …: TITLE"}`.
pub const REFUSED: &str = "kd/refused";

/// What a tool call announced of itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tool {
    pub kind: Option<ToolKind>,
    pub title: Option<String>,
    /// The paths it touches.
    pub locations: Vec<String>,
    /// The paths its input names (`file_path`, `path`, …).
    pub inputs: Vec<String>,
    /// The agent's own name of the tool (claude-code-acp's
    /// `_meta.claudeCode.toolName`: `Bash`, `Write`).
    pub name: Option<String>,
    /// Its input, as the agent last gave it (non-empty).
    pub input: Option<Value>,
}

/// The keys of a tool call's input that name a path it writes.
const PATH_KEYS: &[&str] = &[
    "file_path",
    "path",
    "notebook_path",
    "abs_path",
    "absolute_path",
    "old_path",
    "new_path",
    "destination",
    "target",
];

fn bounded(s: &str) -> String {
    s.chars().take(MAX_TEXT).collect()
}

impl Tool {
    /// Takes what `fields` set.
    pub(super) fn update(&mut self, fields: &ToolCallUpdateFields) {
        if let Some(kind) = fields.kind {
            self.kind = Some(kind);
        }
        if let Some(title) = fields.title.as_deref().filter(|t| !t.trim().is_empty()) {
            self.title = Some(bounded(title));
        }
        if let Some(locations) = &fields.locations {
            self.locations =
                locations.iter().take(MAX_LOCATIONS).map(|l| bounded(&l.path.display().to_string())).collect();
        }
        if let Some(raw) = fields.raw_input.as_ref().filter(|r| r.as_object().is_none_or(|o| !o.is_empty())) {
            self.input = Some(raw.clone());
        }
        if let Some(input) = fields.raw_input.as_ref().and_then(Value::as_object) {
            let paths: Vec<String> = PATH_KEYS
                .iter()
                .filter_map(|k| input.get(*k).and_then(Value::as_str))
                .take(MAX_LOCATIONS)
                .map(str::to_string)
                .collect();
            if !paths.is_empty() {
                self.inputs = paths;
            }
        }
    }

    /// How the tool is named to the user: its title, else what it touches.
    pub fn named(&self) -> String {
        match (&self.title, self.locations.first()) {
            (Some(t), _) => t.clone(),
            (None, Some(path)) => path.clone(),
            (None, None) => "a tool call".to_string(),
        }
    }
}

/// The tool calls in flight of one agent process, by session and
/// `toolCallId`, as its `session/update`s announced them; bounded.
#[derive(Debug, Default)]
pub struct ToolCalls {
    calls: VecDeque<(String, String, Tool)>,
}

impl ToolCalls {
    /// Takes what a `session/update` says of a tool call; a call that
    /// completed or failed is forgotten.
    pub fn observe(&mut self, params: &Value) {
        // Most updates are text: only a tool call's are read (and cloned).
        let kind = params.pointer("/update/sessionUpdate").and_then(Value::as_str);
        if !matches!(kind, Some("tool_call" | "tool_call_update")) {
            return;
        }
        let Ok(n) = serde_json::from_value::<SessionNotification>(params.clone()) else { return };
        let session = n.session_id.0.to_string();
        let name = params.pointer("/update/_meta/claudeCode/toolName").and_then(Value::as_str);
        match n.update {
            SessionUpdate::ToolCall(call) => {
                let fields = ToolCallUpdateFields::new()
                    .kind(call.kind)
                    .title(call.title)
                    .locations(call.locations)
                    .status(call.status)
                    .raw_input(call.raw_input);
                self.update(&session, &call.tool_call_id.0, &fields, name);
            }
            SessionUpdate::ToolCallUpdate(update) => {
                self.update(&session, &update.tool_call_id.0, &update.fields, name)
            }
            _ => {}
        }
    }

    fn update(&mut self, session: &str, id: &str, fields: &ToolCallUpdateFields, name: Option<&str>) {
        let at = self.calls.iter().position(|(s, i, _)| s == session && i == id);
        if matches!(fields.status, Some(ToolCallStatus::Completed | ToolCallStatus::Failed)) {
            if let Some(at) = at {
                self.calls.remove(at);
            }
            return;
        }
        match at {
            Some(at) => {
                if let Some((_, _, tool)) = self.calls.get_mut(at) {
                    tool.update(fields);
                    if let Some(name) = name {
                        tool.name = Some(bounded(name));
                    }
                }
            }
            None => {
                let mut tool = Tool::default();
                tool.update(fields);
                tool.name = name.map(bounded);
                if self.calls.len() >= MAX_CALLS {
                    self.calls.pop_front();
                }
                self.calls.push_back((session.to_string(), bounded(id), tool));
            }
        }
    }

    /// What call `id` of `session` announced, if it is remembered.
    pub fn get(&self, session: &str, id: &str) -> Option<&Tool> {
        self.calls.iter().find(|(s, i, _)| s == session && i == id).map(|(_, _, t)| t)
    }
}

/// The kinds of tool call a read-only member may make.
pub(super) fn reads(kind: Option<ToolKind>) -> bool {
    matches!(kind, Some(ToolKind::Read | ToolKind::Search | ToolKind::Think | ToolKind::Fetch))
}

fn policy_name(policy: Permissions) -> &'static str {
    match policy {
        Permissions::ReadOnly => "read-only",
        Permissions::Allow => "allow",
        Permissions::Deny => "deny",
    }
}

/// Whether a tool call is one of kd's own MCP server's: codex-acp asks
/// "Approve MCP tool call" with `rawInput.server_name: "kd"`;
/// claude-code-acp names the tool `mcp__kd__send` (title).
pub(super) fn is_kds(tool: &Tool, raw_input: Option<&Value>) -> bool {
    let server = raw_input.and_then(|r| r.get("server_name").or_else(|| r.get("server"))).and_then(Value::as_str);
    server == Some(mcp::NAME) || tool.title.as_deref().is_some_and(|t| t.starts_with(mcp::CLAUDE_TOOL_PREFIX))
}

/// kd's answer to a permission request, and why it refused, if it did.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The result to send back.
    pub answer: Value,
    /// `refused by policy POLICY: TITLE` when the tool was refused.
    pub refused: Option<String>,
}

/// The answer to `session/request_permission` under `policy`, on what the
/// tool call announced (`calls`) and what the request adds: an option of
/// the right kind, or `cancelled` when the agent offered none. A call of
/// kd's own MCP server is allowed whatever the policy when kd gave the
/// session its server (`kd_tools`): it acts only as the member, on its thread.
pub fn decide(params: &Value, policy: Permissions, kd_tools: bool, calls: &ToolCalls) -> Decision {
    decide_in(params, policy, kd_tools, calls, None)
}

/// [`decide`], for a session in a member's worktree `confine` when given
/// (F-W1): allowed as `allow` would, except a call that writes (any kind
/// but read, search, think and fetch) where a path it names — its
/// locations, its input's paths — is outside the worktree, or an edit
/// naming no path; whatever the member's policy.
pub fn decide_in(
    params: &Value,
    policy: Permissions,
    kd_tools: bool,
    calls: &ToolCalls,
    confine: Option<&Path>,
) -> Decision {
    let Ok(req) = serde_json::from_value::<RequestPermissionRequest>(params.clone()) else {
        return Decision {
            answer: json!({"outcome": {"outcome": "cancelled"}}),
            refused: Some(format!("refused by policy {}: a request kd could not read", policy_name(policy))),
        };
    };
    let mut tool = calls.get(&req.session_id.0, &req.tool_call.tool_call_id.0).cloned().unwrap_or_default();
    tool.update(&req.tool_call.fields);
    let kds = kd_tools && is_kds(&tool, req.tool_call.fields.raw_input.as_ref());
    if let Some(root) = confine.filter(|_| !kds) {
        let outside = escapes(&tool, root);
        return answer(&req, outside.is_none(), || match outside {
            Some(path) => format!("refused outside its worktree {}: {} ({path})", root.display(), tool.named()),
            None => String::new(),
        });
    }
    let allow = match policy {
        _ if kds => true,
        Permissions::Allow => true,
        Permissions::Deny => false,
        Permissions::ReadOnly => reads(tool.kind),
    };
    answer(&req, allow, || format!("refused by policy {}: {}", policy_name(policy), tool.named()))
}

/// The answer allowing or refusing the call, and why it refused.
fn answer(req: &RequestPermissionRequest, allow: bool, why: impl FnOnce() -> String) -> Decision {
    let wanted: &[PermissionOptionKind] = if allow {
        &[PermissionOptionKind::AllowOnce, PermissionOptionKind::AllowAlways]
    } else {
        &[PermissionOptionKind::RejectOnce, PermissionOptionKind::RejectAlways]
    };
    let chosen: Option<&PermissionOption> = wanted.iter().find_map(|k| req.options.iter().find(|o| o.kind == *k));
    let outcome = match chosen {
        Some(o) => RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(o.option_id.clone())),
        None => RequestPermissionOutcome::Cancelled,
    };
    let answer = serde_json::to_value(RequestPermissionResponse::new(outcome)).unwrap_or(Value::Null);
    let refused = (!allow).then(why);
    Decision { answer, refused }
}

/// The path a writing call names outside `root` (`(no path)` for an edit
/// naming none), if any.
fn escapes(tool: &Tool, root: &Path) -> Option<String> {
    if reads(tool.kind) {
        return None;
    }
    let paths: Vec<&String> = tool.locations.iter().chain(&tool.inputs).collect();
    if paths.is_empty() {
        let edits = matches!(tool.kind, Some(ToolKind::Edit | ToolKind::Delete | ToolKind::Move));
        return edits.then(|| "(no path)".to_string());
    }
    paths.into_iter().find(|p| !inside(root, Path::new(p.as_str()))).cloned()
}

/// Whether `path` (relative to `root`) is inside `root`: lexically, `..`
/// resolved, and by what exists of it on disk (a symlink on its way that
/// leads out is out).
pub fn inside(root: &Path, path: &Path) -> bool {
    let joined = root.join(path);
    let mut normal = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                normal.pop();
            }
            Component::CurDir => {}
            c => normal.push(c),
        }
    }
    if !normal.starts_with(root) {
        return false;
    }
    let Ok(real_root) = root.canonicalize() else { return false };
    // The deepest part of it that exists, as the kernel resolves it.
    let mut at = normal.as_path();
    loop {
        if std::fs::symlink_metadata(at).is_ok() {
            return at.canonicalize().is_ok_and(|real| real.starts_with(&real_root));
        }
        match at.parent() {
            Some(p) => at = p,
            None => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(call: Value) -> Value {
        json!({"sessionId": "s1", "toolCall": call,
               "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                           {"optionId": "no", "name": "Reject", "kind": "reject_once"}]})
    }

    fn selected(d: &Decision) -> Option<&str> {
        d.answer.pointer("/outcome/optionId").and_then(Value::as_str)
    }

    fn update(session: &str, update: Value) -> Value {
        json!({"sessionId": session, "update": update})
    }

    #[test]
    fn a_kind_in_the_request_itself_decides() {
        let calls = ToolCalls::default();
        let ask = |kind: &str, policy| {
            decide(&request(json!({"toolCallId": "c1", "title": "T", "kind": kind})), policy, false, &calls)
        };
        assert_eq!(selected(&ask("edit", Permissions::ReadOnly)), Some("no"));
        assert_eq!(selected(&ask("execute", Permissions::ReadOnly)), Some("no"));
        assert_eq!(selected(&ask("read", Permissions::ReadOnly)), Some("yes"));
        assert_eq!(selected(&ask("edit", Permissions::Allow)), Some("yes"));
        assert_eq!(selected(&ask("read", Permissions::Deny)), Some("no"));
        let none = json!({"sessionId": "s1", "toolCall": {"toolCallId": "c1", "kind": "edit"}, "options": []});
        assert_eq!(
            decide(&none, Permissions::ReadOnly, false, &calls).answer,
            json!({"outcome": {"outcome": "cancelled"}})
        );
    }

    /// claude-code-acp 0.16.2 (captures, mcp/claude-code-acp.unallowed.jsonl):
    /// the kind is in the `tool_call` update, the request has only id,
    /// title and input.
    #[test]
    fn the_kind_the_tool_call_announced_decides_a_request_without_one() {
        let mut calls = ToolCalls::default();
        let announce = |id: &str, kind: &str, title: &str| {
            update(
                "s1",
                json!({"toolCallId": id, "sessionUpdate": "tool_call", "rawInput": {}, "status": "pending",
                                "title": title, "kind": kind, "content": [], "locations": [{"path": "/w/a.rs"}]}),
            )
        };
        calls.observe(&announce("toolu_1", "read", "Read /w/a.rs"));
        calls.observe(&announce("toolu_2", "edit", "Write /w/a.rs"));
        let ask = |id: &str, title: &str| request(json!({"toolCallId": id, "rawInput": {}, "title": title}));
        let read = decide(&ask("toolu_1", "Read /w/a.rs"), Permissions::ReadOnly, false, &calls);
        assert_eq!((selected(&read), read.refused.as_deref()), (Some("yes"), None));
        let write = decide(&ask("toolu_2", "Write /w/a.rs"), Permissions::ReadOnly, false, &calls);
        assert_eq!(selected(&write), Some("no"));
        assert_eq!(write.refused.as_deref(), Some("refused by policy read-only: Write /w/a.rs"));
        // The same id in another session is another call.
        let elsewhere = json!({"sessionId": "s2", "toolCall": {"toolCallId": "toolu_1", "title": "Read /w/a.rs"},
                               "options": [{"optionId": "no", "name": "Reject", "kind": "reject_once"}]});
        assert_eq!(selected(&decide(&elsewhere, Permissions::ReadOnly, false, &calls)), Some("no"));
        // An unknown call is no read.
        let unknown = decide(&ask("toolu_9", "mcp__kd__send"), Permissions::ReadOnly, false, &calls);
        assert_eq!(unknown.refused.as_deref(), Some("refused by policy read-only: mcp__kd__send"));
    }

    /// `mcp/codex-acp.unannotated.jsonl` and
    /// `claude-code-acp.unallowed.jsonl`: kd's tools are allowed whatever
    /// the policy, when kd gave the session its server; nothing else is.
    #[test]
    fn kds_own_tools_are_allowed_whatever_the_policy() {
        // The captures, kept byte for byte in tests/fixtures/mcp.
        let capture = |name: &str| -> Value {
            let path = format!("{}/../tests/fixtures/mcp/{name}.jsonl", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).unwrap();
            text.lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap()["msg"].clone())
                .find(|m| m["method"] == "session/request_permission")
                .map(|m| m["params"].clone())
                .unwrap()
        };
        let calls = ToolCalls::default();
        for (name, allow) in [("codex-acp.unannotated", "approved"), ("claude-code-acp.unallowed", "allow")] {
            let params = capture(name);
            for policy in [Permissions::ReadOnly, Permissions::Deny] {
                let d = decide(&params, policy, true, &calls);
                assert_eq!((selected(&d), d.refused.as_deref()), (Some(allow), None), "{name} {policy:?}");
                let without = decide(&params, policy, false, &calls);
                assert!(without.refused.is_some(), "{name}: not kd's server when kd gave none");
            }
        }
        let theirs = request(json!({"toolCallId": "c", "title": "mcp__kdx__send", "rawInput": {"server_name": "kdx"}}));
        assert_eq!(selected(&decide(&theirs, Permissions::Deny, true, &calls)), Some("no"));
    }

    #[test]
    fn updates_change_what_is_known_and_an_ended_call_is_forgotten() {
        let mut calls = ToolCalls::default();
        calls.observe(&update(
            "s1",
            json!({"toolCallId": "c", "sessionUpdate": "tool_call", "title": "Read", "kind": "read"}),
        ));
        calls.observe(&update(
            "s1",
            json!({"toolCallId": "c", "sessionUpdate": "tool_call_update", "kind": "edit",
                                           "locations": [{"path": "/w/b.rs"}]}),
        ));
        let known = calls.get("s1", "c").cloned().unwrap_or_default();
        assert_eq!(known.kind, Some(ToolKind::Edit));
        assert_eq!(known.title.as_deref(), Some("Read"));
        assert_eq!(known.locations, ["/w/b.rs"]);
        calls.observe(&update(
            "s1",
            json!({"toolCallId": "c", "sessionUpdate": "tool_call_update", "status": "completed"}),
        ));
        assert_eq!(calls.get("s1", "c"), None);
    }

    #[test]
    fn a_refusal_without_a_title_names_what_the_tool_touches() {
        let mut calls = ToolCalls::default();
        calls.observe(&update(
            "s1",
            json!({"toolCallId": "c", "sessionUpdate": "tool_call_update", "kind": "delete",
                                           "locations": [{"path": "/w/old.rs"}]}),
        ));
        let d = decide(&request(json!({"toolCallId": "c"})), Permissions::ReadOnly, false, &calls);
        assert_eq!(d.refused.as_deref(), Some("refused by policy read-only: /w/old.rs"));
    }

    #[test]
    fn in_a_worktree_writes_are_allowed_inside_it_only_whatever_the_policy() {
        let base = std::env::temp_dir().join(format!("kd-confine-{}", std::process::id()));
        let (root, out) = (base.join("wt"), base.join("out"));
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(&out).unwrap();
        std::os::unix::fs::symlink(&out, root.join("link")).unwrap();
        let calls = ToolCalls::default();
        let ask = |kind: &str, input: Value, locations: Value| {
            let call =
                json!({"toolCallId": "c1", "title": "T", "kind": kind, "rawInput": input, "locations": locations});
            decide_in(&request(call), Permissions::ReadOnly, false, &calls, Some(&root))
        };
        let at = |p: &Path| json!({"file_path": p.display().to_string()});
        assert_eq!(selected(&ask("edit", at(&root.join("src/a.rs")), json!([]))), Some("yes"));
        assert_eq!(selected(&ask("edit", json!({"file_path": "src/new.rs"}), json!([]))), Some("yes"));
        assert_eq!(selected(&ask("execute", json!({"command": "cargo test"}), json!([]))), Some("yes"));
        assert_eq!(selected(&ask("read", at(&out.join("x")), json!([]))), Some("yes"), "reading is not writing");
        for (input, locations) in [
            (json!({"file_path": "../x"}), json!([])),
            (at(&root.join("src/../../x")), json!([])),
            (at(&out.join("x")), json!([])),
            (at(&root.join("link/x")), json!([])),
            (json!({}), json!([{"path": root.join("a.rs")}, {"path": out.join("b.rs")}])),
            (json!({}), json!([])),
        ] {
            let d = ask("edit", input.clone(), locations.clone());
            assert_eq!(selected(&d), Some("no"), "{input} {locations}");
            assert!(d.refused.as_deref().is_some_and(|r| r.contains("outside its worktree")), "{:?}", d.refused);
        }
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn what_is_remembered_is_bounded() {
        let mut calls = ToolCalls::default();
        let long = "x".repeat(10_000);
        for i in 0..(MAX_CALLS + 10) {
            calls.observe(&update(
                "s1",
                json!({"toolCallId": format!("c{i}"), "sessionUpdate": "tool_call",
                                               "title": long, "kind": "read"}),
            ));
        }
        assert_eq!(calls.calls.len(), MAX_CALLS);
        assert_eq!(calls.get("s1", "c0"), None, "the oldest is forgotten");
        let last = calls.get("s1", &format!("c{}", MAX_CALLS + 9)).cloned().unwrap_or_default();
        assert_eq!(last.title.map(|t| t.chars().count()), Some(MAX_TEXT));
    }
}
