//! Tests of the chat: how events and keys change the state, and how the
//! screen looks (TestBackend snapshots, in `snapshots/`).

use kd_proto::types::*;
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::crossterm::event::{Event, KeyCode, KeyEvent, KeyModifiers};

use super::app::{App, Effect, Kind, Overlay};
use super::{keys, view};
use crate::testkit::{THREAD, answer, message, run_at, run_info};

pub(super) fn thread() -> Thread {
    crate::testkit::thread()
}

fn delta(run: &str, member: &str, text: &str, chars: u64) -> ThreadEvent {
    ThreadEvent::Delta { run: run.into(), member: member.into(), text: text.into(), chars }
}

pub(super) fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

pub(super) fn typed(app: &mut App, text: &str) {
    for c in text.chars() {
        keys::on_key(app, key(KeyCode::Char(c)));
    }
}

pub(super) fn screen(app: &mut App, width: u16, height: u16) -> String {
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal.draw(|f| view::draw(f, app)).unwrap();
    format!("{}", terminal.backend())
}

/// A conversation with every kind of panel.
fn every_panel() -> App {
    let mut app = App::new(thread());
    app.load(
        thread(),
        &[
            message(1, "king", MessageKind::King, "What should we do about the database schema?", None),
            message(
                2,
                "claude",
                MessageKind::Agent,
                "## Options\n\n1. **Normalize** fully\n2. Denormalize for *reads*\n\n```sql\nCREATE TABLE t (id INTEGER);\n```",
                Some("r1"),
            ),
            message(3, "codex", MessageKind::Error, "codex: timed out after 600 s", Some("r2")),
            message(4, "cursor", MessageKind::Interrupted, "I was saying that", Some("r3")),
        ],
    );
    app.apply(&ThreadEvent::Round { exchange: 1, round: 2, rounds: 4, state: RoundState::Running, expected: vec![] });
    // Round 2's turns answer the thread as it stands (message 4).
    app.apply(&ThreadEvent::RunWaiting { run: RunInfo { reply_to: Some(4), ..run_at("r4", "claude", 4) } });
    app.apply(&delta("r4", "claude", "Building on that, I think we", 2847));
    app.apply(&ThreadEvent::RunWaiting { run: RunInfo { reply_to: Some(4), ..run_at("r5", "codex", 5) } });
    app
}

#[test]
fn every_panel_kind_at_80_columns() {
    let mut app = every_panel();
    insta::assert_snapshot!(screen(&mut app, 80, 48));
}

#[test]
fn narrow_terminal_of_40_columns() {
    let mut app = every_panel();
    insta::assert_snapshot!(screen(&mut app, 40, 40));
}

#[test]
fn wide_terminal_of_120_columns() {
    let mut app = every_panel();
    insta::assert_snapshot!(screen(&mut app, 120, 40));
}

#[test]
fn the_input_grows_with_its_content_up_to_a_limit() {
    let mut app = App::new(thread());
    typed(&mut app, "first line");
    keys::on_key(&mut app, KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT));
    typed(&mut app, "second line");
    keys::on_key(&mut app, KeyEvent::new(KeyCode::Enter, KeyModifiers::SHIFT));
    typed(&mut app, "third");
    insta::assert_snapshot!(screen(&mut app, 60, 16));
    for _ in 0..20 {
        keys::on_key(&mut app, KeyEvent::new(KeyCode::Char('j'), KeyModifiers::CONTROL));
    }
    assert_eq!(view::input_rows(&app, 58), view::MAX_INPUT_ROWS);
}

#[test]
fn header_and_status_bar_show_members_rounds_streaming_and_notices() {
    let mut app = every_panel();
    app.mute.insert("cursor".into());
    app.set_notice("cursor is muted: it will not be asked until /unmute cursor");
    let s = screen(&mut app, 100, 12);
    let lines: Vec<&str> = s.lines().collect();
    assert!(
        lines[0].contains("kd chat · a8b3c1 · claude codex cursor · round 2/4 · streaming: claude"),
        "{}",
        lines[0]
    );
    assert!(lines[8].contains("cursor is muted"), "{s}");
}

#[test]
fn a_disconnected_daemon_shows_a_banner() {
    let mut app = every_panel();
    app.connected = false;
    let s = screen(&mut app, 80, 12);
    assert!(s.lines().nth(1).unwrap().contains("kdd is not reachable — reconnecting…"), "{s}");
}

/// A message the daemon refuses (an unknown @name), or a command the chat
/// does not know, gives back what was typed: nothing the King wrote is lost.
#[test]
fn a_refused_message_or_command_gives_back_what_was_typed() {
    let mut app = App::new(thread());
    let long = "@nobdy here is my long carefully written paragraph";
    typed(&mut app, long);
    let effects = keys::on_key(&mut app, key(KeyCode::Enter));
    assert_eq!(effects, vec![Effect::Send { body: long.into(), mute: vec![] }]);
    assert!(app.input.is_empty(), "cleared while it is sent");
    let refused = kd_client::ClientError::Rpc {
        code: 1001,
        message: "unknown member @nobdy; the members are claude, codex".into(),
        data: None,
    };
    super::requests::on_reply(&mut app, super::requests::Reply::Sent(long.into(), Err(refused)));
    assert_eq!(app.input.lines().join("\n"), long);
    assert!(app.notice.as_deref().is_some_and(|n| n.contains("unknown member @nobdy")), "{:?}", app.notice);
    // Typed again meanwhile: what is there now stays.
    typed(&mut app, "x");
    let _ = keys::on_key(&mut app, key(KeyCode::Enter));
    typed(&mut app, "newer");
    let refused = kd_client::ClientError::Rpc { code: 1001, message: "refused".into(), data: None };
    super::requests::on_reply(&mut app, super::requests::Reply::Sent("x".into(), Err(refused)));
    assert_eq!(app.input.lines().join("\n"), "newer");
    // A command the chat does not know.
    let mut app = App::new(thread());
    typed(&mut app, "/comit claude a long message");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![]);
    assert_eq!(app.input.lines().join("\n"), "/comit claude a long message");
}

#[test]
fn enter_sends_with_the_mute_list_and_clears_the_input() {
    let mut app = App::new(thread());
    typed(&mut app, "/mute codex");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![]);
    typed(&mut app, "Hello");
    let effects = keys::on_key(&mut app, key(KeyCode::Enter));
    assert_eq!(effects, vec![Effect::Send { body: "Hello".into(), mute: vec!["codex".into()] }]);
    assert!(app.input.is_empty());
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![], "an empty input sends nothing");
}

#[test]
fn shift_and_alt_enter_insert_newlines_and_paste_keeps_lines() {
    let mut app = App::new(thread());
    typed(&mut app, "a");
    keys::on_key(&mut app, KeyEvent::new(KeyCode::Enter, KeyModifiers::SHIFT));
    typed(&mut app, "b");
    keys::on_key(&mut app, KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT));
    keys::on_event(&mut app, Event::Paste("c\r\nd".into()));
    assert_eq!(app.input.lines(), ["a", "b", "c", "d"]);
    assert_eq!(
        keys::on_key(&mut app, key(KeyCode::Enter)),
        vec![Effect::Send { body: "a\nb\nc\nd".into(), mute: vec![] }]
    );
}

#[test]
fn tab_completes_members_and_commands() {
    let mut app = App::new(thread());
    typed(&mut app, "ask @cl");
    keys::on_key(&mut app, key(KeyCode::Tab));
    assert_eq!(app.input.lines(), ["ask @claude "]);
    let mut app = App::new(thread());
    typed(&mut app, "/unm");
    keys::on_key(&mut app, key(KeyCode::Tab));
    assert_eq!(app.input.lines(), ["/unmute "]);
    let mut app = App::new(thread());
    typed(&mut app, "@c");
    keys::on_key(&mut app, key(KeyCode::Tab));
    assert_eq!(app.input.lines(), ["@c"], "ambiguous: nothing inserted");
    assert_eq!(app.notice.as_deref(), Some("@claude  @codex  @cursor"));
}

#[test]
fn unknown_commands_and_members_get_a_notice_not_a_send() {
    let mut app = App::new(thread());
    typed(&mut app, "/mute gpt");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![]);
    assert_eq!(app.notice.as_deref(), Some("no member \"gpt\"; the members are claude, codex, cursor"));
    typed(&mut app, "/nope");
    keys::on_key(&mut app, key(KeyCode::Enter));
    assert_eq!(app.notice.as_deref(), Some("unknown command /nope; /help lists them"));
    assert_eq!(app.input.lines().concat(), "/nope", "kept, to be mended");
    keys::on_key(&mut app, KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    typed(&mut app, "/help");
    keys::on_key(&mut app, key(KeyCode::Enter));
    assert_eq!(app.overlay, Some(Overlay::Help));
    let help = screen(&mut app, 100, 90);
    for command in ["/work [--vote] [--to A,B] TASK", "/diff [MEMBER]", "/accept [--squash] MEMBER", "/reject MEMBER"] {
        assert!(help.contains(command), "help lists {command}: {help}");
    }
    keys::on_key(&mut app, key(KeyCode::Char('x')));
    assert_eq!(app.overlay, None, "any key closes help");
}

/// Every word of `text`, in order, somewhere on `screen` (borders, the
/// quotes TestBackend puts around each row and line breaks aside): nothing
/// is cut.
fn shows_whole(screen: &str, text: &str) -> bool {
    let rows: Vec<&str> = screen.lines().map(|l| l.trim_matches('"')).collect();
    let words = |s: &str| {
        s.split(|c: char| c.is_whitespace() || c == '│').filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ")
    };
    words(&rows.join("\n")).contains(&words(text))
}

#[test]
fn help_opens_at_its_top_however_it_was_closed() {
    let mut app = App::new(thread());
    app.overlay = Some(Overlay::Help);
    let top = screen(&mut app, 60, 20);
    for _ in 0..5 {
        keys::on_key(&mut app, key(KeyCode::Down));
    }
    assert_ne!(screen(&mut app, 60, 20), top, "it scrolled");
    keys::on_key(&mut app, key(KeyCode::Esc));
    assert_eq!(app.overlay, None);
    for c in "/help".chars() {
        keys::on_key(&mut app, key(KeyCode::Char(c)));
    }
    keys::on_key(&mut app, key(KeyCode::Enter));
    assert_eq!(app.overlay, Some(Overlay::Help));
    assert_eq!(screen(&mut app, 60, 20), top);
}

#[test]
fn help_wraps_long_lines_instead_of_cutting_them() {
    use super::commands::{HELP, KEYS};
    for width in [80, 60] {
        let mut app = App::new(thread());
        app.overlay = Some(Overlay::Help);
        // Taller than the terminal: it scrolls, a line at a time, to its end.
        let mut screens = vec![screen(&mut app, width, 40)];
        loop {
            assert!(screens.len() < 200, "the help never reaches its end at {width} columns");
            let before = app.help_scroll;
            keys::on_key(&mut app, key(KeyCode::Down));
            screens.push(screen(&mut app, width, 40));
            if app.help_scroll == before {
                break;
            }
        }
        assert!(screens.last().unwrap().contains("/quit, /exit"), "the end is reached");
        for (k, v) in KEYS.iter().chain(HELP) {
            assert!(
                screens.iter().any(|s| shows_whole(s, k) && shows_whole(s, v)),
                "{k}: {v:?} is cut at {width} columns"
            );
        }
        assert!(screens[0].contains(" help · ↑↓ PgUp PgDn 1-"), "it says it scrolls:\n{}", screens[0]);
        // Not past its end; Home goes back; another key closes it.
        let end = app.help_scroll;
        keys::on_key(&mut app, key(KeyCode::End));
        screen(&mut app, width, 40);
        assert_eq!(app.help_scroll, end);
        keys::on_key(&mut app, key(KeyCode::Home));
        assert_eq!(screen(&mut app, width, 40), screens[0]);
        keys::on_key(&mut app, key(KeyCode::Char('q')));
        assert_eq!((app.overlay.clone(), app.help_scroll), (None, 0));
    }
}

#[test]
fn ctrl_u_deletes_back_to_the_start_of_the_line() {
    let ctrl = |c| KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL);
    let mut app = App::new(thread());
    typed(&mut app, "first line");
    keys::on_key(&mut app, KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT));
    typed(&mut app, "a typo here");
    keys::on_key(&mut app, ctrl('u'));
    assert_eq!(app.input.lines(), ["first line", ""], "the line, not one character");
    typed(&mut app, "keep this");
    for _ in 0..4 {
        keys::on_key(&mut app, key(KeyCode::Left));
    }
    keys::on_key(&mut app, ctrl('u'));
    assert_eq!(app.input.lines(), ["first line", "this"], "as readline: what is before the cursor");
    // Undo is still there, on Ctrl+Z.
    keys::on_key(&mut app, ctrl('z'));
    assert_eq!(app.input.lines(), ["first line", "keep this"]);
}

#[test]
fn escape_interrupts_and_a_second_escape_during_quit_forces_it() {
    let mut app = every_panel();
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Esc)), vec![Effect::Interrupt]);
    app.my_runs.insert("r4".into());
    typed(&mut app, "/quit");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![], "waits for this client's run");
    assert!(app.quitting);
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Esc)), vec![Effect::Interrupt, Effect::Exit]);
    let mut idle = App::new(thread());
    typed(&mut idle, "/exit");
    assert_eq!(keys::on_key(&mut idle, key(KeyCode::Enter)), vec![Effect::Exit]);
    assert_eq!(keys::on_key(&mut idle, KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)), vec![Effect::Exit]);
}

#[test]
fn auto_scroll_follows_only_at_the_bottom() {
    let mut app = every_panel();
    screen(&mut app, 80, 20);
    app.apply(&delta("r4", "claude", " should", 2854));
    assert_eq!((app.scroll, app.new_below), (0, false), "at the bottom: follow");
    keys::on_key(&mut app, key(KeyCode::PageUp));
    assert!(app.scroll > 0);
    let scrolled = app.scroll;
    app.apply(&delta("r4", "claude", " normalize", 2864));
    assert_eq!(app.scroll, scrolled, "scrolled up: the view stays put");
    assert!(app.new_below, "and says new content arrived");
    assert!(screen(&mut app, 80, 20).contains("▼ new messages below"));
    keys::on_key(&mut app, key(KeyCode::End));
    assert_eq!((app.scroll, app.new_below), (0, false));
    keys::on_event(
        &mut app,
        Event::Mouse(ratatui::crossterm::event::MouseEvent {
            kind: ratatui::crossterm::event::MouseEventKind::ScrollUp,
            column: 0,
            row: 0,
            modifiers: KeyModifiers::NONE,
        }),
    );
    assert_eq!(app.scroll, 3);
}

#[test]
fn streaming_panels_grow_in_place_and_become_the_message() {
    let mut app = App::new(thread());
    app.on_sent(&Sent {
        message: message(1, "king", MessageKind::King, "Q?", None),
        members: vec!["claude".into(), "codex".into()],
        rounds: 1,
        mode: Mode::Broadcast,
        notice: None,
        runs: vec![SentRun { run: run_info("r1", "claude"), attached: false }],
    });
    assert_eq!(
        app.kinds(),
        [("king".into(), Kind::King), ("claude".into(), Kind::Waiting), ("codex".into(), Kind::Waiting)],
        "waiting panels for every expected member at once"
    );
    app.apply(&ThreadEvent::RunWaiting { run: run_info("r2", "codex") });
    app.apply(&delta("r2", "codex", "Par", 3));
    app.apply(&delta("r1", "claude", "Yes", 3));
    assert_eq!(app.kinds()[1..], [("claude".into(), Kind::Streaming), ("codex".into(), Kind::Streaming)]);
    app.apply(&ThreadEvent::Message {
        message: Box::new(message(2, "codex", MessageKind::Agent, "Partly.", Some("r2"))),
    });
    assert_eq!(app.kinds()[2], ("codex".into(), Kind::Answer), "in the place of its panel");
    assert_eq!(app.entries[2].text, "Partly.");
}

/// A fast member answered before the chat had the answer to its own send
/// (seen under load in tests/e2e/chat.rs): its run is done, no panel
/// waits for it.
#[test]
fn a_send_answered_before_its_reply_came_leaves_no_waiting_panel() {
    let mut app = App::new(thread());
    app.apply(&ThreadEvent::Message { message: Box::new(message(1, "king", MessageKind::King, "Q?", None)) });
    app.apply(&ThreadEvent::RunWaiting { run: run_info("r1", "claude") });
    app.apply(&ThreadEvent::Message { message: Box::new(answer(2, "claude", "A.", "r1", 0)) });
    app.apply(&ThreadEvent::RunFinished { run: "r1".into(), member: "claude".into(), seq: 2 });
    app.on_sent(&Sent {
        message: message(1, "king", MessageKind::King, "Q?", None),
        members: vec!["claude".into()],
        rounds: 1,
        mode: Mode::Broadcast,
        notice: None,
        runs: vec![SentRun { run: run_info("r1", "claude"), attached: false }],
    });
    assert_eq!(app.kinds(), [("king".into(), Kind::King), ("claude".into(), Kind::Answer)]);
    assert_eq!(app.my_runs_in_flight(), 0, "/quit has nothing to wait for");
}

#[test]
fn a_retry_takes_the_place_of_the_failed_panel() {
    let mut app = App::new(thread());
    app.load(
        thread(),
        &[
            message(1, "king", MessageKind::King, "Q?", None),
            message(2, "codex", MessageKind::Error, "boom", Some("r1")),
        ],
    );
    let mut retry = run_info("r2", "codex");
    retry.replaces = Some(2);
    app.apply(&ThreadEvent::RunWaiting { run: retry });
    assert_eq!(app.kinds()[1], ("codex".into(), Kind::Waiting));
    app.apply(&delta("r2", "codex", "Fine", 4));
    let mut answer = message(3, "codex", MessageKind::Agent, "Fine now.", Some("r2"));
    answer.replaces = Some(2);
    app.apply(&ThreadEvent::Message { message: Box::new(answer) });
    assert_eq!(app.kinds(), [("king".into(), Kind::King), ("codex".into(), Kind::Answer)]);
}

#[test]
fn sequential_turns_show_the_next_member_waiting_and_the_end_clears_placeholders() {
    let mut app = App::new(thread());
    let round = |state| ThreadEvent::Round {
        exchange: 1,
        round: 2,
        rounds: 2,
        state,
        expected: vec!["claude".into(), "codex".into()],
    };
    app.apply(&round(RoundState::Running));
    assert_eq!(app.kinds(), [("claude".into(), Kind::Waiting)]);
    let mut m = message(5, "claude", MessageKind::Agent, "Done.", None);
    m.round = Some(2);
    app.apply(&ThreadEvent::Message { message: Box::new(m) });
    assert_eq!(app.kinds(), [("claude".into(), Kind::Answer), ("codex".into(), Kind::Waiting)]);
    app.apply(&round(RoundState::Stopped));
    assert_eq!(app.kinds(), [("claude".into(), Kind::Answer)]);
}

#[test]
fn the_thread_picker_offers_a_new_thread_and_the_recent_ones() {
    let mut other = thread();
    other.id = "k2m9p4".into();
    other.title = Some("schema review".into());
    other.last_seq = 12;
    other.status = ThreadStatus::Archived;
    let picker = || {
        let mut app = App::new(thread());
        app.overlay = Some(Overlay::Threads { threads: vec![thread(), other.clone()], selected: 0 });
        app
    };
    let mut app = picker();
    let s = screen(&mut app, 80, 16);
    // An archived thread says so: opened, it refuses messages until /unarchive.
    assert!(s.contains("k2m9p4  12 messages  [archived]  schema review"), "{s}");
    insta::assert_snapshot!(s);
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![Effect::NewThread], "first: a new thread");
    let mut app = picker();
    for _ in 0..3 {
        keys::on_key(&mut app, key(KeyCode::Down));
    }
    assert!(matches!(app.overlay, Some(Overlay::Threads { selected: 2, .. })), "the selection stops at the last");
    keys::on_key(&mut app, key(KeyCode::Up));
    keys::on_key(&mut app, key(KeyCode::Down));
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![Effect::Open("k2m9p4".into())]);
    assert_eq!(app.overlay, None);
}

fn members_in_order(app: &App) -> Vec<String> {
    app.entries.iter().map(|e| e.member.clone()).collect()
}

#[test]
fn a_round_shown_live_is_in_the_order_it_is_shown_reopened_when_members_finish_in_reverse() {
    let king = message(1, "king", MessageKind::King, "Order?", None);
    let sent = Sent {
        message: king.clone(),
        members: vec!["claude".into(), "codex".into()],
        rounds: 1,
        mode: Mode::Broadcast,
        notice: None,
        runs: vec![
            SentRun { run: run_at("r1", "claude", 10), attached: false },
            SentRun { run: run_at("r2", "codex", 11), attached: false },
        ],
    };
    let (codex, claude) = (answer(2, "codex", "fast", "r2", 11), answer(3, "claude", "slow", "r1", 10));
    let mut live = App::new(thread());
    live.on_sent(&sent);
    for e in [
        ThreadEvent::RunWaiting { run: run_at("r2", "codex", 11) },
        ThreadEvent::RunWaiting { run: run_at("r1", "claude", 10) },
        ThreadEvent::Message { message: Box::new(codex.clone()) },
        ThreadEvent::Message { message: Box::new(claude.clone()) },
    ] {
        live.apply(&e);
    }
    let mut reopened = App::new(thread());
    reopened.load(thread(), &[king, codex, claude]);
    assert_eq!(members_in_order(&live), ["king", "claude", "codex"]);
    assert_eq!(members_in_order(&live), members_in_order(&reopened));
}

#[test]
fn runs_of_another_client_take_their_places_whatever_order_their_events_come_in() {
    let mut app = App::new(thread());
    app.load(thread(), &[message(1, "king", MessageKind::King, "Q", None)]);
    app.apply(&ThreadEvent::RunWaiting { run: run_at("r3", "cursor", 12) });
    app.apply(&ThreadEvent::RunWaiting { run: run_at("r1", "claude", 10) });
    app.apply(&delta("r2", "codex", "x", 1));
    app.apply(&ThreadEvent::RunWaiting { run: run_at("r2", "codex", 11) });
    assert_eq!(members_in_order(&app), ["king", "claude", "codex", "cursor"]);
    // The King speaks again while they answer: after them.
    app.apply(&ThreadEvent::Message { message: Box::new(message(2, "king", MessageKind::King, "And?", None)) });
    assert_eq!(members_in_order(&app).last().map(String::as_str), Some("king"));
    app.apply(&ThreadEvent::Message { message: Box::new(answer(3, "cursor", "c", "r3", 12)) });
    assert_eq!(members_in_order(&app), ["king", "claude", "codex", "cursor", "king"]);
}

/// The foreground of the first cell of the line holding `text`.
fn fg_of_line(buffer: &ratatui::buffer::Buffer, text: &str) -> Option<ratatui::style::Color> {
    let area = buffer.area;
    (0..area.height).find_map(|y| {
        let line: String = (0..area.width).map(|x| buffer[(x, y)].symbol().to_string()).collect();
        line.contains(text).then(|| buffer[(0, y)].fg)
    })
}

#[test]
fn members_are_drawn_in_distinct_colours_and_no_colour_with_no_color() {
    let members = vec!["claude".to_string(), "codex".to_string(), "cursor".to_string()];
    let mut app = App::new(thread());
    app.palette = kd_client::style::Palette::new(&members, vec![]);
    app.colors = true;
    app.load(
        thread(),
        &[
            message(1, "king", MessageKind::King, "Q", None),
            message(2, "claude", MessageKind::Agent, "from claude", Some("r1")),
            message(3, "cursor", MessageKind::Agent, "from cursor", Some("r2")),
        ],
    );
    let mut terminal = Terminal::new(TestBackend::new(60, 20)).unwrap();
    terminal.draw(|f| view::draw(f, &mut app)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    let (claude, cursor) = (fg_of_line(&buffer, "┌─ claude"), fg_of_line(&buffer, "┌─ cursor"));
    assert_eq!(claude, Some(ratatui::style::Color::Indexed(166)));
    assert_eq!(cursor, Some(ratatui::style::Color::Indexed(32)));
    app.colors = false;
    terminal.draw(|f| view::draw(f, &mut app)).unwrap();
    let buffer = terminal.backend().buffer().clone();
    assert!(
        buffer.content.iter().all(|c| c.fg == ratatui::style::Color::Reset && c.bg == ratatui::style::Color::Reset)
    );
}

#[test]
fn a_thread_opened_at_its_end_says_what_is_not_shown() {
    let mut app = App::new(thread());
    let reply = Message { reply_to: Some(41), ..answer(42, "claude", "A", "r1", 1) };
    app.load(thread(), &[message(41, "king", MessageKind::King, "Q", None), reply]);
    assert_eq!(members_in_order(&app), ["kd", "king", "claude"]);
    let note = &app.entries[0];
    assert_eq!(note.kind, Kind::System);
    assert!(
        note.text.starts_with("40 earlier messages are not shown here") && note.text.contains("kd show"),
        "{}",
        note.text
    );
    let mut whole = App::new(thread());
    whole.load(thread(), &[message(1, "king", MessageKind::King, "Q", None)]);
    assert_eq!(members_in_order(&whole), ["king"], "nothing to say when it all fits");
}

/// A vote with a synthesis: the answers, a ballot, kd's tally in its own
/// panel, the chair's synthesis streaming in a panel of its own.
fn a_vote() -> App {
    let mut app = App::new(thread());
    let ballot = Message {
        purpose: Some(Purpose::Ballot),
        ..answer(4, "claude", "B is simpler.\n\nFINAL RANKING:\n1. Response B", "r3", 3)
    };
    let tally = Message {
        purpose: Some(Purpose::Tally),
        ..message(
            5,
            "kd",
            MessageKind::System,
            "Vote: codex wins.\n\n| answer | member | points |\n|---|---|---|\n| Response B | codex | 1 |\n| Response A | claude | 0 |",
            None,
        )
    };
    app.load(
        thread(),
        &[
            message(1, "king", MessageKind::King, "How do we share the cache?", None),
            answer(2, "claude", "Use a queue.", "r1", 1),
            answer(3, "codex", "Use a lock.", "r2", 2),
            ballot,
            tally,
        ],
    );
    let chair = RunInfo { reply_to: Some(5), purpose: Some(Purpose::Synthesis), ..run_at("r5", "claude", 5) };
    app.apply(&ThreadEvent::RunWaiting { run: chair });
    app.apply(&delta("r5", "claude", "Use a lock, and", 15));
    app
}

#[test]
fn a_vote_has_a_tally_panel_and_a_synthesis_panel() {
    let mut app = a_vote();
    insta::assert_snapshot!(screen(&mut app, 80, 34));
    // Once stored, the synthesis keeps its panel, after the tally.
    let done = Message {
        purpose: Some(Purpose::Synthesis),
        reply_to: Some(5),
        ..answer(6, "claude", "Use a lock, and a queue behind it.", "r5", 5)
    };
    app.apply(&ThreadEvent::Message { message: Box::new(done) });
    let s = screen(&mut app, 80, 34);
    assert!(s.contains("┏━ claude · synthesis ━"), "{s}");
    assert!(s.find("┏━ vote ━") < s.find("┏━ claude · synthesis"), "{s}");
}

#[test]
fn an_emergency_shows_a_banner_until_every_member_acknowledged() {
    let mut app = App::new(thread());
    let broadcast = Message {
        to: vec!["claude".into(), "codex".into(), "cursor".into()],
        route: Some(RouteType::Emergency),
        ..message(1, "king", MessageKind::King, "Stop pushing to main.", None)
    };
    app.load(thread(), &[broadcast]);
    let pending = |p: &[&str]| ThreadEvent::Emergency {
        broadcast: "e-1".into(),
        seq: 1,
        from: "king".into(),
        pending: p.iter().map(|s| s.to_string()).collect(),
    };
    app.apply(&pending(&["claude", "codex"]));
    insta::assert_snapshot!(screen(&mut app, 80, 12));
    app.apply(&pending(&["codex"]));
    assert!(screen(&mut app, 80, 12).contains("waiting for acknowledgements: codex "));
    app.apply(&pending(&[]));
    let s = screen(&mut app, 80, 12);
    assert!(!s.contains("emergency from"), "the banner goes once all acknowledged: {s}");
    assert!(s.contains("╔═ king · EMERGENCY ═"), "the broadcast stays marked: {s}");
}

#[test]
fn the_status_bar_shows_what_the_thread_cost() {
    let mut app = App::new(thread());
    app.load(thread(), &[message(1, "king", MessageKind::King, "Price?", None)]);
    app.cost_usd = 0.0100;
    let mut paid = answer(2, "claude", "Cheap.", "r1", 1);
    if let Some(run) = paid.run.as_mut() {
        run.cost_usd = Some(0.0023);
    }
    app.apply(&ThreadEvent::Message { message: Box::new(paid.clone()) });
    app.apply(&ThreadEvent::Message { message: Box::new(paid) });
    let s = screen(&mut app, 80, 12);
    let status = s.lines().nth(8).unwrap();
    assert!(status.trim_end_matches('"').trim_end().ends_with("$0.0123"), "counted once: {status}");
}

#[test]
fn title_fork_and_search_commands_and_a_hit_brought_into_view() {
    let mut app = App::new(thread());
    let mut history = vec![message(1, "king", MessageKind::King, "Where to shard?", None)];
    for seq in 2..=30 {
        history.push(answer(seq, "claude", &format!("Answer number {seq}."), &format!("r{seq}"), seq));
    }
    app.load(thread(), &history);
    for (line, effect) in [
        ("/title Orders sharding", Effect::SetTitle("Orders sharding".into())),
        ("/fork Try tenants", Effect::Fork { title: Some("Try tenants".into()), carry: None }),
        ("/search shard*", Effect::Search("shard*".into())),
    ] {
        typed(&mut app, line);
        assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![effect], "{line}");
    }
    let hit = |seq: Option<u64>| SearchHit {
        thread: THREAD.into(),
        seq,
        from: "claude".into(),
        at_ms: 0,
        snippet: "Answer «number» 3.".into(),
        rank: -1.0,
    };
    app.overlay = Some(Overlay::Search { hits: vec![hit(None), hit(Some(3))], selected: 0 });
    let listed = screen(&mut app, 80, 20);
    assert!(listed.contains("search · ↑↓ Enter · Esc") && listed.contains("#3 claude: Answer «number» 3."), "{listed}");
    keys::on_key(&mut app, key(KeyCode::Down));
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![Effect::OpenAt(THREAD.into(), 3)]);
    app.jump_to(3);
    let s = screen(&mut app, 80, 20);
    assert!(s.contains("Answer number 3.") && !s.contains("Answer number 30."), "message 3 in view: {s}");
    app.thread.title = Some("Orders sharding".into());
    let header = screen(&mut app, 80, 20).lines().next().unwrap().to_string();
    assert!(header.contains("a8b3c1 · Orders sharding · claude"), "the header names the thread: {header}");
    app.jump_to(99);
    assert!(app.notice.as_deref().is_some_and(|n| n.contains("#99 is earlier than what is shown")));
}

#[test]
fn a_streaming_panel_says_what_its_member_is_doing() {
    let mut app = App::new(thread());
    app.load(thread(), &[message(1, "king", MessageKind::King, "Check it.", None)]);
    app.apply(&delta("r1", "codex", "Looking", 7));
    app.apply(&ThreadEvent::Activity { run: "r1".into(), member: "codex".into(), what: "running ls\u{1b}[2J".into() });
    let s = screen(&mut app, 80, 12);
    assert!(s.contains("codex (streaming · 7 chars · running ls␛[2J)"), "{s}");
    // Once the answer is in, the panel is the answer alone.
    app.apply(&ThreadEvent::Message { message: Box::new(answer(2, "codex", "Looking good.", "r1", 1)) });
    let s = screen(&mut app, 80, 12);
    assert!(!s.contains("running ls"), "{s}");
}

#[test]
fn a_question_to_a_busy_member_shows_queued_until_its_run_starts() {
    let mut app = App::new(thread());
    app.load(thread(), &[message(1, "king", MessageKind::King, "A?", None)]);
    app.apply(&delta("r1", "claude", "On A", 4));
    app.apply(&ThreadEvent::Message { message: Box::new(message(2, "king", MessageKind::King, "B?", None)) });
    let queued = RunInfo { status: RunStatus::Queued, reply_to: Some(2), ..run_at("r2", "claude", 2) };
    app.apply(&ThreadEvent::RunWaiting { run: queued.clone() });
    let s = screen(&mut app, 80, 16);
    assert!(s.contains("claude ── queued behind its answer in flight"), "{s}");
    // It leaves the queue when claude's answer to A is in.
    app.apply(&ThreadEvent::Message { message: Box::new(answer(3, "claude", "On A.", "r1", 1)) });
    app.apply(&ThreadEvent::RunWaiting { run: RunInfo { status: RunStatus::Waiting, ..queued } });
    let s = screen(&mut app, 80, 16);
    assert!(!s.contains("queued") && s.contains("claude ── waiting..."), "{s}");
    app.apply(&delta("r2", "claude", "On B", 4));
    assert_eq!(app.kinds().last(), Some(&("claude".into(), Kind::Streaming)));
}

#[test]
fn kds_own_panels_name_kd_once() {
    let mut app = App::new(thread());
    let bundle = Message {
        purpose: Some(Purpose::Bundle),
        ..message(1, "kd", MessageKind::System, "AGENTS.md: run the tests.", None)
    };
    let summary = Message {
        purpose: Some(Purpose::Summary),
        ..message(2, "kd", MessageKind::System, "The branch chose ids.", None)
    };
    let budget = message(3, "kd", MessageKind::System, "Stopped: the exchange reached its budget.", None);
    app.load(thread(), &[bundle, summary, budget]);
    let s = screen(&mut app, 80, 20);
    assert!(s.contains("┌─ kd · bundle ─"), "{s}");
    assert!(s.contains("┌─ kd · summary ─"), "{s}");
    assert!(s.contains("┌─ kd ─"), "{s}");
    assert!(!s.contains("· kd "), "kd named twice: {s}");
}

pub(super) fn enter_line(app: &mut App, text: &str) -> Vec<Effect> {
    typed(app, text);
    keys::on_key(app, key(KeyCode::Enter))
}

#[test]
fn archive_unarchive_and_a_delete_that_asks_first() {
    let mut t = thread();
    t.title = Some("Orders".into());
    t.last_seq = 3;
    let mut app = App::new(t.clone());
    app.load(t, &[]);
    assert_eq!(enter_line(&mut app, "/archive"), vec![Effect::Archive]);
    assert_eq!(enter_line(&mut app, "/unarchive"), vec![Effect::Unarchive]);
    assert_eq!(enter_line(&mut app, "/archive now"), vec![]);
    assert_eq!(app.notice.as_deref(), Some("/archive takes no argument"));
    keys::on_key(&mut app, KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));

    // /delete asks; anything but y keeps the thread, and the key does nothing else.
    assert_eq!(enter_line(&mut app, "/delete"), vec![]);
    let s = screen(&mut app, 100, 12);
    assert!(
        s.contains("Delete thread a8b3c1 (Orders) and its 3 messages? y deletes it, any other key keeps it"),
        "{s}"
    );
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Char('n'))), vec![]);
    assert_eq!(app.notice.as_deref(), Some("kept thread a8b3c1"));
    assert!(app.input.lines().concat().is_empty(), "the answer is not typed into the input");
    assert_eq!(enter_line(&mut app, "/delete"), vec![]);
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Esc)), vec![], "Esc keeps it too, and interrupts nothing");
    assert_eq!(enter_line(&mut app, "/delete"), vec![]);
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Char('y'))), vec![Effect::Delete]);

    // A thread not made yet has nothing to archive or delete.
    let mut fresh = App::new(thread());
    fresh.pending_new = Some(super::pending_thread("/repo", None, None).1);
    assert_eq!(enter_line(&mut fresh, "/delete"), vec![]);
    assert!(fresh.notice.as_deref().is_some_and(|n| n.contains("no message yet")), "{:?}", fresh.notice);
}

#[test]
fn after_a_delete_the_chat_offers_the_workspaces_threads() {
    let mut app = App::new(thread());
    let gone = Deleted { thread: THREAD.into(), messages: 3, cancelled_runs: 0 };
    let effects = super::on_reply(&mut app, super::Reply::Deleted(Ok(gone)));
    assert_eq!(effects, vec![Effect::NewThread, Effect::ListThreads]);
    assert_eq!(app.notice.as_deref(), Some("deleted thread a8b3c1 (3 messages)"));
    let mut archived = thread();
    archived.status = ThreadStatus::Archived;
    super::on_reply(&mut app, super::Reply::Archived(Ok(archived)));
    assert_eq!(app.thread.status, ThreadStatus::Archived);
    assert!(app.notice.as_deref().is_some_and(|n| n.contains("/unarchive")), "{:?}", app.notice);
}

pub(super) fn worktree(
    member: &str,
    state: kd_proto::work::WorkState,
    files: u32,
    added: u64,
    removed: u64,
) -> kd_proto::work::Worktree {
    kd_proto::work::Worktree {
        thread: THREAD.into(),
        member: member.into(),
        task: "Write x".into(),
        repo: "/repo".into(),
        path: format!("/data/worktrees/repo-{THREAD}/{member}"),
        branch: format!("kd/{THREAD}/{member}"),
        base: "b".repeat(40),
        head: if files == 0 { "b".repeat(40) } else { "c".repeat(40) },
        state,
        files,
        added,
        removed,
        removed_at_ms: None,
        created_at_ms: 0,
        last_run: None,
        check: None,
        until_green: 0,
        fixes: 0,
        shipped: None,
        uncommitted: None,
    }
}

/// A work thread: the King's task and two members' answers.
pub(super) fn at_work() -> App {
    let mut app = App::new(thread());
    app.load(
        thread(),
        &[
            message(1, "king", MessageKind::King, "Write x", None),
            answer(2, "claude", "Wrote x.", "r1", 1),
            answer(3, "codex", "Wrote x too.", "r2", 2),
        ],
    );
    app
}

#[test]
fn a_members_work_shows_its_diff_stat_under_its_latest_panel() {
    use kd_proto::work::WorkState;
    let mut app = at_work();
    app.apply(&ThreadEvent::Work { worktree: Box::new(worktree("claude", WorkState::Done, 3, 42, 7)) });
    app.apply(&ThreadEvent::Work { worktree: Box::new(worktree("codex", WorkState::Working, 0, 0, 0)) });
    insta::assert_snapshot!(screen(&mut app, 80, 20));
    // Kept current: the next event of a member replaces its line.
    app.apply(&ThreadEvent::Work { worktree: Box::new(worktree("claude", WorkState::Accepted, 1, 2, 0)) });
    let s = screen(&mut app, 80, 20);
    assert!(s.contains("└─ 1 file +2 −0 · accepted ─"), "{s}");
    assert!(!s.contains("3 files"), "{s}");
    // Another thread's work is not this one's.
    app.apply(&ThreadEvent::Work {
        worktree: Box::new(kd_proto::work::Worktree {
            thread: "other1".into(),
            ..worktree("cursor", WorkState::Done, 9, 9, 9)
        }),
    });
    assert!(!screen(&mut app, 80, 20).contains("9 files"));
    // A new run of the member (sent back to fix something) carries it now.
    app.apply(&ThreadEvent::RunWaiting { run: RunInfo { reply_to: Some(3), ..run_at("r3", "claude", 3) } });
    let with_new_run = &app.entries;
    let carriers: Vec<(String, Option<String>)> =
        with_new_run.iter().filter(|e| e.work.is_some()).map(|e| (e.member.clone(), e.run.clone())).collect();
    assert_eq!(carriers, vec![("codex".into(), Some("r2".into())), ("claude".into(), Some("r3".into()))]);
    // A chat opened later learns it from work.list.
    let mut later = at_work();
    later.set_work(vec![worktree("codex", WorkState::Done, 2, 5, 1)]);
    assert!(screen(&mut later, 80, 20).contains("└─ 2 files +5 −1 · done ─"));
    // Work whose last run kd could not commit says so.
    let uncommitted = Some("git add --all timed out after 120 s and was stopped".to_string());
    later.apply(&ThreadEvent::Work {
        worktree: Box::new(kd_proto::work::Worktree { uncommitted, ..worktree("codex", WorkState::Done, 2, 5, 1) }),
    });
    let s = screen(&mut later, 80, 20);
    assert!(s.contains("└─ 2 files +5 −1 · done · last run not committed ─"), "{s}");
}

fn member_diff() -> kd_proto::work::MemberDiff {
    let mut patch = String::from(
        "diff --git a/x.rs b/x.rs\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/x.rs\n@@ -0,0 +1,40 @@\n",
    );
    for i in 1..=40 {
        patch.push_str(&format!("+line {i}\n"));
    }
    patch.push_str("diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1,2 +1,2 @@\n one\n-two\n+2\x1b[31m\n");
    kd_proto::work::MemberDiff {
        member: "claude".into(),
        branch: format!("kd/{THREAD}/claude"),
        base: "b".repeat(40),
        head: "c".repeat(40),
        state: kd_proto::work::WorkState::Done,
        files: vec![
            kd_proto::work::FileStat { path: "x.rs".into(), added: 40, removed: 0, binary: false },
            kd_proto::work::FileStat { path: "a.txt".into(), added: 1, removed: 1, binary: false },
        ],
        patch: Some(patch),
        truncated: false,
        check: None,
        highlighted: None,
        commits: None,
    }
}

/// The colour of the first cell of the row that starts with `text`.
fn colour_of(terminal: &Terminal<TestBackend>, text: &str) -> ratatui::style::Color {
    let buffer = terminal.backend().buffer();
    let area = buffer.area;
    for y in 0..area.height {
        let row: String = (0..area.width).map(|x| buffer[(x, y)].symbol().to_string()).collect();
        if let Some(i) = row.find(text) {
            let x = row[..i].chars().count() as u16;
            return buffer[(x, y)].fg;
        }
    }
    panic!("no row with {text:?}");
}

#[test]
fn diff_opens_a_members_coloured_diff_that_scrolls_and_closes() {
    use kd_proto::work::WorkState;
    use ratatui::style::Color;
    let mut app = at_work();
    // Without work: a notice, nothing asked.
    typed(&mut app, "/diff claude");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![]);
    assert!(app.notice.as_deref().unwrap().starts_with("claude has no work on this thread"), "{:?}", app.notice);
    app.set_work(vec![worktree("claude", WorkState::Done, 2, 41, 1)]);
    typed(&mut app, "/diff");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![]);
    assert_eq!(app.notice.as_deref(), Some("work here: claude (2 files +41 −1 · done) · /diff MEMBER opens one"));
    typed(&mut app, "/diff @claude");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![Effect::Diff("claude".into())]);
    assert!(super::on_reply(&mut app, super::Reply::Diffed(Ok(vec![member_diff()]))).is_empty());
    let mut terminal = Terminal::new(TestBackend::new(60, 24)).unwrap();
    terminal.draw(|f| view::draw(f, &mut app)).unwrap();
    insta::assert_snapshot!("diff_view_top", format!("{}", terminal.backend()));
    assert_eq!(colour_of(&terminal, "diff --git a/x.rs"), Color::Reset);
    assert!(
        terminal
            .backend()
            .buffer()
            .content
            .iter()
            .any(|c| c.symbol() == "d" && c.modifier.contains(ratatui::style::Modifier::BOLD)),
        "file headers are bold"
    );
    assert_eq!(colour_of(&terminal, "@@ -0,0 +1,40 @@"), Color::Cyan);
    assert_eq!(colour_of(&terminal, "+line 1 "), Color::Green);
    // Scrolls a page, a line, to the end and back.
    keys::on_key(&mut app, key(KeyCode::PageDown));
    terminal.draw(|f| view::draw(f, &mut app)).unwrap();
    let s = format!("{}", terminal.backend());
    assert!(!s.contains("+line 1 ") && s.contains("+line 20 "), "{s}");
    keys::on_key(&mut app, key(KeyCode::End));
    terminal.draw(|f| view::draw(f, &mut app)).unwrap();
    insta::assert_snapshot!("diff_view_end", format!("{}", terminal.backend()));
    assert_eq!(colour_of(&terminal, "-two"), Color::Red);
    assert_eq!(colour_of(&terminal, "+2␛[31m"), Color::Green, "escape sequences are shown, not obeyed");
    keys::on_key(&mut app, key(KeyCode::Up));
    keys::on_key(&mut app, key(KeyCode::Home));
    terminal.draw(|f| view::draw(f, &mut app)).unwrap();
    assert!(format!("{}", terminal.backend()).contains("x.rs  +40 −0"));
    // q and Esc close it; Esc does not interrupt anything meanwhile.
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Char('q'))), vec![]);
    assert!(app.diff.is_none());
    assert!(super::on_reply(&mut app, super::Reply::Diffed(Ok(vec![member_diff()]))).is_empty());
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Esc)), vec![]);
    assert!(app.diff.is_none());
}

#[test]
fn work_accept_and_reject_are_asked_of_the_daemon_and_say_what_came_of_it() {
    use kd_proto::work::WorkState;
    let mut app = at_work();
    typed(&mut app, "/work --to claude,codex Write x");
    assert_eq!(
        keys::on_key(&mut app, key(KeyCode::Enter)),
        vec![Effect::Work { task: "Write x".into(), to: Some(vec!["claude".into(), "codex".into()]), vote: false }]
    );
    let started = kd_proto::work::WorkStarted {
        thread: "w0rk01".into(),
        title: "Write x".into(),
        seq: 1,
        worktrees: vec![
            worktree("claude", WorkState::Working, 0, 0, 0),
            worktree("codex", WorkState::Working, 0, 0, 0),
        ],
        runs: vec!["r7".into(), "r8".into()],
        vote: false,
    };
    // The chat opens the task's thread, and the members' runs are its own.
    assert_eq!(
        super::on_reply(&mut app, super::Reply::WorkStarted(Ok(Box::new(started)))),
        vec![Effect::Open("w0rk01".into())]
    );
    assert!(app.my_runs.contains("r7") && app.my_runs.contains("r8"));
    assert!(app.notice.as_deref().unwrap().contains("claude, codex at work"), "{:?}", app.notice);
    app.set_work(vec![worktree("claude", WorkState::Done, 1, 1, 0)]);
    typed(&mut app, "/accept --squash claude");
    assert_eq!(
        keys::on_key(&mut app, key(KeyCode::Enter)),
        vec![Effect::Accept { member: "claude".into(), squash: true }]
    );
    typed(&mut app, "/reject codex");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![]);
    assert!(app.notice.as_deref().unwrap().starts_with("codex has no work"), "{:?}", app.notice);
    typed(&mut app, "/comment codex a.txt:2 why?");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![]);
    assert!(app.notice.as_deref().unwrap().starts_with("codex has no work"), "{:?}", app.notice);
    typed(&mut app, "/comment claude a.txt:2-3 lower case, please");
    assert_eq!(
        keys::on_key(&mut app, key(KeyCode::Enter)),
        vec![Effect::Comment {
            member: "claude".into(),
            path: "a.txt".into(),
            lines: (2, 3),
            text: "lower case, please".into()
        }]
    );
    let comment = kd_proto::comment::Comment {
        id: "c1234567".into(),
        thread: "w0rk01".into(),
        member: "claude".into(),
        author: "king".into(),
        path: "a.txt".into(),
        line: 2,
        end_line: 3,
        commit: "h".into(),
        body: "lower case, please".into(),
        hunk: String::new(),
        state: kd_proto::comment::CommentState::Pending,
        created_at_ms: 0,
        sent_seq: None,
        sent_at_ms: None,
        resolved_by: None,
        resolved_at_ms: None,
    };
    super::on_reply(&mut app, super::Reply::Commented(Ok(comment)));
    assert_eq!(
        app.notice.as_deref(),
        Some("comment c1234567 on claude's a.txt:2-3 (pending: kd review --send claude sends it)")
    );
    typed(&mut app, "/reject claude");
    assert_eq!(keys::on_key(&mut app, key(KeyCode::Enter)), vec![Effect::Reject("claude".into())]);
    super::on_reply(&mut app, super::Reply::Rejected(Ok(worktree("claude", WorkState::Rejected, 1, 1, 0))));
    assert_eq!(app.notice.as_deref(), Some("rejected claude's work"));
    assert!(screen(&mut app, 80, 20).contains("· rejected"));
    let refused =
        kd_client::ClientError::from(jsonrpsee::core::client::Error::Call(jsonrpsee::types::ErrorObjectOwned::owned(
            1011,
            "the merge conflicts in a\x1b[2J.txt: nothing changed",
            None::<()>,
        )));
    super::on_reply(&mut app, super::Reply::Accepted(Err(refused)));
    assert!(app.notice.as_deref().unwrap().contains("the merge conflicts in a␛[2J.txt"), "{:?}", app.notice);
}

/// kdd restarted while claude streamed (issue 24): the chat opens the
/// thread again — r1 is now its interrupted message — and the daemon asks
/// claude again (r2 replaces that message). One panel, in r1's place,
/// streaming r2; nothing left of r1's streaming panel.
#[test]
fn reopened_after_a_restart_a_run_asked_again_streams_in_the_interrupted_ones_place() {
    let mut app = App::new(thread());
    app.on_sent(&Sent {
        message: message(1, "king", MessageKind::King, "Q?", None),
        members: vec!["claude".into(), "codex".into()],
        rounds: 1,
        mode: Mode::Broadcast,
        notice: None,
        runs: vec![
            SentRun { run: run_at("r1", "claude", 1), attached: false },
            SentRun { run: run_at("r3", "codex", 2), attached: false },
        ],
    });
    app.apply(&delta("r1", "claude", "Hal", 3));
    app.apply(&delta("r3", "codex", "Sure", 4));
    assert_eq!(app.kinds()[1..], [("claude".into(), Kind::Streaming), ("codex".into(), Kind::Streaming)]);

    // Reconnected: the thread as it stands, then the subscription's snapshot.
    let mut cut = message(2, "claude", MessageKind::Interrupted, "Hal", Some("r1"));
    cut.run.as_mut().unwrap().ordinal = Some(1);
    let mut done = answer(3, "codex", "Sure thing.", "r3", 2);
    done.reply_to = Some(1);
    app.load(thread(), &[message(1, "king", MessageKind::King, "Q?", None), cut, done]);
    let mut again = run_at("r2", "claude", 3);
    again.replaces = Some(2);
    again.status = RunStatus::Streaming;
    app.apply(&ThreadEvent::RunWaiting { run: again });
    app.apply(&delta("r2", "claude", "Hello", 5));
    assert_eq!(
        app.kinds(),
        [("king".into(), Kind::King), ("claude".into(), Kind::Streaming), ("codex".into(), Kind::Answer)],
        "one panel per member, the asked-again one in the interrupted one's place"
    );
    assert_eq!(app.entries[1].text, "Hello");
    assert_eq!(app.my_runs_in_flight(), 0, "the runs of before the restart are not waited for");
}

/// A run another member's emergency broadcast stopped reads so, not as
/// one you interrupted (its message keeps why: `run.stopped`).
#[test]
fn a_run_a_members_emergency_stopped_says_so_not_interrupted() {
    let mut app = App::new(thread());
    let mut stopped = message(2, "codex", MessageKind::Interrupted, "I was", Some("r1"));
    if let Some(run) = stopped.run.as_mut() {
        run.stopped = Some("stopped by a member's emergency broadcast".into());
    }
    app.load(thread(), &[message(1, "king", MessageKind::King, "Go", None), stopped]);
    let shown = screen(&mut app, 80, 12);
    assert!(shown.contains("codex · stopped by a member's emergency broadcast"), "{shown}");
    assert!(!shown.contains("interrupted"), "{shown}");
}
