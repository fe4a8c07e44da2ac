//! `kd mcp`'s stdio transport: one JSON-RPC message a line, each line
//! bounded, as rmcp's own (`AsyncRwTransport`) — but every line that is
//! not a message rmcp can take is answered as JSON-RPC 2.0 says, where
//! rmcp's drops it silently and leaves the client waiting:
//!
//! - not UTF-8, not JSON: `-32700` (parse error), id null;
//! - JSON that is no request: a batch (MCP has none since 2025-06-18), not
//!   an object, `jsonrpc` not `"2.0"`, no `method` (a string) where one is
//!   needed: `-32600` (invalid request), with the request's id when it has
//!   one;
//! - an id rmcp cannot hold (MCP's ids are strings and integers: `1.5`,
//!   `1e400`, `2^64`, `null`, an object, a string with a lone surrogate):
//!   `-32600`, the id given back as it was written (a number up to 64
//!   characters; null otherwise);
//! - a request whose parameters are neither an object nor an array
//!   (`null`, `5`), or that rmcp cannot read: `-32602`;
//! - a line longer than the bound: `-32600`, id null (the line is not
//!   kept, so its id is unknown).
//!
//! A notification is never answered, nor a response (so an answer echoed
//! back by a confused peer does not start a storm of answers). The pure
//! part is [`read`], which says what to do with one line.

use std::collections::VecDeque;
use std::sync::Arc;

use futures_util::SinkExt;
use rmcp::RoleServer;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, BufReader};
use tokio::sync::Mutex;
use tokio_util::codec::{FramedWrite, LinesCodec};

/// JSON-RPC's codes for what is not a request.
pub const PARSE_ERROR: i32 = -32700;
pub const INVALID_REQUEST: i32 = -32600;
pub const INVALID_PARAMS: i32 = -32602;

/// The longest id given back as it was written.
const MAX_ECHOED_ID: usize = 64;

/// What to do with one line.
#[derive(Debug)]
pub enum Line {
    /// A message for rmcp's service.
    Message(Box<RxJsonRpcMessage<RoleServer>>),
    /// Not one: this answer (a JSON-RPC error response, one line) instead.
    Answer(String),
    /// Nothing to do (a blank line, a notification or response that could
    /// not be read).
    Ignore,
}

/// An error response: `id` is raw JSON (`null` when unknown).
fn error(id: &str, code: i32, message: &str) -> String {
    let message = serde_json::to_string(message).unwrap_or_else(|_| "\"error\"".into());
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{{"code":{code},"message":{message}}}}}"#)
}

/// A field that is there, whatever its value (`null` too): `Option`
/// alone would read a `null` as absent.
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// The members of a message that say what it is, as written. Its other
/// members are skipped without being built (however deep they nest).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(default, borrow, deserialize_with = "present")]
    jsonrpc: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    id: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    method: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    params: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    result: Option<&'a RawValue>,
    #[serde(default, borrow, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

/// What an id is to rmcp, which holds a string or an `i64`.
enum Id<'a> {
    /// One it holds.
    Held,
    /// A number it cannot hold (a fraction, an exponent, out of range),
    /// given back as written when short.
    Number(&'a str),
    /// Not an id JSON-RPC allows, or `null` (which MCP forbids).
    Invalid,
}

fn id_of(raw: &RawValue) -> Id<'_> {
    let text = raw.get();
    match text.as_bytes().first() {
        // A string rmcp can read (not one holding a lone surrogate).
        Some(b'"') if serde_json::from_str::<String>(text).is_ok() => Id::Held,
        Some(b'-' | b'0'..=b'9') => {
            if text.parse::<i64>().is_ok() {
                Id::Held
            } else {
                Id::Number(text)
            }
        }
        _ => Id::Invalid,
    }
}

/// What to do with `line` (without its newline).
pub fn read(line: &[u8]) -> Line {
    let line = line.strip_prefix(b"\xEF\xBB\xBF".as_slice()).unwrap_or(line);
    let Ok(text) = std::str::from_utf8(line) else {
        return Line::Answer(error("null", PARSE_ERROR, "Parse error: the line is not UTF-8"));
    };
    let text = text.trim_matches([' ', '\t', '\r', '\n']);
    if text.is_empty() {
        return Line::Ignore;
    }
    // The whole line's syntax, without building it.
    if let Err(e) = serde_json::from_str::<&RawValue>(text) {
        return Line::Answer(error("null", PARSE_ERROR, &format!("Parse error: {e}")));
    }
    if text.starts_with('[') {
        return Line::Answer(error("null", INVALID_REQUEST, "Invalid Request: kd's MCP server takes no batch"));
    }
    let envelope = match serde_json::from_str::<Envelope<'_>>(text) {
        Ok(e) => e,
        Err(e) => return Line::Answer(error("null", INVALID_REQUEST, &format!("Invalid Request: {e}"))),
    };
    let is_string = |raw: Option<&RawValue>| raw.is_some_and(|r| serde_json::from_str::<String>(r.get()).is_ok());
    // A response is never answered, whatever it holds.
    if envelope.method.is_none() && (envelope.result.is_some() || envelope.error.is_some()) {
        return match serde_json::from_str(text) {
            Ok(m) => Line::Message(Box::new(m)),
            Err(_) => Line::Ignore,
        };
    }
    // The id to answer with: as written when rmcp cannot hold it.
    let id = match envelope.id {
        None => None,
        Some(raw) => match id_of(raw) {
            Id::Held => Some(raw.get()),
            Id::Number(n) => {
                let echoed = if n.len() <= MAX_ECHOED_ID { n } else { "null" };
                return Line::Answer(error(
                    echoed,
                    INVALID_REQUEST,
                    "Invalid Request: kd's MCP server takes a string or an integer id (between -2^63 and 2^63-1)",
                ));
            }
            Id::Invalid => {
                return Line::Answer(error(
                    "null",
                    INVALID_REQUEST,
                    "Invalid Request: the id must be a string or an integer",
                ));
            }
        },
    };
    let version_ok =
        envelope.jsonrpc.is_some_and(|v| serde_json::from_str::<String>(v.get()).is_ok_and(|v| v == "2.0"));
    if !version_ok || !is_string(envelope.method) {
        // No request, nor a notification: answered, by its id if it has one.
        let why = if version_ok { "no method (a string)" } else { "jsonrpc must be \"2.0\"" };
        return Line::Answer(error(id.unwrap_or("null"), INVALID_REQUEST, &format!("Invalid Request: {why}")));
    }
    // Parameters, when given, are an object or an array (JSON-RPC 4.2).
    if let (Some(id), Some(p)) = (id, envelope.params)
        && !p.get().starts_with(['{', '['])
    {
        return Line::Answer(error(id, INVALID_PARAMS, "Invalid params: params must be an object or an array"));
    }
    match serde_json::from_str::<RxJsonRpcMessage<RoleServer>>(text) {
        Ok(m) => Line::Message(Box::new(m)),
        // A notification is never answered.
        Err(_) if id.is_none() => Line::Ignore,
        Err(e) => Line::Answer(error(id.unwrap_or("null"), INVALID_PARAMS, &format!("Invalid params: {e}"))),
    }
}

type Writer<W> = FramedWrite<W, LinesCodec>;

/// The transport over `R` and `W` (stdin and stdout).
pub struct Lines<R, W> {
    read: BufReader<R>,
    line: Vec<u8>,
    max: usize,
    /// Dropping the rest of a line over the bound, until its newline.
    discarding: bool,
    write: Arc<Mutex<Option<Writer<W>>>>,
    /// Answers to lines that were not messages, not yet handed to the
    /// writer (`receive` may be cancelled at any await).
    answers: VecDeque<String>,
}

/// One bounded read.
enum Read {
    Line,
    Oversized,
    Eof,
    Failed,
}

impl<R, W> Lines<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    pub fn new(read: R, write: W, max: usize) -> Self {
        Lines {
            read: BufReader::new(read),
            line: Vec::new(),
            max,
            discarding: false,
            write: Arc::new(Mutex::new(Some(FramedWrite::new(write, LinesCodec::new())))),
            answers: VecDeque::new(),
        }
    }

    /// Reads one line into `self.line`, never past `self.max`; a
    /// cancelled read leaves what it read for the next (as rmcp's does).
    async fn read_line(&mut self) -> Read {
        loop {
            let (taken, step) = {
                let available = match self.read.fill_buf().await {
                    Ok(a) => a,
                    Err(_) => return Read::Failed,
                };
                if available.is_empty() {
                    return Read::Eof;
                }
                let newline = available.iter().position(|b| *b == b'\n');
                let take = newline.map_or(available.len(), |i| i + 1);
                if self.discarding {
                    (take, if newline.is_some() { Step::EndDiscard } else { Step::More })
                } else if self.line.len().saturating_add(take) > self.max {
                    self.line.clear();
                    (take, if newline.is_some() { Step::Oversized } else { Step::OversizedDiscard })
                } else {
                    self.line.extend_from_slice(&available[..take]);
                    (take, if newline.is_some() { Step::Line } else { Step::More })
                }
            };
            self.read.consume(taken);
            match step {
                Step::Line => return Read::Line,
                Step::More => {}
                Step::EndDiscard => self.discarding = false,
                Step::Oversized => return Read::Oversized,
                Step::OversizedDiscard => {
                    self.discarding = true;
                    return Read::Oversized;
                }
            }
        }
    }

    /// Hands the pending answers to the writer and flushes it; false when
    /// the output is gone.
    async fn answer_pending(&mut self) -> bool {
        if self.answers.is_empty() {
            return true;
        }
        let mut write = self.write.lock().await;
        let Some(framed) = write.as_mut() else { return false };
        while let Some(answer) = self.answers.front() {
            if framed.feed(answer.clone()).await.is_err() {
                return false;
            }
            self.answers.pop_front();
        }
        SinkExt::<String>::flush(framed).await.is_ok()
    }
}

enum Step {
    Line,
    More,
    EndDiscard,
    Oversized,
    OversizedDiscard,
}

impl<R, W> Transport<RoleServer> for Lines<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = std::io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let lock = self.write.clone();
        async move {
            let text = serde_json::to_string(&item)?;
            let mut write = lock.lock().await;
            match write.as_mut() {
                Some(framed) => framed.send(text).await.map_err(std::io::Error::other),
                None => Err(std::io::Error::new(std::io::ErrorKind::NotConnected, "the transport is closed")),
            }
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        loop {
            if !self.answer_pending().await {
                return None;
            }
            match self.read_line().await {
                Read::Line => {}
                Read::Oversized => {
                    let why = format!("Invalid Request: the message is longer than {} bytes", self.max);
                    self.answers.push_back(error("null", INVALID_REQUEST, &why));
                    continue;
                }
                // What is left without a newline is no whole message.
                Read::Eof | Read::Failed => return None,
            }
            let line = std::mem::take(&mut self.line);
            let read = read(line.strip_suffix(b"\n").unwrap_or(&line));
            // Keep the buffer's capacity for the next line.
            self.line = line;
            self.line.clear();
            match read {
                Line::Message(m) => return Some(*m),
                Line::Answer(a) => self.answers.push_back(a),
                Line::Ignore => {}
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut write = self.write.lock().await;
        if let Some(framed) = write.as_mut() {
            let _ = SinkExt::<String>::flush(framed).await;
        }
        drop(write.take());
        Ok(())
    }
}
