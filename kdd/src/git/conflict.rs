//! What a merge into a member's branch left in conflict (issue 34): each
//! unmerged file with what each side has at its path, whether it holds
//! git's markers, which file git moved aside for another side's of another
//! kind — and what the member is told of one without markers
//! ([`Conflict::without_markers`]). [`mod@super::merge`] starts, concludes and
//! undoes the merge.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::member::Tree;
use super::{GitResult, OUTPUT};

/// Most bytes of a conflicted file looked at for markers.
const MAX_SCAN: u64 = 64 << 20;

impl Tree {
    /// The files the merge in progress left unmerged (in git's index: kd
    /// has not staged them yet).
    pub async fn unmerged(&self) -> GitResult<Vec<String>> {
        self.staged_paths("--unmerged").await
    }

    /// The files the merge in progress left unmerged, each with the sides
    /// that have it, whether it holds git's markers, and which file of
    /// another side's git moved aside it stands for or beside.
    pub async fn conflicts(&self) -> GitResult<Vec<Conflict>> {
        let out = self.must(&["ls-files", "--unmerged", "-z"], &[]).await?;
        let theirs = self.merging().await?.unwrap_or_default();
        let mut files = stages(&out.stdout);
        let dir = self.dir().to_path_buf();
        tokio::task::spawn_blocking(move || {
            for c in &mut files {
                c.markers = has_markers(&dir.join(OsStr::from_bytes(&c.name)));
            }
            moved_aside(&mut files, &theirs, |name| std::fs::symlink_metadata(dir.join(name)).is_ok());
            files
        })
        .await
        .map_err(|e| super::GitError::Spawn(std::io::Error::other(e)))
    }

    /// Whether conflict `c`, one without markers now, is as git left it:
    /// git wrote none into it (a text conflict whose markers are gone was
    /// decided, even as one side's version exactly), and its path holds the
    /// object git left there, as kd's git reads the file (its line endings
    /// converted as the merge wrote them) or a symbolic link's target.
    /// Deleted, or changed, it was decided.
    pub async fn untouched(&self, c: &Conflict) -> GitResult<bool> {
        let Some(object) = c.left() else { return Ok(false) };
        // A name git cannot be given as text cannot be compared: taken as
        // undecided, the member is asked (its run's end concludes it).
        if std::str::from_utf8(&c.name).is_err() {
            return Ok(true);
        }
        if self.marked(c).await? {
            return Ok(false);
        }
        let path = self.dir().join(OsStr::from_bytes(&c.name));
        let kind = tokio::task::spawn_blocking(move || {
            let meta = std::fs::symlink_metadata(&path).ok()?;
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).ok()?;
                return Some(Some(std::os::unix::ffi::OsStringExt::into_vec(target.into_os_string())));
            }
            // Only a regular file is read (a FIFO would hold git).
            meta.file_type().is_file().then_some(None)
        })
        .await
        .map_err(|e| super::GitError::Spawn(std::io::Error::other(e)))?;
        match kind {
            None => Ok(false),
            Some(Some(target)) => {
                let blob = self.git(&["cat-file", "blob", object], &[], target.len() + 1).await?;
                Ok(blob.ok && !blob.cut && blob.stdout == target)
            }
            Some(None) => {
                let path_arg = format!("--path={}", c.path);
                let out = self.git(&["hash-object", &path_arg, "--", &c.path], &[], OUTPUT).await?;
                Ok(out.ok && out.text().trim() == object)
            }
        }
    }

    /// Whether the merge wrote git's markers into conflict `c`'s file: both
    /// sides have a regular file there whose texts conflict, merged as git
    /// merges them (`git merge-file`: not binary; an add/add from an empty
    /// base), and the `merge` attribute does not keep one side's file.
    async fn marked(&self, c: &Conflict) -> GitResult<bool> {
        let regular = |s: &Option<Side>| s.as_ref().filter(|s| s.mode.starts_with("100")).map(|s| s.object.clone());
        let (Some(ours), Some(theirs)) = (regular(&c.ours), regular(&c.theirs)) else { return Ok(false) };
        let attr = self.must(&["check-attr", "-z", "merge", "--", &c.path], &[]).await?;
        if attr.stdout.split(|b| *b == 0).nth(2) == Some(b"unset".as_slice()) {
            return Ok(false);
        }
        let base = match regular(&c.base) {
            Some(base) => base,
            None => empty_blob(&ours).to_string(),
        };
        let merged = self.git(&["merge-file", "-p", "--object-id", &base, &ours, &theirs], &[], 0).await?;
        // Its status: how many conflicts (0 when clean), 255 when binary.
        Ok(matches!(merged.code, Some(1..=127)))
    }

    /// The paths `git ls-files <which> -z` lists, one entry a stage, as
    /// they are (a name need not be UTF-8).
    pub(super) async fn staged_names(&self, which: &str) -> GitResult<Vec<Vec<u8>>> {
        let out = self.must(&["ls-files", which, "-z"], &[]).await?;
        let mut files: Vec<Vec<u8>> = out
            .stdout
            .split(|b| *b == 0)
            .filter_map(|r| r.iter().position(|b| *b == b'\t').map(|at| r[at + 1..].to_vec()))
            .collect();
        files.dedup();
        Ok(files)
    }

    /// The same, each name shown as text (a name that is not UTF-8 with
    /// `�` for what is not).
    async fn staged_paths(&self, which: &str) -> GitResult<Vec<String>> {
        Ok(self.staged_names(which).await?.iter().map(|n| String::from_utf8_lossy(n).into_owned()).collect())
    }

    /// The conflicted files that still hold a conflict marker: the unmerged
    /// ones, and those the member staged as they were (`git add` takes a
    /// file out of the unmerged ones; git keeps its stages as resolve-undo).
    pub async fn unresolved(&self) -> GitResult<Vec<String>> {
        let mut files = self.staged_names("--unmerged").await?;
        // A merge begins with none: these are this merge's (staged, or
        // staged and unstaged again).
        let unmerged: HashSet<Vec<u8>> = files.iter().cloned().collect();
        files.extend(self.staged_names("--resolve-undo").await?.into_iter().filter(|p| !unmerged.contains(p)));
        // Each looked at by its own name, shown as text.
        let dir = self.dir().to_path_buf();
        let left = tokio::task::spawn_blocking(move || {
            let held = files.into_iter().filter(|f| has_markers(&dir.join(OsStr::from_bytes(f))));
            held.map(|f| String::from_utf8_lossy(&f).into_owned()).collect::<Vec<String>>()
        })
        .await
        .map_err(|e| super::GitError::Spawn(std::io::Error::other(e)))?;
        Ok(left)
    }
}

/// A file a merge left unmerged: what each side has at its path — the two
/// histories' common ancestor, ours (the member's branch) and theirs (the
/// King's) — and whether it holds git's markers. One without markers is a
/// conflict git could not write into the file: a side deleted it, it is
/// binary, a side has another kind of thing there (git then moves the
/// other side's file aside, to `<path>~<side>`), both sides renamed it, or
/// a submodule.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Conflict {
    /// Its name, shown as text (`�` for what is not UTF-8).
    pub path: String,
    /// Its name as git and the file system have it.
    name: Vec<u8>,
    pub base: Option<Side>,
    pub ours: Option<Side>,
    pub theirs: Option<Side>,
    pub markers: bool,
    /// A side's file git moved aside to this path: the name it had, where
    /// the other side now has something of another kind.
    pub aside_of: Option<String>,
    /// Where git moved the other side's file of this name aside to.
    pub other_aside: Option<String>,
}

/// What one side of a merge has at a conflicted path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Side {
    /// git's mode: `100644`, `100755`, `120000` (a link), `160000` (a
    /// submodule's commit).
    pub mode: String,
    pub object: String,
}

impl Conflict {
    /// The object git left in the worktree for it: ours, or theirs when
    /// ours is deleted (a file with markers is neither).
    pub fn left(&self) -> Option<&str> {
        self.ours.as_ref().or(self.theirs.as_ref()).map(|s| s.object.as_str())
    }

    /// A submodule's commit on some side: nothing in a member's worktree
    /// can resolve it (kd makes no checkout of submodules there, and git
    /// refuses to stage one without).
    pub fn is_submodule(&self) -> bool {
        [&self.ours, &self.theirs].into_iter().flatten().any(|s| s.mode == SUBMODULE)
    }

    /// What the member is told of a conflict without markers, the King's
    /// side named `from`; `None` for one with markers (resolved by removing
    /// them).
    pub fn without_markers(&self, from: &str) -> Option<String> {
        if self.markers {
            return None;
        }
        let (base, ours, their) = (self.base.is_some(), self.ours.is_some(), self.theirs.is_some());
        if let Some(name) = &self.aside_of {
            return Some(if ours {
                format!(
                    "git moved your version of {name} here, as {from} has a directory or another kind of file at \
                     {name}. Carry your changes over to {from}'s {name} (or where they belong now), then delete this \
                     file"
                )
            } else {
                format!(
                    "git moved {from}'s version of {name} here, as your work has a directory or another kind of file \
                     at {name}. Carry {from}'s changes over to your {name} (or where they belong), then delete this \
                     file"
                )
            });
        }
        if let Some(aside) = &self.other_aside {
            return Some(if ours {
                format!(
                    "it is yours; git moved {from}'s file of this name, of another kind, aside to {aside}. Keep this one"
                )
            } else {
                format!(
                    "it is {from}'s; git moved your file of this name, of another kind, aside to {aside}. Keep this one"
                )
            });
        }
        Some(match (base, ours, their) {
            (true, true, false) => format!(
                "{from} deleted it and you changed it; it holds your version, with no markers. Delete it if {from}'s \
                 deletion should stand, or keep it, working with {from}'s code"
            ),
            (true, false, true) => format!(
                "you deleted it and {from} changed it; it is back as {from} has it, with no markers. Delete it again \
                 if your deletion should stand, or keep it"
            ),
            (true, false, false) => "both sides renamed or deleted it, and it is not in your worktree. Leave \
                                     it so, unless your work needs it"
                .to_string(),
            (false, true, false) => format!(
                "it is yours, and {from} has no file of this name: most often both sides renamed one file, each to \
                 another name (or {from} added a file of its own where you renamed one). Keep one name for it: this \
                 one, or {from}'s (then delete this file)"
            ),
            (false, false, true) => format!(
                "it is {from}'s, and your work has no file of this name: most often both sides renamed one file, \
                 each to another name (or you added a file of your own where {from} renamed one). Keep one name for \
                 it: yours (then delete this file), or this one"
            ),
            _ => "it holds no conflict markers: git could not merge it (a binary file, or a rename on one side), \
                  or it was resolved already. Leave it as both sides' changes should have it"
                .to_string(),
        })
    }
}

/// git's mode for a submodule's commit.
pub const SUBMODULE: &str = "160000";

/// The name a file had before git moved it aside for `side` (`HEAD` for
/// the member's, the commit being merged for the King's): git names it
/// `<name>~<side>`, with `_<n>` after when that name was taken.
/// The empty blob's id, in the object format of `like` (an id).
fn empty_blob(like: &str) -> &'static str {
    if like.len() == 64 {
        "473a0f4c3be8a93681a267e3b1e9a7dcda1185436fe141f7749120a303721813"
    } else {
        "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
    }
}

fn aside_name<'a>(path: &'a str, side: &str) -> Option<&'a str> {
    let (name, tail) = path.rsplit_once('~')?;
    let rest = tail.strip_prefix(side)?;
    let counted = |n: &str| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit());
    (!name.is_empty() && !side.is_empty() && (rest.is_empty() || rest.strip_prefix('_').is_some_and(counted)))
        .then_some(name)
}

/// Marks the files git moved aside (a side's file where the other has a
/// directory or a file of another kind), the King's commit being
/// `theirs`: one side's only, named `<name>~<side>`, its `<name>` still
/// there (`exists`) — a file of that name of the member's own is not
/// taken for one — and the file it stands beside, one side's only too.
fn moved_aside(files: &mut [Conflict], theirs: &str, exists: impl Fn(&str) -> bool) {
    let asides: Vec<(usize, String)> = files
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let name = match (c.ours.is_some(), c.theirs.is_some()) {
                (true, false) => aside_name(&c.path, "HEAD"),
                (false, true) => aside_name(&c.path, theirs),
                _ => None,
            }?;
            exists(name).then(|| (i, name.to_string()))
        })
        .collect();
    for (i, name) in asides {
        let aside = files[i].path.clone();
        let mine = files[i].ours.is_some();
        files[i].aside_of = Some(name.clone());
        if let Some(at) = files
            .iter_mut()
            .find(|c| c.path == name && c.ours.is_some() != mine && c.ours.is_some() != c.theirs.is_some())
        {
            at.other_aside = Some(aside);
        }
    }
}

/// The unmerged files a `git ls-files --unmerged -z` listing names (one
/// line a stage: `<mode> <object> <stage>\t<path>`), each with its stages.
fn stages(listing: &[u8]) -> Vec<Conflict> {
    let mut files: Vec<Conflict> = Vec::new();
    for entry in listing.split(|b| *b == 0) {
        let Some(tab) = entry.iter().position(|b| *b == b'\t') else { continue };
        let name = entry[tab + 1..].to_vec();
        let path = String::from_utf8_lossy(&name).into_owned();
        let mut fields = entry[..tab].split(|b| *b == b' ').map(|f| String::from_utf8_lossy(f).into_owned());
        let (Some(mode), Some(object), Some(stage)) = (fields.next(), fields.next(), fields.next()) else { continue };
        if files.last().is_none_or(|last| last.name != name) {
            files.push(Conflict { path, name, ..Conflict::default() });
        }
        let Some(at) = files.last_mut() else { continue };
        let side = Some(Side { mode, object });
        match stage.as_str() {
            "1" => at.base = side,
            "2" => at.ours = side,
            "3" => at.theirs = side,
            _ => {}
        }
    }
    files
}

/// Whether the regular file at `path` ([`super::open_regular`]) has a line
/// git writes around a conflict at its start: `<<<<<<<`, `>>>>>>>` or
/// `|||||||` (or longer, as git writes them in a file both sides renamed),
/// alone or before a space, or a lone `=======` (longer only after such an
/// opening marker: a Markdown heading's underline is not one).
fn has_markers(path: &Path) -> bool {
    let Ok(file) = super::open_regular(path) else { return false };
    let mut reader = BufReader::new(file.take(MAX_SCAN));
    let mut line = Vec::new();
    let mut opened = false;
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
        let l = line.strip_suffix(b"\n").unwrap_or(&line);
        let l = l.strip_suffix(b"\r").unwrap_or(l);
        // How many of `c` the line begins with, when what follows is
        // nothing or a space.
        let run = |c: u8| {
            let n = l.iter().take_while(|b| **b == c).count();
            if n == l.len() || l[n] == b' ' { n } else { 0 }
        };
        if run(b'<') >= 7 {
            opened = true;
        }
        let equals = run(b'=');
        if run(b'<') >= 7
            || run(b'>') >= 7
            || run(b'|') >= 7
            || (equals == l.len() && (equals == 7 || (opened && equals > 7)))
        {
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
        assert!(f("w", "x\n<<<<<<<< HEAD:g\nmine\n========\ntheirs\n>>>>>>>> main:h\n"), "a rename's, wider");
        assert!(f("w2", "x\n<<<<<<<< HEAD:g\nmine\n"), "an opening one alone");
        assert!(!f("md", "Title\n========\n\ntext\n"), "a Markdown heading");
        assert!(!f("md2", "<<<<<<<<no space\n"));
        assert!(!f("e", ""));
        std::os::unix::fs::symlink(dir.path().join("a"), dir.path().join("link")).unwrap();
        assert!(!has_markers(&dir.path().join("link")), "never through a symlink");
        assert!(!has_markers(&dir.path().join("gone")));
    }

    #[test]
    fn an_unmerged_listing_tells_which_sides_have_each_file() {
        let listing = b"100644 aaa 1\tgone.txt\x00100644 bbb 2\tgone.txt\x00\
                        100644 ccc 1\tboth.txt\x00100644 ddd 2\tboth.txt\x00100644 eee 3\tboth.txt\x00\
                        100644 fff 1\tback.txt\x00100644 ggg 3\tback.txt\x00\
                        100644 hhh 2\ta dir/new file\x00100644 iii 3\ta dir/new file\x00\
                        160000 jjj 1\ts\x00160000 kkk 2\ts\x00160000 lll 3\ts\x00\
                        120000 mmm 3\tl\x00\
                        160000 nnn 1\twas-sub\x00100644 ooo 2\twas-sub\x00100644 ppp 3\twas-sub\x00";
        let sides = |c: &Conflict| [&c.base, &c.ours, &c.theirs].map(|s| s.as_ref().map(|s| s.object.clone()));
        let all = stages(listing);
        let o = |s: &str| (!s.is_empty()).then(|| s.to_string());
        let want = [
            ("gone.txt", ["aaa", "bbb", ""], "bbb", false),
            ("both.txt", ["ccc", "ddd", "eee"], "ddd", false),
            ("back.txt", ["fff", "", "ggg"], "ggg", false),
            ("a dir/new file", ["", "hhh", "iii"], "hhh", false),
            ("s", ["jjj", "kkk", "lll"], "kkk", true),
            ("l", ["", "", "mmm"], "mmm", false),
            // A submodule once, a file on both sides now: the member can
            // resolve it.
            ("was-sub", ["nnn", "ooo", "ppp"], "ooo", false),
        ];
        assert_eq!(all.len(), want.len());
        for (c, (path, objects, left, submodule)) in all.iter().zip(want) {
            assert_eq!(
                (c.path.as_str(), sides(c), c.left(), c.is_submodule()),
                (path, objects.map(o), Some(left), submodule)
            );
        }
        assert_eq!(all[5].theirs.as_ref().map(|s| s.mode.as_str()), Some("120000"));
        assert!(stages(b"").is_empty());
        assert!(stages(b"100644 aaa\tno stage\x00").is_empty(), "a line cut short is no conflict");
        // Two names alike once shown as text (neither UTF-8) stay two.
        let latin = stages(
            b"100644 a 1\ta\xfe\x00100644 b 2\ta\xfe\x00100644 c 3\ta\xfe\x00\
              100644 d 1\ta\xff\x00100644 e 2\ta\xff\x00",
        );
        assert_eq!(latin.len(), 2, "{latin:?}");
        assert_eq!((latin[0].path.as_str(), latin[1].path.as_str()), ("a\u{fffd}", "a\u{fffd}"));
        assert_eq!((latin[0].theirs.is_some(), latin[1].theirs.is_some()), (true, false));
    }

    fn conflict(path: &str, [base, ours, theirs]: [bool; 3], markers: bool) -> Conflict {
        let side = || Some(Side { mode: "100644".into(), object: "a".into() });
        Conflict {
            path: path.into(),
            base: base.then(side).flatten(),
            ours: ours.then(side).flatten(),
            theirs: theirs.then(side).flatten(),
            markers,
            ..Conflict::default()
        }
    }

    /// What the member is told of each conflict of `files` (git's listing,
    /// the King's commit `f00d`, the names in `there` in the worktree).
    fn told(mut files: Vec<Conflict>, there: &[&str]) -> Vec<Option<String>> {
        moved_aside(&mut files, "f00d", |name| there.contains(&name));
        files.iter().map(|c| c.without_markers("main")).collect()
    }

    #[test]
    fn a_conflict_without_markers_says_which_side_deleted_the_file() {
        let said = |c: Conflict| told(vec![c], &[]).remove(0).expect("told");
        assert_eq!(conflict("a", [true, true, true], true).without_markers("main"), None);
        assert!(said(conflict("a", [true, true, false], false)).starts_with("main deleted it and you changed it"));
        assert!(said(conflict("a", [true, false, true], false)).starts_with("you deleted it and main changed it"));
        assert!(said(conflict("a", [true, true, true], false)).starts_with("it holds no conflict markers"));
        assert!(said(conflict("a", [true, false, false], false)).starts_with("both sides renamed or deleted it"));
    }

    /// A file git moved aside, as the other side has a directory or a file
    /// of another kind at its name, is told as moved (never deleted), and
    /// the file it stands beside as the other side's; a name that only
    /// looks like git's is not taken for one.
    #[test]
    fn a_file_git_moved_aside_is_told_as_moved_and_only_git_s_names_count() {
        // You made d a directory; the member changed its file d.
        let t = told(vec![conflict("d~HEAD", [true, true, false], false)], &["d"]);
        let mine = t[0].as_deref().unwrap();
        assert!(mine.starts_with("git moved your version of d here, as main has a directory"), "{mine}");
        // The member made d a directory; git named the other aside with a
        // counter, d~f00d being taken.
        let t = told(vec![conflict("d~f00d_0", [true, false, true], false)], &["d"]);
        let theirs = t[0].as_deref().unwrap();
        assert!(theirs.starts_with("git moved main's version of d here, as your work has a directory"), "{theirs}");
        // A link of yours where the member's file was: the file aside, the
        // link where it was.
        let t = told(
            vec![conflict("l", [false, false, true], false), conflict("l~HEAD", [true, true, false], false)],
            &["l"],
        );
        let link = t[0].as_deref().unwrap();
        assert_eq!(
            link,
            "it is main's; git moved your file of this name, of another kind, aside to l~HEAD. Keep this one"
        );
        assert!(t[1].as_deref().unwrap().starts_with("git moved your version of l here"));
        let t = told(
            vec![conflict("l", [false, true, false], false), conflict("l~f00d", [false, false, true], false)],
            &["l"],
        );
        assert!(t[0].as_deref().unwrap().starts_with("it is yours; git moved main's file of this name"), "{t:?}");
        // Only git's own names, their file still there, are taken.
        let t = told(
            vec![
                conflict("x~f00d", [true, true, false], false),
                conflict("y~HEAD", [true, false, true], false),
                conflict("gone~HEAD", [true, true, false], false),
                conflict("z~HEADS", [true, true, false], false),
                conflict("w~HEAD_", [true, true, false], false),
            ],
            &["x", "y", "z", "w"],
        );
        assert!(t[0].as_deref().unwrap().starts_with("main deleted it"), "{t:?}");
        assert!(t[1].as_deref().unwrap().starts_with("you deleted it"), "{t:?}");
        assert!(t[2].as_deref().unwrap().starts_with("main deleted it"), "no gone in the worktree: {t:?}");
        assert!(t[3].as_deref().unwrap().starts_with("main deleted it"), "{t:?}");
        assert!(t[4].as_deref().unwrap().starts_with("main deleted it"), "{t:?}");
    }

    /// Both sides renamed one file, each to another name: neither new name
    /// is told as a file moved aside (keeping both would keep two copies).
    #[test]
    fn a_file_both_sides_renamed_is_told_as_renamed() {
        let t = told(
            vec![
                conflict("b1", [false, true, false], false),
                conflict("b2", [false, false, true], false),
                conflict("big", [true, false, false], false),
            ],
            &["b1", "b2"],
        );
        let (b1, b2) = (t[0].as_deref().unwrap(), t[1].as_deref().unwrap());
        assert!(
            b1.starts_with("it is yours, and main has no file of this name: most often both sides renamed"),
            "{b1}"
        );
        assert!(b2.starts_with("it is main's, and your work has no file of this name"), "{b2}");
        assert!(!b1.contains("aside") && !b2.contains("aside"), "{t:?}");
        assert!(b1.contains("Keep one name") && b2.contains("Keep one name"), "{t:?}");
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
