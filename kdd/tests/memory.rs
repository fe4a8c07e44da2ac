//! A large buffer (a long thread's answer, an agent's long output) is its
//! own mapping, given back to the system when it is freed — also after a
//! larger one was freed before it, which by glibc's default raises the size
//! from which buffers are mapped, so that later ones stay in the heap.

#![cfg(all(target_os = "linux", target_env = "gnu"))]

/// How many buffers glibc holds as their own mappings now.
fn mapped_buffers() -> usize {
    #[allow(unsafe_code)]
    // SAFETY: mallinfo2 only reads the allocator's counters.
    let info = unsafe { libc::mallinfo2() };
    info.hblks
}

#[test]
fn large_buffers_are_mapped_and_given_back_when_freed() {
    kdd::memory::give_back_large_buffers();
    // Freed, an 8 MiB buffer would raise glibc's mapping threshold to 8 MiB.
    drop(std::hint::black_box(vec![1u8; 8 << 20]));
    let before = mapped_buffers();
    let held = std::hint::black_box(vec![1u8; 2 << 20]);
    assert_eq!(mapped_buffers(), before + 1, "a 2 MiB buffer is a mapping of its own");
    drop(held);
    assert_eq!(mapped_buffers(), before, "and is unmapped when freed");
}
