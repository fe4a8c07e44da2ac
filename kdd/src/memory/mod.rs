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
//! [`KEPT_UP_TO`]), as jemalloc keeps its dirty pages for a while, and the
//! next large buffer takes the one that fits best whole (a buffer that
//! then grows within it, as a `String` does by doubling, costs nothing; one
//! that shrinks keeps it whole until freed; [`huge`] notes which buffers
//! hold a longer mapping than their size says). [`trim`] gives back what
//! waited longer (kdd calls it every second). The 10,000-message read,
//! call after call, went from 12.5–23.8 to 9.8–13.1 ms, and in turn with
//! `sqlite3 -json` from 16.8–19.8 to 15.4–17.6 ms (issue 31 item 15,
//! docs/performance.md); what waits is given back one to two seconds after
//! the read.
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
mod huge;

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
