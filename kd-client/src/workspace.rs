//! The workspace a command runs in: the git work tree containing the
//! current directory (or the directory itself outside git), and the branch
//! checked out there. Read from `.git` directly: no `git` process.

use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    pub root: PathBuf,
    pub branch: Option<String>,
}

/// The workspace of the current directory.
pub fn current() -> std::io::Result<Workspace> {
    let cwd = std::env::current_dir()?;
    Ok(detect(&cwd.canonicalize().unwrap_or(cwd)))
}

/// The workspace of `dir`: the nearest ancestor with a `.git`, else `dir`.
pub fn detect(dir: &Path) -> Workspace {
    for root in dir.ancestors() {
        let git = root.join(".git");
        if git.exists() {
            return Workspace { root: root.to_path_buf(), branch: branch(&git) };
        }
    }
    Workspace { root: dir.to_path_buf(), branch: None }
}

/// The checked-out branch; `None` for a detached HEAD or an unreadable one.
/// `.git` may be a directory or, in worktrees and submodules, a file
/// `gitdir: <path>`.
fn branch(git: &Path) -> Option<String> {
    let git_dir = if git.is_file() {
        let text = std::fs::read_to_string(git).ok()?;
        let target = PathBuf::from(text.strip_prefix("gitdir:")?.trim());
        if target.is_absolute() { target } else { git.parent()?.join(target) }
    } else {
        git.to_path_buf()
    };
    let head = std::fs::read_to_string(git_dir.join("HEAD")).ok()?;
    head.trim().strip_prefix("ref: refs/heads/").map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_work_tree_root_and_branch_from_a_subdirectory() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let root = tmp.path();
        std::fs::create_dir_all(root.join(".git"))?;
        std::fs::write(root.join(".git/HEAD"), "ref: refs/heads/feature/x\n")?;
        std::fs::create_dir_all(root.join("src/deep"))?;
        let ws = detect(&root.join("src/deep"));
        assert_eq!(ws, Workspace { root: root.to_path_buf(), branch: Some("feature/x".into()) });
        Ok(())
    }

    #[test]
    fn worktree_gitdir_file_and_detached_head() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let real = tmp.path().join("real-git-dir");
        std::fs::create_dir_all(&real)?;
        std::fs::write(real.join("HEAD"), "ref: refs/heads/wt\n")?;
        let wt = tmp.path().join("wt");
        std::fs::create_dir_all(&wt)?;
        std::fs::write(wt.join(".git"), format!("gitdir: {}\n", real.display()))?;
        assert_eq!(detect(&wt).branch.as_deref(), Some("wt"));
        std::fs::write(real.join("HEAD"), "0123456789abcdef\n")?;
        assert_eq!(detect(&wt).branch, None);
        Ok(())
    }

    #[test]
    fn outside_git_the_directory_is_the_workspace() -> std::io::Result<()> {
        let tmp = tempfile::tempdir()?;
        // tempdir lives under /tmp, which is not in a git repository here.
        let ws = detect(tmp.path());
        if !tmp.path().ancestors().any(|a| a.join(".git").exists()) {
            assert_eq!(ws, Workspace { root: tmp.path().to_path_buf(), branch: None });
        }
        Ok(())
    }
}
