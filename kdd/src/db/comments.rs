//! Line comments on members' work in the registry (issue 34): the
//! vocabulary both engines follow. A comment is added pending, sent once
//! (with the King's message that carried it), resolved once; resolving one
//! already resolved changes nothing. The SQL is each engine's
//! (`sqlite::comments`, `pg::comments`).

/// Most comments one work (a member's on a thread) holds: past it a new
/// one is refused.
pub const MAX_PER_WORK: u32 = 1000;

/// The columns, in the order both engines read them.
pub const COLUMNS: &str = "id, thread_id, member, author, path, line, end_line, commit_id, body, hunk, state, \
     created_at, sent_seq, sent_at, resolved_by, resolved_at";
