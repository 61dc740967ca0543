//! `Report`: what a scope or a job did to the process's memory.

use std::fmt;
use std::time::{Duration, Instant};

use crate::{memory, Bytes};

/// What one scope or job did to memory: RSS before and after, the bytes its arena gave
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
    /// pool and binding the workers).
    pub run_time: Duration,
    /// Time spent giving memory back after the work: unbinding the threads (their
    /// caches are flushed, and jemalloc purges the arena as the last one leaves) and
    /// the final purge.
    pub purge_time: Duration,
    /// The arena the work ran in, or `None` if it ran without one (see
    /// [`with_arena`](crate::with_arena)).
    pub arena: Option<u32>,
}

impl Report {
    /// Runs `f` without an arena and reports RSS before and after and the time it
    /// took: the report of work that could not get an arena (`arena` is `None`,
    /// nothing is returned, no time is spent purging).
    pub fn without_arena<R>(f: impl FnOnce() -> R) -> (R, Report) {
        let rss_before = memory::rss();
        let started = Instant::now();
        let value = f();
        let report = Report {
            rss_before,
            rss_after: memory::rss(),
            returned: 0,
            run_time: started.elapsed(),
            purge_time: Duration::ZERO,
            arena: None,
        };
        (value, report)
    }
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
        if self.arena.is_none() {
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
            arena: Some(9),
        };
        let s = r.to_string();
        assert_eq!(
            s,
            "ran 1.5s, gave back 3.0 GiB in 2.5ms; RSS 10.0 MiB -> 11.0 MiB"
        );
        let unscoped = Report { arena: None, ..r };
        assert!(unscoped.to_string().ends_with("(no arena: ran unscoped)"));
    }
}
