//! The native part of the Python package `arenapool`: process-wide phases, hooks that
//! send CPython's and numpy's large blocks to the phase's arenas, and memory figures.
//!
//! The Python modules in `arenapool/` build the public API on these functions; this
//! module is `arenapool._arenapool` and is not meant to be imported directly.

use pyo3::prelude::*;

mod errors;
mod figures;
mod numpy_handler;
mod phase;
mod pymalloc;
mod raw_hook;
mod route;
mod stats;
mod wrapped;

// The extension's own Rust allocations go through the allocator too, and phases need
// it installed.
#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

#[pymodule]
fn _arenapool(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The Python layer trims glibc's heaps itself at a phase's end, and reports it
    // (`arenapool.release_others`).
    arenapool_alloc::set_trim_c_heap_after_phase(false);
    // `_RJEM_MALLOC_CONF` is read by every jemalloc of tikv's build in the process: one
    // set for another library's (polars') would start background threads in this one,
    // which serves arenapool alone. Nothing arenapool gives back depends on them; they
    // only cost time. A refusal (not expected) leaves them running: slower, still right.
    let _ = arenapool_alloc::stop_background_threads();
    m.add(
        "ArenaPoolError",
        m.py().get_type::<errors::ArenaPoolError>(),
    )?;
    m.add_class::<figures::Memory>()?;
    m.add_class::<figures::Report>()?;
    m.add_class::<phase::OpenPhase>()?;
    m.add_function(wrap_pyfunction!(figures::memory, m)?)?;
    m.add_function(wrap_pyfunction!(figures::rss, m)?)?;
    m.add_function(wrap_pyfunction!(figures::trim, m)?)?;
    m.add_function(wrap_pyfunction!(stats::metrics, m)?)?;
    m.add_function(wrap_pyfunction!(phase::enter_phase, m)?)?;
    m.add_function(wrap_pyfunction!(phase::phase_is_open, m)?)?;
    m.add_function(wrap_pyfunction!(phase::phase_threshold, m)?)?;
    m.add_function(wrap_pyfunction!(route::threshold, m)?)?;
    m.add_function(wrap_pyfunction!(route::set_threshold, m)?)?;
    m.add_function(wrap_pyfunction!(raw_hook::raw_live_blocks, m)?)?;
    m.add_function(wrap_pyfunction!(route::owns, m)?)?;
    m.add_function(wrap_pyfunction!(route::is_taking, m)?)?;
    m.add_function(wrap_pyfunction!(raw_hook::install_raw, m)?)?;
    m.add_function(wrap_pyfunction!(raw_hook::uninstall_raw, m)?)?;
    m.add_function(wrap_pyfunction!(raw_hook::raw_state, m)?)?;
    m.add_function(wrap_pyfunction!(raw_hook::start_idle_return_in_child, m)?)?;
    m.add_function(wrap_pyfunction!(numpy_handler::install_numpy, m)?)?;
    m.add_function(wrap_pyfunction!(pymalloc::install_pymalloc_pools, m)?)?;
    m.add_function(wrap_pyfunction!(pymalloc::give_back_pymalloc_pools, m)?)?;
    m.add_function(wrap_pyfunction!(pymalloc::pymalloc_free_pools, m)?)?;
    m.add_function(wrap_pyfunction!(pymalloc::pymalloc_arenas_made, m)?)?;
    m.add_function(wrap_pyfunction!(pymalloc::pymalloc_pools_off, m)?)?;
    m.add_function(wrap_pyfunction!(numpy_handler::install_numpy_default, m)?)?;
    m.add_function(wrap_pyfunction!(numpy_handler::uninstall_numpy, m)?)?;
    m.add_function(wrap_pyfunction!(numpy_handler::numpy_installed, m)?)?;
    Ok(())
}
