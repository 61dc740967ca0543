//! `write_prometheus`: a [`Stats`] snapshot in Prometheus' text exposition format.
//!
//! Names follow Prometheus' naming guide: the `arenapool_` prefix, base units in the
//! name (`_bytes`, `_seconds`), `_total` on counters, and what a series is of in labels
//! (`kind` of arena, `work` and its `name`) rather than in the metric's name, so that a
//! sum over a label is meaningful.

use std::fmt::{self, Write};

use crate::stats::{Held, Stats};
use crate::tally::{Work, WorkTotals};

/// Writes `stats` to `out` in Prometheus' text exposition format (version 0.0.4, what
/// a `/metrics` endpoint serves as `text/plain; version=0.0.4`): every metric named
/// `arenapool_*` with its unit, a `# HELP` and a `# TYPE` line.
///
/// | metric | type | labels |
/// |---|---|---|
/// | `arenapool_process_resident_bytes` | gauge | |
/// | `arenapool_jemalloc_{allocated,active,metadata,resident,mapped,retained,dirty,muzzy}_bytes` | gauge | |
/// | `arenapool_arena_{resident,active,dirty,muzzy,huge_page_resident}_bytes` | gauge | `kind`: `pool`, `phase`, `scope`, `raw`, `idle`, `automatic` |
/// | `arenapool_returned_bytes_total` | counter | |
/// | `arenapool_give_backs_failed_total` | counter | |
/// | `arenapool_arenas_created_total`, `arenapool_arenas_recycled_total` | counter | |
/// | `arenapool_work_{started,ended}_total` | counter | `work`: `phase`, `scope`, `job`; `name`: the [`Label`](crate::Label), `""` for unlabelled work |
/// | `arenapool_work_returned_bytes_total`, `arenapool_work_give_back_seconds_total` | counter | as above |
///
/// The series of one `work` add up, over `name`, to all of that work.
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
    let mut w = Writer { out };
    w.gauge(
        "arenapool_process_resident_bytes",
        "Resident set size of the process.",
        &[("", stats.rss as u64)],
    )?;
    let jemalloc: [(&str, &str, usize); 8] = [
        ("allocated", "Bytes in live allocations.", stats.allocated),
        (
            "active",
            "Bytes in pages that hold live allocations.",
            stats.active,
        ),
        (
            "metadata",
            "Bytes of jemalloc's own metadata.",
            stats.metadata,
        ),
        ("resident", "Bytes jemalloc has resident.", stats.resident),
        (
            "mapped",
            "Bytes jemalloc has mapped for data.",
            stats.mapped,
        ),
        (
            "retained",
            "Bytes of address space kept mapped but given back to the OS.",
            stats.retained,
        ),
        (
            "dirty",
            "Bytes in freed pages not given back yet.",
            stats.dirty,
        ),
        ("muzzy", "Bytes in pages purged lazily.", stats.muzzy),
    ];
    for (what, help, value) in jemalloc {
        let name = format!("arenapool_jemalloc_{what}_bytes");
        w.gauge(&name, help, &[("", value as u64)])?;
    }
    let by_kind = stats.by_kind();
    let per_kind: [Family<Held, usize>; 5] = [
        (
            "resident",
            "Bytes resident in the arenas of each kind.",
            |h| h.resident,
        ),
        (
            "active",
            "Bytes in pages holding live allocations, by kind of arena.",
            |h| h.active,
        ),
        (
            "dirty",
            "Bytes in freed pages not given back yet, by kind of arena.",
            |h| h.dirty,
        ),
        (
            "muzzy",
            "Bytes in pages purged lazily, by kind of arena.",
            |h| h.muzzy,
        ),
        (
            "huge_page_resident",
            "Bytes resident in arenas with huge pages, by kind of arena.",
            |h| h.huge_pages,
        ),
    ];
    for (what, help, figure) in per_kind {
        let name = format!("arenapool_arena_{what}_bytes");
        let series: Vec<(String, u64)> = by_kind
            .iter()
            .map(|(kind, held)| (format!("kind=\"{kind}\""), figure(held) as u64))
            .collect();
        w.gauge(&name, help, &series)?;
    }
    let counters: [(&str, &str, u64); 4] = [
        (
            "arenapool_returned_bytes_total",
            "Bytes all arenas have given back to the OS.",
            stats.returned,
        ),
        (
            "arenapool_give_backs_failed_total",
            "Attempts to give pages back that failed.",
            stats.give_backs_failed,
        ),
        (
            "arenapool_arenas_created_total",
            "Arenas arenapool has created.",
            stats.arenas_created,
        ),
        (
            "arenapool_arenas_recycled_total",
            "Arenas taken off the free list for reuse.",
            stats.arenas_recycled,
        ),
    ];
    for (name, help, value) in counters {
        w.family(name, help, "counter")?;
        w.sample(name, "", &value.to_string())?;
    }
    // Each kind of work: its unlabelled part (all minus the labels'), then each label.
    let mut series: Vec<(Work, String, WorkTotals)> = Vec::new();
    for work in Work::ALL {
        let mut rest = stats.work_totals(work);
        for (label, _, totals) in stats.labels.iter().filter(|(_, w, _)| *w == work) {
            rest.started -= totals.started.min(rest.started);
            rest.ended -= totals.ended.min(rest.ended);
            rest.returned -= totals.returned.min(rest.returned);
            rest.give_back_time = rest.give_back_time.saturating_sub(totals.give_back_time);
            series.push((work, escape(label.name()), *totals));
        }
        series.push((work, String::new(), rest));
    }
    let work_counters: [Family<WorkTotals, String>; 4] = [
        (
            "arenapool_work_started_total",
            "Phases, scopes and pool jobs started.",
            |t| t.started.to_string(),
        ),
        (
            "arenapool_work_ended_total",
            "Phases, scopes and pool jobs ended.",
            |t| t.ended.to_string(),
        ),
        (
            "arenapool_work_returned_bytes_total",
            "Bytes the ends of phases, scopes and pool jobs gave back to the OS.",
            |t| t.returned.to_string(),
        ),
        (
            "arenapool_work_give_back_seconds_total",
            "Time the ends of phases, scopes and pool jobs spent giving memory back.",
            |t| format!("{:.9}", t.give_back_time.as_secs_f64()),
        ),
    ];
    for (name, help, value) in work_counters {
        w.family(name, help, "counter")?;
        for (work, label, totals) in &series {
            let labels = format!("work=\"{}\",name=\"{label}\"", work.name());
            w.sample(name, &labels, &value(totals))?;
        }
    }
    Ok(())
}

/// A family of series: the metric's name (or the part that varies), its help, and its
/// value read from a `T`.
type Family<T, V> = (&'static str, &'static str, fn(&T) -> V);

/// A label value with `\`, `"` and line feeds escaped, as the format asks.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Writer<'a, W> {
    out: &'a mut W,
}

impl<W: Write> Writer<'_, W> {
    fn family(&mut self, name: &str, help: &str, kind: &str) -> fmt::Result {
        writeln!(self.out, "# HELP {name} {help}")?;
        writeln!(self.out, "# TYPE {name} {kind}")
    }

    fn sample(&mut self, name: &str, labels: &str, value: &str) -> fmt::Result {
        if labels.is_empty() {
            writeln!(self.out, "{name} {value}")
        } else {
            writeln!(self.out, "{name}{{{labels}}} {value}")
        }
    }

    /// A gauge's family and its series: each its labels (`""`: none) and value.
    fn gauge<L: AsRef<str>>(&mut self, name: &str, help: &str, series: &[(L, u64)]) -> fmt::Result {
        self.family(name, help, "gauge")?;
        for (labels, value) in series {
            self.sample(name, labels.as_ref(), &value.to_string())?;
        }
        Ok(())
    }
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
