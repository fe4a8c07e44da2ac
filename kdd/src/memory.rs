//! The daemon's memory goes back to the system after a large answer, and
//! a large answer's buffers are backed by huge pages.
//!
//! glibc serves a buffer of 128 KiB or more as a mapping of its own, but
//! each time such a buffer is freed it raises that size to the buffer's
//! (up to 32 MiB). After one long thread has been read — its 5 MB answer
//! passes through four buffers — the next large buffers come from the
//! per-thread heaps, and the heaps keep what they once held: kdd stayed at
//! ~50 MiB after serving a 10,000-message thread, against 16 MiB before.
//! Fixing the size at 1 MiB keeps every large buffer a mapping that is
//! returned when freed: ~28 MiB afterwards (the readers' page caches are
//! the rest) and a peak of ~37 MiB instead of ~61, for ~2.5 ms more on that
//! 5 MB read (fresh pages are faulted in). Measured by
//! `cargo bench -p kd-tests --bench spec -- history`.
//!
//! Those fresh pages are most of that cost: a 4 KiB fault each, some 1,300
//! per megabyte-sized buffer. [`Allocator`], kdd's global allocator, maps
//! each buffer of 2 MiB or more itself, in whole huge pages, and asks the
//! kernel to back it with them (`MADV_HUGEPAGE`; transparent huge pages
//! are enabled "when asked" on most distributions): a few faults of 2 MiB
//! instead. The same 5 MB read took 14.3–15.0 ms instead of 16.3–16.8 with
//! glibc's own switch for it (`GLIBC_TUNABLES=glibc.malloc.hugetlb=1`, which
//! kdd cannot set for itself and would pass on to the agents); issue 31,
//! item 15. Every other buffer is glibc's. The price: a buffer's last huge
//! page is resident whole, and the peak with a 64 MiB answer cut at 16 MiB
//! (e2e `streaming_cost`, debug build) went from 142 to 148 MiB on SQLite,
//! from 186 to 180–205 MiB on PostgreSQL.
//!
//! Faulting a buffer's huge pages in is most of what is left: the kernel
//! zeroes each one. A freed mapping is therefore kept a moment ([`KEEP`],
//! at most [`CACHED`] of them, [`CACHED_BYTES`] in all, none larger than
//! [`KEPT_UP_TO`]) and the next large buffer takes it, resized by `mremap`
//! with what it had faulted in kept, as jemalloc keeps its dirty pages for
//! a while; [`trim`] gives back what waited longer (kdd calls it every
//! second). The 10,000-message read, call after call, went from 16.2–17.1
//! to 10.7–11.2 ms, and in turn with `sqlite3 -json` from 16.8–18.1 to
//! 15.0–17.5 ms (issue 31 item 15, docs/performance.md); what waits is
//! given back one to two seconds after the read.
//!
//! The mapping threshold is glibc's alone: other C libraries (musl, macOS)
//! keep theirs. [`Allocator`] maps its buffers on any Linux; elsewhere it
//! is the system's allocator.

/// From this size on, a buffer is a mapping of its own.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MAPPED_FROM: libc::c_int = 1 << 20;

/// Makes large buffers mappings of their own, given back when freed.
/// Call once, first thing.
pub fn give_back_large_buffers() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        #[allow(unsafe_code)]
        // SAFETY: mallopt only changes a setting of the allocator; it takes
        // the allocator's own lock and is safe to call at any time.
        let set = unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, MAPPED_FROM) };
        if set != 1 {
            tracing::debug!("the allocator refused the mapping threshold; large buffers may stay in the heap");
        }
    }
}

/// kdd's global allocator: the system's, except for buffers of [`HUGE`] or
/// more, each a private mapping of whole huge pages advised as such
/// (`MADV_HUGEPAGE`), grown in place or moved by `mremap` (no copy), and
/// unmapped when freed. Where the kernel has no transparent huge pages the
/// advice is refused and they are ordinary mappings, as glibc's are.
pub struct Allocator;

/// From this size on, a buffer is mapped by [`Allocator`].
pub const HUGE: usize = 2 << 20;

/// How long a freed large buffer's mapping waits for the next one.
pub const KEEP: std::time::Duration = std::time::Duration::from_secs(1);

/// How many freed mappings wait at most.
pub const CACHED: usize = 4;

/// How much they hold at most, in all.
pub const CACHED_BYTES: usize = 32 << 20;

/// The largest mapping that waits (a larger one is given back at once).
pub const KEPT_UP_TO: usize = 16 << 20;

/// Gives back every freed mapping that waited [`KEEP`] or longer.
pub fn trim() {
    #[cfg(target_os = "linux")]
    huge::CACHE.trim(std::time::Instant::now(), KEEP);
}

/// Calls [`trim`] every [`KEEP`], until `stop`.
pub fn spawn_trim(stop: tokio_util::sync::CancellationToken) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(KEEP);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => trim(),
            }
        }
    });
}

#[cfg(target_os = "linux")]
mod huge {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::Mutex;
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

    /// The freed mappings waiting ([`super::KEEP`]).
    pub(super) struct Cache(Mutex<[Option<Kept>; CACHED]>);

    pub(super) static CACHE: Cache = Cache::new();

    impl Cache {
        const fn new() -> Cache {
            Cache(Mutex::new([None; CACHED]))
        }

        fn slots(&self) -> std::sync::MutexGuard<'_, [Option<Kept>; CACHED]> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }

        /// A mapping of `len` for a new buffer: the waiting one nearest that
        /// length, resized to it, or none.
        #[allow(unsafe_code)]
        fn take(&self, len: usize) -> Option<*mut u8> {
            let kept = {
                let mut slots = self.slots();
                let distance = |k: &Kept| k.len.abs_diff(len);
                let best =
                    (0..CACHED).filter(|i| slots[*i].is_some()).min_by_key(|i| slots[*i].as_ref().map(distance))?;
                slots[best].take()?
            };
            if kept.len == len {
                return Some(kept.at as *mut u8);
            }
            // SAFETY: a mapping of `kept.len` no buffer holds; the kernel
            // resizes or moves it, keeping its advice and its pages.
            let p = unsafe { libc::mremap(kept.at as *mut libc::c_void, kept.len, len, libc::MREMAP_MAYMOVE) };
            if p == libc::MAP_FAILED {
                unmap(kept.at as *mut u8, kept.len);
                return None;
            }
            Some(p.cast())
        }

        /// Keeps the mapping `p` of `len` a freed buffer held, or gives it
        /// back when it is too large or no room is left; gives back what
        /// waited `keep` or longer.
        fn put(&self, p: *mut u8, len: usize, now: Instant, keep: Duration) {
            let mut spare = Some(Kept { at: p as usize, len, since: now });
            let old = {
                let mut slots = self.slots();
                let old = expired(&mut slots, now, keep);
                let held: usize = slots.iter().flatten().map(|k| k.len).sum();
                if len <= KEPT_UP_TO
                    && held + len <= CACHED_BYTES
                    && let Some(free) = slots.iter_mut().find(|s| s.is_none())
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
            let old = expired(&mut self.slots(), now, keep);
            for k in old.iter().flatten() {
                unmap(k.at as *mut u8, k.len);
            }
        }
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
                // `ptr` is a mapping made or resized for this size.
                CACHE.put(ptr, length(layout.size()), Instant::now(), super::KEEP);
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
                (true, true) => {
                    let (old_len, new_len) = (length(layout.size()), length(new_size));
                    if old_len == new_len {
                        return ptr;
                    }
                    // SAFETY: `ptr` is a mapping of `old_len` made by `map`;
                    // the kernel grows or moves it, keeping its advice.
                    let p = unsafe { libc::mremap(ptr.cast(), old_len, new_len, libc::MREMAP_MAYMOVE) };
                    if p == libc::MAP_FAILED { std::ptr::null_mut() } else { p.cast() }
                }
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
}

#[cfg(not(target_os = "linux"))]
// SAFETY: the system allocator, passed on as it is.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }
}
