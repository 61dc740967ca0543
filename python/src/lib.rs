//! The native part of the Python package `arenapool`: process-wide phases, hooks that
//! send CPython's and numpy's large blocks to the phase's arenas, and memory figures.
//!
//! The Python modules in `arenapool/` build the public API on these functions; this
//! module is `arenapool._arenapool` and is not meant to be imported directly.

use pyo3::prelude::*;

mod errors;
mod figures;
mod idle_start;
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
    m.setattr("__all__", NAMES.map(|(name, _)| name).to_vec())?;
    m.setattr("__getattr__", wrap_pyfunction!(__getattr__, m)?)?;
    m.setattr("__dir__", wrap_pyfunction!(__dir__, m)?)?;
    Ok(())
}

/// How the module makes one of its names, at its first use.
type Make = for<'py> fn(&Bound<'py, PyModule>) -> PyResult<Bound<'py, PyAny>>;

/// The [`Make`] of a class (or exception) type.
macro_rules! class {
    ($type:ty) => {
        |m| Ok(m.py().get_type::<$type>().into_any())
    };
}

/// The [`Make`] of a `#[pyfunction]`.
macro_rules! function {
    ($function:path) => {
        |m| Ok(wrap_pyfunction!($function, m)?.into_any())
    };
}

/// The module's names (its `__all__`, and `_arenapool.pyi`'s, which a test compares),
/// each with how [`__getattr__`] makes it the first time it is asked for.
const NAMES: [(&str, Make); 29] = [
    ("ArenaPoolError", class!(errors::ArenaPoolError)),
    ("Memory", class!(figures::Memory)),
    ("Report", class!(figures::Report)),
    ("OpenPhase", class!(phase::OpenPhase)),
    ("memory", function!(figures::memory)),
    ("rss", function!(figures::rss)),
    ("trim", function!(figures::trim)),
    ("metrics", function!(stats::metrics)),
    ("enter_phase", function!(phase::enter_phase)),
    ("phase_is_open", function!(phase::phase_is_open)),
    ("phase_threshold", function!(phase::phase_threshold)),
    ("threshold", function!(route::threshold)),
    ("set_threshold", function!(route::set_threshold)),
    ("raw_live_blocks", function!(raw_hook::raw_live_blocks)),
    ("owns", function!(route::owns)),
    ("taking", function!(route::is_taking)),
    ("install_raw", function!(raw_hook::install_raw)),
    ("uninstall_raw", function!(raw_hook::uninstall_raw)),
    ("raw_state", function!(raw_hook::raw_state)),
    (
        "start_idle_return_in_child",
        function!(raw_hook::start_idle_return_in_child),
    ),
    ("install_numpy", function!(numpy_handler::install_numpy)),
    (
        "install_numpy_default",
        function!(numpy_handler::install_numpy_default),
    ),
    ("uninstall_numpy", function!(numpy_handler::uninstall_numpy)),
    ("numpy_installed", function!(numpy_handler::numpy_installed)),
    (
        "install_pymalloc_pools",
        function!(pymalloc::install_pymalloc_pools),
    ),
    (
        "give_back_pymalloc_pools",
        function!(pymalloc::give_back_pymalloc_pools),
    ),
    (
        "pymalloc_free_pools",
        function!(pymalloc::pymalloc_free_pools),
    ),
    (
        "pymalloc_arenas_made",
        function!(pymalloc::pymalloc_arenas_made),
    ),
    (
        "pymalloc_pools_off",
        function!(pymalloc::pymalloc_pools_off),
    ),
];

/// `dir()` of the module: what it holds, and the names not made yet.
#[pyfunction(pass_module)]
fn __dir__(module: &Bound<'_, PyModule>) -> PyResult<Vec<String>> {
    let mut names: Vec<String> = module.dict().keys().extract()?;
    names.extend(NAMES.iter().map(|(name, _)| (*name).to_owned()));
    names.sort_unstable();
    names.dedup();
    Ok(names)
}

/// The module's classes, its exception and its functions, looked up by name (PEP 562):
/// each of [`NAMES`] is made the first time it is asked for and kept in the module,
/// whose dictionary answers from then on.
#[pyfunction(pass_module)]
fn __getattr__<'py>(module: &Bound<'py, PyModule>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let Some((_, make)) = NAMES.iter().find(|(known, _)| *known == name) else {
        return Err(pyo3::exceptions::PyAttributeError::new_err(format!(
            "module 'arenapool._arenapool' has no attribute '{name}'"
        )));
    };
    let made = make(module)?;
    module.setattr(name, &made)?;
    Ok(made)
}
