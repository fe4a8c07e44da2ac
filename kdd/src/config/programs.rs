//! The agent CLIs on `PATH`: which built-in backends are installed, and
//! where a program resolves to.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{AgentDef, Backend, Env};

/// Binaries of a backend to look for, in order.
fn binaries(backend: Backend) -> &'static [&'static str] {
    match backend {
        Backend::Claude => &["claude"],
        Backend::Codex => &["codex"],
        Backend::Cursor => &["agent", "cursor-agent"],
        Backend::Gemini => &["gemini"],
        Backend::Acp | Backend::Command => &[],
    }
}

/// The built-in agent of a backend: its binary as found on PATH (the first
/// candidate when none is).
pub(super) fn builtin(backend: Backend, env: &Env<'_>) -> AgentDef {
    let dirs = env.path_dirs();
    let candidates = binaries(backend);
    let command = candidates
        .iter()
        .find(|b| find_in(&dirs, b).is_some())
        .or(candidates.first())
        .map(|b| b.to_string())
        .unwrap_or_default();
    AgentDef {
        name: backend.as_str().to_string(),
        backend,
        command,
        args: Vec::new(),
        env: BTreeMap::new(),
        model: None,
        timeout_s: None,
        prompt_council: None,
        prompt_chat: None,
        format: backend.format(),
        color: None,
        delivery: Default::default(),
        transport: super::Transport::default_for(backend),
        policy: Default::default(),
        permissions: Default::default(),
    }
}

/// The built-in backends whose CLI is on PATH, in the usual order.
pub fn detect_members(env: &Env<'_>) -> Vec<String> {
    let dirs = env.path_dirs();
    Backend::BUILTIN
        .iter()
        .filter(|b| binaries(**b).iter().any(|bin| find_in(&dirs, bin).is_some()))
        .map(|b| b.as_str().to_string())
        .collect()
}

/// `program` resolved like a shell would: a path as is, a bare name on PATH.
pub fn find_program(program: &str, env: &Env<'_>) -> Option<PathBuf> {
    if program.contains('/') {
        let p = PathBuf::from(program);
        return is_executable(&p).then_some(p);
    }
    find_in(&env.path_dirs(), program)
}

fn find_in(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    dirs.iter().map(|d| d.join(name)).find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn programs_are_found_on_path_or_by_path() {
        let dir = tempfile::tempdir().unwrap();
        let gemini = dir.path().join("gemini");
        std::fs::write(&gemini, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&gemini, std::fs::Permissions::from_mode(0o755)).unwrap();
        let bin = dir.path().to_path_buf();
        let var = move |k: &str| (k == "PATH").then(|| bin.clone().into_os_string());
        let env = Env { var: &var };
        assert_eq!(find_program("gemini", &env), Some(gemini));
        assert_eq!(find_program("claude", &env), None);
        assert_eq!(find_program("/bin/sh", &env), Some(PathBuf::from("/bin/sh")));
        assert_eq!(detect_members(&env), vec!["gemini"]);
    }
}
