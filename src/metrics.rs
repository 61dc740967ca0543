//! `record_metrics`: a [`Stats`] snapshot recorded through the `metrics` crate (feature
//! `metrics`).

use crate::{MetricKind, Stats};

/// Records `stats` through the `metrics` crate's recorder (the exporter the program
/// installed, Prometheus' or another): each metric of [`Stats::metrics`] under its name
/// and labels, gauges set, counters set to their totals since the start
/// (`Counter::absolute`). Each metric is described, with its help and unit, on the
/// first call. Call it when the exporter is about to be read, as a scrape handler
/// would, or on a timer: nothing is recorded between calls.
///
/// `arenapool_work_give_back_seconds_total` is recorded as a gauge: the `metrics`
/// crate's counters hold whole numbers.
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;
/// // With an exporter installed (`metrics_exporter_prometheus`, say), in its scrape:
/// arenapool::record_metrics(&arenapool::stats());
/// ```
pub fn record_metrics(stats: &Stats) {
    static DESCRIBED: std::sync::Once = std::sync::Once::new();
    let metrics = stats.metrics();
    DESCRIBED.call_once(|| {
        for metric in &metrics {
            let unit = if metric.name.ends_with("_bytes") || metric.name.ends_with("_bytes_total") {
                metrics::Unit::Bytes
            } else if metric.name.ends_with("_seconds_total") {
                metrics::Unit::Seconds
            } else {
                metrics::Unit::Count
            };
            match recorded_as(metric.kind, metric.name) {
                MetricKind::Counter => metrics::describe_counter!(metric.name, unit, metric.help),
                _ => metrics::describe_gauge!(metric.name, unit, metric.help),
            }
        }
    });
    for metric in metrics {
        let kind = recorded_as(metric.kind, metric.name);
        for (labels, value) in metric.series {
            let labels: Vec<metrics::Label> = labels
                .into_iter()
                .map(|(name, value)| metrics::Label::new(name, value))
                .collect();
            match kind {
                MetricKind::Counter => {
                    metrics::counter!(metric.name, labels).absolute(value as u64)
                }
                _ => metrics::gauge!(metric.name, labels).set(value),
            }
        }
    }
}

/// How a metric is recorded: as its kind, but a counter of fractions as a gauge.
fn recorded_as(kind: MetricKind, name: &str) -> MetricKind {
    if kind == MetricKind::Counter && name.ends_with("_seconds_total") {
        MetricKind::Gauge
    } else {
        kind
    }
}
