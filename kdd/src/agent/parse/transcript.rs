//! Folds parsed lines into a run's text, the deltas to publish, and what
//! the run ended with.
//!
//! Text is cut into *segments* by boundaries (tool calls, complete
//! messages); a new segment after text starts a new paragraph. Repeats are
//! dropped: a claude `assistant` block after its streamed deltas, a cursor
//! echo of the segment just streamed, a cursor cumulative snapshot of what
//! is already there (compared ignoring whitespace, since the backend joins
//! segments its own way).

use super::{CursorForm, Outcome, Parsed};

#[derive(Debug, Default)]
pub struct Transcript {
    text: String,
    chars: u64,
    /// Byte offset where the current segment starts.
    segment_start: usize,
    /// Whether deltas were streamed in the current segment.
    streamed_in_segment: bool,
    /// The next appended text starts a new paragraph.
    need_break: bool,
    /// The terminal result line, if one came.
    pub result: Option<Outcome>,
    pub session_id: Option<String>,
    /// The first fatal error reported.
    pub fatal: Option<String>,
    pub warnings: Vec<String>,
    /// Lines that were not what the backend should print (bad JSON,
    /// non-UTF-8, over the length bound).
    pub malformed: u64,
}

impl Transcript {
    pub fn new() -> Transcript {
        Transcript::default()
    }

    /// The text streamed so far.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Characters streamed so far.
    pub fn chars(&self) -> u64 {
        self.chars
    }

    /// Applies one parsed item; returns the text appended, if any.
    pub fn apply(&mut self, p: Parsed) -> Option<String> {
        match p {
            Parsed::SessionId(id) => {
                self.session_id = Some(id);
                None
            }
            Parsed::Delta(d) => {
                self.streamed_in_segment = true;
                self.append(&d)
            }
            Parsed::Block(b) => {
                let out = if self.streamed_in_segment { None } else { self.append_paragraph(&b) };
                self.end_segment();
                out
            }
            Parsed::Message(m) => {
                let out = self.append_paragraph(&m);
                self.end_segment();
                out
            }
            Parsed::Cursor(t, CursorForm::Delta) => {
                self.streamed_in_segment = true;
                self.append(&t)
            }
            Parsed::Cursor(t, CursorForm::SegmentEcho) => {
                let segment = self.text[self.segment_start..].to_string();
                let out = self.extend_with(&segment, &t);
                self.end_segment();
                out
            }
            Parsed::Cursor(t, CursorForm::Cumulative) => {
                let all = self.text.clone();
                let out = self.extend_with(&all, &t);
                self.end_segment();
                out
            }
            Parsed::Boundary => {
                self.end_segment();
                None
            }
            Parsed::Activity(_) => None,
            Parsed::Result(o) => {
                if let Some(id) = &o.session_id {
                    self.session_id = Some(id.clone());
                }
                let out = match &o.text {
                    // Nothing was streamed: the result is the whole answer.
                    Some(t) if self.text.is_empty() && !o.is_error && !t.is_empty() => {
                        let t = t.clone();
                        self.append(&t)
                    }
                    _ => None,
                };
                self.result = Some(o);
                out
            }
            Parsed::Error { message, fatal: true } => {
                self.fatal.get_or_insert(message);
                None
            }
            Parsed::Error { message, fatal: false } => {
                self.warnings.push(message);
                None
            }
        }
    }

    /// Counts a line that could not be read.
    pub fn malformed_line(&mut self) {
        self.malformed += 1;
    }

    /// The answer: the backend's own final text when it reported one,
    /// otherwise what was streamed.
    pub fn answer(&self) -> String {
        match &self.result {
            Some(Outcome { text: Some(t), is_error: false, .. }) if !t.trim().is_empty() => t.clone(),
            _ => self.text.clone(),
        }
    }

    /// Given `known` (text already here) and `full` (the backend's whole
    /// version of it), appends whatever `full` adds, or `full` itself when
    /// it is new text, or nothing when it repeats.
    fn extend_with(&mut self, known: &str, full: &str) -> Option<String> {
        let known_sq = squash(known);
        let full_sq = squash(full);
        if full_sq.is_empty() || known_sq == full_sq || (known_sq.contains(&full_sq) && !known_sq.is_empty()) {
            return None;
        }
        if known_sq.is_empty() {
            return self.append_paragraph(full);
        }
        if full_sq.starts_with(&known_sq) {
            // The same text, grown: continue it, no paragraph break.
            let tail = tail_after(full, known_sq.chars().count());
            self.need_break = false;
            return self.append(tail);
        }
        if squash(&self.text).contains(&full_sq) {
            return None;
        }
        self.append_paragraph(full)
    }

    fn end_segment(&mut self) {
        self.segment_start = self.text.len();
        self.streamed_in_segment = false;
        if !self.text.is_empty() {
            self.need_break = true;
        }
    }

    fn append_paragraph(&mut self, s: &str) -> Option<String> {
        if !self.text.is_empty() {
            self.need_break = true;
        }
        self.append(s)
    }

    fn append(&mut self, s: &str) -> Option<String> {
        if s.is_empty() {
            return None;
        }
        let mut out = String::new();
        if self.need_break && !self.text.is_empty() {
            out.push_str(if self.text.ends_with("\n\n") {
                ""
            } else if self.text.ends_with('\n') {
                "\n"
            } else {
                "\n\n"
            });
            self.segment_start = self.text.len() + out.len();
        }
        self.need_break = false;
        out.push_str(s);
        self.text.push_str(&out);
        self.chars += out.chars().count() as u64;
        Some(out)
    }
}

fn squash(s: &str) -> String {
    s.chars().filter(|c| !c.is_whitespace()).collect()
}

/// The part of `s` after its first `n` non-whitespace characters.
fn tail_after(s: &str, n: usize) -> &str {
    let mut seen = 0;
    for (i, c) in s.char_indices() {
        if seen == n {
            return &s[i..];
        }
        if !c.is_whitespace() {
            seen += 1;
        }
    }
    ""
}

#[cfg(test)]
mod tests {
    use super::super::{claude, codex, cursor, gemini};
    use super::*;

    fn fold(
        parse: fn(&str) -> Result<Vec<Parsed>, super::super::Malformed>,
        lines: &[&str],
    ) -> (Transcript, Vec<String>) {
        let mut t = Transcript::new();
        let mut deltas = Vec::new();
        for l in lines {
            match parse(l) {
                Ok(items) => {
                    for p in items {
                        deltas.extend(t.apply(p));
                    }
                }
                Err(_) => t.malformed_line(),
            }
        }
        (t, deltas)
    }

    #[test]
    fn claude_deltas_then_the_repeated_block_then_result() {
        let (t, deltas) = fold(
            claude::parse_line,
            &[
                r#"{"type":"system","subtype":"init","session_id":"s-1"}"#,
                r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello "}}}"#,
                r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"world"}}}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Hello world"}]}}"#,
                r#"{"type":"result","subtype":"success","is_error":false,"result":"Hello world","session_id":"s-1","total_cost_usd":0.01}"#,
            ],
        );
        assert_eq!(deltas, vec!["Hello ", "world"]);
        assert_eq!((t.text(), t.chars()), ("Hello world", 11));
        assert_eq!(t.answer(), "Hello world");
        assert_eq!(t.session_id.as_deref(), Some("s-1"));
    }

    #[test]
    fn claude_without_partial_messages_streams_the_blocks() {
        let (t, deltas) = fold(
            claude::parse_line,
            &[
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Let me look."}]}}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"t1","name":"Read","input":{}}]}}"#,
                r#"{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":"x"}]}}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"It is fine."}]}}"#,
                r#"{"type":"result","subtype":"success","is_error":false,"result":"It is fine."}"#,
            ],
        );
        assert_eq!(deltas, vec!["Let me look.", "\n\nIt is fine."]);
        assert_eq!(t.answer(), "It is fine.", "the final result wins over the streamed text");
    }

    #[test]
    fn claude_turns_after_a_tool_call_are_separated() {
        let delta = |s: &str| {
            format!(
                r#"{{"type":"stream_event","event":{{"type":"content_block_delta","delta":{{"type":"text_delta","text":"{s}"}}}}}}"#
            )
        };
        let (a, b) = (delta("Checking."), delta("Done."));
        let (t, _) = fold(
            claude::parse_line,
            &[
                &a,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Checking."}]}}"#,
                r#"{"type":"stream_event","event":{"type":"content_block_start","content_block":{"type":"tool_use"}}}"#,
                &b,
            ],
        );
        assert_eq!(t.text(), "Checking.\n\nDone.");
        assert_eq!(t.answer(), "Checking.\n\nDone.", "no result line: the streamed text");
    }

    #[test]
    fn claude_api_error_is_not_an_answer() {
        let (t, deltas) = fold(
            claude::parse_line,
            &[r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 529 Overloaded"}"#],
        );
        assert!(deltas.is_empty());
        assert!(t.result.as_ref().is_some_and(|r| r.is_error));
        assert_eq!(t.answer(), "");
    }

    #[test]
    fn codex_messages_are_paragraphs_and_errors_are_sorted() {
        let (t, deltas) = fold(
            codex::parse_line,
            &[
                r#"{"type":"thread.started","thread_id":"th-9"}"#,
                r#"{"type":"item.completed","item":{"id":"i1","type":"agent_message","text":"Looking at it."}}"#,
                r#"{"type":"item.completed","item":{"id":"i2","type":"error","message":"tool hiccup"}}"#,
                r#"{"type":"item.completed","item":{"id":"i3","type":"agent_message","text":"Use a join table."}}"#,
                r#"{"type":"turn.completed","usage":{"output_tokens":9}}"#,
            ],
        );
        assert_eq!(deltas, vec!["Looking at it.", "\n\nUse a join table."]);
        assert_eq!(t.answer(), "Looking at it.\n\nUse a join table.");
        assert_eq!(t.warnings, vec!["tool hiccup"]);
        assert_eq!(t.fatal, None);
        assert_eq!(t.session_id.as_deref(), Some("th-9"));
        let (failed, _) = fold(codex::parse_line, &[r#"{"type":"turn.failed","error":{"message":"boom"}}"#]);
        assert_eq!(failed.fatal.as_deref(), Some("boom"));
    }

    #[test]
    fn cursor_partial_output_is_deduplicated() {
        let (t, deltas) = fold(
            cursor::parse_line,
            &[
                r#"{"type":"system","subtype":"init","session_id":"cs-1"}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Reading "}]},"timestamp_ms":1}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"the file."}]},"timestamp_ms":2}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Reading the file."}]},"model_call_id":"m1","timestamp_ms":3}"#,
                r#"{"type":"tool_call","subtype":"started","call_id":"c1","tool_call":{}}"#,
                r#"{"type":"tool_call","subtype":"completed","call_id":"c1","tool_call":{}}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"It is "}]},"timestamp_ms":4}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"fine."}]},"timestamp_ms":5}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"It is fine."}]},"model_call_id":"m2","timestamp_ms":6}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Reading the file.It is fine."}]}}"#,
                r#"{"type":"result","subtype":"success","is_error":false,"result":"Reading the file.It is fine.","session_id":"cs-1"}"#,
            ],
        );
        assert_eq!(deltas, vec!["Reading ", "the file.", "\n\nIt is ", "fine."]);
        assert_eq!(t.text(), "Reading the file.\n\nIt is fine.");
        assert_eq!(t.answer(), "Reading the file.It is fine.");
    }

    #[test]
    fn cursor_without_partials_and_cumulative_growth() {
        let (t, deltas) = fold(
            cursor::parse_line,
            &[
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"First."}]}}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"First. Second."}]}}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"Other."}]}}"#,
                r#"{"type":"assistant","message":{"content":[{"type":"text","text":"First. Second."}]}}"#,
            ],
        );
        assert_eq!(deltas, vec!["First.", " Second.", "\n\nOther."]);
        assert_eq!(t.text(), "First. Second.\n\nOther.");
    }

    #[test]
    fn cursor_failure_can_end_without_result() {
        let (t, _) = fold(cursor::parse_line, &[r#"{"type":"system","subtype":"init","session_id":"x"}"#]);
        assert!(t.result.is_none());
        assert_eq!(t.answer(), "");
    }

    #[test]
    fn gemini_deltas_and_a_warning() {
        let (t, deltas) = fold(
            gemini::parse_line,
            &[
                r#"{"type":"init","session_id":"g-1","model":"gemini-2.5-pro"}"#,
                r#"{"type":"message","role":"user","content":"q"}"#,
                r#"{"type":"message","role":"assistant","content":"Use ","delta":true}"#,
                r#"{"type":"error","severity":"warning","message":"slow"}"#,
                r#"{"type":"message","role":"assistant","content":"a view.","delta":true}"#,
                r#"{"type":"result","status":"success","stats":{"total_tokens":3}}"#,
            ],
        );
        assert_eq!(deltas, vec!["Use ", "a view."]);
        assert_eq!(t.answer(), "Use a view.");
        assert_eq!(t.warnings, vec!["slow"]);
    }

    #[test]
    fn malformed_lines_are_counted_not_fatal() {
        let (t, deltas) = fold(
            gemini::parse_line,
            &["garbage", "{\"type\":", r#"{"type":"message","role":"assistant","content":"ok","delta":true}"#],
        );
        assert_eq!((t.malformed, deltas), (2, vec!["ok".to_string()]));
    }

    #[test]
    fn tail_after_skips_whitespace_consistently() {
        assert_eq!(tail_after("ab c d", 3), " d");
        assert_eq!(tail_after("abc", 3), "");
        assert_eq!(tail_after("  a b", 1), " b");
    }
}
