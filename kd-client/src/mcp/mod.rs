//! `kd mcp`: kd's MCP server, which an agent CLI starts for a run (a stdio
//! server named `kd`) so that its model acts through kd as the member the
//! run is — never as anyone else: every call presents the run's capability
//! (`KD_RUN_TOKEN`) to kdd's member surface ([`kd_proto::member`]), and the
//! token is the identity.
//!
//! Built on rmcp, the official Rust SDK: its server loop and stdio
//! transport, with a hand-written [`ServerHandler`] so that every answer is
//! kd's choice. `initialize` and `tools/list` are answered from static data
//! ([`tools`]), at once and without kdd: a CLI waits only 1–2 s for its
//! servers (shared/captures/mcp). kdd is reached on the first `tools/call`,
//! at the socket only (never started), and again after the connection
//! broke. Every failure — no token, kdd unreachable, a refusal, bad
//! arguments, an unknown tool — is a tool result with `isError` and the
//! reason ([`text`]), which the model reads; a JSON-RPC error would reach
//! it as an opaque failure, if at all.

pub mod text;
pub mod tools;
pub mod transport;

use std::borrow::Cow;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kd_proto::api::prelude::*;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ListToolsResult,
    PaginatedRequestParams, ProtocolVersion, ServerCapabilities, ServerConfig, Tool, ToolsCapability,
};
use rmcp::service::{RequestContext, RoleServer, ServerInitializeError};
use rmcp::{ErrorData, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};

use crate::{Client, ClientError};
use text::Reply;
use tools::Call;

/// The server's name, which the CLIs prefix its tools with (`mcp__kd__send`).
pub const NAME: &str = "kd";

/// The longest line (one JSON-RPC message) read from the CLI: a longer one
/// is not kept, and answered `-32600` with a null id (without reading it
/// whole there is no id to answer with). A message of a few MiB is already
/// far more than a model writes.
pub const MAX_LINE: usize = 4 * 1024 * 1024;

/// How long connecting to kdd may take, and each call once connected:
/// codex gives a tool call 60 s by default, so kd answers first.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a permission prompt waits (past the longest approvals.timeout).
const PERMISSION_TIMEOUT: Duration = Duration::from_secs(25 * 3600);
/// Set to 1 in the environment of a server claude uses as its permission
/// prompt tool.
pub const PERMISSION_VAR: &str = "KD_PERMISSION_TOOL";

/// The newest protocol version kd answers `initialize` with; a client asking
/// for one of the older ones gets its own back.
const NEWEST: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// kd's MCP server for one run.
pub struct Server {
    socket: PathBuf,
    token: Option<String>,
    client: tokio::sync::Mutex<Option<Arc<Client>>>,
    /// Whether it serves claude's permission prompt tool too.
    approve: bool,
}

impl Server {
    /// A server acting with `token` (the run's capability) through the
    /// daemon at `socket`.
    pub fn new(socket: PathBuf, token: Option<String>) -> Server {
        let token = token.filter(|t| !t.trim().is_empty());
        Server { socket, token, client: tokio::sync::Mutex::new(None), approve: false }
    }

    /// A server as kdd starts it: the token from `KD_RUN_TOKEN`.
    pub fn from_env(socket: PathBuf) -> Server {
        let approve = std::env::var(PERMISSION_VAR).is_ok_and(|v| v == "1");
        Server { approve, ..Server::new(socket, std::env::var("KD_RUN_TOKEN").ok()) }
    }

    /// The tools it lists.
    fn tools(&self) -> Vec<Tool> {
        let mut all = tools::all();
        if self.approve {
            all.extend(tools::tool(tools::APPROVE));
        }
        all
    }

    /// The connection to kdd: the one made earlier while it lasts, else a
    /// new one.
    async fn client(&self) -> Result<Arc<Client>, ClientError> {
        let mut held = self.client.lock().await;
        if let Some(c) = held.as_ref()
            && c.is_connected()
        {
            return Ok(c.clone());
        }
        *held = None;
        let connect = Client::connect_with(&self.socket, CALL_TIMEOUT);
        let c = match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
            Ok(c) => Arc::new(c?),
            Err(_) => {
                return Err(ClientError::Unreachable {
                    socket: self.socket.clone(),
                    reason: format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()),
                    hint: "",
                    nothing_listens: false,
                });
            }
        };
        *held = Some(c.clone());
        Ok(c)
    }

    /// What the tool `name` answers to `arguments`.
    pub async fn call(&self, name: &str, arguments: Option<rmcp::model::JsonObject>) -> Reply {
        if name == tools::APPROVE && !self.approve {
            return Reply::error(format!("kd has no tool named {name:?}; its tools are {}", tools::NAMES.join(", ")));
        }
        let call = match tools::parse(name, arguments) {
            Ok(call) => call,
            Err(why) => return Reply::error(why),
        };
        let Some(token) = self.token.clone() else {
            return Reply::error(text::NO_TOKEN.into());
        };
        if let Call::Approve { tool_name, input, tool_use_id } = call {
            return self.approve(token, tool_name, input, tool_use_id).await;
        }
        let client = match self.client().await {
            Ok(c) => c,
            Err(e) => return text::failure(&e),
        };
        match run(&client, token, call).await {
            Ok(reply) => reply,
            Err(e) => {
                if e.is_connection() {
                    // Lost: the next call connects afresh.
                    let mut held = self.client.lock().await;
                    if held.as_ref().is_some_and(|c| Arc::ptr_eq(c, &client)) {
                        *held = None;
                    }
                }
                text::failure(&e)
            }
        }
    }
}

impl Server {
    /// claude's permission prompt, on a connection of its own: the King
    /// may take minutes (kdd bounds the wait by approvals.timeout).
    async fn approve(&self, token: String, tool_name: String, input: Value, tool_use_id: Option<String>) -> Reply {
        let c = match Client::connect_with(&self.socket, PERMISSION_TIMEOUT).await {
            Ok(c) => c,
            Err(e) => return text::failure(&e),
        };
        match c.member_permission(token, tool_name, input, tool_use_id).await {
            Ok(answer) => Reply { text: serde_json::to_string(&answer).unwrap_or_default(), is_error: false },
            Err(e) => text::failure(&ClientError::from(e)),
        }
    }
}

/// One call of the member surface, and its answer as text.
async fn run(c: &Client, token: String, call: Call) -> Result<Reply, ClientError> {
    Ok(match call {
        Call::Send { to, cc, body, route } => text::sent(&c.member_send(token, to, body, cc, route).await?),
        Call::Inbox { unread, types, limit, mark_read } => {
            let items = c.member_inbox(token, Some(unread), types, Some(limit), Some(mark_read)).await?;
            text::inbox(&items, unread, mark_read && !items.is_empty())
        }
        Call::Ack { broadcast } => text::acked(&c.member_ack(token, broadcast).await?),
        Call::Claim { resource, mode } => text::claimed(&c.member_claim(token, resource, mode).await?),
        Call::Thread { last } => text::thread(&c.member_thread(token, Some(last)).await?),
        Call::Approve { .. } => Reply::error("the permission tool is answered apart".into()),
        Call::Search { query, limit } => {
            let hits = c.member_search(token, query.clone(), Some(limit)).await?;
            text::found(&query, &hits)
        }
    })
}

/// What `initialize` answers (its protocol version is the client's, when
/// kd speaks it).
pub fn info() -> ServerConfig {
    let mut tools = ToolsCapability::default();
    tools.list_changed = Some(false);
    ServerConfig::new(ServerCapabilities::builder().enable_tools_with(tools).build())
        .with_server_info(Implementation::new(NAME, kd_proto::VERSION))
        .with_protocol_version(NEWEST)
        .with_instructions(tools::INSTRUCTIONS)
}

impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        info()
    }

    fn supported_protocol_versions(&self) -> Cow<'static, [ProtocolVersion]> {
        Cow::Borrowed(ProtocolVersion::known_up_to(&NEWEST))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        tools::tool(name).filter(|_| name != tools::APPROVE || self.approve)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let reply = self.call(&request.name, request.arguments).await;
        let content = vec![ContentBlock::text(reply.text)];
        let result = if reply.is_error { CallToolResult::error(content) } else { CallToolResult::success(content) };
        Ok(result.into())
    }
}

/// Serves `server` on `read`/`write` until the client closes its end (or
/// the connection fails), each line read by [`transport`] (a line that is
/// not a message is answered there). A client that leaves before
/// `initialize` is no failure.
pub async fn serve<R, W>(server: Server, read: R, write: W) -> Result<(), ServerInitializeError>
where
    R: AsyncRead + Send + Unpin + 'static,
    W: AsyncWrite + Send + Unpin + 'static,
{
    let transport = transport::Lines::new(read, write, MAX_LINE);
    match server.serve(transport).await {
        Ok(running) => {
            let _ = running.waiting().await;
            Ok(())
        }
        Err(ServerInitializeError::ConnectionClosed(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Serves `server` on this process's stdin and stdout: pipes are read
/// without blocking a thread where the system allows it (rmcp's
/// `stdio_pipes`), anything else with tokio's blocking stdin, which the
/// runtime cannot cancel (so `kd mcp` shuts its runtime down in the
/// background).
pub async fn serve_stdio(server: Server) -> Result<(), ServerInitializeError> {
    let (read, write) = rmcp::transport::io::stdio_pipes();
    serve(server, read, write).await
}

#[cfg(test)]
mod tests;
