//! Reading an agent's stdout with bounded memory. Line mode: a line over
//! the bound is dropped (and reported) without being held, a line that is
//! not UTF-8 is reported, and reading goes on after both. Raw mode (plain
//! text agents): every chunk read is text as it arrives, with UTF-8
//! sequences split across reads put back together.

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::bytes::BytesMut;
use tokio_util::codec::{Decoder, LinesCodec, LinesCodecError};

/// Reads `stream` to its end in a task, keeping its last `keep` bytes
/// (an agent's stderr, to say why it failed).
pub fn tail<R>(mut stream: R, keep: usize) -> tokio::task::JoinHandle<String>
where
    R: AsyncRead + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut tail = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n) = stream.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            tail.extend_from_slice(&chunk[..n]);
            if tail.len() > keep {
                tail.drain(..tail.len() - keep);
            }
        }
        String::from_utf8_lossy(&tail).into_owned()
    })
}

/// The longest line kept: 8 MiB.
pub const MAX_LINE: usize = 8 * 1024 * 1024;

/// One line of output.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Text(String),
    /// A line that is not UTF-8.
    NotUtf8,
    /// A line longer than the bound; its bytes were discarded.
    TooLong,
    /// Raw mode: text as read (invalid bytes replaced).
    Chunk(String),
}

pub struct LineReader<R> {
    inner: R,
    buf: BytesMut,
    codec: LinesCodec,
    eof: bool,
    raw: bool,
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    pub fn new(inner: R) -> LineReader<R> {
        LineReader::with_max(inner, MAX_LINE)
    }

    pub fn with_max(inner: R, max: usize) -> LineReader<R> {
        LineReader {
            inner,
            buf: BytesMut::with_capacity(64 * 1024),
            codec: LinesCodec::new_with_max_length(max),
            eof: false,
            raw: false,
        }
    }

    /// A reader in raw mode.
    pub fn raw(inner: R) -> LineReader<R> {
        LineReader { raw: true, ..LineReader::new(inner) }
    }

    /// The next line, or `None` at the end of the stream. Cancel-safe: a
    /// partly read line stays in the buffer.
    pub async fn next(&mut self) -> std::io::Result<Option<Line>> {
        if self.raw {
            return self.next_chunk().await;
        }
        loop {
            let decoded =
                if self.eof { self.codec.decode_eof(&mut self.buf) } else { self.codec.decode(&mut self.buf) };
            match decoded {
                Ok(Some(line)) => return Ok(Some(Line::Text(line))),
                Err(LinesCodecError::MaxLineLengthExceeded) => return Ok(Some(Line::TooLong)),
                // The codec consumed the line before checking it.
                Err(LinesCodecError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                    return Ok(Some(Line::NotUtf8));
                }
                Err(LinesCodecError::Io(e)) => return Err(e),
                Ok(None) if self.eof => return Ok(None),
                Ok(None) => {}
            }
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                self.eof = true;
            }
        }
    }
}

impl<R: AsyncRead + Unpin> LineReader<R> {
    /// The next line already in the buffer, without reading: lets a caller
    /// handle everything one read brought before publishing.
    pub fn next_buffered(&mut self) -> Option<Line> {
        if self.raw || self.eof {
            return None;
        }
        match self.codec.decode(&mut self.buf) {
            Ok(Some(line)) => Some(Line::Text(line)),
            Err(LinesCodecError::MaxLineLengthExceeded) => Some(Line::TooLong),
            Err(LinesCodecError::Io(e)) if e.kind() == std::io::ErrorKind::InvalidData => Some(Line::NotUtf8),
            _ => None,
        }
    }

    async fn next_chunk(&mut self) -> std::io::Result<Option<Line>> {
        loop {
            let keep = match std::str::from_utf8(&self.buf) {
                Ok(_) => 0,
                // An incomplete sequence at the end waits for its last bytes.
                Err(e) if e.error_len().is_none() && !self.eof => self.buf.len() - e.valid_up_to(),
                Err(_) => 0,
            };
            if self.buf.len() > keep {
                let take = self.buf.split_to(self.buf.len() - keep);
                return Ok(Some(Line::Chunk(String::from_utf8_lossy(&take).into_owned())));
            }
            if self.eof {
                return Ok(None);
            }
            if self.inner.read_buf(&mut self.buf).await? == 0 {
                self.eof = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn read_all(input: &[u8], max: usize) -> Vec<Line> {
        let mut r = LineReader::with_max(input, max);
        let mut out = Vec::new();
        while let Some(l) = r.next().await.unwrap() {
            out.push(l);
        }
        out
    }

    #[tokio::test]
    async fn lines_crlf_and_a_last_line_without_newline() {
        let lines = read_all(b"one\r\ntwo\nthree", 100).await;
        assert_eq!(lines, vec![Line::Text("one".into()), Line::Text("two".into()), Line::Text("three".into())]);
    }

    #[tokio::test]
    async fn non_utf8_and_overlong_lines_are_reported_and_reading_goes_on() {
        let mut input = b"ok\n\xff\xfe bad\n".to_vec();
        input.extend(std::iter::repeat_n(b'x', 1000));
        input.extend(b"\nafter\n");
        let lines = read_all(&input, 100).await;
        assert_eq!(lines, vec![Line::Text("ok".into()), Line::NotUtf8, Line::TooLong, Line::Text("after".into())]);
    }

    #[tokio::test]
    async fn buffered_lines_are_taken_without_reading() {
        let mut r = LineReader::with_max(&b"a\nb\nc"[..], 100);
        assert_eq!(r.next().await.unwrap(), Some(Line::Text("a".into())));
        assert_eq!(r.next_buffered(), Some(Line::Text("b".into())));
        assert_eq!(r.next_buffered(), None, "an incomplete line waits for a read");
        assert_eq!(r.next().await.unwrap(), Some(Line::Text("c".into())));
    }

    #[tokio::test]
    async fn raw_mode_returns_chunks_and_mends_split_characters() {
        let (mut tx, rx) = tokio::io::duplex(1024);
        let mut r = LineReader::raw(rx);
        use tokio::io::AsyncWriteExt;
        tx.write_all(b"caf\xc3").await.unwrap();
        assert_eq!(r.next().await.unwrap(), Some(Line::Chunk("caf".into())));
        tx.write_all(b"\xa9 ok\xff").await.unwrap();
        drop(tx);
        assert_eq!(r.next().await.unwrap(), Some(Line::Chunk("é ok\u{fffd}".into())));
        assert_eq!(r.next().await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_huge_line_is_not_held_in_memory() {
        // 64 MiB through a 1 KiB bound: the buffer never grows past a read.
        let (mut tx, rx) = tokio::io::duplex(64 * 1024);
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let chunk = vec![b'y'; 1024 * 1024];
            for _ in 0..64 {
                tx.write_all(&chunk).await.unwrap();
            }
            tx.write_all(b"\nend\n").await.unwrap();
        });
        let mut r = LineReader::with_max(rx, 1024);
        assert_eq!(r.next().await.unwrap(), Some(Line::TooLong));
        assert!(r.buf.capacity() < 4 * 1024 * 1024, "buffer grew to {}", r.buf.capacity());
        assert_eq!(r.next().await.unwrap(), Some(Line::Text("end".into())));
        writer.await.unwrap();
    }
}
