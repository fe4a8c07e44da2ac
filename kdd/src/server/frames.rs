//! The WebSocket side of [`super::ids`]: a filter on a connection's bytes.
//!
//! jsonrpsee reads WebSocket messages itself, so ids it cannot take are
//! fixed below it. Once the server has answered `101 Switching Protocols`,
//! the filter reads each of the client's frames whole (up to the request
//! limit) and gives unusable ids their stand-ins; while answers to such
//! requests are due, it holds each of the server's data frames whole and
//! puts the original ids back. Everything else — plain HTTP before an
//! upgrade, control and fragmented frames, frames past the limit, and every
//! server frame while nothing is due — passes through unchanged, without a
//! copy on the server's side. The filter also keeps the connection's
//! [`Activity`] for the idle watch.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::idle::Activity;
use super::ids;

/// A connection's stream with the id filter in both directions.
pub struct Filtered<S> {
    inner: S,
    /// Set once the server's `101 Switching Protocols` went out.
    upgraded: bool,
    /// Bytes of the 101 response still to go out before frames start.
    head_left: usize,
    /// Answers due under a stand-in id.
    due: usize,
    /// Largest client frame read whole (the request limit).
    limit: usize,
    read: Incoming,
    write: Outgoing,
    activity: Arc<Activity>,
}

/// Client to server.
#[derive(Default)]
struct Incoming {
    /// Read from the socket, not yet looked at.
    raw: Vec<u8>,
    /// Looked at, not yet handed to the reader.
    ready: Vec<u8>,
    ready_at: usize,
    /// Bytes of the current frame to pass through unread.
    pass: u64,
    eof: bool,
}

/// Server to client.
#[derive(Default)]
struct Outgoing {
    /// Accepted from the writer, not yet written to the socket.
    out: Vec<u8>,
    out_at: usize,
    /// The header of the next frame, while it is incomplete.
    head: Vec<u8>,
    /// Bytes of the current frame to pass through.
    pass: u64,
    /// A whole frame being gathered to put ids back in: its header length
    /// and its bytes so far, and how many bytes it has in all.
    hold: Option<(usize, Vec<u8>, usize)>,
}

/// A frame header: its length, and the frame's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    fin: bool,
    /// Reserved bits (set by extensions such as compression).
    rsv: u8,
    opcode: u8,
    mask: Option<[u8; 4]>,
    len: u64,
    head_len: usize,
}

impl Header {
    /// The header at the start of `b`, or `None` while it is incomplete.
    fn parse(b: &[u8]) -> Option<Header> {
        let (b0, b1) = (*b.first()?, *b.get(1)?);
        let (len, mut at) = match b1 & 0x7f {
            126 => (u64::from(u16::from_be_bytes([*b.get(2)?, *b.get(3)?])), 4),
            127 => (u64::from_be_bytes(b.get(2..10)?.try_into().ok()?), 10),
            n => (u64::from(n), 2),
        };
        let mask = if b1 & 0x80 != 0 {
            let key: [u8; 4] = b.get(at..at + 4)?.try_into().ok()?;
            at += 4;
            Some(key)
        } else {
            None
        };
        Some(Header { fin: b0 & 0x80 != 0, rsv: b0 & 0x70, opcode: b0 & 0x0f, mask, len, head_len: at })
    }

    /// A whole text or binary message, the only frames ids are looked for in.
    fn is_whole_message(&self) -> bool {
        self.fin && self.rsv == 0 && (self.opcode == 1 || self.opcode == 2)
    }

    /// The frame's header bytes with another payload length.
    fn encode(&self, len: usize) -> Vec<u8> {
        let mut h = vec![(u8::from(self.fin) << 7) | self.rsv | self.opcode];
        let m = if self.mask.is_some() { 0x80 } else { 0 };
        match len {
            n if n < 126 => h.push(m | n as u8),
            n if n <= usize::from(u16::MAX) => {
                h.push(m | 126);
                h.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                h.push(m | 127);
                h.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        if let Some(key) = self.mask {
            h.extend_from_slice(&key);
        }
        h
    }
}

/// Masks or unmasks `payload` in place.
fn apply_mask(payload: &mut [u8], key: [u8; 4]) {
    for (i, b) in payload.iter_mut().enumerate() {
        *b ^= key[i % 4];
    }
}

/// The frame (`header` + `payload`, masked as the header says) with
/// `rewrite` applied to its unmasked payload; `None` when it changed nothing.
fn rewrite_frame(
    header: &Header,
    frame: &[u8],
    rewrite: impl Fn(&[u8]) -> Option<(Vec<u8>, usize)>,
) -> Option<(Vec<u8>, usize)> {
    let mut payload = frame[header.head_len..].to_vec();
    if let Some(key) = header.mask {
        apply_mask(&mut payload, key);
    }
    let (mut new, n) = rewrite(&payload)?;
    let mut out = header.encode(new.len());
    if let Some(key) = header.mask {
        apply_mask(&mut new, key);
    }
    out.extend_from_slice(&new);
    Some((out, n))
}

impl<S> Filtered<S> {
    /// Filters `inner`; client frames up to `limit` bytes are read whole.
    pub fn new(inner: S, limit: usize) -> Filtered<S> {
        Filtered {
            inner,
            upgraded: false,
            head_left: 0,
            due: 0,
            limit,
            read: Incoming::default(),
            write: Outgoing::default(),
            activity: Arc::new(Activity::new()),
        }
    }

    /// What the connection's bytes did last.
    pub fn activity(&self) -> Arc<Activity> {
        self.activity.clone()
    }

    /// Moves what can be decided from `raw` to `ready`; false when more
    /// bytes are needed.
    fn take_incoming(&mut self) -> bool {
        let r = &mut self.read;
        if r.pass > 0 {
            let n = usize::try_from(r.pass).unwrap_or(usize::MAX).min(r.raw.len());
            r.ready.extend(r.raw.drain(..n));
            r.pass -= n as u64;
            return n > 0;
        }
        let Some(h) = Header::parse(&r.raw) else {
            if r.eof && !r.raw.is_empty() {
                r.ready.append(&mut r.raw);
                return true;
            }
            return false;
        };
        let whole = h.is_whole_message() && h.len <= self.limit as u64;
        if !whole {
            r.ready.extend(r.raw.drain(..h.head_len));
            r.pass = h.len;
            return true;
        }
        let end = h.head_len + h.len as usize;
        if r.raw.len() < end {
            if r.eof {
                r.ready.append(&mut r.raw);
                return true;
            }
            return false;
        }
        match rewrite_frame(&h, &r.raw[..end], ids::fix_request) {
            Some((frame, n)) => {
                self.due += n;
                r.ready.extend_from_slice(&frame);
                r.raw.drain(..end);
            }
            None => r.ready.extend(r.raw.drain(..end)),
        }
        true
    }

    /// Whether `written`, the first bytes of a server write before the
    /// upgrade, is the `101 Switching Protocols` answer: then frames follow
    /// its head.
    fn watch_for_upgrade(&mut self, buf: &[u8], written: usize) {
        if self.upgraded || !buf.starts_with(b"HTTP/1.1 101 ") {
            return;
        }
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            self.upgraded = true;
            self.activity.set_upgraded();
            self.head_left = (end + 4).saturating_sub(written);
        }
    }

    /// Takes bytes of a server write at a frame boundary or into a held
    /// frame; returns how many.
    fn take_outgoing(&mut self, buf: &[u8]) -> usize {
        let w = &mut self.write;
        if let Some((head_len, frame, total)) = &mut w.hold {
            let n = (*total - frame.len()).min(buf.len());
            frame.extend_from_slice(&buf[..n]);
            if frame.len() == *total {
                let h = Header::parse(frame);
                let rewritten =
                    h.filter(|h| h.head_len == *head_len).and_then(|h| rewrite_frame(&h, frame, ids::restore_response));
                match rewritten {
                    Some((new, restored)) => {
                        self.due = self.due.saturating_sub(restored);
                        w.out.extend_from_slice(&new);
                    }
                    None => w.out.extend_from_slice(frame),
                }
                w.hold = None;
            }
            return n;
        }
        // A header, possibly over several writes.
        let before = w.head.len();
        w.head.extend_from_slice(&buf[..buf.len().min(14)]);
        let Some(h) = Header::parse(&w.head) else {
            return w.head.len() - before;
        };
        let taken = h.head_len - before;
        w.head.truncate(h.head_len);
        let total = h.head_len.saturating_add(usize::try_from(h.len).unwrap_or(usize::MAX));
        if self.due > 0 && h.is_whole_message() {
            let mut frame = std::mem::take(&mut w.head);
            frame.reserve(total - frame.len());
            w.hold = Some((h.head_len, frame, total));
            if frame_complete(&w.hold) {
                // An empty payload: nothing to put back.
                if let Some((_, frame, _)) = w.hold.take() {
                    w.out.extend_from_slice(&frame);
                }
            }
        } else {
            w.out.append(&mut w.head);
            w.pass = h.len;
        }
        taken
    }

    fn poll_flush_out(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>>
    where
        S: AsyncWrite + Unpin,
    {
        let w = &mut self.write;
        while w.out_at < w.out.len() {
            let n = ready!(watched(Pin::new(&mut self.inner).poll_write(cx, &w.out[w.out_at..]), &self.activity))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            w.out_at += n;
        }
        w.out.clear();
        w.out_at = 0;
        Poll::Ready(Ok(()))
    }
}

/// A write to the socket, noted in `activity`: waiting for the peer to
/// read, or bytes gone out.
fn watched(poll: Poll<io::Result<usize>>, activity: &Activity) -> Poll<io::Result<usize>> {
    match &poll {
        Poll::Pending => activity.write_blocked(),
        Poll::Ready(Ok(n)) if *n > 0 => activity.wrote(),
        Poll::Ready(_) => {}
    }
    poll
}

fn frame_complete(hold: &Option<(usize, Vec<u8>, usize)>) -> bool {
    hold.as_ref().is_some_and(|(_, frame, total)| frame.len() == *total)
}

impl<S: AsyncRead + Unpin> AsyncRead for Filtered<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            let r = &mut this.read;
            if r.ready_at < r.ready.len() {
                let n = (r.ready.len() - r.ready_at).min(buf.remaining());
                buf.put_slice(&r.ready[r.ready_at..r.ready_at + n]);
                r.ready_at += n;
                if r.ready_at == r.ready.len() {
                    r.ready.clear();
                    r.ready_at = 0;
                }
                return Poll::Ready(Ok(()));
            }
            if !this.upgraded && r.raw.is_empty() {
                let before = buf.filled().len();
                let read = Pin::new(&mut this.inner).poll_read(cx, buf);
                if buf.filled().len() > before {
                    this.activity.touch();
                }
                return read;
            }
            if this.take_incoming() {
                continue;
            }
            if this.read.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 16 * 1024];
            let mut into = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut into))?;
            if into.filled().is_empty() {
                this.read.eof = true;
            } else {
                this.activity.touch();
            }
            this.read.raw.extend_from_slice(into.filled());
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Filtered<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        ready!(this.poll_flush_out(cx))?;
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        // A frame whose header is whole in `buf` and that need not be held
        // goes straight through, header and payload in one write.
        let w = &mut this.write;
        if this.upgraded
            && this.head_left == 0
            && w.pass == 0
            && w.hold.is_none()
            && w.head.is_empty()
            && let Some(h) = Header::parse(buf).filter(|h| !(this.due > 0 && h.is_whole_message()))
        {
            w.pass = h.head_len as u64 + h.len;
        }
        // Straight through: before the upgrade, the rest of the 101
        // response, and the bytes of a frame not held.
        let direct = if !this.upgraded {
            Some(buf.len())
        } else if this.head_left > 0 {
            Some(this.head_left.min(buf.len()))
        } else if this.write.pass > 0 && this.write.hold.is_none() {
            Some(usize::try_from(this.write.pass).unwrap_or(usize::MAX).min(buf.len()))
        } else {
            None
        };
        if let Some(k) = direct {
            let n = ready!(watched(Pin::new(&mut this.inner).poll_write(cx, &buf[..k]), &this.activity))?;
            if !this.upgraded {
                this.watch_for_upgrade(buf, n);
            } else if this.head_left > 0 {
                this.head_left -= n;
            } else {
                this.write.pass -= n as u64;
            }
            return Poll::Ready(Ok(n));
        }
        let n = this.take_outgoing(buf);
        // Start writing what was taken; the rest goes on the next write or flush.
        if let Poll::Ready(Err(e)) = this.poll_flush_out(cx) {
            return Poll::Ready(Err(e));
        }
        Poll::Ready(Ok(n))
    }

    /// Before the upgrade, gathered pieces go to the socket as they are
    /// (hyper writes an answer's head and body so, instead of copying the
    /// body into its own buffer); after it, frames are looked at one piece
    /// at a time.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let first = bufs.iter().find(|b| !b.is_empty()).map_or(&[][..], |b| &**b);
        if self.upgraded {
            return self.poll_write(cx, first);
        }
        let this = &mut *self;
        ready!(this.poll_flush_out(cx))?;
        let n = ready!(watched(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs), &this.activity))?;
        this.watch_for_upgrade(first, n);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_flush_out(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.poll_flush_out(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn frame(payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
        let h = Header { fin: true, rsv: 0, opcode: 1, mask, len: 0, head_len: 0 };
        let mut out = h.encode(payload.len());
        let mut p = payload.to_vec();
        if let Some(k) = mask {
            apply_mask(&mut p, k);
        }
        out.extend_from_slice(&p);
        out
    }

    fn payload_of(bytes: &[u8]) -> (Vec<u8>, usize) {
        let h = Header::parse(bytes).unwrap_or_else(|| panic!("no header in {bytes:?}"));
        let end = h.head_len + h.len as usize;
        let mut p = bytes[h.head_len..end].to_vec();
        if let Some(k) = h.mask {
            apply_mask(&mut p, k);
        }
        (p, end)
    }

    const UPGRADED: &[u8] = b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n\r\n";

    #[test]
    fn headers_of_every_length_round_trip() {
        for len in [0usize, 125, 126, 65535, 65536, 1 << 20] {
            for mask in [None, Some([1, 2, 3, 4])] {
                let f = frame(&vec![b'a'; len], mask);
                let h = Header::parse(&f).unwrap();
                assert_eq!((h.len as usize, h.mask, h.fin, h.opcode), (len, mask, true, 1));
                assert_eq!(Header::parse(&f[..h.head_len - 1]), None, "incomplete");
            }
        }
    }

    #[tokio::test]
    async fn ids_are_carried_in_and_put_back_out_byte_by_byte_or_whole() {
        let (kdd_side, mut client) = tokio::io::duplex(4096);
        let mut f = Filtered::new(kdd_side, 1 << 20);
        // Plain HTTP passes untouched until the upgrade.
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").await.unwrap();
        let mut head = [0u8; 18];
        f.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"GET / HTTP/1.1\r\n\r\n");
        f.write_all(UPGRADED).await.unwrap();
        f.flush().await.unwrap();
        let mut got = vec![0u8; UPGRADED.len()];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(got, UPGRADED);
        // A client frame with a negative id comes out with its stand-in.
        let request = br#"{"jsonrpc":"2.0","id":-1,"method":"daemon.hello"}"#;
        let sent = frame(request, Some([9, 8, 7, 6]));
        let writer = tokio::spawn(async move {
            for b in sent {
                client.write_all(&[b]).await.unwrap();
            }
            client
        });
        let mut inbound = Vec::new();
        while Header::parse(&inbound).is_none_or(|h| inbound.len() < h.head_len + h.len as usize) {
            let mut b = [0u8; 1];
            f.read_exact(&mut b).await.unwrap();
            inbound.push(b[0]);
        }
        let mut client = writer.await.unwrap();
        let (p, _) = payload_of(&inbound);
        let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
        let stand_in = v["id"].as_str().unwrap().to_string();
        assert!(stand_in.starts_with(ids::CARRIED));
        // A notification first (not held back for long), then the answer, written in pieces.
        let note = frame(br#"{"jsonrpc":"2.0","method":"thread.event","params":{}}"#, None);
        let answer = serde_json::json!({"jsonrpc": "2.0", "id": stand_in, "result": 1}).to_string();
        let answer = frame(answer.as_bytes(), None);
        let mut all = note.clone();
        all.extend_from_slice(&answer);
        for piece in all.chunks(5) {
            f.write_all(piece).await.unwrap();
        }
        f.flush().await.unwrap();
        let mut first = vec![0u8; note.len()];
        client.read_exact(&mut first).await.unwrap();
        assert_eq!(first, note);
        let mut rest = vec![0u8; 2];
        client.read_exact(&mut rest).await.unwrap();
        let h = Header::parse(&rest).unwrap();
        let mut body = vec![0u8; h.len as usize];
        client.read_exact(&mut body).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body, serde_json::json!({"id": -1, "jsonrpc": "2.0", "result": 1}));
        assert_eq!(f.due, 0);
    }

    /// Plain HTTP goes out gathered (hyper then writes a long answer's
    /// body from where it lies, without copying it into its buffer), and a
    /// 101 written so still starts the frames.
    #[tokio::test]
    async fn plain_http_is_written_gathered_and_a_101_so_written_still_upgrades() {
        let (kdd_side, mut client) = tokio::net::UnixStream::pair().unwrap();
        let mut f = Filtered::new(kdd_side, 1 << 20);
        assert!(f.is_write_vectored());
        let (head, body) = (&b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n"[..], &b"hello"[..]);
        let n = f.write_vectored(&[io::IoSlice::new(head), io::IoSlice::new(body)]).await.unwrap();
        assert_eq!(n, head.len() + body.len(), "both pieces in one write");
        let mut got = vec![0u8; n];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(got, [head, body].concat());
        assert!(!f.upgraded);
        let n = f.write_vectored(&[io::IoSlice::new(&[]), io::IoSlice::new(UPGRADED)]).await.unwrap();
        assert_eq!(n, UPGRADED.len());
        assert!(f.upgraded && f.head_left == 0, "frames follow the 101");
        let mut got = vec![0u8; n];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(got, UPGRADED);
        // Frames are looked at as before: one whole frame, gathered or not.
        let note = frame(br#"{"jsonrpc":"2.0","method":"thread.event","params":{}}"#, None);
        let (a, b) = note.split_at(3);
        let mut sent = 0;
        while sent < note.len() {
            let at = sent.min(a.len());
            let pieces = [io::IoSlice::new(&a[at..]), io::IoSlice::new(&b[sent.saturating_sub(a.len())..])];
            sent += f.write_vectored(&pieces).await.unwrap();
        }
        f.flush().await.unwrap();
        let mut got = vec![0u8; note.len()];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(got, note);
    }

    #[tokio::test]
    async fn frames_past_the_limit_and_control_frames_pass_unread() {
        let (kdd_side, mut client) = tokio::io::duplex(1 << 16);
        let mut f = Filtered::new(kdd_side, 16);
        f.write_all(UPGRADED).await.unwrap();
        f.flush().await.unwrap();
        let mut skip = vec![0u8; UPGRADED.len()];
        client.read_exact(&mut skip).await.unwrap();
        let big = frame(br#"{"jsonrpc":"2.0","id":-1,"method":"daemon.hello"}"#, Some([1, 1, 1, 1]));
        let ping = [0x89u8, 0x80, 0, 0, 0, 0];
        client.write_all(&big).await.unwrap();
        client.write_all(&ping).await.unwrap();
        let mut got = vec![0u8; big.len() + ping.len()];
        f.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[..big.len()], &big[..], "too long to read whole: as it came");
        assert_eq!(&got[big.len()..], &ping);
    }
}
