//! The contenders: which allocator a child binary installs, and how it runs parallel work.

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

/// One allocator configuration under test. Each is a separate binary
/// (`bench-<name>`) with its own `#[global_allocator]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Contender {
    /// The system allocator (`std::alloc::System`, glibc malloc on Linux).
    Glibc,
    /// jemalloc with its defaults (`tikv_jemallocator::Jemalloc`).
    Jemalloc,
    /// jemalloc with [`JEMALLOC_TUNED_CONF`].
    JemallocTuned,
    /// mimalloc with its defaults.
    Mimalloc,
    /// `arenapool_alloc::ArenaAlloc`; parallel phases run in an `ArenaPool`.
    Arenapool,
}

impl Contender {
    /// Every contender, in the order tables and charts show them.
    pub const ALL: [Contender; 5] = [
        Contender::Glibc,
        Contender::Jemalloc,
        Contender::JemallocTuned,
        Contender::Mimalloc,
        Contender::Arenapool,
    ];

    /// The contender's name, as given to `--contenders`.
    pub fn name(self) -> &'static str {
        match self {
            Contender::Glibc => "glibc",
            Contender::Jemalloc => "jemalloc",
            Contender::JemallocTuned => "jemalloc-tuned",
            Contender::Mimalloc => "mimalloc",
            Contender::Arenapool => "arenapool",
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

    /// Checks, inside the child, that the allocator configuration is the one claimed,
    /// and says what is wrong otherwise.
    pub(crate) fn verify(self) -> Result<(), String> {
        match self {
            Contender::JemallocTuned => {
                let on = tikv_jemalloc_ctl::opt::background_thread::read()
                    .map_err(|e| format!("cannot read opt.background_thread: {e}"))?;
                if on {
                    Ok(())
                } else {
                    Err("jemalloc did not take the tuned malloc_conf \
                         (opt.background_thread is false)"
                        .to_owned())
                }
            }
            Contender::Arenapool if !arenapool_alloc::is_installed() => {
                Err("the arenapool contender runs without ArenaAlloc installed".to_owned())
            }
            _ => Ok(()),
        }
    }
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
        }
        assert_eq!(Contender::from_name("tcmalloc"), None);
    }
}
