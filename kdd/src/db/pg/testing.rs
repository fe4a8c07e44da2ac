//! Throwaway databases for the PostgreSQL engine's unit tests.
//!
//! `KD_TEST_PG` names a cluster (`.ci/pg start` prints it): a URL of a
//! database the tests may connect to in order to create their own. Each
//! test gets a database of its own, `CREATE DATABASE kd_t_<random> TEMPLATE
//! kd_template_<hash of the migrations>`: the template is created and
//! migrated once per cluster (under an advisory lock, whatever number of
//! test processes and threads start together), a changed migration gives a
//! new template, and copying it is much faster than migrating. The test's
//! database is dropped when its [`TestDb`] is.
//!
//! Without `KD_TEST_PG` a test says it is skipped and passes, except under
//! `CI` (set and not `false`/`0`/empty), where it fails: CI always has a
//! cluster.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use tokio::sync::OnceCell;
use tokio_postgres::Client;

use super::{Pg, schema, url};
use crate::hub::Hub;

/// A database of one test, dropped with it.
pub(crate) struct TestDb {
    admin: String,
    name: String,
    url: String,
}

impl TestDb {
    /// The database's URL (for a second [`Pg::open`]).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Its own thread and runtime: this may run inside a test's runtime.
        let dropped = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
            rt.block_on(async {
                let c = connect(&admin).await?;
                c.batch_execute(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                    .await
                    .map_err(|e| e.to_string())
            })
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("cannot drop test database {}: {e}", self.name);
        }
    }
}

/// A migrated database of its own and the engine on it; `None` (the test
/// passes, saying it was skipped) when `KD_TEST_PG` is unset outside CI.
pub(crate) async fn fresh() -> Option<(Pg, TestDb)> {
    let admin = admin()?;
    let template = TEMPLATE.get_or_init(|| template(admin.clone())).await;
    let template = match template {
        Ok(t) => t,
        Err(e) => panic!("cannot make the template database: {e}"),
    };
    let db = create(&admin, Some(template)).await;
    let pg = match Pg::open(db.url(), Arc::new(Hub::new())).await {
        Ok(pg) => pg,
        Err(e) => panic!("cannot open test database {}: {e}", db.name),
    };
    Some((pg, db))
}

/// An empty database of its own (not migrated).
pub(crate) async fn empty() -> Option<TestDb> {
    let admin = admin()?;
    Some(create(&admin, None).await)
}

/// `KD_TEST_PG`, or `None` after saying the test is skipped.
fn admin() -> Option<String> {
    match std::env::var("KD_TEST_PG") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            let ci = std::env::var("CI").ok();
            if ci.is_some_and(|v| !v.is_empty() && v != "false" && v != "0") {
                panic!("KD_TEST_PG is unset under CI: the PostgreSQL engine's tests need a cluster (.ci/pg start)");
            }
            eprintln!("skipped: KD_TEST_PG unset");
            None
        }
    }
}

static TEMPLATE: OnceCell<Result<String, String>> = OnceCell::const_new();

/// Creates and migrates the template of this version of the migrations,
/// unless a test process already did.
async fn template(admin: String) -> Result<String, String> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    schema::MIGRATIONS.hash(&mut hasher);
    let name = format!("kd_template_{:016x}", hasher.finish());
    let c = connect(&admin).await?;
    let err = |e: tokio_postgres::Error| format!("{}", crate::db::DbError::from(e));
    // Session-level: held across the CREATE DATABASE (no transaction).
    c.execute("SELECT pg_advisory_lock(hashtextextended('kd.test.template', 0))", &[]).await.map_err(err)?;
    let exists = c.query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name]).await.map_err(err)?.is_some();
    if !exists {
        let building = format!("{name}_building");
        c.batch_execute(&format!("DROP DATABASE IF EXISTS \"{building}\" WITH (FORCE)")).await.map_err(err)?;
        c.batch_execute(&format!("CREATE DATABASE \"{building}\"")).await.map_err(err)?;
        let pg = Pg::open_sized(&with_db(&admin, &building), Arc::new(Hub::new()), 1, None)
            .await
            .map_err(|e| e.to_string())?;
        pg.close().await;
        drop(pg);
        // Renamed only once migrated: a template that exists is complete.
        c.batch_execute(&format!("ALTER DATABASE \"{building}\" RENAME TO \"{name}\"")).await.map_err(err)?;
    }
    c.execute("SELECT pg_advisory_unlock(hashtextextended('kd.test.template', 0))", &[]).await.map_err(err)?;
    Ok(name)
}

async fn create(admin: &str, template: Option<&str>) -> TestDb {
    let name = format!("kd_t_{}", crate::db::random_id(12));
    let c = match connect(admin).await {
        Ok(c) => c,
        Err(e) => panic!("cannot connect to KD_TEST_PG: {e}"),
    };
    let sql = match template {
        Some(t) => format!("CREATE DATABASE \"{name}\" TEMPLATE \"{t}\""),
        None => format!("CREATE DATABASE \"{name}\""),
    };
    if let Err(e) = c.batch_execute(&sql).await {
        panic!("{sql}: {}", crate::db::DbError::from(e));
    }
    TestDb { admin: admin.to_string(), url: with_db(admin, &name), name }
}

/// `url` naming database `db` instead of its own.
fn with_db(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let after_scheme = base.find("://").map(|i| i + 3).unwrap_or(0);
    let authority_end = base[after_scheme..].find('/').map(|i| after_scheme + i).unwrap_or(base.len());
    format!("{}/{db}{query}", &base[..authority_end])
}

/// One connection, outside any pool.
async fn connect(url: &str) -> Result<Client, String> {
    let target = url::parse(url).map_err(|e| e.to_string())?;
    match &target.tls {
        url::Tls::None => {
            let (client, conn) = target.config.connect(tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            Ok(client)
        }
        url::Tls::Verified(roots) => {
            let tls =
                tokio_postgres_rustls::MakeRustlsConnect::new(url::rustls_config(roots).map_err(|e| e.to_string())?);
            let (client, conn) = target.config.connect(tls).await.map_err(|e| e.to_string())?;
            tokio::spawn(conn);
            Ok(client)
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn with_db_replaces_only_the_database() {
        assert_eq!(super::with_db("postgres://u@%2Ftmp%2Fx/postgres", "kd_t"), "postgres://u@%2Ftmp%2Fx/kd_t");
        assert_eq!(super::with_db("postgres://u@h:5/p?sslmode=disable", "d"), "postgres://u@h:5/d?sslmode=disable");
        assert_eq!(super::with_db("postgresql://h", "d"), "postgresql://h/d");
    }
}
