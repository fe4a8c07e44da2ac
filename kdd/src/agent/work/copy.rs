//! `work.copy`: what a new worktree is given from the King's tree before
//! its member starts — the entries of `work.copy`, or by default of
//! `.worktreeinclude` — regular files and directories only, never through
//! a symlink, nothing outside the repository, within a bound.

use std::path::{Component, Path, PathBuf};

/// Files and bytes one worktree's `work.copy` may copy.
const MAX_COPY_FILES: usize = 100_000;
const MAX_COPY_BYTES: u64 = 4 << 30;

/// The file listing what a new worktree is given by default.
pub const WORKTREEINCLUDE: &str = ".worktreeinclude";

/// The entries of `.worktreeinclude` at the repository's top: one path a
/// line, `#` comments and blank lines aside, a leading or trailing `/`
/// dropped; a pattern (`*`, `?`, `[`, `!`) is not a path and is skipped.
pub(super) fn worktreeinclude(repo: &Path) -> Vec<String> {
    let Ok(text) = crate::git::read_regular(&repo.join(WORKTREEINCLUDE), 64 * 1024) else { return Vec::new() };
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.contains(['*', '?', '[', '!']))
        .map(|l| l.trim_matches('/').to_string())
        .filter(|l| relative(l).is_some())
        .take(256)
        .collect()
}

/// `p` as a path inside the repository: relative, with no `..`.
fn relative(p: &str) -> Option<PathBuf> {
    let path = Path::new(p);
    let ok = !p.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    ok.then(|| path.components().filter(|c| matches!(c, Component::Normal(_))).collect::<PathBuf>())
        .filter(|p| !p.as_os_str().is_empty())
}

/// Copies each entry of the King's tree `repo` into the worktree `dir`:
/// regular files and directories only (a symlink — the entry, a directory
/// on its way, or one inside a directory copied — is never followed, nor
/// copied), nothing outside the repository, a missing entry skipped. The
/// entries copied.
pub(super) fn copy_entries(repo: &Path, dir: &Path, entries: &[String]) -> Result<Vec<String>, String> {
    let mut budget = (MAX_COPY_FILES, MAX_COPY_BYTES);
    let mut copied = Vec::new();
    for entry in entries {
        let Some(rel) = relative(entry) else {
            return Err(format!("{entry:?} is not a path inside the repository"));
        };
        // No component on the way may be a symlink, in either tree.
        if through_symlink(repo, &rel) || through_symlink(dir, &rel) {
            continue;
        }
        let from = repo.join(&rel);
        let Ok(meta) = std::fs::symlink_metadata(&from) else { continue };
        let to = dir.join(&rel);
        if meta.is_file() || meta.is_dir() {
            copy_tree(&from, &to, &mut budget).map_err(|e| format!("{entry}: {e}"))?;
            copied.push(entry.clone());
        }
    }
    Ok(copied)
}

/// Whether a directory on the way from `root` to `rel` (`rel` itself
/// aside) is a symlink.
fn through_symlink(root: &Path, rel: &Path) -> bool {
    let mut at = root.to_path_buf();
    let Some(parent) = rel.parent() else { return false };
    parent.components().any(|c| {
        at.push(c);
        std::fs::symlink_metadata(&at).is_ok_and(|m| m.file_type().is_symlink())
    })
}

/// Copies a regular file or a directory's regular files and directories.
fn copy_tree(from: &Path, to: &Path, budget: &mut (usize, u64)) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(from)?;
    if meta.is_dir() {
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match std::fs::symlink_metadata(to) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                std::fs::remove_file(to)?;
                std::fs::create_dir(to)?;
            }
            Err(_) => std::fs::create_dir(to)?,
        }
        for item in std::fs::read_dir(from)? {
            let item = item?;
            copy_tree(&item.path(), &to.join(item.file_name()), budget)?;
        }
        return Ok(());
    }
    if !meta.is_file() {
        return Ok(());
    }
    if budget.0 == 0 || budget.1 < meta.len() {
        return Err(std::io::Error::other("work.copy: too much to copy (at most 100,000 files, 4 GiB)"));
    }
    budget.0 -= 1;
    budget.1 -= meta.len();
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // A symlink where the copy goes (a tracked one) is replaced, not followed.
    if std::fs::symlink_metadata(to).is_ok_and(|m| !m.is_file()) {
        std::fs::remove_file(to)?;
    }
    std::fs::copy(from, to)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_stay_inside_the_repository() {
        assert_eq!(relative("a/./b"), Some(PathBuf::from("a/b")));
        for bad in ["", "/etc", "../x", "a/../../b", "."] {
            assert_eq!(relative(bad), None, "{bad}");
        }
    }

    #[test]
    fn copy_takes_files_and_directories_never_a_symlink() {
        let base = std::env::temp_dir().join(format!("kd-copy-{}", std::process::id()));
        let (repo, dir, outside) = (base.join("repo"), base.join("wt"), base.join("outside"));
        for d in [&repo, &dir, &outside, &repo.join("conf/sub")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(repo.join(".env"), "SECRET=1").unwrap();
        std::fs::write(repo.join("conf/sub/a.toml"), "a").unwrap();
        std::fs::write(outside.join("x"), "outside").unwrap();
        std::os::unix::fs::symlink(&outside, repo.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("x"), repo.join("conf/sub/x")).unwrap();
        std::os::unix::fs::symlink(&outside, repo.join("conf/out")).unwrap();
        let entries = [".env", "conf", "link", "link/x", "missing"].map(String::from);
        let copied = copy_entries(&repo, &dir, &entries).unwrap();
        assert_eq!(copied, [".env", "conf"]);
        assert_eq!(std::fs::read_to_string(dir.join(".env")).unwrap(), "SECRET=1");
        assert_eq!(std::fs::read_to_string(dir.join("conf/sub/a.toml")).unwrap(), "a");
        assert!(std::fs::symlink_metadata(dir.join("conf/sub/x")).is_err());
        assert!(std::fs::symlink_metadata(dir.join("conf/out")).is_err());
        assert!(std::fs::symlink_metadata(dir.join("link")).is_err());
        // A symlink in the worktree where a copy goes is replaced, not written through.
        std::os::unix::fs::symlink(outside.join("x"), dir.join("dot")).unwrap();
        std::fs::write(repo.join("dot"), "mine").unwrap();
        copy_entries(&repo, &dir, &["dot".to_string()]).unwrap();
        assert_eq!(std::fs::read_to_string(outside.join("x")).unwrap(), "outside");
        assert_eq!(std::fs::read_to_string(dir.join("dot")).unwrap(), "mine");
        assert!(copy_entries(&repo, &dir, &["../x".to_string()]).is_err());
        std::fs::write(repo.join(WORKTREEINCLUDE), "# local files\n.env\n/conf/\n*.key\n../up\n\n").unwrap();
        assert_eq!(worktreeinclude(&repo), [".env", "conf"]);
        let _ = std::fs::remove_dir_all(&base);
    }
}
