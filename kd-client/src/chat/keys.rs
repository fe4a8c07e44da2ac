//! Keys, mouse and paste to state changes and effects.

use ratatui::crossterm::event::{Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseEventKind};
use ratatui_textarea::Input;

use super::app::{App, Effect, Overlay};

/// Lines the mouse wheel scrolls.
const WHEEL: usize = 3;

pub fn on_event(app: &mut App, event: Event) -> Vec<Effect> {
    match event {
        Event::Key(key) if key.kind != KeyEventKind::Release => on_key(app, key),
        Event::Paste(text) => {
            // Multi-line pastes stay in the input; nothing is sent.
            let text = text.replace("\r\n", "\n").replace('\r', "\n");
            app.input.insert_str(&text);
            app.dirty = true;
            vec![]
        }
        Event::Mouse(m) => {
            match (m.kind, app.diff.as_mut()) {
                (MouseEventKind::ScrollUp, Some(view)) => {
                    view.scroll_by(-(WHEEL as isize));
                    app.dirty = true;
                }
                (MouseEventKind::ScrollDown, Some(view)) => {
                    view.scroll_by(WHEEL as isize);
                    app.dirty = true;
                }
                (MouseEventKind::ScrollUp, None) => app.scroll_up(WHEEL),
                (MouseEventKind::ScrollDown, None) => app.scroll_down(WHEEL),
                _ => {}
            }
            vec![]
        }
        Event::Resize(..) => {
            app.dirty = true;
            vec![]
        }
        _ => vec![],
    }
}

pub fn on_key(app: &mut App, key: KeyEvent) -> Vec<Effect> {
    let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
    if ctrl && matches!(key.code, KeyCode::Char('c')) {
        return vec![Effect::Exit];
    }
    // A question asked (`/delete`, `/cancel`): this key answers it, and does nothing else.
    if app.confirm.is_some() {
        return app.answer(matches!(key.code, KeyCode::Char('y' | 'Y')) && !ctrl);
    }
    // A diff shown: its keys scroll it, Esc or q closes it.
    if let Some(view) = app.diff.as_mut() {
        app.dirty = true;
        match key.code {
            KeyCode::Esc | KeyCode::Char('q') => app.diff = None,
            KeyCode::Up | KeyCode::Char('k') => view.scroll_by(-1),
            KeyCode::Down | KeyCode::Char('j') => view.scroll_by(1),
            KeyCode::PageUp => view.scroll_by(-view.page()),
            KeyCode::PageDown | KeyCode::Char(' ') => view.scroll_by(view.page()),
            KeyCode::Home => view.top(),
            KeyCode::End => view.bottom(),
            _ => {}
        }
        return vec![];
    }
    // An approval asked, the input empty: its keys answer it (Esc: later).
    if let Some(effects) = app.approval_key(key) {
        return effects;
    }
    if key.code == KeyCode::Esc {
        return app.escape();
    }
    if let Some(overlay) = app.overlay.clone() {
        return on_overlay_key(app, overlay, key);
    }
    let page = app.log_height.saturating_sub(2).max(1);
    match key.code {
        KeyCode::Enter if key.modifiers.intersects(KeyModifiers::SHIFT | KeyModifiers::ALT) => newline(app),
        KeyCode::Char('j') if ctrl => newline(app),
        KeyCode::Enter => {
            app.notice = None;
            return app.submit();
        }
        KeyCode::Tab => app.complete(),
        // As readline: the line back to its start (the text area's own
        // Ctrl+U is undo, which looked like deleting one character).
        KeyCode::Char('u') if ctrl => {
            if app.input.delete_line_by_head() {
                app.notice = None;
            }
            app.dirty = true;
        }
        KeyCode::Char('z') if ctrl => {
            app.input.undo();
            app.dirty = true;
        }
        KeyCode::PageUp => app.scroll_up(page),
        KeyCode::PageDown => app.scroll_down(page),
        KeyCode::Home => app.scroll_up(usize::MAX / 2),
        KeyCode::End => app.scroll_to_bottom(),
        _ => {
            if app.input.input(Input::from(key)) {
                app.notice = None;
            }
            app.dirty = true;
        }
    }
    vec![]
}

fn newline(app: &mut App) {
    app.input.insert_newline();
    app.dirty = true;
}

fn on_overlay_key(app: &mut App, overlay: Overlay, key: KeyEvent) -> Vec<Effect> {
    app.dirty = true;
    match overlay {
        // The help scrolls when it is taller than the log; any other key closes it.
        Overlay::Help
            if matches!(
                key.code,
                KeyCode::Up | KeyCode::Down | KeyCode::PageUp | KeyCode::PageDown | KeyCode::Home | KeyCode::End
            ) =>
        {
            let page = app.log_height.saturating_sub(3).max(1);
            app.help_scroll = match key.code {
                KeyCode::Up => app.help_scroll.saturating_sub(1),
                KeyCode::Down => app.help_scroll.saturating_add(1),
                KeyCode::PageUp => app.help_scroll.saturating_sub(page),
                KeyCode::PageDown => app.help_scroll.saturating_add(page),
                KeyCode::Home => 0,
                _ => usize::MAX,
            };
            vec![]
        }
        Overlay::Help | Overlay::Approvals(_) => {
            app.overlay = None;
            app.help_scroll = 0;
            vec![]
        }
        Overlay::Threads { threads, selected } => {
            let last = threads.len();
            let selected = match key.code {
                KeyCode::Up => selected.saturating_sub(1),
                KeyCode::Down => (selected + 1).min(last),
                KeyCode::Enter => {
                    app.overlay = None;
                    return match selected {
                        0 => vec![Effect::NewThread],
                        i => threads.get(i - 1).map(|t| vec![Effect::Open(t.id.clone())]).unwrap_or_default(),
                    };
                }
                _ => selected,
            };
            app.overlay = Some(Overlay::Threads { threads, selected });
            vec![]
        }
        Overlay::Search { hits, selected } => {
            let selected = match key.code {
                KeyCode::Up => selected.saturating_sub(1),
                KeyCode::Down => (selected + 1).min(hits.len().saturating_sub(1)),
                KeyCode::Enter => {
                    app.overlay = None;
                    return match hits.get(selected) {
                        Some(h) => match h.seq {
                            Some(seq) => vec![Effect::OpenAt(h.thread.clone(), seq)],
                            None => vec![Effect::Open(h.thread.clone())],
                        },
                        None => vec![],
                    };
                }
                KeyCode::Esc => {
                    app.overlay = None;
                    return vec![];
                }
                _ => selected,
            };
            app.overlay = Some(Overlay::Search { hits, selected });
            vec![]
        }
    }
}
