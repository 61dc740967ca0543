//! The error type of every fallible call in this crate.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::mechanism::ctl::{CtlError, ARENA_LIMIT};

/// Why an arena could not be created, bound or purged.
///
/// The message says what to do about it. Use [`Error::is_not_installed`] and
/// [`Error::is_arena_limit`] to tell the two cases a program can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ErrorKind {
    NotInstalled,
    PercpuArena,
    ArenaLimit { live: usize },
    NoMemoryForArena,
    ThresholdTooSmall { asked: usize, smallest: usize },
    ProcessMadvise { batch: usize },
    TooManyLabels { name: String, max: usize },
    Ctl(CtlError),
}

impl Error {
    pub(crate) fn not_installed() -> Self {
        Error {
            kind: ErrorKind::NotInstalled,
        }
    }

    pub(crate) fn percpu_arena() -> Self {
        Error {
            kind: ErrorKind::PercpuArena,
        }
    }

    pub(crate) fn arena_limit(live: usize) -> Self {
        Error {
            kind: ErrorKind::ArenaLimit { live },
        }
    }

    pub(crate) fn no_memory_for_arena() -> Self {
        Error {
            kind: ErrorKind::NoMemoryForArena,
        }
    }

    pub(crate) fn process_madvise(batch: usize) -> Self {
        Error {
            kind: ErrorKind::ProcessMadvise { batch },
        }
    }

    pub(crate) fn too_many_labels(name: &str, max: usize) -> Self {
        Error {
            kind: ErrorKind::TooManyLabels {
                name: name.to_string(),
                max,
            },
        }
    }

    /// True when a new [`Label`](crate::Label) was asked for with every one of the
    /// [`MAX_LABELS`](crate::MAX_LABELS) taken.
    pub fn is_too_many_labels(&self) -> bool {
        matches!(self.kind, ErrorKind::TooManyLabels { .. })
    }

    pub(crate) fn threshold_too_small(asked: usize, smallest: usize) -> Self {
        Error {
            kind: ErrorKind::ThresholdTooSmall { asked, smallest },
        }
    }

    /// True when `ArenaAlloc` (jemalloc) is not this program's global allocator, so an
    /// arena could never hold its allocations.
    pub fn is_not_installed(&self) -> bool {
        self.kind == ErrorKind::NotInstalled
    }

    /// True when jemalloc runs with its `percpu_arena` option, under which threads
    /// cannot be bound to arenas of their own.
    pub fn is_percpu_arena(&self) -> bool {
        self.kind == ErrorKind::PercpuArena
    }

    /// True when jemalloc runs with `process_madvise_max_batch` above 0, under which it
    /// could give an arena's pages back without the extent hooks through which arenapool
    /// sees every purge: no arena is created.
    pub fn is_process_madvise(&self) -> bool {
        matches!(self.kind, ErrorKind::ProcessMadvise { .. })
    }

    /// True when jemalloc's limit on arenas per process is reached: too many
    /// [`Arena`](crate::Arena)s or scopes are alive at once.
    pub fn is_arena_limit(&self) -> bool {
        matches!(self.kind, ErrorKind::ArenaLimit { .. })
    }

    /// True when jemalloc could not make a new arena for want of memory for its
    /// metadata: the process's address space is full (an address-space limit such as
    /// `ulimit -v`), or the kernel refused to map more.
    pub fn is_out_of_memory(&self) -> bool {
        self.kind == ErrorKind::NoMemoryForArena
    }

    /// Prints this error to stderr as the warning that work is running without an
    /// arena, so its memory is not given back; once per process, however many scopes,
    /// jobs and streams meet an error. [`with_arena`](crate::with_arena) and the thread
    /// pool call it when they fall back to running unscoped.
    ///
    /// Not part of the API: public only for `arenapool-pool`, which shares the one
    /// warning.
    #[doc(hidden)]
    pub fn warn_once(&self) {
        static WARNED: AtomicBool = AtomicBool::new(false);
        if !WARNED.swap(true, Ordering::Relaxed) {
            eprintln!("arenapool: running without an arena (memory is not given back): {self}");
        }
    }
}

impl From<CtlError> for Error {
    fn from(e: CtlError) -> Self {
        Error {
            kind: ErrorKind::Ctl(e),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::NotInstalled => f.write_str(
                "arenapool::ArenaAlloc is not the global allocator, so no arena can hold this \
                 program's allocations: add `#[global_allocator] static GLOBAL: \
                 arenapool::ArenaAlloc = arenapool::ArenaAlloc;` to the binary's main.rs",
            ),
            ErrorKind::PercpuArena => f.write_str(
                "jemalloc runs with `percpu_arena`, which ties every thread to a per-CPU arena \
                 and cannot bind it to another: remove `percpu_arena` from `_RJEM_MALLOC_CONF` \
                 (or from the configuration compiled into the binary) to use arenapool's arenas",
            ),
            ErrorKind::ArenaLimit { live } => write!(
                f,
                "no jemalloc arena is free: {live} arenas are held by live `Arena`s and scopes, \
                 and jemalloc allows at most {ARENA_LIMIT} arenas in a process; drop `Arena`s \
                 (or end scopes) before creating more"
            ),
            ErrorKind::NoMemoryForArena => f.write_str(
                "jemalloc could not make a new arena: no memory was left for its metadata (the \
                 process's address space is full, under an address-space limit such as \
                 `ulimit -v`, or the kernel refused to map more). A process's first phase \
                 makes the phase arenas, one per CPU, and an `Arena` or a scope may need a new \
                 one: free memory or raise the limit, or open the first phase before the \
                 address space fills up",
            ),
            ErrorKind::ProcessMadvise { batch } => write!(
                f,
                "jemalloc runs with `process_madvise_max_batch:{batch}`, under which it may \
                 give an arena's pages back without calling the arena's extent hooks, through \
                 which arenapool sees every purge (the start of a job would wait for a purge \
                 it never sees, and huge pages would be counted wrong): remove the option from \
                 `_RJEM_MALLOC_CONF` (or from the configuration compiled into the binary), or \
                 set it to 0, to use arenapool's arenas"
            ),
            ErrorKind::TooManyLabels { name, max } => write!(
                f,
                "no label `{name}`: the process has its {max} labels already, the most \
                 `arenapool::stats` keeps totals for; label by kind of work (\"ingest\", \
                 \"query\"), not by request or item, and reuse each `Label`"
            ),
            ErrorKind::ThresholdTooSmall { asked, smallest } => write!(
                f,
                "a phase threshold of {asked} bytes is too small: threads' caches keep freed \
                 blocks of up to {} bytes, whose pages would then stay resident after the \
                 phase; use {smallest} bytes or more",
                smallest - 1
            ),
            ErrorKind::Ctl(CtlError { name, errno }) => write!(
                f,
                "jemalloc control `{name}` failed: {}; jemalloc's configuration \
                 (`_RJEM_MALLOC_CONF`) may disable what arenapool needs, otherwise this is a bug \
                 worth reporting with that configuration",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

impl std::error::Error for Error {}
