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

use super::member::Tree;
use super::{GitResult, OUTPUT, failed};

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
            let kept;
            (kept, staged_conflicts) = self.kept_apart(&theirs).await?;
            self.each_path(&["reset", "--quiet"], &kept).await?;
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

    /// What undoing the merge of `theirs` keeps apart: the staged files it
    /// did not bring (those where the tree git's merge makes, conflicts and
    /// all, is the branch's head, and not in conflict), and the conflicted
    /// files the member staged (git keeps them as resolve-undo). Refused
    /// (see [`Tree::merge_abort`]) when a file it brought was staged
    /// otherwise since, or a name to hand to git is not UTF-8. Names are
    /// compared as git lists them.
    async fn kept_apart(&self, theirs: &str) -> GitResult<(Vec<String>, Vec<String>)> {
        let refuse = |reason: String| super::GitError::Failed { args: "merge --abort".into(), reason };
        let merged = self.git(&["merge-tree", "--write-tree", "HEAD", theirs], &[], OUTPUT).await?;
        let tree = merged.text().lines().next().unwrap_or_default().trim().to_string();
        if !matches!(merged.code, Some(0 | 1)) || tree.len() < 40 {
            return Err(refuse(format!("git merge-tree: {}", merged.stderr.trim())));
        }
        let listed = |out: super::Output| -> HashSet<Vec<u8>> { raw_names(&out).map(<[u8]>::to_vec).collect() };
        let brought = listed(self.must(&["diff", "--name-only", "--no-renames", "-z", "HEAD", &tree], &[]).await?);
        let unmerged: HashSet<Vec<u8>> = self.staged_names("--unmerged").await?.into_iter().collect();
        let undo: Vec<Vec<u8>> = self.staged_names("--resolve-undo").await?;
        let undone: HashSet<&[u8]> = undo.iter().map(Vec::as_slice).collect();
        let in_conflict = |p: &[u8]| unmerged.contains(p) || undone.contains(p);
        // Staged otherwise than the merge made it: the member's change of a
        // file the merge brought, which the abort would drop.
        let changed = self.must(&["diff", "--cached", "--name-only", "--no-renames", "-z", &tree], &[]).await?;
        if let Some(p) = raw_names(&changed).find(|p| brought.contains(*p) && !in_conflict(p)) {
            let p = String::from_utf8_lossy(p);
            return Err(refuse(format!("{p}, which the merge brought, was changed since")));
        }
        let staged = self.must(&["diff", "--cached", "--name-only", "--no-renames", "-z"], &[]).await?;
        let besides: Vec<&[u8]> = raw_names(&staged).filter(|p| !brought.contains(*p) && !in_conflict(p)).collect();
        if besides.len() > MAX_KEPT {
            return Err(refuse(format!("{} files staged besides the merge, more than kd keeps apart", besides.len())));
        }
        let staged_conflicts = undo.iter().filter(|p| !unmerged.contains(*p)).map(Vec::as_slice);
        let text = |p: &[u8]| {
            String::from_utf8(p.to_vec())
                .map_err(|_| refuse(format!("a file name that is not UTF-8 ({})", String::from_utf8_lossy(p))))
        };
        Ok((
            besides.into_iter().map(text).collect::<GitResult<_>>()?,
            staged_conflicts.map(text).collect::<GitResult<_>>()?,
        ))
    }
}

/// Most files staged besides a merge that its undoing keeps apart (each
/// named to `git reset`).
const MAX_KEPT: usize = 10_000;

/// The paths a `-z` listing of names holds, as git lists them.
fn raw_names(out: &super::Output) -> impl Iterator<Item = &[u8]> {
    out.stdout.split(|b| *b == 0).filter(|p| !p.is_empty())
}

/// The paths a `-z` listing of names holds; refused for a name that is not
/// UTF-8 (kd could not name it back to git).
fn names(out: &super::Output) -> GitResult<Vec<String>> {
    raw_names(out)
        .map(|p| {
            String::from_utf8(p.to_vec()).map_err(|_| super::GitError::Failed {
                args: "merge --abort".into(),
                reason: format!("a file name that is not UTF-8 ({})", String::from_utf8_lossy(p)),
            })
        })
        .collect()
}
