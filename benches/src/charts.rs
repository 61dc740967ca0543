//! SVG charts: RSS over time per workload (one line per contender, phase ends marked),
//! and a summary of the RSS each contender retains after each workload's phase.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use crate::{Contender, Results, Workload};

const MIB: f64 = (1 << 20) as f64;

fn color(contender: Contender) -> RGBColor {
    match contender {
        Contender::Glibc => RGBColor(214, 39, 40),
        Contender::Jemalloc => RGBColor(31, 119, 180),
        Contender::JemallocTuned => RGBColor(148, 103, 189),
        Contender::Mimalloc => RGBColor(255, 127, 14),
        Contender::Arenapool => RGBColor(44, 160, 44),
    }
}

/// Writes `rss-<workload>.svg` for every workload and `retained.svg`; returns the paths.
pub(crate) fn write_all(results: &Results, dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut paths = Vec::new();
    for info in &results.workloads {
        let Some(workload) = Workload::from_name(info.name) else {
            continue;
        };
        let path = dir.join(format!("rss-{}.svg", workload.name()));
        timeline(results, workload, &path)
            .map_err(|e| format!("cannot draw {}: {e}", path.display()))?;
        paths.push(path);
    }
    let path = dir.join("retained.svg");
    retained(results, &path).map_err(|e| format!("cannot draw {}: {e}", path.display()))?;
    paths.push(path);
    Ok(paths)
}

type DrawResult = Result<(), Box<dyn std::error::Error>>;

/// RSS over time of each contender's median run on `workload`.
fn timeline(results: &Results, workload: Workload, path: &Path) -> DrawResult {
    let series: Vec<_> = results
        .of_workload(workload)
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

    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
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
        chart
            .draw_series(LineSeries::new(points, c.stroke_width(2)))?
            .label(contender.name())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart.draw_series(
            run.phases
                .iter()
                .map(|p| Circle::new((p.at_ms as f64 / 1000.0, p.rss as f64 / MIB), 4, c.filled())),
        )?;
    }
    legend(&mut chart)?;
    root.present()?;
    Ok(())
}

/// Grouped bars: per workload, the RSS each contender holds after the phase above what
/// it held at the start.
fn retained(results: &Results, path: &Path) -> DrawResult {
    let workloads: Vec<&str> = results.workloads.iter().map(|w| w.name).collect();
    let contenders: Vec<Contender> = {
        let mut c: Vec<Contender> = results.summaries.iter().map(|s| s.contender).collect();
        c.sort();
        c.dedup();
        c
    };
    let slots = contenders.len() as i32 + 2;
    let retained_mib = |w: &str, c: Contender| {
        results
            .summaries
            .iter()
            .find(|s| s.workload.name() == w && s.contender == c)
            .and_then(|s| Some(s.rss_after?.saturating_sub(s.rss_start?) as f64 / MIB))
    };
    let y_max = workloads
        .iter()
        .flat_map(|w| contenders.iter().filter_map(|&c| retained_mib(w, c)))
        .fold(1.0, f64::max);

    let root = SVGBackend::new(path, (1100, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let x_end = workloads.len() as i32 * slots;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "RSS retained after the phase (MiB above the RSS at its start; lower is better)",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0..x_end, 0.0..y_max * 1.12)?;
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
        .y_desc("retained (MiB)")
        .draw()?;
    for (ci, &contender) in contenders.iter().enumerate() {
        let c = color(contender);
        let bars: Vec<(i32, f64)> = workloads
            .iter()
            .enumerate()
            .filter_map(|(wi, w)| {
                Some((
                    wi as i32 * slots + 1 + ci as i32,
                    retained_mib(w, contender)?,
                ))
            })
            .collect();
        chart
            .draw_series(
                bars.iter()
                    .map(|&(x, v)| Rectangle::new([(x, 0.0), (x + 1, v)], c.filled())),
            )?
            .label(contender.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], c.filled()));
        chart.draw_series(bars.iter().map(|&(x, v)| {
            Text::new(
                format!("{v:.0}"),
                (x, v + y_max * 0.01),
                ("sans-serif", 9).into_font().color(&BLACK),
            )
        }))?;
    }
    legend(&mut chart)?;
    root.present()?;
    Ok(())
}

/// The contenders' legend, in the upper right corner of `chart`.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
}
