//! The `jemalloc-bg500` contender: jemalloc with background threads, dirty pages
//! purged over 0.5 s and muzzy pages kept (see `JEMALLOC_BG500_CONF`).

use std::ffi::c_char;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's compiled-in configuration, read once when it initialises (see the
/// `jemalloc-tuned` contender for how the symbol works).
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: &c_char = {
    // SAFETY: the pointer comes from a `&'static CStr`, so it is non-null, aligned and
    // valid for reads of the whole NUL-terminated string for the life of the program.
    unsafe { &*arenapool_bench::JEMALLOC_BG500_CONF.as_ptr() }
};

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::JemallocBg500)
}
