//! The results table: plain text for the terminal, Markdown for the docs.

use std::fmt::Write;

use arenapool_alloc::Bytes;

use crate::{Results, Summary};

const HEADERS: [&str; 8] = [
    "contender",
    "time",
    "vs jemalloc",
    "cpu",
    "peak RSS",
    "RSS at start",
    "RSS after",
    "status",
];

/// One row's cells, in [`HEADERS`] order.
fn cells(s: &Summary) -> [String; 8] {
    let time = |t: Option<f64>| t.map_or_else(|| "-".to_owned(), |t| format!("{t:.2} s"));
    let bytes = |b: Option<usize>| b.map_or_else(|| "-".to_owned(), |b| Bytes(b).to_string());
    let mut status = s.status.clone();
    if s.ok_runs < s.runs {
        status = format!("{status} in {}/{} runs", s.runs - s.ok_runs, s.runs);
    }
    if !s.checksum_agrees {
        status.push_str(", checksums differ");
    }
    [
        s.contender.name().to_owned(),
        time(s.time_s),
        s.ratio_to_jemalloc
            .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x")),
        time(s.cpu_s),
        bytes(s.peak_rss),
        bytes(s.rss_start),
        bytes(s.rss_after),
        status,
    ]
}

fn heading(results: &Results, i: usize) -> (String, String, String) {
    let w = &results.workloads[i];
    let after = results
        .summaries
        .iter()
        .find(|s| s.workload.name() == w.name)
        .and_then(|s| s.after_phase.clone())
        .unwrap_or_default();
    (
        format!("{}: {}", w.name, w.description),
        w.size.clone(),
        after,
    )
}

/// The table for the terminal: one block per workload, medians over the repetitions.
pub(crate) fn text(results: &Results) -> String {
    let mut out = String::new();
    for (i, info) in results.workloads.iter().enumerate() {
        let (title, size, after) = heading(results, i);
        let _ = writeln!(out, "\n{title}\n  ({size}; RSS after = at `{after}`)");
        let rows: Vec<[String; 8]> = results
            .summaries
            .iter()
            .filter(|s| s.workload.name() == info.name)
            .map(cells)
            .collect();
        let mut widths = HEADERS.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let line = |cells: [&str; 8]| {
            let mut l = String::from(" ");
            for (c, (cell, w)) in cells.iter().zip(widths).enumerate() {
                if c == 0 || c == 7 {
                    let _ = write!(l, " {cell:<w$}");
                } else {
                    let _ = write!(l, " {cell:>w$}");
                }
            }
            l.trim_end().to_owned()
        };
        let _ = writeln!(out, "{}", line(HEADERS));
        for row in &rows {
            let _ = writeln!(out, "{}", line(row.each_ref().map(String::as_str)));
        }
    }
    let _ = writeln!(
        out,
        "\n{} repetitions, medians; time = workload time from its start marker to its \
         last; suite took {:.0} s",
        results.reps, results.total_s
    );
    out
}

/// The same table in Markdown, one section per workload.
pub(crate) fn markdown(results: &Results) -> String {
    let mut out = String::new();
    for (i, info) in results.workloads.iter().enumerate() {
        let (title, size, after) = heading(results, i);
        let _ = writeln!(out, "### {title}\n\n{size}; RSS after = at `{after}`.\n");
        let _ = writeln!(out, "| {} |", HEADERS.join(" | "));
        let _ = writeln!(out, "|---|{}", "---:|".repeat(HEADERS.len() - 2) + "---|");
        for s in results
            .summaries
            .iter()
            .filter(|s| s.workload.name() == info.name)
        {
            let _ = writeln!(out, "| {} |", cells(s).join(" | "));
        }
        out.push('\n');
    }
    out
}
