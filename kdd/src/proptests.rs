//! Property tests of what agents and clients control (SPEC §10), the same
//! invariants the `fuzz/` targets check with coverage guidance on nightly:
//! parsing never panics, whatever the line; the history holds every body
//! verbatim; mentions are names that occur in the text; configuration and
//! RPC parameters are accepted or refused, never a panic.

use proptest::prelude::*;

use crate::agent::parse;
use crate::config::Format;

/// Lines an agent might print: anything, and JSON shaped like each
/// backend's events with arbitrary values.
fn agent_line() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        (
            prop::sample::select(vec![
                "system", "assistant", "user", "result", "stream_event", "thread.started", "item.completed",
                "turn.completed", "turn.failed", "error", "message", "init", "tool_use", "tool_result", "content_block_delta",
            ]),
            any::<String>(),
            any::<i64>(),
        )
            .prop_map(|(t, s, n)| {
                serde_json::json!({"type": t, "subtype": s, "session_id": s, "text": s, "delta": {"type": "text_delta", "text": s},
                    "event": {"type": t, "delta": {"type": "text_delta", "text": s}, "index": n},
                    "item": {"type": "agent_message", "text": s, "id": s},
                    "message": {"content": [{"type": "text", "text": s}]}, "result": s, "is_error": n % 2 == 0,
                    "content": s, "role": "assistant", "delta_bool": true, "thread_id": s, "usage": {"input_tokens": n}})
                .to_string()
            }),
        "[ -~]{0,80}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn parsing_and_folding_any_lines_never_panics(lines in prop::collection::vec(agent_line(), 0..24)) {
        for format in [Format::Claude, Format::Codex, Format::Gemini, Format::Cursor, Format::Text] {
            let t = parse::transcript_of(format, lines.iter().map(String::as_str));
            // The count of what streamed is the text kept.
            prop_assert_eq!(t.chars() as usize, t.text().chars().count());
            let _ = t.answer();
        }
    }

    #[test]
    fn history_holds_every_body_verbatim(bodies in prop::collection::vec(any::<String>(), 0..12)) {
        let messages: Vec<kd_proto::types::Message> = bodies
            .iter()
            .enumerate()
            .map(|(i, b)| kd_proto::types::Message::new("t", i as u64 + 1, if i % 2 == 0 { "king" } else { "claude" }, b))
            .collect();
        let history = crate::prompt::history::format_thread_history(&messages, "codex", None);
        let mut at = 0;
        for (i, m) in messages.iter().enumerate() {
            let line = format!("{}: {}", m.from, m.body);
            let found = history[at..].find(&line);
            prop_assert!(found.is_some(), "message {} not verbatim in order", i + 1);
            at += found.unwrap_or(0) + line.len();
        }
        prop_assert!(history.ends_with("You are codex. Continue the discussion."));
    }

    #[test]
    // (A trailing '-' or '.' is sentence punctuation, not part of a mention.)
    fn mentions_are_names_written_in_the_text(body in any::<String>(), name in "[a-z]([a-z0-9_-]{0,9}[a-z0-9_])?") {
        for text in [body.clone(), format!("{body} @{name} {body}")] {
            for m in crate::prompt::mentions::mentions(&text) {
                prop_assert!(text.to_lowercase().contains(&format!("@{m}")), "{m:?} is not mentioned in {text:?}");
            }
        }
        let with = format!("ask @{name}, please");
        prop_assert!(crate::prompt::mentions::mentions(&with).contains(&name));
    }

    #[test]
    fn any_configuration_text_is_read_or_refused(text in prop_oneof![any::<String>(), json_text()]) {
        let _ = crate::config::raw::parse(&text, std::path::Path::new("config.json"));
    }

    #[test]
    fn any_rpc_parameters_are_checked_without_panicking(method in method_name(), params in json_text()) {
        if let Ok(raw) = serde_json::value::RawValue::from_string(params) {
            let _ = crate::rpc::params::check(&method, Some(&raw));
        }
    }
}

/// JSON values of any shape, as text.
fn json_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        any::<f64>().prop_map(|f| serde_json::json!(f)),
        any::<String>().prop_map(serde_json::Value::from),
        prop::sample::select(vec!["claude", "council", "members", "agents", "backend", "all"])
            .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    any::<String>(),
                    prop::sample::select(vec![
                        "council",
                        "members",
                        "agents",
                        "backend",
                        "thread",
                        "body",
                        "to",
                        "from",
                        "limit",
                        "timeout",
                        "auto_turns",
                        "lifecycle",
                        "idle_after",
                    ])
                    .prop_map(String::from),
                ],
                inner,
                0..6
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
    .prop_map(|v| v.to_string())
}

/// Every method of the API, and some that are not.
fn method_name() -> impl Strategy<Value = String> {
    let known: Vec<String> = kd_proto::openrpc::document()["methods"]
        .as_array()
        .map(|ms| ms.iter().filter_map(|m| m["name"].as_str().map(String::from)).collect())
        .unwrap_or_default();
    prop_oneof![prop::sample::select(known), any::<String>()]
}
