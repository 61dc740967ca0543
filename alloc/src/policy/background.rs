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

use std::sync::atomic::{AtomicU8, Ordering};

use tikv_jemalloc_sys as ffi;

use crate::error::Error;
use crate::mechanism::ctl;

/// The environment variable jemalloc reads its settings from (under the `_rjem_` prefix
/// `tikv-jemalloc-sys` builds it with).
const SETTINGS_ENV: &str = "_RJEM_MALLOC_CONF";

/// The symbolic link whose target's name jemalloc reads as settings.
const SETTINGS_LINK: &str = "/etc/_rjem_malloc.conf";

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

/// Whether this process's jemalloc was given any settings, from any of the four places
/// it reads them: its build (`JEMALLOC_SYS_WITH_MALLOC_CONF`, or the same name prefixed
/// with the target, when `tikv-jemalloc-sys` was built), the program (its
/// `_rjem_malloc_conf` symbol), the `/etc/_rjem_malloc.conf` link, or
/// `_RJEM_MALLOC_CONF`. Reads the environment and the link's metadata once, after
/// jemalloc has read its settings (it does as it initialises): a variable set later,
/// for another library's jemalloc, is not this one's. Asks jemalloc nothing.
///
/// Without any, jemalloc runs with its defaults: its background threads are off unless
/// a control call turns them on. A program that makes no such call (the Python
/// package's extension) can then skip [`stop_background_threads`], and with it the
/// first control call, which sets up jemalloc's control tables: some 200,000
/// instructions and 27 pages of memory touched, measured in the extension's load, which
/// `ARENAPOOL=on` adds to every interpreter's start. The tables are set up at the first
/// control call that has a use.
pub fn jemalloc_settings_given() -> bool {
    // The answer once read: 0 before, else `1 + given`. An atomic, not a once-cell: a
    // child made by `fork` while another thread reads the places would inherit a
    // once-cell being set and wait for it for good. Threads that race read the same
    // places, after jemalloc's, and store the same answer.
    static GIVEN: AtomicU8 = AtomicU8::new(0);
    match GIVEN.load(Ordering::Relaxed) {
        0 => {}
        read => return read == 2,
    }
    ctl::initialise();
    let given = cfg!(jemalloc_built_with_settings)
        // SAFETY: a pointer-sized static that jemalloc defines (null) unless the
        // program does; nothing writes it once the program runs.
        || unsafe { ffi::malloc_conf }.is_some()
        || std::env::var_os(SETTINGS_ENV).is_some()
        || std::fs::symlink_metadata(SETTINGS_LINK).is_ok();
    GIVEN.store(1 + u8::from(given), Ordering::Relaxed);
    given
}
