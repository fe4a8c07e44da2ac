//! The registry a test's `kdd` runs on, and what tests read of it directly.
//!
//! `KD_TEST_DB` picks the engine of every end-to-end test: `sqlite` (the
//! default) gives each [`crate::Kdd`] a database file in its temporary
//! directory; `postgres` gives it a database of its own, made for it
//! (`CREATE DATABASE kd_e2e_<random>`) on the cluster `KD_TEST_PG` names
//! (`eval "$(.ci/pg start)"` starts a throwaway one) and dropped with it.
//! Either way kdd gets it as `--db` (or `KD_DB`) from [`TestDb::arg`].
//!
//! A test that reads or changes the registry behind kdd's back does it
//! through [`TestDb::query`] and [`TestDb::execute`]: one SQL text with
//! `$1`, `$2`… parameters, run on whichever engine holds the database.
//! A test about the SQLite file itself (its mode, its WAL, a corrupt or
//! read-only file…) begins with [`sqlite_only!`](crate::sqlite_only).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The engine the end-to-end tests run kdd on (`KD_TEST_DB`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

/// The engine of this test run: `KD_TEST_DB` (`sqlite`, the default, or
/// `postgres`).
pub fn engine() -> Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    *ENGINE.get_or_init(|| engine_named(std::env::var("KD_TEST_DB").ok().as_deref()))
}

fn engine_named(name: Option<&str>) -> Engine {
    match name.unwrap_or_default() {
        "" | "sqlite" => Engine::Sqlite,
        "postgres" | "postgresql" | "pg" => Engine::Postgres,
        other => panic!("KD_TEST_DB={other}: expected sqlite or postgres"),
    }
}

/// Says that `test` (a path as `type_name` gives it) does not run on this
/// engine and why; [`sqlite_only!`](crate::sqlite_only) calls it. With
/// `KD_TEST_SQLITE_ONLY` naming a file (`.ci/run` sets it), the line is
/// also appended there, for the list printed at the end of the run.
pub fn not_on_this_engine(test: &str, why: &str) {
    let test = test.trim_end_matches("::here");
    let test = test.split("::{{closure}}").next().unwrap_or(test);
    let line = format!("{test}: {why}");
    eprintln!("sqlite only, not run on {:?}: {line}", engine());
    if let Some(path) = std::env::var_os("KD_TEST_SQLITE_ONLY") {
        use std::io::Write;
        let file = std::fs::OpenOptions::new().create(true).append(true).open(path);
        if let Ok(mut f) = file {
            let _ = writeln!(f, "{line}");
        }
    }
}

/// Returns from the test at once when the tests run on PostgreSQL, saying
/// why: for a test about the SQLite file itself (its mode, WAL, a corrupt,
/// read-only or newer file…), which has no meaning on another engine.
#[macro_export]
macro_rules! sqlite_only {
    ($why:expr) => {
        if $crate::registry::engine() != $crate::registry::Engine::Sqlite {
            fn here() {}
            $crate::registry::not_on_this_engine(::std::any::type_name_of_val(&here), $why);
            return;
        }
    };
}

/// A test's registry: a SQLite file, or a PostgreSQL database made for the
/// test and dropped with this value.
pub enum TestDb {
    File(PathBuf),
    Postgres(PgDb),
}

/// A database of the test cluster, dropped (best effort) when this is.
pub struct PgDb {
    /// The cluster's admin URL (`KD_TEST_PG`).
    admin: String,
    /// The database's own URL, as kdd gets it.
    pub url: String,
    pub name: String,
    /// Whether it is dropped with this value (the first node's is; a
    /// second node on it shares it).
    owned: bool,
    /// What a kdd on a PostgreSQL registry keeps on its machine (its log,
    /// members' worktrees) goes in `$XDG_DATA_HOME/kd`: here, not the
    /// home of whoever runs the tests (each node its own).
    data_home: tempfile::TempDir,
}

impl TestDb {
    /// A new, empty registry for a test on the engine of the run: `file`
    /// (which need not exist yet) on SQLite, a new database on PostgreSQL.
    pub fn fresh(file: PathBuf) -> TestDb {
        match engine() {
            Engine::Sqlite => TestDb::File(file),
            Engine::Postgres => TestDb::Postgres(PgDb::create()),
        }
    }

    /// The SQLite file `path`, whatever the engine of the run.
    pub fn file(path: PathBuf) -> TestDb {
        TestDb::File(path)
    }

    /// What kdd is given as `--db` or `KD_DB`: the file's path, or the URL.
    pub fn arg(&self) -> OsString {
        match self {
            TestDb::File(p) => p.clone().into_os_string(),
            TestDb::Postgres(pg) => OsString::from(&pg.url),
        }
    }

    /// The environment of a kdd on this registry started by something
    /// else than `--db` (`kd`'s auto-start, `kd daemon start`, a service
    /// manager): `KD_DB`, and [`TestDb::data_env`].
    pub fn env(&self) -> Vec<(&'static str, OsString)> {
        let mut env = vec![("KD_DB", self.arg())];
        env.extend(self.data_env());
        env
    }

    /// What a kdd on this registry needs in its environment besides where
    /// the registry is: on PostgreSQL, `XDG_DATA_HOME`, a temporary
    /// directory of the test's for what kdd keeps on its machine (its log,
    /// members' worktrees); nothing on SQLite (kdd keeps them beside the file).
    pub fn data_env(&self) -> Vec<(&'static str, OsString)> {
        match self {
            TestDb::File(_) => Vec::new(),
            TestDb::Postgres(pg) => vec![("XDG_DATA_HOME", pg.data_home.path().as_os_str().to_owned())],
        }
    }

    /// The SQLite file. Only for tests about the file (after
    /// [`sqlite_only!`](crate::sqlite_only)): panics on PostgreSQL.
    pub fn path(&self) -> &Path {
        match self {
            TestDb::File(p) => p,
            TestDb::Postgres(pg) => panic!("{} is no file: a test of the SQLite file needs sqlite_only!", pg.url),
        }
    }

    /// The same PostgreSQL database, for another node (dropped with this
    /// one, not with the copy). A SQLite file is no registry to share.
    pub fn shared(&self) -> TestDb {
        match self {
            TestDb::File(p) => panic!("{} cannot be shared by two nodes: that takes PostgreSQL", p.display()),
            TestDb::Postgres(pg) => TestDb::Postgres(PgDb {
                admin: pg.admin.clone(),
                url: pg.url.clone(),
                name: pg.name.clone(),
                owned: false,
                data_home: data_home(),
            }),
        }
    }

    pub fn engine(&self) -> Engine {
        match self {
            TestDb::File(_) => Engine::Sqlite,
            TestDb::Postgres(_) => Engine::Postgres,
        }
    }

    /// The rows `sql` gives, `$1`, `$2`… bound to `params`; an error says
    /// what failed. The same SQL text runs on both engines (SQLite reads
    /// `$N` as `?N`); where they differ, pick one with [`TestDb::pick`].
    pub fn try_query(&self, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, String> {
        match self {
            TestDb::File(p) => sqlite::query(p, sql, params),
            TestDb::Postgres(pg) => {
                let (url, sql, params) = (pg.url.clone(), sql.to_string(), params.to_vec());
                block_on(async move { postgres::query(&url, &sql, &params).await })
            }
        }
    }

    /// [`TestDb::try_query`], failing the test on an error.
    pub fn query(&self, sql: &str, params: &[Val]) -> Vec<Vec<Val>> {
        self.try_query(sql, params).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The first column of the only row of `sql` (e.g. a `count(*)`).
    pub fn one(&self, sql: &str, params: &[Val]) -> Val {
        let rows = self.query(sql, params);
        match rows.as_slice() {
            [row] if !row.is_empty() => row[0].clone(),
            _ => panic!("{sql}: expected one row, got {rows:?}"),
        }
    }

    /// Runs a statement that returns no rows; how many rows it changed.
    pub fn execute(&self, sql: &str, params: &[Val]) -> u64 {
        let done = match self {
            TestDb::File(p) => sqlite::execute(p, sql, params),
            TestDb::Postgres(pg) => {
                let (url, sql, params) = (pg.url.clone(), sql.to_string(), params.to_vec());
                block_on(async move { postgres::execute(&url, &sql, &params).await })
            }
        };
        done.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// [`TestDb::execute`] without the harness's deadline: for benches
    /// that write a registry at scale.
    pub fn execute_at_length(&self, sql: &str, params: &[Val]) -> u64 {
        let done = match self {
            TestDb::File(p) => sqlite::execute(p, sql, params),
            TestDb::Postgres(pg) => {
                let (url, sql, params) = (pg.url.clone(), sql.to_string(), params.to_vec());
                let (tx, rx) = std::sync::mpsc::channel();
                runtime().spawn(async move {
                    let _ = tx.send(postgres::execute(&url, &sql, &params).await);
                });
                rx.recv().unwrap_or_else(|_| Err("the harness's runtime stopped".into()))
            }
        };
        done.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// `sqlite` on SQLite, `postgres` on PostgreSQL: for the few queries
    /// whose SQL differs (e.g. `group_concat` and `string_agg`).
    pub fn pick<'a>(&self, sqlite: &'a str, postgres: &'a str) -> &'a str {
        match self {
            TestDb::File(_) => sqlite,
            TestDb::Postgres(_) => postgres,
        }
    }

    /// Whether the registry is whole: SQLite's `PRAGMA integrity_check`
    /// says `ok`; on PostgreSQL every table of the registry reads to its
    /// end. Its answer (`ok` or what is wrong).
    pub fn integrity(&self) -> String {
        match self {
            TestDb::File(_) => self.one("PRAGMA integrity_check", &[]).text().to_string(),
            TestDb::Postgres(_) => {
                let tables = self.query(
                    "SELECT table_name::text FROM information_schema.tables
                     WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY 1",
                    &[],
                );
                if tables.is_empty() {
                    return "no tables".into();
                }
                for t in tables {
                    let table = t[0].text();
                    if let Err(e) = self.try_query(&format!("SELECT count(*) FROM \"{table}\""), &[]) {
                        return format!("{table}: {e}");
                    }
                }
                "ok".into()
            }
        }
    }

    /// On PostgreSQL, whether the database takes connections: refused, it
    /// takes none (`ALLOW_CONNECTIONS false`) and every connection to it is
    /// cut (`pg_terminate_backend`, as a stopping server cuts them); the
    /// cluster's other databases go on. Panics on SQLite.
    pub fn take_connections(&self, allowed: bool) {
        let TestDb::Postgres(pg) = self else { panic!("{self} is no PostgreSQL database") };
        let (admin, name) = (pg.admin.clone(), pg.name.clone());
        block_on(async move {
            postgres::admin(&admin, &format!("ALTER DATABASE \"{name}\" ALLOW_CONNECTIONS {allowed}")).await?;
            // A connection being made as it was refused may still come
            // in: cut until none is left.
            let cut = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1";
            while !allowed && postgres::query(&admin, cut, &[Val::Text(name.clone())]).await?[0][0] != Val::Int(0) {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Ok::<(), String>(())
        })
        .unwrap_or_else(|e| panic!("cannot change whether {self} takes connections: {e}"));
    }

    /// Makes the registry say it is at schema `version`, newer than any kdd
    /// knows: SQLite's `user_version`; on PostgreSQL a row of `kd_schema`
    /// copied from the newest one.
    pub fn claim_schema_version(&self, version: i64) {
        match self {
            TestDb::File(_) => {
                self.execute(&format!("PRAGMA user_version = {version}"), &[]);
            }
            TestDb::Postgres(_) => {
                self.execute(
                    "INSERT INTO kd_schema SELECT (jsonb_populate_record(NULL::kd_schema,
                         to_jsonb(k) || jsonb_build_object('version', $1::bigint))).*
                     FROM kd_schema k ORDER BY version DESC LIMIT 1",
                    &[version.into()],
                );
            }
        }
    }
}

/// How many migrations a kdd on `engine` applies to a new registry (its
/// schema version): the `.sql` files of `migrations/` for SQLite, of
/// `migrations/postgres/` for PostgreSQL.
pub fn migrations(engine: Engine) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations");
    let dir = match engine {
        Engine::Sqlite => root,
        Engine::Postgres => root.join("postgres"),
    };
    let files = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    files.filter_map(Result::ok).filter(|e| e.path().extension().is_some_and(|x| x == "sql")).count()
}

impl fmt::Display for TestDb {
    /// As kdd names its registry (`daemon.status`'s `db`): the path, or the
    /// URL as `postgres://` without a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TestDb::File(p) => write!(f, "{}", p.display()),
            TestDb::Postgres(pg) => f.write_str(&shown(&pg.url)),
        }
    }
}

/// `url` as kdd shows it: scheme `postgres://`, no password.
fn shown(url: &str) -> String {
    let rest = url.strip_prefix("postgresql://").or_else(|| url.strip_prefix("postgres://")).unwrap_or(url);
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let authority = match authority.rsplit_once('@') {
        Some((user, host)) => format!("{}@{host}", user.split(':').next().unwrap_or(user)),
        None => authority.to_string(),
    };
    format!("postgres://{authority}{path}")
}

impl fmt::Debug for TestDb {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl PgDb {
    /// A new database on the cluster `KD_TEST_PG` names.
    fn create() -> PgDb {
        let admin = match std::env::var("KD_TEST_PG") {
            Ok(url) if !url.is_empty() => url,
            _ => panic!(
                "KD_TEST_DB=postgres needs KD_TEST_PG, the URL of a cluster the tests may make databases on \
                 (a throwaway one: eval \"$(.ci/pg start)\")"
            ),
        };
        let name = format!("kd_e2e_{:016x}", random());
        let url = with_dbname(&admin, &name);
        let (a, n) = (admin.clone(), name.clone());
        block_on(async move { postgres::admin(&a, &format!("CREATE DATABASE \"{n}\"")).await })
            .unwrap_or_else(|e| panic!("cannot make the test's database {name} on {admin}: {e}"));
        PgDb { admin, url, name, owned: true, data_home: data_home() }
    }
}

impl Drop for PgDb {
    /// Drops the database, whoever is still connected; never panics.
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        let (admin, name) = (self.admin.clone(), self.name.clone());
        let sql = format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)");
        let dropped = try_block_on(async move { postgres::admin(&admin, &sql).await });
        match dropped {
            Some(Ok(())) => {}
            Some(Err(e)) => eprintln!("could not drop the test database {}: {e}", self.name),
            None => eprintln!("could not drop the test database {}: no answer in time", self.name),
        }
    }
}

/// A temporary `XDG_DATA_HOME` for a kdd on a PostgreSQL registry.
fn data_home() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("kd-e2e-data-").tempdir().expect("tempdir")
}

/// `url` with its database name replaced by `name` (query kept).
fn with_dbname(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, format!("?{q}")),
        None => (url, String::new()),
    };
    let Some(scheme_end) = base.find("://") else {
        panic!("KD_TEST_PG={url}: expected a URL, postgres://user@host/database");
    };
    let authority_end = base[scheme_end + 3..].find('/').map_or(base.len(), |i| scheme_end + 3 + i);
    format!("{}/{name}{query}", &base[..authority_end])
}

/// A random 64-bit number (std's hasher keys are drawn at random).
fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

/// The runtime the harness's PostgreSQL connections run on: its own, so a
/// test may call it from sync code or from inside its own runtime.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kd-tests-pg")
            .enable_all()
            .build()
            .expect("the harness's runtime")
    })
}

/// Runs `fut` on the harness's runtime and waits for it (at most
/// [`crate::DEADLINE`]); `None` when it did not end in time.
fn try_block_on<T: Send + 'static>(fut: impl std::future::Future<Output = T> + Send + 'static) -> Option<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    runtime().spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv_timeout(crate::DEADLINE).ok()
}

fn block_on<T: Send + 'static>(fut: impl std::future::Future<Output = T> + Send + 'static) -> T {
    try_block_on(fut).unwrap_or_else(|| panic!("the test cluster did not answer within {:?}", crate::DEADLINE))
}

/// A value of a column or a parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Val {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl Val {
    /// An integer; panics on anything else.
    pub fn int(&self) -> i64 {
        match self {
            Val::Int(i) => *i,
            other => panic!("not an integer: {other:?}"),
        }
    }

    /// An integer or NULL.
    pub fn opt_int(&self) -> Option<i64> {
        match self {
            Val::Null => None,
            other => Some(other.int()),
        }
    }

    /// A text; panics on anything else.
    pub fn text(&self) -> &str {
        match self {
            Val::Text(s) => s,
            other => panic!("not a text: {other:?}"),
        }
    }

    /// A text or NULL.
    pub fn opt_text(&self) -> Option<String> {
        match self {
            Val::Null => None,
            other => Some(other.text().to_string()),
        }
    }
}

impl From<&str> for Val {
    fn from(s: &str) -> Val {
        Val::Text(s.to_string())
    }
}

impl From<&String> for Val {
    fn from(s: &String) -> Val {
        Val::Text(s.clone())
    }
}

impl From<String> for Val {
    fn from(s: String) -> Val {
        Val::Text(s)
    }
}

impl From<i64> for Val {
    fn from(i: i64) -> Val {
        Val::Int(i)
    }
}

mod sqlite {
    use std::path::Path;

    use rusqlite::types::{ToSqlOutput, Value, ValueRef};

    use super::Val;

    impl rusqlite::ToSql for Val {
        fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
            Ok(ToSqlOutput::Owned(match self {
                Val::Null => Value::Null,
                Val::Int(i) => Value::Integer(*i),
                Val::Real(r) => Value::Real(*r),
                Val::Text(s) => Value::Text(s.clone()),
            }))
        }
    }

    /// `$N` parameters as SQLite's `?N`.
    fn numbered(sql: &str) -> String {
        let mut out = String::with_capacity(sql.len());
        let mut chars = sql.chars().peekable();
        while let Some(c) = chars.next() {
            if c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
                out.push('?');
            } else {
                out.push(c);
            }
        }
        out
    }

    fn open(path: &Path) -> rusqlite::Result<rusqlite::Connection> {
        let conn = rusqlite::Connection::open(path)?;
        conn.busy_timeout(crate::DEADLINE)?;
        Ok(conn)
    }

    pub(super) fn query(path: &Path, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, String> {
        let run = || -> rusqlite::Result<Vec<Vec<Val>>> {
            let conn = open(path)?;
            let mut stmt = conn.prepare(&numbered(sql))?;
            let n = stmt.column_count();
            let rows = stmt.query_map(rusqlite::params_from_iter(params), |r| {
                (0..n)
                    .map(|i| {
                        Ok(match r.get_ref(i)? {
                            ValueRef::Null => Val::Null,
                            ValueRef::Integer(i) => Val::Int(i),
                            ValueRef::Real(f) => Val::Real(f),
                            ValueRef::Text(t) | ValueRef::Blob(t) => Val::Text(String::from_utf8_lossy(t).into_owned()),
                        })
                    })
                    .collect()
            })?;
            rows.collect()
        };
        run().map_err(|e| e.to_string())
    }

    pub(super) fn execute(path: &Path, sql: &str, params: &[Val]) -> Result<u64, String> {
        let run = || -> rusqlite::Result<u64> {
            let conn = open(path)?;
            if params.is_empty() && sql.trim_start().to_ascii_uppercase().starts_with("PRAGMA") {
                conn.execute_batch(sql)?;
                return Ok(0);
            }
            Ok(conn.execute(&numbered(sql), rusqlite::params_from_iter(params))? as u64)
        };
        run().map_err(|e| e.to_string())
    }
}

mod postgres {
    use tokio_postgres::types::{ToSql, Type};

    use super::Val;

    fn text(e: tokio_postgres::Error) -> String {
        match e.as_db_error() {
            Some(db) => db.to_string(),
            None => e.to_string(),
        }
    }

    async fn connect(url: &str) -> Result<tokio_postgres::Client, String> {
        let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.map_err(text)?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(client)
    }

    /// A statement of the cluster's admin (its own database).
    pub(super) async fn admin(url: &str, sql: &str) -> Result<(), String> {
        connect(url).await?.batch_execute(sql).await.map_err(text)
    }

    /// `v` as the type PostgreSQL expects for the parameter.
    fn param(v: &Val, ty: &Type) -> Result<Box<dyn ToSql + Sync + Send>, String> {
        Ok(match (v, ty) {
            (Val::Null, _) => Box::new(None::<String>),
            (Val::Int(i), &Type::INT8) => Box::new(*i),
            (Val::Int(i), &Type::INT4) => Box::new(i32::try_from(*i).map_err(|e| e.to_string())?),
            (Val::Int(i), &Type::INT2) => Box::new(i16::try_from(*i).map_err(|e| e.to_string())?),
            (Val::Int(i), &Type::BOOL) => Box::new(*i != 0),
            (Val::Int(i), &Type::FLOAT8) => Box::new(*i as f64),
            (Val::Int(i), &Type::TEXT) => Box::new(i.to_string()),
            (Val::Real(f), &Type::FLOAT8) => Box::new(*f),
            (Val::Real(f), &Type::FLOAT4) => Box::new(*f as f32),
            (Val::Text(s), _) => Box::new(s.clone()),
            (v, ty) => return Err(format!("a parameter {v:?} for a column of type {ty}")),
        })
    }

    fn column(row: &tokio_postgres::Row, i: usize) -> Result<Val, String> {
        let ty = row.columns()[i].type_().clone();
        let get = |e: tokio_postgres::Error| format!("column {i} ({ty}): {e}");
        Ok(match ty {
            Type::INT8 => row.try_get::<_, Option<i64>>(i).map_err(get)?.map_or(Val::Null, Val::Int),
            Type::INT4 => row.try_get::<_, Option<i32>>(i).map_err(get)?.map_or(Val::Null, |v| Val::Int(v.into())),
            Type::INT2 => row.try_get::<_, Option<i16>>(i).map_err(get)?.map_or(Val::Null, |v| Val::Int(v.into())),
            Type::BOOL => row.try_get::<_, Option<bool>>(i).map_err(get)?.map_or(Val::Null, |v| Val::Int(v.into())),
            Type::FLOAT8 => row.try_get::<_, Option<f64>>(i).map_err(get)?.map_or(Val::Null, Val::Real),
            Type::FLOAT4 => row.try_get::<_, Option<f32>>(i).map_err(get)?.map_or(Val::Null, |v| Val::Real(v.into())),
            Type::JSON | Type::JSONB => row
                .try_get::<_, Option<serde_json::Value>>(i)
                .map_err(get)?
                .map_or(Val::Null, |v| Val::Text(v.to_string())),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                row.try_get::<_, Option<String>>(i).map_err(get)?.map_or(Val::Null, Val::Text)
            }
            other => return Err(format!("column {i} is of type {other}: cast it to bigint or text")),
        })
    }

    pub(super) async fn query(url: &str, sql: &str, params: &[Val]) -> Result<Vec<Vec<Val>>, String> {
        let client = connect(url).await?;
        let stmt = client.prepare(sql).await.map_err(text)?;
        let bound = stmt.params().iter().zip(params).map(|(ty, v)| param(v, ty)).collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&(dyn ToSql + Sync)> = bound.iter().map(|b| b.as_ref() as &(dyn ToSql + Sync)).collect();
        let rows = client.query(&stmt, &refs).await.map_err(text)?;
        rows.iter().map(|r| (0..r.len()).map(|i| column(r, i)).collect()).collect()
    }

    pub(super) async fn execute(url: &str, sql: &str, params: &[Val]) -> Result<u64, String> {
        let client = connect(url).await?;
        let stmt = client.prepare(sql).await.map_err(text)?;
        let bound = stmt.params().iter().zip(params).map(|(ty, v)| param(v, ty)).collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<&(dyn ToSql + Sync)> = bound.iter().map(|b| b.as_ref() as &(dyn ToSql + Sync)).collect();
        client.execute(&stmt, &refs).await.map_err(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engine_is_sqlite_unless_postgres_is_asked_for() {
        assert_eq!(engine_named(None), Engine::Sqlite);
        assert_eq!(engine_named(Some("")), Engine::Sqlite);
        assert_eq!(engine_named(Some("sqlite")), Engine::Sqlite);
        assert_eq!(engine_named(Some("postgres")), Engine::Postgres);
        assert!(std::panic::catch_unwind(|| engine_named(Some("mysql"))).is_err());
    }

    #[test]
    fn a_test_database_url_is_the_clusters_with_its_own_name() {
        assert_eq!(
            with_dbname("postgres://postgres@%2Ftmp%2Fkd-pg.Ab12/postgres", "kd_e2e_1"),
            "postgres://postgres@%2Ftmp%2Fkd-pg.Ab12/kd_e2e_1"
        );
        assert_eq!(
            with_dbname("postgresql://kd:pw@db:5433/kd?sslmode=require", "t"),
            "postgresql://kd:pw@db:5433/t?sslmode=require"
        );
        assert_eq!(with_dbname("postgres://kd@db", "t"), "postgres://kd@db/t");
        assert_eq!(shown("postgresql://kd:pw@db:5433/t?sslmode=require"), "postgres://kd@db:5433/t?sslmode=require");
        assert_eq!(shown("postgres://postgres@%2Ftmp%2Fkd-pg.Ab12/t"), "postgres://postgres@%2Ftmp%2Fkd-pg.Ab12/t");
    }

    #[test]
    fn dollar_parameters_run_on_sqlite_and_rows_come_back_typed() {
        let dir = tempfile::tempdir().unwrap();
        let db = TestDb::file(dir.path().join("t.sqlite3"));
        db.execute("CREATE TABLE t (a INTEGER, b TEXT)", &[]);
        db.execute("INSERT INTO t VALUES ($1, $2), ($1 + 1, NULL)", &[7.into(), "x".into()]);
        let rows = db.query("SELECT a, b FROM t WHERE a >= $1 ORDER BY a", &[7.into()]);
        assert_eq!(rows, vec![vec![Val::Int(7), Val::Text("x".into())], vec![Val::Int(8), Val::Null]]);
        assert_eq!(db.one("SELECT count(*) FROM t", &[]).int(), 2);
        assert_eq!(db.integrity(), "ok");
        db.claim_schema_version(99);
        assert_eq!(db.one("PRAGMA user_version", &[]).int(), 99);
    }

    #[test]
    fn a_postgres_test_database_is_made_queried_and_dropped() {
        if std::env::var("KD_TEST_PG").is_err() {
            crate::skip("a_postgres_test_database_is_made_queried_and_dropped", "KD_TEST_PG names no cluster");
            return;
        }
        let pg = PgDb::create();
        let (admin, name) = (pg.admin.clone(), pg.name.clone());
        let db = TestDb::Postgres(pg);
        assert_eq!(db.to_string(), with_dbname(&admin, &name));
        assert_eq!(db.integrity(), "no tables");
        db.execute("CREATE TABLE t (a integer, b bigint, c text COLLATE \"C\", d double precision)", &[]);
        db.execute("CREATE TABLE kd_schema (version integer PRIMARY KEY, node text NOT NULL)", &[]);
        db.execute("INSERT INTO kd_schema VALUES (1, 'a')", &[]);
        let n = db.execute(
            "INSERT INTO t VALUES ($1, $2, $3, $4), ($1 + 1, NULL, NULL, NULL)",
            &[7.into(), (1i64 << 40).into(), "x".into(), Val::Real(0.5)],
        );
        assert_eq!(n, 2);
        let rows = db.query("SELECT a, b, c, d, a > 7 FROM t WHERE a >= $1 ORDER BY a", &[7.into()]);
        assert_eq!(
            rows,
            vec![
                vec![Val::Int(7), Val::Int(1 << 40), Val::Text("x".into()), Val::Real(0.5), Val::Int(0)],
                vec![Val::Int(8), Val::Null, Val::Null, Val::Null, Val::Int(1)],
            ]
        );
        assert_eq!(db.one("SELECT count(*) FROM t WHERE c = $1", &["x".into()]).int(), 1);
        assert!(db.try_query("SELECT sum(b) FROM t", &[]).is_err_and(|e| e.contains("cast it")));
        assert_eq!(db.integrity(), "ok");
        db.claim_schema_version(99);
        let versions = db.query("SELECT version, node FROM kd_schema ORDER BY version", &[]);
        assert_eq!(versions[1], vec![Val::Int(99), Val::Text("a".into())], "the newest row, copied");
        drop(db);
        let gone = block_on(async move {
            postgres::query(&admin, "SELECT count(*) FROM pg_database WHERE datname = $1", &[name.into()]).await
        });
        assert_eq!(gone.unwrap(), vec![vec![Val::Int(0)]], "dropped with the value");
    }

    #[test]
    fn sqlite_only_names_the_test_it_returns_from() {
        fn here() {}
        let name = std::any::type_name_of_val(&here);
        assert!(name.ends_with("sqlite_only_names_the_test_it_returns_from::here"), "{name}");
    }
}
