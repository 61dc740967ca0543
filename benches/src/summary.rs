//! The summary across workloads: per contender, one time figure and one memory figure,
//! so that "which allocator should I use" has a short answer.

use crate::stats::geomean;
use crate::{Contender, Summary};

/// One contender across every workload and thread count the suite ran: geometric means
/// of its ratios to the reference contender.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Overall {
    /// The contender.
    pub contender: &'static str,
    /// Cells (workload, thread count) in the means: those where both it and the
    /// reference finished.
    pub cells: usize,
    /// Cells it did not finish (crashed, timed out).
    pub failed: usize,
    /// Whether its binary was in this build of the suite.
    pub available: bool,
    /// Geometric mean of its median time over the reference's median time.
    pub time_ratio: Option<f64>,
    /// Geometric mean of the fastest of its repetitions over the reference's median,
    /// and of the slowest: how much of `time_ratio` is noise.
    pub time_ratio_min: Option<f64>,
    /// See `time_ratio_min`.
    pub time_ratio_max: Option<f64>,
    /// Geometric mean of its median RSS after the phase over the reference's.
    pub rss_after_ratio: Option<f64>,
}

/// The overall figures of `contenders`, from the per-cell summaries.
pub(crate) fn overall(contenders: &[Contender], summaries: &[Summary]) -> Vec<Overall> {
    contenders
        .iter()
        .map(|&c| {
            let mine: Vec<&Summary> = summaries.iter().filter(|s| s.contender == c).collect();
            let both: Vec<&Summary> = mine
                .iter()
                .copied()
                .filter(|s| s.time_ratio.is_some() && s.rss_after_ratio.is_some())
                .collect();
            let mean =
                |f: &dyn Fn(&Summary) -> Option<f64>| geomean(both.iter().filter_map(|s| f(s)));
            Overall {
                contender: c.name(),
                cells: both.len(),
                failed: mine
                    .iter()
                    .filter(|s| s.available && s.ok_runs < s.runs)
                    .count(),
                available: mine.iter().all(|s| s.available),
                time_ratio: mean(&|s| s.time_ratio.map(|r| r.median)),
                time_ratio_min: mean(&|s| s.time_ratio.map(|r| r.min)),
                time_ratio_max: mean(&|s| s.time_ratio.map(|r| r.max)),
                rss_after_ratio: mean(&|s| s.rss_after_ratio),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{PhaseRecord, Run, RunStatus};
    use crate::{Options, Results, Workload};

    fn run(contender: Contender, workload: Workload, time: f64, rss_after: usize) -> Run {
        let mut r = Run::new(contender, workload, 2, 0, RunStatus::Ok);
        for (name, elapsed_s, rss) in [("start", 0.0, 1 << 20), ("done", time, rss_after)] {
            r.phases.push(PhaseRecord {
                name: name.to_owned(),
                rss,
                elapsed_s,
                at_ms: 0,
            });
        }
        r.checksum = Some("1".to_owned());
        r
    }

    #[test]
    fn geometric_means_over_workloads() {
        let options = Options {
            contenders: vec![Contender::Jemalloc, Contender::Arenapool, Contender::Glibc],
            workloads: vec![Workload::Churn, Workload::Larson],
            ..Options::default()
        };
        let mut crashed = Run::new(Contender::Glibc, Workload::Larson, 2, 0, RunStatus::Ok);
        crashed.status = RunStatus::Signal {
            signal: 11,
            out_of_memory: false,
            at_exit: false,
        };
        let runs = vec![
            run(Contender::Jemalloc, Workload::Churn, 1.0, 100 << 20),
            run(Contender::Arenapool, Workload::Churn, 2.0, 10 << 20),
            run(Contender::Glibc, Workload::Churn, 1.0, 100 << 20),
            run(Contender::Jemalloc, Workload::Larson, 1.0, 100 << 20),
            run(Contender::Arenapool, Workload::Larson, 0.5, 40 << 20),
            crashed,
        ];
        let r = Results::new(&options, runs, 0, 1.0);
        let [jemalloc, arenapool, glibc] = &r.overall[..] else {
            panic!("{:?}", r.overall);
        };
        assert_eq!(jemalloc.time_ratio, Some(1.0));
        assert_eq!(jemalloc.cells, 2);
        // Time: sqrt(2.0 x 0.5) = 1; memory: sqrt(0.1 x 0.4) = 0.2.
        assert!((arenapool.time_ratio.unwrap() - 1.0).abs() < 1e-9);
        assert!((arenapool.rss_after_ratio.unwrap() - 0.2).abs() < 1e-9);
        // One repetition: no spread.
        assert_eq!(arenapool.time_ratio_min, arenapool.time_ratio_max);
        // The crashed cell is counted as failed and left out of the means.
        assert_eq!((glibc.cells, glibc.failed), (1, 1));
        assert_eq!(glibc.time_ratio, Some(1.0));
    }
}
