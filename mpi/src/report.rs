//! `PhaseTable`: every rank's `Report` of a phase, gathered into one table.

use std::fmt;
use std::time::Duration;

use arenapool_alloc::Report;
use mpi::traits::{Communicator, Root};

use crate::error::Error;
use crate::memory::human;
use crate::raw;

/// What one rank's phase did to its memory: its [`Report`] and its RSS when the table
/// was gathered (after the rank dropped what it did not keep).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RankReport {
    /// The rank, in the communicator the table was gathered over.
    pub rank: usize,
    /// RSS when the phase began ([`Report::rss_before`]).
    pub rss_before: usize,
    /// RSS when the phase's arena had been purged, results still held
    /// ([`Report::rss_after`]).
    pub rss_after: usize,
    /// Bytes the phase's arena gave back to the OS ([`Report::returned`]).
    pub returned: usize,
    /// RSS when the table was gathered.
    pub rss_now: usize,
    /// Time running the phase ([`Report::run_time`]).
    pub run_time: Duration,
    /// Time giving memory back at its end ([`Report::purge_time`]).
    pub purge_time: Duration,
}

/// Every rank's [`RankReport`] for one phase, gathered on rank 0, printed as one table.
///
/// ```no_run
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// use rayon::prelude::*;
///
/// let universe = mpi::initialize().expect("MPI initialised twice");
/// let world = universe.world();
/// let pool = arenapool_pool::ArenaPool::builder().num_threads(1).build()?;
/// let (results, report) = pool.run_with_report(|| {
///     (0..1_000).into_par_iter().map(|i| vec![i as f64; 50_000]).collect::<Vec<_>>()
/// });
/// drop(results);
/// if let Some(table) = arenapool_mpi::PhaseTable::gather(&world, &report)? {
///     println!("{table}"); // rank 0 only: one row per rank
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseTable {
    rows: Vec<RankReport>,
}

/// Figures per rank, in the order they travel.
const FIELDS: usize = 6;

impl PhaseTable {
    /// Gathers every rank's `report`, with its RSS now, on rank 0 of `comm`:
    /// collective. Returns the table on rank 0 and `None` elsewhere.
    ///
    /// # Errors
    ///
    /// MPI is not initialised, or already finalised (checked before any MPI call).
    pub fn gather<C: Communicator + ?Sized>(
        comm: &C,
        report: &Report,
    ) -> Result<Option<PhaseTable>, Error> {
        raw::ready()?;
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let mine: [u64; FIELDS] = [
            report.rss_before as u64,
            report.rss_after as u64,
            report.returned as u64,
            arenapool_alloc::rss() as u64,
            nanos(report.run_time),
            nanos(report.purge_time),
        ];
        let root = comm.process_at_rank(0);
        if comm.rank() != 0 {
            root.gather_into(&mine[..]);
            return Ok(None);
        }
        let size = usize::try_from(comm.size()).unwrap_or(0);
        let mut all = vec![0u64; FIELDS * size];
        root.gather_into_root(&mine[..], &mut all[..]);
        let rows = all
            .chunks_exact(FIELDS)
            .enumerate()
            .map(|(rank, f)| RankReport {
                rank,
                rss_before: f[0] as usize,
                rss_after: f[1] as usize,
                returned: f[2] as usize,
                rss_now: f[3] as usize,
                run_time: Duration::from_nanos(f[4]),
                purge_time: Duration::from_nanos(f[5]),
            })
            .collect();
        Ok(Some(PhaseTable { rows }))
    }

    /// One row per rank, in rank order.
    pub fn rows(&self) -> &[RankReport] {
        &self.rows
    }
}

impl fmt::Display for PhaseTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:>5} {:>12} {:>14} {:>12} {:>12} {:>10} {:>10}",
            "rank", "RSS before", "RSS after job", "gave back", "RSS now", "run", "purge"
        )?;
        for r in &self.rows {
            writeln!(
                f,
                "{:>5} {:>12} {:>14} {:>12} {:>12} {:>10} {:>10}",
                r.rank,
                human(r.rss_before),
                human(r.rss_after),
                human(r.returned),
                human(r.rss_now),
                format!("{:.1?}", r.run_time),
                format!("{:.1?}", r.purge_time),
            )?;
        }
        let sum = |get: fn(&RankReport) -> usize| self.rows.iter().map(get).sum::<usize>();
        write!(
            f,
            "{:>5} {:>12} {:>14} {:>12} {:>12}",
            "all",
            human(sum(|r| r.rss_before)),
            human(sum(|r| r.rss_after)),
            human(sum(|r| r.returned)),
            human(sum(|r| r.rss_now)),
        )
    }
}
