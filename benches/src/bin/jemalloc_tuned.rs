//! The `jemalloc-tuned` contender: jemalloc configured to return freed memory at once
//! (background threads, dirty and muzzy decay 0; see `JEMALLOC_TUNED_CONF`).

use std::ffi::c_char;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's compiled-in configuration, read once when it initialises. The symbol is
/// jemalloc's `malloc_conf` under the `_rjem_` prefix that `tikv-jemalloc-sys` builds it
/// with; this definition replaces jemalloc's weak, empty one.
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: &c_char = {
    // SAFETY: the pointer comes from a `&'static CStr`, so it is non-null, aligned and
    // valid for reads of the whole NUL-terminated string for the life of the program.
    unsafe { &*arenapool_bench::JEMALLOC_TUNED_CONF.as_ptr() }
};

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::JemallocTuned)
}
