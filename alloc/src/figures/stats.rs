//! `stats`: one snapshot of what the allocator holds, by what its arenas serve, and
//! the running totals of what work gave back.
//!
//! One refresh of jemalloc's statistics (`epoch`), then, for every arena the process
//! has, four reads of that same refresh (cached MIBs) and a load of the counts its
//! extent hooks keep in [`crate::mechanism::table`]. The refresh is most of the cost,
//! and grows with the arenas in the process: jemalloc merges each arena's statistics of
//! every size class into its snapshot.

use crate::figures::memory;
use crate::figures::tally::{self, Label, Work, WorkTotals};
use crate::mechanism::ctl::{self, ArenaFigures, ARENAS_ALL};
use crate::mechanism::hooks;
use crate::mechanism::table::{self, Use};
use crate::policy::purge;

/// What the arenas of one kind hold, in bytes (and how many there are), as of one
/// [`stats`] snapshot.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Held {
    /// Arenas of the kind.
    pub arenas: usize,
    /// Resident: pages that hold live allocations, freed pages not given back yet,
    /// and the arenas' metadata.
    pub resident: usize,
    /// In pages that hold live allocations.
    pub active: usize,
    /// In freed pages not given back yet (kept for reuse while work runs).
    pub dirty: usize,
    /// In pages purged lazily, resident until the kernel takes them.
    pub muzzy: usize,
    /// The part of `resident` in arenas with huge pages (see
    /// [`set_huge_pages`](crate::set_huge_pages)): where the kernel found them, it
    /// maps this memory in 2 MiB pages ([`huge_page_rss`](crate::huge_page_rss) is
    /// what it did for the whole process).
    pub huge_pages: usize,
}

impl Held {
    fn add(&mut self, figures: &ArenaFigures, huge_pages: bool) {
        self.arenas += 1;
        self.resident += figures.resident;
        self.active += figures.active;
        self.dirty += figures.dirty;
        self.muzzy += figures.muzzy;
        if huge_pages {
            self.huge_pages += figures.resident;
        }
    }
}

/// A snapshot of the allocator: jemalloc's figures for the process, what the arenas
/// of each kind hold, and the running totals since the process started. Made by
/// [`stats`]; all sizes in bytes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Stats {
    /// Resident set size of the whole process (see [`rss`](crate::rss)).
    pub rss: usize,
    /// jemalloc: bytes in live allocations.
    pub allocated: usize,
    /// jemalloc: bytes in pages that hold live allocations.
    pub active: usize,
    /// jemalloc: bytes of its own metadata.
    pub metadata: usize,
    /// jemalloc: bytes resident (the sum of the kinds' `resident` below).
    pub resident: usize,
    /// jemalloc: bytes mapped for data.
    pub mapped: usize,
    /// jemalloc: bytes of address space kept mapped but given back to the OS.
    pub retained: usize,
    /// jemalloc: bytes in freed pages not given back yet.
    pub dirty: usize,
    /// jemalloc: bytes in pages purged lazily.
    pub muzzy: usize,

    /// The arenas of thread pools' workers (`ArenaPool`'s).
    pub pool: Held,
    /// The phase arenas (one per CPU, once the first [`phase`](crate::phase) opened).
    pub phase: Held,
    /// The arenas of scopes and of [`Arena`](crate::Arena)s held by hand.
    pub scope: Held,
    /// [`RawAlloc`](crate::RawAlloc)'s arenas (one per CPU, once it made its first block
    /// outside a phase and a scope). Their freed pages stay for reuse until the
    /// process goes idle, the next phase ends, or a [`trim`](crate::trim).
    pub raw: Held,
    /// This crate's arenas on the free list, waiting for reuse (what they hold is
    /// what escaped their last work and is still alive).
    pub idle: Held,
    /// jemalloc's own arenas: everything allocated outside arenapool's.
    pub automatic: Held,

    /// Bytes every arena has given back to the OS since the process started: this
    /// crate's, from the counts of their extent hooks, and jemalloc's own, from its
    /// purge statistics.
    pub returned: u64,
    /// Attempts to give pages back that failed so far (control calls jemalloc
    /// refused, ranges the kernel refused to take back). Usually 0.
    pub give_backs_failed: u64,
    /// Purges jemalloc skipped inside a free into an idle arena of this crate's,
    /// because another purge of it was under way, and that this crate made up for (a
    /// wait for that purge, then its own; see docs/design.md).
    pub purges_skipped: u64,
    /// Waits for a purge under way that gave up (after 10 s; 50 ms for an arena a
    /// child inherited from its parent): their pages stay resident until the arena's
    /// next purge. Usually 0.
    pub purge_waits_given_up: u64,
    /// Arenas this crate has created.
    pub arenas_created: u64,
    /// Arenas taken off the free list for reuse, rather than created.
    pub arenas_recycled: u64,
    /// The totals of phases, scopes and jobs, labelled or not.
    pub phases: WorkTotals,
    /// See [`phases`](Stats::phases).
    pub scopes: WorkTotals,
    /// See [`phases`](Stats::phases).
    pub jobs: WorkTotals,
    /// The totals of each label made so far, for each kind of work.
    pub labels: Vec<(Label, Work, WorkTotals)>,
}

impl Stats {
    /// The totals of `work` under `label`, as of this snapshot (zero if the label is
    /// newer than the snapshot).
    pub fn label_totals(&self, label: Label, work: Work) -> WorkTotals {
        self.labels
            .iter()
            .find(|(l, w, _)| *l == label && *w == work)
            .map_or_else(WorkTotals::default, |(_, _, totals)| *totals)
    }

    /// The totals of one kind of work, labelled or not.
    pub fn work_totals(&self, work: Work) -> WorkTotals {
        match work {
            Work::Phase => self.phases,
            Work::Scope => self.scopes,
            Work::Job => self.jobs,
        }
    }

    /// Each kind of arena with its name in the exposition (`pool`, `phase`, `scope`,
    /// `raw`, `idle`, `automatic`) and what it holds.
    pub fn by_kind(&self) -> [(&'static str, Held); 6] {
        [
            ("pool", self.pool),
            ("phase", self.phase),
            ("scope", self.scope),
            ("raw", self.raw),
            ("idle", self.idle),
            ("automatic", self.automatic),
        ]
    }
}

/// Takes a snapshot of the allocator: what jemalloc holds in the process, what the
/// arenas of each kind hold (pool workers', phases', scopes', `RawAlloc`'s, idle ones
/// and jemalloc's own), and the running totals since the process started (work begun
/// and ended, bytes given back and the time that took, failures, arenas created and
/// recycled, purges skipped). For a service's scrape handler;
/// [`write_prometheus`](crate::write_prometheus) writes it in Prometheus' text format.
///
/// jemalloc's figures and those of each arena come from one refresh of jemalloc's
/// statistics, so the kinds' `resident` add up to jemalloc's: a read that another
/// thread's refresh overtook (the allocator refreshes them too, at a phase's end or
/// as it bounds what its arenas keep) is made again, up to 8 times. The running
/// totals and `rss` are read after it.
///
/// # Cost
///
/// The refresh takes time in proportion to the arenas in the process (jemalloc's own
/// included), and holds jemalloc's control lock meanwhile (not the arenas' locks for
/// longer than a read of their counters): about 50 µs with 9 arenas in the process,
/// 1 ms with 129, on a 2-core machine (docs/design.md has the figures and the command
/// that measures them). Figures that cannot be read are 0.
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// let stats = arenapool_alloc::stats();
/// let by_kind: usize = stats.by_kind().iter().map(|(_, held)| held.resident).sum();
/// assert_eq!(by_kind, stats.resident);
/// ```
pub fn stats() -> Stats {
    let mut stats = Stats::default();
    for _ in 0..READS {
        let Ok(()) = ctl::refresh_stats() else {
            break;
        };
        let before = ctl::stats_epoch();
        stats = jemalloc_figures();
        match (before, ctl::stats_epoch()) {
            // Another thread refreshed them meanwhile: some figures are of its refresh.
            (Ok(before), Ok(after)) if before != after => continue,
            _ => break,
        }
    }
    read_running_totals(&mut stats);
    stats
}

/// How many times [`stats`] reads jemalloc's figures at most, while other threads'
/// refreshes overtake its reads; the last read stands.
const READS: usize = 8;

/// jemalloc's figures and each arena's, as of the last refresh; the rest at 0.
fn jemalloc_figures() -> Stats {
    let mut stats = Stats::default();
    if let Ok(totals) = ctl::totals() {
        stats.allocated = totals.allocated;
        stats.active = totals.active;
        stats.metadata = totals.metadata;
        stats.resident = totals.resident;
        stats.mapped = totals.mapped;
        stats.retained = totals.retained;
    }
    let count = ctl::arenas_count().unwrap_or(0).min(ARENAS_ALL);
    for index in 0..count {
        // An index no arena has yet (an automatic one no thread used) has none.
        let Ok(figures) = ctl::arena_figures(index) else {
            continue;
        };
        stats.dirty += figures.dirty;
        stats.muzzy += figures.muzzy;
        stats.give_backs_failed += purge::failures(index);
        if !table::is_ours(index) {
            stats.automatic.add(&figures, false);
            stats.returned += ctl::arena_purged_bytes(index).unwrap_or(0) as u64;
            continue;
        }
        let state = table::arena(index);
        let held = match state.serves() {
            Use::Idle => &mut stats.idle,
            Use::Scope => &mut stats.scope,
            Use::Pool => &mut stats.pool,
            Use::Phase => &mut stats.phase,
            Use::Raw => &mut stats.raw,
        };
        held.add(&figures, state.has_huge_pages());
        stats.returned += hooks::bytes_given_back(index);
    }
    stats
}

/// The running totals and `rss`, into `stats`.
fn read_running_totals(stats: &mut Stats) {
    stats.rss = memory::rss();
    stats.arenas_created = table::created() as u64;
    stats.arenas_recycled = tally::arenas_recycled();
    stats.purges_skipped = tally::purges_skipped();
    stats.purge_waits_given_up = tally::purge_waits_given_up();
    stats.phases = tally::totals(Work::Phase, None);
    stats.scopes = tally::totals(Work::Scope, None);
    stats.jobs = tally::totals(Work::Job, None);
    stats.labels = Label::all()
        .flat_map(|label| {
            Work::ALL
                .into_iter()
                .map(move |work| (label, work, tally::totals(work, Some(label))))
        })
        .collect();
}
