//! Migrations of the PostgreSQL registry.
//!
//! The files `migrations/postgres/NNNN_name.sql`, embedded at build time and
//! never edited after they land. Their version counter is their own (PG 1 is
//! SQLite's 12), recorded one row per version in `kd_schema`. Several nodes
//! may start together on one database: the migrator takes a transaction-level
//! advisory lock first, so one applies what is missing, in one transaction
//! (PostgreSQL's DDL is transactional: a failed migration leaves nothing),
//! and the others then find nothing to do. A database whose schema is newer
//! than this kdd knows is refused.

use std::path::PathBuf;

use deadpool_postgres::Object;

use crate::db::{DbError, DbResult, now_ms};

/// The migrations, in order: (version, SQL).
pub const MIGRATIONS: &[(u32, &str)] = &[
    (1, include_str!("../../../../migrations/postgres/0001_registry.sql")),
    (2, include_str!("../../../../migrations/postgres/0002_node_leases.sql")),
    (3, include_str!("../../../../migrations/postgres/0003_one_run_answering.sql")),
    (4, include_str!("../../../../migrations/postgres/0004_work_tampered.sql")),
    (5, include_str!("../../../../migrations/postgres/0005_exchange_path.sql")),
    (6, include_str!("../../../../migrations/postgres/0006_approvals.sql")),
    (7, include_str!("../../../../migrations/postgres/0007_work_check.sql")),
    (8, include_str!("../../../../migrations/postgres/0008_work_shipped.sql")),
    (9, include_str!("../../../../migrations/postgres/0009_work_comments.sql")),
    (10, include_str!("../../../../migrations/postgres/0010_work_uncommitted.sql")),
];

/// `'kdmigr'` as a number: the advisory lock of migrators.
const MIGRATION_LOCK: i64 = 0x6b64_6d69_6772;

/// The schema version this kdd knows.
pub fn known() -> u32 {
    MIGRATIONS.last().map(|(v, _)| *v).unwrap_or(0)
}

/// Applies the missing migrations; returns the schema version.
pub(crate) async fn migrate(c: &mut Object, location: &str) -> DbResult<u32> {
    let failed = |reason: String| DbError::Migration { path: PathBuf::from(location), reason };
    let tx = c.transaction().await?;
    // Wait for another node's migration, but not forever for a reader.
    tx.batch_execute("SET LOCAL lock_timeout = '60s'; SET LOCAL statement_timeout = '300s'").await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK]).await?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS kd_schema (
             version    integer PRIMARY KEY,
             applied_at bigint NOT NULL,
             node       text,
             kdd        text NOT NULL
         )",
    )
    .await?;
    let found: i32 = tx.query_one("SELECT coalesce(max(version), 0) FROM kd_schema", &[]).await?.get(0);
    let found = u32::try_from(found).unwrap_or(0);
    let known = known();
    if found > known {
        return Err(DbError::SchemaTooNew { path: PathBuf::from(location), found, known });
    }
    for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > found) {
        tx.batch_execute(sql).await.map_err(|e| failed(format!("migration {version}: {}", DbError::from(e))))?;
        tx.execute(
            "INSERT INTO kd_schema (version, applied_at, kdd) VALUES ($1, $2, $3)",
            &[&(*version as i32), &now_ms(), &env!("CARGO_PKG_VERSION")],
        )
        .await?;
    }
    tx.commit().await?;
    Ok(known)
}

/// The version recorded in the database (0: none).
pub(crate) async fn found(c: &impl deadpool_postgres::GenericClient) -> DbResult<u32> {
    let row = c.query_one("SELECT coalesce(max(version), 0) FROM kd_schema", &[]).await?;
    Ok(u32::try_from(row.get::<_, i32>(0)).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_from_one_without_gaps() {
        for (i, (v, sql)) in MIGRATIONS.iter().enumerate() {
            assert_eq!(*v as usize, i + 1);
            assert!(!sql.trim().is_empty());
        }
        assert_eq!(known(), MIGRATIONS.len() as u32);
    }

    #[test]
    fn every_file_in_migrations_postgres_is_embedded() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../migrations/postgres");
        let files = std::fs::read_dir(dir).unwrap().filter(|e| e.as_ref().is_ok_and(|e| e.path().is_file())).count();
        assert_eq!(files, MIGRATIONS.len());
    }
}
