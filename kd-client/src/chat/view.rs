//! Drawing the chat: header, the log of bordered panels, status bar, input.
//! Generic over the ratatui backend, so tests render into a `TestBackend`.

use kd_client::markdown;
use kd_client::style::Palette;
use kd_proto::types::{Purpose, RouteType};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};

use super::app::{App, Entry, Kind, Overlay, activity};
use super::commands::{HELP, KEYS};
use super::wrap::{display_width, wrap};

/// Most rows the input grows to.
pub const MAX_INPUT_ROWS: u16 = 8;

/// A member's colour, the same as `kd ask` and `kd show` give it; the
/// King's is the terminal's own foreground.
pub fn member_color(palette: &Palette, name: &str) -> Color {
    match palette.color(name) {
        Some(kd_proto::color::Color::Indexed(i)) => Color::Indexed(i),
        Some(kd_proto::color::Color::Rgb(r, g, b)) => Color::Rgb(r, g, b),
        None => Color::Reset,
    }
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame<'_>, app: &mut App) {
    let area = frame.area();
    let input_rows = input_rows(app, area.width.saturating_sub(2));
    let [header, log, status, input] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(input_rows + 2),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(header_line(app)), header);
    draw_log(frame, app, log);
    frame.render_widget(Paragraph::new(status_line(app, status.width)), status);
    let block = Block::default().borders(Borders::ALL).border_style(Style::default().fg(Color::DarkGray)).title(" > ");
    app.input.set_block(block);
    frame.render_widget(&app.input, input);
    match &app.overlay {
        Some(Overlay::Help) => draw_help(frame, log, &mut app.help_scroll),
        Some(Overlay::Threads { threads, selected }) => draw_threads(frame, log, threads, *selected),
        Some(Overlay::Search { hits, selected }) => draw_hits(frame, log, hits, *selected),
        Some(Overlay::Approvals(list)) => draw_approvals(frame, log, list, &app.thread.id),
        None => {}
    }
    if let Some(diff) = app.diff.as_mut() {
        diff.draw(frame, log);
    }
    if !app.colors {
        without_colour(frame);
    }
    app.log_height = log.height as usize;
    app.dirty = false;
}

/// NO_COLOR: every colour goes; what a background marked (a selection, a
/// banner) is shown in reverse video instead.
fn without_colour(frame: &mut Frame<'_>) {
    for cell in frame.buffer_mut().content.iter_mut() {
        if cell.bg != Color::Reset {
            cell.modifier |= Modifier::REVERSED;
        }
        cell.fg = Color::Reset;
        cell.bg = Color::Reset;
    }
}

/// Rows the input needs for its text at `width`, between 1 and the maximum.
pub fn input_rows(app: &App, width: u16) -> u16 {
    let width = width.max(1) as usize;
    let rows: usize = app.input.lines().iter().map(|l| display_width(l).max(1).div_ceil(width)).sum();
    (rows as u16).clamp(1, MAX_INPUT_ROWS)
}

fn header_line(app: &App) -> Line<'static> {
    let dim = Style::default().fg(Color::DarkGray);
    let mut spans = vec![
        Span::styled(" kd chat", Style::default().add_modifier(Modifier::BOLD)),
        Span::styled(" · ", dim),
        Span::raw(app.thread.id.clone()),
        Span::styled(" · ", dim),
    ];
    if let Some(title) = &app.thread.title {
        let title: String = kd_client::terminal::safe(title).chars().take(40).collect();
        spans.push(Span::styled(title, Style::default().add_modifier(Modifier::BOLD)));
        spans.push(Span::styled(" · ", dim));
    }
    for (i, m) in app.thread.members.iter().enumerate() {
        if i > 0 {
            spans.push(Span::raw(" "));
        }
        let mut style = Style::default().fg(member_color(&app.palette, m));
        if app.mute.contains(m) {
            style = style.add_modifier(Modifier::CROSSED_OUT | Modifier::DIM);
        }
        spans.push(Span::styled(m.clone(), style));
    }
    if app.thread.context == kd_proto::types::ContextMode::Resume {
        spans.push(Span::styled(" · resume", dim));
    }
    match app.thread.status {
        kd_proto::types::ThreadStatus::Idle => spans.push(Span::styled(" · idle", dim)),
        kd_proto::types::ThreadStatus::Archived => {
            spans.push(Span::styled(" · archived", Style::default().fg(Color::Yellow)))
        }
        kd_proto::types::ThreadStatus::Active => {}
    }
    if let Some(r) = &app.round
        && r.running
        && r.rounds > 1
    {
        spans.push(Span::styled(" · ", dim));
        spans.push(Span::raw(format!("round {}/{}", r.round, r.rounds)));
    }
    let mut streaming: Vec<&str> = app.streaming();
    streaming.dedup();
    if !streaming.is_empty() {
        spans.push(Span::styled(" · ", dim));
        spans.push(Span::styled(format!("streaming: {}", streaming.join(", ")), Style::default().fg(Color::Green)));
    }
    Line::from(spans)
}

fn status_line(app: &App, width: u16) -> Line<'static> {
    let dim = Style::default().fg(Color::DarkGray);
    let hints = if width >= 90 {
        " Enter send · Shift/Alt+Enter newline · Esc interrupt · Tab complete · /help · Ctrl+C quit"
    } else if width >= 60 {
        " Enter send · Alt+Enter newline · Esc interrupt · /help · ^C quit"
    } else {
        " Enter send · Esc interrupt · /help"
    };
    // A question asked first; an approval's prompt while the input is
    // empty (typing, a notice may say more).
    let asked = app.approval_prompt(width).filter(|_| app.input.is_empty() || app.notice.is_none());
    let left = match (app.question().or(asked), &app.notice) {
        (Some(q), _) => Span::styled(format!(" {q}"), Style::default().fg(Color::Black).bg(Color::Yellow)),
        (None, Some(n)) => Span::styled(format!(" {n}"), Style::default().fg(Color::Yellow)),
        (None, None) => Span::styled(hints.to_string(), dim),
    };
    let mut spans = vec![left];
    let waiting = activity(app).len();
    let mut right_text = String::new();
    if app.cost_usd > 0.0 {
        right_text.push_str(&format!("${:.4} ", app.cost_usd));
    }
    if waiting > 0 {
        right_text.push_str(&format!("· {waiting} answering "));
    }
    let right = (!right_text.is_empty()).then(|| Span::styled(right_text.trim_start_matches("· ").to_string(), dim));
    if let Some(r) = right {
        let used = display_width(&spans[0].content) + display_width(&r.content);
        if used < width as usize {
            spans.push(Span::raw(" ".repeat(width as usize - used)));
            spans.push(r);
        }
    }
    Line::from(spans)
}

fn draw_log(frame: &mut Frame<'_>, app: &mut App, area: Rect) {
    let width = area.width;
    let mut height = area.height as usize;
    let mut top = area.y;
    if !app.connected {
        let banner = Line::from(Span::styled(
            " kdd is not reachable — reconnecting… ",
            Style::default().fg(Color::White).bg(Color::Red).add_modifier(Modifier::BOLD),
        ));
        frame.render_widget(Paragraph::new(banner), Rect { height: 1, ..area });
        top += 1;
        height = height.saturating_sub(1);
    }
    if let Some((from, pending)) = &app.emergency {
        let banner = Line::from(Span::styled(
            kd_client::terminal::safe(&format!(
                " ⚠ emergency from {from} — waiting for acknowledgements: {} ",
                pending.join(", ")
            ))
            .into_owned(),
            Style::default().fg(Color::White).bg(Color::Red).add_modifier(Modifier::BOLD),
        ));
        frame.render_widget(Paragraph::new(banner), Rect { y: top, height: 1, ..area });
        top += 1;
        height = height.saturating_sub(1);
    }
    // A search hit to bring into view: its panel's top at the window's top.
    if let Some(seq) = app.jump.take() {
        let mut below = 0;
        for entry in app.entries.iter().rev() {
            below += panel(entry, width, &app.palette).len() + 1;
            if entry.seq == Some(seq) {
                app.scroll = below.saturating_sub(height + 1);
                break;
            }
        }
    }
    // Walk up from the newest panel until the window is covered.
    let want = app.scroll + height;
    let mut lines: Vec<Line<'static>> = Vec::new();
    for entry in app.entries.iter().rev() {
        let mut panel = panel(entry, width, &app.palette);
        panel.push(Line::default());
        panel.extend(std::mem::take(&mut lines));
        lines = panel;
        if lines.len() >= want {
            break;
        }
    }
    // Drop the blank line after the last panel.
    if lines.last().is_some_and(|l| l.spans.is_empty()) {
        lines.pop();
    }
    let max_scroll = lines.len().saturating_sub(height);
    if app.scroll > max_scroll && lines.len() < want {
        app.scroll = max_scroll;
    }
    let end = lines.len().saturating_sub(app.scroll);
    let start = end.saturating_sub(height);
    let mut visible: Vec<Line<'static>> = lines[start..end].to_vec();
    // Like a chat: the newest lines sit just above the input.
    let pad = height.saturating_sub(visible.len());
    let mut shown: Vec<Line<'static>> = std::iter::repeat_n(Line::default(), pad).collect();
    shown.append(&mut visible);
    if app.new_below
        && let Some(last) = shown.last_mut()
    {
        let label = " ▼ new messages below (End) ";
        let w = display_width(label);
        *last = Line::from(vec![
            Span::raw(" ".repeat((width as usize).saturating_sub(w))),
            Span::styled(label, Style::default().fg(Color::Black).bg(Color::Cyan)),
        ]);
    }
    frame.render_widget(Paragraph::new(shown), Rect { y: top, height: height as u16, ..area });
}

/// The lines of one panel at `width`, cached on the entry.
fn panel(entry: &Entry, width: u16, palette: &Palette) -> Vec<Line<'static>> {
    if let Some((w, lines)) = entry.cache.borrow().as_ref()
        && *w == width
    {
        return lines.clone();
    }
    let lines = build_panel(entry, width, palette);
    *entry.cache.borrow_mut() = Some((width, lines.clone()));
    lines
}

fn build_panel(entry: &Entry, width: u16, palette: &Palette) -> Vec<Line<'static>> {
    let width = width as usize;
    let inner = width.saturating_sub(4).max(1);
    let tally = matches!(entry.purpose, Some(Purpose::Tally | Purpose::Merge));
    let color = match entry.kind {
        Kind::Error { .. } => Color::Red,
        Kind::Interrupted => Color::DarkGray,
        _ if tally => Color::Yellow,
        _ => member_color(palette, &entry.member),
    };
    let border = Style::default().fg(color);
    let name = Style::default().fg(color).add_modifier(Modifier::BOLD);
    let dim = Style::default().fg(Color::DarkGray);
    // A completion's panels: the tally (or merge) is kd's, titled by what it
    // is; a ballot or synthesis is its member's, marked so.
    let mut title = match entry.purpose {
        Some(Purpose::Tally) => vec![Span::styled("vote", name)],
        Some(Purpose::Merge) => vec![Span::styled("merged answers", name)],
        Some(p) => vec![Span::styled(entry.member.clone(), name), Span::styled(format!(" · {}", p.as_str()), name)],
        None => vec![Span::styled(entry.member.clone(), name)],
    };
    match entry.kind {
        Kind::Streaming => {
            let doing = match &entry.activity {
                Some(what) => format!(" · {}", kd_client::terminal::safe(what).chars().take(60).collect::<String>()),
                None => String::new(),
            };
            title.push(Span::styled(format!(" (streaming · {} chars{doing})", thousands(entry.chars)), dim))
        }
        Kind::Waiting if entry.queued => title.push(Span::styled(" ── queued behind its answer in flight", dim)),
        Kind::Waiting if entry.approvals.iter().any(|a| a.state.is_pending()) => {
            title.push(Span::styled(" ── waits for your approval", Style::default().fg(Color::Yellow)))
        }
        Kind::Waiting => title.push(Span::styled(" ── waiting...", dim)),
        Kind::Error { timed_out: true } => title.push(Span::styled(" · timed out", border)),
        Kind::Error { timed_out: false } => title.push(Span::styled(" · error", border)),
        Kind::Interrupted => {
            let why = entry.stopped.as_deref().map_or_else(|| "interrupted".into(), kd_client::terminal::safe_line);
            title.push(Span::styled(format!(" · {why}"), dim))
        }
        // kd's own panels already say so by their name.
        Kind::System if tally || entry.member == kd_proto::names::KD => {}
        Kind::System => title.push(Span::styled(" · kd", dim)),
        Kind::King | Kind::Answer => {}
    }
    match &entry.route {
        Some((RouteType::Emergency, _)) => title.push(Span::styled(" · EMERGENCY", Style::default().fg(Color::Red))),
        Some((_, to)) if !to.is_empty() => title.push(Span::styled(format!(" → {}", to.join(", ")), name)),
        _ => {}
    }
    if let Some(round) = entry.round.filter(|r| *r > 1 && entry.kind != Kind::Waiting) {
        title.push(Span::styled(format!(" · round {round}"), dim));
    }
    let title_width: usize = title.iter().map(|s| display_width(&s.content)).sum();
    let heavy = tally || entry.purpose == Some(Purpose::Synthesis);
    let (tl, tr, bl, br, h, v) = if entry.kind == Kind::King {
        ('╔', '╗', '╚', '╝', '═', '║')
    } else if heavy {
        ('┏', '┓', '┗', '┛', '━', '┃')
    } else {
        ('┌', '┐', '└', '┘', '─', '│')
    };
    let mut top = vec![Span::styled(format!("{tl}{h} "), border)];
    top.extend(title);
    let fill = width.saturating_sub(title_width + 5);
    top.push(Span::styled(format!(" {}{tr}", h.to_string().repeat(fill)), border));
    let mut out = vec![Line::from(top)];
    let mut body: Vec<Line<'static>> = match entry.kind {
        Kind::Waiting => Vec::new(),
        Kind::Answer => from_markdown(&entry.text),
        Kind::Streaming => {
            let mut lines = plain(&entry.text);
            match lines.last_mut() {
                Some(last) => last.spans.push(Span::styled("▍", Style::default().fg(color))),
                None => lines.push(Line::from(Span::styled("▍", Style::default().fg(color)))),
            }
            lines
        }
        Kind::Error { .. } => {
            let mut lines: Vec<Line<'static>> = entry
                .text
                .lines()
                .map(|l| Line::from(Span::styled(l.to_string(), Style::default().fg(Color::Red))))
                .collect();
            lines.push(Line::default());
            lines.push(Line::from(Span::styled("/retry to re-query failed members", dim)));
            lines
        }
        Kind::Interrupted => plain(&entry.text).into_iter().map(|l| l.style(dim)).collect(),
        Kind::System if tally => from_markdown(&entry.text),
        Kind::King | Kind::System => plain(&entry.text),
    };
    body.extend(super::approvals::lines(&entry.member, &entry.approvals));
    for line in wrap(&body, inner) {
        let used: usize = line.spans.iter().map(|s| display_width(&s.content)).sum();
        let mut spans = vec![Span::styled(format!("{v} "), border)];
        spans.extend(line.spans);
        spans.push(Span::raw(" ".repeat(inner.saturating_sub(used))));
        spans.push(Span::styled(format!(" {v}"), border));
        out.push(Line::from(spans));
    }
    out.push(bottom(entry, width, (bl, br, h), border));
    out
}

/// A panel's bottom border; under a member's latest answer, its work's
/// diff stat when it has some: `└─ 3 files +42 −7 · done ───┘`.
fn bottom(entry: &Entry, width: usize, (bl, br, h): (char, char, char), border: Style) -> Line<'static> {
    let h = h.to_string();
    if let Some(w) = &entry.work {
        let stat = super::diff::stat_spans(w);
        let used: usize = stat.iter().map(|s| display_width(&s.content)).sum();
        if used + 6 <= width {
            let mut spans = vec![Span::styled(format!("{bl}{h} "), border)];
            spans.extend(stat);
            spans.push(Span::styled(format!(" {}{br}", h.repeat(width - used - 5)), border));
            return Line::from(spans);
        }
    }
    Line::from(Span::styled(format!("{bl}{}{br}", h.repeat(width.saturating_sub(2))), border))
}

fn plain(text: &str) -> Vec<Line<'static>> {
    kd_client::terminal::safe(text).split('\n').map(|l| Line::from(l.to_string())).collect()
}

fn from_markdown(text: &str) -> Vec<Line<'static>> {
    markdown::render(text)
        .into_iter()
        .map(|line| {
            Line::from(
                line.into_iter()
                    .map(|span| {
                        let s = span.style;
                        let mut style = Style::default();
                        if s.bold {
                            style = style.add_modifier(Modifier::BOLD);
                        }
                        if s.italic {
                            style = style.add_modifier(Modifier::ITALIC);
                        }
                        if s.underline {
                            style = style.add_modifier(Modifier::UNDERLINED);
                        }
                        if s.strike {
                            style = style.add_modifier(Modifier::CROSSED_OUT);
                        }
                        if s.dim {
                            style = style.fg(Color::DarkGray);
                        }
                        if s.code {
                            style = style.fg(Color::LightCyan);
                        }
                        if s.heading > 0 {
                            style = style.fg(Color::LightMagenta);
                        }
                        Span::styled(span.text, style)
                    })
                    .collect::<Vec<_>>(),
            )
        })
        .collect()
}

/// `2847` → `2,847`.
pub fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn centered(area: Rect, width: u16, height: u16) -> Rect {
    let w = width.min(area.width);
    let h = height.min(area.height);
    Rect { x: area.x + (area.width - w) / 2, y: area.y + (area.height - h) / 2, width: w, height: h }
}

/// Columns of a help row's key.
const HELP_KEY: usize = 33;

/// The help over the log; taller than it, it scrolls (`scroll` lines down,
/// kept within it).
fn draw_help(frame: &mut Frame<'_>, area: Rect, scroll: &mut usize) {
    let width = area.width.min(92);
    let lines = help_lines(width.saturating_sub(2) as usize);
    let rect = centered(area, width, lines.len().saturating_add(2).min(u16::MAX as usize) as u16);
    let shown = rect.height.saturating_sub(2) as usize;
    *scroll = (*scroll).min(lines.len().saturating_sub(shown));
    let title = if lines.len() > shown {
        format!(" help · ↑↓ PgUp PgDn {}-{} of {} · Esc to close ", *scroll + 1, *scroll + shown, lines.len())
    } else {
        " help · Esc to close ".to_string()
    };
    let lines: Vec<Line<'static>> = lines.into_iter().skip(*scroll).collect();
    frame.render_widget(Clear, rect);
    frame.render_widget(Paragraph::new(lines).block(Block::bordered().title(title)), rect);
}

/// The help's rows for `inner` columns: each description wrapped beside
/// its key (under it, when the key is too long or the width too narrow),
/// never cut.
fn help_lines(inner: usize) -> Vec<Line<'static>> {
    let bold = |s: &str| Line::from(Span::styled(s.to_string(), Style::default().add_modifier(Modifier::BOLD)));
    let key_style = Style::default().fg(Color::Cyan);
    // Too narrow for two columns: each description under its key.
    let column = if inner >= HELP_KEY + 24 { HELP_KEY } else { 4 };
    let mut lines = vec![bold("Keys")];
    let rows = |lines: &mut Vec<Line<'static>>, table: &[(&str, &str)]| {
        for (k, v) in table {
            let key = format!("  {k}");
            let text = super::wrap::wrap(&[Line::from(v.to_string())], inner.saturating_sub(column));
            let beside = key.chars().count() < column;
            if !beside {
                lines.push(Line::from(Span::styled(key.clone(), key_style)));
            }
            let mut first = beside;
            for t in text {
                let lead = if first { format!("{key:<column$}") } else { " ".repeat(column) };
                first = false;
                let mut spans = vec![Span::styled(lead, key_style)];
                spans.extend(t.spans);
                lines.push(Line::from(spans));
            }
        }
    };
    rows(&mut lines, KEYS);
    lines.push(Line::default());
    lines.push(bold("Commands"));
    rows(&mut lines, HELP);
    lines
}

fn draw_threads(frame: &mut Frame<'_>, area: Rect, threads: &[kd_proto::types::Thread], selected: usize) {
    // An archived thread is marked: opened, it refuses messages until /unarchive.
    let rows = std::iter::once("+ new thread".to_string()).chain(threads.iter().map(|t| {
        let archived = if t.status == kd_proto::types::ThreadStatus::Archived { "  [archived]" } else { "" };
        let title = kd_client::terminal::safe(t.title.as_deref().unwrap_or_default()).replace(['\n', '\t'], " ");
        format!("{}  {}{archived}  {title}", t.id, crate::fmt::count(t.last_seq, "message"))
    }));
    let lines: Vec<Line<'_>> = rows
        .enumerate()
        .map(|(i, row)| match i == selected {
            // Marked as well as highlighted, for terminals without colour.
            true => Line::from(format!("› {row}")).style(Style::default().add_modifier(Modifier::REVERSED)),
            false => Line::from(format!("  {row}")),
        })
        .collect();
    let rect = centered(area, 70, lines.len() as u16 + 2);
    frame.render_widget(Clear, rect);
    frame.render_widget(Paragraph::new(lines).block(Block::bordered().title(" threads · ↑↓ Enter · Esc ")), rect);
}

/// Every thread's pending approvals, the oldest first; this thread's marked.
fn draw_approvals(frame: &mut Frame<'_>, area: Rect, list: &[kd_proto::approval::Approval], thread: &str) {
    let width = area.width.saturating_sub(4).clamp(20, 110) as usize;
    let mut list: Vec<&kd_proto::approval::Approval> = list.iter().collect();
    list.sort_by(|a, b| (a.requested_at_ms, &a.id).cmp(&(b.requested_at_ms, &b.id)));
    let mut lines: Vec<Line<'_>> = list
        .iter()
        .map(|a| {
            let mark = if a.thread == thread { "●" } else { " " };
            let what = crate::fmt::one_line(&crate::approval_text::what(a));
            let member = crate::fmt::one_line(&kd_client::terminal::safe(&a.member));
            let row = format!("{mark} {}  {}  {member}  {what}", a.id, a.thread);
            Line::from(row.chars().take(width.saturating_sub(1)).collect::<String>())
        })
        .collect();
    lines.push(Line::default());
    lines.push(Line::from(Span::styled(
        "● this thread · /approve ID [once|run|thread] · /deny ID [MESSAGE]",
        Style::default().fg(Color::DarkGray),
    )));
    let height = (lines.len() as u16 + 2).min(area.height);
    let rect = centered(area, width as u16 + 2, height);
    frame.render_widget(Clear, rect);
    frame.render_widget(Paragraph::new(lines).block(Block::bordered().title(" approvals · any key closes ")), rect);
}

fn draw_hits(frame: &mut Frame<'_>, area: Rect, hits: &[kd_proto::types::SearchHit], selected: usize) {
    let width = area.width.saturating_sub(4).clamp(20, 100) as usize;
    let lines: Vec<Line<'_>> = hits
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let place = match h.seq {
                Some(seq) => format!("{} #{seq} {}", h.thread, h.from),
                None => format!("{} {}", h.thread, h.from),
            };
            let snippet = kd_client::terminal::safe(&h.snippet).split_whitespace().collect::<Vec<_>>().join(" ");
            let row: String = format!("{place}: {snippet}").chars().take(width.saturating_sub(2)).collect();
            match i == selected {
                true => Line::from(format!("› {row}")).style(Style::default().add_modifier(Modifier::REVERSED)),
                false => Line::from(format!("  {row}")),
            }
        })
        .collect();
    let height = (lines.len() as u16 + 2).min(area.height);
    let rect = centered(area, width as u16 + 2, height);
    frame.render_widget(Clear, rect);
    frame.render_widget(Paragraph::new(lines).block(Block::bordered().title(" search · ↑↓ Enter · Esc ")), rect);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_have_thousands_separators() {
        assert_eq!(thousands(2847), "2,847");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000_000), "1,000,000");
    }
}
