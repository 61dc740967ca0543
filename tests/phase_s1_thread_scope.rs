//! S1 in a phase on two `std::thread::scope` workers: 4,000 tasks each return 50,000
//! f64 (1.6 GB); once the results are dropped, RSS is back within 16 MiB of where it
//! started. Alone in its binary: it measures process RSS.
mod common;

use common::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

const WORKERS: usize = 2;

#[test]
fn s1_on_scoped_threads_in_a_phase_gives_its_memory_back() {
    let start = rss();

    let (results, labels): (Vec<Vec<f64>>, Vec<String>) = arenapool::phase(|| {
        std::thread::scope(|s| {
            // Worker w runs tasks w, w + 2, w + 4, ...
            let workers: Vec<_> = (0..WORKERS)
                .map(|w| {
                    s.spawn(move || {
                        warm_up_thread();
                        (w..S1_TASKS)
                            .step_by(WORKERS)
                            .map(s1_task)
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            let mut per_worker: Vec<_> = workers
                .into_iter()
                .map(|w| w.join().unwrap().into_iter())
                .collect();
            (0..S1_TASKS)
                .map(|i| per_worker[i % WORKERS].next().unwrap())
                .unzip()
        })
    });
    finish_s1("S1 on scoped threads", start, results, labels);
}
