//! What the global allocator (mimalloc, feature `mimalloc`) holds, for `/metrics`: memory it has
//! committed from the operating system, whether in use or kept free for reuse. Against the
//! process RSS it tells allocator-held memory from the rest (thread stacks, the binary, C
//! libraries' own `malloc`).

/// Bytes mimalloc has committed now; `None` without the `mimalloc` feature.
#[must_use]
pub fn committed_bytes() -> Option<u64> {
    #[cfg(feature = "mimalloc")]
    {
        let (mut elapsed, mut user, mut system, mut rss, mut peak_rss) = (0, 0, 0, 0, 0);
        let (mut commit, mut peak_commit, mut faults) = (0, 0, 0);
        // SAFETY: mimalloc writes one `usize` through each pointer, all valid for the call.
        unsafe {
            libmimalloc_sys::mi_process_info(
                &mut elapsed,
                &mut user,
                &mut system,
                &mut rss,
                &mut peak_rss,
                &mut commit,
                &mut peak_commit,
                &mut faults,
            );
        }
        Some(commit as u64)
    }
    #[cfg(not(feature = "mimalloc"))]
    None
}
