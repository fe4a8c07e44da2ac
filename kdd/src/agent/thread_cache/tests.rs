use std::sync::Arc;

use kd_proto::paths::DbLocation;
use kd_proto::types::{MessageKind, Thread};

use super::*;
use crate::db::Node;
use crate::db::messages::NewMessage;
use crate::db::threads::NewThread;
use crate::hub::Hub;

async fn open(dir: &tempfile::TempDir) -> Db {
    Db::open(&DbLocation::File(dir.path().join("kd.sqlite3")), Arc::new(Hub::new()), Node::here("test")).await.unwrap()
}

async fn thread(db: &Db, id: &str) -> String {
    let new = NewThread { id: Some(id.into()), ..NewThread::in_workspace("/tmp/ws") };
    db.create_thread(new).await.unwrap().id
}

async fn say(db: &Db, thread: &str, body: &str) {
    let m = NewMessage::new(thread, "king", vec!["all".into()], MessageKind::King, body.into());
    db.append_message(m).await.unwrap();
}

/// Changes a stored body behind kdd's back: a thread read again shows it,
/// a thread kept does not.
fn change_first_body(dir: &tempfile::TempDir, thread: &str) {
    let c = rusqlite::Connection::open(dir.path().join("kd.sqlite3")).unwrap();
    c.execute("UPDATE messages SET body = 'changed' WHERE thread_id = ?1 AND seq = 1", [thread]).unwrap();
}

fn bodies(messages: &[Message]) -> Vec<&str> {
    messages.iter().map(|m| m.body.as_str()).collect()
}

/// A database with thread `t1` of one message, `first`, read once whole
/// into a new cache.
async fn kept(dir: &tempfile::TempDir, first: &str) -> (Db, Thread, ThreadCache) {
    let db = open(dir).await;
    let t = db.create_thread(NewThread { id: Some("t1".into()), ..NewThread::in_workspace("/tmp/ws") }).await.unwrap();
    say(&db, &t.id, first).await;
    let cache = ThreadCache::default();
    assert_eq!(bodies(&cache.whole(&db, &t.id).await.unwrap()), [first]);
    (db, t, cache)
}

#[tokio::test]
async fn a_thread_kept_is_not_read_again_but_what_came_since_is() {
    let dir = tempfile::tempdir().unwrap();
    let (db, t, cache) = kept(&dir, "one").await;
    let t = t.id;
    change_first_body(&dir, &t);
    say(&db, &t, "two").await;
    say(&db, &t, "three").await;
    let all = cache.whole(&db, &t).await.unwrap();
    assert_eq!(bodies(&all), ["one", "two", "three"], "kept, then what came since");
    assert_eq!(all.iter().map(|m| m.seq).collect::<Vec<_>>(), [1, 2, 3]);
    // Nothing new: the same messages, read from nowhere.
    assert_eq!(bodies(&cache.whole(&db, &t).await.unwrap()), ["one", "two", "three"]);
    // More than a few small pages' worth since: read in one go, in order.
    for i in 0..(SMALL_PAGES as u32 * crate::db::messages::SMALL_ROWS + 5) {
        say(&db, &t, &format!("m{i}")).await;
    }
    let all = cache.whole(&db, &t).await.unwrap();
    assert_eq!(all.iter().map(|m| m.seq).collect::<Vec<_>>(), (1..=all.len() as u64).collect::<Vec<_>>());
    assert_eq!(all.last().unwrap().body, format!("m{}", SMALL_PAGES as u32 * crate::db::messages::SMALL_ROWS + 4));
    assert_eq!(all[0].body, "one");
}

#[tokio::test]
async fn a_thread_deleted_and_made_again_under_its_id_is_read_afresh() {
    let dir = tempfile::tempdir().unwrap();
    let (db, t, cache) = kept(&dir, "old").await;
    db.delete_thread(t.id.clone()).await.unwrap();
    // Made again once the clock has moved on (its moment tells it apart).
    while crate::db::now_ms() <= t.created_at_ms {
        tokio::task::yield_now().await;
    }
    let again = thread(&db, "t1").await;
    say(&db, &again, "new one").await;
    say(&db, &again, "new two").await;
    assert_eq!(bodies(&cache.whole(&db, &again).await.unwrap()), ["new one", "new two"]);
}

#[tokio::test]
async fn a_few_threads_are_kept_and_none_too_large() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(&dir).await;
    let cache = ThreadCache::default();
    let mut ids = Vec::new();
    for i in 0..=THREADS {
        let t = thread(&db, &format!("t{i}")).await;
        say(&db, &t, "hello").await;
        cache.whole(&db, &t).await.unwrap();
        ids.push(t);
    }
    assert_eq!(cache.threads(), ids[1..], "the least recently read went");
    // Read again, a thread becomes the most recent.
    cache.whole(&db, &ids[1]).await.unwrap();
    assert_eq!(cache.threads().last(), Some(&ids[1]));
    let big = thread(&db, "big").await;
    say(&db, &big, &"x".repeat(MAX_BYTES)).await;
    assert_eq!(cache.whole(&db, &big).await.unwrap().len(), 1);
    assert!(!cache.threads().contains(&big), "a thread past the bound is read, not kept");
}

#[tokio::test]
async fn members_of_a_round_share_the_thread_kept_without_a_copy() {
    let dir = tempfile::tempdir().unwrap();
    let (db, t, cache) = kept(&dir, "one").await;
    say(&db, &t.id, "two").await;
    // The first member's prompt still holds the thread when the next reads it.
    let first = cache.whole(&db, &t.id).await.unwrap();
    let second = cache.whole(&db, &t.id).await.unwrap();
    assert!(Arc::ptr_eq(&first, &second), "the same messages, not a copy");
    assert_eq!(bodies(&second), ["one", "two"]);
    // Something new: what was kept and is still held is extended in a copy.
    say(&db, &t.id, "three").await;
    let third = cache.whole(&db, &t.id).await.unwrap();
    assert_eq!(bodies(&third), ["one", "two", "three"]);
    assert_eq!(bodies(&first), ["one", "two"], "a held read is never changed under its holder");
}
