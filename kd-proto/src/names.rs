//! Validation of the names that reach file paths, argv or SQL keys: thread
//! ids and member names. Anything that could escape a path is refused.

/// Longest thread id or member name accepted.
pub const MAX_NAME_LEN: usize = 64;

/// The sender name of the human user.
pub const KING: &str = "king";
/// The addressee meaning "every member".
pub const ALL: &str = "all";
/// The sender of what kd itself writes: tallies, merges, context bundles,
/// summaries offered to a trunk, budget notices.
pub const KD: &str = "kd";
/// How kd's notice that an exchange reached `council.budget_usd` begins
/// (a notifier or a follower knows it by it).
pub const BUDGET_NOTICE: &str = "This exchange has cost";

/// Whether `name` is one no member may take: the King, every member, kd.
pub fn is_reserved(name: &str) -> bool {
    [KING, ALL, KD].contains(&name)
}

/// Why a name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("{what} is empty")]
    Empty { what: &'static str },
    #[error("{what} {name:?} is longer than {MAX_NAME_LEN} characters")]
    TooLong { what: &'static str, name: String },
    #[error("{what} {name:?} may only contain {allowed} and must start with a letter or digit")]
    BadChars { what: &'static str, name: String, allowed: &'static str },
    /// git refuses it as a part of a branch name (`git check-ref-format`).
    #[error("{what} {name:?} cannot be the last part of a git branch (kd/THREAD/{name}): {why}")]
    NotInABranch { what: &'static str, name: String, why: &'static str },
}

/// A thread id: `[a-z0-9][a-z0-9-]*`, at most 64 characters.
pub fn check_thread_id(id: &str) -> Result<(), NameError> {
    check(id, "thread id", "a-z, 0-9 and '-'", |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// A member, agent or sender name: `[a-z0-9][a-z0-9_.-]*`, at most 64
/// characters, that git takes as a part of a branch name — a member works
/// on `kd/<thread>/<member>` — so no `..`, and no `.` or `.lock` at the end
/// (`git check-ref-format`'s rules; the others the characters rule out).
pub fn check_member_name(name: &str) -> Result<(), NameError> {
    let what = "member name";
    check(name, what, "a-z, 0-9, '_', '.' and '-'", |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-')
    })?;
    let why = if name.contains("..") {
        "it contains \"..\""
    } else if name.ends_with(".lock") {
        "it ends with \".lock\""
    } else if name.ends_with('.') {
        "it ends with \".\""
    } else {
        return Ok(());
    };
    Err(NameError::NotInABranch { what, name: name.to_string(), why })
}

/// A node of a shared registry (`kdd --node`): `[a-z0-9][a-z0-9_.-]*`, at
/// most 64 characters — a lowercased host name fits.
pub fn check_node_name(name: &str) -> Result<(), NameError> {
    check(name, "node name", "a-z, 0-9, '_', '.' and '-'", |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-')
    })
}

fn check(name: &str, what: &'static str, allowed: &'static str, ok: impl Fn(char) -> bool) -> Result<(), NameError> {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return Err(NameError::Empty { what });
    };
    if name.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong { what, name: name.to_string() });
    }
    if !(first.is_ascii_lowercase() || first.is_ascii_digit()) || !chars.all(ok) {
        return Err(NameError::BadChars { what, name: name.to_string(), allowed });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_ids_that_could_escape_a_path_are_refused() {
        for bad in ["", "../x", "a/b", ".", "..", "-x", "A", "a b", "a\0", "é", &"a".repeat(65)] {
            assert!(check_thread_id(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["a8b3", "council-a8ba", "0", &"a".repeat(64)] {
            assert_eq!(check_thread_id(good), Ok(()), "{good:?} refused");
        }
    }

    #[test]
    fn member_names() {
        for bad in ["", "..", ".hidden", "a/b", "Claude", "x y", "_x"] {
            assert!(check_member_name(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["claude", "codex", "gpt-5.1", "my_agent", "king", "all"] {
            assert_eq!(check_member_name(good), Ok(()), "{good:?} refused");
        }
        let e = check_member_name("a/b").unwrap_err().to_string();
        assert!(e.contains("member name \"a/b\""), "{e}");
    }

    #[test]
    fn member_names_are_names_git_takes_in_a_branch() {
        for bad in ["a..b", "x.lock", "x.", "a...b"] {
            let e = check_member_name(bad).unwrap_err();
            assert!(matches!(e, NameError::NotInABranch { .. }), "{bad:?}: {e}");
        }
        for good in ["a.b", "x.locks", "lock", "x-lock", "gpt-5.1"] {
            assert_eq!(check_member_name(good), Ok(()), "{good:?} refused");
        }
        assert_eq!(
            check_member_name("x.lock").unwrap_err().to_string(),
            "member name \"x.lock\" cannot be the last part of a git branch (kd/THREAD/x.lock): it ends with \".lock\""
        );
    }
}
