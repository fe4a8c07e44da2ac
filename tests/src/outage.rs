//! A registry taken away from a running `kdd` for a while, and given back
//! (SPEC §10: a database outage never stalls an exchange).
//!
//! - On PostgreSQL the test's database takes no connection and every one
//!   it had is cut ([`TestDb::take_connections`]): what kdd sees when the
//!   server stops (its connections cut by the server, new ones refused),
//!   for this database alone, so the cluster other tests use goes on.
//! - On SQLite the file lives on a small tmpfs of its own, which
//!   [`Outage::begin`] fills up: every write fails with `SQLITE_FULL` until
//!   [`Outage::end`] frees the space. Mounting takes root (CI runs as root);
//!   elsewhere the test is skipped, saying why.
//! - Or, SQLite again ([`Outage::locked`]), another program holds the
//!   file's write lock (an open `BEGIN IMMEDIATE`, as a `sqlite3` shell
//!   left in a transaction does): kdd's writes wait out their busy timeout
//!   and fail with `SQLITE_BUSY` until it lets go.
//!
//! kdd logs to a file beside (never on the full disk), [`Outage::log`].

use std::io::Write;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use crate::{Kdd, TestDb};

/// What a test takes away and gives back.
pub struct Outage {
    dir: tempfile::TempDir,
    away: Away,
}

/// How the registry is taken away.
enum Away {
    /// PostgreSQL: the database refuses connections.
    Refused,
    /// SQLite: the tmpfs the file lives on is full.
    Full { mount: PathBuf },
    /// SQLite: another connection holds the write lock (while it is set).
    Locked { file: PathBuf, holder: Mutex<Option<rusqlite::Connection>> },
}

/// How large the SQLite file's tmpfs is.
const DISK: &str = "16m";

impl Outage {
    /// A `kdd` (with `args`) whose registry a test can take away, and the
    /// means to; `None` when it cannot be made here (said, or failed under
    /// CI, by [`crate::skip`]).
    pub fn kdd(test: &str, args: &[&str]) -> Option<(Kdd, Outage)> {
        let dir = tempfile::Builder::new().prefix("kd-outage-").tempdir().expect("tempdir");
        let (db, away) = match crate::engine() {
            crate::Engine::Postgres => (TestDb::fresh(dir.path().join("unused")), Away::Refused),
            crate::Engine::Sqlite => {
                let mount = dir.path().join("disk");
                std::fs::create_dir(&mount).expect("mount point");
                let out = Command::new("mount")
                    .args(["-t", "tmpfs", "-o", &format!("size={DISK},mode=0700"), "tmpfs"])
                    .arg(&mount)
                    .output();
                match out {
                    Ok(o) if o.status.success() => {}
                    Ok(o) => {
                        crate::skip(test, &format!("cannot mount a tmpfs: {}", String::from_utf8_lossy(&o.stderr)));
                        return None;
                    }
                    Err(e) => {
                        crate::skip(test, &format!("cannot run mount: {e}"));
                        return None;
                    }
                }
                (TestDb::file(mount.join("kd.sqlite3")), Away::Full { mount })
            }
        };
        Some(Outage { dir, away }.start(db, args))
    }

    /// A `kdd` (with `args`) on a SQLite file another program can hold the
    /// write lock of, and the means to; `None` on PostgreSQL (said).
    pub fn locked(args: &[&str]) -> Option<(Kdd, Outage)> {
        if crate::engine() != crate::Engine::Sqlite {
            crate::registry::not_on_this_engine("outage", "a SQLite file's write lock");
            return None;
        }
        let dir = tempfile::Builder::new().prefix("kd-outage-").tempdir().expect("tempdir");
        let file = dir.path().join("kd.sqlite3");
        let away = Away::Locked { file: file.clone(), holder: Mutex::new(None) };
        Some(Outage { dir, away }.start(TestDb::file(file), args))
    }

    fn start(self, db: TestDb, args: &[&str]) -> (Kdd, Outage) {
        let log = self.dir.path().join("kdd.log");
        let mut all = vec!["--log-file", log.to_str().expect("a temporary path is UTF-8")];
        all.extend_from_slice(args);
        let kdd = Kdd::try_start_on(db, &all).unwrap_or_else(|e| panic!("kdd did not start: {e}"));
        (kdd, self)
    }

    /// Takes the registry away: its connections refused and cut, its disk
    /// full, or its write lock held.
    pub fn begin(&self, kdd: &Kdd) {
        match &self.away {
            Away::Refused => kdd.db.take_connections(false),
            Away::Locked { file, holder } => {
                let c = rusqlite::Connection::open(file).expect("open the file");
                c.busy_timeout(crate::DEADLINE).expect("busy timeout");
                c.execute_batch("BEGIN IMMEDIATE").expect("take the write lock");
                *holder.lock().expect("holder") = Some(c);
            }
            Away::Full { mount } => {
                let mut filler = std::fs::File::create(mount.join("filler")).expect("the filler");
                let chunk = vec![0u8; 64 * 1024];
                loop {
                    match filler.write_all(&chunk) {
                        Ok(()) => {}
                        Err(e) if e.raw_os_error() == Some(28) => break,
                        Err(e) => panic!("cannot fill the disk: {e}"),
                    }
                }
                // Whatever is left is less than a page of the WAL.
                while filler.write_all(&[0u8; 512]).is_ok() {}
            }
        }
    }

    /// Gives the registry back.
    pub fn end(&self, kdd: &Kdd) {
        match &self.away {
            Away::Refused => kdd.db.take_connections(true),
            Away::Locked { holder, .. } => drop(holder.lock().expect("holder").take()),
            Away::Full { mount } => std::fs::remove_file(mount.join("filler")).expect("remove the filler"),
        }
    }

    /// What kdd has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kdd.log")).unwrap_or_default()
    }

    /// Waits until kdd's log holds `needle`: up to twice [`crate::DEADLINE`],
    /// since against a write lock another program holds each write kdd
    /// tries first waits out its busy timeout (5 s), and several may come
    /// before the one looked for (a CI run saw six in a row, 30 s).
    pub async fn logged(&self, needle: &str) {
        let found = tokio::time::timeout(crate::DEADLINE * 2, async {
            while !self.log().contains(needle) {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
        .await;
        if found.is_err() {
            panic!("kdd did not log {needle:?}; its log:\n{}", self.log());
        }
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        if let Away::Full { mount } = &self.away {
            // Lazily: kdd may still hold the file open.
            let _ = Command::new("umount").arg("-l").arg(mount).status();
        }
    }
}
