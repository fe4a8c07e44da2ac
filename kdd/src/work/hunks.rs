//! The hunks of a unified diff, as line comments need them (issue 34): which
//! lines of a file's new side a diff shows (a comment may be on those and
//! nowhere else), the excerpt of a hunk around a comment, whether a later
//! diff changed a comment's lines (its old side), and the `PATH:LINE: text`
//! lines of a reviewer's answer. Pure text: the git is
//! [`super::comments`]'.

/// One hunk: `@@ -old_start,old_len +new_start,new_len @@`, and its lines
/// (each with its leading ` `, `+` or `-`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    pub old_start: u32,
    pub old_len: u32,
    pub new_start: u32,
    pub new_len: u32,
    pub header: String,
    pub lines: Vec<String>,
}

impl Hunk {
    /// The new side's lines it shows (context and added), first and last;
    /// none when it only removes.
    pub fn new_lines(&self) -> Option<(u32, u32)> {
        (self.new_len > 0).then(|| (self.new_start, self.new_start + self.new_len - 1))
    }

    /// Whether this hunk changes (removes or replaces) a line of
    /// `first..=last` of the old side, or inserts lines between two of
    /// them. Context lines are no change, whatever `-U` the diff had.
    pub fn changes_old(&self, first: u32, last: u32) -> bool {
        // The old side's next line; a `-U0` insertion's hunk names the line
        // it follows (`-10,0`).
        let mut old = if self.old_len == 0 { self.old_start + 1 } else { self.old_start };
        // Added lines right after removed ones replace them (counted by
        // the removal); otherwise they are inserted before `old`.
        let mut replacing = false;
        for l in &self.lines {
            match l.as_bytes().first() {
                Some(b'-') => {
                    if (first..=last).contains(&old) {
                        return true;
                    }
                    old += 1;
                    replacing = true;
                }
                Some(b'+') => {
                    if !replacing && first < old && old <= last {
                        return true;
                    }
                }
                Some(b'\\') => {}
                _ => {
                    old += 1;
                    replacing = false;
                }
            }
        }
        false
    }

    /// The hunk's header and its lines within `context` lines (new side) of
    /// `first..=last`, at most `max` bytes.
    pub fn excerpt(&self, first: u32, last: u32, context: u32, max: usize) -> String {
        let (lo, hi) = (first.saturating_sub(context), last.saturating_add(context));
        let mut out = format!("{}\n", self.header);
        let mut new = self.new_start;
        for l in &self.lines {
            // A removed line sits before the new line that follows it.
            let at = new;
            if !l.starts_with('-') && !l.starts_with('\\') {
                new += 1;
            }
            if (lo..=hi).contains(&at) || (l.starts_with('-') && (lo..=hi.saturating_add(1)).contains(&at)) {
                if out.len() + l.len() + 1 > max {
                    out.push_str("…\n");
                    break;
                }
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

/// One file of a diff: its hunks, and whether the diff deletes it (then
/// it has no new side).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FileDiff {
    pub deleted: bool,
    pub binary: bool,
    pub hunks: Vec<Hunk>,
}

impl FileDiff {
    /// The hunk whose new side holds every line of `first..=last`.
    pub fn hunk_of(&self, first: u32, last: u32) -> Option<&Hunk> {
        self.hunks.iter().find(|h| h.new_lines().is_some_and(|(a, b)| a <= first && last <= b))
    }

    /// The new side's line ranges the diff shows, as a reader is told them
    /// (`3-9, 20-31`).
    pub fn ranges(&self) -> String {
        let r: Vec<String> = self
            .hunks
            .iter()
            .filter_map(Hunk::new_lines)
            .map(|(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
            .collect();
        r.join(", ")
    }

    /// Whether the diff changes any line of `first..=last` of its old side.
    pub fn changes_old(&self, first: u32, last: u32) -> bool {
        self.deleted || self.hunks.iter().any(|h| h.changes_old(first, last))
    }
}

/// The diff of one file (`git diff A B -- PATH`): every hunk of it.
pub fn parse(patch: &str) -> FileDiff {
    let mut f = FileDiff::default();
    let mut in_hunk = false;
    for l in patch.lines() {
        if let Some(h) = header(l) {
            f.hunks.push(h);
            in_hunk = true;
            continue;
        }
        if l.starts_with("diff --git ") {
            in_hunk = false;
            continue;
        }
        if in_hunk {
            if let Some(h) = f.hunks.last_mut()
                && matches!(l.as_bytes().first(), Some(b' ' | b'+' | b'-' | b'\\'))
            {
                h.lines.push(l.to_string());
                continue;
            }
            // An empty context line some tools strip of its space.
            if l.is_empty() {
                if let Some(h) = f.hunks.last_mut() {
                    h.lines.push(" ".into());
                }
                continue;
            }
            in_hunk = false;
        }
        if l.starts_with("deleted file mode") {
            f.deleted = true;
        } else if l.starts_with("Binary files ") || l == "GIT binary patch" {
            f.binary = true;
        }
    }
    f
}

/// `@@ -a[,b] +c[,d] @@ …`.
fn header(l: &str) -> Option<Hunk> {
    let rest = l.strip_prefix("@@ -")?;
    let end = rest.find(" @@")?;
    let (old, new) = rest[..end].split_once(" +")?;
    let range = |s: &str| -> Option<(u32, u32)> {
        match s.split_once(',') {
            Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
            None => Some((s.parse().ok()?, 1)),
        }
    };
    let ((old_start, old_len), (new_start, new_len)) = (range(old)?, range(new)?);
    Some(Hunk { old_start, old_len, new_start, new_len, header: l.to_string(), lines: Vec::new() })
}

/// A location as the King or a reviewer writes it: `PATH:LINE` or
/// `PATH:LINE-LINE` (1-based, first ≤ last).
pub fn location(s: &str) -> Option<(String, u32, u32)> {
    let (path, lines) = s.rsplit_once(':')?;
    let (a, b) = match lines.split_once('-') {
        Some((a, b)) => (a.parse::<u32>().ok()?, b.parse::<u32>().ok()?),
        None => {
            let a = lines.parse::<u32>().ok()?;
            (a, a)
        }
    };
    (!path.is_empty() && a >= 1 && a <= b && !path.contains(char::is_whitespace)).then(|| (path.to_string(), a, b))
}

/// The `PATH:LINE: text` (or `PATH:LINE-LINE: text`) lines of a reviewer's
/// answer — a list's bullet, backticks or bold around the location
/// allowed — as (path, first, last, text).
pub fn review_lines(text: &str) -> Vec<(String, u32, u32, String)> {
    let mut out = Vec::new();
    for l in text.lines() {
        let l = l.trim_start();
        let l = l.strip_prefix("- ").or_else(|| l.strip_prefix("* ")).unwrap_or(l).trim_start();
        // The location ends at the first `: ` (or `:` and the end) after a
        // digit.
        let Some(at) = l.match_indices(':').map(|(i, _)| i).find(|&i| {
            let before = l[..i].trim_end_matches(['`', '*']);
            before.ends_with(|c: char| c.is_ascii_digit())
                && l[i + 1..].starts_with(char::is_whitespace)
                && before.rsplit_once(':').is_some()
        }) else {
            continue;
        };
        let loc = l[..at].trim_matches(['`', '*']);
        let said = l[at + 1..].trim().trim_start_matches(['*', '`']).trim();
        if said.is_empty() {
            continue;
        }
        if let Some((path, a, b)) = location(loc) {
            let path = path.trim_start_matches("./").trim_start_matches("b/").to_string();
            out.push((path, a, b, said.to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATCH: &str = "diff --git a/a.txt b/a.txt
index 1..2 100644
--- a/a.txt
+++ b/a.txt
@@ -1,5 +1,6 @@
 one
-two
+TWO
+two and a half
 three
 four
 five
@@ -20,3 +21,3 @@ fn x() {
 twenty
-twentyone
+21
 twentytwo
";

    #[test]
    fn a_files_hunks_say_which_new_lines_the_diff_shows() {
        let f = parse(PATCH);
        assert_eq!(f.hunks.len(), 2);
        assert_eq!(f.hunks[0].new_lines(), Some((1, 6)));
        assert_eq!(f.hunks[1].new_lines(), Some((21, 23)));
        assert_eq!(f.hunks[1].lines, [" twenty", "-twentyone", "+21", " twentytwo"]);
        assert_eq!(f.ranges(), "1-6, 21-23");
        assert!(f.hunk_of(2, 3).is_some(), "the added lines");
        assert!(f.hunk_of(1, 1).is_some(), "a context line");
        assert!(f.hunk_of(22, 22).is_some());
        assert!(f.hunk_of(7, 7).is_none(), "between the hunks");
        assert!(f.hunk_of(5, 21).is_none(), "across two hunks");
        assert!(!f.deleted);
    }

    #[test]
    fn an_excerpt_is_the_header_and_the_lines_near_the_comment() {
        let f = parse(PATCH);
        let h = f.hunk_of(3, 3).unwrap();
        let e = h.excerpt(3, 3, 1, 4096);
        assert_eq!(e, "@@ -1,5 +1,6 @@\n-two\n+TWO\n+two and a half\n three\n");
        let all = h.excerpt(3, 3, 10, 4096);
        assert_eq!(all.lines().count(), 1 + h.lines.len());
        let cut = h.excerpt(1, 6, 0, 30);
        assert!(cut.ends_with("…\n") && cut.len() <= 34, "{cut:?}");
    }

    #[test]
    fn a_later_diff_changes_a_comments_lines_on_its_old_side() {
        // -U0: line 3 replaced, a line inserted after 10, line 20 removed.
        let later = parse("@@ -3 +3 @@\n-TWO\n+2\n@@ -10,0 +11,2 @@\n+x\n+y\n@@ -20 +21,0 @@\n-gone\n");
        assert!(later.changes_old(3, 3));
        assert!(later.changes_old(1, 4));
        assert!(!later.changes_old(4, 9), "nothing of 4-9 changed");
        assert!(later.changes_old(10, 11), "an insertion between 10 and 11");
        assert!(!later.changes_old(10, 10), "after line 10 is outside 10-10");
        assert!(!later.changes_old(11, 19));
        assert!(later.changes_old(20, 20));
        // With context lines (-U3): context is no change.
        let f = parse(PATCH);
        assert!(f.changes_old(2, 2));
        assert!(!f.changes_old(3, 5), "context only");
        assert!(f.changes_old(21, 21));
        assert!(!f.changes_old(22, 22));
        let gone = parse("diff --git a/x b/x\ndeleted file mode 100644\n--- a/x\n+++ /dev/null\n@@ -1 +0,0 @@\n-x\n");
        assert!(gone.deleted && gone.changes_old(1, 1) && gone.hunks[0].new_lines().is_none());
    }

    #[test]
    fn locations_and_a_reviewers_lines_are_read() {
        assert_eq!(location("src/a.rs:12"), Some(("src/a.rs".into(), 12, 12)));
        assert_eq!(location("src/a.rs:12-14"), Some(("src/a.rs".into(), 12, 14)));
        assert_eq!(location("c:/x:3"), Some(("c:/x".into(), 3, 3)));
        for bad in ["a.rs", "a.rs:0", "a.rs:5-4", ":3", "a.rs:x", "a b:3", "sh: 1", "a.rs: 3"] {
            assert_eq!(location(bad), None, "{bad}");
        }
        let review = "The diff looks fine except:\n\
            src/a.rs:12: this unwrap panics on empty input\n\
            - `src/b.rs:3-5`: duplicated logic\n\
            * **c.txt:7**: typo\n\
            See http://example.com:8080/x for more.\n\
            Note: a.rs:4 is fine.\n\
            sh: 1: kd: not found\n\
            d.txt:9:\n\
            VERDICT: REQUEST CHANGES";
        assert_eq!(
            review_lines(review),
            vec![
                ("src/a.rs".into(), 12, 12, "this unwrap panics on empty input".into()),
                ("src/b.rs".into(), 3, 5, "duplicated logic".into()),
                ("c.txt".into(), 7, 7, "typo".into()),
            ]
        );
    }
}
