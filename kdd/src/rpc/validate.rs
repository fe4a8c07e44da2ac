//! Checks of parameter values at the RPC edge. Types are checked by serde
//! (-32602); these check values and answer `invalid_argument` (1001) with a
//! message that names the parameter.

use jsonrpsee::types::ErrorObjectOwned;
use kd_proto::names;

use super::error::{bad_name, invalid};

/// Longest title, branch or holder label.
const MAX_LABEL: usize = 256;
/// Longest workspace path.
const MAX_PATH: usize = 4096;
/// Longest lock TTL: a day.
pub const MAX_TTL_MS: u64 = 24 * 60 * 60 * 1000;
/// Most auto rounds one send may ask for.
pub const MAX_ROUNDS: u32 = 100;
/// Most entries in a list parameter (members, addressees, refs).
pub const MAX_LIST: usize = 64;
/// Largest sequence number or event id (SQLite integers are i64).
const MAX_POSITION: u64 = i64::MAX as u64;

/// A list parameter holds at most [`MAX_LIST`] entries.
pub fn list_len<T>(param: &str, list: &[T]) -> Result<(), ErrorObjectOwned> {
    if list.len() > MAX_LIST {
        return Err(invalid(format!("{param}: at most {MAX_LIST} entries, got {}", list.len())));
    }
    Ok(())
}

/// A position in a thread or in the event log (`since_seq`, `since_id`).
pub fn position(param: &str, value: Option<u64>) -> Result<(), ErrorObjectOwned> {
    match value {
        Some(v) if v > MAX_POSITION => Err(invalid(format!("{param} must be at most {MAX_POSITION}, got {v}"))),
        _ => Ok(()),
    }
}

/// A timeout in seconds: when given, from 1 to
/// [`kd_proto::duration::MAX_TIMEOUT_S`].
pub fn timeout(seconds: Option<u64>) -> Result<Option<std::time::Duration>, ErrorObjectOwned> {
    use kd_proto::duration::MAX_TIMEOUT_S;
    match seconds {
        Some(s) if s == 0 || s > MAX_TIMEOUT_S => {
            Err(invalid(format!("timeout_s must be between 1 and {MAX_TIMEOUT_S} seconds (a week), got {s}")))
        }
        s => Ok(s.map(std::time::Duration::from_secs)),
    }
}

pub fn thread_id(id: &str) -> Result<(), ErrorObjectOwned> {
    names::check_thread_id(id).map_err(bad_name)
}

pub fn member(name: &str) -> Result<(), ErrorObjectOwned> {
    names::check_member_name(name).map_err(bad_name)
}

/// Council members of a thread: at most [`MAX_LIST`], valid names, no
/// duplicates, none reserved (`king`, `all`, `kd`).
pub fn members(list: &[String]) -> Result<(), ErrorObjectOwned> {
    list_len("members", list)?;
    let mut seen = std::collections::HashSet::with_capacity(list.len());
    for m in list {
        member(m)?;
        if names::is_reserved(m) {
            return Err(invalid(format!("members: {m:?} is reserved and cannot be a member")));
        }
        if !seen.insert(m) {
            return Err(invalid(format!("members: {m:?} is listed twice")));
        }
    }
    Ok(())
}

/// Addressees of a message: at most [`MAX_LIST`] member names, `all` or `king`.
pub fn addressees(param: &str, list: &[String]) -> Result<(), ErrorObjectOwned> {
    list_len(param, list)?;
    for name in list {
        names::check_member_name(name).map_err(|e| invalid(format!("{param}: {e}")))?;
    }
    Ok(())
}

/// Who a message is for, checked: each name once, in the order first
/// given, and a name in `to` not also in `cc`.
pub fn recipients(to: Vec<String>, cc: Vec<String>) -> Result<(Vec<String>, Vec<String>), ErrorObjectOwned> {
    addressees("to", &to)?;
    addressees("cc", &cc)?;
    let mut seen = std::collections::HashSet::new();
    let to: Vec<String> = to.into_iter().filter(|n| seen.insert(n.clone())).collect();
    let cc = cc.into_iter().filter(|n| seen.insert(n.clone())).collect();
    Ok((to, cc))
}

/// What a new thread is given: its workspace, branch, title, members and
/// (when chosen) id.
pub fn new_thread(
    workspace_path: &str,
    branch: Option<&str>,
    title: Option<&str>,
    member_list: &[String],
    id: Option<&str>,
) -> Result<(), ErrorObjectOwned> {
    workspace(workspace_path)?;
    label("branch", branch)?;
    self::title("title", title)?;
    members(member_list)?;
    id.map(thread_id).transpose()?;
    Ok(())
}

/// A thread's title, by the one rule of `kd_proto::title` (wherever a
/// title is set); returned trimmed.
pub fn title(param: &str, value: Option<&str>) -> Result<Option<String>, ErrorObjectOwned> {
    value.map(|t| kd_proto::title::check_title(t).map_err(|e| invalid(format!("{param} {e}")))).transpose()
}

pub fn workspace(path: &str) -> Result<(), ErrorObjectOwned> {
    if !path.starts_with('/') {
        return Err(invalid(format!("workspace must be an absolute path, got {path:?}")));
    }
    if path.len() > MAX_PATH || path.contains('\0') {
        return Err(invalid("workspace is not a usable path (too long or contains NUL)"));
    }
    if path.chars().any(char::is_control) {
        return Err(invalid("workspace contains control characters"));
    }
    Ok(())
}

/// The longest `PATH` a client may send (`path`): Linux allows one
/// environment string up to 128 KiB, shells' PATHs are a few hundred bytes.
pub const MAX_SEARCH_PATH: usize = 32 * 1024;

/// A client's `PATH` (`path`), which the members are found on and run
/// with: at most [`MAX_SEARCH_PATH`] bytes, no NUL or other control
/// character (it goes into the agents' environment).
pub fn search_path(path: Option<&str>) -> Result<(), ErrorObjectOwned> {
    match path {
        Some(p) if p.len() > MAX_SEARCH_PATH => Err(invalid(format!("path is longer than {MAX_SEARCH_PATH} bytes"))),
        Some(p) if p.chars().any(char::is_control) => Err(invalid("path contains control characters")),
        _ => Ok(()),
    }
}

/// A path-like string (an origin, a file a message refers to).
pub fn path(param: &str, value: Option<&str>) -> Result<(), ErrorObjectOwned> {
    match value {
        Some(v) if v.len() > MAX_PATH => Err(invalid(format!("{param} is longer than {MAX_PATH} bytes"))),
        Some(v) if v.chars().any(char::is_control) => Err(invalid(format!("{param} contains control characters"))),
        _ => Ok(()),
    }
}

pub fn label(param: &str, value: Option<&str>) -> Result<(), ErrorObjectOwned> {
    match value {
        Some(v) if v.len() > MAX_LABEL => Err(invalid(format!("{param} is longer than {MAX_LABEL} bytes"))),
        Some(v) if v.chars().any(char::is_control) => Err(invalid(format!("{param} contains control characters"))),
        _ => Ok(()),
    }
}

pub fn required_label(param: &str, value: &str) -> Result<(), ErrorObjectOwned> {
    if value.trim().is_empty() {
        return Err(invalid(format!("{param} is empty")));
    }
    label(param, Some(value))
}

pub fn pid(pid: Option<u32>) -> Result<(), ErrorObjectOwned> {
    match pid {
        Some(0) => Err(invalid("pid must be a process id (> 0)")),
        Some(p) if p > i32::MAX as u32 => Err(invalid(format!("pid {p} is out of range"))),
        _ => Ok(()),
    }
}

pub fn ttl(ttl_ms: u64) -> Result<(), ErrorObjectOwned> {
    if ttl_ms == 0 || ttl_ms > MAX_TTL_MS {
        return Err(invalid(format!("ttl_ms must be between 1 and {MAX_TTL_MS}, got {ttl_ms}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(r: Result<(), ErrorObjectOwned>) -> String {
        r.err().map(|e| e.message().to_string()).unwrap_or_default()
    }

    #[test]
    fn a_clients_path_is_bounded_and_has_no_control_character() {
        assert_eq!(search_path(None), Ok(()));
        assert_eq!(search_path(Some("/home/u/.nvm/versions/node/v22/bin:/usr/bin")), Ok(()));
        assert_eq!(search_path(Some("")), Ok(()), "an empty PATH finds nothing, as a shell's");
        assert!(msg(search_path(Some("/bin\nPATH=/evil"))).contains("control characters"));
        assert!(msg(search_path(Some("/bin\0"))).contains("control characters"));
        assert!(msg(search_path(Some(&"/x:".repeat(MAX_SEARCH_PATH)))).contains("longer than 32768"));
    }

    #[test]
    fn each_recipient_is_named_once_and_to_wins_over_cc() {
        let v = |n: &[&str]| n.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (to, cc) = recipients(v(&["b", "a", "b"]), v(&["a", "c", "c", "d"])).unwrap();
        assert_eq!((to, cc), (v(&["b", "a"]), v(&["c", "d"])));
        assert!(msg(recipients(v(&["a"]), v(&["x y"])).map(drop)).starts_with("cc: "));
    }

    #[test]
    fn members_must_be_unique_valid_and_unreserved() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(members(&list(&["claude", "codex"])).is_ok());
        assert!(msg(members(&list(&["claude", "claude"]))).contains("listed twice"));
        assert!(msg(members(&list(&["king"]))).contains("reserved"));
        assert!(msg(members(&list(&["../etc"]))).contains("member name"));
        let many: Vec<String> = (0..=MAX_LIST).map(|i| format!("m{i}")).collect();
        assert!(msg(members(&many)).contains("members: at most 64 entries, got 65"));
        assert!(members(&many[..MAX_LIST]).is_ok());
        assert!(msg(addressees("cc", &many)).starts_with("cc: at most 64"));
    }

    #[test]
    fn positions_past_i64_are_refused_not_wrapped() {
        assert!(position("since_seq", Some(i64::MAX as u64)).is_ok());
        assert!(msg(position("since_seq", Some(1 << 63))).contains("since_seq must be at most"));
        assert!(position("since_id", None).is_ok());
    }

    #[test]
    fn values_are_checked_with_the_parameter_named() {
        assert!(msg(workspace("relative/dir")).contains("absolute"));
        assert!(msg(workspace("/tmp/\u{1b}]0;x\u{7}")).contains("control characters"));
        assert!(msg(ttl(0)).contains("ttl_ms"));
        assert!(msg(ttl(MAX_TTL_MS + 1)).contains("ttl_ms"));
        assert!(ttl(1).is_ok());
        let max = kd_proto::duration::MAX_TIMEOUT_S;
        for bad in [0, max + 1, i64::MAX as u64, u64::MAX] {
            let e = timeout(Some(bad)).err().map(|e| e.message().to_string()).unwrap_or_default();
            assert!(e.contains("timeout_s") && e.contains(&max.to_string()), "{bad}: {e}");
        }
        assert_eq!(timeout(Some(max)).ok().flatten(), Some(std::time::Duration::from_secs(max)));
        assert!(msg(pid(Some(0))).contains("pid"));
        assert!(msg(required_label("holder", " ")).contains("holder is empty"));
        assert!(msg(label("title", Some("a\u{1b}[31m"))).contains("control"));
        assert!(msg(addressees("to", &["a b".to_string()])).starts_with("to: "));
    }
}
