//! The `jemalloc-thp` contender: jemalloc with its defaults, and transparent huge pages
//! asked for all the memory it maps, its metadata included (see `JEMALLOC_THP_CONF`).

use std::ffi::c_char;

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's compiled-in configuration, read once when it initialises (see the
/// `jemalloc-tuned` contender for how the symbol works).
#[export_name = "_rjem_malloc_conf"]
pub static MALLOC_CONF: &c_char = {
    // SAFETY: the pointer comes from a `&'static CStr`, so it is non-null, aligned and
    // valid for reads of the whole NUL-terminated string for the life of the program.
    unsafe { &*arenapool_bench::JEMALLOC_THP_CONF.as_ptr() }
};

fn main() -> std::process::ExitCode {
    arenapool_bench::child_main(arenapool_bench::Contender::JemallocThp)
}
