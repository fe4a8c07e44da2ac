//! Git in a member's worktree, trusting nothing the member wrote (issue 31
//! item 9). Everything in the worktree is the member's — its `.git` too,
//! which it can replace with a repository of its own (whose configuration
//! names an fsmonitor, hooks, filters: programs kdd would run outside any
//! sandbox) or with a symlink to the King's `.git` (so that kd's commit
//! lands on the King's branch). So kd's git there:
//!
//! - uses the git directory kd made for the worktree, found in the King's
//!   repository (`<common dir>/worktrees/*`, whose `gitdir` names the
//!   worktree), never the one the worktree's `.git` claims
//!   (`--git-dir`/`--work-tree`);
//! - refuses a worktree whose `.git` is not the file kd made, pointing at
//!   that directory ([`Found::Tampered`]);
//! - runs no hook (`core.hooksPath=/dev/null`, `--no-verify`), no
//!   fsmonitor, no automatic gc, and no filter the worktree can name: the
//!   attributes come from the commit the worktree was made at
//!   (`--attr-source`, git 2.41 and later; before, every filter a
//!   `.gitattributes` in the worktree names is emptied, so files are
//!   committed as they are);
//! - never looks into a repository the member nests in its worktree (a
//!   gitlink): `git add` would run `git status` in it, under its own
//!   configuration;
//! - refuses a git directory holding anything but files and directories
//!   (a FIFO for its `index` or `MERGE_HEAD`: git would wait on it for
//!   good), as it refuses kd's branch made a FIFO or a symbolic ref; what
//!   git would still wait on in the worktree itself (a FIFO `.gitignore`)
//!   is stopped at the time bound ([`super::member_bound`]).
//!
//! Configuration given on git's command line reaches every git it starts
//! (`GIT_CONFIG_PARAMETERS`), and overrides the repository's.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use super::{GitError, GitResult, OUTPUT, Output, bounded, failed, git};

/// A member's worktree, as kd made it.
#[derive(Debug, Clone)]
pub struct Tree {
    /// The King's tree (whose lock git runs under).
    repo: PathBuf,
    dir: PathBuf,
    /// The git directory kd made for it, in the King's repository.
    gitdir: PathBuf,
    /// The commit it was made at: where attributes are read from.
    base: String,
}

/// What kd found at a member's worktree.
#[derive(Debug)]
pub enum Found {
    Ours(Tree),
    /// Not as kd made it: why, in words for the King.
    Tampered(String),
}

/// Most bytes read of a `.git` file or a record of kd's (a path).
const MAX_RECORD: u64 = 8 * 1024;
/// Most entries of the worktree looked at for `.gitattributes` files (old
/// git only).
const MAX_WALK: usize = 200_000;

/// The member's worktree `dir` of the King's tree `repo`, made at `base`
/// on the branch `branch` (`kd/THREAD/MEMBER`): kd's only when its `.git`
/// is the file kd made, its HEAD is still on that branch, and that branch
/// still holds `base`.
pub async fn open(repo: &Path, dir: &Path, base: &str, branch: &str) -> GitResult<Found> {
    let args = ["rev-parse", "--path-format=absolute", "--git-common-dir"];
    let out = git(repo, repo, &args, &[], OUTPUT).await?;
    if !out.ok {
        return Err(failed(&args, &out));
    }
    let common = PathBuf::from(out.text().trim_end_matches('\n'));
    let d = dir.to_path_buf();
    let b = branch.to_string();
    let found = tokio::task::spawn_blocking(move || inspect(&common, &d, &b))
        .await
        .map_err(|e| GitError::Spawn(std::io::Error::other(e)))?;
    let tree = match found {
        Ok(gitdir) => Tree { repo: repo.to_path_buf(), dir: dir.to_path_buf(), gitdir, base: base.into() },
        Err(why) => return Ok(Found::Tampered(why)),
    };
    // kd's branch moved to a history without the commit kd made the
    // worktree at (`git update-ref`, `git reset` past it), or deleted: kd's
    // commit would start a history of its own.
    let args = ["merge-base", "--is-ancestor", base, "HEAD"];
    let out = tree.git(&args, &[], OUTPUT).await?;
    Ok(match out.code {
        Some(0) => Found::Ours(tree),
        Some(1) => Found::Tampered(format!(
            "kd's branch {branch} was moved to a history without {}, the commit kd made the worktree at",
            kd_proto::work::short_commit(base)
        )),
        _ if tree.git(&["rev-parse", "--verify", "--quiet", "HEAD"], &[], OUTPUT).await?.ok => {
            return Err(failed(&args, &out));
        }
        _ => Found::Tampered(format!("kd's branch {branch} is gone")),
    })
}

/// The git directory kd made for the worktree `dir` of the repository whose
/// common git directory is `common`, once the worktree's `.git` is found to
/// be the file kd made pointing at it and its HEAD on `branch`; else why
/// not.
fn inspect(common: &Path, dir: &Path, branch: &str) -> Result<PathBuf, String> {
    let want = std::fs::canonicalize(dir).map_err(|e| format!("kd cannot read the worktree {}: {e}", dir.display()))?;
    let gitdir = recorded(common, &want).ok_or(
        "kd's record of it in the King's repository is gone (its .git was removed or replaced, and git pruned it)",
    )?;
    let dotgit = dir.join(".git");
    let meta = match std::fs::symlink_metadata(&dotgit) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err("its .git is gone".into()),
        Err(e) => return Err(format!("its .git cannot be read: {e}")),
    };
    if meta.file_type().is_symlink() {
        let to = std::fs::read_link(&dotgit).map(|p| p.display().to_string()).unwrap_or_default();
        return Err(format!("its .git is a symlink (to {to}), not the file kd made"));
    }
    if meta.is_dir() {
        return Err("its .git is a directory: a repository of its own, not the file kd made".into());
    }
    if !meta.is_file() || meta.len() > MAX_RECORD {
        return Err("its .git is not the file kd made".into());
    }
    let text = read_small(&dotgit).map_err(|e| format!("its .git cannot be read: {e}"))?;
    let named = text.strip_prefix("gitdir: ").map(|p| p.trim_end_matches(['\n', '\r']));
    let points = named.map(|p| dir.join(p)).and_then(|p| std::fs::canonicalize(p).ok());
    let ours = std::fs::canonicalize(&gitdir).ok();
    if points.is_none() || points != ours {
        return Err(format!("its .git points elsewhere ({}), not at the git directory kd made", text.trim()));
    }
    if let Some(odd) = not_a_file(&gitdir) {
        return Err(format!("its git directory holds {odd}, which git would wait on or follow"));
    }
    // A worktree may check out another branch (the King's own, with
    // `--ignore-other-worktrees`): kd's commit would land there.
    let head = read_small(&gitdir.join("HEAD")).map_err(|e| format!("its HEAD cannot be read: {e}"))?;
    let head = head.trim_end_matches(['\n', '\r']);
    if head.strip_prefix("ref: refs/heads/") != Some(branch) {
        let what = match head.strip_prefix("ref: ") {
            Some(r) => format!("on {r}"),
            None => "detached".to_string(),
        };
        return Err(format!("its HEAD is {what}, not on kd's branch {branch}"));
    }
    // The branch itself a symbolic ref (to the King's branch, say): kd's
    // commit would move what it points at. (A packed ref is never one.)
    for of_branch in [common.join("refs/heads").join(branch), common.join("logs/refs/heads").join(branch)] {
        let odd = std::fs::symlink_metadata(&of_branch).is_ok_and(|m| !m.is_file());
        if odd {
            return Err(format!("kd's branch {branch} is not a file ({})", of_branch.display()));
        }
    }
    let loose = common.join("refs/heads").join(branch);
    if std::fs::symlink_metadata(&loose).is_ok() {
        let text = read_small(&loose).map_err(|e| format!("kd's branch {branch} cannot be read: {e}"))?;
        if let Some(to) = text.strip_prefix("ref:") {
            return Err(format!("kd's branch {branch} is made a symbolic ref (to {})", to.trim()));
        }
    }
    Ok(gitdir)
}

/// Most entries of a worktree's git directory looked at.
const MAX_GITDIR: usize = 10_000;

/// The first thing in the git directory `dir` (its files, `logs/`, its
/// own `refs/`) that is neither a regular file nor a directory — a FIFO,
/// a socket, a device, a symlink — with what it is; none when all are.
pub(super) fn not_a_file(dir: &Path) -> Option<String> {
    let odd = |entry: &std::fs::DirEntry, kind: std::fs::FileType| {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_dir() || kind.is_file() {
            return None;
        }
        let what = match kind {
            k if k.is_fifo() => "a FIFO",
            k if k.is_symlink() => "a symlink",
            k if k.is_socket() => "a socket",
            _ => "a device",
        };
        let path = entry.path();
        Some(format!("{what} ({})", path.strip_prefix(dir).unwrap_or(&path).display()))
    };
    match walk(dir, MAX_GITDIR, |_| true, odd) {
        Walked::Stopped(found) => Some(found),
        Walked::TooMany => Some(format!("more than {MAX_GITDIR} entries")),
        Walked::Whole => None,
    }
}

/// How a bounded walk ([`walk`]) ended.
enum Walked<T> {
    /// Every entry was visited.
    Whole,
    /// A visit returned this.
    Stopped(T),
    /// There were more entries than the walk looks at.
    TooMany,
}

/// Visits the entries below `dir` with their kind (never through a
/// symlink; into a directory only where `descend` says), at most `max` of
/// them, until a visit returns something.
fn walk<T>(
    dir: &Path,
    max: usize,
    descend: impl Fn(&std::fs::DirEntry) -> bool,
    mut visit: impl FnMut(&std::fs::DirEntry, std::fs::FileType) -> Option<T>,
) -> Walked<T> {
    let mut stack = vec![dir.to_path_buf()];
    let mut seen = 0;
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > max {
                return Walked::TooMany;
            }
            let Ok(kind) = entry.file_type() else { continue };
            if let Some(found) = visit(&entry, kind) {
                return Walked::Stopped(found);
            }
            if kind.is_dir() && descend(&entry) {
                stack.push(entry.path());
            }
        }
    }
    Walked::Whole
}

/// The entry of `<common>/worktrees/` whose `gitdir` names `<worktree>/.git`
/// (`worktree` canonical), and whose `commondir` leads back to `common`.
fn recorded(common: &Path, worktree: &Path) -> Option<PathBuf> {
    let common_real = std::fs::canonicalize(common).ok()?;
    let entries = std::fs::read_dir(common.join("worktrees")).ok()?;
    for entry in entries.flatten() {
        let admin = entry.path();
        if !std::fs::symlink_metadata(&admin).is_ok_and(|m| m.is_dir()) {
            continue;
        }
        let Ok(text) = read_small(&admin.join("gitdir")) else { continue };
        let target = admin.join(text.trim_end_matches(['\n', '\r']));
        if target.file_name() != Some(std::ffi::OsStr::new(".git")) {
            continue;
        }
        let names_it = target.parent().and_then(|p| std::fs::canonicalize(p).ok()).is_some_and(|p| p == worktree);
        if !names_it {
            continue;
        }
        let back = read_small(&admin.join("commondir"))
            .ok()
            .and_then(|c| std::fs::canonicalize(admin.join(c.trim_end_matches(['\n', '\r']))).ok());
        return (back.as_deref() == Some(common_real.as_path())).then_some(admin);
    }
    None
}

/// A regular file's text ([`super::open_regular`]), at most [`MAX_RECORD`] bytes.
fn read_small(path: &Path) -> std::io::Result<String> {
    super::read_regular(path, MAX_RECORD)
}

/// Whether this git reads attributes from a tree (`--attr-source`, 2.41).
async fn attr_source() -> bool {
    static KNOWN: OnceLock<bool> = OnceLock::new();
    if let Some(k) = KNOWN.get() {
        return *k;
    }
    let root = Path::new("/");
    let version = git(root, root, &["version"], &[], 1024).await.map(|o| o.text()).unwrap_or_default();
    let newer = version_at_least(&version, (2, 41));
    if !newer {
        tracing::warn!(
            "{}: older than 2.41, so kd commits members' work without any filter (git-lfs included)",
            version.trim()
        );
    }
    *KNOWN.get_or_init(|| newer)
}

/// Whether `git version X.Y…` says at least `min`.
fn version_at_least(said: &str, min: (u32, u32)) -> bool {
    let Some(v) = said.split_whitespace().nth(2) else { return false };
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= min,
        _ => false,
    }
}

/// The filters the `.gitattributes` files in `dir` name (never through a
/// symlink, nor into a `.git`).
fn named_filters(dir: &Path) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let read = |entry: &std::fs::DirEntry, kind: std::fs::FileType| {
        if kind.is_file()
            && entry.file_name() == ".gitattributes"
            && let Ok(text) = super::read_regular(&entry.path(), 1 << 20)
        {
            names.extend(text.split_whitespace().filter_map(|t| t.strip_prefix("filter=")).map(str::to_string));
        }
        None::<()>
    };
    // Past the bound, the filters named so far.
    let _ = walk(dir, MAX_WALK, |e| e.file_name() != ".git", read);
    names
}

/// The variables that empty the filters `names` for one git command (and
/// the gits it starts): `GIT_CONFIG_COUNT`, `GIT_CONFIG_KEY_n`,
/// `GIT_CONFIG_VALUE_n`.
fn filters_emptied(names: &BTreeSet<String>) -> Vec<(String, String)> {
    let mut env = Vec::new();
    let mut n = 0;
    for name in names {
        for (key, value) in [("clean", ""), ("smudge", ""), ("process", ""), ("required", "false")] {
            env.push((format!("GIT_CONFIG_KEY_{n}"), format!("filter.{name}.{key}")));
            env.push((format!("GIT_CONFIG_VALUE_{n}"), value.to_string()));
            n += 1;
        }
    }
    env.push(("GIT_CONFIG_COUNT".into(), n.to_string()));
    env
}

impl Tree {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `git ARGS` in the worktree, as the module says.
    pub(super) async fn git(&self, args: &[&str], env: &[(&str, &str)], limit: usize) -> GitResult<Output> {
        let asked = args.join(" ");
        let mut full: Vec<String> =
            vec![format!("--git-dir={}", self.gitdir.display()), format!("--work-tree={}", self.dir.display())];
        for setting in ["core.hooksPath=/dev/null", "core.fsmonitor=false", "gc.auto=0", "maintenance.auto=false"] {
            full.extend(["-c".to_string(), setting.to_string()]);
        }
        let mut env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        if attr_source().await {
            full.push(format!("--attr-source={}", self.base));
        } else {
            // Every filter the worktree names, emptied (git skips an empty
            // command), by variables, as a name may hold any character.
            let dir = self.dir.clone();
            let names = tokio::task::spawn_blocking(move || named_filters(&dir)).await.unwrap_or_default();
            env.extend(filters_emptied(&names));
        }
        full.extend(args.iter().map(|a| a.to_string()));
        let args: Vec<&str> = full.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let lock = self.gitdir.join("index.lock");
        match bounded(&self.repo, &self.dir, &args, &env, limit, (super::member_bound(), Some(&lock))).await {
            // Said as it was asked, without kd's own options.
            Err(GitError::TimedOut { within, .. }) => Err(GitError::TimedOut { args: asked, within }),
            done => done,
        }
    }

    pub(super) async fn must(&self, args: &[&str], env: &[(&str, &str)]) -> GitResult<Output> {
        let out = self.git(args, env, OUTPUT).await?;
        if out.ok { Ok(out) } else { Err(failed(args, &out)) }
    }

    /// The repositories the member nested in its worktree that kd committed
    /// as gitlinks: their paths.
    pub(super) async fn gitlinks(&self) -> GitResult<Vec<String>> {
        let out = self.must(&["ls-files", "--stage", "-z"], &[]).await?;
        Ok(out
            .stdout
            .split(|b| *b == 0)
            .filter(|r| r.starts_with(b"160000 "))
            .filter_map(|r| {
                r.iter().position(|b| *b == b'\t').map(|at| String::from_utf8_lossy(&r[at + 1..]).into_owned())
            })
            .collect())
    }

    /// Commits everything changed in the worktree (new, modified and
    /// deleted files; ignored files stay out; a nested repository as it was
    /// first committed) as `author <kd@localhost>`, with `message`. The new
    /// commit; none when nothing changed.
    pub async fn commit_all(&self, author: &str, message: &str) -> GitResult<Option<String>> {
        self.stage_all().await?;
        let staged = self.git(&["diff", "--cached", "--quiet"], &[], OUTPUT).await?;
        if staged.ok {
            return Ok(None);
        }
        let env = [
            ("GIT_AUTHOR_NAME", author),
            ("GIT_AUTHOR_EMAIL", "kd@localhost"),
            ("GIT_COMMITTER_NAME", "kd"),
            ("GIT_COMMITTER_EMAIL", "kd@localhost"),
        ];
        self.must(&["commit", "--quiet", "--no-verify", "--no-gpg-sign", "-m", message], &env).await?;
        Ok(Some(self.head().await?))
    }

    /// Stages everything changed in the worktree but the repositories the
    /// member nested in it ([`Tree::commit_all`]).
    pub(super) async fn stage_all(&self) -> GitResult<()> {
        let links = self.gitlinks().await?;
        let excluded: Vec<String> = links.iter().map(|l| format!(":(top,exclude,literal){l}")).collect();
        let mut add = vec!["add", "--all", "--", ":/"];
        add.extend(excluded.iter().map(String::as_str));
        self.must(&add, &[]).await?;
        Ok(())
    }

    /// The commit the worktree's branch is at.
    pub async fn head(&self) -> GitResult<String> {
        let out = self.git(&["rev-parse", "--verify", "--quiet", "HEAD^{commit}"], &[], OUTPUT).await?;
        if !out.ok {
            return Err(GitError::NoCommit { repo: self.dir.display().to_string() });
        }
        Ok(out.text().trim().to_string())
    }

    /// Whether nothing in the worktree differs from its last commit (nested
    /// repositories aside).
    pub async fn is_clean(&self) -> GitResult<bool> {
        let out = self.git(&["status", "--porcelain", "--ignore-submodules=all"], &[], 1024).await?;
        Ok(out.ok && out.stdout.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_versions_are_read_as_git_prints_them() {
        assert!(version_at_least("git version 2.47.3\n", (2, 41)));
        assert!(version_at_least("git version 2.41.0", (2, 41)));
        assert!(version_at_least("git version 3.0.1", (2, 41)));
        assert!(!version_at_least("git version 2.39.5 (Apple Git-154)", (2, 41)));
        assert!(!version_at_least("nonsense", (2, 41)));
    }

    #[test]
    // The test runs git itself, as an older git would be run.
    #[allow(clippy::disallowed_methods)]
    fn an_emptied_filter_is_not_run_by_git_add() {
        let dir = tempfile::tempdir().unwrap();
        let (root, ran) = (dir.path().join("r"), dir.path().join("ran"));
        let spy = dir.path().join("spy.sh");
        std::fs::write(&spy, format!("#!/bin/sh\necho ran >> {}\ncat\n", ran.display())).unwrap();
        std::fs::set_permissions(&spy, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let git = |args: &[&str], env: &[(String, String)]| {
            let out = std::process::Command::new("git")
                .arg("-C")
                .arg(&root)
                .args(args)
                .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .output()
                .unwrap();
            assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        std::fs::create_dir_all(&root).unwrap();
        git(&["init", "--quiet"], &[]);
        for key in ["clean", "smudge", "process"] {
            git(&["config", &format!("filter.spy.{key}"), spy.to_str().unwrap()], &[]);
        }
        git(&["config", "filter.spy.required", "true"], &[]);
        std::fs::write(root.join(".gitattributes"), "* filter=spy\n").unwrap();
        std::fs::write(root.join("a.txt"), "a\n").unwrap();
        let names = named_filters(&root);
        git(&["add", "--all"], &filters_emptied(&names));
        assert!(!ran.exists(), "the emptied filter ran");
    }

    #[test]
    fn the_filters_a_worktree_names_are_found_in_every_gitattributes() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join(".gitattributes"), "*.bin filter=lfs diff=lfs\n[attr]mine filter=x\n").unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/.gitattributes"), "* filter=deep\n").unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/.gitattributes"), "* filter=hidden\n").unwrap();
        std::os::unix::fs::symlink(root.join("a"), root.join("link")).unwrap();
        let names: Vec<String> = named_filters(root).into_iter().collect();
        assert_eq!(names, ["deep", "lfs", "x"]);
    }
}
