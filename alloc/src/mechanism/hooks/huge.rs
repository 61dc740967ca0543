//! The extent hooks of arenas with huge pages: how their memory is advised, and how it
//! is given back so that huge pages come back whole.
//!
//! Faulting memory in costs a fraction per byte in 2 MiB huge pages of what it costs in
//! 4 KiB pages, where the kernel has free huge pages at hand (docs/design.md has the
//! figures, and when it has not). An arena with huge pages on
//! (its flag in [`crate::mechanism::table`], fixed before its first mapping):
//! - has its memory advised `MADV_HUGEPAGE` as it is mapped ([`mapped`]): whole 2 MiB
//!   pages only, aligned (the extent hooks map whole aligned granules), and not the
//!   arena's own metadata, which jemalloc maps 2 MiB-aligned and would otherwise hold a
//!   mostly empty huge page per arena;
//! - maps it uncommitted, where jemalloc lets the hook choose, so that jemalloc asks
//!   [`commit`] for every range it hands out and [`decommit`] for every range it gives
//!   back. Each huge page's count of committed pages then tells when nothing in it is
//!   in use: all of it goes back at once, and its next touch faults in a huge page.
//!
//! A range given back is given back whole, at once, whatever it covers: whole huge
//! pages whole, and the pieces of huge pages it covers in part in small pages, which
//! breaks those up (the kernel maps them in small pages from then on), unless that was
//! the last committed part of the huge page: then the whole huge page goes back, which
//! also drops its small pages' table, so that it is faulted in whole again.
//!
//! A huge page faulted in because one byte of it was touched is resident in full: up
//! to 2 MiB that jemalloc has not handed out yet stay resident beside live data, and go
//! back when the last committed range of the huge page does.
//!
//! Whether the kernel gives huge pages at all is its choice: where transparent huge
//! pages are `never` or not built in ([`crate::mechanism::huge`]), arenas behave as
//! with huge pages off. Where it cannot find a free huge page, a fault falls back to
//! small pages.

use std::ffi::c_void;
use std::sync::atomic::Ordering;

use crate::mechanism::fork;
use crate::mechanism::map::{self, GRANULE};
use crate::mechanism::table;

/// The huge page the arenas are advised to use: the x86-64 and AArch64 (4 KiB base
/// pages) PMD size, which is also the granule the extent hooks map.
const HUGE_PAGE: usize = GRANULE;

/// Called when an arena with huge pages is created: from then on, a child made by `fork`
/// clears what the parent's threads left half done (see [`after_fork_in_child`]).
pub(crate) fn arena_created() {
    fork::on_child(after_fork_in_child);
}

/// In a child made by `fork` (see [`crate::mechanism::fork`]): a huge page that another
/// thread of the parent was giving back whole at the fork ([`GIVING_BACK`] set) would
/// make every later [`commit`] of it wait for a thread the child does not have. Nothing
/// in such a huge page was committed (that is why it was being given back), so its
/// count is 0.
fn after_fork_in_child() {
    map::for_each_committed_count(|count| {
        if count.load(Ordering::Relaxed) & GIVING_BACK != 0 {
            count.store(0, Ordering::Release);
        }
    });
}

/// Bit of a huge page's committed-page count held while [`decommit`] gives the whole
/// huge page back: [`commit`] waits for it to clear.
const GIVING_BACK: u32 = 1 << 31;

/// Small pages in a huge page.
const PAGES: u32 = (HUGE_PAGE / 4096) as u32;

/// Sets up `[start, start + size)`, a new mapping of arena `index` (`start` aligned to
/// a huge page), and returns whether it is committed: asked for (`commit`), or the
/// arena has no huge pages (then nothing changes from jemalloc's own hooks), or the
/// mapping is jemalloc's metadata (`alignment` of a huge page: see the module docs).
/// Otherwise its whole huge pages are advised `MADV_HUGEPAGE`, and it is left
/// uncommitted, for jemalloc to [`commit`] as it hands out parts of it. The tail of the
/// last granule, which jemalloc did not ask for, is not advised: a huge page there
/// would fault in memory no extent covers.
pub(crate) fn mapped(
    index: u32,
    start: usize,
    size: usize,
    alignment: usize,
    commit: bool,
) -> bool {
    if !table::get(index).is_some_and(|state| state.has_huge_pages()) || alignment >= HUGE_PAGE {
        return true;
    }
    let whole = size - size % HUGE_PAGE;
    if whole > 0 {
        // SAFETY: advice on a fresh private anonymous mapping of the caller's changes
        // no data; a refusal (a kernel without transparent huge pages) leaves small
        // pages, as without it.
        unsafe { libc::madvise(start as *mut c_void, whole, libc::MADV_HUGEPAGE) };
    }
    if commit {
        let _ = self::commit(index, start, size);
    }
    commit
}

/// The huge pages `[start, start + len)` touches, each with the small pages of the
/// range that lie in it.
fn pages_by_huge_page(start: usize, len: usize) -> impl Iterator<Item = (usize, u32)> {
    let end = start + len;
    let first = start - start % HUGE_PAGE;
    (first..end).step_by(HUGE_PAGE).map(move |page| {
        let from = start.max(page);
        let to = end.min(page + HUGE_PAGE);
        (page, ((to - from) / 4096) as u32)
    })
}

/// `commit` of `[start, start + len)`, memory of an arena with huge pages that jemalloc
/// is about to hand out: counted as committed in each huge page it touches. Always
/// succeeds (`false`): the memory is mapped and writable, and reads as zeros (it was
/// given back, or never touched).
pub(crate) fn commit(_index: u32, start: usize, len: usize) -> bool {
    for (page, pages) in pages_by_huge_page(start, len) {
        let Some(count) = map::committed_pages(page) else {
            continue;
        };
        let mut seen = count.load(Ordering::Acquire);
        loop {
            if seen & GIVING_BACK != 0 {
                // The last committed range of this huge page is being given back, with
                // all of the huge page: only once that is done may part of it be used.
                std::hint::spin_loop();
                seen = count.load(Ordering::Acquire);
                continue;
            }
            match count.compare_exchange_weak(
                seen,
                seen + pages,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => break,
                Err(now) => seen = now,
            }
        }
    }
    false
}

/// `decommit` of the free range `[start, start + len)` of an arena with huge pages:
/// gives it back at once (see the module docs for how), and succeeds (`false`): it then
/// reads as zeros. Fails (`true`) only if the kernel refused; the range then stays
/// committed.
pub(crate) fn decommit(_index: u32, start: usize, len: usize) -> bool {
    if dont_need(start, start + len) {
        return true;
    }
    for (page, pages) in pages_by_huge_page(start, len) {
        let Some(count) = map::committed_pages(page) else {
            continue;
        };
        let mut seen = count.load(Ordering::Acquire);
        loop {
            if seen & !GIVING_BACK < pages {
                // Not counted as committed (not expected): leave the count alone.
                break;
            }
            if seen != pages || pages == PAGES {
                match count.compare_exchange_weak(
                    seen,
                    seen - pages,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(now) => seen = now,
                }
                continue;
            }
            // The last committed part of a huge page it covers in part: nothing in the
            // huge page is in use any more, and no part of it is handed out until the
            // whole is given back.
            match count.compare_exchange_weak(
                seen,
                GIVING_BACK,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    let _ = dont_need(page, page + HUGE_PAGE);
                    count.store(0, Ordering::Release);
                    break;
                }
                Err(now) => seen = now,
            }
        }
    }
    false
}

/// `MADV_DONTNEED` on `[start, end)` (see [`super::dont_need`]): its pages go back at
/// once, and read as zeros after. Returns `true` if the kernel refused.
fn dont_need(start: usize, end: usize) -> bool {
    super::dont_need(start, end)
}
