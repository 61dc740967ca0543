//! S1 in a phase on a tokio multi-thread runtime (2 workers, at most 2 blocking
//! threads): 4,000 tasks, spawned as async tasks and, one in eight, on the blocking
//! pool, each return 50,000 f64 (1.6 GB). The phase is a `PhaseGuard` held by a task
//! across its `.await`s. Once the results are dropped, RSS is back within 16 MiB of
//! where it started. Alone in its binary: it measures process RSS.
mod common;

use common::*;

#[global_allocator]
static GLOBAL: arenapool::ArenaAlloc = arenapool::ArenaAlloc;

#[test]
fn s1_on_a_tokio_runtime_in_a_phase_gives_its_memory_back() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(2)
        .on_thread_start(warm_up_thread)
        .build()
        .unwrap();
    // Start the workers (and warm them up) before the baseline.
    runtime.block_on(async { tokio::spawn(async {}).await.unwrap() });
    let start = rss();

    // The phase is opened and closed by a task on the runtime's workers, which may move
    // between them at each `.await`: the guard goes with it.
    let driver = runtime.spawn(async {
        let phase = arenapool::enter_phase();
        assert!(phase.is_open());
        let tasks: Vec<_> = (0..S1_TASKS)
            .map(|i| {
                if i % 8 == 7 {
                    tokio::task::spawn_blocking(move || s1_task(i))
                } else {
                    tokio::spawn(async move { s1_task(i) })
                }
            })
            .collect();
        let mut results = Vec::with_capacity(S1_TASKS);
        let mut labels = Vec::with_capacity(S1_TASKS);
        for task in tasks {
            let (result, label) = task.await.unwrap();
            results.push(result);
            labels.push(label);
        }
        assert!(arenapool::phase_is_open());
        drop(phase);
        (results, labels)
    });
    let (results, labels) = runtime.block_on(driver).unwrap();
    finish_s1("S1 on tokio", start, results, labels);
    drop(runtime);
}
