//! Memory figures for Python: `memory()`, `rss()`, `trim()`, and a phase's `Report`.

use pyo3::prelude::*;

use crate::errors::to_py;

/// A snapshot of the process's memory, in bytes: what the kernel says (`rss`,
/// `peak_rss`) and what arenapool's allocator manages (`allocated` in live blocks,
/// `active` in the pages that hold them, `resident`, `retained`: mapped but given
/// back, `mapped`, `metadata`). Memory of CPython's and numpy's own allocators counts
/// only in `rss` and `peak_rss`.
#[pyclass(frozen, module = "arenapool")]
#[derive(Debug, Clone)]
pub(crate) struct Memory(arenapool_alloc::Memory);

#[pymethods]
impl Memory {
    /// Resident set size of the process, in bytes (what `ps` and `top` show as RSS).
    #[getter]
    fn rss(&self) -> usize {
        self.0.rss
    }
    /// Peak resident set size since the start (`VmHWM`).
    #[getter]
    fn peak_rss(&self) -> usize {
        self.0.peak_rss
    }
    /// Bytes in live blocks of arenapool's allocator.
    #[getter]
    fn allocated(&self) -> usize {
        self.0.allocated
    }
    /// Bytes in pages that hold live blocks.
    #[getter]
    fn active(&self) -> usize {
        self.0.active
    }
    /// Bytes the allocator has resident: active pages, free pages not yet given back,
    /// metadata.
    #[getter]
    fn resident(&self) -> usize {
        self.0.resident
    }
    /// Bytes of address space kept mapped but given back to the OS.
    #[getter]
    fn retained(&self) -> usize {
        self.0.retained
    }
    /// Bytes mapped for data.
    #[getter]
    fn mapped(&self) -> usize {
        self.0.mapped
    }
    /// Bytes of the allocator's own metadata.
    #[getter]
    fn metadata(&self) -> usize {
        self.0.metadata
    }

    fn __repr__(&self) -> String {
        let m = &self.0;
        format!(
            "Memory(rss={}, peak_rss={}, allocated={}, active={}, resident={}, retained={}, mapped={}, metadata={})",
            m.rss, m.peak_rss, m.allocated, m.active, m.resident, m.retained, m.mapped, m.metadata
        )
    }

    fn __str__(&self) -> String {
        self.0.to_string()
    }
}

/// What a phase did: RSS before and after, bytes given back to the OS, where the time
/// went, and how many attempts to give back failed. `rss_after` is read when the phase
/// ended, before its results were dropped.
#[pyclass(frozen, module = "arenapool")]
#[derive(Debug, Clone)]
pub(crate) struct Report(arenapool_alloc::Report);

impl Report {
    pub(crate) fn new(report: arenapool_alloc::Report) -> Report {
        Report(report)
    }
}

#[pymethods]
impl Report {
    /// Process RSS, in bytes, when the phase began.
    #[getter]
    fn rss_before(&self) -> usize {
        self.0.rss_before
    }
    /// Process RSS, in bytes, when it ended (what it returned still held).
    #[getter]
    fn rss_after(&self) -> usize {
        self.0.rss_after
    }
    /// Bytes of pages the phase's arenas gave back to the OS from its start to its end:
    /// while it ran (blocks freed inside the phase can go back before it ends) and at its
    /// end. A page given back, used again and given back again counts each time, so this
    /// can be more than the phase ever held.
    #[getter]
    fn returned(&self) -> usize {
        self.0.returned
    }
    /// Seconds the work inside the phase took.
    #[getter]
    fn run_time(&self) -> f64 {
        self.0.run_time.as_secs_f64()
    }
    /// Seconds giving memory back took at the phase's end.
    #[getter]
    fn purge_time(&self) -> f64 {
        self.0.purge_time.as_secs_f64()
    }
    /// The allocator's arenas the phase's large blocks went to (empty: no phase was
    /// open).
    #[getter]
    fn arenas(&self) -> Vec<u32> {
        self.0.arenas.clone()
    }
    /// Attempts to give pages back that failed during the phase and at its end, in the
    /// phase arenas and the allocator's other arenas (those `returned` counts): control
    /// calls the allocator refused, and ranges the kernel refused to take back (tried
    /// three times). 0 in normal operation. Pages a refused call left resident go back
    /// at the arena's next purge; a range the kernel refused stays resident until the
    /// arena reuses it.
    #[getter]
    fn failed(&self) -> u64 {
        self.0.failed
    }

    fn __repr__(&self) -> String {
        let r = &self.0;
        format!(
            "Report(rss_before={}, rss_after={}, returned={}, run_time={:.6}, purge_time={:.6}, arenas={:?}, failed={})",
            r.rss_before,
            r.rss_after,
            r.returned,
            r.run_time.as_secs_f64(),
            r.purge_time.as_secs_f64(),
            r.arenas,
            r.failed
        )
    }

    /// One line in words: how long the phase ran, RSS at its start and at its end (its
    /// results still held), and the bytes of pages its arenas gave back to the OS while
    /// it ran and at its end: a page given back, used again and given back again counts
    /// each time, so the figure can be more than the phase ever held.
    fn __str__(&self) -> String {
        let r = &self.0;
        let mib = |bytes: usize| bytes as f64 / (1u64 << 20) as f64;
        let mut text = format!(
            "ran {:.2} s; RSS {:.1} MiB at its start, {:.1} MiB at its end (its results still held); \
             its arenas gave {:.1} MiB of pages back to the OS while it ran and at its end \
             (a page used again counts each time), {:.1} ms of it at the end",
            r.run_time.as_secs_f64(),
            mib(r.rss_before),
            mib(r.rss_after),
            mib(r.returned),
            r.purge_time.as_secs_f64() * 1e3,
        );
        if r.failed > 0 {
            text.push_str(&format!("; {} attempts to give back failed", r.failed));
        }
        if r.arenas.is_empty() {
            text.push_str(" (no phase was open: nothing ran in its arenas)");
        }
        text
    }
}

/// A snapshot of the process's memory (see `Memory`).
#[pyfunction]
pub(crate) fn memory(py: Python<'_>) -> Memory {
    Memory(py.detach(arenapool_alloc::memory))
}

/// The process's resident set size, in bytes, from `/proc/self/statm` (what `ps` and
/// `top` show as RSS).
#[pyfunction]
pub(crate) fn rss() -> usize {
    arenapool_alloc::rss()
}

/// Gives every free page of the allocator's arenas back to the OS; returns the bytes
/// given back.
#[pyfunction]
pub(crate) fn trim(py: Python<'_>) -> PyResult<usize> {
    py.detach(arenapool_alloc::trim).map_err(to_py)
}
