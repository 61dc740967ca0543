//! `Report`: what a scope or a job did to the process's memory.

use std::fmt;
use std::time::{Duration, Instant};

use crate::memory;

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
    /// Bytes of the arena's unused pages given back to the OS at the end.
    pub returned: usize,
    /// Time spent running the closure or job.
    pub run_time: Duration,
    /// Time spent giving memory back (flush, statistics, purge).
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

/// A byte count that displays itself in binary units (`1.5 GiB`, `12.0 MiB`, `512 B`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Bytes(pub usize);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
        if self.0 < 1024 {
            return write!(f, "{} B", self.0);
        }
        let mut value = self.0 as f64 / 1024.0;
        let mut unit = 0;
        while value >= 1024.0 && unit + 1 < UNITS.len() {
            value /= 1024.0;
            unit += 1;
        }
        write!(f, "{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_display() {
        assert_eq!(Bytes(0).to_string(), "0 B");
        assert_eq!(Bytes(1023).to_string(), "1023 B");
        assert_eq!(Bytes(1536).to_string(), "1.5 KiB");
        assert_eq!(Bytes(12 << 20).to_string(), "12.0 MiB");
        assert_eq!(Bytes(3 << 29).to_string(), "1.5 GiB");
        assert_eq!(Bytes(usize::MAX).to_string(), "16777216.0 TiB");
    }

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
