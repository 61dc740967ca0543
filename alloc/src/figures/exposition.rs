//! The exposition: a [`Stats`] snapshot as a list of named metrics ([`Stats::metrics`]),
//! the one list every format is written from, and in Prometheus' text format
//! ([`write_prometheus`]).
//!
//! Names follow Prometheus' naming guide: the `arenapool_` prefix, base units in the
//! name (`_bytes`, `_seconds`), `_total` on counters, and what a series is of in labels
//! (`kind` of arena, `work` and its `name`) rather than in the metric's name, so that a
//! sum over a label is meaningful.

use std::fmt::{self, Write};

use crate::figures::stats::{Held, Stats};
use crate::figures::tally::{Work, WorkTotals};

/// Whether a metric only grows (a counter) or goes up and down (a gauge).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MetricKind {
    /// Goes up and down.
    Gauge,
    /// Only grows, from the start of the process.
    Counter,
}

impl MetricKind {
    /// Its name in Prometheus' `# TYPE` line: `gauge` or `counter`.
    pub fn name(self) -> &'static str {
        match self {
            MetricKind::Gauge => "gauge",
            MetricKind::Counter => "counter",
        }
    }
}

/// One metric of a [`Stats`] snapshot: its name with its unit, what it means, its kind,
/// and its series, each with its labels and value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Metric {
    /// `arenapool_*`, ending in its unit (`_bytes`, `_seconds_total`) or `_total`.
    pub name: &'static str,
    /// One sentence on what it is.
    pub help: &'static str,
    /// Gauge or counter.
    pub kind: MetricKind,
    /// Its series: each one's labels (name, value) and value.
    pub series: Vec<(Vec<(&'static str, String)>, f64)>,
}

impl Metric {
    fn one(name: &'static str, help: &'static str, kind: MetricKind, value: f64) -> Metric {
        Metric {
            name,
            help,
            kind,
            series: vec![(Vec::new(), value)],
        }
    }
}

/// A family of series read from a `T`: the metric's name, its help, and its value.
type Family<T> = (&'static str, &'static str, fn(&T) -> f64);

impl Stats {
    /// The snapshot as named metrics, each with its help, kind and series: what
    /// [`write_prometheus`] writes, and what an integration with another metrics
    /// library records.
    ///
    /// | metric | kind | labels |
    /// |---|---|---|
    /// | `arenapool_process_resident_bytes` | gauge | |
    /// | `arenapool_jemalloc_{allocated,active,metadata,resident,mapped,retained,dirty,muzzy}_bytes` | gauge | |
    /// | `arenapool_arena_{resident,active,dirty,muzzy,huge_page_resident}_bytes` | gauge | `kind`: `pool`, `phase`, `scope`, `raw`, `idle`, `automatic` |
    /// | `arenapool_returned_bytes_total` | counter | |
    /// | `arenapool_give_backs_failed_total` | counter | |
    /// | `arenapool_purges_skipped_total`, `arenapool_purge_waits_given_up_total` | counter | |
    /// | `arenapool_arenas_created_total`, `arenapool_arenas_recycled_total` | counter | |
    /// | `arenapool_work_{started,ended}_total` | counter | `work`: `phase`, `scope`, `job`; `name`: the [`Label`](crate::Label), `""` for unlabelled work |
    /// | `arenapool_work_returned_bytes_total`, `arenapool_work_give_back_seconds_total` | counter | as above |
    ///
    /// The series of one `work` add up, over `name`, to all of that work.
    pub fn metrics(&self) -> Vec<Metric> {
        use MetricKind::{Counter, Gauge};
        let mut metrics = vec![Metric::one(
            "arenapool_process_resident_bytes",
            "Resident set size of the process.",
            Gauge,
            self.rss as f64,
        )];
        let jemalloc: [Family<Stats>; 8] = [
            (
                "arenapool_jemalloc_allocated_bytes",
                "Bytes in live allocations.",
                |s| s.allocated as f64,
            ),
            (
                "arenapool_jemalloc_active_bytes",
                "Bytes in pages that hold live allocations.",
                |s| s.active as f64,
            ),
            (
                "arenapool_jemalloc_metadata_bytes",
                "Bytes of jemalloc's own metadata.",
                |s| s.metadata as f64,
            ),
            (
                "arenapool_jemalloc_resident_bytes",
                "Bytes jemalloc has resident.",
                |s| s.resident as f64,
            ),
            (
                "arenapool_jemalloc_mapped_bytes",
                "Bytes jemalloc has mapped for data.",
                |s| s.mapped as f64,
            ),
            (
                "arenapool_jemalloc_retained_bytes",
                "Bytes of address space kept mapped but given back to the OS.",
                |s| s.retained as f64,
            ),
            (
                "arenapool_jemalloc_dirty_bytes",
                "Bytes in freed pages not given back yet.",
                |s| s.dirty as f64,
            ),
            (
                "arenapool_jemalloc_muzzy_bytes",
                "Bytes in pages purged lazily.",
                |s| s.muzzy as f64,
            ),
        ];
        for (name, help, value) in jemalloc {
            metrics.push(Metric::one(name, help, Gauge, value(self)));
        }
        let by_kind = self.by_kind();
        let per_kind: [Family<Held>; 5] = [
            (
                "arenapool_arena_resident_bytes",
                "Bytes resident in the arenas of each kind.",
                |h| h.resident as f64,
            ),
            (
                "arenapool_arena_active_bytes",
                "Bytes in pages holding live allocations, by kind of arena.",
                |h| h.active as f64,
            ),
            (
                "arenapool_arena_dirty_bytes",
                "Bytes in freed pages not given back yet, by kind of arena.",
                |h| h.dirty as f64,
            ),
            (
                "arenapool_arena_muzzy_bytes",
                "Bytes in pages purged lazily, by kind of arena.",
                |h| h.muzzy as f64,
            ),
            (
                "arenapool_arena_huge_page_resident_bytes",
                "Bytes resident in arenas with huge pages, by kind of arena.",
                |h| h.huge_pages as f64,
            ),
        ];
        for (name, help, value) in per_kind {
            metrics.push(Metric {
                name,
                help,
                kind: Gauge,
                series: by_kind
                    .iter()
                    .map(|(kind, held)| (vec![("kind", kind.to_string())], value(held)))
                    .collect(),
            });
        }
        let counters: [Family<Stats>; 6] = [
            (
                "arenapool_returned_bytes_total",
                "Bytes all arenas have given back to the OS.",
                |s| s.returned as f64,
            ),
            (
                "arenapool_give_backs_failed_total",
                "Attempts to give pages back that failed.",
                |s| s.give_backs_failed as f64,
            ),
            (
                "arenapool_purges_skipped_total",
                "Purges jemalloc skipped in a free into an idle arena, made up for.",
                |s| s.purges_skipped as f64,
            ),
            (
                "arenapool_purge_waits_given_up_total",
                "Waits for a purge under way that gave up, leaving pages resident.",
                |s| s.purge_waits_given_up as f64,
            ),
            (
                "arenapool_arenas_created_total",
                "Arenas arenapool has created.",
                |s| s.arenas_created as f64,
            ),
            (
                "arenapool_arenas_recycled_total",
                "Arenas taken off the free list for reuse.",
                |s| s.arenas_recycled as f64,
            ),
        ];
        for (name, help, value) in counters {
            metrics.push(Metric::one(name, help, Counter, value(self)));
        }
        let by_label = self.work_by_label();
        let work: [Family<WorkTotals>; 4] = [
            (
                "arenapool_work_started_total",
                "Phases, scopes and pool jobs started.",
                |t| t.started as f64,
            ),
            (
                "arenapool_work_ended_total",
                "Phases, scopes and pool jobs ended.",
                |t| t.ended as f64,
            ),
            (
                "arenapool_work_returned_bytes_total",
                "Bytes the ends of phases, scopes and pool jobs gave back to the OS.",
                |t| t.returned as f64,
            ),
            (
                "arenapool_work_give_back_seconds_total",
                "Time the ends of phases, scopes and pool jobs spent giving memory back.",
                |t| t.give_back_time.as_secs_f64(),
            ),
        ];
        for (name, help, value) in work {
            metrics.push(Metric {
                name,
                help,
                kind: Counter,
                series: by_label
                    .iter()
                    .map(|(work, label, totals)| {
                        let labels = vec![
                            ("work", work.name().to_string()),
                            ("name", label.to_string()),
                        ];
                        (labels, value(totals))
                    })
                    .collect(),
            });
        }
        metrics
    }

    /// The totals of each kind of work by label: each label's, then the unlabelled
    /// rest (all of that work minus the labels').
    fn work_by_label(&self) -> Vec<(Work, &'static str, WorkTotals)> {
        let mut series = Vec::new();
        for work in Work::ALL {
            let mut rest = self.work_totals(work);
            for (label, _, totals) in self.labels.iter().filter(|(_, w, _)| *w == work) {
                rest.started -= totals.started.min(rest.started);
                rest.ended -= totals.ended.min(rest.ended);
                rest.returned -= totals.returned.min(rest.returned);
                rest.give_back_time = rest.give_back_time.saturating_sub(totals.give_back_time);
                series.push((work, label.name(), *totals));
            }
            series.push((work, "", rest));
        }
        series
    }
}

/// Writes `stats` to `out` in Prometheus' text exposition format (version 0.0.4, what
/// a `/metrics` endpoint serves as `text/plain; version=0.0.4`): every metric of
/// [`Stats::metrics`], named `arenapool_*` with its unit, with a `# HELP` and a
/// `# TYPE` line.
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// let mut text = String::new();
/// arenapool_alloc::write_prometheus(&arenapool_alloc::stats(), &mut text)?;
/// assert!(text.contains("# TYPE arenapool_returned_bytes_total counter\n"));
/// # Ok::<(), std::fmt::Error>(())
/// ```
///
/// # Errors
///
/// Only those of `out`: writing to a `String` cannot fail.
pub fn write_prometheus(stats: &Stats, out: &mut impl Write) -> fmt::Result {
    for metric in stats.metrics() {
        writeln!(out, "# HELP {} {}", metric.name, metric.help)?;
        writeln!(out, "# TYPE {} {}", metric.name, metric.kind.name())?;
        for (labels, value) in &metric.series {
            out.write_str(metric.name)?;
            for (i, (name, value)) in labels.iter().enumerate() {
                let open = if i == 0 { '{' } else { ',' };
                write!(out, "{open}{name}=\"{}\"", escape(value))?;
            }
            if !labels.is_empty() {
                out.write_char('}')?;
            }
            writeln!(out, " {value}")?;
        }
    }
    Ok(())
}

/// A label value with `\`, `"` and line feeds escaped, as the format asks.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape("two\nlines"), "two\\nlines");
    }
}
