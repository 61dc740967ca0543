//! How the pool behaves: builder, binding, nesting, queueing, panics, streams. Nothing
//! here measures RSS or counts arenas process-wide, so these tests share a process.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

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
fn threads_that_cannot_start_are_an_error_that_says_what_to_check() {
    // No system gives a thread an exbibyte of stack.
    let e = ArenaPool::builder()
        .num_threads(1)
        .stack_size(1 << 60)
        .build()
        .unwrap_err();
    let message = e.to_string();
    assert!(message.contains("could not be started"), "{message}");
    assert!(message.contains("stack_size(n)"), "{message}");
    assert!(message.contains("thread limit"), "{message}");
    assert!(std::error::Error::source(&e).is_some());
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

/// A stream result that counts itself among the live ones until it is dropped.
struct Counted {
    value: u64,
    live: Arc<AtomicUsize>,
    /// Takes its time to drop, so that a job let in while the stream is still freeing
    /// its results would see them.
    slow_drop: bool,
}

impl Counted {
    fn new(value: u64, slow_drop: bool, live: &Arc<AtomicUsize>) -> Self {
        live.fetch_add(1, Ordering::SeqCst);
        Counted {
            value,
            live: Arc::clone(live),
            slow_drop,
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if self.slow_drop {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.live.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Waits, for at most ten seconds, until `done` holds.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "still waiting for {what}");
        std::thread::yield_now();
    }
}

#[test]
fn a_spawned_task_running_when_the_job_returns_ends_inside_the_job() {
    let pool = pool(2);
    let spawned = Arc::new(Mutex::new(None));
    let record = Arc::clone(&spawned);
    let job = pool.run(move || {
        let (started, started_rx) = mpsc::channel();
        rayon::spawn(move || {
            started.send(()).unwrap();
            // Were its worker unbound without waiting for it, `run` would return first.
            std::thread::sleep(Duration::from_millis(200));
            *record.lock().unwrap() = Some(current_arena());
        });
        started_rx.recv().unwrap();
        current_arena()
    });
    assert!(job.is_some());
    assert_eq!(
        *spawned.lock().unwrap(),
        Some(job),
        "the task had not ended in the job's arena when `run` returned"
    );
}

#[test]
fn concurrent_runs_queue_while_a_stream_is_alive() {
    let pool = pool(2);
    let live = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&live);
    const CONSUMED: u64 = 100;
    let mut stream = pool.map_stream(0..1_000u64, move |i| {
        Counted::new(i * 3, i >= CONSUMED, &counter)
    });
    let job_started = AtomicBool::new(false);
    let (calling, calling_rx) = mpsc::channel();
    std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            calling.send(()).unwrap();
            pool.run(|| {
                job_started.store(true, Ordering::SeqCst);
                live.load(Ordering::SeqCst)
            })
        });
        calling_rx.recv().unwrap();
        // The other thread is calling `run`. Were the pool free, its job would start
        // well within the time this one spends consuming.
        for i in 0..CONSUMED {
            assert_eq!(stream.next().map(|r| r.value), Some(i * 3));
            std::thread::sleep(Duration::from_millis(2));
        }
        assert!(
            !job_started.load(Ordering::SeqCst) && !waiter.is_finished(),
            "a job ran while the stream held the pool"
        );
        // Results computed but not consumed: the stream frees them as it ends, before
        // it lets the next job in.
        let window = pool.stream_window();
        wait_until("the stream's window to fill", || {
            live.load(Ordering::SeqCst) == window - 1
        });
        drop(stream);
        assert_eq!(
            waiter.join().unwrap(),
            0,
            "a job started before the stream had ended"
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

/// A stream result whose `Drop` panics if it is freed unconsumed.
struct Fragile(bool);

impl Drop for Fragile {
    fn drop(&mut self) {
        if self.0 && !std::thread::panicking() {
            panic!("a result failed to drop");
        }
    }
}

#[test]
fn dropping_a_stream_waits_for_its_tasks_even_if_a_result_panics_on_drop() {
    let pool = ArenaPool::builder()
        .num_threads(3)
        .stream_window(4)
        .build()
        .unwrap();
    let slow = Arc::new((AtomicBool::new(false), AtomicBool::new(false)));
    let quick = Arc::new(AtomicUsize::new(0));
    let (slow_task, quick_tasks) = (Arc::clone(&slow), Arc::clone(&quick));
    // Inside a job the stream is part of that job: nothing but the stream itself waits
    // for its tasks.
    let (dropped, slow_ended) = pool.run(|| {
        let mut stream = pool.map_stream(0..8usize, move |i| {
            if i == 1 {
                slow_task.0.store(true, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(200));
                slow_task.1.store(true, Ordering::SeqCst);
                Fragile(false)
            } else {
                quick_tasks.fetch_add(1, Ordering::SeqCst);
                Fragile(i != 0)
            }
        });
        drop(stream.next());
        // Input 1 is running; inputs 2 and 3 are done and wait to be consumed.
        wait_until("the stream's tasks to start", || {
            slow.0.load(Ordering::SeqCst) && quick.load(Ordering::SeqCst) == 3
        });
        let dropped = panic::catch_unwind(AssertUnwindSafe(|| drop(stream)));
        (dropped, slow.1.load(Ordering::SeqCst))
    });
    assert!(dropped.is_err(), "the result's panic was lost");
    assert!(
        slow_ended,
        "the stream was dropped while a task was running"
    );
}

#[test]
fn a_result_that_panics_on_drop_after_its_stream_stopped_does_not_abort() {
    let pool = pool(2);
    let started = Arc::new(AtomicBool::new(false));
    let slow = Arc::clone(&started);
    let mut stream = pool.map_stream(0..4usize, move |i| {
        if i == 1 {
            slow.store(true, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(100));
            Fragile(true) // dropped on the worker: the stream is gone by then
        } else {
            Fragile(false)
        }
    });
    drop(stream.next());
    wait_until("the slow task to start", || started.load(Ordering::SeqCst));
    drop(stream);
    // Still here, and the pool still runs jobs: the panic did not abort the process.
    assert_eq!(pool.run(|| 40 + 2), 42);
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
