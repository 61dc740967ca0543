//! The contenders: which allocator a child binary installs, how it is configured, and
//! whether this build of the suite has it.

use std::ffi::CStr;
use std::fmt;

/// The `malloc_conf` string the `jemalloc-tuned` contender compiles in (through the
/// exported `_rjem_malloc_conf` symbol, read by jemalloc when it initialises): what a
/// jemalloc expert sets so that freed memory goes back to the OS at once.
///
/// - `background_thread:true`: purging runs on jemalloc's own background threads
///   instead of inside `malloc`/`free` calls;
/// - `dirty_decay_ms:0`: freed (dirty) pages are purged at once instead of over 10 s;
/// - `muzzy_decay_ms:0`: pages already lazily purged are released at once too.
pub const JEMALLOC_TUNED_CONF: &CStr = c"background_thread:true,dirty_decay_ms:0,muzzy_decay_ms:0";

/// The `malloc_conf` string of the `jemalloc-bg500` contender: the configuration data
/// frameworks ship to make jemalloc return memory within half a second without paying
/// for immediate purging.
///
/// - `background_thread:true`: purging on jemalloc's background threads;
/// - `dirty_decay_ms:500`: freed pages are purged over 0.5 s instead of 10 s;
/// - `muzzy_decay_ms:-1`: lazily purged pages are never purged further.
pub const JEMALLOC_BG500_CONF: &CStr =
    c"background_thread:true,dirty_decay_ms:500,muzzy_decay_ms:-1";

/// The `malloc_conf` string of the `jemalloc-thp` contender: jemalloc's defaults, with
/// transparent huge pages asked for everything it maps.
///
/// - `thp:always`: jemalloc advises all the memory it maps `MADV_HUGEPAGE`, which
///   matters where the kernel's transparent huge pages are in `madvise` mode (in
///   `always` mode they are on anyway; in `never` mode nothing gives them);
/// - `metadata_thp:always`: its own metadata is mapped in huge pages too.
pub const JEMALLOC_THP_CONF: &CStr = c"thp:always,metadata_thp:always";

/// glibc's `M_TRIM_THRESHOLD` for the `glibc-trim64k` contender, in bytes: the value
/// data frameworks set (`MALLOC_TRIM_THRESHOLD_=65536`) so that glibc gives back free
/// memory at the top of a heap above 64 KiB. Setting it also switches off glibc's
/// dynamic mmap threshold.
pub const GLIBC_TRIM_THRESHOLD: usize = 64 << 10;

/// One allocator configuration under test. Each is a separate binary
/// (`bench-<name>`) with its own `#[global_allocator]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Contender {
    /// The system allocator (`std::alloc::System`, glibc malloc on Linux).
    Glibc,
    /// glibc malloc, with `malloc_trim(0)` called at the end of every phase.
    GlibcTrim,
    /// glibc malloc with `M_TRIM_THRESHOLD` set to [`GLIBC_TRIM_THRESHOLD`].
    GlibcTrim64k,
    /// jemalloc with its defaults (`tikv_jemallocator::Jemalloc`).
    Jemalloc,
    /// jemalloc with [`JEMALLOC_TUNED_CONF`].
    JemallocTuned,
    /// jemalloc with [`JEMALLOC_BG500_CONF`].
    JemallocBg500,
    /// jemalloc with [`JEMALLOC_THP_CONF`].
    JemallocThp,
    /// mimalloc with its defaults.
    Mimalloc,
    /// mimalloc with its purge delay set to 0: freed memory is purged at once.
    MimallocPurge0,
    /// rpmalloc with its defaults.
    Rpmalloc,
    /// snmalloc with its defaults.
    Snmalloc,
    /// TCMalloc (Google's, with per-CPU caches) with its defaults; built only with the
    /// suite's `tcmalloc` feature.
    Tcmalloc,
    /// `arenapool_alloc::ArenaAlloc`; parallel phases run in an `ArenaPool`.
    Arenapool,
    /// As [`Arenapool`](Contender::Arenapool), with the pool built with `keep_warm` of
    /// one second: free pages stay for the next job until the pool has been idle that
    /// long.
    ArenapoolWarm,
    /// As [`Arenapool`](Contender::Arenapool), with huge pages on
    /// (`arenapool_alloc::set_huge_pages(true)` at start).
    ArenapoolHuge,
    /// `arenapool_alloc::ArenaAlloc`; parallel phases run on a plain rayon pool inside
    /// `arenapool_alloc::phase`: what a program gets that cannot change its pool.
    ArenapoolPhase,
}

/// The idle time after which the `arenapool-warm` contender's pool gives its pages back.
pub const ARENAPOOL_KEEP_WARM: std::time::Duration = std::time::Duration::from_secs(1);

impl Contender {
    /// Every contender, in the order tables and charts show them.
    pub const ALL: [Contender; 16] = [
        Contender::Glibc,
        Contender::GlibcTrim,
        Contender::GlibcTrim64k,
        Contender::Jemalloc,
        Contender::JemallocTuned,
        Contender::JemallocBg500,
        Contender::JemallocThp,
        Contender::Mimalloc,
        Contender::MimallocPurge0,
        Contender::Rpmalloc,
        Contender::Snmalloc,
        Contender::Tcmalloc,
        Contender::Arenapool,
        Contender::ArenapoolWarm,
        Contender::ArenapoolHuge,
        Contender::ArenapoolPhase,
    ];

    /// The contender's name, as given to `--contenders`.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Glibc => "glibc",
            Contender::GlibcTrim => "glibc-trim",
            Contender::GlibcTrim64k => "glibc-trim64k",
            Contender::Jemalloc => "jemalloc",
            Contender::JemallocTuned => "jemalloc-tuned",
            Contender::JemallocBg500 => "jemalloc-bg500",
            Contender::JemallocThp => "jemalloc-thp",
            Contender::Mimalloc => "mimalloc",
            Contender::MimallocPurge0 => "mimalloc-purge0",
            Contender::Rpmalloc => "rpmalloc",
            Contender::Snmalloc => "snmalloc",
            Contender::Tcmalloc => "tcmalloc",
            Contender::Arenapool => "arenapool",
            Contender::ArenapoolWarm => "arenapool-warm",
            Contender::ArenapoolHuge => "arenapool-huge",
            Contender::ArenapoolPhase => "arenapool-phase",
        }
    }

    /// The allocator and its configuration, in one line (printed with the results).
    pub fn configuration(self) -> &'static str {
        match self {
            Contender::Glibc => "glibc malloc (std::alloc::System), defaults",
            Contender::GlibcTrim => "glibc malloc, malloc_trim(0) at the end of every phase",
            Contender::GlibcTrim64k => {
                "glibc malloc, mallopt(M_TRIM_THRESHOLD, 65536) at start \
                 (as MALLOC_TRIM_THRESHOLD_=65536)"
            }
            Contender::Jemalloc => "jemalloc 5.3 (tikv-jemallocator), defaults",
            Contender::JemallocTuned => {
                "jemalloc 5.3, malloc_conf \
                 background_thread:true,dirty_decay_ms:0,muzzy_decay_ms:0"
            }
            Contender::JemallocBg500 => {
                "jemalloc 5.3, malloc_conf \
                 background_thread:true,dirty_decay_ms:500,muzzy_decay_ms:-1"
            }
            Contender::JemallocThp => {
                "jemalloc 5.3, malloc_conf thp:always,metadata_thp:always \
                 (all its memory advised MADV_HUGEPAGE)"
            }
            Contender::Mimalloc => "mimalloc 3.3 (mimalloc crate), defaults",
            Contender::MimallocPurge0 => {
                "mimalloc 3.3, mi_option_set(mi_option_purge_delay, 0) at start"
            }
            Contender::Rpmalloc => "rpmalloc (rpmalloc crate 0.2), defaults",
            Contender::Snmalloc => "snmalloc 0.7 (snmalloc-rs, built with cc), defaults",
            Contender::Tcmalloc => "TCMalloc (tcmalloc-better), defaults",
            Contender::Arenapool => {
                "arenapool (jemalloc 5.3), defaults; parallel phases are ArenaPool jobs, \
                 threads it does not own run in with_arena"
            }
            Contender::ArenapoolWarm => {
                "arenapool as above, the pool built with keep_warm(1 s): free pages kept \
                 between jobs, given back after 1 s idle"
            }
            Contender::ArenapoolHuge => {
                "arenapool as above, huge pages on (set_huge_pages(true) at start): \
                 arenas advised MADV_HUGEPAGE, given back in whole 2 MiB pages"
            }
            Contender::ArenapoolPhase => {
                "arenapool (jemalloc 5.3), defaults; parallel phases run on a plain rayon \
                 pool inside arenapool::phase, as do threads the workload starts; S2's \
                 tasks are handed from the shared stream to that pool, in a phase open \
                 for the whole stream"
            }
        }
    }

    /// The name of the contender's binary.
    pub fn binary(self) -> String {
        format!("bench-{}", self.name())
    }

    /// Looks a contender up by [`name`](Contender::name).
    pub fn from_name(name: &str) -> Option<Contender> {
        Contender::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The cargo feature of the suite that builds this contender, for those that are
    /// off by default (their C++ build is long).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            Contender::Tcmalloc => Some("tcmalloc"),
            _ => None,
        }
    }

    /// Whether this build of the suite builds the contender's binary.
    pub fn is_built(self) -> bool {
        self != Contender::Tcmalloc || cfg!(feature = "tcmalloc")
    }

    /// What to do to have the contender, when its binary is not there.
    pub fn how_to_enable(self) -> String {
        match self.feature() {
            Some(feature) => format!(
                "not available: build the suite with `--features {feature}` \
                 (cargo run --release -p arenapool-bench --features {feature})"
            ),
            None => format!(
                "not available: {} was not built (cargo build --release -p arenapool-bench)",
                self.binary()
            ),
        }
    }

    /// Whether the contender's parallel phases run in an `ArenaPool`.
    pub(crate) fn uses_arenas(self) -> bool {
        matches!(
            self,
            Contender::Arenapool | Contender::ArenapoolWarm | Contender::ArenapoolHuge
        )
    }

    /// Whether the contender's parallel phases run on a plain rayon pool inside
    /// `arenapool_alloc::phase`.
    pub(crate) fn uses_phases(self) -> bool {
        self == Contender::ArenapoolPhase
    }

    /// How long the contender's `ArenaPool` keeps free pages after a job (zero: none).
    pub(crate) fn keep_warm(self) -> std::time::Duration {
        match self {
            Contender::ArenapoolWarm => ARENAPOOL_KEEP_WARM,
            _ => std::time::Duration::ZERO,
        }
    }

    /// Checks, inside the child, that the allocator configuration is the one claimed,
    /// and says what is wrong otherwise.
    pub(crate) fn verify(self) -> Result<(), String> {
        match self {
            Contender::JemallocTuned | Contender::JemallocBg500 => {
                let on = tikv_jemalloc_ctl::opt::background_thread::read()
                    .map_err(|e| format!("cannot read opt.background_thread: {e}"))?;
                if on {
                    Ok(())
                } else {
                    Err(format!(
                        "jemalloc did not take the contender's malloc_conf \
                         (opt.background_thread is false) for {self}"
                    ))
                }
            }
            Contender::JemallocThp => verify_thp(),
            Contender::Arenapool | Contender::ArenapoolWarm | Contender::ArenapoolHuge
                if !arenapool_alloc::is_installed() =>
            {
                Err("the arenapool contender runs without ArenaAlloc installed".to_owned())
            }
            // A phase that cannot open would run the work outside one, with a warning
            // the runner does not read: the contender would measure plain jemalloc.
            Contender::ArenapoolPhase => arenapool_alloc::try_phase(|| ())
                .map_err(|e| format!("the arenapool-phase contender cannot open a phase: {e}")),
            _ => Ok(()),
        }
    }
}

/// Checks that jemalloc took [`JEMALLOC_THP_CONF`]: `opt.metadata_thp` reads `always`,
/// and `opt.thp` reads `always`, or `not supported` where the kernel has no transparent
/// huge pages (the contender then runs as plain jemalloc, and its huge-page figures say
/// so). Without the configuration both read their defaults.
fn verify_thp() -> Result<(), String> {
    let thp = read_mode(c"opt.thp")?;
    let metadata_thp = read_mode(c"opt.metadata_thp")?;
    if metadata_thp == "always" && (thp == "always" || thp == "not supported") {
        Ok(())
    } else {
        Err(format!(
            "jemalloc did not take the contender's malloc_conf (opt.thp is `{thp}`, \
             opt.metadata_thp is `{metadata_thp}`) for jemalloc-thp"
        ))
    }
}

/// The value of jemalloc option `name`, one whose value is a mode name.
fn read_mode(name: &'static CStr) -> Result<String, String> {
    // SAFETY: the options read here (`opt.thp`, `opt.metadata_thp`) are of type
    // `const char *` and point at jemalloc's static, NUL-terminated mode names.
    let value = unsafe { tikv_jemalloc_ctl::raw::read_str(name.to_bytes_with_nul()) }
        .map_err(|e| format!("cannot read {}: {e}", name.to_string_lossy()))?;
    let value = value.strip_suffix(b"\0").unwrap_or(value);
    Ok(String::from_utf8_lossy(value).into_owned())
}

impl fmt::Display for Contender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for c in Contender::ALL {
            assert_eq!(Contender::from_name(c.name()), Some(c));
            assert!(c.binary().starts_with("bench-"));
            assert!(!c.configuration().is_empty());
        }
        assert_eq!(Contender::from_name("hoard"), None);
    }

    #[test]
    fn optional_contenders_say_how_to_enable_them() {
        let tcmalloc = Contender::Tcmalloc;
        assert_eq!(tcmalloc.is_built(), cfg!(feature = "tcmalloc"));
        assert!(tcmalloc.how_to_enable().contains("--features tcmalloc"));
        for c in Contender::ALL {
            assert_eq!(c.feature().is_none(), c != Contender::Tcmalloc);
            assert!(c.feature().is_some() || c.is_built());
        }
    }

    #[test]
    fn configurations_quote_the_compiled_in_settings() {
        let conf = |c: &CStr| c.to_str().unwrap().to_owned();
        assert!(Contender::JemallocTuned
            .configuration()
            .contains(&conf(JEMALLOC_TUNED_CONF)));
        assert!(Contender::JemallocBg500
            .configuration()
            .contains(&conf(JEMALLOC_BG500_CONF)));
        assert!(Contender::JemallocThp
            .configuration()
            .contains(&conf(JEMALLOC_THP_CONF)));
        assert!(Contender::GlibcTrim64k
            .configuration()
            .contains(&GLIBC_TRIM_THRESHOLD.to_string()));
    }
}
