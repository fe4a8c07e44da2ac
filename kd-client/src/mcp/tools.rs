//! kd's MCP tools as the agent CLIs see them — names, descriptions, JSON
//! schemas, annotations, all static — and the arguments a `tools/call`
//! brings, read into a [`Call`] of the member surface.
//!
//! Each tool carries `_meta` `anthropic/alwaysLoad: true`, so that Claude
//! Code lists it to the model at once instead of behind `ToolSearch`
//! ([`ALWAYS_LOAD`]).
//!
//! Annotations decide whether a CLI runs a tool without asking: codex (exec,
//! app-server, codex-acp) runs a tool marked `readOnlyHint: true`, or
//! `readOnlyHint: false, destructiveHint: false, openWorldHint: false`,
//! under approval `never`; unannotated, the call fails or asks
//! (shared/captures/mcp). `inbox` is not read-only: it can mark entries read.

use std::borrow::Cow;
use std::sync::Arc;

use kd_proto::member::ClaimMode;
use kd_proto::types::RouteType;
use rmcp::model::{JsonObject, MetaObject, Tool, ToolAnnotations};
use serde::Deserialize;
use serde_json::{Value, json};

/// The permission prompt tool claude is pointed at (`mcp__kd__approve`),
/// listed only by a server started for it (`KD_PERMISSION_TOOL=1`).
pub const APPROVE: &str = "approve";

/// The tools' names, in the order `tools/list` gives them.
pub const NAMES: [&str; 6] = ["send", "inbox", "ack", "claim", "thread", "search"];

/// The most entries `inbox` and hits `search` return, and messages `thread`
/// shows: a larger number asked for is lowered to it.
pub const MAX_ITEMS: u32 = 100;
/// What `inbox`, `thread` and `search` return when no number is given.
const DEFAULT_INBOX: u32 = 10;
const DEFAULT_LAST: u32 = 20;
const DEFAULT_HITS: u32 = 10;

/// What the server says it is for, in `initialize`. Codex with newer models
/// lists no MCP tool up front: the model finds them with `tool_search`, a
/// BM25 search over this text and the tools' own, so it names every tool
/// and the words a model would search for.
pub const INSTRUCTIONS: &str = "kd's tools let you, a member of a kd council of coding agents, work with the other \
council members as yourself on this thread: send messages to other members (send), read your inbox of messages \
sent or copied to you (inbox), acknowledge emergency broadcasts (ack), claim a shared resource such as a file \
before writing it (claim), read the thread's recent messages (thread) and search kd's threads (search).";

/// The `_meta` key by which a tool is loaded at once: Claude Code (from
/// 2.1.332, and claude-code-acp running it) otherwise defers MCP tools
/// behind `ToolSearch`, so the model must search for `send` before it can
/// use it (shared/captures/approvals: `claude-332.deferral-*`). On the
/// tools rather than in the server's configuration entry, so it holds
/// however a CLI was given the server (claude's `--mcp-config`, an ACP
/// session's `mcpServers`); other clients ignore it.
pub const ALWAYS_LOAD: &str = "anthropic/alwaysLoad";

/// Every tool, as `tools/list` answers.
pub fn all() -> Vec<Tool> {
    NAMES.iter().filter_map(|n| tool(n)).collect()
}

/// The tool named `name`.
pub fn tool(name: &str) -> Option<Tool> {
    let member = || json!({"type": "string"});
    let names = |what: &str| json!({"type": "array", "items": member(), "description": what});
    let route_types = ["point_to_point", "multicast", "broadcast", "reply", "emergency"];
    let (description, properties, required, read_only): (&str, Value, &[&str], bool) = match name {
        "send" => (
            "Send a message to other members of this kd council, as yourself, on this thread. An addressee \
             answers it now, or finds it in its inbox, as its delivery mode says.",
            json!({
                "to": names("the members to send to (their names), or [\"all\"] for every other member"),
                "cc": names("members copied: they see the message in their next prompt, without being asked to answer"),
                "body": {"type": "string", "description": "the message"},
                "type": {
                    "type": "string",
                    "enum": &route_types[..4],
                    "description": "the kind of conversation, if not the one kd derives from the addressees \
                                    (one: point_to_point; several: multicast; all: broadcast)"
                }
            }),
            &["to", "body"],
            false,
        ),
        "inbox" => (
            "Read your kd inbox on this thread: the messages other council members sent or copied to you, \
             oldest first.",
            json!({
                "unread": {"type": "boolean", "description": "only messages not read yet (default true)"},
                "type": {
                    "type": "array",
                    "items": {"type": "string", "enum": route_types},
                    "description": "only messages of these types (a single type may be given as a string)"
                },
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_ITEMS, "description": "at most this many (default 10)"},
                "mark_read": {"type": "boolean", "description": "mark the messages returned as read (default false)"}
            }),
            &[],
            false,
        ),
        "ack" => (
            "Acknowledge the emergency broadcasts you owe on this thread: all of them, or the one named.",
            json!({
                "broadcast": {"type": "string", "description": "only this broadcast (its id, e-…)"}
            }),
            &[],
            false,
        ),
        "claim" => (
            "Claim a shared resource (a file path, a branch, any name) before writing it, so that two council \
             members do not write it at once: refused while another member writes it. A read claim warns when \
             another member is writing it.",
            json!({
                "resource": {"type": "string", "description": "what you are about to write or read, e.g. src/lib.rs"},
                "mode": {"type": "string", "enum": ["write", "read"], "description": "write (default) or read"}
            }),
            &["resource"],
            false,
        ),
        "thread" => (
            "Read this kd thread's recent messages, as the council's history shows them.",
            json!({
                "last": {"type": "integer", "minimum": 1, "maximum": MAX_ITEMS, "description": "how many of the latest messages (default 20)"}
            }),
            &[],
            true,
        ),
        "search" => (
            "Search kd's threads in this workspace: the messages, titles and summaries (full-text; words, \
             \"a phrase\", prefix*).",
            json!({
                "query": {"type": "string", "description": "what to look for"},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_ITEMS, "description": "at most this many hits (default 10)"}
            }),
            &["query"],
            true,
        ),
        APPROVE => (
            "kd's permission prompt for claude (--permission-prompt-tool mcp__kd__approve): whether a tool may run, \
             decided by the workspace's approvals policy or the King. Not for the model.",
            json!({
                "tool_name": {"type": "string", "description": "the tool claude asks to use"},
                "input": {"type": "object", "description": "its input"},
                "tool_use_id": {"type": "string", "description": "claude's id of the call"}
            }),
            &["tool_name", "input"],
            false,
        ),
        _ => return None,
    };
    let mut schema = JsonObject::new();
    schema.insert("type".into(), json!("object"));
    schema.insert("properties".into(), properties);
    if !required.is_empty() {
        schema.insert("required".into(), json!(required));
    }
    if name != APPROVE {
        schema.insert("additionalProperties".into(), json!(false));
    }
    let annotations = if read_only {
        ToolAnnotations::new().read_only(true).open_world(false)
    } else {
        ToolAnnotations::new().read_only(false).destructive(false).open_world(false)
    };
    let name = NAMES.iter().chain([APPROVE].iter()).find(|n| **n == name)?;
    let mut meta = JsonObject::new();
    meta.insert(ALWAYS_LOAD.into(), json!(true));
    Some(
        Tool::new(Cow::Borrowed(*name), description, Arc::new(schema))
            .with_annotations(annotations)
            .with_meta(MetaObject(meta)),
    )
}

/// A tool call, its arguments read.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    Send {
        to: Vec<String>,
        cc: Option<Vec<String>>,
        body: String,
        route: Option<RouteType>,
    },
    Inbox {
        unread: bool,
        types: Option<Vec<RouteType>>,
        limit: u32,
        mark_read: bool,
    },
    Ack {
        broadcast: Option<String>,
    },
    Claim {
        resource: String,
        mode: Option<ClaimMode>,
    },
    Thread {
        last: u32,
    },
    Search {
        query: String,
        limit: u32,
    },
    /// claude's permission prompt: answered with the JSON claude takes.
    Approve {
        tool_name: String,
        input: Value,
        tool_use_id: Option<String>,
    },
}

#[derive(Deserialize)]
struct ApproveArgs {
    tool_name: String,
    input: Value,
    tool_use_id: Option<String>,
}

/// One name or several: a model sometimes writes `"codex"` for `["codex"]`.
#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany<T> {
    One(T),
    Many(Vec<T>),
}

impl<T> OneOrMany<T> {
    fn into_vec(self) -> Vec<T> {
        match self {
            OneOrMany::One(x) => vec![x],
            OneOrMany::Many(v) => v,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendArgs {
    to: OneOrMany<String>,
    cc: Option<OneOrMany<String>>,
    body: String,
    #[serde(rename = "type")]
    route: Option<RouteType>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InboxArgs {
    unread: Option<bool>,
    #[serde(rename = "type")]
    types: Option<OneOrMany<RouteType>>,
    limit: Option<u32>,
    mark_read: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AckArgs {
    broadcast: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClaimArgs {
    resource: String,
    mode: Option<ClaimMode>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ThreadArgs {
    last: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    query: String,
    limit: Option<u32>,
}

/// The call of tool `name` with `arguments` (none is `{}`), or why it
/// cannot be made, worded for the model.
pub fn parse(name: &str, arguments: Option<JsonObject>) -> Result<Call, String> {
    let args = Value::Object(arguments.unwrap_or_default());
    let bad = |e: serde_json::Error| format!("bad arguments for {name}: {e}");
    let count = |n: Option<u32>, default: u32| n.unwrap_or(default).clamp(1, MAX_ITEMS);
    Ok(match name {
        "send" => {
            let a: SendArgs = serde_json::from_value(args).map_err(bad)?;
            Call::Send { to: a.to.into_vec(), cc: a.cc.map(OneOrMany::into_vec), body: a.body, route: a.route }
        }
        "inbox" => {
            let a: InboxArgs = serde_json::from_value(args).map_err(bad)?;
            Call::Inbox {
                unread: a.unread.unwrap_or(true),
                types: a.types.map(OneOrMany::into_vec),
                limit: count(a.limit, DEFAULT_INBOX),
                mark_read: a.mark_read.unwrap_or(false),
            }
        }
        "ack" => Call::Ack { broadcast: serde_json::from_value::<AckArgs>(args).map_err(bad)?.broadcast },
        "claim" => {
            let a: ClaimArgs = serde_json::from_value(args).map_err(bad)?;
            Call::Claim { resource: a.resource, mode: a.mode }
        }
        "thread" => {
            Call::Thread { last: count(serde_json::from_value::<ThreadArgs>(args).map_err(bad)?.last, DEFAULT_LAST) }
        }
        "search" => {
            let a: SearchArgs = serde_json::from_value(args).map_err(bad)?;
            Call::Search { query: a.query, limit: count(a.limit, DEFAULT_HITS) }
        }
        APPROVE => {
            let a: ApproveArgs = serde_json::from_value(args).map_err(bad)?;
            Call::Approve { tool_name: a.tool_name, input: a.input, tool_use_id: a.tool_use_id }
        }
        _ => return Err(format!("kd has no tool named {name:?}; its tools are {}", NAMES.join(", "))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(v: Value) -> Option<JsonObject> {
        match v {
            Value::Object(o) => Some(o),
            _ => None,
        }
    }

    fn wire(t: &Tool) -> Value {
        serde_json::to_value(t).unwrap()
    }

    #[test]
    fn six_tools_each_with_an_object_schema_and_a_description() {
        let tools = all();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        assert_eq!(names, ["send", "inbox", "ack", "claim", "thread", "search"]);
        for t in &tools {
            let w = wire(t);
            assert_eq!(w["inputSchema"]["type"], "object", "{w}");
            assert_eq!(w["inputSchema"]["additionalProperties"], false, "{w}");
            assert!(w["description"].as_str().is_some_and(|d| d.len() > 20), "{w}");
            // Every property the schema names is one the call reads, and
            // every required one is a property.
            let props = w["inputSchema"]["properties"].as_object().unwrap();
            for r in w["inputSchema"]["required"].as_array().into_iter().flatten() {
                assert!(props.contains_key(r.as_str().unwrap()), "{w}");
            }
        }
    }

    #[test]
    fn the_schemas_say_what_each_tool_takes() {
        let props = |name: &str| -> Vec<String> {
            let w = wire(&tool(name).unwrap());
            let mut p: Vec<String> = w["inputSchema"]["properties"].as_object().unwrap().keys().cloned().collect();
            p.sort();
            p
        };
        let required = |name: &str| wire(&tool(name).unwrap())["inputSchema"]["required"].clone();
        assert_eq!(props("send"), ["body", "cc", "to", "type"]);
        assert_eq!(required("send"), json!(["to", "body"]));
        assert_eq!(props("inbox"), ["limit", "mark_read", "type", "unread"]);
        assert_eq!(required("inbox"), Value::Null);
        assert_eq!(props("ack"), ["broadcast"]);
        assert_eq!(props("claim"), ["mode", "resource"]);
        assert_eq!(required("claim"), json!(["resource"]));
        assert_eq!(
            wire(&tool("claim").unwrap())["inputSchema"]["properties"]["mode"]["enum"],
            json!(["write", "read"])
        );
        assert_eq!(props("thread"), ["last"]);
        assert_eq!(props("search"), ["limit", "query"]);
        assert_eq!(required("search"), json!(["query"]));
        // An emergency is not routed by send (kdd refuses it): not offered.
        let send_types = wire(&tool("send").unwrap())["inputSchema"]["properties"]["type"]["enum"].clone();
        assert_eq!(send_types, json!(["point_to_point", "multicast", "broadcast", "reply"]));
    }

    #[test]
    fn annotations_let_codex_run_every_tool_without_approval() {
        for t in all() {
            let a = wire(&t)["annotations"].clone();
            let read_only = ["thread", "search"].contains(&t.name.as_ref());
            if read_only {
                assert_eq!(a, json!({"readOnlyHint": true, "openWorldHint": false}), "{}", t.name);
            } else {
                assert_eq!(
                    a,
                    json!({"readOnlyHint": false, "destructiveHint": false, "openWorldHint": false}),
                    "{}",
                    t.name
                );
            }
        }
    }

    #[test]
    fn every_tool_is_loaded_at_once_by_claude_never_deferred_behind_tool_search() {
        // Claude Code 2.1.332 defers MCP tools behind ToolSearch unless the
        // server lists them so (shared/captures/approvals:
        // claude-332.deferral-alwaysload-meta).
        for t in all() {
            assert_eq!(wire(&t)["_meta"], json!({"anthropic/alwaysLoad": true}), "{}", t.name);
        }
    }

    #[test]
    fn the_instructions_name_every_tool_and_what_it_is_for() {
        for word in NAMES.iter().chain(&["kd", "council", "members", "messages", "inbox", "acknowledge", "claim"]) {
            assert!(INSTRUCTIONS.contains(word), "{word} missing from the instructions");
        }
    }

    #[test]
    fn calls_are_read_from_their_arguments() {
        assert_eq!(
            parse("send", obj(json!({"to": ["codex"], "body": "hello"}))),
            Ok(Call::Send { to: vec!["codex".into()], cc: None, body: "hello".into(), route: None })
        );
        // A lone name for a list, as models sometimes write it.
        assert_eq!(
            parse("send", obj(json!({"to": "all", "cc": "gemini", "body": "b", "type": "broadcast"}))),
            Ok(Call::Send {
                to: vec!["all".into()],
                cc: Some(vec!["gemini".into()]),
                body: "b".into(),
                route: Some(RouteType::Broadcast)
            })
        );
        assert_eq!(
            parse("inbox", obj(json!({"type": "reply", "limit": 5000, "mark_read": true}))),
            Ok(Call::Inbox { unread: true, types: Some(vec![RouteType::Reply]), limit: MAX_ITEMS, mark_read: true })
        );
        assert_eq!(
            parse("inbox", obj(json!({"type": ["reply", "emergency"], "limit": 0, "unread": false}))),
            Ok(Call::Inbox {
                unread: false,
                types: Some(vec![RouteType::Reply, RouteType::Emergency]),
                limit: 1,
                mark_read: false
            })
        );
        assert_eq!(parse("ack", None), Ok(Call::Ack { broadcast: None }));
        assert_eq!(
            parse("claim", obj(json!({"resource": "src/lib.rs", "mode": "read"}))),
            Ok(Call::Claim { resource: "src/lib.rs".into(), mode: Some(ClaimMode::Read) })
        );
        // Defaults are kd mcp's, as the schemas' descriptions say.
        assert_eq!(parse("thread", obj(json!({"last": null}))), Ok(Call::Thread { last: 20 }));
        assert_eq!(parse("inbox", None), Ok(Call::Inbox { unread: true, types: None, limit: 10, mark_read: false }));
        assert_eq!(
            parse("search", obj(json!({"query": "lock"}))),
            Ok(Call::Search { query: "lock".into(), limit: 10 })
        );
    }

    #[test]
    fn bad_arguments_are_refused_with_the_reason() {
        let why = |name: &str, args: Value| parse(name, obj(args)).unwrap_err();
        assert!(why("send", json!({"to": ["codex"]})).contains("missing field `body`"));
        assert!(why("send", json!({"to": ["codex"], "body": "b", "from": "king"})).contains("unknown field `from`"));
        assert!(why("send", json!({"to": ["codex"], "body": 7})).starts_with("bad arguments for send: "));
        assert!(why("inbox", json!({"type": "urgent"})).starts_with("bad arguments for inbox: "));
        assert!(why("claim", json!({"resource": "x", "mode": "steal"})).contains("steal"));
        assert!(why("thread", json!({"last": -3})).starts_with("bad arguments for thread: "));
        let unknown = parse("rm", None).unwrap_err();
        assert_eq!(unknown, "kd has no tool named \"rm\"; its tools are send, inbox, ack, claim, thread, search");
    }
}
