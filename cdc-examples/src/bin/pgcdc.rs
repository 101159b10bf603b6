//! The `pgcdc` command-line tool: see `pgcdc --help` and the README.

use std::process::ExitCode;

fn main() -> ExitCode {
    cdc_examples::main_entry()
}

// The allocator: rows are allocated on the copy and decoding threads and freed on the
// sink's; glibc pays for every such free with its arenas' locking and consolidation
// (benches/README.md: 12–14% of a snapshot's client CPU). jemalloc with one arena
// keeps the peak memory of glibc (more arenas hold more freed pages).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once at its first allocation (its `malloc_conf`; the
/// `_RJEM_MALLOC_CONF` environment variable still overrides them).
#[unsafe(export_name = "_rjem_malloc_conf")]
static JEMALLOC_OPTIONS: JemallocOptions = JemallocOptions(c"narenas:1".as_ptr());

/// A C string pointer jemalloc reads as `const char *malloc_conf`.
#[repr(transparent)]
struct JemallocOptions(*const std::ffi::c_char);

// SAFETY: the pointer is to a `'static` C string literal, never written.
unsafe impl Sync for JemallocOptions {}
