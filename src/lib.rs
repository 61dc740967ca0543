#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs, missing_debug_implementations)]

#[cfg(feature = "metrics")]
mod metrics;
#[cfg(feature = "metrics")]
pub use self::metrics::record_metrics;

pub use arenapool_alloc::{
    c_heap, current_arena, enter_phase, flush_thread_cache, huge_page_rss, huge_pages, idle_return,
    is_installed, live_arenas, memory, peak_rss, phase, phase_is_open, phase_report,
    phase_threshold, reset_peak_rss, rss, set_huge_pages, set_idle_return, set_phase_threshold,
    set_trim_after_phase, set_trim_c_heap_after_phase, thread_cache_worst_case, trim,
    try_enter_phase, try_phase, try_with_arena, with_arena, with_arena_report, Arena, ArenaAlloc,
    Binding, Bytes, CHeap, CHeapSource, Error, Memory, PhaseGuard, RawAlloc, Report,
    ReportingPhase, HUGE_PAGES_ENV, IDLE_RETURN_ENV,
};
pub use arenapool_alloc::{
    stats, write_prometheus, Held, Label, Metric, MetricKind, Stats, Tally, Work, WorkTotals,
    MAX_LABELS,
};
pub use arenapool_pool::{ArenaPool, ArenaPoolBuilder, BuildError, MapStream};
