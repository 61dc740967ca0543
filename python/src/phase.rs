//! Phases for Python: an open phase as an object, ended by a call (the `with` block's
//! exit) or when it is garbage-collected.

use std::sync::{Mutex, PoisonError};

use arenapool_alloc::ReportingPhase;
use pyo3::prelude::*;

use crate::errors::{to_py, ArenaPoolError};
use crate::figures::Report;

/// A process-wide phase held open until `end()`; made by `enter_phase()`.
#[pyclass(frozen, module = "arenapool")]
#[derive(Debug)]
pub(crate) struct OpenPhase {
    phase: Mutex<Option<ReportingPhase>>,
}

#[pymethods]
impl OpenPhase {
    /// Ends the phase (giving its arenas' free pages back if no other phase is open)
    /// and returns its `Report`. Raises `ArenaPoolError` if it has already ended.
    fn end(&self, py: Python<'_>) -> PyResult<Report> {
        let phase = self
            .phase
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .ok_or_else(|| ArenaPoolError::new_err("this phase has already ended"))?;
        Ok(Report::new(py.detach(move || phase.end())))
    }

    /// Whether the phase is still open.
    #[getter]
    fn is_open(&self) -> bool {
        self.phase
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }
}

/// Opens a process-wide phase: until it ends, large blocks that CPython and numpy ask
/// arenapool's hooks for, on every thread, go to the phase's arenas.
///
/// Raises `ArenaPoolError` if no phase can be opened (the allocator's limit on arenas).
#[pyfunction]
pub(crate) fn enter_phase(py: Python<'_>) -> PyResult<OpenPhase> {
    let phase = py
        .detach(arenapool_alloc::try_enter_phase)
        .map_err(to_py)?
        .reporting();
    Ok(OpenPhase {
        phase: Mutex::new(Some(phase)),
    })
}

/// Whether a phase is open, on any thread.
#[pyfunction]
pub(crate) fn phase_is_open() -> bool {
    arenapool_alloc::phase_is_open()
}

/// The size, in bytes, from which blocks go to the phase's arenas while a phase is open.
#[pyfunction]
pub(crate) fn phase_threshold() -> usize {
    arenapool_alloc::phase_threshold()
}
