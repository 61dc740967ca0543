//! Process memory: RSS from the kernel, jemalloc's own totals, and `trim`.

use std::fmt;
use std::io::{Read, Write};

use crate::error::Error;
use crate::figures::bytes::Bytes;
use crate::mechanism::ctl::{self, ARENAS_ALL};
use crate::policy::purge;

/// A snapshot of the process's memory, from the kernel and from jemalloc.
///
/// The jemalloc figures describe only memory jemalloc manages (all of a Rust program's
/// heap when [`ArenaAlloc`](crate::ArenaAlloc) is installed). All are in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Memory {
    /// Resident set size of the whole process, from `/proc/self/statm` (0 where that is
    /// unavailable, i.e. off Linux).
    pub rss: usize,
    /// Peak resident set size (`VmHWM`) since the start or the last [`reset_peak_rss`].
    pub peak_rss: usize,
    /// Bytes the program holds in live allocations.
    pub allocated: usize,
    /// Bytes in pages that hold live allocations (`allocated` plus fragmentation).
    pub active: usize,
    /// Bytes jemalloc has resident: active pages, unused pages not yet given back, and
    /// its metadata.
    pub resident: usize,
    /// Bytes of address space jemalloc keeps mapped but has given back to the OS (not
    /// resident; reused before new mappings are made).
    pub retained: usize,
    /// Bytes jemalloc has mapped for data (active and unused pages).
    pub mapped: usize,
    /// Bytes of jemalloc's own metadata (arenas, caches, extent maps).
    pub metadata: usize,
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RSS {} (peak {}); jemalloc: allocated {}, active {}, resident {}, retained {}",
            Bytes(self.rss),
            Bytes(self.peak_rss),
            Bytes(self.allocated),
            Bytes(self.active),
            Bytes(self.resident),
            Bytes(self.retained),
        )
    }
}

/// Takes a [`Memory`] snapshot.
///
/// Refreshes jemalloc's statistics, which takes time in proportion to the number of
/// arenas (microseconds for a few dozen). Figures that cannot be read are 0.
///
/// # Warning: a snapshot taken while other threads allocate
///
/// jemalloc sums its figures arena by arena, and RSS is read from the kernel after
/// them, so while other threads allocate and free the figures need not agree with
/// each other: `allocated` was seen a few hundred KiB above `active`. They are exact
/// relative to each other only when nothing else runs.
pub fn memory() -> Memory {
    let totals = ctl::refresh_stats()
        .and_then(|()| ctl::totals())
        .unwrap_or_default();
    Memory {
        rss: rss(),
        peak_rss: peak_rss(),
        allocated: totals.allocated,
        active: totals.active,
        resident: totals.resident,
        retained: totals.retained,
        mapped: totals.mapped,
        metadata: totals.metadata,
    }
}

/// Reads a small `/proc` file into a stack buffer (no heap allocation: this runs inside
/// scopes and between a scope's end and its report).
fn read_proc<'b>(path: &str, buf: &'b mut [u8]) -> Option<&'b str> {
    let mut file = std::fs::File::open(path).ok()?;
    let mut len = 0;
    while len < buf.len() {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    std::str::from_utf8(&buf[..len]).ok()
}

/// The process's resident set size in bytes (0 where `/proc/self/statm` is unavailable).
///
/// Everything resident counts: the heap, and also the program's code and the shared
/// libraries' pages, which grow as a large program runs code it had not run before. To
/// see what the allocator holds, read [`memory`]'s jemalloc figures beside it.
pub fn rss() -> usize {
    statm_rss("/proc/self/statm").unwrap_or(0)
}

/// The resident set size in bytes of process `pid` (from `/proc/<pid>/statm`), or
/// `None` if it cannot be read: the process has exited, or this is not Linux. For
/// watching another process, as a benchmark runner watches its children.
pub fn rss_of(pid: u32) -> Option<usize> {
    // "/proc/" + at most 10 digits + "/statm", formatted on the stack.
    let mut path = [0u8; 32];
    let len = {
        let mut cursor = std::io::Cursor::new(&mut path[..]);
        write!(cursor, "/proc/{pid}/statm").ok()?;
        cursor.position() as usize
    };
    statm_rss(std::str::from_utf8(&path[..len]).ok()?)
}

/// The RSS in bytes from a `statm` file (its second field, in pages).
fn statm_rss(path: &str) -> Option<usize> {
    let mut buf = [0u8; 128];
    parse_statm(read_proc(path, &mut buf)?, os_page_size())
}

fn parse_statm(statm: &str, page: usize) -> Option<usize> {
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page)
}

/// The process's peak resident set size in bytes (`VmHWM`; 0 where unavailable).
pub fn peak_rss() -> usize {
    let mut buf = [0u8; 4096];
    read_proc("/proc/self/status", &mut buf)
        .and_then(|s| parse_status_kib(s, "VmHWM:"))
        .map_or(0, |kib| kib * 1024)
}

/// The process's anonymous memory mapped in huge pages, in bytes (`AnonHugePages` of
/// `/proc/self/smaps_rollup`; 0 where unavailable): how much of what arenas with huge
/// pages (see [`set_huge_pages`](crate::set_huge_pages)) faulted in the kernel gave as
/// huge pages. Reading it walks the process's mappings: microseconds to a millisecond.
pub fn huge_page_rss() -> usize {
    let mut buf = [0u8; 4096];
    read_proc("/proc/self/smaps_rollup", &mut buf)
        .and_then(|s| parse_status_kib(s, "AnonHugePages:"))
        .map_or(0, |kib| kib * 1024)
}

/// Resets the peak RSS ([`peak_rss`], [`Memory::peak_rss`]) to the current RSS, so a
/// phase's own peak can be measured.
///
/// # Errors
///
/// The kernel refused (`/proc/self/clear_refs` missing or not writable).
pub fn reset_peak_rss() -> std::io::Result<()> {
    std::fs::write("/proc/self/clear_refs", b"5")
}

fn parse_status_kib(status: &str, key: &str) -> Option<usize> {
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].split_whitespace().next()?.parse().ok()
}

fn os_page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096)
}

/// Gives every arena's unused pages back to the OS, like `malloc_trim(0)` for glibc,
/// and returns how many bytes that was.
///
/// Flushes the calling thread's cache first. Objects cached by *other* threads keep
/// their pages until those threads flush. Only whole free pages can be returned. The
/// figure comes from jemalloc's purge counters, as [`Arena::purge`](crate::Arena::purge)'s
/// does: pages another thread purged in the meantime count too.
///
/// Arenas are purged one at a time. A scope or job ending on another thread while
/// `trim` purges its arena waits for that purge, then gives back what it freed.
///
/// # Errors
///
/// A jemalloc control call failed (not expected in practice).
pub fn trim() -> Result<usize, Error> {
    crate::policy::idle::start();
    ctl::refresh_stats()?;
    let before = ctl::arena_purged_bytes(ARENAS_ALL)?;
    ctl::thread_tcache_flush()?;
    purge::purge(ARENAS_ALL)?;
    ctl::refresh_stats()?;
    Ok(ctl::arena_purged_bytes(ARENAS_ALL)?.saturating_sub(before))
}

/// Returns every object the calling thread holds in its cache to the arena it came
/// from, so that the pages of objects it freed can be given back by a purge. (A
/// thread's cache holds up to a few hundred freed objects of each size up to 32 KiB;
/// their pages stay in use while they are cached.)
///
/// Scopes and pools call it where needed; call it by hand before purging memory that
/// the calling thread freed outside any scope.
///
/// # Errors
///
/// A jemalloc control call failed (not expected in practice).
pub fn flush_thread_cache() -> Result<(), Error> {
    Ok(ctl::thread_tcache_flush()?)
}

/// The most a thread's cache can keep resident: every object it can hold, each alone
/// in its slab (for each size class the cache holds, the number of objects it holds ×
/// the size of one slab). 46.3 MiB with jemalloc 5.3's defaults and 4 KiB pages.
///
/// A pool's workers keep their caches between jobs, so a pool of `n` workers can keep
/// up to `n ×` this resident after its jobs, until it is dropped; in practice freed
/// objects share slabs and a worker keeps a few MiB (docs/design.md has both figures
/// and the allocation pattern that reaches the worst case). A thread that flushes its
/// cache ([`flush_thread_cache`]) keeps nothing.
///
/// # Errors
///
/// A jemalloc control call failed (not expected in practice).
pub fn thread_cache_worst_case() -> Result<usize, Error> {
    Ok(ctl::cached_classes()?
        .iter()
        .map(|class| class.cached * class.slab)
        .sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_statm() {
        assert_eq!(
            parse_statm("5000 1200 300 10 0 900 0\n", 4096),
            Some(1200 * 4096)
        );
        assert_eq!(parse_statm("1 2", 16384), Some(2 * 16384));
        assert_eq!(parse_statm("5000", 4096), None);
        assert_eq!(parse_statm("", 4096), None);
        assert_eq!(parse_statm("a b c", 4096), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn reads_another_process_rss() {
        let mine = rss_of(std::process::id()).unwrap();
        assert!(mine > 0);
        assert!(rss_of(0).is_none(), "pid 0 has no /proc entry");
        assert!(rss_of(u32::MAX).is_none());
    }

    #[test]
    fn parses_status_lines() {
        let status = "Name:\tx\nVmPeak:\t  100 kB\nVmHWM:\t    2048 kB\nVmRSS:\t 1024 kB\n";
        assert_eq!(parse_status_kib(status, "VmHWM:"), Some(2048));
        assert_eq!(parse_status_kib(status, "VmRSS:"), Some(1024));
        assert_eq!(parse_status_kib(status, "VmSwap:"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn rss_is_read() {
        let rss = rss();
        assert!(rss > 0);
        assert!(peak_rss() >= rss / 2, "peak {} vs rss {rss}", peak_rss());
    }
}
