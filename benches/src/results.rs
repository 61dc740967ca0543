//! What the suite measured: every run, the medians and spreads per (workload, thread
//! count, contender), and the results file.

use std::path::Path;

use serde::{Serialize, Serializer};

use crate::sampler::Sample;
use crate::stats::{median_index, Spread};
use crate::summary::Overall;
use crate::{Contender, Options, Scale, Workload};

/// How a child run ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RunStatus {
    /// Exited 0 after printing its markers and checksum.
    Ok,
    /// Exited with a non-zero code.
    Exit {
        /// The exit code.
        code: i32,
        /// The child said it ran out of memory.
        out_of_memory: bool,
    },
    /// Killed by a signal (SIGKILL from the kernel's OOM killer, SIGABRT, SIGSEGV…).
    Signal {
        /// The signal number.
        signal: i32,
        /// The child said it ran out of memory before it died.
        out_of_memory: bool,
        /// It died after printing its checksum: the workload had finished, the process
        /// crashed on its way out.
        at_exit: bool,
    },
    /// Still running at the timeout, and killed.
    Timeout {
        /// The timeout in seconds.
        seconds: u64,
    },
    /// Could not be started, or exited 0 without the protocol's messages.
    Failed {
        /// What went wrong.
        message: String,
    },
    /// The contender's binary is not in this build of the suite: not run.
    NotAvailable {
        /// How to build it.
        how: String,
    },
}

impl RunStatus {
    /// Whether the run finished normally.
    pub fn is_ok(&self) -> bool {
        matches!(self, RunStatus::Ok)
    }

    /// A few words for tables.
    pub fn describe(&self) -> String {
        match self {
            RunStatus::Ok => "ok".to_owned(),
            RunStatus::Exit {
                out_of_memory: true,
                ..
            }
            | RunStatus::Signal {
                out_of_memory: true,
                ..
            } => "OUT OF MEMORY".to_owned(),
            RunStatus::Exit { code, .. } => format!("CRASHED (exit {code})"),
            RunStatus::Signal { signal: 9, .. } => "KILLED (SIGKILL: out of memory?)".to_owned(),
            RunStatus::Signal {
                signal,
                at_exit: true,
                ..
            } => format!("CRASHED (signal {signal}, at exit)"),
            RunStatus::Signal { signal, .. } => format!("CRASHED (signal {signal})"),
            RunStatus::Timeout { seconds } => format!("TIMED OUT ({seconds} s)"),
            RunStatus::Failed { message } => format!("FAILED ({message})"),
            RunStatus::NotAvailable { how } => how.clone(),
        }
    }
}

/// A phase end as recorded by the runner.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseRecord {
    /// The phase's name.
    pub name: String,
    /// RSS in bytes, as the child read it at the phase end.
    pub rss: usize,
    /// Seconds from the child's `start` marker, by the child's clock.
    pub elapsed_s: f64,
    /// Milliseconds from the spawn to the runner reading the marker (the timeline's
    /// clock).
    pub at_ms: u64,
}

/// One child run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// The contender.
    #[serde(serialize_with = "contender_name")]
    pub contender: Contender,
    /// The workload.
    #[serde(serialize_with = "workload_name")]
    pub workload: Workload,
    /// Threads of the parallel phases.
    pub threads: usize,
    /// Repetition number, from 0.
    pub rep: usize,
    /// How it ended.
    pub status: RunStatus,
    /// Wall time from spawn to exit, in seconds.
    pub wall_s: f64,
    /// User CPU time of the child, in seconds.
    pub user_s: f64,
    /// System CPU time of the child, in seconds.
    pub sys_s: f64,
    /// Peak RSS (the kernel's high-water mark), in bytes.
    pub peak_rss: usize,
    /// Peak of the child's anonymous memory in transparent huge pages (`AnonHugePages`
    /// of `/proc/<pid>/smaps_rollup`), in bytes, over the sampler's readings and the
    /// child's own at its end; `None` if it was never read.
    pub peak_anon_huge: Option<usize>,
    /// Minor page faults of the child (`ru_minflt`): pages it touched that were not
    /// resident, served without I/O. A huge page is one fault for 2 MiB.
    pub minor_faults: u64,
    /// The phase ends, in order.
    pub phases: Vec<PhaseRecord>,
    /// The workload's checksum, if printed.
    pub checksum: Option<String>,
    /// The last lines the child wrote to stderr.
    pub stderr: String,
    /// RSS every ~10 ms from spawn to exit.
    pub timeline: Vec<Sample>,
}

impl Run {
    /// A run that has not happened yet, with `status`.
    pub fn new(
        contender: Contender,
        workload: Workload,
        threads: usize,
        rep: usize,
        status: RunStatus,
    ) -> Run {
        Run {
            contender,
            workload,
            threads,
            rep,
            status,
            wall_s: 0.0,
            user_s: 0.0,
            sys_s: 0.0,
            peak_rss: 0,
            peak_anon_huge: None,
            minor_faults: 0,
            phases: Vec::new(),
            checksum: None,
            stderr: String::new(),
            timeline: Vec::new(),
        }
    }

    /// Workload time: from the `start` marker to the last one, by the child's clock.
    pub fn time_s(&self) -> Option<f64> {
        self.phases.last().map(|p| p.elapsed_s)
    }

    /// RSS at the `start` marker.
    pub fn rss_start(&self) -> Option<usize> {
        self.phases.first().map(|p| p.rss)
    }

    /// RSS at the last marker: after the phase.
    pub fn rss_after(&self) -> Option<usize> {
        self.phases.last().map(|p| p.rss)
    }

    /// How long the phase ending at marker `name` took, from the marker before it.
    pub fn phase_s(&self, name: &str) -> Option<f64> {
        let i = self.phases.iter().position(|p| p.name == name)?;
        let before = i.checked_sub(1).map_or(0.0, |b| self.phases[b].elapsed_s);
        Some(self.phases[i].elapsed_s - before)
    }
}

/// The figures of one (workload, thread count, contender) over its repetitions: the
/// median of each, with its smallest and largest value.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The workload.
    #[serde(serialize_with = "workload_name")]
    pub workload: Workload,
    /// Threads of the parallel phases.
    pub threads: usize,
    /// The contender.
    #[serde(serialize_with = "contender_name")]
    pub contender: Contender,
    /// Repetitions run.
    pub runs: usize,
    /// Repetitions that finished normally; the figures are over these.
    pub ok_runs: usize,
    /// `ok`, or what happened to the first run that did not finish normally.
    pub status: String,
    /// Whether the contender's binary was there to run.
    pub available: bool,
    /// Workload time in seconds.
    pub time_s: Option<Spread>,
    /// Time over the reference contender's median time on the same workload and
    /// thread count.
    pub time_ratio: Option<Spread>,
    /// User + system CPU seconds of the whole child process.
    pub cpu_s: Option<Spread>,
    /// Peak RSS in bytes.
    pub peak_rss: Option<Spread>,
    /// Peak anonymous memory in transparent huge pages, in bytes (see
    /// [`Run::peak_anon_huge`]).
    pub peak_anon_huge: Option<Spread>,
    /// Minor page faults of the whole child process.
    pub minor_faults: Option<Spread>,
    /// RSS at the start marker, in bytes.
    pub rss_start: Option<Spread>,
    /// RSS after the phase (the last marker), in bytes.
    pub rss_after: Option<Spread>,
    /// Median RSS after the phase over the reference contender's.
    pub rss_after_ratio: Option<f64>,
    /// The last phase's name.
    pub after_phase: Option<String>,
    /// Median RSS at every phase end, by name, in order.
    pub phases: Vec<(String, usize)>,
    /// Time of every phase (from the marker before it), by name, in order.
    pub phase_s: Vec<(String, Spread)>,
    /// The checksum equals every other contender's on this workload and thread count.
    pub checksum_agrees: bool,
    /// Index in [`Results::runs`] of the run closest to the median time (its timeline
    /// is the one charted).
    pub median_run: Option<usize>,
}

/// A contender as the results file describes it.
#[derive(Debug, Clone, Serialize)]
pub struct ContenderInfo {
    /// Name.
    pub name: &'static str,
    /// Allocator and configuration.
    pub configuration: &'static str,
    /// Whether its binary was there to run.
    pub available: bool,
}

/// Everything one suite run produced: the results file's content.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// Workload sizes.
    pub scale: Scale,
    /// Repetitions per (workload, thread count, contender).
    pub reps: usize,
    /// Thread counts of the parallel phases (several: a sweep).
    pub threads: Vec<usize>,
    /// Logical CPUs of the machine.
    pub cpus: usize,
    /// Seconds since the Unix epoch when the suite started.
    pub started_unix: u64,
    /// Seconds the whole suite took.
    pub total_s: f64,
    /// The contender every ratio is relative to: `jemalloc` when it ran, else the
    /// first contender.
    #[serde(serialize_with = "contender_name")]
    pub reference: Contender,
    /// The contenders, with their configuration.
    pub contenders: Vec<ContenderInfo>,
    /// The workloads, with what they stand for and their size.
    pub workloads: Vec<WorkloadInfo>,
    /// Per contender, across every workload and thread count: the geometric means of
    /// its time ratio and its RSS-after ratio.
    pub overall: Vec<Overall>,
    /// Figures per (workload, thread count, contender), in that order.
    pub summaries: Vec<Summary>,
    /// Every run, in the order they ran.
    pub runs: Vec<Run>,
}

/// A workload as the results file describes it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadInfo {
    /// Name.
    pub name: &'static str,
    /// What it stands for.
    pub description: &'static str,
    /// Its size at the suite's scale.
    pub size: String,
}

impl Results {
    /// Computes the summaries of `runs`.
    pub fn new(options: &Options, runs: Vec<Run>, started_unix: u64, total_s: f64) -> Results {
        let reference = reference(&options.contenders);
        let mut summaries = Vec::new();
        for &workload in &options.workloads {
            for &threads in &options.threads {
                let cell = |c| summarize(&runs, workload, threads, c);
                let base = cell(reference);
                let agreed = checksums_agree(&runs, workload, threads);
                for &contender in &options.contenders {
                    let mut s = cell(contender);
                    s.checksum_agrees = agreed;
                    let base_time = base.time_s.map(|t| t.median).filter(|&t| t > 0.0);
                    s.time_ratio = s.time_s.zip(base_time).map(|(t, b)| t.over(b));
                    let base_rss = base.rss_after.map(|r| r.median).filter(|&r| r > 0.0);
                    s.rss_after_ratio = s.rss_after.zip(base_rss).map(|(r, b)| r.median / b);
                    summaries.push(s);
                }
            }
        }
        Results {
            scale: options.scale,
            reps: options.reps,
            threads: options.threads.clone(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            started_unix,
            total_s,
            reference,
            contenders: options
                .contenders
                .iter()
                .map(|&c| ContenderInfo {
                    name: c.name(),
                    configuration: c.configuration(),
                    available: runs
                        .iter()
                        .filter(|r| r.contender == c)
                        .all(|r| !matches!(r.status, RunStatus::NotAvailable { .. })),
                })
                .collect(),
            workloads: options
                .workloads
                .iter()
                .map(|&w| WorkloadInfo {
                    name: w.name(),
                    description: w.description(),
                    size: w.size(options.scale),
                })
                .collect(),
            overall: crate::summary::overall(&options.contenders, &summaries),
            summaries,
            runs,
        }
    }

    /// The summaries of one workload at one thread count, in contender order.
    pub fn of_workload(
        &self,
        workload: Workload,
        threads: usize,
    ) -> impl Iterator<Item = &Summary> {
        self.summaries
            .iter()
            .filter(move |s| s.workload == workload && s.threads == threads)
    }

    /// Writes the results file (pretty JSON).
    ///
    /// # Errors
    ///
    /// The file cannot be written.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        let json = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(path, json + "\n")
    }
}

/// The contender ratios are relative to: jemalloc, the common default, when it runs.
fn reference(contenders: &[Contender]) -> Contender {
    if contenders.contains(&Contender::Jemalloc) {
        Contender::Jemalloc
    } else {
        contenders.first().copied().unwrap_or(Contender::Jemalloc)
    }
}

fn checksums_agree(runs: &[Run], workload: Workload, threads: usize) -> bool {
    let mut sums = runs
        .iter()
        .filter(|r| r.workload == workload && r.threads == threads && r.status.is_ok())
        .filter_map(|r| r.checksum.as_deref());
    match sums.next() {
        Some(first) => sums.all(|s| s == first),
        None => true,
    }
}

fn summarize(runs: &[Run], workload: Workload, threads: usize, contender: Contender) -> Summary {
    let all: Vec<(usize, &Run)> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.workload == workload && r.threads == threads)
        .filter(|(_, r)| r.contender == contender)
        .collect();
    let ok: Vec<(usize, &Run)> = all
        .iter()
        .copied()
        .filter(|(_, r)| r.status.is_ok())
        .collect();
    let status = all
        .iter()
        .find(|(_, r)| !r.status.is_ok())
        .map_or_else(|| "ok".to_owned(), |(_, r)| r.status.describe());
    let times: Vec<f64> = ok.iter().filter_map(|(_, r)| r.time_s()).collect();
    let spread = |f: &dyn Fn(&Run) -> Option<f64>| Spread::of(ok.iter().filter_map(|(_, r)| f(r)));
    let bytes = |f: &dyn Fn(&Run) -> Option<usize>| spread(&|r| f(r).map(|b| b as f64));
    let first = ok.first().map(|(_, r)| *r);
    let names: Vec<&str> = first.map_or_else(Vec::new, |r| {
        r.phases.iter().map(|p| p.name.as_str()).collect()
    });
    let phases = names
        .iter()
        .filter_map(|&name| {
            let rss = bytes(&|r| r.phases.iter().find(|q| q.name == name).map(|q| q.rss))?;
            Some((name.to_owned(), rss.median as usize))
        })
        .collect();
    let phase_s = names
        .iter()
        .skip(1)
        .filter_map(|&name| Some((name.to_owned(), spread(&|r| r.phase_s(name))?)))
        .collect();
    Summary {
        workload,
        threads,
        contender,
        runs: all.len(),
        ok_runs: ok.len(),
        status,
        available: !all
            .iter()
            .any(|(_, r)| matches!(r.status, RunStatus::NotAvailable { .. })),
        time_s: Spread::of(times.iter().copied()),
        time_ratio: None,
        cpu_s: spread(&|r| Some(r.user_s + r.sys_s)),
        peak_rss: bytes(&|r| Some(r.peak_rss)),
        peak_anon_huge: bytes(&|r| r.peak_anon_huge),
        minor_faults: spread(&|r| Some(r.minor_faults as f64)),
        rss_start: bytes(&Run::rss_start),
        rss_after: bytes(&Run::rss_after),
        rss_after_ratio: None,
        after_phase: first.and_then(|r| r.phases.last()).map(|p| p.name.clone()),
        phases,
        phase_s,
        checksum_agrees: true,
        median_run: median_index(&times).map(|i| ok[i].0),
    }
}

fn contender_name<S: Serializer>(c: &Contender, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}

fn workload_name<S: Serializer>(w: &Workload, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(w.name())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(contender: Contender, rep: usize, time: f64, rss_after: usize) -> Run {
        let mut r = Run::new(contender, Workload::S1Phase, 2, rep, RunStatus::Ok);
        r.peak_rss = 200 << 20;
        r.minor_faults = 1_000 * (rep as u64 + 1);
        r.peak_anon_huge = Some((2 * rep) << 20);
        r.phases = vec![
            PhaseRecord {
                name: "start".to_owned(),
                rss: 1 << 20,
                elapsed_s: 0.0,
                at_ms: 1,
            },
            PhaseRecord {
                name: "run".to_owned(),
                rss: 100 << 20,
                elapsed_s: time * 0.75,
                at_ms: 2,
            },
            PhaseRecord {
                name: "dropped".to_owned(),
                rss: rss_after,
                elapsed_s: time,
                at_ms: 3,
            },
        ];
        r.checksum = Some("00000000000000ab".to_owned());
        r
    }

    /// Every figure carries the smallest and largest repetition next to its median,
    /// and ratios carry the contender's own spread over the reference's median.
    #[test]
    fn summaries_carry_spreads_and_ratios() {
        let options = Options {
            contenders: vec![Contender::Jemalloc, Contender::Arenapool],
            workloads: vec![Workload::S1Phase],
            ..Options::default()
        };
        let runs = vec![
            run(Contender::Jemalloc, 0, 1.0, 40 << 20),
            run(Contender::Arenapool, 0, 1.5, 10 << 20),
            run(Contender::Jemalloc, 1, 2.0, 40 << 20),
            run(Contender::Arenapool, 1, 1.0, 10 << 20),
            run(Contender::Jemalloc, 2, 3.0, 40 << 20),
            run(Contender::Arenapool, 2, 4.0, 12 << 20),
        ];
        let r = Results::new(&options, runs, 0, 1.0);
        assert_eq!(r.reference, Contender::Jemalloc);
        let a = &r.summaries[1];
        assert_eq!(a.contender, Contender::Arenapool);
        let t = a.time_s.unwrap();
        assert_eq!((t.min, t.median, t.max), (1.0, 1.5, 4.0));
        let ratio = a.time_ratio.unwrap();
        assert_eq!((ratio.min, ratio.median, ratio.max), (0.5, 0.75, 2.0));
        assert_eq!(a.rss_after_ratio, Some(0.25));
        let after = a.rss_after.unwrap();
        assert_eq!(
            (after.min, after.max),
            ((10 << 20) as f64, (12 << 20) as f64)
        );
        let (name, run_s) = &a.phase_s[0];
        assert_eq!(name, "run");
        assert_eq!((run_s.min, run_s.max), (0.75, 3.0));
        assert!(a.checksum_agrees);
        assert_eq!(a.ok_runs, 3);
        let faults = a.minor_faults.unwrap();
        assert_eq!((faults.min, faults.median, faults.max), (1e3, 2e3, 3e3));
        let huge = a.peak_anon_huge.unwrap();
        assert_eq!((huge.min, huge.max), (0.0, (4 << 20) as f64));
    }

    /// A run whose huge pages were never read is left out of their spread, not counted
    /// as none.
    #[test]
    fn unread_huge_pages_are_left_out() {
        let options = Options {
            contenders: vec![Contender::Jemalloc],
            workloads: vec![Workload::S1Phase],
            ..Options::default()
        };
        let mut unread = run(Contender::Jemalloc, 0, 1.0, 40 << 20);
        unread.peak_anon_huge = None;
        let runs = vec![unread, run(Contender::Jemalloc, 2, 1.0, 40 << 20)];
        let r = Results::new(&options, runs, 0, 1.0);
        let huge = r.summaries[0].peak_anon_huge.unwrap();
        assert!(huge.is_point() && huge.median == (4 << 20) as f64);
        assert!(r.summaries[0].minor_faults.is_some_and(|f| !f.is_point()));
        let unread = Run::new(Contender::Jemalloc, Workload::S1Phase, 2, 0, RunStatus::Ok);
        let json = serde_json::to_value(&unread).unwrap();
        assert!(json["peak_anon_huge"].is_null() && json["minor_faults"] == 0);
    }

    #[test]
    fn unavailable_contenders_stay_in_the_results() {
        let options = Options {
            contenders: vec![Contender::Jemalloc, Contender::Tcmalloc],
            workloads: vec![Workload::S1Phase],
            ..Options::default()
        };
        let how = Contender::Tcmalloc.how_to_enable();
        let runs = vec![
            run(Contender::Jemalloc, 0, 1.0, 40 << 20),
            Run::new(
                Contender::Tcmalloc,
                Workload::S1Phase,
                2,
                0,
                RunStatus::NotAvailable { how: how.clone() },
            ),
        ];
        let r = Results::new(&options, runs, 0, 1.0);
        let t = &r.summaries[1];
        assert_eq!(
            (t.contender, t.ok_runs, t.runs),
            (Contender::Tcmalloc, 0, 1)
        );
        assert_eq!(t.status, how);
        assert!(t.time_s.is_none() && t.time_ratio.is_none());
        assert!(r.contenders[0].available && !r.contenders[1].available);
    }
}
