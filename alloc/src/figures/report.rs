//! `Report`: what a scope or a job did to the process's memory.

use std::fmt;
use std::time::{Duration, Instant};

use crate::figures::bytes::Bytes;
use crate::figures::memory;
use crate::mechanism::{ctl, hooks};
use crate::policy::purge;
use crate::work::arena::Arena;

/// What one scope, job or phase did to memory: RSS before and after, the bytes its arena gave
/// back to the OS, and where the time went.
///
/// `rss_after` is measured after the purge but before the caller drops what the scope
/// returned, so it includes the results; it is not the figure "after the phase".
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Report {
    /// Process RSS, in bytes, when the scope began.
    pub rss_before: usize,
    /// Process RSS, in bytes, after the arena was purged.
    pub rss_after: usize,
    /// Bytes the arena gave back to the OS from the start of the work to the end of
    /// its final purge: the pages freed by the work, returned at its end, and anything
    /// purged from the arena meanwhile (an [`Arena::purge`](crate::Arena::purge) inside
    /// the work, a [`trim`](crate::trim) on another thread).
    pub returned: usize,
    /// Time spent running the closure or job (for a pool job: also handing it to the
    /// pool).
    pub run_time: Duration,
    /// Time spent giving memory back after the work: unbinding the thread (its cache
    /// is flushed) and returning the arenas' free pages.
    pub purge_time: Duration,
    /// The arenas the work allocated from (one for a scope, a pool's arenas for a pool
    /// job, the phase arenas for a phase), empty if it ran without one (see [`with_arena`](crate::with_arena)).
    pub arenas: Vec<u32>,
    /// Attempts to give the arenas' pages back that failed from the start of the work
    /// to the end of its final purge: control calls jemalloc refused, and ranges the
    /// kernel refused to take back (`madvise`, tried three times when it answers
    /// `EAGAIN`). Usually 0. Pages a failed control call left resident go back at the
    /// arena's next purge; a range the kernel refused stays resident until the arena
    /// reuses it.
    pub failed: u64,
}

impl Report {
    /// Runs a piece of work whose allocations land in `arenas`, then `give_back`, and
    /// reports: RSS before the work and after `give_back`, the bytes the arenas gave
    /// back to the OS from the start of the work to the end of `give_back` (from
    /// jemalloc's purge counters, whoever triggered the purges), and the time each
    /// part took.
    ///
    /// `work` binds the threads that do the work, and runs it; `give_back` receives
    /// what `work` returned, ends the bindings and returns the arenas' free pages (for
    /// example with [`Arena::return_freed`]), and returns the value to report on. This
    /// is how [`with_arena_report`](crate::with_arena_report) and the thread pool
    /// build their reports; a thread pool of one's own can use it too. With no arenas,
    /// it is the report of work that ran without one: nothing returned.
    ///
    /// If `work` or `give_back` panics, the panic continues and no report is made.
    ///
    /// ```
    /// # #[global_allocator]
    /// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
    /// use arenapool_alloc::{Arena, Report};
    ///
    /// let arena = Arena::new()?;
    /// let (n, report) = Report::measure(
    ///     &[&arena],
    ///     || {
    ///         let binding = arena.bind();
    ///         let scratch = vec![1u8; 64 << 20]; // 64 MiB, freed inside
    ///         (scratch.len(), binding)
    ///     },
    ///     |(n, binding)| {
    ///         drop(binding);
    ///         arena.return_freed().map(|()| n)
    ///     },
    /// );
    /// assert_eq!(n?, 64 << 20);
    /// assert!(report.returned >= 60 << 20, "{report}");
    /// # Ok::<(), arenapool_alloc::Error>(())
    /// ```
    pub fn measure<W, R>(
        arenas: &[&Arena],
        work: impl FnOnce() -> W,
        give_back: impl FnOnce(W) -> R,
    ) -> (R, Report) {
        let arenas: Vec<u32> = arenas.iter().map(|arena| arena.index()).collect();
        let returned_so_far = || -> usize {
            if arenas.is_empty() {
                return 0;
            }
            returned_by(arenas.iter().copied())
        };
        let failed_so_far = || failed_by(arenas.iter().copied());
        let rss_before = memory::rss();
        let returned_before = returned_so_far();
        let failed_before = failed_so_far();
        let started = Instant::now();
        let done = work();
        let run_time = started.elapsed();
        let started = Instant::now();
        let value = give_back(done);
        let purge_time = started.elapsed();
        let returned = returned_so_far().saturating_sub(returned_before);
        let report = Report {
            rss_before,
            rss_after: memory::rss(),
            returned,
            run_time,
            purge_time,
            failed: failed_so_far().saturating_sub(failed_before),
            arenas,
        };
        (value, report)
    }
}

/// Bytes this crate's arenas `indices` have given back to the OS so far, as their
/// extent hooks counted them: no refresh of jemalloc's statistics, which would cost
/// time in proportion to the arenas in the process (1–2 ms at 128 arenas, twice per
/// report).
pub(crate) fn returned_by(indices: impl IntoIterator<Item = u32>) -> usize {
    indices
        .into_iter()
        .map(|index| usize::try_from(hooks::bytes_given_back(index)).unwrap_or(usize::MAX))
        .fold(0, usize::saturating_add)
}

/// Attempts to give back that failed so far in this crate's arenas `indices` (see
/// [`purge::failures`]).
pub(crate) fn failed_by(indices: impl IntoIterator<Item = u32>) -> u64 {
    indices
        .into_iter()
        .map(purge::failures)
        .fold(0, u64::saturating_add)
}

/// Bytes arenas that are not this crate's (`indices`: jemalloc's own, without hooks of
/// ours) have given back so far, from jemalloc's purge counters: one refresh of its
/// statistics per reading, whatever the number of arenas. An arena whose counter
/// cannot be read counts 0, as a failed refresh makes every one count.
pub(crate) fn purged_by_others(indices: impl IntoIterator<Item = u32>) -> usize {
    if ctl::refresh_stats().is_err() {
        return 0;
    }
    indices
        .into_iter()
        .map(|index| ctl::arena_purged_bytes(index).unwrap_or(0))
        .fold(0, usize::saturating_add)
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ran {:.1?}, gave back {} in {:.1?}; RSS {} -> {}",
            self.run_time,
            Bytes(self.returned),
            self.purge_time,
            Bytes(self.rss_before),
            Bytes(self.rss_after),
        )?;
        if self.failed > 0 {
            write!(f, " ({} attempts to give back failed)", self.failed)?;
        }
        if self.arenas.is_empty() {
            f.write_str(" (no arena: ran unscoped)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_display_is_one_line() {
        let r = Report {
            rss_before: 10 << 20,
            rss_after: 11 << 20,
            returned: 3 << 30,
            run_time: Duration::from_millis(1500),
            purge_time: Duration::from_micros(2500),
            arenas: vec![9],
            failed: 0,
        };
        let s = r.to_string();
        assert_eq!(
            s,
            "ran 1.5s, gave back 3.0 GiB in 2.5ms; RSS 10.0 MiB -> 11.0 MiB"
        );
        let unscoped = Report {
            arenas: vec![],
            ..r
        };
        assert!(unscoped.to_string().ends_with("(no arena: ran unscoped)"));
    }

    /// What the hooks count as given back is what jemalloc's statistics count as
    /// purged, for an arena that gives back at the end of work and at frees.
    #[test]
    fn the_hooks_count_what_jemalloc_counts() {
        let arena = Arena::with_huge_pages(false).expect("an arena");
        let kept: Vec<Vec<u8>> = arena.enter(|| {
            let scratch: Vec<Vec<u8>> = (0..32).map(|i| vec![i as u8 + 1; 1 << 20]).collect();
            drop(scratch);
            (0..8).map(|i| vec![i as u8 + 1; 1 << 20]).collect()
        });
        arena.return_freed().expect("the end");
        drop(kept); // freed into the idle arena: given back at once
        ctl::refresh_stats().expect("a refresh");
        let counted = returned_by([arena.index()]);
        let purged = ctl::arena_purged_bytes(arena.index()).expect("the counter");
        assert!(counted >= 40 << 20, "the hooks counted {counted} bytes");
        assert_eq!(counted, purged);
    }
}
