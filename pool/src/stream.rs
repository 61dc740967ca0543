//! `MapStream`: an ordered map over a stream of inputs, with a bounded window.

use std::collections::VecDeque;
use std::fmt;
use std::iter::FusedIterator;
use std::mem;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use rayon::{ThreadPool, Yield};

use crate::job::Job;

/// The iterator returned by [`ArenaPool::map_stream`](crate::ArenaPool::map_stream):
/// results in input order, at most a window of them in memory at once.
///
/// Dropping it stops new work, waits for the tasks already running, frees every result
/// not yet consumed, and ends the stream's job (the pool's free pages go back to the OS
/// if no other job is running).
/// A panic from the `Drop` of a result it frees reaches the code that dropped the
/// stream; a result that a task finishes after the stream stopped is freed on that
/// task's worker, and a panic from its `Drop` there is discarded (it would otherwise
/// abort the process).
///
/// It may be consumed on another thread than the one that created it (it is `Send`
/// when its inputs and results are):
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// let pool = arenapool_pool::ArenaPool::builder().num_threads(2).build()?;
/// let stream = pool.map_stream(0..4, |i| i * 2);
/// let sum = std::thread::scope(|s| s.spawn(move || stream.sum::<i32>()).join().unwrap());
/// assert_eq!(sum, 12);
/// # Ok::<(), arenapool_pool::BuildError>(())
/// ```
#[must_use = "a stream is a running job of the pool until it is dropped; iterate over it"]
pub struct MapStream<'p, I: Iterator, T> {
    threads: &'p ThreadPool,
    inputs: I,
    /// No input will be pulled any more: the inputs ran out, or the stream stopped.
    exhausted: bool,
    window: usize,
    /// Results not yet yielded: queued, running or done.
    outstanding: usize,
    shared: Arc<Shared<I::Item, T>>,
    /// The stream's job; ended by `Drop` after the last result is freed.
    job: Option<Job<'p>>,
}

/// What the stream and its tasks share.
struct Shared<X, T> {
    f: Box<dyn Fn(X) -> T + Send + Sync>,
    state: Mutex<State<X, T>>,
    changed: Condvar,
}

struct State<X, T> {
    /// Sequence number of `slots[0]`, the next result to yield.
    head: u64,
    slots: VecDeque<Slot<X, T>>,
    /// Tasks between taking their input and storing their result.
    running: usize,
    /// The stream ended: tasks not yet started must not start, results not yet stored
    /// are dropped by the task that computed them.
    stopped: bool,
    /// Bumped by every task that finishes, so that a waiter which let go of the lock
    /// can tell whether it missed a change.
    changes: u64,
}

enum Slot<X, T> {
    Queued(X),
    Running,
    Done(thread::Result<T>),
}

impl<X, T> Shared<X, T> {
    fn state(&self) -> MutexGuard<'_, State<X, T>> {
        // User code never runs while the lock is held; a poisoned state is consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until a task finishes (or, on a thread of a rayon pool, until it may have).
    ///
    /// A thread of a rayon pool, this stream's or any other, must not simply block: a
    /// task of the stream may be waiting for a job only that pool can run (a task that
    /// calls [`ArenaPool::run`](crate::ArenaPool::run) on the pool the stream is
    /// consumed on, say, whose one worker is this thread). Such a thread runs its
    /// pool's pending jobs while it waits, as rayon's own waits do, and when there are
    /// none it sleeps until a task finishes or [`POLL`] has passed.
    fn wait<'a>(&'a self, state: MutexGuard<'a, State<X, T>>) -> MutexGuard<'a, State<X, T>> {
        if rayon::current_thread_index().is_none() {
            return self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let seen = state.changes;
        drop(state);
        let ran_a_job = rayon::yield_now() == Some(Yield::Executed);
        let state = self.state();
        if ran_a_job || state.changes != seen {
            return state;
        }
        self.changed
            .wait_timeout(state, POLL)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }
}

/// How long a thread of a rayon pool waiting for a stream's result sleeps, at most,
/// before it looks for jobs of its own pool again.
const POLL: Duration = Duration::from_millis(1);

/// One task: computes the result for input number `seq`, unless the stream stopped or
/// the consumer took the input first.
fn run_task<X, T>(shared: &Shared<X, T>, seq: u64) {
    let input = {
        let mut state = shared.state();
        let Some(at) = seq.checked_sub(state.head) else {
            return; // taken and computed by the consumer
        };
        if state.stopped {
            return;
        }
        let Some(slot) = state.slots.get_mut(at as usize) else {
            return;
        };
        let Slot::Queued(input) = mem::replace(slot, Slot::Running) else {
            unreachable!("a stream task ran twice");
        };
        state.running += 1;
        input
    };
    let result = panic::catch_unwind(AssertUnwindSafe(|| (shared.f)(input)));
    let mut state = shared.state();
    if state.stopped {
        // Freed here, on a worker still bound to the stream's arena. Nobody is left to
        // receive a panic from the result's `Drop`, and one escaping a pool task would
        // abort the process, so it is caught and discarded.
        drop(state);
        let _ = panic::catch_unwind(AssertUnwindSafe(|| drop(result)));
        state = shared.state();
    } else {
        let at = (seq - state.head) as usize;
        state.slots[at] = Slot::Done(result);
    }
    state.running -= 1;
    state.changes = state.changes.wrapping_add(1);
    drop(state);
    shared.changed.notify_all();
}

impl<'p, I, T> MapStream<'p, I, T>
where
    I: Iterator,
    I::Item: Send + 'static,
    T: Send + 'static,
{
    pub(crate) fn new<F>(
        threads: &'p ThreadPool,
        job: Job<'p>,
        window: usize,
        inputs: I,
        f: F,
    ) -> Self
    where
        F: Fn(I::Item) -> T + Send + Sync + 'static,
    {
        MapStream {
            threads,
            inputs,
            exhausted: false,
            window,
            outstanding: 0,
            shared: Arc::new(Shared {
                f: Box::new(f),
                state: Mutex::new(State {
                    head: 0,
                    // Grows with the results in flight: a huge window reserves nothing.
                    slots: VecDeque::new(),
                    running: 0,
                    stopped: false,
                    changes: 0,
                }),
                changed: Condvar::new(),
            }),
            job: Some(job),
        }
    }

    /// Pulls inputs and starts their tasks until the window is full.
    fn fill(&mut self) {
        while !self.exhausted && self.outstanding < self.window {
            let Some(input) = self.inputs.next() else {
                self.exhausted = true;
                break;
            };
            let seq = {
                let mut state = self.shared.state();
                state.slots.push_back(Slot::Queued(input));
                state.head + state.slots.len() as u64 - 1
            };
            self.outstanding += 1;
            let shared = Arc::clone(&self.shared);
            self.threads.spawn(move || run_task(&shared, seq));
        }
    }
}

impl<I: Iterator, T> MapStream<'_, I, T> {
    /// Stops new work, waits for the tasks already running, then frees what was not
    /// consumed.
    ///
    /// The wait comes first: freeing runs the `Drop` of user types, which may panic,
    /// and no task may be running once the stream's job ends.
    fn stop(&mut self) {
        self.exhausted = true;
        self.outstanding = 0;
        let pending = {
            let mut state = self.shared.state();
            state.stopped = true;
            let pending = mem::take(&mut state.slots);
            while state.running > 0 {
                state = self.shared.wait(state);
            }
            pending
        };
        drop(pending);
    }
}

impl<I, T> Iterator for MapStream<'_, I, T>
where
    I: Iterator,
    I::Item: Send + 'static,
    T: Send + 'static,
{
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.fill();
        if self.outstanding == 0 {
            return None;
        }
        // On one of the pool's workers, waiting for a task that no other thread has
        // taken could wait forever (it may sit in this worker's own queue): such a task
        // is run here instead.
        let helps = self.threads.current_thread_index().is_some();
        let result = {
            let mut state = self.shared.state();
            loop {
                match state.slots.front() {
                    Some(Slot::Done(_)) => {
                        let Some(Slot::Done(result)) = state.slots.pop_front() else {
                            unreachable!()
                        };
                        state.head += 1;
                        break result;
                    }
                    Some(Slot::Queued(_)) if helps => {
                        let Some(Slot::Queued(input)) = state.slots.pop_front() else {
                            unreachable!()
                        };
                        state.head += 1;
                        drop(state);
                        let f = &self.shared.f;
                        break panic::catch_unwind(AssertUnwindSafe(|| f(input)));
                    }
                    Some(_) => state = self.shared.wait(state),
                    None => unreachable!("an outstanding result has no slot"),
                }
            }
        };
        self.outstanding -= 1;
        match result {
            Ok(value) => Some(value),
            Err(payload) => {
                self.stop();
                panic::resume_unwind(payload)
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.exhausted {
            return (self.outstanding, Some(self.outstanding));
        }
        let (low, high) = self.inputs.size_hint();
        (
            low.saturating_add(self.outstanding),
            high.and_then(|h| h.checked_add(self.outstanding)),
        )
    }
}

impl<I, T> FusedIterator for MapStream<'_, I, T>
where
    I: Iterator,
    I::Item: Send + 'static,
    T: Send + 'static,
{
}

impl<I: Iterator, T> Drop for MapStream<'_, I, T> {
    fn drop(&mut self) {
        self.stop();
        // Results the caller consumed and dropped sit in this thread's cache: back to
        // the pool's arenas with them, so the job's end can give their pages back.
        let _ = arenapool_alloc::flush_thread_cache();
        drop(self.job.take());
    }
}

impl<I: Iterator, T> fmt::Debug for MapStream<'_, I, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MapStream")
            .field("window", &self.window)
            .field("outstanding", &self.outstanding)
            .field("exhausted", &self.exhausted)
            .field("job", &self.job)
            .finish_non_exhaustive()
    }
}
