//! What the suite measured: every run, the medians per (workload, contender), and the
//! results file.

use std::path::Path;

use serde::{Serialize, Serializer};

use crate::sampler::Sample;
use crate::stats::{median, median_index};
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
            RunStatus::Signal { signal, .. } => format!("CRASHED (signal {signal})"),
            RunStatus::Timeout { seconds } => format!("TIMED OUT ({seconds} s)"),
            RunStatus::Failed { message } => format!("FAILED ({message})"),
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
}

/// The medians of one (workload, contender) pair over its repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// The workload.
    #[serde(serialize_with = "workload_name")]
    pub workload: Workload,
    /// The contender.
    #[serde(serialize_with = "contender_name")]
    pub contender: Contender,
    /// Repetitions run.
    pub runs: usize,
    /// Repetitions that finished normally; the medians are over these.
    pub ok_runs: usize,
    /// `ok`, or what happened to the first run that did not finish normally.
    pub status: String,
    /// Median workload time in seconds.
    pub time_s: Option<f64>,
    /// Median time over jemalloc's median time on the same workload.
    pub ratio_to_jemalloc: Option<f64>,
    /// Median user + system CPU seconds.
    pub cpu_s: Option<f64>,
    /// Median peak RSS in bytes.
    pub peak_rss: Option<usize>,
    /// Median RSS at the start marker.
    pub rss_start: Option<usize>,
    /// Median RSS after the phase (the last marker).
    pub rss_after: Option<usize>,
    /// The last phase's name.
    pub after_phase: Option<String>,
    /// Median RSS at every phase end, by name, in order.
    pub phases: Vec<(String, usize)>,
    /// The checksum equals every other contender's on this workload.
    pub checksum_agrees: bool,
    /// Index in [`Results::runs`] of the run closest to the median time (its timeline
    /// is the one charted).
    pub median_run: Option<usize>,
}

/// Everything one suite run produced: the results file's content.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// Workload sizes.
    pub scale: Scale,
    /// Repetitions per pair.
    pub reps: usize,
    /// Threads in parallel phases.
    pub threads: usize,
    /// Logical CPUs of the machine.
    pub cpus: usize,
    /// Seconds since the Unix epoch when the suite started.
    pub started_unix: u64,
    /// Seconds the whole suite took.
    pub total_s: f64,
    /// `jemalloc-tuned`'s `malloc_conf`.
    pub jemalloc_tuned_conf: String,
    /// The workloads, with what they stand for and their size.
    pub workloads: Vec<WorkloadInfo>,
    /// Medians per (workload, contender), workload-major.
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
        let mut summaries = Vec::new();
        for &workload in &options.workloads {
            let agreed = checksums_agree(&runs, workload);
            let jemalloc_time = summarize(&runs, workload, Contender::Jemalloc, agreed).time_s;
            for &contender in &options.contenders {
                let mut s = summarize(&runs, workload, contender, agreed);
                s.ratio_to_jemalloc = match (s.time_s, jemalloc_time) {
                    (Some(t), Some(j)) if j > 0.0 => Some(t / j),
                    _ => None,
                };
                summaries.push(s);
            }
        }
        Results {
            scale: options.scale,
            reps: options.reps,
            threads: options.threads,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            started_unix,
            total_s,
            jemalloc_tuned_conf: crate::JEMALLOC_TUNED_CONF.to_string_lossy().into_owned(),
            workloads: options
                .workloads
                .iter()
                .map(|&w| WorkloadInfo {
                    name: w.name(),
                    description: w.description(),
                    size: w.size(options.scale),
                })
                .collect(),
            summaries,
            runs,
        }
    }

    /// The summaries of one workload, in contender order.
    pub fn of_workload(&self, workload: Workload) -> impl Iterator<Item = &Summary> {
        self.summaries
            .iter()
            .filter(move |s| s.workload == workload)
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

fn checksums_agree(runs: &[Run], workload: Workload) -> bool {
    let mut sums = runs
        .iter()
        .filter(|r| r.workload == workload && r.status.is_ok())
        .filter_map(|r| r.checksum.as_deref());
    match sums.next() {
        Some(first) => sums.all(|s| s == first),
        None => true,
    }
}

fn summarize(runs: &[Run], workload: Workload, contender: Contender, agreed: bool) -> Summary {
    let all: Vec<(usize, &Run)> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.workload == workload && r.contender == contender)
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
    let med = |f: &dyn Fn(&Run) -> Option<f64>| median(ok.iter().filter_map(|(_, r)| f(r)));
    let bytes =
        |f: &dyn Fn(&Run) -> Option<usize>| med(&|r| f(r).map(|b| b as f64)).map(|b| b as usize);
    let phases = ok
        .first()
        .map(|(_, first)| {
            first
                .phases
                .iter()
                .map(|p| {
                    let rss = bytes(&|r| r.phases.iter().find(|q| q.name == p.name).map(|q| q.rss));
                    (p.name.clone(), rss.unwrap_or(p.rss))
                })
                .collect()
        })
        .unwrap_or_default();
    Summary {
        workload,
        contender,
        runs: all.len(),
        ok_runs: ok.len(),
        status,
        time_s: median(times.iter().copied()),
        ratio_to_jemalloc: None,
        cpu_s: med(&|r| Some(r.user_s + r.sys_s)),
        peak_rss: bytes(&|r| Some(r.peak_rss)),
        rss_start: bytes(&Run::rss_start),
        rss_after: bytes(&Run::rss_after),
        after_phase: ok
            .first()
            .and_then(|(_, r)| r.phases.last())
            .map(|p| p.name.clone()),
        phases,
        checksum_agrees: agreed,
        median_run: median_index(&times).map(|i| ok[i].0),
    }
}

fn contender_name<S: Serializer>(c: &Contender, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(c.name())
}

fn workload_name<S: Serializer>(w: &Workload, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(w.name())
}
