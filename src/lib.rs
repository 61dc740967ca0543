#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs, missing_debug_implementations)]

pub use arenapool_alloc::{
    current_arena, flush_thread_cache, is_installed, live_arenas, memory, peak_rss, reset_peak_rss,
    rss, trim, try_with_arena, with_arena, with_arena_report, Arena, ArenaAlloc, Binding, Bytes,
    Error, Memory, Report,
};
pub use arenapool_pool::{ArenaPool, ArenaPoolBuilder, BuildError, MapStream};
