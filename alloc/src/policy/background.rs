//! jemalloc's background threads, which `_RJEM_MALLOC_CONF` (`background_thread:true`)
//! turns on: [`stop_background_threads`] turns them off for a process whose jemalloc
//! settings are not its own to choose.
//!
//! Nothing this crate gives back depends on them: its arenas' decay is set by this
//! crate (-1 while work runs, 0 once it ended, 10 s outside phases, each with no purge
//! inside a free), and the idle return purges what jemalloc's own arenas keep. What
//! they change is the cost: they wake to purge arenas whose decay is above 0, and a
//! large free into an arena whose decay is -1 or 0 wakes one to look (docs/design.md,
//! the idle return: two of the benchmark suite's workloads 1.6x and 1.8x slower).

use crate::error::Error;
use crate::mechanism::ctl;

/// Stops jemalloc's background threads if they run, and returns whether they ran.
///
/// `_RJEM_MALLOC_CONF` is the settings variable of every copy of jemalloc built by
/// `tikv-jemalloc-sys`, not only this crate's: a library loaded in the same process (a
/// Python extension with its own jemalloc, such as polars) may set it for its own copy.
/// A program whose jemalloc serves only this crate (the Python package's extension
/// calls this as it loads) stops them; a Rust program that set the variable for its
/// own allocator keeps them unless it calls this.
///
/// # Errors
///
/// jemalloc refused the control call (not expected in practice).
pub fn stop_background_threads() -> Result<bool, Error> {
    Ok(ctl::stop_background_threads()?)
}
