//! claude's permission prompt tool (`--permission-prompt-tool
//! mcp__kd__approve`, relayed by `kd mcp` as `member.permission`): the
//! tool claude asks for, as an approval describes it, and the answer
//! claude takes (shared/captures/approvals, `claude-197.*`, `claude-332.*`):
//! allow *with* `updatedInput` (2.1.197 refuses a bare allow), or deny with
//! a message the model reads.

use kd_proto::approval::{ApprovalTool, PermissionAnswer, ToolKind};
use serde_json::Value;

use super::Answer;

/// The tool claude asks to use, from its name and input.
pub fn tool(name: &str, input: &Value) -> ApprovalTool {
    let text = |k: &str| input.get(k).and_then(Value::as_str).map(str::to_string);
    let kind = match name {
        "Bash" | "BashOutput" | "KillShell" | "KillBash" => ToolKind::Execute,
        "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => ToolKind::Edit,
        "Read" | "Glob" | "Grep" | "LS" | "NotebookRead" => ToolKind::Read,
        "WebFetch" | "WebSearch" => ToolKind::Fetch,
        n if n.starts_with("mcp__") => ToolKind::Mcp,
        _ => ToolKind::Other,
    };
    let paths: Vec<String> = ["file_path", "notebook_path", "path"].iter().filter_map(|k| text(k)).collect();
    let command = (kind == ToolKind::Execute).then(|| text("command")).flatten();
    let title = match (&command, paths.first(), text("url")) {
        (Some(c), _, _) => c.clone(),
        (None, Some(p), _) => format!("{name} {p}"),
        (None, None, Some(u)) => format!("{name} {u}"),
        (None, None, None) => name.to_string(),
    };
    ApprovalTool {
        kind,
        name: Some(name.to_string()),
        title,
        command,
        paths,
        input: input.clone(),
        reason: text("description"),
    }
    .bounded()
}

/// What claude is told for kd's answer: the input it asked with, to run;
/// or a denial (a cancelled run is denied too: it is ending).
pub fn answer(a: &Answer, input: Value) -> PermissionAnswer {
    match a {
        Answer::Allow { .. } => PermissionAnswer::Allow { updated_input: input },
        Answer::Deny { message } => PermissionAnswer::Deny { message: message.clone() },
        Answer::Cancelled => PermissionAnswer::Deny { message: "kd cancelled this run.".into() },
    }
}

/// What claude -p did before approvals with a tool its flags did not
/// allow: refused it.
pub fn today(tool: &ApprovalTool) -> Answer {
    Answer::Deny {
        message: format!(
            "kd did not allow {} here, and no King's client is there to ask (the approvals section of kd's \
             configuration can allow it).",
            tool.name.as_deref().unwrap_or("this tool")
        ),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn claudes_tools_as_the_captures_show_them() {
        // claude-197.allow.mcp.jsonl
        let bash = tool("Bash", &json!({"command": "touch /RUN/x-orig", "description": "Run the command asked for"}));
        assert_eq!((bash.kind, bash.title.as_str()), (ToolKind::Execute, "touch /RUN/x-orig"));
        assert_eq!(bash.command.as_deref(), Some("touch /RUN/x-orig"));
        // claude-197.write.mcp.jsonl
        let write = tool("Write", &json!({"file_path": "/RUN/outside-x-orig.txt", "content": "x"}));
        assert_eq!((write.kind, write.title.as_str()), (ToolKind::Edit, "Write /RUN/outside-x-orig.txt"));
        assert_eq!(write.paths, ["/RUN/outside-x-orig.txt"]);
        assert_eq!(tool("WebFetch", &json!({"url": "https://x"})).kind, ToolKind::Fetch);
        assert_eq!(tool("mcp__notes__append", &json!({})).kind, ToolKind::Mcp);
    }

    #[test]
    fn an_allow_carries_the_input_and_a_denial_its_message() {
        let input = json!({"command": "touch x"});
        let allow = answer(&Answer::Allow { scope: kd_proto::approval::Scope::Once }, input.clone());
        assert_eq!(serde_json::to_value(allow).unwrap(), json!({"behavior": "allow", "updatedInput": input}));
        let deny = answer(&Answer::Deny { message: "no".into() }, input);
        assert_eq!(serde_json::to_value(deny).unwrap(), json!({"behavior": "deny", "message": "no"}));
    }
}
