//! `thread.messages` written as JSON straight from the rows: no
//! [`Message`] is built, and the page is serialised once, in the reader
//! thread, instead of once into values and again by the server. The shape
//! is `Message`'s serde form, field for field (a test compares the two).

use std::borrow::Cow;

use kd_proto::types::{MessageKind, Purpose, RouteType, RunMeta};
use serde::Serialize;

/// A list column (`["all"]`), read without copying what needs no unescaping;
/// the two most rows hold are known without parsing.
pub(crate) type List<'a> = Vec<Cow<'a, str>>;

pub(crate) fn list_of(text: &str) -> List<'_> {
    match text {
        "[]" => Vec::new(),
        r#"["all"]"# => vec![Cow::Borrowed("all")],
        _ => serde_json::from_str(text).unwrap_or_default(),
    }
}

/// One row in `Message`'s serde form, borrowed from the row.
#[derive(Serialize)]
pub(crate) struct RowJson<'a> {
    pub(crate) thread: &'a str,
    pub(crate) seq: u64,
    pub(crate) from: &'a str,
    pub(crate) to: List<'a>,
    pub(crate) cc: List<'a>,
    pub(crate) reply_to: Option<u64>,
    pub(crate) kind: MessageKind,
    pub(crate) body: &'a str,
    pub(crate) round: Option<u32>,
    pub(crate) created_at_ms: i64,
    pub(crate) run: Option<RunMeta>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) replaces: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) refs: List<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) route: Option<RouteType>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) purpose: Option<Purpose>,
}
