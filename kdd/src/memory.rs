//! The daemon's memory goes back to the system after a large answer.
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
//! Other C libraries (musl, macOS) are left as they are.

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
