//! [`super::Allocator`] on Linux: buffers of [`HUGE`] or more are
//! mappings of their own, in huge pages; a freed one waits a moment for
//! the next ([`Cache`]). What and why: [`super`].

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Allocator, CACHED, CACHED_BYTES, HUGE, KEPT_UP_TO};

/// A page: what a mapping's start is aligned to.
const PAGE: usize = 4096;

fn ours(layout: Layout) -> bool {
    layout.size() >= HUGE && layout.align() <= PAGE
}

/// The length mapped for `size`: whole huge pages, which also lets the
/// kernel place the mapping on a huge page's boundary.
fn length(size: usize) -> usize {
    size.div_ceil(HUGE).saturating_mul(HUGE)
}

#[allow(unsafe_code)]
fn map(size: usize) -> *mut u8 {
    let len = length(size);
    // SAFETY: a new anonymous private mapping, which nothing else refers to.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    // SAFETY: advice on the mapping just made; refused (no transparent
    // huge pages), it changes nothing.
    unsafe { libc::madvise(p, len, libc::MADV_HUGEPAGE) };
    p.cast()
}

#[allow(unsafe_code)]
fn unmap(p: *mut u8, len: usize) {
    // SAFETY: a mapping `map` made (or `mremap` resized) of `len`,
    // which nothing refers to any more.
    unsafe { libc::munmap(p.cast(), len) };
}

/// A freed mapping waiting for the next large buffer.
#[derive(Clone, Copy)]
struct Kept {
    at: usize,
    len: usize,
    since: Instant,
}

/// How many buffers at once may hold a mapping longer than their size
/// asks for (a waiting one taken whole, or one not cut when its buffer
/// shrank); past that, a mapping is cut to the size.
const LONGER: usize = 16;

struct State {
    /// The freed mappings waiting ([`super::KEEP`]).
    kept: [Option<Kept>; CACHED],
    /// The buffers whose mapping is longer than their size asks for:
    /// where, and the mapping's length.
    longer: [Option<(usize, usize)>; LONGER],
}

/// kdd's large buffers: the freed mappings waiting for the next, and
/// the live ones longer than their size says.
pub(super) struct Cache(Mutex<State>);

pub(super) static CACHE: Cache = Cache::new();

impl Cache {
    const fn new() -> Cache {
        Cache(Mutex::new(State { kept: [None; CACHED], longer: [None; LONGER] }))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A mapping of `len` or more for a new buffer: the waiting one that
    /// fits best (the shortest that is long enough, taken whole; else
    /// the longest, grown to `len`), or none.
    fn take(&self, len: usize) -> Option<*mut u8> {
        let kept = {
            let mut st = self.state();
            let long_enough = (0..CACHED)
                .filter(|i| st.kept[*i].is_some_and(|k| k.len >= len))
                .min_by_key(|i| st.kept[*i].map(|k| k.len));
            let longest = || (0..CACHED).filter(|i| st.kept[*i].is_some()).max_by_key(|i| st.kept[*i].map(|k| k.len));
            let best = long_enough.or_else(longest)?;
            let kept = st.kept[best].take()?;
            if kept.len > len
                && let Some(free) = st.longer.iter_mut().find(|s| s.is_none())
            {
                *free = Some((kept.at, kept.len));
                return Some(kept.at as *mut u8);
            }
            kept
        };
        let p = kept.at as *mut u8;
        if kept.len == len {
            return Some(p);
        }
        let resized = resize(p, kept.len, len);
        if resized.is_none() {
            unmap(p, kept.len);
        }
        resized
    }

    /// The length of the mapping of the buffer at `p`, whose size asks
    /// for `len`; forgotten when `forget` (the buffer is freed or moved).
    fn length_of(&self, p: *mut u8, len: usize, forget: bool) -> usize {
        let mut st = self.state();
        let Some(slot) = st.longer.iter_mut().find(|s| s.is_some_and(|(at, _)| at == p as usize)) else {
            return len;
        };
        let real = slot.map_or(len, |(_, real)| real);
        if forget {
            *slot = None;
        }
        real
    }

    /// The length of the mapping of the buffer at `p`, when it is noted
    /// as longer than its size asks for.
    fn noted(&self, p: *mut u8) -> Option<usize> {
        self.state().longer.iter().flatten().find(|(at, _)| *at == p as usize).map(|(_, real)| *real)
    }

    /// Notes that the buffer at `p` (not noted yet) holds a mapping of `real`, longer
    /// than its size asks for; false when no more can be noted.
    fn note_longer(&self, p: *mut u8, real: usize) -> bool {
        let mut st = self.state();
        let Some(free) = st.longer.iter_mut().find(|s| s.is_none()) else { return false };
        *free = Some((p as usize, real));
        true
    }

    /// Keeps the mapping `p` of `len` a freed buffer held, or gives it
    /// back when it is too large or no room is left; gives back what
    /// waited `keep` or longer.
    fn put(&self, p: *mut u8, len: usize, now: Instant, keep: Duration) {
        let mut spare = Some(Kept { at: p as usize, len, since: now });
        let old = {
            let mut st = self.state();
            let old = expired(&mut st.kept, now, keep);
            let held: usize = st.kept.iter().flatten().map(|k| k.len).sum();
            if len <= KEPT_UP_TO
                && held + len <= CACHED_BYTES
                && let Some(free) = st.kept.iter_mut().find(|s| s.is_none())
            {
                *free = spare.take();
            }
            old
        };
        for k in old.iter().flatten().chain(spare.iter()) {
            unmap(k.at as *mut u8, k.len);
        }
    }

    /// Gives back what waited `keep` or longer.
    pub(super) fn trim(&self, now: Instant, keep: Duration) {
        let old = expired(&mut self.state().kept, now, keep);
        for k in old.iter().flatten() {
            unmap(k.at as *mut u8, k.len);
        }
    }

    /// Frees the buffer at `p` whose size asks for `len`.
    fn free(&self, p: *mut u8, len: usize) {
        let real = self.length_of(p, len, true);
        self.put(p, real, Instant::now(), super::KEEP);
    }

    /// The buffer at `p`, whose size asked for `old`, resized to ask for
    /// `new`: in place while its mapping is long enough (one that
    /// shrinks keeps its pages, when that can be noted), else grown or
    /// moved by the kernel.
    fn resize_buffer(&self, p: *mut u8, old: usize, new: usize) -> *mut u8 {
        if old == new {
            return p;
        }
        let noted = self.noted(p);
        let real = noted.unwrap_or(old);
        if new <= real && (noted.is_some() || self.note_longer(p, real)) {
            return p;
        }
        // Forgotten while `p` is still this buffer's: once the kernel
        // moves it, the address may be another's.
        self.length_of(p, old, true);
        let Some(q) = resize(p, real, new) else {
            // The buffer stays as it was (the caller keeps it).
            if noted.is_some() {
                self.note_longer(p, real);
            }
            return std::ptr::null_mut();
        };
        q
    }
}

/// The mapping `p` of `old` bytes resized to `new` by the kernel (grown
/// or cut in place, or moved), its advice and its pages kept.
#[allow(unsafe_code)]
fn resize(p: *mut u8, old: usize, new: usize) -> Option<*mut u8> {
    // SAFETY: a mapping of `old` no other buffer holds.
    let q = unsafe { libc::mremap(p.cast(), old, new, libc::MREMAP_MAYMOVE) };
    (q != libc::MAP_FAILED).then_some(q.cast())
}

/// Takes out of `slots` what waited `keep` or longer at `now`.
fn expired(slots: &mut [Option<Kept>; CACHED], now: Instant, keep: Duration) -> [Option<Kept>; CACHED] {
    let mut old = [None; CACHED];
    for (slot, out) in slots.iter_mut().zip(old.iter_mut()) {
        if slot.is_some_and(|k| now.duration_since(k.since) >= keep) {
            *out = slot.take();
        }
    }
    old
}

// SAFETY: every block this allocator hands out is either the system
// allocator's, passed on with the caller's layout, or a mapping of its
// own of at least the layout's size, page-aligned (and so aligned for
// any layout it takes, `ours`); a layout says which it is, as the
// caller passes back the layout a block was made or last resized with.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ours(layout) {
            let len = length(layout.size());
            return CACHE.take(len).unwrap_or_else(|| map(len));
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if ours(layout) {
            // A new anonymous mapping reads as zeros.
            return map(layout.size());
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ours(layout) {
            CACHE.free(ptr, length(layout.size()));
            return;
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees `new_size` is non-zero and does
        // not overflow once rounded up to the alignment.
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (ours(layout), ours(new)) {
            // SAFETY: the caller's contract, passed on.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            (true, true) => CACHE.resize_buffer(ptr, length(layout.size()), length(new_size)),
            _ => {
                // Across the size: a new block, what both hold copied,
                // the old one freed.
                // SAFETY: `new` is a valid layout (above); `ptr` holds
                // `layout.size()` bytes and the new block `new_size`.
                unsafe {
                    let p = self.alloc(new);
                    if !p.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                    p
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mapping that holds `p`, from `/proc/self/smaps`: its length
    /// and its flags.
    fn mapping_of(p: *mut u8) -> Option<(usize, String)> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let at = p as usize;
        let mut found = None;
        for line in smaps.lines() {
            let range = line.split(' ').next().and_then(|r| r.split_once('-'));
            if let Some((a, b)) = range
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                found = (a <= at && at < b).then_some(b - a);
            } else if let (Some(len), Some(flags)) = (found, line.strip_prefix("VmFlags:")) {
                return Some((len, flags.to_string()));
            }
        }
        None
    }

    /// A buffer grown from small to huge and back keeps what it holds
    /// at every step, and a huge one is a mapping of its own, of whole
    /// huge pages, advised for them.
    #[test]
    #[allow(unsafe_code)]
    fn a_buffer_keeps_its_bytes_across_the_size_and_a_huge_one_is_a_mapping_advised_for_huge_pages() {
        let a = Allocator;
        let small = Layout::from_size_align(1000, 8).unwrap_or_else(|e| panic!("{e}"));
        // SAFETY: each call gets the layout of the block's last size.
        unsafe {
            let p = a.alloc(small);
            assert!(!p.is_null());
            std::ptr::write_bytes(p, 7, 1000);
            let sizes = [HUGE + 1, 3 * HUGE, 3 * HUGE + 5, 9 * HUGE, HUGE, 500];
            let (mut p, mut size) = (p, 1000);
            for new in sizes {
                let q = a.realloc(p, Layout::from_size_align_unchecked(size, 8), new);
                assert!(!q.is_null(), "to {new}");
                let kept = size.min(new).min(1000);
                assert!((0..kept).all(|i| *q.add(i) == 7), "bytes lost growing {size} → {new}");
                if new > size {
                    std::ptr::write_bytes(q.add(size), 9, new - size);
                    assert_eq!(*q.add(new - 1), 9);
                }
                (p, size) = (q, new);
            }
            a.dealloc(p, Layout::from_size_align_unchecked(size, 8));

            let big = Layout::from_size_align_unchecked(5 * HUGE / 2, 64);
            let z = a.alloc_zeroed(big);
            assert!(!z.is_null() && (z as usize).is_multiple_of(PAGE), "page-aligned");
            assert!((0..big.size()).step_by(4093).all(|i| *z.add(i) == 0), "zeroed");
            let (len, flags) = mapping_of(z).unwrap_or_else(|| panic!("no mapping holds {z:?}"));
            assert!(len >= 3 * HUGE, "whole huge pages: {len}");
            // Where the kernel has transparent huge pages, the mapping
            // is advised for them.
            if std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
                assert!(flags.split_whitespace().any(|f| f == "hg"), "advised: {flags}");
            }
            a.dealloc(z, big);
        }
    }

    /// A freed mapping waits for the next large buffer, which finds
    /// what it had faulted in; one too large, one past the room left,
    /// and one that waited its time are given back.
    #[test]
    #[allow(unsafe_code)]
    fn a_freed_mapping_waits_for_the_next_buffer_within_its_bounds() {
        let cache = Cache::new();
        let (now, keep) = (Instant::now(), Duration::from_secs(1));
        assert!(cache.take(2 * HUGE).is_none(), "nothing waits yet");
        let p = map(2 * HUGE);
        // SAFETY: a mapping of 2 huge pages, made just now.
        unsafe { std::ptr::write_bytes(p, 7, 2 * HUGE) };
        cache.put(p, 2 * HUGE, now, keep);
        let q = cache.take(2 * HUGE).unwrap_or_else(|| panic!("the freed mapping waits"));
        // SAFETY: the mapping taken back, of the same length.
        assert!(q == p && unsafe { *q.add(2 * HUGE - 1) } == 7, "the same pages, as they were");
        assert!(cache.take(2 * HUGE).is_none(), "taken once");
        // Resized to what the next buffer needs, what fits kept.
        cache.put(q, 2 * HUGE, now, keep);
        let r = cache.take(3 * HUGE).unwrap_or_else(|| panic!("resized"));
        // SAFETY: a mapping of 3 huge pages whose first two were written.
        assert!(unsafe { *r.add(HUGE) == 7 && *r.add(3 * HUGE - 1) == 0 }, "grown, its pages kept");
        unmap(r, 3 * HUGE);

        let too_large = map(KEPT_UP_TO + HUGE);
        cache.put(too_large, KEPT_UP_TO + HUGE, now, keep);
        assert!(cache.take(KEPT_UP_TO + HUGE).is_none(), "past the largest kept: given back");
        let bufs: Vec<*mut u8> = (0..CACHED + 1).map(|_| map(KEPT_UP_TO)).collect();
        for b in &bufs {
            cache.put(*b, KEPT_UP_TO, now, keep);
        }
        let waiting = (0..=CACHED).filter_map(|_| cache.take(KEPT_UP_TO)).collect::<Vec<_>>();
        assert_eq!(waiting.len(), CACHED_BYTES / KEPT_UP_TO, "no more than the bytes allowed");
        for b in waiting {
            cache.put(b, KEPT_UP_TO, now, keep);
        }
        cache.trim(now + keep / 2, keep);
        assert!(cache.take(KEPT_UP_TO).is_some_and(|b| {
            unmap(b, KEPT_UP_TO);
            true
        }));
        cache.trim(now + keep, keep);
        assert!(cache.take(KEPT_UP_TO).is_none(), "what waited its time is given back");
    }

    /// A buffer given a longer waiting mapping keeps it whole: it grows
    /// in it with no call to the kernel, shrinks without cutting it,
    /// and gives it back whole when freed.
    #[test]
    #[allow(unsafe_code)]
    fn a_longer_mapping_taken_back_is_kept_whole_until_freed() {
        let cache = Cache::new();
        let (now, keep) = (Instant::now(), Duration::from_secs(1));
        let p = map(6 * HUGE);
        // SAFETY: each pointer below is a mapping at least as long as
        // what is read or written of it.
        unsafe {
            std::ptr::write_bytes(p, 7, 6 * HUGE);
            cache.put(p, 6 * HUGE, now, keep);
            let q = cache.take(2 * HUGE).unwrap_or_else(|| panic!("taken"));
            assert_eq!((q, cache.noted(q)), (p, Some(6 * HUGE)), "taken whole");
            let r = cache.resize_buffer(q, 2 * HUGE, 5 * HUGE);
            assert!(r == q && *r.add(5 * HUGE - 1) == 7, "grown in place, its pages as they were");
            let g = cache.resize_buffer(r, 5 * HUGE, 7 * HUGE);
            assert!(!g.is_null() && cache.noted(g).is_none(), "past its mapping: the kernel's, exact");
            assert!(*g.add(6 * HUGE - 1) == 7 && *g.add(7 * HUGE - 1) == 0, "what it held kept");
            let s = cache.resize_buffer(g, 7 * HUGE, 2 * HUGE);
            assert_eq!((s, cache.noted(s)), (g, Some(7 * HUGE)), "shrunk without cutting it");
            assert_eq!(cache.resize_buffer(s, 2 * HUGE, 2 * HUGE), s);
            cache.free(s, 2 * HUGE);
            assert!(cache.noted(s).is_none(), "forgotten when freed");
            let t = cache.take(7 * HUGE).unwrap_or_else(|| panic!("the freed mapping waits, whole"));
            assert!(t == s && cache.noted(t).is_none() && *t.add(6 * HUGE - 1) == 7, "the same, of its length");
            unmap(t, 7 * HUGE);
        }
    }

    /// A zeroed buffer is never a freed one taken back.
    #[test]
    #[allow(unsafe_code)]
    fn a_zeroed_buffer_is_a_fresh_mapping() {
        let a = Allocator;
        let l = Layout::from_size_align(3 * HUGE, 8).unwrap_or_else(|e| panic!("{e}"));
        // SAFETY: blocks made and freed with the same layout.
        unsafe {
            let p = a.alloc(l);
            assert!(!p.is_null());
            std::ptr::write_bytes(p, 7, l.size());
            a.dealloc(p, l);
            let z = a.alloc_zeroed(l);
            assert!(!z.is_null() && (0..l.size()).step_by(4093).all(|i| *z.add(i) == 0), "zeroed");
            a.dealloc(z, l);
        }
    }

    /// An alignment past a page is the system's to serve, whatever the size.
    #[test]
    #[allow(unsafe_code)]
    fn an_alignment_past_a_page_is_left_to_the_system() {
        let a = Allocator;
        let l = Layout::from_size_align(HUGE * 2, 2 * PAGE).unwrap_or_else(|e| panic!("{e}"));
        assert!(!ours(l));
        // SAFETY: a block made and freed with the same layout.
        unsafe {
            let p = a.alloc(l);
            assert!(!p.is_null() && (p as usize).is_multiple_of(2 * PAGE));
            a.dealloc(p, l);
        }
    }
}
