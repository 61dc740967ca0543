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
    // With no setting given they are off, and asking would set up jemalloc's control
    // tables as the interpreter starts (`ARENAPOOL=on` loads this module then).
    if arenapool_alloc::jemalloc_settings_given() {
        let _ = arenapool_alloc::stop_background_threads();
    }
    // The rest is made at its first use, by `__getattr__`: the start under
    // `ARENAPOOL=on` uses three of the module's functions, and a type object alone costs
    // more to make than the rest of this module's initialisation.
    m.setattr("__all__", NAMES.to_vec())?;
    m.setattr("__getattr__", wrap_pyfunction!(__getattr__, m)?)?;
    m.setattr("__dir__", wrap_pyfunction!(__dir__, m)?)?;
    Ok(())
}

/// The module's names (its `__all__`, and `_arenapool.pyi`'s, which a test compares):
/// each is made by [`__getattr__`] the first time it is asked for.
const NAMES: [&str; 29] = [
    "ArenaPoolError",
    "Memory",
    "Report",
    "OpenPhase",
    "memory",
    "rss",
    "trim",
    "metrics",
    "enter_phase",
    "phase_is_open",
    "phase_threshold",
    "threshold",
    "set_threshold",
    "raw_live_blocks",
    "owns",
    "taking",
    "install_raw",
    "uninstall_raw",
    "raw_state",
    "start_idle_return_in_child",
    "install_numpy",
    "install_numpy_default",
    "uninstall_numpy",
    "numpy_installed",
    "install_pymalloc_pools",
    "give_back_pymalloc_pools",
    "pymalloc_free_pools",
    "pymalloc_arenas_made",
    "pymalloc_pools_off",
];

/// `dir()` of the module: what it holds, and the names not made yet.
#[pyfunction(pass_module)]
fn __dir__(module: &Bound<'_, PyModule>) -> PyResult<Vec<String>> {
    let mut names: Vec<String> = module.dict().keys().extract()?;
    names.extend(NAMES.iter().map(|name| (*name).to_owned()));
    names.sort_unstable();
    names.dedup();
    Ok(names)
}

/// The module's classes, its exception and its functions, looked up by name (PEP 562):
/// each is made the first time it is asked for and kept in the module, whose
/// dictionary answers from then on: those of [`NAMES`] (a test checks that each is
/// found here).
#[pyfunction(pass_module)]
fn __getattr__<'py>(module: &Bound<'py, PyModule>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let py = module.py();
    let made = match name {
        "ArenaPoolError" => py.get_type::<errors::ArenaPoolError>().into_any(),
        "Memory" => py.get_type::<figures::Memory>().into_any(),
        "Report" => py.get_type::<figures::Report>().into_any(),
        "OpenPhase" => py.get_type::<phase::OpenPhase>().into_any(),
        "memory" => wrap_pyfunction!(figures::memory, module)?.into_any(),
        "rss" => wrap_pyfunction!(figures::rss, module)?.into_any(),
        "trim" => wrap_pyfunction!(figures::trim, module)?.into_any(),
        "metrics" => wrap_pyfunction!(stats::metrics, module)?.into_any(),
        "enter_phase" => wrap_pyfunction!(phase::enter_phase, module)?.into_any(),
        "phase_is_open" => wrap_pyfunction!(phase::phase_is_open, module)?.into_any(),
        "phase_threshold" => wrap_pyfunction!(phase::phase_threshold, module)?.into_any(),
        "threshold" => wrap_pyfunction!(route::threshold, module)?.into_any(),
        "set_threshold" => wrap_pyfunction!(route::set_threshold, module)?.into_any(),
        "raw_live_blocks" => wrap_pyfunction!(raw_hook::raw_live_blocks, module)?.into_any(),
        "owns" => wrap_pyfunction!(route::owns, module)?.into_any(),
        "taking" => wrap_pyfunction!(route::is_taking, module)?.into_any(),
        "install_raw" => wrap_pyfunction!(raw_hook::install_raw, module)?.into_any(),
        "uninstall_raw" => wrap_pyfunction!(raw_hook::uninstall_raw, module)?.into_any(),
        "raw_state" => wrap_pyfunction!(raw_hook::raw_state, module)?.into_any(),
        "start_idle_return_in_child" => {
            wrap_pyfunction!(raw_hook::start_idle_return_in_child, module)?.into_any()
        }
        "install_numpy" => wrap_pyfunction!(numpy_handler::install_numpy, module)?.into_any(),
        "install_numpy_default" => {
            wrap_pyfunction!(numpy_handler::install_numpy_default, module)?.into_any()
        }
        "uninstall_numpy" => wrap_pyfunction!(numpy_handler::uninstall_numpy, module)?.into_any(),
        "numpy_installed" => wrap_pyfunction!(numpy_handler::numpy_installed, module)?.into_any(),
        "install_pymalloc_pools" => {
            wrap_pyfunction!(pymalloc::install_pymalloc_pools, module)?.into_any()
        }
        "give_back_pymalloc_pools" => {
            wrap_pyfunction!(pymalloc::give_back_pymalloc_pools, module)?.into_any()
        }
        "pymalloc_free_pools" => {
            wrap_pyfunction!(pymalloc::pymalloc_free_pools, module)?.into_any()
        }
        "pymalloc_arenas_made" => {
            wrap_pyfunction!(pymalloc::pymalloc_arenas_made, module)?.into_any()
        }
        "pymalloc_pools_off" => wrap_pyfunction!(pymalloc::pymalloc_pools_off, module)?.into_any(),
        _ => {
            return Err(pyo3::exceptions::PyAttributeError::new_err(format!(
                "module 'arenapool._arenapool' has no attribute '{name}'"
            )))
        }
    };
    module.setattr(name, &made)?;
    Ok(made)
}
