//! Single keys from the terminal a command runs in, as they are pressed —
//! without Enter, without echo (`kd ask` and `kd work` answer an approval
//! with `y`, `n` or `a` so). Only when stdin is a terminal and the command
//! is in its foreground (a command in the background, or reading a pipe,
//! takes no keys); the terminal's settings are restored when [`Keys`] is
//! dropped. Output is unchanged meanwhile: only the line discipline's
//! canonical mode and echo are off, so `\n` still ends a line and Ctrl+C
//! still interrupts.

use std::io;
use std::os::fd::AsFd;

use crossterm::event::{Event, EventStream, KeyCode, KeyEventKind};
use futures_util::StreamExt;
use rustix::termios::{self, LocalModes, OptionalActions, Termios};

/// The terminal, taking keys; restored when dropped.
pub struct Keys {
    /// What is pressed, read by crossterm (cancel-safe: a key read and
    /// not taken waits in it).
    events: EventStream,
    saved: Termios,
}

impl Keys {
    /// Keys from stdin, or none when it is not a terminal this process
    /// may read: piped, or the command runs in the background.
    pub fn open() -> Option<Keys> {
        let stdin = io::stdin();
        let fd = stdin.as_fd();
        if !termios::isatty(fd) || termios::tcgetpgrp(fd).ok()? != rustix::process::getpgrp() {
            return None;
        }
        let saved = termios::tcgetattr(fd).ok()?;
        let mut keys = saved.clone();
        keys.local_modes.remove(LocalModes::ICANON | LocalModes::ECHO);
        termios::tcsetattr(fd, OptionalActions::Now, &keys).ok()?;
        Some(Keys { events: EventStream::new(), saved })
    }

    /// The next character key pressed; none once the terminal cannot be
    /// read.
    pub async fn next(&mut self) -> Option<char> {
        loop {
            match self.events.next().await? {
                Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => {
                    if let KeyCode::Char(c) = k.code {
                        return Some(c);
                    }
                }
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }
}

impl Drop for Keys {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(io::stdin(), OptionalActions::Now, &self.saved);
    }
}
