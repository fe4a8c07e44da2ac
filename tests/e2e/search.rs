//! Full-text search (issue 11, item 6): ranking, filters, snippets, titles
//! and summaries, the index kept in step with writes and deletes, bad
//! queries refused clearly, and `kd search`.

use kd_client::ClientError;
use kd_client::prelude::*;
use kd_proto::ErrorCode;
use kd_tests::{Kdd, append, run};

#[tokio::test(flavor = "multi_thread")]
async fn search_ranks_filters_and_marks_hits_and_follows_deletes() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t1 = kd_tests::new_thread(&c, "/repo").await;
    let t2 = kd_tests::new_thread(&c, "/repo").await;
    append(&c, &t1, "king", "How should we shard the orders table?", &[]).await;
    append(&c, &t1, "claude", "Shard by tenant; shard keys must be stable. Sharding by date skews.", &[]).await;
    append(&c, &t1, "codex", "An index on created_at comes first.", &[]).await;
    append(&c, &t2, "claude", "The cache could shard later.", &[]).await;
    c.thread_set_title(t2.clone(), "Cache sharding plan".into()).await.unwrap();

    let hits = c.search_query("shard".into(), None, None, None, None).await.unwrap();
    // Threads whose title matches first (t1 took its title from the first
    // question), then messages best first; words match their forms
    // (shard, sharding).
    let found: Vec<(&str, Option<u64>, &str)> =
        hits.iter().map(|h| (h.thread.as_str(), h.seq, h.from.as_str())).collect();
    assert_eq!(
        found,
        [
            (t2.as_str(), None, "title"),
            (t1.as_str(), None, "title"),
            (t1.as_str(), Some(2), "claude"),
            (t2.as_str(), Some(1), "claude"),
            (t1.as_str(), Some(1), "king"),
        ],
        "{hits:#?}"
    );
    assert_eq!(hits[0].snippet, "Cache «sharding» plan");
    assert!(hits[2].snippet.contains("«Shard» by tenant; «shard» keys"), "{}", hits[2].snippet);
    assert!(hits.windows(2).skip(2).all(|w| w[0].rank <= w[1].rank), "best first");
    let only = c.search_query("shard".into(), Some(t1.clone()), Some("king".into()), None, None).await.unwrap();
    assert_eq!(only.iter().map(|h| h.seq).collect::<Vec<_>>(), [Some(1)]);
    let phrase = c.search_query("\"orders table\"".into(), None, None, None, None).await.unwrap();
    assert_eq!(phrase.iter().map(|h| h.seq).collect::<Vec<_>>(), [None, Some(1)], "the title and the question");
    let prefix = c.search_query("creat*".into(), None, None, None, None).await.unwrap();
    assert_eq!(prefix.iter().map(|h| h.seq).collect::<Vec<_>>(), [Some(3)]);
    let bad = ClientError::from(c.search_query("\"unclosed".into(), None, None, None, None).await.unwrap_err());
    assert_eq!(bad.code(), Some(ErrorCode::InvalidArgument), "{bad}");
    assert!(bad.to_string().contains("cannot read the search query"), "{bad}");

    // kd search prints the place and the marked snippet.
    let mut k = kdd.kd();
    k.args(["search", "index", "first"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains(&format!("thread {t1} · #3 · codex")), "{}", out.stdout);
    assert!(out.stdout.contains("An «index» on created_at comes «first»."), "{}", out.stdout);

    // A deleted thread is gone from the index too.
    c.thread_delete(t1.clone(), None).await.unwrap();
    let after = c.search_query("shard".into(), None, None, None, None).await.unwrap();
    assert!(after.iter().all(|h| h.thread == t2), "{after:#?}");
    let mut k = kdd.kd();
    k.args(["search", "tenant"]);
    let out = run(k).await;
    assert_eq!(out.status.code(), Some(1), "no match: {}", out.stdout);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_column_filter_searches_the_index_that_has_it_and_a_bare_star_is_refused() {
    let kdd = Kdd::start();
    let c = kdd.client().await;
    let t = kd_tests::new_thread(&c, "/repo").await;
    append(&c, &t, "king", "How should we shard the orders table?", &[]).await;
    append(&c, &t, "claude", "Shard by tenant.", &[]).await;
    // A branch whose summary (written at archive) speaks of shards.
    let b = kd_tests::new_thread(&c, "/repo").await;
    c.thread_set_title(b.clone(), "Cache plan".into()).await.unwrap();
    append(&c, &b, "king", "Where does the shard map live?", &[]).await;
    c.thread_archive(b.clone()).await.unwrap();

    let found = |hits: Vec<kd_proto::types::SearchHit>| -> Vec<(String, Option<u64>, String)> {
        let mut v: Vec<_> = hits.into_iter().map(|h| (h.thread, h.seq, h.from)).collect();
        v.sort();
        v
    };
    let search = |q: &str| c.search_query(q.into(), None, None, None, None);
    // (The archive may also post the branch's summary to the trunk, from kd.)
    let mut body = found(search("body:shard").await.unwrap());
    body.retain(|(_, _, from)| from != "kd");
    let mut expected = vec![
        (t.clone(), Some(1), "king".to_string()),
        (t.clone(), Some(2), "claude".to_string()),
        (b.clone(), Some(1), "king".to_string()),
    ];
    expected.sort();
    assert_eq!(body, expected, "only messages");
    assert_eq!(found(search("title:shard").await.unwrap()), [(t.clone(), None, "title".to_string())]);
    assert_eq!(found(search("summary:shard").await.unwrap()), [(b.clone(), None, "summary".to_string())]);
    assert_eq!(found(search("{title summary}:cache").await.unwrap()), [(b.clone(), None, "title".to_string())]);
    let in_t = c.search_query("title:shard".into(), Some(t.clone()), None, None, None).await.unwrap();
    assert_eq!(found(in_t), [(t.clone(), None, "title".to_string())]);
    // With `from`, only messages are searched: a thread column says so.
    let e = ClientError::from(
        c.search_query("title:shard".into(), None, Some("king".into()), None, None).await.unwrap_err(),
    );
    assert!(e.to_string().contains("only message bodies are searched"), "{e}");

    // What no index has, and what FTS5 cannot read, is the caller's error.
    for bad in ["*", "nosuch:shard", "body:shard OR title:shard", "AND"] {
        let e = ClientError::from(search(bad).await.unwrap_err());
        assert_eq!(e.code(), Some(ErrorCode::InvalidArgument), "{bad}: {e}");
        assert!(e.to_string().contains("cannot read the search query"), "{bad}: {e}");
    }
    let mut k = kdd.kd();
    k.args(["search", "body:tenant"]);
    let out = run(k).await;
    assert!(out.status.success(), "{}", out.stderr);
    assert!(out.stdout.contains("«Shard» by «tenant»") || out.stdout.contains("by «tenant»"), "{}", out.stdout);
}
