//! Agent stdout parsers (F-A2): one pure `parse_line` per backend turns a
//! line into [`Parsed`] items; [`Transcript`] folds them into the run's
//! text, its deltas and its outcome. Unknown line types yield nothing;
//! malformed JSON is an `Err` the caller counts and skips.

pub mod claude;
pub mod codex;
pub mod cursor;
pub mod gemini;
mod transcript;

pub use transcript::Transcript;

use serde_json::Value;

use crate::config::Format;

/// What one stdout line says.
#[derive(Debug, Clone, PartialEq)]
pub enum Parsed {
    /// The backend's session id (what `--resume` takes).
    SessionId(String),
    /// Text to append (a token delta).
    Delta(String),
    /// A complete text block that repeats what was streamed for it, or is
    /// new text when nothing was streamed (claude `assistant` lines).
    Block(String),
    /// A complete message to append as a new paragraph (codex agent_message).
    Message(String),
    /// A cursor `assistant` event, in one of its forms.
    Cursor(String, CursorForm),
    /// A tool call or similar: the text that follows is a new paragraph.
    Boundary,
    /// What the agent is doing (a command, a file change, a plan): shown
    /// to subscribers, never part of the answer.
    Activity(String),
    /// The backend's terminal result.
    Result(Outcome),
    /// An error; `fatal` ones fail the run, others are kept as warnings.
    Error { message: String, fatal: bool },
}

/// The forms of cursor's `assistant` events with `--stream-partial-output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorForm {
    /// A streamed fragment (`timestamp_ms`, no `model_call_id`).
    Delta,
    /// The whole text of the model call that just ended (`model_call_id`).
    SegmentEcho,
    /// The whole response so far (no `timestamp_ms`).
    Cumulative,
}

/// The terminal `result` line.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// The final answer text, when the backend reports it.
    pub text: Option<String>,
    pub is_error: bool,
    pub cost_usd: Option<f64>,
    pub usage: Option<Value>,
    pub duration_ms: Option<u64>,
    pub session_id: Option<String>,
    /// The tool calls the backend refused without asking (claude's
    /// `permission_denials`: a write outside its worktree), as `TOOL PATH`.
    pub denials: Vec<String>,
}

/// A line that is not the JSON it should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed line: {0}")]
pub struct Malformed(pub String);

/// The transcript of whole lines, folded as a run folds them (a line that
/// does not parse counts as malformed). For tests and fuzzing.
pub fn transcript_of<'a>(format: Format, lines: impl IntoIterator<Item = &'a str>) -> Transcript {
    let mut t = Transcript::new();
    for line in lines {
        match parse_line(format, line) {
            Ok(items) => {
                for item in items {
                    t.apply(item);
                }
            }
            Err(_) => t.malformed_line(),
        }
    }
    t
}

/// Parses one line in `format`. A plain-text line is a delta with its newline.
pub fn parse_line(format: Format, line: &str) -> Result<Vec<Parsed>, Malformed> {
    match format {
        Format::Claude => claude::parse_line(line),
        Format::Codex => codex::parse_line(line),
        Format::Cursor => cursor::parse_line(line),
        Format::Gemini => gemini::parse_line(line),
        Format::Text => Ok(vec![Parsed::Delta(format!("{line}\n"))]),
    }
}

/// Parses a JSON object line; blank lines are nothing.
pub(crate) fn json(line: &str) -> Result<Option<Value>, Malformed> {
    let line = line.trim();
    if line.is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(line) {
        Ok(v) if v.is_object() => Ok(Some(v)),
        Ok(_) => Err(Malformed("not a JSON object".into())),
        Err(e) => Err(Malformed(e.to_string())),
    }
}

pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |v, k| v.get(k)).and_then(Value::as_str)
}

/// Concatenated `text` of the `type: text` blocks of a content array.
pub(crate) fn text_blocks(content: Option<&Value>) -> Option<String> {
    let blocks = content?.as_array()?;
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    (!texts.is_empty()).then(|| texts.concat())
}

/// What a run is told when its CLI did not get kd's MCP server (shown as
/// the run's activity, and logged).
pub fn without_kds_tools(status: &str) -> String {
    tracing::warn!("an agent runs without kd's tools: its MCP server kd is {status}");
    format!("without kd's tools: its MCP server kd is {status} (kd doctor checks it)")
}

/// The outcome of a line that parses to exactly one `Result`.
#[cfg(test)]
pub(crate) fn only_result(items: Vec<Parsed>) -> Outcome {
    match <[Parsed; 1]>::try_from(items) {
        Ok([Parsed::Result(o)]) => o,
        other => panic!("expected one result, got {other:?}"),
    }
}
