//! Standard output for what streams in (`kd ask`, `kd watch`): held while
//! events come at once, written when kd is about to wait for more. Three
//! answers that arrive together are one write, one wake of whoever reads
//! kd (a pager, a script, the terminal), not one per line (issue 31, item
//! 17); an answer streaming in still shows each piece as it comes, since
//! kd writes before it waits.

use std::io::{self, Write};

/// Held output past this is written at once, waiting or not.
const LIMIT: usize = 64 * 1024;

/// A writer that holds what it is given until [`Burst::flush`] (or
/// [`LIMIT`] bytes). The follower's loop flushes it whenever the next
/// event is not there yet; what it holds when dropped is written then.
pub struct Burst<W: Write> {
    inner: W,
    held: Vec<u8>,
}

impl<W: Write> Burst<W> {
    pub fn new(inner: W) -> Self {
        Burst { inner, held: Vec::new() }
    }

    /// Whether something waits to be written.
    pub fn holds(&self) -> bool {
        !self.held.is_empty()
    }
}

impl<W: Write> Write for Burst<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.held.extend_from_slice(buf);
        if self.held.len() >= LIMIT {
            self.flush()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.held.is_empty() {
            let written = self.inner.write_all(&self.held);
            self.held.clear();
            written?;
        }
        self.inner.flush()
    }
}

impl<W: Write> Drop for Burst<W> {
    /// A command that stops on an error still shows what it had.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the writes that reach it.
    #[derive(Default)]
    struct Counted {
        writes: usize,
        bytes: Vec<u8>,
    }

    impl Write for &mut Counted {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.writes += 1;
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn what_comes_at_once_is_one_write_when_kd_would_wait() {
        let mut seen = Counted::default();
        {
            let mut out = Burst::new(&mut seen);
            writeln!(out, "── gemini ──").unwrap();
            write!(out, "Answer from gemini.").unwrap();
            writeln!(out).unwrap();
            assert!(out.holds());
            out.flush().unwrap();
            assert!(!out.holds());
            out.flush().unwrap();
        }
        assert_eq!(seen.writes, 1, "one write for the burst, none for an empty flush");
        assert_eq!(seen.bytes, b"\xe2\x94\x80\xe2\x94\x80 gemini \xe2\x94\x80\xe2\x94\x80\nAnswer from gemini.\n");
    }

    #[test]
    fn what_is_held_is_written_when_dropped_or_past_the_limit() {
        let mut seen = Counted::default();
        {
            let mut out = Burst::new(&mut seen);
            out.write_all(&vec![b'a'; LIMIT]).unwrap();
            assert!(!out.holds(), "written at the limit");
            write!(out, "tail").unwrap();
        }
        assert_eq!(seen.writes, 2);
        assert!(seen.bytes.ends_with(b"atail"));
    }
}
