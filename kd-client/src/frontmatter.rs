//! One message file, as kd and Kingdom write it: a `---` front matter of
//! `key: value` lines, a blank line, the body verbatim.
//!
//! ```text
//! ---
//! from: claude
//! to: king
//! timestamp: 2026-02-16T19:02:08Z
//! status: error
//! backend: claude_code
//! refs:
//!   - src/db.rs
//! ---
//!
//! The body, verbatim — it may hold --- lines.
//! ```
//!
//! Values are plain, quoted, or lists (inline `[a, b]` or `- item` lines
//! under an empty key). kd reads `from`, `to` (comma-separated or a list;
//! Kingdom's `council` means everyone), `timestamp`, `kind` (kd) or
//! `status` (Kingdom: complete, error, timeout, interrupted), `refs`,
//! `backend` and `model`; other keys are Kingdom's bookkeeping and are
//! skipped. The file ends with a newline that is not part of the body.

use anyhow::{Context, anyhow, bail};
use kd_proto::names::{ALL, check_member_name};
use kd_proto::types::{ImportedMessage, Message, MessageKind};

/// A front-matter value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Text(String),
    List(Vec<String>),
}

impl Value {
    fn items(&self) -> Vec<String> {
        match self {
            Value::Text(t) => t.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
            Value::List(l) => l.clone(),
        }
    }
}

/// Splits a file into its front-matter fields and its body.
pub fn split(text: &str) -> anyhow::Result<(Vec<(String, Value)>, String)> {
    let rest = text.strip_prefix("---\n").ok_or_else(|| anyhow!("does not start with a --- front matter line"))?;
    let (head, body) = match rest.split_once("\n---\n") {
        Some(split) => split,
        None => rest
            .strip_suffix("\n---")
            .map(|h| (h, ""))
            .ok_or_else(|| anyhow!("front matter has no closing --- line"))?,
    };
    let body = body.strip_prefix('\n').unwrap_or(body);
    let body = body.strip_suffix('\n').unwrap_or(body);
    let mut fields: Vec<(String, Value)> = Vec::new();
    for line in head.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        if let Some(item) = trimmed.strip_prefix("- ").or((trimmed == "-").then_some("")) {
            match fields.last_mut() {
                Some((_, Value::List(items))) => items.push(unquote(item.trim())),
                _ => bail!("front matter line {line:?} is a list item without a key"),
            }
            continue;
        }
        let (k, v) = line.split_once(':').ok_or_else(|| anyhow!("front matter line {line:?} is not `key: value`"))?;
        let v = v.trim();
        let value = if v.is_empty() {
            Value::List(Vec::new())
        } else if let Some(inner) = v.strip_prefix('[').and_then(|i| i.strip_suffix(']')) {
            Value::List(inner.split(',').map(|s| unquote(s.trim())).filter(|s| !s.is_empty()).collect())
        } else {
            Value::Text(unquote(v))
        };
        fields.push((k.trim().to_string(), value));
    }
    Ok((fields, body.to_string()))
}

fn unquote(s: &str) -> String {
    let quoted =
        s.len() >= 2 && ((s.starts_with('"') && s.ends_with('"')) || (s.starts_with('\'') && s.ends_with('\'')));
    if quoted { s[1..s.len() - 1].to_string() } else { s.to_string() }
}

/// A sender or addressee as kd names it: Kingdom's names lowercased, with
/// anything outside `[a-z0-9_.-]` made a `-`.
pub fn member_name(raw: &str) -> anyhow::Result<String> {
    let mut name = String::new();
    for c in raw.trim().to_lowercase().chars() {
        let c = if c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-') { c } else { '-' };
        if !(c == '-' && name.ends_with('-')) {
            name.push(c);
        }
    }
    let name = name.trim_start_matches(['-', '_', '.']).trim_end_matches('-').to_string();
    check_member_name(&name).map_err(|e| anyhow!("{raw:?}: {e}"))?;
    Ok(name)
}

/// Reads one message file.
pub fn parse_message(text: &str) -> anyhow::Result<ImportedMessage> {
    let (fields, body) = split(text)?;
    let get = |key: &str| fields.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let text_of = |key: &str| match get(key) {
        Some(Value::Text(t)) => Some(t.clone()),
        _ => None,
    };
    let from = member_name(&text_of("from").ok_or_else(|| anyhow!("no `from:` in the front matter"))?)?;
    let mut to = Vec::new();
    for t in get("to").map(Value::items).unwrap_or_default() {
        // Kingdom's `council` is the whole council.
        let name = if t.eq_ignore_ascii_case("council") { ALL.to_string() } else { member_name(&t)? };
        if !to.contains(&name) {
            to.push(name);
        }
    }
    let at = text_of("timestamp").ok_or_else(|| anyhow!("no `timestamp:` in the front matter"))?;
    let kind = match (text_of("kind"), text_of("status")) {
        (Some(k), _) => Some(
            serde_json::from_value::<MessageKind>(serde_json::Value::String(k.clone()))
                .map_err(|_| anyhow!("unknown kind {k:?}"))?,
        ),
        (None, Some(s)) => match s.as_str() {
            "complete" | "completed" | "done" => None,
            "error" | "timeout" | "timed_out" => Some(MessageKind::Error),
            "interrupted" | "cancelled" => Some(MessageKind::Interrupted),
            other => bail!("unknown status {other:?}"),
        },
        (None, None) => None,
    };
    let backend = text_of("backend").map(|b| if b == "claude_code" { "claude".to_string() } else { b });
    Ok(ImportedMessage {
        from,
        to,
        kind,
        body,
        created_at_ms: parse_time(&at)?,
        refs: get("refs").map(Value::items).unwrap_or_default(),
        backend,
        model: text_of("model"),
    })
}

/// Writes one message file; [`parse_message`] reads it back as it was.
pub fn write_message(m: &Message) -> anyhow::Result<String> {
    let mut out =
        format!("---\nfrom: {}\nto: {}\ntimestamp: {}\n", m.from, m.to.join(", "), format_time(m.created_at_ms)?);
    match m.kind {
        MessageKind::King | MessageKind::Agent => {}
        kind => out.push_str(&format!("kind: {}\n", kind.as_str())),
    }
    if let Some(run) = &m.run {
        if let Some(b) = &run.backend {
            out.push_str(&format!("backend: {b}\n"));
        }
        if let Some(model) = &run.model {
            out.push_str(&format!("model: {model}\n"));
        }
    }
    if !m.refs.is_empty() {
        out.push_str("refs:\n");
        for r in &m.refs {
            out.push_str(&format!("  - {r}\n"));
        }
    }
    out.push_str("---\n\n");
    out.push_str(&m.body);
    out.push('\n');
    Ok(out)
}

pub fn format_time(ms: i64) -> anyhow::Result<String> {
    let ts = jiff::Timestamp::from_millisecond(ms)?;
    Ok(ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

pub fn parse_time(s: &str) -> anyhow::Result<i64> {
    let ts: jiff::Timestamp = s.parse().with_context(|| format!("{s:?} is not a time like 2026-02-16T19:02:08Z"))?;
    Ok(ts.as_millisecond())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_file_round_trips_with_dashes_in_the_body() {
        let text = "---\nfrom: codex\nto: claude, gemini\ntimestamp: 2026-02-16T19:02:08Z\nkind: error\n---\n\nline\n---\nafter a rule\n";
        let m = parse_message(text).unwrap();
        assert_eq!(
            (m.from.as_str(), m.to.clone(), m.kind),
            ("codex", vec!["claude".to_string(), "gemini".to_string()], Some(MessageKind::Error))
        );
        assert_eq!(m.body, "line\n---\nafter a rule");
        assert_eq!(format_time(m.created_at_ms).unwrap(), "2026-02-16T19:02:08Z");
    }

    #[test]
    fn kingdom_files_parse_as_kingdom_writes_them() {
        // thread.py's add_message: inline refs, status, backend and the rest.
        let written = "---\nfrom: claude\nto: king\ntimestamp: 2026-02-16T19:02:08Z\nrefs: [src/a.py, \"src/b c.py\"]\nstatus: timeout\nbackend: claude_code\nmodel: opus\nmodel_source: configured\neffort: high\neffort_source: configured\ncli_version: 2.1.3 (Claude Code)\ndelivery_id: 9f2c\n---\n\n### Analysis\n\nBody.\n";
        let m = parse_message(written).unwrap();
        assert_eq!(
            (m.from.as_str(), m.kind, m.body.as_str()),
            ("claude", Some(MessageKind::Error), "### Analysis\n\nBody.")
        );
        assert_eq!(m.refs, ["src/a.py", "src/b c.py"]);
        assert_eq!((m.backend.as_deref(), m.model.as_deref()), (Some("claude"), Some("opus")));
        // The documented form: a multi-line list, and `to: council`.
        let documented = "---\nfrom: king\nto: council\ntimestamp: 2026-02-07T15:30:12Z\nrefs:\n  - path/to/file.py\n  - other.md\n---\n\nReview this.\n";
        let m = parse_message(documented).unwrap();
        assert_eq!(
            (m.to.clone(), m.refs.clone()),
            (vec!["all".to_string()], vec!["path/to/file.py".into(), "other.md".into()])
        );
        assert_eq!(member_name("Peasant Kin/09C9").unwrap(), "peasant-kin-09c9");
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        assert!(parse_message("no front matter").unwrap_err().to_string().contains("---"));
        assert!(parse_message("---\nfrom: x\n").unwrap_err().to_string().contains("closing"));
        let no_from = parse_message("---\nto: all\ntimestamp: 2026-02-16T19:02:08Z\n---\n\nb").unwrap_err();
        assert!(no_from.to_string().contains("from"));
        let bad_time = parse_message("---\nfrom: a\ntimestamp: yesterday\n---\n\nb").unwrap_err();
        assert!(format!("{bad_time:#}").contains("not a time"));
        let stray = parse_message("---\n- x\nfrom: a\n---\n\nb").unwrap_err();
        assert!(stray.to_string().contains("without a key"));
    }
}

/// Export → import → export is the identity, for any message kd can hold
/// (SPEC §10; `fuzz/` checks the reader on arbitrary files).
#[cfg(test)]
mod props {
    use proptest::prelude::*;

    use super::*;

    fn member() -> impl Strategy<Value = String> {
        "[a-z0-9][a-z0-9_.-]{0,14}".prop_filter("a member name", |n| member_name(n).is_ok_and(|m| &m == n))
    }

    fn message() -> impl Strategy<Value = Message> {
        (
            prop_oneof![Just("king".to_string()), member()],
            prop_oneof![Just(vec![ALL.to_string()]), prop::collection::vec(member(), 1..4)],
            prop::sample::select(vec![
                MessageKind::Agent,
                MessageKind::Error,
                MessageKind::Interrupted,
                MessageKind::System,
            ]),
            any::<String>(),
            0i64..4_000_000_000,
            prop::collection::vec("[A-Za-z0-9_./-]{1,24}", 0..3),
        )
            .prop_map(|(from, mut to, kind, body, secs, refs)| {
                // kd holds each addressee once (message.append, thread.import).
                let mut seen = std::collections::HashSet::new();
                to.retain(|n| seen.insert(n.clone()));
                let mut m = Message::new("t", 1, &from, &body);
                m.to = to;
                m.kind = if from == "king" { MessageKind::King } else { kind };
                m.created_at_ms = secs * 1000;
                m.refs = refs;
                m
            })
    }

    proptest! {
        #[test]
        fn export_import_export_is_identical(m in message()) {
            let first = write_message(&m).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let read = parse_message(&first).map_err(|e| TestCaseError::fail(format!("{e:#}\n{first}")))?;
            prop_assert_eq!(&read.body, &m.body);
            let mut again = Message::new("t", 1, &read.from, &read.body);
            again.to = read.to.clone();
            again.kind = read.kind.unwrap_or(if read.from == "king" { MessageKind::King } else { MessageKind::Agent });
            again.created_at_ms = read.created_at_ms;
            again.refs = read.refs.clone();
            let second = write_message(&again).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(first, second);
        }

        #[test]
        fn any_file_is_read_or_refused(text in prop_oneof![any::<String>(), "---\n([a-z]{1,8}: [ -~]{0,20}\n){0,6}---\n\n[ -~\n]{0,60}"]) {
            let _ = parse_message(&text);
        }
    }
}
