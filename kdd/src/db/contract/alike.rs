//! The engines compared write for write: the same script of table
//! operations, at the same times, on SQLite and on PostgreSQL, must return,
//! publish, log and leave the same — where [`super`]'s calls through
//! [`crate::db::Db`] cannot fix the clock. Only this suite touches both
//! engines' insides; neither engine imports the other.

use crate::db::Outbox;
use crate::db::pg::exchanges::tests::EventRow;

/// SQLite's event log, oldest first, as PostgreSQL's is read
/// ([`crate::db::pg::exchanges::tests::pg_events`]).
fn sqlite_events(conn: &rusqlite::Connection) -> Vec<EventRow> {
    let mut stmt = conn.prepare(crate::db::pg::exchanges::tests::EVENTS).unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?, r.get(6)?, r.get(7)?, r.get(8)?))
        })
        .unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

mod compose {
    use super::{Outbox, sqlite_events};
    use crate::db::pg::compose::tests::{council, new_thread, note, on_postgres, question, routing};
    use crate::db::pg::exchanges::tests::db;
    use crate::db::threads::NewThread;

    /// The same writes on SQLite: what each returned, published and logged.
    fn on_sqlite() -> Vec<String> {
        use crate::db::sqlite::compose as s;
        let conn = crate::db::sqlite::schema::in_memory_with_thread("t1");
        let mut out = Outbox::default();
        let mut got = vec![];
        let asked = s::ask(&conn, 20, None, vec![note("t1", "context"), question("t1")], council(), &mut out).unwrap();
        got.push(format!("{asked:?}"));
        let asked = s::ask(&conn, 21, Some(new_thread("t2")), vec![question("")], council(), &mut out).unwrap();
        got.push(format!("{asked:?}"));
        // A second King message supersedes the first's exchange.
        let asked = s::ask(&conn, 22, None, vec![question("t1")], council(), &mut out).unwrap();
        got.push(format!("{asked:?}"));
        got.push(format!(
            "{:?}",
            s::create_with_message(&conn, 23, new_thread("t3"), note("", "hi"), &mut out).unwrap()
        ));
        let imported = vec![(5, question("")), (6, note("", "an old answer"))];
        let t = NewThread { origin: Some("kingdom:/x".into()), ..new_thread("t4") };
        got.push(format!("{:?}", s::import(&conn, 24, t.clone(), 4, imported.clone(), &mut out).unwrap()));
        got.push(format!("{:?}", s::import(&conn, 25, t, 4, imported, &mut out)));
        got.push(format!("{:?}", s::route(&conn, 26, routing("t1", false), &mut out).unwrap()));
        got.push(format!("{:?}", s::route(&conn, 27, routing("t1", true), &mut out).unwrap()));
        got.push(format!("{:?}", out.events));
        got.push(format!("{}", out.threads_added));
        got.push(format!("{:?}", sqlite_events(&conn)));
        got
    }

    #[tokio::test]
    async fn questions_threads_imports_and_routes_are_written_as_sqlite_writes_them() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let sqlite = on_sqlite();
        let postgres = on_postgres(&c).await.unwrap();
        for (i, (p, s)) in postgres.iter().zip(&sqlite).enumerate() {
            assert_eq!(p, s, "write {i}");
        }
        assert_eq!(postgres.len(), sqlite.len());
        assert!(sqlite[5].contains("AlreadyImported"), "{}", sqlite[5]);
    }
}

mod cost {
    use kd_proto::types::CostBy;
    use rusqlite::Connection;

    use super::Outbox;
    use crate::db::DbError;
    use crate::db::cost::Filter;
    use crate::db::pg::cost::tests::{D0, DAY, message, new_thread, postgres, run_info, scenario};
    use crate::db::pg::testing;
    use crate::db::sqlite::{cost, schema};

    fn sqlite() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kd.sqlite3");
        let mut conn = Connection::open(&path).unwrap();
        schema::configure(&conn).unwrap();
        schema::migrate(&mut conn, &path).unwrap();
        let mut out = Outbox::default();
        for (id, ws) in [("a", "/w"), ("b", "/w"), ("c", "/v")] {
            crate::db::sqlite::threads::create(&conn, D0, new_thread(id, ws), &mut out).unwrap();
        }
        for (thread, member, at, x, round, run) in scenario() {
            let m = crate::db::sqlite::messages::append(&conn, at, message(thread, member, &run), &mut out).unwrap();
            if let Some(member) = member {
                cost::record(&conn, &run_info(thread, member, x, round), &m).unwrap();
            }
        }
        (dir, conn)
    }

    /// Every grouping and filter gives SQLite's report, row for row.
    #[tokio::test]
    async fn reports_and_exchange_costs_are_sqlites() {
        let Some((pg, _db)) = testing::fresh().await else { return };
        postgres(&pg).await;
        let (_dir, conn) = sqlite();
        let bys = [CostBy::Member, CostBy::Thread, CostBy::Day, CostBy::Exchange, CostBy::Round];
        let mut compared = 0;
        for thread in [None, Some("a"), Some("b")] {
            for workspace in [None, Some("/w"), Some("/v")] {
                for since in [None, Some(D0 + 25), Some(D0 + DAY + 15), Some(D0 - 2 * DAY)] {
                    let f = Filter {
                        thread: thread.map(Into::into),
                        workspace: workspace.map(Into::into),
                        since_ms: since,
                    };
                    for by in bys {
                        let want = cost::report(&conn, &f, by);
                        let got = pg.cost_report(f.clone(), by).await;
                        match (want, got) {
                            (Ok(want), Ok(got)) => {
                                assert_eq!(
                                    serde_json::to_value(&got).unwrap(),
                                    serde_json::to_value(&want).unwrap(),
                                    "{f:?} by {by:?}"
                                );
                                compared += want.rows.len();
                            }
                            (Err(DbError::Invalid(a)), Err(DbError::Invalid(b))) => assert_eq!(a, b),
                            (want, got) => panic!("{f:?} by {by:?}: {want:?} vs {got:?}"),
                        }
                    }
                }
            }
        }
        assert!(compared > 50, "the reports hold rows: {compared}");
        for (thread, king) in [("a", 1), ("b", 1), ("c", 7), ("a", 2)] {
            assert_eq!(
                pg.exchange_cost(thread.into(), king).await.unwrap(),
                cost::exchange(&conn, thread, king).unwrap(),
                "{thread} {king}"
            );
        }
        let f = Filter { thread: Some("nope".into()), ..Filter::default() };
        assert!(matches!(pg.cost_report(f, CostBy::Member).await, Err(DbError::NotFound(_))));
        // Deleting a thread takes its sums with it.
        pg.conn().await.unwrap().execute("DELETE FROM threads WHERE id = 'a'", &[]).await.unwrap();
        let all = pg.cost_report(Filter::default(), CostBy::Thread).await.unwrap();
        assert_eq!(all.rows.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(), ["b", "c"]);
    }
}

mod exchanges {
    use kd_proto::types::MessageKind;

    use super::{Outbox, sqlite_events};
    use crate::db::pg::exchanges::tests::{council_plan, db, error_of, life_on_postgres, retry};

    /// An exchange's life on SQLite: retried, cut, resumed, a step given up,
    /// stopped with a notice, the thread's and every exchange stopped.
    fn life_on_sqlite() -> Vec<String> {
        use crate::db::sqlite::exchanges::{self as x, life};
        let conn = crate::db::sqlite::schema::in_memory_with_thread("t1");
        let mut out = Outbox::default();
        let mut got = vec![];
        let first = x::begin(&conn, 10, &council_plan(1, &["claude", "codex"])).unwrap();
        got.push(format!("{:?}", life::begin_settling(&conn, 11, &retry()).unwrap()));
        got.push(format!("{:?}", life::begin_settling(&conn, 12, &retry()).unwrap()));
        got.push(format!("{:?}", life::cut_open(&conn, 13).unwrap()));
        let ex = x::get(&conn, first.id).unwrap().unwrap();
        life::resumed(&conn, 14, &ex).unwrap();
        let claude = x::steps(&conn, first.id).unwrap()[0].id;
        got.push(format!(
            "{:?}",
            life::give_up(&conn, 15, claude, error_of("claude"), "cut too often", &mut out).unwrap()
        ));
        got.push(format!("{:?}", life::give_up(&conn, 16, claude, error_of("claude"), "again", &mut out).unwrap()));
        let notice = || {
            crate::db::messages::NewMessage::new("t1", "kd", vec!["king".into()], MessageKind::System, "budget".into())
        };
        got.push(format!("{:?}", life::stop_with_notice(&conn, 17, first.id, "budget", notice(), &mut out).unwrap()));
        got.push(format!("{:?}", life::stop_with_notice(&conn, 18, first.id, "budget", notice(), &mut out).unwrap()));
        let second = x::begin(&conn, 19, &council_plan(5, &["codex"])).unwrap();
        got.push(format!("{:?}", life::stop_thread(&conn, 20, "t1", "kd cancel").unwrap()));
        x::begin(&conn, 21, &council_plan(6, &["codex"])).unwrap();
        got.push(format!("{:?}", life::stop_all_open(&conn, 22, "no resume").unwrap()));
        got.push(format!("{:?}", life::open_at(&conn, "t1", 6).unwrap()));
        for id in [first.id, second.id] {
            got.push(format!("{:?} {:?}", x::get(&conn, id).unwrap(), x::steps(&conn, id).unwrap()));
        }
        got.push(format!("{:?}", out.events));
        got.push(format!("{:?}", sqlite_events(&conn)));
        got
    }

    #[tokio::test]
    async fn an_exchanges_life_is_written_as_sqlite_writes_it() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let sqlite = life_on_sqlite();
        let postgres = life_on_postgres(&c).await.unwrap();
        for (i, (p, s)) in postgres.iter().zip(&sqlite).enumerate() {
            assert_eq!(p, s, "step {i} of the script");
        }
        assert_eq!(postgres.len(), sqlite.len());
        assert!(
            sqlite.last().is_some_and(|e| e.contains("exchange.resume") && e.contains("exchange.stop")),
            "{sqlite:?}"
        );
    }
}

mod runs {
    use super::{Outbox, sqlite_events};
    use crate::db::exchanges::{Opened, StepKey};
    use crate::db::fixtures::run_of;
    use crate::db::pg::exchanges::tests::db;
    use crate::db::pg::runs::tests::{Left, ROWS, SESSION, answered, council, king, pg_script};
    use crate::db::runs::Finish;
    use kd_proto::types::RunStatus;

    fn sqlite_script(f: Finish) -> Left {
        use crate::db::sqlite::{acks as s_acks, exchanges as s_x, messages as s_messages, runs as s_runs};
        let conn = crate::db::sqlite::schema::in_memory_with_thread("t1");
        let mut out = Outbox::default();
        s_messages::append(&conn, 5, king(), &mut out).unwrap();
        s_acks::owe(&conn, "b-1", "t1", 1, &["claude".to_string()]).unwrap();
        conn.execute(SESSION, []).unwrap();
        let x = s_x::begin(&conn, 10, &council()).unwrap();
        let Opened::Step(s) = s_x::open_step(&conn, 11, x.id, &StepKey::answer(1, "claude")).unwrap() else {
            panic!("open")
        };
        s_x::plan_done(&conn, 12, x.id, None).unwrap();
        let run = run_of("r-1", "claude");
        s_runs::insert(&conn, 21, &run, Some(s.id), &mut out).unwrap();
        s_runs::started(&conn, 22, &run, 42, Some(9), Some("s-1"), &mut out).unwrap();
        s_runs::append_partial(&conn, "r-1", "ye").unwrap();
        let m = s_runs::finish(&conn, 30, &run, f, &mut out).unwrap();
        let mut rows = vec![];
        for sql in ROWS {
            let mut stmt = conn.prepare(sql).unwrap();
            let n = stmt.column_count();
            let mut q = stmt.query([]).unwrap();
            while let Some(r) = q.next().unwrap() {
                let cols: Vec<String> = (0..n)
                    .map(|i| match r.get_ref(i).unwrap() {
                        rusqlite::types::ValueRef::Null => "NULL".into(),
                        rusqlite::types::ValueRef::Integer(v) => v.to_string(),
                        rusqlite::types::ValueRef::Real(v) => v.to_string(),
                        rusqlite::types::ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
                        rusqlite::types::ValueRef::Blob(_) => "BLOB".into(),
                    })
                    .collect();
                rows.push(cols.join("|"));
            }
        }
        (format!("{:?}", out.events), format!("{m:?}"), sqlite_events(&conn), rows)
    }

    #[tokio::test]
    async fn a_run_recorded_and_finished_leaves_what_sqlite_leaves_with_the_same_events_in_the_same_order() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let sqlite = sqlite_script(answered());
        let postgres = pg_script(&c, answered()).await.unwrap();
        assert_eq!(postgres.0, sqlite.0, "published");
        assert_eq!(postgres.1, sqlite.1, "the message");
        assert_eq!(postgres.2, sqlite.2, "the event log");
        assert_eq!(postgres.3, sqlite.3, "the rows");
        assert!(sqlite.0.contains("RunFinished") && sqlite.3.iter().any(|r| r.starts_with("done|")), "{sqlite:?}");
        assert!(sqlite.3.iter().any(|r| r.starts_with("t1|2|claude|1|1|")), "a cost row: {sqlite:?}");
        assert!(sqlite.3.iter().any(|r| r.starts_with("b-1|claude|30|answer")), "the ack settled: {sqlite:?}");
    }

    #[tokio::test]
    async fn a_run_that_fails_leaves_what_sqlite_leaves() {
        let Some((pg, _db)) = db().await else { return };
        let c = pg.conn().await.unwrap();
        let failed = || Finish {
            status: RunStatus::TimedOut,
            error: Some("too slow".into()),
            to: vec!["codex".into()],
            ..answered()
        };
        let sqlite = sqlite_script(failed());
        let postgres = pg_script(&c, failed()).await.unwrap();
        assert_eq!(postgres, sqlite);
    }
}
