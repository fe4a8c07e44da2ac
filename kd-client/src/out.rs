//! Writing to stdout and stderr without ever panicking: `println!` panics
//! when the reader of a pipe has gone (`kd show | head`). [`outln!`] and
//! [`out!`] return the `io::Result` so a command stops at the first failed
//! write, and `main` ends quietly when that failure is a broken pipe, like
//! git. [`errln!`] drops what cannot be written to stderr.

/// `println!` to stdout that returns `io::Result<()>`.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($t)*)
    }};
}

/// `print!` to stdout that returns `io::Result<()>`.
macro_rules! out {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($t)*)
    }};
}

/// [`outln!`] of a line kd does not style, made safe for the terminal
/// (it quotes paths, files or what the daemon said).
macro_rules! plainln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let line = format!($($t)*);
        writeln!(std::io::stdout().lock(), "{}", kd_client::terminal::safe(&line))
    }};
}

/// `eprintln!` that never panics: a closed stderr loses the line. What it
/// says is made safe for the terminal (errors quote agents and files).
macro_rules! errln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let line = format!($($t)*);
        let _ = writeln!(std::io::stderr().lock(), "{}", kd_client::terminal::safe(&line));
    }};
}

/// Whether `e` is, or was caused by, writing to a pipe whose reader left.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe))
}
