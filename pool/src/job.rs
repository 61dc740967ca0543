//! Jobs: how many are running, and what the pool's arenas do with freed pages.
//!
//! While at least one job runs, the pool's arenas keep freed pages for reuse (decay
//! -1): scratch memory is recycled at full speed, with no `madvise` and no page faults.
//! When the last running job ends, they give every free page back to the OS and, until
//! the next job starts, each page freed in them the moment it is freed (decay 0): that
//! is how results dropped between jobs go back at once. Jobs that overlap (several
//! threads calling `run`, or a job inside a job) share the arenas; only the end of the
//! last one gives pages back, so no job has its free pages taken away while it runs.
//!
//! With [`keep_warm`](crate::ArenaPoolBuilder::keep_warm), the last job's end only
//! starts a timer: the arenas go on keeping freed pages (results dropped meanwhile
//! included) until the pool has been idle that long, when a thread of the pool's gives
//! them back; a job that starts first finds them warm.
//!
//! Both transitions are made by the thread that starts or ends the job (or by the
//! timer's thread): no worker is interrupted, and nothing waits for the workers. They
//! cost a few control calls per arena whose worker did something in the last job; the
//! arenas of workers that did nothing stand by (see `arenapool_alloc`'s
//! `Arena::retain_freed_on_use`), which costs a few loads and no control call, so a job
//! of a few tasks on a wide pool pays for the workers it used.
//!
//! Each job counts in `arenapool_alloc::stats`' running totals (a `Tally`, under the
//! pool's [`label`](crate::ArenaPoolBuilder::label)), with what the last end gave back:
//! the pool's arenas' counts read before and after it, a load per arena.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use arenapool_alloc::{Arena, Label, Tally, Work};

/// The pool's arenas, the count of running jobs, and the keep-warm timer.
pub(crate) struct Jobs {
    shared: Arc<Shared>,
    /// What the pool's jobs count under in `arenapool_alloc::stats`.
    label: Option<Label>,
    /// The keep-warm timer's thread, if the pool keeps pages warm.
    timer: Option<JoinHandle<()>>,
}

struct Shared {
    arenas: Vec<Arc<Arena>>,
    keep_warm: Duration,
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct State {
    running: usize,
    /// No job runs, and the arenas still keep freed pages: since when.
    warm_since: Option<Instant>,
    /// The pool is being dropped: the timer's thread ends.
    closing: bool,
    /// The timer's thread waits without a timeout: only a notification wakes it. (When
    /// it waits with one, a job's end need not wake it: it finds the new `warm_since`
    /// when its wait ends, and waits the rest.) The job end that wakes it clears this,
    /// so that the ends that follow before the timer's thread has run do not wake it
    /// again.
    timer_waits: bool,
    /// Per arena: it was used between the last two ends (see [`Shared::return_freed`]):
    /// the next start sets it to keep freed pages; the others stand by.
    used: Vec<bool>,
    /// Times a job's end woke the timer's thread.
    #[cfg(test)]
    wake_ups: usize,
    /// Times the timer's thread began to wait without a timeout.
    #[cfg(test)]
    waits: usize,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // Nothing panics while the lock is held; a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The start of work after an end: the arenas used before keep freed pages from
    /// now on; the others stand by, and keep them only once their worker allocates a
    /// large block (so a job that leaves most workers of a wide pool idle makes no
    /// control call for their arenas). A pool that keeps pages warm sets every arena
    /// to keep them: it starts cold only after an idle time, and its warm starts make
    /// no control call at all, so an arena that stood by would stand by (and give the
    /// pages of small objects back as they empty) for as long as jobs follow each
    /// other.
    ///
    /// A control call cannot fail for an existing arena; if one did, the arena would
    /// only give pages back later, or keep them for less long: slower, still right.
    fn retain_freed(&self, state: &State) {
        for (arena, &used) in self.arenas.iter().zip(&state.used) {
            let _ = if used || !self.keep_warm.is_zero() {
                arena.retain_freed()
            } else {
                arena.retain_freed_on_use()
            };
        }
    }

    /// The end of work: every arena that kept freed pages, or in which something
    /// happened, gives its free pages back; the others have nothing to give.
    fn return_freed(&self, state: &mut State) {
        for (arena, used) in self.arenas.iter().zip(&mut state.used) {
            // As above; an error counts the arena as used.
            *used = arena.return_freed_if_used().unwrap_or(true);
        }
    }

    /// Bytes the arenas have given back so far: a load per arena.
    fn returned_total(&self) -> usize {
        self.arenas
            .iter()
            .map(|arena| arena.returned_total().unwrap_or(0))
            .fold(0, usize::saturating_add)
    }

    /// The keep-warm timer: gives the pages back once the pool has been idle for
    /// `keep_warm`, and ends when the pool closes.
    fn run_timer(&self) {
        let mut state = self.state();
        loop {
            if state.closing {
                return;
            }
            state = match state.warm_since {
                Some(since) if state.running == 0 => {
                    let idle = since.elapsed();
                    if idle >= self.keep_warm {
                        // Under the lock, so a job starting meanwhile finds the arenas
                        // cold and sets them back to keeping pages after this.
                        self.return_freed(&mut state);
                        state.warm_since = None;
                        state
                    } else {
                        self.changed
                            .wait_timeout(state, self.keep_warm - idle)
                            .unwrap_or_else(PoisonError::into_inner)
                            .0
                    }
                }
                _ => {
                    state.timer_waits = true;
                    #[cfg(test)]
                    {
                        state.waits += 1;
                    }
                    let mut woken = self
                        .changed
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                    woken.timer_waits = false;
                    woken
                }
            };
        }
    }
}

impl Jobs {
    /// Takes the workers' arenas, which start idle and cold: returning freed pages at
    /// once. With a `keep_warm` above zero, starts the timer's thread.
    pub(crate) fn new(
        arenas: Vec<Arc<Arena>>,
        keep_warm: Duration,
        label: Option<Label>,
    ) -> std::io::Result<Self> {
        for arena in &arenas {
            // Cannot fail for an existing arena; if it did, the arena would give its
            // pages back only at the first job's end.
            let _ = arena.return_freed();
        }
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                // Nothing is known of the first job: every arena keeps its freed pages
                // from its start, as after a job that used them all.
                used: vec![true; arenas.len()],
                ..State::default()
            }),
            arenas,
            keep_warm,
            changed: Condvar::new(),
        });
        let timer = if keep_warm.is_zero() || shared.arenas.is_empty() {
            None
        } else {
            let timer = Arc::clone(&shared);
            Some(
                thread::Builder::new()
                    .name("arenapool-keep-warm".into())
                    .spawn(move || timer.run_timer())?,
            )
        };
        Ok(Jobs {
            shared,
            label,
            timer,
        })
    }

    /// The arenas the pool's workers allocate from.
    pub(crate) fn arenas(&self) -> &[Arc<Arena>] {
        &self.shared.arenas
    }

    /// Starts a job; it ends when the returned guard is dropped, also on panic.
    pub(crate) fn begin(&self) -> Job<'_> {
        let mut state = self.shared.state();
        if state.running == 0 && state.warm_since.take().is_none() {
            self.shared.retain_freed(&state);
        }
        state.running += 1;
        Job {
            jobs: self,
            tally: Some(Tally::start(Work::Job, self.label)),
        }
    }
}

impl Drop for Jobs {
    fn drop(&mut self) {
        self.shared.state().closing = true;
        self.shared.changed.notify_all();
        if let Some(timer) = self.timer.take() {
            let _ = timer.join();
        }
        // Whatever is still kept warm goes back now; dropping the arenas (after the
        // workers have let go of them) does the same for each.
        self.shared.return_freed(&mut self.shared.state());
    }
}

impl fmt::Debug for Jobs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state();
        f.debug_struct("Jobs")
            .field(
                "arenas",
                &self.arenas().iter().map(|a| a.index()).collect::<Vec<_>>(),
            )
            .field("running", &state.running)
            .field("warm", &state.warm_since.is_some())
            .field("keep_warm", &self.shared.keep_warm)
            .finish()
    }
}

/// A running job. Dropping the last one gives the arenas' free pages back, or starts
/// the keep-warm timer.
#[derive(Debug)]
pub(crate) struct Job<'p> {
    jobs: &'p Jobs,
    /// The job in the running totals of `arenapool_alloc::stats`.
    tally: Option<Tally>,
}

impl Drop for Job<'_> {
    fn drop(&mut self) {
        let shared = &self.jobs.shared;
        let mut state = shared.state();
        state.running -= 1;
        if state.running == 0 {
            if self.jobs.timer.is_some() {
                state.warm_since = Some(Instant::now());
                let wake = std::mem::take(&mut state.timer_waits);
                #[cfg(test)]
                {
                    state.wake_ups += usize::from(wake);
                }
                drop(state);
                if wake {
                    shared.changed.notify_all();
                }
            } else {
                // Under the lock, so a job starting meanwhile finds the arenas cold
                // and sets them back to keeping pages after this.
                let started = Instant::now();
                let before = shared.returned_total();
                shared.return_freed(&mut state);
                let returned = shared.returned_total().saturating_sub(before);
                if let Some(tally) = self.tally.take() {
                    tally.end(returned, started.elapsed());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Jobs back to back wake the keep-warm timer only when it waits without a timeout,
    /// once per such wait, however late its thread runs: not at every job's end.
    #[test]
    fn job_ends_do_not_wake_a_waiting_timer() {
        let arena = Arc::new(Arena::new().expect("an arena"));
        let jobs = Jobs::new(vec![arena], Duration::from_secs(600), None).expect("the timer");
        for _ in 0..1_000 {
            drop(jobs.begin());
        }
        let state = jobs.shared.state();
        let (wake_ups, waits) = (state.wake_ups, state.waits);
        assert!(
            wake_ups <= waits,
            "job ends woke the timer {wake_ups} times in 1,000 jobs, for {waits} waits"
        );
    }

    /// Only the arenas something happened in count as used, and only they keep freed
    /// pages from the next start: the others make no control call at either end.
    #[test]
    fn only_arenas_used_in_a_job_are_used_in_the_next() {
        let arenas: Vec<Arc<Arena>> = (0..16)
            .map(|_| Arc::new(Arena::new().expect("an arena")))
            .collect();
        let jobs = Jobs::new(arenas.clone(), Duration::ZERO, None).expect("jobs");
        let used = |jobs: &Jobs| -> Vec<usize> {
            let state = jobs.shared.state();
            (0..16).filter(|&i| state.used[i]).collect()
        };
        // Jobs in which no worker allocates.
        drop(jobs.begin());
        drop(jobs.begin());
        assert_eq!(used(&jobs), Vec::<usize>::new());
        // A job in which arena 3's worker allocates a large block.
        let job = jobs.begin();
        arenas[3].enter(|| drop(std::hint::black_box(vec![1u8; 1 << 20])));
        drop(job);
        assert_eq!(used(&jobs), vec![3]);
        // It keeps freed pages from the next start; a job that leaves it alone makes it
        // stand by again.
        drop(jobs.begin());
        assert_eq!(used(&jobs), Vec::<usize>::new());
    }
}
