//! Bringing a member's work up to date (issue 34): the King's HEAD merged
//! into the member's branch in its worktree — a merge, never a rewrite, so
//! every commit of the member stays on its branch — by kd's git as
//! [`super::member`] runs it there (the git directory kd made, no hook, no
//! filter or merge driver the worktree names). When it conflicts, the merge
//! is left in progress, its conflicted files holding git's markers for the
//! member to resolve; kd concludes it ([`Tree::commit_merge`]) only once no
//! marker is left ([`Tree::unresolved`]), or undoes it
//! ([`Tree::merge_abort`]), which leaves the branch as it was.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use super::member::Tree;
use super::{GitResult, OUTPUT, failed};

/// Most bytes of a conflicted file looked at for markers.
const MAX_SCAN: u64 = 64 << 20;

/// What a merge into a member's branch did.
#[derive(Debug, PartialEq, Eq)]
pub enum Merged {
    /// Merged (or fast-forwarded): the branch's new head.
    Clean(String),
    /// Left in progress: the files that conflict.
    Conflicts(Vec<String>),
}

fn identity(author: &str) -> [(&'static str, &str); 4] {
    [
        ("GIT_AUTHOR_NAME", author),
        ("GIT_AUTHOR_EMAIL", "kd@localhost"),
        ("GIT_COMMITTER_NAME", "kd"),
        ("GIT_COMMITTER_EMAIL", "kd@localhost"),
    ]
}

impl Tree {
    /// The commit being merged into the worktree's branch, while a merge is
    /// in progress there (`MERGE_HEAD`).
    pub async fn merging(&self) -> GitResult<Option<String>> {
        let out = self.git(&["rev-parse", "--verify", "--quiet", "MERGE_HEAD^{commit}"], &[], OUTPUT).await?;
        Ok(out.ok.then(|| out.text().trim().to_string()))
    }

    /// Merges `theirs` into the worktree's branch, as `author` with
    /// `message`: a merge commit, or a fast-forward when the branch has
    /// nothing `theirs` lacks. The worktree must be clean (its changes
    /// committed). On a conflict the merge is left in progress.
    pub async fn merge(&self, theirs: &str, author: &str, message: &str) -> GitResult<Merged> {
        let head = self.head().await?;
        let behind = self.git(&["merge-base", "--is-ancestor", &head, theirs], &[], OUTPUT).await?.ok;
        let how = if behind { "--ff-only" } else { "--no-ff" };
        let args = ["merge", how, "--no-edit", "--no-verify", "--no-gpg-sign", "--quiet", "-m", message, theirs];
        let out = self.git(&args, &identity(author), OUTPUT).await?;
        if out.ok {
            return Ok(Merged::Clean(self.head().await?));
        }
        let conflicts = self.unmerged().await?;
        if self.merging().await?.is_some() && !conflicts.is_empty() {
            return Ok(Merged::Conflicts(conflicts));
        }
        // It failed another way: nothing is left half done.
        if self.merging().await?.is_some() {
            let _ = self.merge_abort().await;
        }
        Err(failed(&args, &out))
    }

    /// The files the merge in progress left unmerged (in git's index: kd
    /// has not staged them yet).
    pub async fn unmerged(&self) -> GitResult<Vec<String>> {
        self.staged_paths("--unmerged").await
    }

    /// The paths `git ls-files <which> -z` lists, one entry a stage.
    async fn staged_paths(&self, which: &str) -> GitResult<Vec<String>> {
        let out = self.must(&["ls-files", which, "-z"], &[]).await?;
        let mut files: Vec<String> = out
            .stdout
            .split(|b| *b == 0)
            .filter_map(|r| r.iter().position(|b| *b == b'\t').map(|at| String::from_utf8_lossy(&r[at + 1..])))
            .map(|p| p.into_owned())
            .collect();
        files.dedup();
        Ok(files)
    }

    /// The conflicted files that still hold a conflict marker: the unmerged
    /// ones, and those the member staged as they were (`git add` takes a
    /// file out of the unmerged ones; git keeps its stages as resolve-undo).
    pub async fn unresolved(&self) -> GitResult<Vec<String>> {
        let mut files = self.unmerged().await?;
        // A merge begins with none: these are this merge's (staged, or
        // staged and unstaged again).
        for p in self.staged_paths("--resolve-undo").await? {
            if !files.contains(&p) {
                files.push(p);
            }
        }
        let dir = self.dir().to_path_buf();
        let left = tokio::task::spawn_blocking(move || {
            files.into_iter().filter(|f| has_markers(&dir.join(f))).collect::<Vec<String>>()
        })
        .await
        .map_err(|e| super::GitError::Spawn(std::io::Error::other(e)))?;
        Ok(left)
    }

    /// Concludes the merge in progress with what is in the worktree (all of
    /// it staged, as [`Tree::commit_all`] does), as `author`: the merge
    /// commit. The caller checked no marker is left.
    pub async fn commit_merge(&self, author: &str, message: &str) -> GitResult<String> {
        self.stage_all().await?;
        self.must(&["commit", "--quiet", "--no-verify", "--no-gpg-sign", "-m", message], &identity(author)).await?;
        self.head().await
    }

    /// Undoes the merge in progress: the branch, and the files the merge
    /// brought, are as they were before it. What the member changed
    /// besides is kept in the worktree, unstaged: git's abort alone would
    /// drop what was staged. Refused, the merge left as it is, where that
    /// would lose a change of the member's: a file the merge brought
    /// changed since (git's abort refuses it unstaged, and would drop it
    /// staged), or staged names kd cannot keep apart (not UTF-8, too many).
    pub async fn merge_abort(&self) -> GitResult<()> {
        let mut staged_conflicts = Vec::new();
        if let Some(theirs) = self.merging().await? {
            let besides = self.staged_besides(&theirs).await?;
            self.each_path(&["reset", "--quiet"], &besides).await?;
            let unmerged = self.unmerged().await?;
            staged_conflicts = self.staged_paths("--resolve-undo").await?;
            staged_conflicts.retain(|p| !unmerged.contains(p));
        }
        self.must(&["merge", "--abort"], &[]).await?;
        // A conflicted file the member staged (and perhaps unstaged again)
        // is not the merge's to git's abort, which keeps it as it is,
        // markers and all: it is the branch's again.
        let ours = self.each_path(&["ls-tree", "-r", "--name-only", "-z", "HEAD"], &staged_conflicts).await?;
        self.each_path(&["checkout", "--quiet", "HEAD"], &ours).await?;
        Ok(())
    }

    /// `git ARGS -- PATHS`, the paths named literally, a few hundred a
    /// call: the names the calls listed (`-z`).
    async fn each_path(&self, args: &[&str], paths: &[String]) -> GitResult<Vec<String>> {
        let mut listed = Vec::new();
        for chunk in paths.chunks(256) {
            let specs: Vec<String> = chunk.iter().map(|p| format!(":(literal){p}")).collect();
            let mut all = args.to_vec();
            all.push("--");
            all.extend(specs.iter().map(String::as_str));
            listed.extend(names(&self.must(&all, &[]).await?)?);
        }
        Ok(listed)
    }

    /// The staged files the merge of `theirs` did not bring: those where
    /// the tree git's merge makes (conflicts and all) is the branch's head,
    /// and not in conflict. Refused (see [`Tree::merge_abort`]) when a
    /// file it brought was staged otherwise since.
    async fn staged_besides(&self, theirs: &str) -> GitResult<Vec<String>> {
        let refuse = |reason: String| super::GitError::Failed { args: "merge --abort".into(), reason };
        let merged = self.git(&["merge-tree", "--write-tree", "HEAD", theirs], &[], OUTPUT).await?;
        let tree = merged.text().lines().next().unwrap_or_default().trim().to_string();
        if !matches!(merged.code, Some(0 | 1)) || tree.len() < 40 {
            return Err(refuse(format!("git merge-tree: {}", merged.stderr.trim())));
        }
        let brought: HashSet<String> =
            names(&self.must(&["diff", "--name-only", "--no-renames", "-z", "HEAD", &tree], &[]).await?)?
                .into_iter()
                .collect();
        let unmerged: HashSet<String> =
            self.unmerged().await?.into_iter().chain(self.staged_paths("--resolve-undo").await?).collect();
        // Staged otherwise than the merge made it: the member's change of a
        // file the merge brought, which the abort would drop.
        let changed = names(&self.must(&["diff", "--cached", "--name-only", "--no-renames", "-z", &tree], &[]).await?)?;
        if let Some(p) = changed.iter().find(|p| brought.contains(*p) && !unmerged.contains(*p)) {
            return Err(refuse(format!("{p}, which the merge brought, was changed since")));
        }
        let staged = names(&self.must(&["diff", "--cached", "--name-only", "--no-renames", "-z"], &[]).await?)?;
        let besides: Vec<String> =
            staged.into_iter().filter(|p| !brought.contains(p) && !unmerged.contains(p)).collect();
        if besides.len() > MAX_KEPT {
            return Err(refuse(format!("{} files staged besides the merge, more than kd keeps apart", besides.len())));
        }
        Ok(besides)
    }
}

/// Most files staged besides a merge that its undoing keeps apart (each
/// named to `git reset`).
const MAX_KEPT: usize = 10_000;

/// The paths a `-z` listing of names holds; refused for a name that is not
/// UTF-8 (kd could not name it back to git).
fn names(out: &super::Output) -> GitResult<Vec<String>> {
    out.stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| {
            String::from_utf8(p.to_vec()).map_err(|_| super::GitError::Failed {
                args: "merge --abort".into(),
                reason: format!("a file name that is not UTF-8 ({})", String::from_utf8_lossy(p)),
            })
        })
        .collect()
}

/// Whether the regular file at `path` ([`super::open_regular`]) has a line
/// git writes around a conflict: `<<<<<<< `, `>>>>>>> ` or `|||||||`, or a
/// lone `=======`, at its start.
fn has_markers(path: &Path) -> bool {
    let Ok(file) = super::open_regular(path) else { return false };
    let mut reader = BufReader::new(file.take(MAX_SCAN));
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        let l = line.strip_suffix(b"\n").unwrap_or(&line);
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        let marker = |m: &[u8]| l.starts_with(m) && (l.len() == 7 || l[7] == b' ');
        if marker(b"<<<<<<<") || marker(b">>>>>>>") || marker(b"|||||||") || l == b"=======" {
            return true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflict_markers_are_found_at_the_start_of_a_line_only() {
        let dir = tempfile::tempdir().unwrap();
        let f = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).unwrap();
            has_markers(&p)
        };
        assert!(f("a", "x\n<<<<<<< HEAD\nmine\n=======\ntheirs\n>>>>>>> abc\n"));
        assert!(f("b", "x\r\n=======\r\n"), "CRLF");
        assert!(f("c", "end\n>>>>>>> main"), "no final newline");
        assert!(!f("d", "resolved\nsay <<<<<<< here\n========\n"));
        assert!(!f("e", ""));
        std::os::unix::fs::symlink(dir.path().join("a"), dir.path().join("link")).unwrap();
        assert!(!has_markers(&dir.path().join("link")), "never through a symlink");
        assert!(!has_markers(&dir.path().join("gone")));
    }

    /// A member that leaves a FIFO where a conflicted file was: kd's look
    /// for markers is not stuck opening it (nothing will ever write it).
    #[test]
    fn a_fifo_left_as_a_conflicted_file_is_not_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("a.txt");
        let fifo_type = rustix::fs::FileType::Fifo;
        rustix::fs::mknodat(rustix::fs::CWD, &fifo, fifo_type, rustix::fs::Mode::from(0o600), 0).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(has_markers(&fifo)));
        let found = rx.recv_timeout(std::time::Duration::from_secs(10)).expect("has_markers returns");
        assert!(!found);
    }
}
