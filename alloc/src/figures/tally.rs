//! The running totals since the process started: work begun and ended (phases, scopes,
//! pool jobs), what its ends gave back and how long that took, by [`Label`], and the
//! arenas recycled. [`crate::stats`] reads them; the floors above count into them.
//!
//! Counting is a few relaxed atomic additions where work starts and ends, never on the
//! allocator's paths. Labels are a fixed table of [`MAX_LABELS`] names, made once each,
//! so that the totals a service exports stay a bounded set of series.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use crate::error::Error;
use crate::mechanism::fork::Lock;

/// The most [`Label`]s a process can have.
pub const MAX_LABELS: usize = 64;

/// A name that work (a phase, a pool's jobs, a piece of work counted with [`Tally`]) is
/// attributed to in [`stats`](crate::stats)'s totals: [`Stats::labels`](crate::Stats)
/// has the totals of each label, and the exposition a `name` label on each series.
///
/// Made once per name: [`Label::new`] with a name already made returns that label. A
/// process has at most [`MAX_LABELS`], so name kinds of work ("ingest", "query"), not
/// requests or items.
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// use arenapool_alloc::{Label, Work};
///
/// let ingest = Label::new("ingest")?;
/// let rows: Vec<Vec<u8>> = ingest.phase(|| (0..4).map(|_| vec![1u8; 1 << 20]).collect());
/// drop(rows);
/// let stats = arenapool_alloc::stats();
/// let totals = stats.label_totals(ingest, Work::Phase);
/// assert!(totals.ended >= 1);
/// assert_eq!(ingest.name(), "ingest");
/// # Ok::<(), arenapool_alloc::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Label {
    /// Its slot in the tables below, from 1 (0 counts unlabelled work).
    slot: u8,
}

/// Each label's name, by slot; slot 0 has none.
static NAMES: [OnceLock<Box<str>>; MAX_LABELS + 1] = [const { OnceLock::new() }; MAX_LABELS + 1];

/// How many labels are made; taken only to make one.
static MADE: Lock<usize> = Lock::new(0);

impl Label {
    /// The label named `name`, made on first use.
    ///
    /// # Errors
    ///
    /// [`MAX_LABELS`] labels are made already ([`Error::is_too_many_labels`]): the
    /// message names the label refused and the limit.
    pub fn new(name: &str) -> Result<Label, Error> {
        let mut made = MADE.lock();
        let found = (1..=*made).find(|&slot| NAMES[slot].get().is_some_and(|n| &**n == name));
        let slot = match found {
            Some(slot) => slot,
            None if *made == MAX_LABELS => return Err(Error::too_many_labels(name, MAX_LABELS)),
            None => {
                *made += 1;
                // Only this thread, holding the lock, sets a slot.
                let _ = NAMES[*made].set(name.into());
                *made
            }
        };
        Ok(Label { slot: slot as u8 })
    }

    /// Its name.
    pub fn name(self) -> &'static str {
        NAMES[usize::from(self.slot)].get().map_or("", |name| name)
    }

    /// Every label made so far, in the order they were made.
    pub fn all() -> impl Iterator<Item = Label> {
        (1..=MAX_LABELS)
            .take_while(|&slot| NAMES[slot].get().is_some())
            .map(|slot| Label { slot: slot as u8 })
    }
}

/// A kind of work whose running totals [`stats`](crate::stats) keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Work {
    /// A [`phase`](crate::phase), each time one is opened (nested ones too).
    Phase,
    /// A [`with_arena`](crate::with_arena) scope or one of its twins.
    Scope,
    /// A thread pool's job (`ArenaPool::run` and its twins, a stream).
    Job,
}

impl Work {
    /// Every kind, in the order of the exposition.
    pub const ALL: [Work; 3] = [Work::Phase, Work::Scope, Work::Job];

    /// Its name in the exposition: `phase`, `scope` or `job`.
    pub fn name(self) -> &'static str {
        match self {
            Work::Phase => "phase",
            Work::Scope => "scope",
            Work::Job => "job",
        }
    }
}

/// The running totals of one kind of work (of one label, or of all), since the process
/// started. Counters only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WorkTotals {
    /// Pieces of work started.
    pub started: u64,
    /// Pieces of work ended (started minus ended are running).
    pub ended: u64,
    /// Bytes their arenas gave back to the OS, from the arenas' own counts: for a
    /// scope, from its start to the end of its give back, as its
    /// [`Report`](crate::Report) counts; for a job, what its end gave back; for a
    /// phase, what the phase arenas gave back from the opening of the first of the
    /// phases open to its end (the bound's purges while it was open, and the end's)
    /// (phases, or jobs of one pool, that overlap share arenas, and the last to end
    /// gives back for all; a pool that keeps its pages warm gives back later, and
    /// counts nothing here). What a phase's end purges from jemalloc's own arenas, and
    /// blocks of 8 MiB and more that jemalloc gives back as they are freed while work
    /// runs, count in [`Stats::returned`](crate::Stats) only.
    pub returned: u64,
    /// Time their ends spent giving memory back.
    pub give_back_time: Duration,
}

impl WorkTotals {
    fn add(&mut self, other: &WorkTotals) {
        self.started += other.started;
        self.ended += other.ended;
        self.returned += other.returned;
        self.give_back_time += other.give_back_time;
    }
}

struct Counts {
    started: AtomicU64,
    ended: AtomicU64,
    returned: AtomicU64,
    give_back_nanos: AtomicU64,
}

impl Counts {
    const fn new() -> Self {
        Counts {
            started: AtomicU64::new(0),
            ended: AtomicU64::new(0),
            returned: AtomicU64::new(0),
            give_back_nanos: AtomicU64::new(0),
        }
    }

    fn read(&self) -> WorkTotals {
        WorkTotals {
            started: self.started.load(Ordering::Relaxed),
            ended: self.ended.load(Ordering::Relaxed),
            returned: self.returned.load(Ordering::Relaxed),
            give_back_time: Duration::from_nanos(self.give_back_nanos.load(Ordering::Relaxed)),
        }
    }
}

/// The counts by label slot (0: unlabelled) and kind of work.
static COUNTS: [[Counts; 3]; MAX_LABELS + 1] =
    [const { [const { Counts::new() }; 3] }; MAX_LABELS + 1];

fn counts(work: Work, slot: u8) -> &'static Counts {
    let kind = match work {
        Work::Phase => 0,
        Work::Scope => 1,
        Work::Job => 2,
    };
    &COUNTS[usize::from(slot)][kind]
}

/// One piece of work in the running totals: counted as started when made, as ended
/// when [`end`](Tally::end) is called with what its end gave back (or when dropped,
/// with nothing). Phases, scopes and `ArenaPool` jobs count themselves; a thread pool
/// of one's own built on [`Arena`](crate::Arena) counts its jobs with it.
///
/// ```
/// # #[global_allocator]
/// # static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
/// use std::time::Instant;
/// use arenapool_alloc::{Arena, Tally, Work};
///
/// let arena = Arena::new()?;
/// let job = Tally::start(Work::Job, None);
/// arena.enter(|| drop(vec![1u8; 8 << 20]));
/// let (before, started) = (arena.returned_total()?, Instant::now());
/// arena.return_freed()?;
/// job.end(arena.returned_total()? - before, started.elapsed());
/// # Ok::<(), arenapool_alloc::Error>(())
/// ```
///
/// With the feature `tracing`, each tally is also a `tracing` span at level INFO named
/// `arenapool`, from its start to its end (not entered: work may end on another
/// thread), with the fields `work` (`phase`, `scope` or `job`), `name` (the label, `""`
/// without), and, recorded at the end, `returned_bytes`, `give_back_seconds` and
/// `run_seconds` (start to end).
#[derive(Debug)]
#[must_use = "the work counts as ended as soon as its tally is dropped"]
pub struct Tally {
    work: Work,
    slot: u8,
    ended: bool,
    #[cfg(feature = "tracing")]
    span: WorkSpan,
}

impl Tally {
    /// Counts a piece of `work`, under `label` if any, as started.
    pub fn start(work: Work, label: Option<Label>) -> Tally {
        let slot = label.map_or(0, |label| label.slot);
        counts(work, slot).started.fetch_add(1, Ordering::Relaxed);
        Tally {
            work,
            slot,
            ended: false,
            #[cfg(feature = "tracing")]
            span: WorkSpan::start(work, label),
        }
    }

    /// Counts the work as ended, its end having given back `returned` bytes in
    /// `give_back_time`.
    pub fn end(mut self, returned: usize, give_back_time: Duration) {
        self.count_end(returned, give_back_time);
    }

    fn count_end(&mut self, returned: usize, give_back_time: Duration) {
        if self.ended {
            return;
        }
        self.ended = true;
        let counts = counts(self.work, self.slot);
        counts.ended.fetch_add(1, Ordering::Relaxed);
        counts
            .returned
            .fetch_add(returned as u64, Ordering::Relaxed);
        let nanos = u64::try_from(give_back_time.as_nanos()).unwrap_or(u64::MAX);
        counts.give_back_nanos.fetch_add(nanos, Ordering::Relaxed);
        #[cfg(feature = "tracing")]
        self.span.end(returned, give_back_time);
    }
}

/// A piece of work's `tracing` span (see [`Tally`]).
#[cfg(feature = "tracing")]
#[derive(Debug)]
struct WorkSpan {
    span: tracing::Span,
    started: std::time::Instant,
}

#[cfg(feature = "tracing")]
impl WorkSpan {
    fn start(work: Work, label: Option<Label>) -> WorkSpan {
        use tracing::field::Empty;
        let name = label.map_or("", Label::name);
        let span = tracing::info_span!(
            "arenapool",
            work = work.name(),
            name,
            returned_bytes = Empty,
            give_back_seconds = Empty,
            run_seconds = Empty
        );
        WorkSpan {
            span,
            started: std::time::Instant::now(),
        }
    }

    fn end(&self, returned: usize, give_back_time: Duration) {
        self.span.record("returned_bytes", returned as u64);
        self.span
            .record("give_back_seconds", give_back_time.as_secs_f64());
        self.span
            .record("run_seconds", self.started.elapsed().as_secs_f64());
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        self.count_end(0, Duration::ZERO);
    }
}

/// The totals of `work` under `label`; `None`: of all of it, labelled or not.
pub(crate) fn totals(work: Work, label: Option<Label>) -> WorkTotals {
    match label {
        Some(label) => counts(work, label.slot).read(),
        None => {
            let mut all = WorkTotals::default();
            for slot in 0..=MAX_LABELS {
                all.add(&counts(work, slot as u8).read());
            }
            all
        }
    }
}

/// Purges jemalloc skipped inside a free into an idle arena (another was under way),
/// made up for by a purge of this crate's; and waits for a purge under way that gave up.
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static GAVE_UP: AtomicU64 = AtomicU64::new(0);

/// Counts a purge jemalloc skipped inside a free, which this crate makes up for.
pub(crate) fn purge_skipped() {
    SKIPPED.fetch_add(1, Ordering::Relaxed);
}

/// Purges jemalloc skipped inside a free so far.
pub(crate) fn purges_skipped() -> u64 {
    SKIPPED.load(Ordering::Relaxed)
}

/// Rounds of waits for a purge of jemalloc's under way (see
/// [`crate::policy::purge::until_a_purge_runs`]) that found one and tried again.
static WAITED: AtomicU64 = AtomicU64::new(0);

/// Counts a round of a wait for a purge under way that found one.
pub(crate) fn purge_waited() {
    WAITED.fetch_add(1, Ordering::Relaxed);
}

/// Rounds of waits for a purge under way that found one, so far.
#[cfg(test)]
pub(crate) fn purge_waits() -> u64 {
    WAITED.load(Ordering::Relaxed)
}

/// Counts a wait for a purge under way that gave up, leaving pages for the arena's
/// next purge.
pub(crate) fn purge_wait_given_up() {
    GAVE_UP.fetch_add(1, Ordering::Relaxed);
}

/// Waits for a purge under way that gave up so far.
pub(crate) fn purge_waits_given_up() -> u64 {
    GAVE_UP.load(Ordering::Relaxed)
}

/// Arenas taken off the free list for reuse, rather than created.
static RECYCLED: AtomicU64 = AtomicU64::new(0);

/// Counts an arena taken off the free list.
pub(crate) fn arena_recycled() {
    RECYCLED.fetch_add(1, Ordering::Relaxed);
}

/// Arenas taken off the free list so far.
pub(crate) fn arenas_recycled() -> u64 {
    RECYCLED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tally_counts_its_start_and_end() {
        let label = Label::new("tally-b").expect("a label");
        let before = totals(Work::Job, Some(label));
        let job = Tally::start(Work::Job, Some(label));
        assert_eq!(totals(Work::Job, Some(label)).started, before.started + 1);
        job.end(4096, Duration::from_micros(3));
        drop(Tally::start(Work::Job, Some(label)));
        let after = totals(Work::Job, Some(label));
        assert_eq!(after.started, before.started + 2);
        assert_eq!(after.ended, before.ended + 2);
        assert_eq!(after.returned, before.returned + 4096);
        assert!(after.give_back_time >= before.give_back_time + Duration::from_micros(3));
        assert!(totals(Work::Job, None).ended >= after.ended);
    }
}
