//! One JSON-RPC call over plain HTTP, for what must work when every
//! WebSocket slot is taken: the daemon keeps a few connections free for
//! plain HTTP calls, so `kd daemon status` and `kd daemon stop` always get
//! in. The socket is checked as for a WebSocket ([`crate::Client`]): a
//! private directory, a listener of the user's own.

use std::path::Path;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::de::DeserializeOwned;

use crate::client::connect_checked;
use crate::error::{ClientError, one_line};

/// Calls `method` with named `params` and reads its result.
pub async fn call<T: DeserializeOwned>(
    socket: &Path,
    method: &str,
    params: serde_json::Value,
) -> Result<T, ClientError> {
    let stream = connect_checked(socket).await?;
    let lost = |e: &dyn std::fmt::Display| ClientError::Transport(one_line(&e.to_string()));
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| lost(&e))?;
    let driving = tokio::spawn(conn);
    let body = serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    let request = http::Request::post("/")
        .header(http::header::HOST, "kd")
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| lost(&e))?;
    let response = sender.send_request(request).await.map_err(|e| lost(&e))?;
    let status = response.status();
    let bytes = response.into_body().collect().await.map_err(|e| lost(&e))?.to_bytes();
    driving.abort();
    let answer: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| ClientError::Refused {
        socket: socket.to_path_buf(),
        reason: format!("HTTP status {status}: {}", one_line(&String::from_utf8_lossy(&bytes))),
    })?;
    if let Some(error) = answer.get("error") {
        let code = error["code"].as_i64().unwrap_or(0) as i32;
        let message = error["message"].as_str().unwrap_or_default().to_string();
        if !status.is_success() {
            return Err(ClientError::Refused { socket: socket.to_path_buf(), reason: message });
        }
        return Err(ClientError::Rpc { code, message, data: error.get("data").cloned() });
    }
    serde_json::from_value(answer["result"].clone()).map_err(|e| lost(&e))
}
