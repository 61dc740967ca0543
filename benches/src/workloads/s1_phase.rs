//! S1 phase: the field report's shape. Parallel tasks each return a 50,000-f64 result
//! (400 KB) after churning some scratch memory, and a small label; after the phase 10%
//! of the labels are kept and everything else is dropped. Before the phase every worker
//! frees a 1 MiB block, as a program that ran anything before would have (for glibc this
//! raises the mmap threshold, so the 400 KB results come from its heaps).

use std::fmt;

use rayon::prelude::*;

use crate::phase::Phases;
use crate::rng::mix;
use crate::{Executor, Scale};

/// Size of one S1 phase.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Params {
    /// Tasks in the phase.
    pub(crate) tasks: usize,
    /// f64 values per result.
    pub(crate) len: usize,
}

impl Params {
    pub(crate) fn new(scale: Scale) -> Params {
        Params {
            tasks: scale.pick(40, 1_000, 4_000, 8_000),
            len: 50_000,
        }
    }
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} tasks x {} KB results ({} MB)",
            self.tasks,
            self.len * 8 / 1000,
            self.tasks * self.len * 8 / 1_000_000
        )
    }
}

/// How one task computes its label and result: `(task number, result length)` in.
pub(crate) type Task = fn(usize, usize) -> (String, Vec<f64>);

pub(crate) fn run(exec: &Executor, p: &Params) -> u64 {
    run_with(exec, p, task)
}

/// The S1 workload with every task computed by `task`: workers warmed, one phase
/// (`run`), then everything but 10% of the labels dropped (`dropped`).
pub(crate) fn run_with(exec: &Executor, p: &Params, task: Task) -> u64 {
    warm_workers(exec);
    let phases = Phases::start();
    let (sum, kept) = phase_with(exec, p, 0, &phases, "run", task);
    phases.end("dropped");
    mix(sum, kept.iter().map(|s| s.len() as u64).sum())
}

/// Every worker allocates and frees a 1 MiB block.
pub(crate) fn warm_workers(exec: &Executor) {
    exec.run(|| {
        rayon::broadcast(|_| {
            let block = vec![1u8; 1 << 20];
            std::hint::black_box(&block);
        })
    });
}

/// One parallel phase: returns the checksum and the labels kept (10%). Marks `held`
/// when the results are all there, before dropping them.
pub(crate) fn phase(
    exec: &Executor,
    p: &Params,
    round: usize,
    phases: &Phases,
    held: &str,
) -> (u64, Vec<String>) {
    phase_with(exec, p, round, phases, held, task)
}

/// [`phase`] with every task computed by `task`.
fn phase_with(
    exec: &Executor,
    p: &Params,
    round: usize,
    phases: &Phases,
    held: &str,
    task: Task,
) -> (u64, Vec<String>) {
    let results: Vec<(String, Vec<f64>)> = exec.run(|| {
        (0..p.tasks)
            .into_par_iter()
            .map(|i| task(round * p.tasks + i, p.len))
            .collect()
    });
    phases.end(held);
    let mut sum = 0;
    for (i, (label, values)) in results.iter().enumerate() {
        sum = mix(sum, values[i % values.len()].to_bits() ^ label.len() as u64);
    }
    let kept: Vec<String> = results
        .into_iter()
        .enumerate()
        .filter(|(i, _)| i % 10 == 0)
        .map(|(_, (label, _))| label)
        .collect();
    (sum, kept)
}

/// One task: scratch churn, then a 400 KB result and its label.
pub(crate) fn task(i: usize, len: usize) -> (String, Vec<f64>) {
    let acc = churn(i);
    let values: Vec<f64> = (0..len).map(|j| value(i, j)).collect();
    (label(i, acc), values)
}

/// Task `i`'s scratch churn: four vectors of 32–104 KB, each filled, summed and freed;
/// returns their sum.
pub(crate) fn churn(i: usize) -> f64 {
    let mut acc = 0.0;
    for k in 0..4 {
        let scratch = vec![(i + k) as f64 + 0.5; 4_000 + 3_000 * k];
        acc += scratch.iter().sum::<f64>();
    }
    acc
}

/// Value `j` of task `i`'s result (never zero, so every page of a result is touched).
pub(crate) fn value(i: usize, j: usize) -> f64 {
    let base = i as f64 * 1e-3 + 1.0;
    base + j as f64 * 1e-6
}

/// Task `i`'s label, from the sum of its scratch churn.
pub(crate) fn label(i: usize, acc: f64) -> String {
    format!("task-{i}-{}", acc as u64 % 1000)
}
