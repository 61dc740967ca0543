//! The results tables: plain text for the terminal, Markdown for the docs. Every median
//! is followed by the smallest and largest repetition, in parentheses.

use std::fmt::Write;

use arenapool_alloc::Bytes;

use crate::{Overall, Results, Spread, Summary, Workload};

const HEADERS: [&str; 10] = [
    "contender",
    "time",
    "vs {ref}",
    "cpu",
    "peak RSS",
    "RSS at start",
    "RSS after",
    "peak AnonHugePages",
    "minor faults",
    "status",
];

/// Columns aligned left (the others are figures, aligned right).
const LEFT: [bool; 10] = [
    true, false, false, false, false, false, false, false, false, true,
];

fn headers(results: &Results) -> [String; 10] {
    HEADERS.map(|h| h.replace("{ref}", results.reference.name()))
}

/// `median (min–max)`, each figure written by `f`; the median alone when the range is
/// one value.
fn spread(s: Option<Spread>, f: impl Fn(f64) -> String) -> String {
    match s {
        None => "-".to_owned(),
        Some(s) if s.is_point() => f(s.median),
        Some(s) => format!("{} ({}–{})", f(s.median), f(s.min), f(s.max)),
    }
}

fn seconds(s: Option<Spread>) -> String {
    match s {
        Some(s) if !s.is_point() => {
            format!("{:.2} s ({:.2}–{:.2})", s.median, s.min, s.max)
        }
        _ => spread(s, |t| format!("{t:.2} s")),
    }
}

fn ratio(s: Option<Spread>) -> String {
    match s {
        Some(s) if !s.is_point() => {
            format!("{:.2}x ({:.2}–{:.2})", s.median, s.min, s.max)
        }
        _ => spread(s, |r| format!("{r:.2}x")),
    }
}

/// Bytes in binary units; the range in the median's unit.
fn bytes(s: Option<Spread>) -> String {
    match s {
        Some(s) if !s.is_point() => {
            let median = Bytes(s.median as usize).to_string();
            let unit = median.rsplit(' ').next().unwrap_or("B");
            let scale = match unit {
                "KiB" => 1024.0,
                "MiB" => (1u64 << 20) as f64,
                "GiB" => (1u64 << 30) as f64,
                "TiB" => (1u64 << 40) as f64,
                _ => 1.0,
            };
            format!("{median} ({:.1}–{:.1})", s.min / scale, s.max / scale)
        }
        _ => spread(s, |b| Bytes(b as usize).to_string()),
    }
}

/// The unit a count is written in: thousands (`k`) from 10,000 on, millions (`M`) from
/// 10 million on.
fn count_unit(n: f64) -> (f64, &'static str) {
    match n {
        n if n >= 10e6 => (1e6, "M"),
        n if n >= 10e3 => (1e3, "k"),
        _ => (1.0, ""),
    }
}

/// One count in its unit: `412.3k`, `9876`.
fn one_count(n: f64) -> String {
    match count_unit(n) {
        (_, "") => format!("{n:.0}"),
        (scale, unit) => format!("{:.1}{unit}", n / scale),
    }
}

/// A count's median, with its range in the median's unit.
fn count(s: Option<Spread>) -> String {
    match s {
        Some(s) if !s.is_point() => match count_unit(s.median) {
            (_, "") => format!("{:.0} ({:.0}–{:.0})", s.median, s.min, s.max),
            (scale, _) => format!(
                "{} ({:.1}–{:.1})",
                one_count(s.median),
                s.min / scale,
                s.max / scale
            ),
        },
        _ => spread(s, one_count),
    }
}

fn status(s: &Summary) -> String {
    let mut status = s.status.clone();
    if s.ok_runs > 0 && s.ok_runs < s.runs {
        status = format!("{status} in {}/{} runs", s.runs - s.ok_runs, s.runs);
    }
    if !s.checksum_agrees {
        status.push_str(", checksums differ");
    }
    status
}

/// One row's cells, in [`HEADERS`] order.
fn cells(s: &Summary) -> [String; 10] {
    [
        s.contender.name().to_owned(),
        seconds(s.time_s),
        ratio(s.time_ratio),
        seconds(s.cpu_s),
        bytes(s.peak_rss),
        bytes(s.rss_start),
        bytes(s.rss_after),
        bytes(s.peak_anon_huge),
        count(s.minor_faults),
        status(s),
    ]
}

/// `title`, `size; RSS after = at ...` for workload `i` of the results.
fn heading(results: &Results, i: usize) -> (String, String) {
    let w = &results.workloads[i];
    let after = results
        .summaries
        .iter()
        .find(|s| s.workload.name() == w.name)
        .and_then(|s| s.after_phase.clone())
        .unwrap_or_default();
    (
        format!("{}: {}", w.name, w.description),
        format!("{}; RSS after = at `{after}`", w.size),
    )
}

/// The (workload, thread count) cells of the results, in order.
fn cells_of(results: &Results) -> Vec<(usize, Workload, usize)> {
    let mut out = Vec::new();
    for (i, info) in results.workloads.iter().enumerate() {
        let Some(w) = Workload::from_name(info.name) else {
            continue;
        };
        for &t in &results.threads {
            out.push((i, w, t));
        }
    }
    out
}

/// Lays rows out in aligned columns.
fn aligned<const N: usize>(head: [String; N], rows: &[[String; N]], left: [bool; N]) -> String {
    let mut widths = head.each_ref().map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: &[String; N]| {
        let mut l = String::from(" ");
        for ((cell, w), left) in cells.iter().zip(widths).zip(left) {
            let pad = " ".repeat(w - cell.chars().count());
            if left {
                let _ = write!(l, " {cell}{pad}");
            } else {
                let _ = write!(l, " {pad}{cell}");
            }
        }
        l.trim_end().to_owned() + "\n"
    };
    let mut out = line(&head);
    for row in rows {
        out += &line(row);
    }
    out
}

fn markdown_table<const N: usize>(
    head: [String; N],
    rows: &[[String; N]],
    left: [bool; N],
) -> String {
    let mut out = format!("| {} |\n|", head.join(" | "));
    for l in left {
        out += if l { "---|" } else { "---:|" };
    }
    out.push('\n');
    for row in rows {
        let _ = writeln!(out, "| {} |", row.join(" | "));
    }
    out
}

fn overall_rows(results: &Results) -> Vec<[String; 5]> {
    let x = |r: Option<f64>| r.map_or_else(|| "-".to_owned(), |r| format!("{r:.2}x"));
    results
        .overall
        .iter()
        .map(|o: &Overall| {
            let time = match (o.time_ratio_min, o.time_ratio_max) {
                (Some(lo), Some(hi)) if lo != hi => {
                    format!("{} ({lo:.2}–{hi:.2})", x(o.time_ratio))
                }
                _ => x(o.time_ratio),
            };
            let cells = results.workloads.len() * results.threads.len();
            let failed = match o.failed {
                _ if !o.available => "not available".to_owned(),
                0 => format!("{}/{cells}", o.cells),
                f => format!("{}/{cells}, {f} failed", o.cells),
            };
            let configuration = results
                .contenders
                .iter()
                .find(|c| c.name == o.contender)
                .map_or("", |c| c.configuration);
            [
                o.contender.to_owned(),
                time,
                x(o.rss_after_ratio),
                failed,
                configuration.to_owned(),
            ]
        })
        .collect()
}

fn overall_head(results: &Results) -> [String; 5] {
    let r = results.reference.name();
    [
        "contender".to_owned(),
        format!("time vs {r} (geomean)"),
        format!("RSS after vs {r} (geomean)"),
        "workloads".to_owned(),
        "configuration".to_owned(),
    ]
}

/// A Markdown table with a row per workload and a column per contender, at `threads`:
/// each cell what `cell` makes of the summary, `n/a` where no run succeeded, `-` where
/// `cell` has nothing.
fn workload_grid(
    results: &Results,
    threads: usize,
    cell: impl Fn(&Summary) -> Option<String>,
) -> String {
    let contenders: Vec<&str> = results.contenders.iter().map(|c| c.name).collect();
    let mut out = format!("| workload | {} |\n", contenders.join(" | "));
    let _ = writeln!(out, "|---|{}", "---:|".repeat(contenders.len()));
    for info in &results.workloads {
        let Some(w) = Workload::from_name(info.name) else {
            continue;
        };
        let row: Vec<String> = results
            .of_workload(w, threads)
            .map(|s| match cell(s) {
                Some(text) => text,
                None if s.ok_runs == 0 => "n/a".to_owned(),
                None => "-".to_owned(),
            })
            .collect();
        let _ = writeln!(out, "| `{}` | {} |", info.name, row.join(" | "));
    }
    out
}

/// Per workload at `threads`, per contender: the median peak of its memory in huge
/// pages and of its minor faults, in Markdown.
fn huge_page_table(results: &Results, threads: usize) -> String {
    workload_grid(results, threads, |s| {
        let (huge, faults) = (s.peak_anon_huge?, s.minor_faults?);
        Some(format!(
            "{} / {}",
            Bytes(huge.median as usize),
            one_count(faults.median)
        ))
    })
}

/// Per workload at a thread sweep: median time at each thread count.
fn sweep_rows(results: &Results, workload: Workload) -> Vec<Vec<String>> {
    let mut contenders: Vec<_> = results.summaries.iter().map(|s| s.contender).collect();
    contenders.dedup();
    contenders.sort();
    contenders.dedup();
    contenders
        .into_iter()
        .map(|c| {
            let mut row = vec![c.name().to_owned()];
            for &t in &results.threads {
                let s = results.of_workload(workload, t).find(|s| s.contender == c);
                row.push(seconds(s.and_then(|s| s.time_s)));
            }
            row
        })
        .collect()
}

/// Per workload whose phase times matter: the median time of every phase.
fn phase_rows(
    results: &Results,
    workload: Workload,
    threads: usize,
) -> (Vec<String>, Vec<Vec<String>>) {
    let summaries: Vec<&Summary> = results.of_workload(workload, threads).collect();
    let names: Vec<String> = summaries
        .iter()
        .find(|s| !s.phase_s.is_empty())
        .map(|s| s.phase_s.iter().map(|(n, _)| n.clone()).collect())
        .unwrap_or_default();
    let rows = summaries
        .iter()
        .map(|s| {
            let mut row = vec![s.contender.name().to_owned()];
            for name in &names {
                let t = s.phase_s.iter().find(|(n, _)| n == name).map(|(_, t)| *t);
                row.push(seconds(t));
            }
            row
        })
        .collect();
    let mut head = vec!["contender".to_owned()];
    head.extend(names);
    (head, rows)
}

fn vec_table(head: &[String], rows: &[Vec<String>], markdown: bool) -> String {
    if markdown {
        let mut out = format!(
            "| {} |\n|---|{}\n",
            head.join(" | "),
            "---:|".repeat(head.len() - 1)
        );
        for row in rows {
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
        out
    } else {
        let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
        for row in rows {
            for (w, c) in widths.iter_mut().zip(row) {
                *w = (*w).max(c.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(head).chain(rows.iter().map(Vec::as_slice)) {
            let mut l = String::from(" ");
            for (i, (c, w)) in row.iter().zip(&widths).enumerate() {
                let pad = " ".repeat(w - c.chars().count());
                if i == 0 {
                    let _ = write!(l, " {c}{pad}");
                } else {
                    let _ = write!(l, " {pad}{c}");
                }
            }
            out += l.trim_end();
            out.push('\n');
        }
        out
    }
}

fn repetitions(n: usize) -> String {
    match n {
        1 => "1 repetition".to_owned(),
        n => format!("{n} repetitions"),
    }
}

/// The table for the terminal: one block per workload and thread count, then the
/// sweep and the summary across workloads.
pub(crate) fn text(results: &Results) -> String {
    let mut out = String::new();
    let head = headers(results);
    for (i, workload, threads) in cells_of(results) {
        let (title, size) = heading(results, i);
        let _ = writeln!(out, "\n{title}\n  ({size}; {threads} threads)");
        let rows: Vec<[String; 10]> = results.of_workload(workload, threads).map(cells).collect();
        out += &aligned(head.clone(), &rows, LEFT);
        if workload.times_each_phase() {
            let (h, rows) = phase_rows(results, workload, threads);
            out += "  time of each phase:\n";
            out += &vec_table(&h, &rows, false);
        }
    }
    if results.threads.len() > 1 {
        let mut head = vec!["contender".to_owned()];
        head.extend(results.threads.iter().map(|t| format!("{t} threads")));
        for info in &results.workloads {
            let Some(w) = Workload::from_name(info.name) else {
                continue;
            };
            let _ = writeln!(out, "\n{}: time against threads", info.name);
            out += &vec_table(&head, &sweep_rows(results, w), false);
        }
    }
    out += "\nAcross every workload (geometric means of the ratios of medians):\n";
    out += &aligned(
        overall_head(results),
        &overall_rows(results),
        [true, false, false, false, true],
    );
    let _ = writeln!(
        out,
        "\n{}: medians, (smallest–largest) after them; time = workload time from \
         its start marker to its last; peak AnonHugePages = the most memory seen in \
         transparent huge pages, by the sampler or by the child at its end; minor \
         faults = the whole process's; suite took {:.0} s",
        repetitions(results.reps),
        results.total_s
    );
    out
}

/// The results in Markdown, laid out to replace the results section of
/// `docs/benchmarks.md` (charts linked as `charts/<name>.svg`).
pub(crate) fn markdown(results: &Results) -> String {
    let mut out = String::new();
    let threads: Vec<String> = results.threads.iter().map(usize::to_string).collect();
    let _ = writeln!(
        out,
        "Scale `{}`, {}, {} threads, {} CPUs; the suite took {:.0} s. \
         Medians, with the smallest and largest repetition in parentheses; ratios are to \
         `{}`. *Peak AnonHugePages* is the most of a process's memory seen in transparent \
         huge pages, by the sampler or by the child at its end; *minor faults* are the \
         whole process's.\n",
        results.scale.name(),
        repetitions(results.reps),
        threads.join(", "),
        results.cpus,
        results.total_s,
        results.reference.name(),
    );
    out += "### Across every workload\n\n";
    out += &markdown_table(
        overall_head(results),
        &overall_rows(results),
        [true, false, false, false, true],
    );
    out += "\n![time against RSS after the phase](charts/summary.svg)\n\n";

    for &t in &results.threads {
        let _ = writeln!(
            out,
            "### RSS after the phase (time vs {}), {t} threads\n",
            results.reference.name()
        );
        out += &workload_grid(results, t, |s| {
            let (after, r) = (s.rss_after?, s.time_ratio?);
            Some(format!(
                "{} ({:.2}x)",
                Bytes(after.median as usize),
                r.median
            ))
        });
        out.push('\n');
    }
    out += "![RSS retained after each workload](charts/retained.svg)\n\n";
    for &t in &results.threads {
        let _ = writeln!(
            out,
            "### Huge pages and faults (peak AnonHugePages / minor faults), {t} threads\n"
        );
        out += &huge_page_table(results, t);
        out.push('\n');
    }
    out += "![peak AnonHugePages and minor faults of each workload](charts/huge-pages.svg)\n\n";
    if results.threads.len() > 1 {
        out += "### Time against threads\n\n";
        let mut head = vec!["contender".to_owned()];
        head.extend(results.threads.iter().map(|t| format!("{t} threads")));
        for info in &results.workloads {
            let Some(w) = Workload::from_name(info.name) else {
                continue;
            };
            let _ = writeln!(out, "#### {}\n", info.name);
            out += &vec_table(&head, &sweep_rows(results, w), true);
            let _ = writeln!(out, "\n![{0}](charts/threads-{0}.svg)\n", info.name);
        }
    }

    out += "### Per workload\n\n";
    let head = headers(results);
    for (i, workload, threads) in cells_of(results) {
        let (title, size) = heading(results, i);
        let _ = writeln!(out, "#### {title} ({threads} threads)\n\n{size}.\n");
        let rows: Vec<[String; 10]> = results.of_workload(workload, threads).map(cells).collect();
        out += &markdown_table(head.clone(), &rows, LEFT);
        if workload.times_each_phase() {
            let (h, rows) = phase_rows(results, workload, threads);
            out += "\nTime of each phase:\n\n";
            out += &vec_table(&h, &rows, true);
        }
        if threads == results.threads[0] {
            let _ = writeln!(out, "\n![{0}](charts/rss-{0}.svg)", workload.name());
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_follow_their_medians() {
        let s = |median, min, max| Some(Spread { median, min, max });
        assert_eq!(seconds(s(0.51, 0.49, 0.55)), "0.51 s (0.49–0.55)");
        assert_eq!(seconds(s(0.5, 0.5, 0.5)), "0.50 s");
        assert_eq!(seconds(None), "-");
        assert_eq!(ratio(s(1.1, 1.02, 1.21)), "1.10x (1.02–1.21)");
        let mib = (1u64 << 20) as f64;
        assert_eq!(
            bytes(s(11.9 * mib, 11.5 * mib, 12.3 * mib)),
            "11.9 MiB (11.5–12.3)"
        );
        assert_eq!(bytes(s(4.0 * mib, 4.0 * mib, 4.0 * mib)), "4.0 MiB");
        assert_eq!(
            count(s(412_345.0, 410_000.0, 415_049.0)),
            "412.3k (410.0–415.0)"
        );
        assert_eq!(count(s(9_876.0, 9_000.0, 12_000.0)), "9876 (9000–12000)");
        assert_eq!(count(s(25e6, 25e6, 25e6)), "25.0M");
        assert_eq!(count(None), "-");
    }
}
