//! Codex app-server's approval requests, as kd asks them of the approvals
//! service (`captures/approvals/app-server-0.169.*`).
//!
//! codex asks only under `approvalPolicy` `untrusted` or `on-request`:
//! `item/commandExecution/requestApproval` (the command, its cwd, and for
//! an escalation the model's `reason`) and `item/fileChange/requestApproval`
//! (no diff: the changes are in the `fileChange` item codex started just
//! before, which [`Changes`] remembers). It takes the decisions `accept`,
//! `acceptForSession` (the same command is not asked again in the thread:
//! kd's `run` scope), `decline` (the item is declined, the turn goes on) and
//! `cancel` (the turn is interrupted); anything else fails the item. It
//! waits for the answer as long as it takes (60 s seen), so kd bounds the
//! wait: the approvals service's timeout, the run's, its stop.

use std::collections::VecDeque;

use kd_proto::approval::{ApprovalTool, Scope, ToolKind};
use serde_json::{Value, json};

use crate::approvals::Answer;

/// A command codex asks to run.
pub const COMMAND: &str = "item/commandExecution/requestApproval";
/// A patch codex asks to apply.
pub const FILE_CHANGE: &str = "item/fileChange/requestApproval";

/// What codex can honour: this call, or the rest of the thread's session
/// (`acceptForSession`; kd ends a run's thread with the run when no later
/// run resumes it, so this is the run's scope).
pub const SCOPES: [Scope; 2] = [Scope::Once, Scope::Run];

/// File changes remembered per process (the oldest is forgotten first).
const MAX_CHANGES: usize = 64;

/// The `fileChange` items codex started and has not completed, by thread
/// and item id: their changes (paths and diffs), which the approval
/// request does not carry. Bounded.
#[derive(Debug, Default)]
pub struct Changes {
    items: VecDeque<(String, String, Value)>,
}

impl Changes {
    /// Takes note of a notification: a `fileChange` item started is kept
    /// until it completes.
    pub fn observe(&mut self, method: &str, params: &Value) {
        if !matches!(method, "item/started" | "item/completed")
            || params.pointer("/item/type").and_then(Value::as_str) != Some("fileChange")
        {
            return;
        }
        let thread = params.get("threadId").and_then(Value::as_str).unwrap_or_default();
        let Some(id) = params.pointer("/item/id").and_then(Value::as_str) else { return };
        self.items.retain(|(t, i, _)| !(t == thread && i == id));
        if method == "item/started" {
            if self.items.len() >= MAX_CHANGES {
                self.items.pop_front();
            }
            let changes = params.pointer("/item/changes").cloned().unwrap_or(Value::Null);
            self.items.push_back((thread.to_string(), id.to_string(), changes));
        }
    }

    /// The changes of item `id` of `thread`, if remembered.
    pub fn get(&self, thread: &str, id: &str) -> Option<&Value> {
        self.items.iter().find(|(t, i, _)| t == thread && i == id).map(|(_, _, c)| c)
    }
}

/// What an approval request of codex asks, for the approvals service
/// (`None`: the request is no approval kd knows).
pub fn tool(method: &str, params: &Value, changes: &Changes) -> Option<ApprovalTool> {
    let text = |k: &str| params.get(k).and_then(Value::as_str).map(str::to_string);
    let reason = text("reason").filter(|r| !r.trim().is_empty());
    let tool = match method {
        COMMAND => {
            let command = text("command").unwrap_or_default();
            // What the model asked to run, without codex's `bash -lc` around it.
            let asked: Vec<&str> = params
                .get("commandActions")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(|c| c.get("command").and_then(Value::as_str)).collect())
                .unwrap_or_default();
            let title = if asked.is_empty() { command.clone() } else { asked.join(" && ") };
            let mut t = ApprovalTool::new(ToolKind::Execute, title);
            t.name = Some("commandExecution".into());
            t.command = Some(command);
            t.paths = text("cwd").into_iter().collect();
            t.input = json!({"command": params.get("command"), "cwd": params.get("cwd"),
                             "commandActions": params.get("commandActions")});
            t
        }
        FILE_CHANGE => {
            let thread = text("threadId").unwrap_or_default();
            let item = text("itemId").unwrap_or_default();
            let changes = changes.get(&thread, &item).cloned().unwrap_or(Value::Null);
            let paths: Vec<String> = changes
                .as_array()
                .map(|c| c.iter().filter_map(|c| c.get("path").and_then(Value::as_str).map(str::to_string)).collect())
                .unwrap_or_default();
            let title = match paths.as_slice() {
                [] => "Change files".to_string(),
                [one] => format!("Edit {one}"),
                [first, rest @ ..] => format!("Edit {first} and {} more", rest.len()),
            };
            let mut t = ApprovalTool::new(ToolKind::Edit, title);
            t.name = Some("fileChange".into());
            t.paths = paths;
            if let Some(root) = text("grantRoot") {
                t.paths.push(root);
            }
            t.input = json!({"changes": changes, "grantRoot": params.get("grantRoot")});
            t
        }
        _ => return None,
    };
    Some(ApprovalTool { reason, ..tool }.bounded())
}

/// What kd answered codex before approvals: declined (the item is not
/// run, the turn goes on).
pub fn today() -> Answer {
    Answer::Deny { message: "kd declines what codex asks unless its approvals policy or the King allows it".into() }
}

/// The decision codex is sent for `answer`.
pub fn decision(answer: &Answer) -> &'static str {
    match answer {
        Answer::Allow { scope: Scope::Once } => "accept",
        Answer::Allow { .. } => "acceptForSession",
        Answer::Deny { .. } => "decline",
        Answer::Cancelled => "cancel",
    }
}

/// The reply to approval request `id` for `answer`.
pub fn reply(id: &Value, answer: &Answer) -> Value {
    json!({"id": id, "result": {"decision": decision(answer)}})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages codex sent in a capture of `captures/approvals` (kept
    /// byte for byte in `tests/fixtures/approvals`).
    fn sent(name: &str) -> Vec<Value> {
        let path = format!("{}/../tests/fixtures/approvals/{name}.jsonl", env!("CARGO_MANIFEST_DIR"));
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|v| v["dir"] == "<" && v["msg"].is_object())
            .map(|v| v["msg"].clone())
            .collect()
    }

    /// Every approval request of a capture as kd reads it, with the file
    /// changes started before it.
    fn asked(name: &str) -> Vec<ApprovalTool> {
        let mut changes = Changes::default();
        let mut tools = Vec::new();
        for msg in sent(name) {
            let method = msg["method"].as_str().unwrap_or_default();
            match msg.get("id") {
                Some(_) => tools.extend(tool(method, &msg["params"], &changes)),
                None => changes.observe(method, &msg["params"]),
            }
        }
        tools
    }

    #[test]
    fn a_command_and_a_patch_are_asked_with_what_they_do() {
        let tools = asked("app-server-0.169.untrusted-accept");
        assert_eq!(tools.len(), 2, "{tools:?}");
        let (cmd, patch) = (&tools[0], &tools[1]);
        assert_eq!(cmd.kind, ToolKind::Execute);
        assert_eq!(cmd.title, "touch x-cmd");
        assert_eq!(cmd.command.as_deref(), Some("/bin/bash -lc 'touch x-cmd'"));
        assert_eq!(cmd.name.as_deref(), Some("commandExecution"));
        assert_eq!(cmd.paths, ["/WORKSPACE"]);
        assert_eq!(cmd.reason, None);
        assert_eq!(patch.kind, ToolKind::Edit);
        assert_eq!(patch.title, "Edit /WORKSPACE/x-patch.txt");
        assert_eq!(patch.paths, ["/WORKSPACE/x-patch.txt"]);
        assert_eq!(patch.input["changes"][0]["diff"], "written by the stub\n", "the diff of the started item");
    }

    #[test]
    fn an_escalation_carries_the_models_reason_and_a_patch_outside_its_path() {
        let tools = asked("app-server-0.169.onrequest-workspace");
        assert_eq!(tools.len(), 2, "only the escalation and the patch outside are asked: {tools:?}");
        assert_eq!(tools[0].title, "touch /var/tmp/x-outside-esc");
        assert_eq!(tools[0].reason.as_deref(), Some("The test asks to run this outside the sandbox."));
        assert_eq!(tools[1].paths, ["/var/tmp/x-outside-patch.txt"]);
        let ro = asked("app-server-0.169.onrequest-readonly");
        assert_eq!(ro.iter().map(|t| t.kind).collect::<Vec<_>>(), [ToolKind::Execute, ToolKind::Edit]);
    }

    #[test]
    fn a_patch_whose_item_was_not_seen_is_still_asked() {
        let t = tool(FILE_CHANGE, &json!({"threadId": "t", "itemId": "i", "reason": null}), &Changes::default());
        let t = t.unwrap();
        assert_eq!((t.kind, t.title.as_str()), (ToolKind::Edit, "Change files"));
        assert_eq!(tool("item/tool/requestUserInput", &json!({}), &Changes::default()), None);
    }

    #[test]
    fn a_completed_change_is_forgotten_and_what_is_kept_is_bounded() {
        let mut c = Changes::default();
        let item = |id: &str| json!({"threadId": "t", "item": {"type": "fileChange", "id": id, "changes": []}});
        for i in 0..(MAX_CHANGES + 5) {
            c.observe("item/started", &item(&format!("i{i}")));
        }
        assert_eq!(c.items.len(), MAX_CHANGES);
        assert!(c.get("t", "i0").is_none() && c.get("t", "i5").is_some());
        c.observe("item/completed", &item("i5"));
        assert!(c.get("t", "i5").is_none());
        assert!(c.get("other", "i6").is_none(), "another thread's item is another item");
    }

    /// The decisions codex 0.169 took (`untrusted-accept`, `-session`,
    /// `-decline`, `-cancel`).
    #[test]
    fn each_answer_is_a_decision_codex_takes() {
        let id = json!(3);
        assert_eq!(
            reply(&id, &Answer::Allow { scope: Scope::Once }),
            json!({"id": 3, "result": {"decision": "accept"}})
        );
        assert_eq!(decision(&Answer::Allow { scope: Scope::Run }), "acceptForSession");
        assert_eq!(decision(&Answer::Allow { scope: Scope::Thread }), "acceptForSession");
        assert_eq!(decision(&Answer::Deny { message: "no".into() }), "decline");
        assert_eq!(decision(&Answer::Cancelled), "cancel");
        assert_eq!(decision(&today()), "decline", "what kd answered before approvals");
    }
}
