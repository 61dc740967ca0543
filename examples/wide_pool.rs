//! What a job costs on a wide pool: `ArenaPool::run` against a plain rayon pool of the
//! same size in the same process, interleaved, at 2, 32 and 128 workers (on a machine
//! with fewer cores, the wide pools are oversubscribed: what a job's start and end cost
//! per worker shows all the same).
//!
//! Two jobs: `tiny` (8 tasks with 2–5 KB of scratch each, the S3 loop's job), and
//! `results` (8 tasks each returning 64 KiB, dropped by the caller before the next
//! job). Prints, per job kind and pool size, the median time per job over the rounds,
//! with its range, and the ratio of the medians. For `results`, a third line gives the
//! physical limit of giving results back at once: plain rayon, each result's pages
//! given back with `madvise(MADV_DONTNEED)` as it is dropped (the next job faults them
//! in again), with no arenapool at all.
//!
//! Last, what a job's start and end cost the calling thread for as many arenas as the
//! widest pool has workers, with no work in between: every arena set to keep freed
//! pages and back (`retain_freed`, `return_freed`), against arenas left to stand by
//! (`retain_freed_on_use`, `return_freed_if_used`), as a pool's are when its workers
//! did nothing in the last job.
//!
//! ```sh
//! cargo run --release --example wide_pool -- [--rounds 7] [--jobs 2000] [--workers 2,32,128]
//! ```
use std::hint::black_box;
use std::time::{Duration, Instant};

use arenapool::{Arena, ArenaAlloc, ArenaPool};
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

fn tiny(j: u64) -> u64 {
    (0..8u64)
        .into_par_iter()
        .map(|t| {
            let scratch = vec![(t + 1) as u8; 2048 + ((j + t) % 7) as usize * 512];
            scratch.iter().map(|&b| u64::from(b)).sum::<u64>()
        })
        .sum()
}

fn results(j: u64) -> Vec<Vec<u8>> {
    (0..8u64)
        .into_par_iter()
        .map(|t| vec![(j + t) as u8; 64 << 10])
        .collect()
}

/// Drops a job's results after giving their pages back to the OS, as an arena of
/// arenapool's does between jobs.
fn give_back(results: Vec<Vec<u8>>) {
    for result in &results {
        let page = 4096;
        let start = (result.as_ptr() as usize).next_multiple_of(page);
        let end = (result.as_ptr() as usize + result.len()) / page * page;
        if end > start {
            // SAFETY: the range lies inside the live allocation `result`, whose contents
            // are not read again: `MADV_DONTNEED` only zeroes them.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED) };
        }
    }
    drop(results);
}

/// Time per job of `jobs` jobs run with `run`, each result dropped before the next.
fn per_job<R>(jobs: u64, mut run: impl FnMut(u64) -> R) -> Duration {
    let started = Instant::now();
    for j in 0..jobs {
        drop(black_box(run(j)));
    }
    started.elapsed() / jobs as u32
}

/// Time per start and end of `arenas`, each made by `start` and `end`.
fn transitions(
    arenas: &[Arena],
    jobs: u32,
    start: impl Fn(&Arena),
    end: impl Fn(&Arena),
) -> Duration {
    let started = Instant::now();
    for _ in 0..jobs {
        arenas.iter().for_each(&start);
        arenas.iter().for_each(&end);
    }
    started.elapsed() / jobs
}

/// The median of `times`, and it printed in µs with the range: "median (min–max)".
fn spread(times: &mut [Duration], decimals: usize) -> (Duration, String) {
    times.sort();
    let median = times[times.len() / 2];
    let [min, max] = [times[0], times[times.len() - 1]].map(us);
    let text = format!(
        "{:.decimals$} ({min:.decimals$}–{max:.decimals$})",
        us(median)
    );
    (median, text)
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Args {
    rounds: usize,
    jobs: u64,
    workers: Vec<usize>,
}

fn args() -> Args {
    let mut args = Args {
        rounds: 7,
        jobs: 2_000,
        workers: vec![2, 32, 128],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--rounds" => args.rounds = value.parse().expect("--rounds: a number"),
            "--jobs" => args.jobs = value.parse().expect("--jobs: a number"),
            "--workers" => {
                args.workers = value
                    .split(',')
                    .map(|n| n.parse().expect("--workers: numbers, comma-separated"))
                    .collect()
            }
            _ => panic!("unknown flag {flag}: --rounds, --jobs, --workers"),
        }
    }
    args
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = args();
    println!(
        "{:<8} {:>7}  {:<22}  {:<22}  {:>7}",
        "job", "workers", "rayon µs (range)", "arenapool µs (range)", "ratio"
    );
    for &n in &args.workers {
        let rayon = rayon::ThreadPoolBuilder::new().num_threads(n).build()?;
        let pool = ArenaPool::builder().num_threads(n).build()?;
        for kind in ["tiny", "results"] {
            let (mut plain, mut ours, mut limit) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..args.rounds {
                match kind {
                    "tiny" => {
                        plain.push(per_job(args.jobs, |j| rayon.install(|| tiny(j))));
                        ours.push(per_job(args.jobs, |j| pool.run(|| tiny(j))));
                    }
                    _ => {
                        plain.push(per_job(args.jobs, |j| rayon.install(|| results(j))));
                        ours.push(per_job(args.jobs, |j| pool.run(|| results(j))));
                        limit.push(per_job(args.jobs, |j| {
                            give_back(rayon.install(|| results(j)))
                        }));
                    }
                }
            }
            let ((p, plain), (o, ours)) = (spread(&mut plain, 1), spread(&mut ours, 1));
            let ratio = o.as_secs_f64() / p.as_secs_f64();
            println!("{kind:<8} {n:>7}  {plain:<22}  {ours:<22}  {ratio:>6.2}x");
            if !limit.is_empty() {
                let (l, limit) = spread(&mut limit, 1);
                let ratio = o.as_secs_f64() / l.as_secs_f64();
                println!(
                    "{:<8} {n:>7}  {limit:<22}  rayon + madvise: the limit; arenapool {ratio:.2}x it",
                    "  limit"
                );
            }
        }
    }
    let n = args.workers.iter().copied().max().unwrap_or(0);
    let arenas = (0..n)
        .map(|_| Arena::new())
        .collect::<Result<Vec<_>, _>>()?;
    for arena in &arenas {
        arena.return_freed()?;
    }
    let (mut eager, mut standing_by) = (Vec::new(), Vec::new());
    for _ in 0..args.rounds {
        eager.push(transitions(
            &arenas,
            1_000,
            |a| a.retain_freed().expect("a control call"),
            |a| a.return_freed().expect("a control call"),
        ));
        standing_by.push(transitions(
            &arenas,
            1_000,
            |a| a.retain_freed_on_use().expect("standing by"),
            |a| {
                a.return_freed_if_used().expect("a control call");
            },
        ));
    }
    let ((_, eager), (_, standing_by)) = (spread(&mut eager, 1), spread(&mut standing_by, 2));
    println!("start + end of {n} arenas: every one set {eager} µs, standing by {standing_by} µs");
    Ok(())
}
