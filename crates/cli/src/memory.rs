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

/// How often a serving process hands freed heap pages back.
const TRIM_EVERY: std::time::Duration = std::time::Duration::from_secs(10);

/// Hands the heap's freed pages back to the system every few seconds, on a
/// thread of its own. Blocks under the mapping threshold come from glibc's
/// arenas (one per busy thread, up to eight per core); what they free stays
/// with the process, scattered between live blocks, until a trim returns
/// the whole free pages among them. A hostile soak left the server 57 MB
/// above its start without it. A trim takes each arena's lock briefly; every
/// ten seconds that costs nothing measurable.
pub fn trim_periodically() {
    let spawned = std::thread::Builder::new()
        .name("cem-trim".into())
        .spawn(|| {
            loop {
                std::thread::sleep(TRIM_EVERY);
                trim();
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no heap-trimming thread; freed memory may stay with the server");
    }
}

#[allow(unsafe_code)]
fn trim() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free pages; it is thread-safe.
    unsafe {
        libc::malloc_trim(0);
    }
}
