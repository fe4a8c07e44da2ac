//! Rows the unit tests of sessions, locks, inboxes, acknowledgements,
//! lifecycle and work stand on (threads, messages, runs), written directly,
//! and the event log read back.

use serde_json::Value;

use super::Pg;

/// A thread `id` in workspace `/w/<id>`, active, last active at 1.
pub(crate) async fn thread(pg: &Pg, id: &str) {
    let c = pg.conn().await.unwrap();
    c.execute(
        "INSERT INTO threads (id, workspace, lineage, created_at, last_activity_at) VALUES ($1, '/w/' || $1, 'trunk', 1, 1)",
        &[&id],
    )
    .await
    .unwrap();
}

/// Message `seq` of `thread` from `sender`.
pub(crate) async fn message(pg: &Pg, thread: &str, seq: i64, sender: &str, kind: &str, body: &str) {
    let c = pg.conn().await.unwrap();
    c.execute(
        "INSERT INTO messages (thread_id, seq, sender, kind, body, created_at) VALUES ($1, $2, $3, $4, $5, 1)",
        &[&thread, &seq, &sender, &kind, &body],
    )
    .await
    .unwrap();
    c.execute("UPDATE threads SET last_seq = greatest(last_seq, $2) WHERE id = $1", &[&thread, &seq]).await.unwrap();
}

/// Run `id` of `member` on `thread` in `status`.
pub(crate) async fn run(pg: &Pg, id: &str, thread: &str, member: &str, status: &str) {
    let c = pg.conn().await.unwrap();
    c.execute(
        "INSERT INTO runs (id, thread_id, member, backend, status, started_at) VALUES ($1, $2, $3, $3, $4, 1)",
        &[&id, &thread, &member, &status],
    )
    .await
    .unwrap();
}

/// The data of the events of `kind`, oldest first.
pub(crate) async fn events(pg: &Pg, kind: &str) -> Vec<Value> {
    let c = pg.conn().await.unwrap();
    let rows = c.query("SELECT data FROM conversation_events WHERE kind = $1 ORDER BY id", &[&kind]).await.unwrap();
    rows.iter().map(|r| serde_json::from_str(r.get::<_, &str>(0)).unwrap()).collect()
}

/// A pid no process has: a child that has exited and been reaped.
// No reaper runs in unit tests: a child spawned directly is safe here.
#[allow(clippy::disallowed_methods)]
pub(crate) fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}
