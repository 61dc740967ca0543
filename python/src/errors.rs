//! The package's exception, and the conversion of the allocator's errors to it.

use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::PyErr;

// Named as the package exports it (`arenapool.ArenaPoolError`), so that it prints so
// and pickles: errors raised in a worker process reach the parent pickled.
create_exception!(
    arenapool,
    ArenaPoolError,
    PyRuntimeError,
    "arenapool could not do what was asked; the message says why and what to do. The \
     base of every error of arenapool's own (arenapool.mpi's included)."
);

/// The Python exception for an error of the allocator's.
pub(crate) fn to_py(e: arenapool_alloc::Error) -> PyErr {
    ArenaPoolError::new_err(e.to_string())
}
