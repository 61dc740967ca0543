//! SVG charts: RSS over time per workload (one line per contender, phase ends marked),
//! the RSS each contender retains after each workload's phase, its peak memory in huge
//! pages and its minor page faults, time against threads for a sweep, and the summary:
//! time against memory left, one point per contender. Whiskers span the smallest to
//! the largest repetition.

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::{Contender, Results, Summary, Workload};

const MIB: f64 = (1 << 20) as f64;

/// A colour per contender: the allocators as families (reds glibc, blues jemalloc,
/// oranges mimalloc), arenapool green.
fn color(contender: Contender) -> RGBColor {
    match contender {
        Contender::Glibc => RGBColor(214, 39, 40),
        Contender::GlibcTrim => RGBColor(240, 110, 110),
        Contender::GlibcTrim64k => RGBColor(140, 20, 30),
        Contender::Jemalloc => RGBColor(31, 119, 180),
        Contender::JemallocTuned => RGBColor(148, 103, 189),
        Contender::JemallocBg500 => RGBColor(23, 190, 207),
        Contender::JemallocThp => RGBColor(20, 50, 110),
        Contender::Mimalloc => RGBColor(255, 127, 14),
        Contender::MimallocPurge0 => RGBColor(188, 140, 60),
        Contender::Rpmalloc => RGBColor(140, 86, 75),
        Contender::Snmalloc => RGBColor(227, 119, 194),
        Contender::Tcmalloc => RGBColor(127, 127, 127),
        Contender::Arenapool => RGBColor(44, 160, 44),
        Contender::ArenapoolWarm => RGBColor(152, 223, 138),
        Contender::ArenapoolHuge => RGBColor(110, 180, 60),
        Contender::ArenapoolPhase => RGBColor(0, 100, 40),
    }
}

/// Writes `rss-<workload>.svg` for every workload, `retained.svg`, `huge-pages.svg`,
/// `summary.svg`, and `threads-<workload>.svg` for every workload when several thread
/// counts ran; returns the paths.
pub(crate) fn write_all(results: &Results, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut paths = Vec::new();
    let mut draw = |name: String, f: &dyn Fn(&Path) -> DrawResult| {
        let path = dir.join(name);
        f(&path).map_err(|e| format!("cannot draw {}: {e}", path.display()))?;
        paths.push(path);
        Ok::<(), String>(())
    };
    for info in &results.workloads {
        let Some(workload) = Workload::from_name(info.name) else {
            continue;
        };
        draw(format!("rss-{}.svg", workload.name()), &|p| {
            timeline(results, workload, p)
        })?;
        if results.threads.len() > 1 {
            draw(format!("threads-{}.svg", workload.name()), &|p| {
                threads(results, workload, p)
            })?;
        }
    }
    draw("retained.svg".to_owned(), &|p| retained(results, p))?;
    draw("huge-pages.svg".to_owned(), &|p| huge_pages(results, p))?;
    draw("summary.svg".to_owned(), &|p| summary(results, p))?;
    Ok(paths)
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// The contenders that appear in the summaries, in table order.
fn contenders(results: &Results) -> Vec<Contender> {
    let mut c: Vec<Contender> = results.summaries.iter().map(|s| s.contender).collect();
    c.sort();
    c.dedup();
    c
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn canvas(path: &Path, size: (u32, u32)) -> Result<Area<'_>, Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    Ok(root)
}

/// A vertical whisker from `lo` to `hi` at `x`.
fn whisker<X: Clone + 'static, Y: 'static>(x: X, lo: Y, hi: Y, c: RGBColor) -> PathElement<(X, Y)> {
    PathElement::new(vec![(x.clone(), lo), (x, hi)], c.stroke_width(1))
}

/// RSS over time of each contender's median run on `workload`, at the first thread
/// count.
fn timeline(results: &Results, workload: Workload, path: &Path) -> DrawResult {
    let series: Vec<_> = results
        .of_workload(workload, results.threads[0])
        .filter_map(|s| Some((s.contender, &results.runs[s.median_run?])))
        .collect();
    let x_max = series
        .iter()
        .flat_map(|(_, r)| r.phases.last().map(|p| p.at_ms))
        .max()
        .unwrap_or(1) as f64
        / 1000.0;
    let y_max = series
        .iter()
        .flat_map(|(_, r)| {
            let samples = r.timeline.iter().map(|s| s.rss);
            samples.chain(r.phases.iter().map(|p| p.rss))
        })
        .max()
        .unwrap_or(1) as f64
        / MIB;

    let shown: Vec<Contender> = series.iter().map(|(c, _)| *c).collect();
    let (root, plot) = with_legend(path, (1100, 540), &shown)?;
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            format!("{workload}: RSS over time (median run; dots mark phase ends)"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_max.max(0.01) * 1.02, 0.0..y_max.max(1.0) * 1.08)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the process started")
        .y_desc("RSS (MiB)")
        .draw()?;
    for (contender, run) in &series {
        let c = color(*contender);
        // Up to the last phase end: what follows is the process exiting.
        let end = run.phases.last().map_or(u64::MAX, |p| p.at_ms);
        let points = run
            .timeline
            .iter()
            .filter(|s| s.ms <= end)
            .map(|s| (s.ms as f64 / 1000.0, s.rss as f64 / MIB))
            .chain(
                run.phases
                    .last()
                    .map(|p| (p.at_ms as f64 / 1000.0, p.rss as f64 / MIB)),
            );
        chart.draw_series(LineSeries::new(points, c.stroke_width(2)))?;
        chart.draw_series(
            run.phases
                .iter()
                .map(|p| Circle::new((p.at_ms as f64 / 1000.0, p.rss as f64 / MIB), 4, c.filled())),
        )?;
    }
    root.present()?;
    Ok(())
}

/// Where the retained chart's bars start: a log scale has no zero, and less than this
/// (16 KiB) is nothing.
const FLOOR: f64 = 1.0 / 64.0;

/// A figure per (workload, contender) as bars: (median, smallest, largest).
type BarValue<'a> = &'a dyn Fn(&str, Contender) -> Option<(f64, f64, f64)>;

/// How one panel of grouped bars is labelled, and where its log scale starts.
struct Bars<'a> {
    caption: &'a str,
    y_desc: &'a str,
    /// Where the bars start on the log scale: a bar below it is drawn as nothing.
    floor: f64,
    /// The log scale's base (where its grid lines are).
    base: f64,
    y_label: &'a dyn Fn(&f64) -> String,
}

/// Grouped bars on `area`: a group per workload, a bar per contender (the median) with
/// a whisker over the repetitions, on a log scale whose bars start at `bars.floor`.
fn grouped_bars(
    area: &Area<'_>,
    bars: &Bars<'_>,
    workloads: &[&str],
    contenders: &[Contender],
    value: BarValue<'_>,
) -> DrawResult {
    let slots = contenders.len() as i32 + 2;
    let y_max = workloads
        .iter()
        .flat_map(|w| contenders.iter().filter_map(|&c| value(w, c)))
        .map(|(_, _, hi)| hi)
        .fold(bars.floor * 64.0, f64::max);
    let x_end = workloads.len() as i32 * slots;
    let mut chart = ChartBuilder::on(area)
        .caption(bars.caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(60)
        .y_label_area_size(70)
        .build_cartesian_2d(
            0..x_end,
            (bars.floor / 4.0..y_max * 1.12)
                .log_scale()
                .base(bars.base)
                .zero_point(0.0),
        )?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(x_end as usize + 1)
        .x_label_formatter(&|x| {
            let (group, slot) = (x / slots, x % slots);
            match workloads.get(group as usize) {
                Some(name) if slot == slots / 2 => (*name).to_owned(),
                _ => String::new(),
            }
        })
        .x_label_style(
            ("sans-serif", 11)
                .into_font()
                .transform(FontTransform::Rotate90),
        )
        .y_desc(bars.y_desc)
        .y_label_formatter(bars.y_label)
        .draw()?;
    let floor = bars.floor;
    for (ci, &contender) in contenders.iter().enumerate() {
        let c = color(contender);
        let points: Vec<(i32, (f64, f64, f64))> = workloads
            .iter()
            .enumerate()
            .filter_map(|(wi, w)| Some((wi as i32 * slots + 1 + ci as i32, value(w, contender)?)))
            .collect();
        chart.draw_series(points.iter().map(|&(x, (v, _, _))| {
            Rectangle::new([(x, floor), (x + 1, v.max(floor))], c.filled())
        }))?;
        chart.draw_series(
            points
                .iter()
                .map(|&(x, (_, lo, hi))| whisker(x, lo.max(floor), hi.max(floor), BLACK)),
        )?;
    }
    Ok(())
}

/// The summary of `contender` on workload `w` at `threads`.
fn summary_of<'a>(
    results: &'a Results,
    w: &str,
    threads: usize,
    contender: Contender,
) -> Option<&'a Summary> {
    results
        .summaries
        .iter()
        .find(|s| s.workload.name() == w && s.contender == contender && s.threads == threads)
}

/// Grouped bars: per workload, the RSS each contender holds after the phase above what
/// it held at the start (medians), whiskers over the repetitions, at the first thread
/// count.
fn retained(results: &Results, path: &Path) -> DrawResult {
    let workloads: Vec<&str> = results.workloads.iter().map(|w| w.name).collect();
    let contenders = contenders(results);
    let threads = results.threads[0];
    // (median, min, max) retained MiB.
    let retained_mib = |w: &str, c: Contender| {
        let s = summary_of(results, w, threads, c)?;
        let start = s.rss_start?.median;
        let after = s.rss_after?;
        let mib = |b: f64| (b - start).max(0.0) / MIB;
        Some((mib(after.median), mib(after.min), mib(after.max)))
    };
    let (root, plot) = with_legend(path, (1500, 600), &contenders)?;
    let bars = Bars {
        caption: "RSS retained after the phase (MiB above the RSS at its start; lower is better)",
        y_desc: "retained (MiB, log scale)",
        floor: FLOOR,
        base: 2.0,
        y_label: &|v| {
            if *v >= 1.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.3}")
            }
        },
    };
    grouped_bars(&plot, &bars, &workloads, &contenders, &retained_mib)?;
    root.present()?;
    Ok(())
}

/// Two panels of grouped bars, per workload and contender at the first thread count:
/// the peak of its memory in transparent huge pages (`AnonHugePages`), and its minor
/// page faults (medians, whiskers over the repetitions).
fn huge_pages(results: &Results, path: &Path) -> DrawResult {
    let workloads: Vec<&str> = results.workloads.iter().map(|w| w.name).collect();
    let contenders = contenders(results);
    let threads = results.threads[0];
    let huge_mib = |w: &str, c: Contender| {
        let huge = summary_of(results, w, threads, c)?.peak_anon_huge?;
        Some((huge.median / MIB, huge.min / MIB, huge.max / MIB))
    };
    let faults = |w: &str, c: Contender| {
        let f = summary_of(results, w, threads, c)?.minor_faults?;
        Some((f.median, f.min, f.max))
    };
    let (root, plot) = with_legend(path, (1500, 1100), &contenders)?;
    let (top, bottom) = plot.split_vertically(550);
    let huge = Bars {
        caption: "Peak memory in transparent huge pages (AnonHugePages, sampled)",
        y_desc: "peak AnonHugePages (MiB, log scale)",
        // Huge pages come in 2 MiB: no bar is none.
        floor: 1.0,
        base: 2.0,
        y_label: &|v| match *v {
            v if v >= 1.0 => format!("{v:.0}"),
            _ => String::new(),
        },
    };
    grouped_bars(&top, &huge, &workloads, &contenders, &huge_mib)?;
    let minor = Bars {
        caption: "Minor page faults of the whole process (lower is better)",
        y_desc: "minor faults (log scale)",
        floor: 100.0,
        base: 10.0,
        y_label: &|v| match *v {
            v if v >= 1e6 => format!("{:.0}M", v / 1e6),
            v if v >= 1e3 => format!("{:.0}k", v / 1e3),
            v if v >= 100.0 => format!("{v:.0}"),
            _ => String::new(),
        },
    };
    grouped_bars(&bottom, &minor, &workloads, &contenders, &faults)?;
    root.present()?;
    Ok(())
}

/// Time against threads for `workload`: one line per contender through the medians,
/// whiskers over the repetitions.
fn threads(results: &Results, workload: Workload, path: &Path) -> DrawResult {
    let contenders = contenders(results);
    // The thread counts sit evenly spaced, in the order given, labelled with their count.
    let points = |c: Contender| -> Vec<(f64, (f64, f64, f64))> {
        results
            .threads
            .iter()
            .enumerate()
            .filter_map(|(i, &t)| {
                let s = results
                    .of_workload(workload, t)
                    .find(|s| s.contender == c)?;
                let time = s.time_s?;
                Some((i as f64, (time.median, time.min, time.max)))
            })
            .collect()
    };
    let n = results.threads.len() as f64;
    let y_max = contenders
        .iter()
        .flat_map(|&c| points(c))
        .map(|(_, (_, _, hi))| hi)
        .fold(0.001, f64::max);

    let (root, plot) = with_legend(path, (1100, 540), &contenders)?;
    let mut chart = ChartBuilder::on(&plot)
        .caption(
            format!("{workload}: time against threads (lower is better)"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..n - 0.5, 0.0..y_max * 1.08)?;
    chart
        .configure_mesh()
        .x_desc("threads")
        .y_desc("time (s)")
        .x_labels(results.threads.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.round();
            match results.threads.get(i as usize) {
                Some(t) if (x - i).abs() < 1e-6 && i >= 0.0 => t.to_string(),
                _ => String::new(),
            }
        })
        .draw()?;
    for &c in &contenders {
        let col = color(c);
        let p = points(c);
        chart.draw_series(LineSeries::new(
            p.iter().map(|&(t, (m, _, _))| (t, m)),
            col.stroke_width(2),
        ))?;
        chart.draw_series(p.iter().map(|&(t, (_, lo, hi))| whisker(t, lo, hi, col)))?;
        chart.draw_series(
            p.iter()
                .map(|&(t, (m, _, _))| Circle::new((t, m), 3, col.filled())),
        )?;
    }
    root.present()?;
    Ok(())
}

/// The summary: per contender, the geometric mean over workloads of its time ratio (x)
/// and of its RSS-after ratio (y), both to the reference contender; lower left is
/// better. Horizontal whiskers: the same means taken over the fastest and the slowest
/// repetitions.
fn summary(results: &Results, path: &Path) -> DrawResult {
    let points: Vec<(Contender, f64, f64, f64, f64)> = results
        .overall
        .iter()
        .filter_map(|o| {
            let c = Contender::from_name(o.contender)?;
            let t = o.time_ratio?;
            Some((
                c,
                t,
                o.rss_after_ratio?,
                o.time_ratio_min.unwrap_or(t),
                o.time_ratio_max.unwrap_or(t),
            ))
        })
        .collect();
    let bounds = |vals: &mut dyn Iterator<Item = f64>| {
        vals.fold((1.0f64, 1.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)))
    };
    let (x_lo, x_hi) = bounds(&mut points.iter().flat_map(|p| [p.3, p.4]));
    let (y_lo, y_hi) = bounds(&mut points.iter().map(|p| p.2));

    let root = canvas(path, (960, 640))?;
    let reference = results.reference.name();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "Across workloads: time against RSS left after the phase \
                 (geometric means of ratios to {reference}; lower left is better)"
            ),
            ("sans-serif", 16),
        )
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x_lo / 1.25..x_hi * 1.25).log_scale(),
            (y_lo / 1.5..y_hi * 1.5).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc(format!("time / {reference}'s time (log scale)"))
        .y_desc(format!("RSS after / {reference}'s (log scale)"))
        .x_label_formatter(&|x| format!("{x:.2}x"))
        .y_label_formatter(&|y| format!("{y:.2}x"))
        .draw()?;
    for &(c, x, y, lo, hi) in &points {
        let col = color(c);
        chart.draw_series([PathElement::new(
            vec![(lo, y), (hi, y)],
            col.stroke_width(1),
        )])?;
        chart.draw_series([Circle::new((x, y), 6, col.filled())])?;
        chart.draw_series([Text::new(
            c.name().to_owned(),
            (x, y),
            ("sans-serif", 13)
                .into_font()
                .color(&col)
                .pos(Pos::new(HPos::Left, VPos::Bottom)),
        )])?;
    }
    root.present()?;
    Ok(())
}

/// Width of the legend column right of a chart.
const LEGEND_WIDTH: u32 = 170;

/// A white canvas of `size` with the contenders' legend in a column on its right;
/// returns the whole canvas (to present) and the area left for the chart.
fn with_legend<'a>(
    path: &'a Path,
    size: (u32, u32),
    contenders: &[Contender],
) -> Result<(Area<'a>, Area<'a>), Box<dyn std::error::Error>> {
    let root = canvas(path, size)?;
    let (plot, side) = root.split_horizontally(size.0 - LEGEND_WIDTH);
    for (i, &c) in contenders.iter().enumerate() {
        let y = 48 + 20 * i as i32;
        side.draw(&Rectangle::new(
            [(8, y - 5), (24, y + 5)],
            color(c).filled(),
        ))?;
        side.draw(&Text::new(
            c.name(),
            (30, y - 7),
            ("sans-serif", 13).into_font().color(&BLACK),
        ))?;
    }
    Ok((root, plot))
}
