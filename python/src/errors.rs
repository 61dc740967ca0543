//! The package's exception, and the conversion of the allocator's errors to it.

use pyo3::create_exception;
use pyo3::exceptions::PyRuntimeError;
use pyo3::PyErr;

create_exception!(
    _arenapool,
    ArenaPoolError,
    PyRuntimeError,
    "arenapool could not do what was asked; the message says why and what to do."
);

/// The Python exception for an error of the allocator's.
pub(crate) fn to_py(e: arenapool_alloc::Error) -> PyErr {
    ArenaPoolError::new_err(e.to_string())
}
