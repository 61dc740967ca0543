//! How the pool behaves: builder, binding, nesting, queueing, panics, streams. Nothing
//! here measures RSS or counts arenas process-wide, so these tests share a process.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};

use arenapool_alloc::current_arena;
use arenapool_pool::ArenaPool;
use rayon::prelude::*;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

fn pool(threads: usize) -> ArenaPool {
    ArenaPool::builder().num_threads(threads).build().unwrap()
}

fn worker_arenas() -> Vec<Option<u32>> {
    rayon::broadcast(|_| current_arena())
}

#[test]
fn zero_threads_or_window_is_an_error() {
    let e = ArenaPool::builder().num_threads(0).build().unwrap_err();
    assert!(e.to_string().contains("num_threads(n)` with n >= 1"), "{e}");
    let e = ArenaPool::builder().stream_window(0).build().unwrap_err();
    assert!(
        e.to_string().contains("stream_window(n)` with n >= 1"),
        "{e}"
    );
}

#[test]
fn builder_settings_apply() {
    let pool = ArenaPool::builder()
        .num_threads(3)
        .thread_name(|i| format!("crunch-{i}"))
        .stack_size(4 << 20)
        .build()
        .unwrap();
    assert_eq!(pool.current_num_threads(), 3);
    assert_eq!(
        pool.stream_window(),
        6,
        "default window is twice the threads"
    );
    let mut names =
        pool.run(|| rayon::broadcast(|_| std::thread::current().name().map(str::to_owned)));
    names.sort();
    let expected: Vec<_> = (0..3).map(|i| Some(format!("crunch-{i}"))).collect();
    assert_eq!(names, expected);
    assert!(format!("{pool:?}").contains("num_threads: 3"));
}

#[test]
fn every_worker_is_bound_to_the_job_arena() {
    let pool = pool(2);
    let ((arenas, installing), report) =
        pool.run_with_report(|| (worker_arenas(), current_arena()));
    let job = report.arena.expect("job ran without an arena");
    assert_eq!(installing, Some(job));
    assert_eq!(arenas, vec![Some(job); 2]);
    // The caller is not bound, before or after.
    assert_eq!(current_arena(), None);
}

#[test]
fn run_inside_a_job_runs_inline_in_that_job() {
    let pool = pool(2);
    let (outer, inner, inner_workers) = pool.run(|| {
        let outer = current_arena();
        let (inner, inner_workers) = pool.run(|| (current_arena(), worker_arenas()));
        (outer, inner, inner_workers)
    });
    assert!(outer.is_some());
    assert_eq!(inner, outer);
    assert_eq!(inner_workers, vec![outer; 2]);
    // From a task deep inside rayon code too, and with a report.
    let (nested, report) = pool.run(|| {
        (0..4)
            .into_par_iter()
            .map(|i| pool.run_with_report(|| i * 2))
            .collect::<Vec<_>>()
            .pop()
            .unwrap()
    });
    assert_eq!(nested, 6);
    assert!(report.arena.is_some());
}

#[test]
fn a_panic_reaches_the_caller_and_the_pool_goes_on() {
    let pool = pool(2);
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        pool.run(|| {
            (0..100)
                .into_par_iter()
                .for_each(|i| assert!(i != 57, "job fails"));
        })
    }));
    assert!(caught.is_err());
    let (arenas, report) = pool.run_with_report(worker_arenas);
    assert_eq!(arenas, vec![report.arena; 2]);
}

#[test]
fn concurrent_runs_queue_while_a_stream_is_alive() {
    let pool = pool(2);
    let stream_alive = AtomicBool::new(true);
    let mut stream = pool.map_stream(0..1_000u64, |i| i * 3);
    let (started, started_rx) = mpsc::channel();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            started.send(()).unwrap();
            pool.run(|| stream_alive.load(Ordering::SeqCst))
        });
        started_rx.recv().unwrap();
        // The other thread is blocked (or about to be) in `run` while this one
        // consumes; its job must not start before the stream is dropped.
        for i in 0..100 {
            assert_eq!(stream.next(), Some(i * 3));
            std::thread::yield_now();
        }
        stream_alive.store(false, Ordering::SeqCst);
        drop(stream);
        assert!(
            !waiter.join().unwrap(),
            "a job ran while the stream held the pool"
        );
    });
}

#[test]
fn the_stream_consumer_runs_jobs_inline_in_the_stream_arena() {
    let pool = pool(2);
    let stream = pool.map_stream(0..20, |i| (i, current_arena()));
    let mut task_arenas = Vec::new();
    for (i, arena) in stream {
        let (inline, workers) = pool.run(|| (current_arena(), worker_arenas()));
        assert!(arena.is_some());
        assert_eq!(inline, arena, "input {i}");
        assert_eq!(workers, vec![arena; 2]);
        task_arenas.push(arena);
    }
    assert!(task_arenas.iter().all(|&a| a == task_arenas[0]));
    // A new job afterwards works as usual.
    assert!(pool.run(current_arena).is_some());
}

#[test]
fn a_stream_inside_a_job_makes_progress_on_one_thread() {
    for threads in [1, 2] {
        let pool = pool(threads);
        let (sum, same_arena) = pool.run(|| {
            let job = current_arena();
            let mut same = true;
            let mut sum = 0u64;
            for (x, arena) in pool.map_stream(0..500u64, |x| (x * 2, current_arena())) {
                same &= arena == job;
                sum += x;
            }
            (sum, same)
        });
        assert_eq!(sum, 499 * 500, "{threads} threads");
        assert!(same_arena, "stream tasks left the job's arena");
    }
}

#[test]
fn a_stream_task_panic_surfaces_in_order_and_stops_the_stream() {
    let pool = ArenaPool::builder()
        .num_threads(2)
        .stream_window(4)
        .build()
        .unwrap();
    let computed = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&computed);
    let mut stream = pool.map_stream(0..1_000usize, move |i| {
        counter.fetch_add(1, Ordering::SeqCst);
        assert!(i != 10, "input 10 is bad");
        i
    });
    let mut got = Vec::new();
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        for i in stream.by_ref() {
            got.push(i);
        }
    }));
    assert!(caught.is_err(), "the task's panic was lost");
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    assert_eq!(stream.next(), None, "a stream goes on after a panic");
    drop(stream);
    assert!(computed.load(Ordering::SeqCst) <= 10 + 4);
    assert_eq!(
        pool.map_stream(0..3, |i| i + 1).collect::<Vec<_>>(),
        [1, 2, 3]
    );
}

#[test]
fn map_stream_pulls_lazily_from_an_endless_iterator() {
    let pool = pool(2);
    let first: Vec<u64> = pool
        .map_stream((1..).map(|i: u64| i * i), |sq| sq + 1)
        .take(5)
        .collect();
    assert_eq!(first, [2, 5, 10, 17, 26]);
    let stream = pool.map_stream(0..10, |i| i);
    assert_eq!(stream.size_hint(), (10, Some(10)));
}
