//! How the pool behaves: builder, binding, nesting, jobs side by side, panics, streams.
//! Nothing here measures RSS or counts arenas process-wide, so these tests share a
//! process. Threads are ordered with channels, barriers and latches, never sleeps.

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier, Condvar, Mutex};
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
fn zero_threads_means_rayons_default() {
    let pool = ArenaPool::builder().num_threads(0).build().unwrap();
    let expected = rayon::ThreadPoolBuilder::new()
        .num_threads(0)
        .build()
        .unwrap()
        .current_num_threads();
    assert_eq!(pool.current_num_threads(), expected);
    assert_eq!(pool.arena_indices().len(), expected);
}

#[test]
fn a_window_of_zero_is_an_error_and_a_huge_one_is_unbounded() {
    let e = ArenaPool::builder().stream_window(0).build().unwrap_err();
    assert!(
        e.to_string().contains("stream_window(n)` with n >= 1"),
        "{e}"
    );
    // Nothing is reserved up front for the window.
    let pool = ArenaPool::builder()
        .num_threads(2)
        .stream_window(usize::MAX)
        .build()
        .unwrap();
    let sum: u64 = pool.map_stream(0..1_000u64, |i| i * 2).sum();
    assert_eq!(sum, 999 * 1_000);
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

/// The pool's arenas, sorted.
fn pool_arenas(pool: &ArenaPool) -> Vec<Option<u32>> {
    let mut arenas: Vec<_> = pool.arena_indices().into_iter().map(Some).collect();
    arenas.sort();
    arenas
}

/// Runs `f` on a thread of its own and returns its value, or fails the test if it has
/// not returned within a minute: for calls that used to hang.
fn returns<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (done, done_rx) = mpsc::channel();
    std::thread::spawn(move || done.send(f()).unwrap());
    done_rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what} did not return"))
}

#[test]
fn every_worker_has_an_arena_of_the_pool_for_life() {
    let pool = pool(2);
    let indices = pool.arena_indices();
    assert_eq!(indices.len(), 2);
    assert_ne!(indices[0], indices[1], "two workers share an arena");
    let ((mut arenas, installing), report) =
        pool.run_with_report(|| (worker_arenas(), current_arena()));
    arenas.sort();
    assert_eq!(arenas, pool_arenas(&pool));
    assert!(indices.contains(&installing.unwrap()));
    assert_eq!(report.arenas, indices);
    // Between jobs too: workers stay bound.
    let mut between = pool.run(|| rayon::broadcast(|_| current_arena()));
    between.sort();
    assert_eq!(between, pool_arenas(&pool));
    // The caller is not bound, before or after.
    assert_eq!(current_arena(), None);
}

#[test]
fn run_inside_a_job_is_part_of_that_job() {
    let pool = pool(2);
    let (outer, inner, mut inner_workers) = pool.run(|| {
        let outer = current_arena();
        let (inner, inner_workers) = pool.run(|| (current_arena(), worker_arenas()));
        (outer, inner, inner_workers)
    });
    assert!(pool.arena_indices().contains(&outer.unwrap()));
    assert!(pool.arena_indices().contains(&inner.unwrap()));
    inner_workers.sort();
    assert_eq!(inner_workers, pool_arenas(&pool));
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
    assert_eq!(report.arenas, pool.arena_indices());
    assert!(format!("{pool:?}").contains("running: 0"), "{pool:?}");
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
    assert!(format!("{pool:?}").contains("running: 0"), "{pool:?}");
    let (mut arenas, report) = pool.run_with_report(worker_arenas);
    arenas.sort();
    assert_eq!(arenas, pool_arenas(&pool));
    assert_eq!(report.arenas, pool.arena_indices());
}

#[test]
fn run_does_not_wait_for_work_it_spawned() {
    // The job spawns a task that waits for a message the caller sends only after
    // `run` returned: `run` must return first, as rayon's `install` does.
    let (arena, pool_arenas) = returns("run with a waiting spawned task", || {
        let pool = pool(2);
        let (tx, rx) = mpsc::channel::<()>();
        let (report, reported) = mpsc::channel();
        pool.run(move || {
            rayon::spawn(move || {
                rx.recv().unwrap();
                // Allocates after its job ended: still in the pool's arenas.
                let block = vec![1u8; 1 << 16];
                report.send((current_arena(), block.len())).unwrap();
            });
        });
        tx.send(()).unwrap();
        let (arena, len) = reported.recv().unwrap();
        assert_eq!(len, 1 << 16);
        (arena, pool.arena_indices())
    });
    assert!(pool_arenas.contains(&arena.unwrap()));
}

#[test]
fn jobs_from_several_callers_run_side_by_side() {
    // Each job's task waits at a barrier for the other job's task: only jobs that run
    // at the same time get past it.
    let (a, b) = returns("two jobs meeting at a barrier", || {
        let pool = Arc::new(pool(2));
        let barrier = Arc::new(Barrier::new(2));
        let job = |pool: Arc<ArenaPool>, barrier: Arc<Barrier>| {
            move || {
                pool.run(|| {
                    barrier.wait();
                    let scratch = vec![7u8; 1 << 20];
                    (current_arena(), scratch.len())
                })
            }
        };
        let other = std::thread::spawn(job(Arc::clone(&pool), Arc::clone(&barrier)));
        let mine = job(Arc::clone(&pool), barrier)();
        let theirs = other.join().unwrap();
        assert!(format!("{pool:?}").contains("running: 0"), "{pool:?}");
        let indices = pool.arena_indices();
        (
            indices.contains(&mine.0.unwrap()),
            indices.contains(&theirs.0.unwrap()),
        )
    });
    assert!(a && b, "a job allocated outside the pool's arenas");
}

#[test]
fn a_caller_that_is_a_worker_of_another_pool_stays_in_this_pool() {
    // While a worker of `other` waits inside `run`, rayon may hand it other jobs of
    // `other` that call `run` too: every one of them allocates in this pool's arenas.
    let pool = pool(2);
    let other = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .unwrap();
    let seen: Vec<Option<u32>> = other.install(|| {
        (0..64)
            .into_par_iter()
            .flat_map_iter(|i| {
                pool.run(|| {
                    (0..4)
                        .into_par_iter()
                        .map(|k| {
                            let scratch = vec![(i + k) as u8; 4096];
                            std::hint::black_box(&scratch);
                            current_arena()
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect()
    });
    let indices = pool.arena_indices();
    assert_eq!(seen.len(), 64 * 4);
    assert!(
        seen.iter().all(|a| indices.contains(&a.unwrap())),
        "work of a job ran outside the pool's arenas: {seen:?}"
    );
    assert!(format!("{pool:?}").contains("running: 0"), "{pool:?}");
}

#[test]
fn a_stream_that_outlives_another_stays_in_the_pool() {
    let pool = pool(2);
    let outer = pool.map_stream(0..100u32, |i| (i, current_arena()));
    let mut inner = pool.map_stream(0..100u32, |i| (i, current_arena()));
    assert_eq!(inner.next().map(|(i, _)| i), Some(0));
    drop(outer);
    let indices = pool.arena_indices();
    for (i, arena) in inner.by_ref() {
        assert!(indices.contains(&arena.unwrap()), "input {i} ran unbound");
    }
    drop(inner);
    assert!(format!("{pool:?}").contains("running: 0"), "{pool:?}");
}

#[test]
fn the_stream_consumer_can_run_jobs_meanwhile() {
    let pool = pool(2);
    let indices = pool.arena_indices();
    let stream = pool.map_stream(0..20, |i| (i, current_arena()));
    for (i, arena) in stream {
        let (inline, mut workers) = pool.run(|| (current_arena(), worker_arenas()));
        assert!(indices.contains(&arena.unwrap()), "input {i}");
        assert!(indices.contains(&inline.unwrap()), "input {i}");
        workers.sort();
        assert_eq!(workers, pool_arenas(&pool));
    }
    assert!(format!("{pool:?}").contains("running: 0"), "{pool:?}");
}

#[test]
fn a_stream_inside_a_job_makes_progress_on_one_thread() {
    for threads in [1, 2] {
        let pool = pool(threads);
        let indices = pool.arena_indices();
        let (sum, same_arena) = pool.run(|| {
            let mut same = true;
            let mut sum = 0u64;
            for (x, arena) in pool.map_stream(0..500u64, |x| (x * 2, current_arena())) {
                same &= indices.contains(&arena.unwrap());
                sum += x;
            }
            (sum, same)
        });
        assert_eq!(sum, 499 * 500, "{threads} threads");
        assert!(same_arena, "stream tasks left the pool's arenas");
    }
}

/// A stream consumed on the only worker of another pool, whose tasks call `run` on that
/// pool: the consumer must run those jobs while it waits for results (a worker that
/// blocked would wait forever), and again while dropping the stream early waits for its
/// running tasks.
#[test]
fn a_stream_consumed_on_another_pools_worker_whose_tasks_call_that_pool() {
    // All 32 tasks call the consumer's pool while it consumes every result.
    let sum = returns("a stream whose tasks call its consumer's pool", || {
        let producer = pool(2);
        let consumer = Arc::new(pool(1));
        let called = Arc::clone(&consumer);
        let sum: u32 = consumer.run(|| {
            producer
                .map_stream(0..32u32, move |i| called.run(|| i * 2))
                .sum()
        });
        assert!(
            format!("{producer:?}").contains("running: 0"),
            "{producer:?}"
        );
        sum
    });
    assert_eq!(sum, 32 * 31);

    // Three results are consumed, then the stream is dropped; the tasks that are running
    // by then call the consumer's pool only once it has stopped consuming. (The first
    // three compute alone: a task waiting in `run` may be handed another task by rayon,
    // and one blocked on the gate above it would never let it return.)
    let sum = returns(
        "dropping a stream whose tasks call its consumer's pool",
        || {
            let producer = ArenaPool::builder()
                .num_threads(2)
                .stream_window(4)
                .build()
                .unwrap();
            let consumer = Arc::new(pool(1));
            let stopped_consuming = Arc::new(Gate::default());
            let (called, gate) = (Arc::clone(&consumer), Arc::clone(&stopped_consuming));
            let sum: u32 = consumer.run(|| {
                producer
                    .map_stream(0..32u32, move |i| {
                        if i < 3 {
                            return i * 2;
                        }
                        gate.wait();
                        called.run(|| i * 2)
                    })
                    .enumerate()
                    .inspect(|&(n, _)| {
                        if n == 2 {
                            stopped_consuming.open();
                        }
                    })
                    .take(3)
                    .map(|(_, x)| x)
                    .sum()
            });
            assert!(
                format!("{producer:?}").contains("running: 0"),
                "{producer:?}"
            );
            sum
        },
    );
    assert_eq!(sum, 6);
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

/// Waits, for at most ten seconds, until `done` holds.
fn wait_until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done() {
        assert!(Instant::now() < deadline, "still waiting for {what}");
        std::thread::yield_now();
    }
}

/// A latch a task waits on until the test opens it.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn wait(&self) {
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.opened.wait(open).unwrap();
        }
    }

    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.opened.notify_all();
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
    let release = Arc::new(Gate::default());
    let (slow_task, quick_tasks, released) =
        (Arc::clone(&slow), Arc::clone(&quick), Arc::clone(&release));
    // Inside a job the stream is part of that job: nothing but the stream itself waits
    // for its tasks.
    let (dropped, slow_ended) = pool.run(|| {
        let mut stream = pool.map_stream(0..8usize, move |i| {
            if i == 1 {
                slow_task.0.store(true, Ordering::SeqCst);
                released.wait();
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
        // The slow task is let go while the stream is being dropped (or just before):
        // either way the drop may return only after it ended.
        std::thread::scope(|s| {
            s.spawn(|| release.open());
            let dropped = panic::catch_unwind(AssertUnwindSafe(|| drop(stream)));
            (dropped, slow.1.load(Ordering::SeqCst))
        })
    });
    assert!(dropped.is_err(), "the result's panic was lost");
    assert!(
        slow_ended,
        "the stream was dropped while a task was running"
    );
}

/// A stream result whose `Drop` panics when it runs on a pool's worker: where a task
/// frees its result because the stream stopped meanwhile.
struct PanicsOnWorker;

impl Drop for PanicsOnWorker {
    fn drop(&mut self) {
        if rayon::current_thread_index().is_some() && !std::thread::panicking() {
            panic!("a result failed to drop");
        }
    }
}

#[test]
fn a_result_that_panics_on_drop_after_its_stream_stopped_does_not_abort() {
    let pool = pool(2);
    let started = Arc::new(AtomicBool::new(false));
    let release = Arc::new(Gate::default());
    let (slow, released) = (Arc::clone(&started), Arc::clone(&release));
    let mut stream = pool.map_stream(0..4usize, move |i| {
        if i == 1 {
            slow.store(true, Ordering::SeqCst);
            released.wait();
            // Dropped on the worker if the stream stopped meanwhile (as a rule: the
            // gate opens while the stream is being dropped). If the task ends first,
            // the stream's drop frees it on this thread, where it does not panic.
            Some(PanicsOnWorker)
        } else {
            None
        }
    });
    drop(stream.next());
    wait_until("the slow task to start", || started.load(Ordering::SeqCst));
    std::thread::scope(|s| {
        s.spawn(|| release.open());
        drop(stream);
    });
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

/// Dropped on the only worker of another pool, while a task it left behind waits to
/// run a job on that very pool: the drop does not wait for the pool's workers (that
/// would never end), as rayon's does not.
#[test]
fn a_pool_dropped_on_a_worker_that_its_leftover_task_calls_into_does_not_deadlock() {
    let other = Arc::new(
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap(),
    );
    let (ran, ran_rx) = mpsc::channel();
    let gate = Arc::new(Gate::default());
    let task_gate = Arc::clone(&gate);
    let on_other = Arc::clone(&other);
    returns("dropping the pool on the other pool's worker", move || {
        on_other.install(|| {
            let pool = pool(1);
            let other = Arc::clone(&on_other);
            pool.run(|| {
                rayon::spawn(move || {
                    task_gate.wait();
                    // Needs the other pool's only worker: the one dropping this pool.
                    ran.send(other.install(|| 7)).unwrap();
                })
            });
            gate.open();
            drop(pool);
        })
    });
    assert_eq!(ran_rx.recv_timeout(Duration::from_secs(60)), Ok(7));
}
