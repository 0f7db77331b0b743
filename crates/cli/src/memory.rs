//! How the server's heap gives memory back to the system.

/// Blocks from this size up are mapped on their own and unmapped when freed.
const MMAP_THRESHOLD: i32 = 128 << 10;

/// Makes large allocations (tool results of megabytes, their JSON, PII
/// requests) go back to the system when freed. glibc raises its mapping
/// threshold each time a large mapped block is freed (up to 32 MiB), after
/// which such blocks come from the heap arenas, whose freed memory mostly
/// stays with the process: three rounds of 15 MB results and a bridge flood
/// left the server at 204 MB RSS (from 71); with a fixed threshold, 102 MB.
/// Setting it fixes it (no dynamic raise). Call before any thread starts.
#[allow(unsafe_code)]
pub fn return_large_blocks() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter; no thread runs yet.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
    }
}
