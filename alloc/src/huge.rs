//! Huge pages for this crate's arenas: which arenas have them, how their memory is
//! advised, and how it is given back so that huge pages come back whole.
//!
//! Faulting memory in costs a fraction per byte in 2 MiB huge pages of what it costs in
//! 4 KiB pages, where the kernel has free huge pages at hand (docs/design.md has the
//! figures, and when it has not). An arena with huge pages on
//! ([`set_for_arena`], fixed before its first mapping):
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
//! pages are `never` or not built in ([`available`]), arenas behave as with huge
//! pages off. Where it cannot find a free huge page, a fault falls back to small pages.

use crate::ctl::ARENAS_ALL;
use crate::fork;
use crate::hooks::{self, GRANULE};
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

/// The huge page the arenas are advised to use: the x86-64 and AArch64 (4 KiB base
/// pages) PMD size, which is also the granule the extent hooks map.
pub(crate) const HUGE_PAGE: usize = GRANULE;

/// Whether arenas created from now on by [`Arena::new`](crate::Arena::new), scopes and
/// phases have huge pages (see [`set_huge_pages`]): [`UNSET`] until set or read.
static DEFAULT: AtomicU8 = AtomicU8::new(UNSET);

const UNSET: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;

/// The environment variable that sets the default of [`set_huge_pages`].
pub const HUGE_PAGES_ENV: &str = "ARENAPOOL_HUGE_PAGES";

/// Per arena index: huge pages on.
static ARENA_ON: [AtomicBool; ARENAS_ALL as usize] =
    [const { AtomicBool::new(false) }; ARENAS_ALL as usize];

/// Sets whether arenas this crate hands out from now on use huge pages: those of
/// [`Arena::new`](crate::Arena::new), [`with_arena`](crate::with_arena) and its twins,
/// and the phase arenas if no [`phase`](crate::phase) has opened yet (they are made
/// once, by the first). Off by default. A pool's workers' arenas follow this unless the
/// pool's builder says otherwise.
///
/// Until it is called, the environment variable `ARENAPOOL_HUGE_PAGES` sets the default,
/// read once: `1`, `on` or `true` turn huge pages on, `0`, `off` or `false` leave them
/// off; any other value leaves them off, with a warning on stderr.
///
/// With huge pages, the kernel faults an arena's memory in 2 MiB at a time where it
/// can, and a purge gives back whole 2 MiB pages where they are free, so that they are
/// faulted in whole again. What a purge gives back is the same either way: every free
/// page. A huge page that holds live data is resident in full until a purge finds its
/// free part, so a few MiB more may stay resident per arena while small objects live in
/// it. Where the kernel's transparent huge pages are `never` or not supported, this
/// changes nothing.
///
/// # When they pay
///
/// Faulting memory in costs a fraction with huge pages where the kernel has free huge
/// pages at hand: a program that runs phase after phase reuses the same memory, and
/// runs them faster (in the benchmark suite, each run after the first of the same S1
/// job takes 0.05–0.06 s with huge pages, 0.10–0.13 s without). But a virtual machine whose guest
/// reports its free memory to the host (virtio-balloon free page reporting) gets its
/// huge pages from memory the host took back, and the first touch of such memory costs
/// the host's own page faults: 4.4 s per GiB against 0.5 s in 4 KiB pages on the
/// machine docs/benchmarks.md was measured on, so that a one-off phase in a fresh
/// process ran 2x slower. Hence off by default; docs/design.md has the figures.
pub fn set_huge_pages(on: bool) {
    DEFAULT.store(if on { ON } else { OFF }, Ordering::Relaxed);
}

/// Whether arenas handed out from now on use huge pages (see [`set_huge_pages`]): the
/// setting, and the kernel allowing them.
pub fn huge_pages() -> bool {
    default_setting() && available()
}

/// The setting of [`set_huge_pages`] (or of the environment), whatever the kernel
/// allows.
pub(crate) fn default_setting() -> bool {
    let mut setting = DEFAULT.load(Ordering::Relaxed);
    if setting == UNSET {
        setting = match std::env::var(HUGE_PAGES_ENV).as_deref() {
            Ok("1" | "on" | "true") => ON,
            Err(std::env::VarError::NotPresent) | Ok("0" | "off" | "false") => OFF,
            Ok(other) => {
                eprintln!(
                    "arenapool: {HUGE_PAGES_ENV}={other:?} is not 0, off, false, 1, on or \
                     true: huge pages stay off"
                );
                OFF
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                eprintln!("arenapool: {HUGE_PAGES_ENV} is not valid Unicode: huge pages stay off");
                OFF
            }
        };
        // A call of `set_huge_pages` meanwhile wins.
        setting =
            match DEFAULT.compare_exchange(UNSET, setting, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => setting,
                Err(set) => set,
            };
    }
    setting == ON
}

/// Whether the kernel may give this process's advised memory huge pages: transparent
/// huge pages are built in and `enabled` is `always` or `madvise`.
///
/// Read once; threads that race to read it first each read it (no lock, so a `fork`
/// meanwhile leaves the child nothing to wait for).
pub(crate) fn available() -> bool {
    static AVAILABLE: AtomicU8 = AtomicU8::new(UNSET);
    match AVAILABLE.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .is_ok_and(|policy| policy.contains("[always]") || policy.contains("[madvise]"));
            AVAILABLE.store(if on { ON } else { OFF }, Ordering::Relaxed);
            on
        }
    }
}

/// Sets huge pages on or off for arena `index`, before anything is mapped for it.
pub(crate) fn set_for_arena(index: u32, on: bool) {
    let on = on && available();
    if on {
        fork::on_child(after_fork_in_child);
    }
    if let Some(flag) = ARENA_ON.get(index as usize) {
        flag.store(on, Ordering::Relaxed);
    }
}

/// In a child made by `fork` (see [`crate::fork`]): a huge page that another thread of
/// the parent was giving back whole at the fork ([`GIVING_BACK`] set) would make every
/// later [`commit`] of it wait for a thread the child does not have. Nothing in such a
/// huge page was committed (that is why it was being given back), so its count is 0.
fn after_fork_in_child() {
    hooks::for_each_committed_count(|count| {
        if count.load(Ordering::Relaxed) & GIVING_BACK != 0 {
            count.store(0, Ordering::Release);
        }
    });
}

/// Whether arena `index` has huge pages.
#[inline]
pub(crate) fn is_on(index: u32) -> bool {
    ARENA_ON
        .get(index as usize)
        .is_some_and(|flag| flag.load(Ordering::Relaxed))
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
    if !is_on(index) || alignment >= HUGE_PAGE {
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
        let Some(count) = hooks::committed_pages(page) else {
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
        let Some(count) = hooks::committed_pages(page) else {
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

/// `MADV_DONTNEED` on `[start, end)` (see [`hooks::dont_need`]): its pages go back at
/// once, and read as zeros after. Returns `true` if the kernel refused.
fn dont_need(start: usize, end: usize) -> bool {
    hooks::dont_need(start, end)
}
