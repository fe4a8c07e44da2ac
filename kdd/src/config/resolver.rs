//! What the resolution of one configuration file keeps as it goes: the
//! file (every error names it), the keys set, the keys mapped from
//! Kingdom's, the notices and warnings; and the checks the sections share. Below
//! [`super::resolve`] and the sections it calls
//! ([`super::coordination`], [`super::lifecycle`]).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use kd_proto::duration::MAX_TIMEOUT_S;

use super::ConfigError;

pub(super) struct Resolver {
    pub(super) file: Option<PathBuf>,
    pub(super) set_keys: BTreeSet<String>,
    pub(super) mapped_from: BTreeMap<String, String>,
    pub(super) notices: Vec<String>,
    /// What is accepted but will not work as meant (e.g. codex arguments
    /// `codex app-server` refuses).
    pub(super) warnings: Vec<String>,
}

impl Resolver {
    pub(super) fn new(file: Option<PathBuf>) -> Resolver {
        Resolver {
            file,
            set_keys: BTreeSet::new(),
            mapped_from: BTreeMap::new(),
            notices: Vec::new(),
            warnings: Vec::new(),
        }
    }

    pub(super) fn err(&self, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError { file: self.file.clone(), key: key.into(), message: message.into() }
    }

    pub(super) fn set(&mut self, key: &str, is_set: bool) {
        if is_set {
            self.set_keys.insert(key.to_string());
        }
    }

    pub(super) fn ignore(&mut self, key: &str, why: &str) {
        self.notices.push(format!("{key}: {why} (ignored)"));
    }

    /// A run's timeout in seconds (`council.timeout`,
    /// `agents.NAME.timeout`): from 1 to [`MAX_TIMEOUT_S`].
    pub(super) fn timeout(&self, key: &str, seconds: Option<u64>) -> Result<Option<u64>, ConfigError> {
        match seconds {
            Some(s) if s == 0 || s > MAX_TIMEOUT_S => {
                Err(self
                    .err(key, format!("must be a number of seconds between 1 and {MAX_TIMEOUT_S} (a week), got {s}")))
            }
            s => Ok(s),
        }
    }
}
