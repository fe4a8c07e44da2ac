//! Members' work in the chat (F-W3): the one-line diff stat shown under a
//! member's panel, and the scrollable, diff-coloured view `/diff MEMBER`
//! opens over the log. Everything from the diff is escaped before the
//! terminal; long lines are wrapped, nothing is cut but what the daemon
//! cut.

use kd_proto::work::{CheckStatus, MemberDiff, WorkState, Worktree};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};
use unicode_width::UnicodeWidthChar;

use super::wrap::display_width;

/// Columns a tab of the diff takes.
const TAB: &str = "    ";

/// A member's work in a line: `3 files +42 −7 · done · check pass · pull request`.
pub fn stat_text(w: &Worktree) -> String {
    stat_spans(w).iter().map(|s| s.content.as_ref()).collect()
}

/// [`stat_text`], coloured: lines added green, removed red.
pub fn stat_spans(w: &Worktree) -> Vec<Span<'static>> {
    let mut spans = stat(w.files, w.added, w.removed, w.head == w.base, w.state);
    // Which try of fix until green, and the check of its last commit.
    if let Some(fixing) = w.fixing() {
        spans.push(Span::raw(" · "));
        spans.push(Span::styled(fixing, Style::default().fg(Color::Yellow)));
    }
    if let Some(c) = &w.check {
        let colour = match c.status {
            CheckStatus::Pass => Color::Green,
            CheckStatus::Running => Color::Yellow,
            CheckStatus::Fail | CheckStatus::Timeout | CheckStatus::Error => Color::Red,
        };
        spans.push(Span::raw(" · "));
        spans.push(Span::styled(c.summary(), Style::default().fg(colour)));
    }
    // kd could not commit its last run: its changes are in the worktree only.
    if w.uncommitted.is_some() {
        spans.push(Span::raw(" · "));
        spans.push(Span::styled("last run not committed", Style::default().fg(Color::Red)));
    }
    // Pushed for a pull request (`/pr`).
    if let Some(s) = &w.shipped {
        spans.push(Span::raw(" · "));
        spans.push(Span::styled(if s.pr { "pull request" } else { "pushed" }, Style::default().fg(Color::Magenta)));
    }
    spans
}

fn stat(files: u32, added: u64, removed: u64, empty: bool, state: WorkState) -> Vec<Span<'static>> {
    let state_style = match state {
        WorkState::Working => Style::default().fg(Color::Yellow),
        WorkState::Done => Style::default().fg(Color::Cyan),
        WorkState::Accepted => Style::default().fg(Color::Green).add_modifier(Modifier::BOLD),
        WorkState::Rejected | WorkState::Superseded => Style::default().fg(Color::DarkGray),
        WorkState::Tampered => Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
    };
    let mut spans = if empty && files == 0 {
        vec![Span::raw("no changes")]
    } else {
        vec![
            Span::raw(format!("{files} file{} ", if files == 1 { "" } else { "s" })),
            Span::styled(format!("+{added}"), Style::default().fg(Color::Green)),
            Span::raw(" "),
            Span::styled(format!("−{removed}"), Style::default().fg(Color::Red)),
        ]
    };
    spans.push(Span::raw(" · "));
    spans.push(Span::styled(state.as_str(), state_style));
    spans
}

/// What a line of a patch is, for its colour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// `diff --git`, `index`, `---`, `+++`, modes, renames: bold.
    File,
    /// `@@ … @@`: cyan.
    Hunk,
    Added,
    Removed,
    Context,
    /// What the chat says about the diff (dim).
    Note,
}

impl Part {
    fn style(self) -> Style {
        match self {
            Part::File => Style::default().add_modifier(Modifier::BOLD),
            Part::Hunk => Style::default().fg(Color::Cyan),
            Part::Added => Style::default().fg(Color::Green),
            Part::Removed => Style::default().fg(Color::Red),
            Part::Context => Style::default(),
            Part::Note => Style::default().fg(Color::DarkGray),
        }
    }
}

/// The parts of a patch's lines: inside a hunk a line is what its first
/// character says (so a removed `-- x` is not a file header); outside,
/// it belongs to its file's header.
fn parts(patch: &str) -> Vec<(Part, String)> {
    let mut out = Vec::new();
    let mut in_hunk = false;
    for line in patch.lines() {
        let part = if line.starts_with("diff --git ") || line.starts_with("diff --cc ") {
            in_hunk = false;
            Part::File
        } else if line.starts_with("@@") {
            in_hunk = true;
            Part::Hunk
        } else if !in_hunk {
            Part::File
        } else if line.starts_with('+') {
            Part::Added
        } else if line.starts_with('-') {
            Part::Removed
        } else {
            Part::Context
        };
        out.push((part, clean(line)));
    }
    out
}

/// A line of the diff as it may reach the terminal: control characters
/// shown, not obeyed; tabs as spaces.
fn clean(line: &str) -> String {
    kd_client::terminal::safe(line).replace('\t', TAB)
}

/// The diff view `/diff MEMBER` opens.
#[derive(Debug, Clone)]
pub struct DiffView {
    pub member: String,
    /// The title's stat and state.
    stat: Vec<Span<'static>>,
    lines: Vec<(Part, String)>,
    /// The first row shown.
    pub scroll: usize,
    /// Rows of the wrapped diff and of the window at the last draw.
    rows: usize,
    height: usize,
    /// Wrapped lines for a width, kept while the width stays.
    cache: Option<(u16, Vec<Line<'static>>)>,
}

impl DiffView {
    pub fn new(d: &MemberDiff) -> DiffView {
        let (added, removed) = d.files.iter().fold((0, 0), |(a, r), f| (a + f.added, r + f.removed));
        let stat = stat(d.files.len() as u32, added, removed, d.head == d.base, d.state);
        let mut lines: Vec<(Part, String)> = d
            .files
            .iter()
            .map(|f| {
                let size = if f.binary { "binary".to_string() } else { format!("+{} −{}", f.added, f.removed) };
                (Part::Note, clean(&format!("{}  {size}", kd_client::terminal::safe_line(&f.path))))
            })
            .collect();
        let patch = d.patch.as_deref().unwrap_or_default();
        if !lines.is_empty() && !patch.is_empty() {
            lines.push((Part::Note, String::new()));
        }
        lines.extend(parts(patch));
        if d.truncated {
            lines.push((
                Part::Note,
                format!("… the patch is cut here; `git diff {}..{}` has all of it", d.base, d.head),
            ));
        }
        if lines.is_empty() {
            lines.push((Part::Note, format!("no changes on {} yet", clean(&d.branch))));
        }
        let rows = lines.len();
        DiffView { member: d.member.clone(), stat, lines, scroll: 0, rows, height: 1, cache: None }
    }

    /// The furthest the view scrolls: its last row at the window's bottom.
    fn max_scroll(&self) -> usize {
        self.rows.saturating_sub(self.height)
    }

    pub fn scroll_by(&mut self, rows: isize) {
        self.scroll = self.scroll.saturating_add_signed(rows).min(self.max_scroll());
    }

    pub fn page(&self) -> isize {
        self.height.saturating_sub(1).max(1) as isize
    }

    pub fn top(&mut self) {
        self.scroll = 0;
    }

    pub fn bottom(&mut self) {
        self.scroll = self.max_scroll();
    }

    /// The diff's lines wrapped to `width` columns.
    fn wrapped(&mut self, width: u16) -> &[Line<'static>] {
        if self.cache.as_ref().is_none_or(|(w, _)| *w != width) {
            let mut out = Vec::new();
            for (part, text) in &self.lines {
                for piece in hard_wrap(text, width.max(1) as usize) {
                    out.push(Line::from(Span::styled(piece, part.style())));
                }
            }
            self.cache = Some((width, out));
        }
        self.cache.as_ref().map(|(_, l)| l.as_slice()).unwrap_or_default()
    }

    /// Draws the view over `area` (the log's).
    pub fn draw(&mut self, frame: &mut Frame<'_>, area: Rect) {
        let inner_width = area.width.saturating_sub(2);
        self.height = area.height.saturating_sub(2).max(1) as usize;
        self.rows = self.wrapped(inner_width).len();
        self.scroll = self.scroll.min(self.max_scroll());
        let (scroll, height, rows) = (self.scroll, self.height, self.rows);
        let shown: Vec<Line<'static>> = self.wrapped(inner_width).iter().skip(scroll).take(height).cloned().collect();
        let mut title = vec![Span::styled(
            format!(" diff · {} · ", kd_client::terminal::safe(&self.member)),
            Style::default().add_modifier(Modifier::BOLD),
        )];
        title.extend(self.stat.iter().cloned());
        title.push(Span::raw(" "));
        let last = (scroll + height).min(rows);
        let hints = format!(" {}-{last} of {rows} · ↑↓ PgUp PgDn Home End · Esc/q close ", scroll + 1);
        let block = Block::bordered()
            .border_style(Style::default().fg(Color::DarkGray))
            .title(Line::from(title))
            .title_bottom(Line::from(Span::styled(hints, Style::default().fg(Color::DarkGray))));
        frame.render_widget(Clear, area);
        frame.render_widget(Paragraph::new(shown).block(block), area);
    }
}

/// `text` in pieces of at most `width` columns (a wide character is not
/// split); an empty line stays one empty line.
fn hard_wrap(text: &str, width: usize) -> Vec<String> {
    if display_width(text) <= width {
        return vec![text.to_string()];
    }
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > width && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
            used = 0;
        }
        cur.push(c);
        used += w;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patch_lines_are_told_apart_by_where_they_stand() {
        let patch = "diff --git a/x b/x\nindex 1..2 100644\n--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n one\n--- not a header\n+++ nor this\n";
        let kinds: Vec<Part> = parts(patch).into_iter().map(|(p, _)| p).collect();
        use Part::*;
        assert_eq!(kinds, vec![File, File, File, File, Hunk, Context, Removed, Added]);
    }

    #[test]
    fn long_lines_wrap_by_display_width_and_control_characters_are_shown() {
        assert_eq!(hard_wrap("abcdefg", 3), vec!["abc", "def", "g"]);
        assert_eq!(hard_wrap("", 3), vec![""]);
        assert_eq!(hard_wrap("日本語", 4), vec!["日本", "語"]);
        assert_eq!(clean("+a\x1b[2Jb\tc"), "+a␛[2Jb    c");
    }
}
