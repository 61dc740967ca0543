//! arenapool's metrics for Python: `metrics()`, the list the Python layer builds
//! `arenapool.stats()` and the `prometheus_client` collector from.

use std::collections::BTreeMap;

use pyo3::prelude::*;

/// One series: its labels (name to value) and its value.
type Series = (BTreeMap<&'static str, String>, f64);

/// A snapshot of the allocator (`arenapool_alloc::stats`) as its metrics: for each, its
/// name (`arenapool_*`, with its unit), its help, its type (`gauge` or `counter`) and
/// its series.
#[pyfunction]
pub(crate) fn metrics(
    py: Python<'_>,
) -> Vec<(&'static str, &'static str, &'static str, Vec<Series>)> {
    let stats = py.detach(arenapool_alloc::stats);
    stats
        .metrics()
        .into_iter()
        .map(|metric| {
            let series = metric
                .series
                .into_iter()
                .map(|(labels, value)| (labels.into_iter().collect(), value))
                .collect();
            (metric.name, metric.help, metric.kind.name(), series)
        })
        .collect()
}
