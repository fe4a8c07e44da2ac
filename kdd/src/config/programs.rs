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
/// candidate when none is). A backend of one binary is not looked for: it
/// is that name either way, found when it is run (a configuration is
/// resolved at every question, for every built-in backend; issue 31).
pub(super) fn builtin(backend: Backend, env: &Env<'_>) -> AgentDef {
    let command = match binaries(backend) {
        [] => String::new(),
        [only] => only.to_string(),
        candidates => {
            let dirs = env.path_dirs();
            let found = candidates.iter().find(|b| find_in(&dirs, b).is_some());
            found.unwrap_or(&candidates[0]).to_string()
        }
    };
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
        mcp: true,
        path: None,
    }
}

/// Why `agent`'s `program` cannot be run, and what to do: the program
/// named as the user knows it (a backend that looks for several binaries
/// names them all), where it was looked for, and the key that sets it.
pub fn not_found(agent: &AgentDef, program: &str) -> String {
    let candidates = binaries(agent.backend);
    let what = match (agent.backend, candidates.contains(&program)) {
        (Backend::Cursor, true) => format!("Cursor's CLI ({})", candidates.join(" or ")),
        _ => program.to_string(),
    };
    let where_ = if program.contains('/') { "" } else { " in PATH" };
    format!("{what} not found{where_} — install it or set agents.{}.command", agent.name)
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

/// The `kd` that serves kd's MCP server (`kd mcp`) to agents: the one
/// beside this daemon's own executable, else `KD_KD` (a path, or a name on
/// `PATH`), else `kd` on `PATH`; an absolute path that is UTF-8 (it goes
/// into the agents' JSON and TOML configuration), or none.
pub fn find_kd(env: &Env<'_>) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok();
    kd_beside(exe.as_deref(), env)
}

fn kd_beside(exe: Option<&Path>, env: &Env<'_>) -> Option<PathBuf> {
    let beside = exe.and_then(Path::parent).map(|d| d.join("kd")).filter(|p| is_executable(p));
    let named = || (env.var)("KD_KD").and_then(|v| v.to_str().and_then(|v| find_program(v, env)));
    let on_path = || find_in(&env.path_dirs(), "kd");
    beside.or_else(named).or_else(on_path).and_then(|p| std::path::absolute(p).ok()).filter(|p| p.to_str().is_some())
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
    fn a_missing_program_is_named_as_the_user_knows_it() {
        let none = |_: &str| None;
        let mut cursor = builtin(Backend::Cursor, &Env { var: &none });
        cursor.name = "ghost".into();
        assert_eq!(
            not_found(&cursor, "agent"),
            "Cursor's CLI (agent or cursor-agent) not found in PATH — install it or set agents.ghost.command"
        );
        assert_eq!(not_found(&cursor, "/opt/agent"), "/opt/agent not found — install it or set agents.ghost.command");
        let claude = builtin(Backend::Claude, &Env { var: &none });
        assert_eq!(not_found(&claude, "claude"), "claude not found in PATH — install it or set agents.claude.command");
    }

    #[test]
    fn a_backend_of_one_binary_is_named_without_a_look_at_path() {
        let asked = std::cell::Cell::new(0);
        let var = |k: &str| {
            if k == "PATH" {
                asked.set(asked.get() + 1);
            }
            None
        };
        for backend in [Backend::Claude, Backend::Codex, Backend::Gemini] {
            assert_eq!(builtin(backend, &Env { var: &var }).command, backend.as_str());
        }
        assert_eq!(asked.get(), 0, "PATH was searched for a backend with one binary");
        assert_eq!(builtin(Backend::Cursor, &Env { var: &var }).command, "agent", "none found: the first");
        assert!(asked.get() > 0, "two binaries: looked for");
    }

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

    #[test]
    fn kd_is_found_beside_the_daemon_then_by_kd_kd_then_on_path() {
        let install = |dir: &Path| {
            std::fs::create_dir_all(dir).unwrap();
            let kd = dir.join("kd");
            std::fs::write(&kd, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&kd, std::fs::Permissions::from_mode(0o755)).unwrap();
            kd
        };
        let root = tempfile::tempdir().unwrap();
        let (daemon, named, path) = (root.path().join("daemon"), root.path().join("named"), root.path().join("path"));
        let path_kd = install(&path);
        let named_kd = install(&named);
        let exe = daemon.join("kdd");
        let vars = |kd_kd: Option<PathBuf>| {
            let path = path.clone();
            move |k: &str| match k {
                "PATH" => Some(path.clone().into_os_string()),
                "KD_KD" => kd_kd.clone().map(PathBuf::into_os_string),
                _ => None,
            }
        };
        let with_kd_kd = vars(Some(named_kd.clone()));
        let env = Env { var: &with_kd_kd };
        assert_eq!(kd_beside(Some(&exe), &env), Some(named_kd.clone()), "nothing beside the daemon: KD_KD");
        let beside = install(&daemon);
        assert_eq!(kd_beside(Some(&exe), &env), Some(beside), "beside the daemon first");
        assert_eq!(kd_beside(None, &env), Some(named_kd));
        let without = vars(None);
        assert_eq!(kd_beside(None, &Env { var: &without }), Some(path_kd), "then PATH");
        let nowhere = |_: &str| None;
        assert_eq!(kd_beside(None, &Env { var: &nowhere }), None);
        let missing = vars(Some(root.path().join("no-such-kd")));
        std::fs::remove_file(path.join("kd")).unwrap();
        assert_eq!(kd_beside(None, &Env { var: &missing }), None, "a KD_KD that is not there is not used");
    }
}
