//! The C library's `malloc` heaps: a program that links C libraries has a second
//! allocator besides this crate's, glibc's where the C library is glibc. Its figures
//! (`mallinfo2`, or `mallinfo` on glibc before 2.33), and the trim (`malloc_trim(0)`) a
//! phase's end asks of it when its heaps hold enough free to pay for the call; and
//! the thresholds glibc adapts as large blocks are freed, kept adapting when a hook
//! takes those blocks from it ([`c_heap_freed_elsewhere`]).
//!
//! Elsewhere (musl, macOS) there are no figures and nothing is trimmed.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Whether the end of the last open phase trims the C library's heaps.
static TRIM_AFTER: AtomicBool = AtomicBool::new(true);

/// The least the heaps must hold free, and must have changed by since the last trim,
/// for a trim to be worth its call.
const MIN_FREE: usize = 1 << 20;

/// The heaps' in-use and free bytes after the last trim (`usize::MAX` before any).
static LAST_IN_USE: AtomicUsize = AtomicUsize::new(usize::MAX);
static LAST_FREE: AtomicUsize = AtomicUsize::new(usize::MAX);

/// glibc's `malloc` heaps, in bytes, from `mallinfo2` (glibc 2.33 and later) or
/// `mallinfo` (before): [`source`](CHeap::source) says which.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CHeap {
    /// Bytes in blocks handed out, those mapped on their own included.
    pub in_use: usize,
    /// Bytes of free blocks in the heaps, resident or not: pages a trim gave back stay
    /// counted here.
    pub free: usize,
    /// Where the figures come from.
    pub source: CHeapSource,
}

/// Where [`CHeap`]'s figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CHeapSource {
    /// glibc's `mallinfo2` (2.33 and later): exact.
    Mallinfo2,
    /// glibc's `mallinfo`, where `mallinfo2` is missing (glibc 2.17 to 2.32). Its
    /// fields are C `int`s, which wrap past 2 GiB; they are read here as unsigned, so
    /// each figure is exact below 4 GiB and counted modulo 4 GiB above. The trim at a
    /// phase's end still runs on them: a figure that wrapped can only make it run when
    /// it was not worth its call, or wait for the next change of 1 MiB.
    Mallinfo,
}

/// The C library's `malloc` heaps now, where the C library is glibc (`mallinfo2` from
/// 2.33 on, `mallinfo` before: see [`CHeapSource`]); `None` elsewhere.
pub fn c_heap() -> Option<CHeap> {
    imp::figures()
}

/// Whether the end of the last open phase, and the idle return (see
/// [`set_idle_return`](crate::set_idle_return)), also ask glibc's `malloc` to give back
/// the free pages of its heaps (`malloc_trim(0)`), when they hold at least 1 MiB free
/// and have changed by as much since the last trim: on by default. Where the C library is
/// not glibc, nothing is trimmed either way.
///
/// A program that links C libraries (a database driver, a compression library) frees
/// their memory into glibc's heaps, which give back only what is free at their top;
/// the trim gives back every whole free page. It costs a walk of the heaps' free
/// blocks: microseconds when little is free, milliseconds for hundreds of MiB.
pub fn set_trim_c_heap_after_phase(on: bool) {
    TRIM_AFTER.store(on, Ordering::Relaxed);
}

/// Tells the C library's `malloc` that a block of `size` bytes it would have served was
/// freed by another allocator: a hook that takes the large blocks of a program's
/// `malloc` (such as one on an interpreter's raw allocator) calls this as it frees one
/// of them. Lock-free; a load and two comparisons but for at most a few calls in the
/// life of the process.
///
/// glibc adapts two thresholds as a program frees large blocks (`mallopt(3)`,
/// `M_MMAP_THRESHOLD`): when a block it mapped on its own (128 KiB or more at first)
/// is freed, blocks up to that size come from its heaps from then on, and its main heap
/// keeps free pages at its top up to twice that size. A program whose large blocks all
/// go to another allocator never lets it adapt: its heap then gives back a page at
/// nearly every `free` at its top and takes it again at the next `malloc` (a system
/// call and a page fault each, for blocks of a few KiB freed in the order they were
/// made). So the first block of more than 128 KiB (up to glibc's cap, 32 MiB) freed
/// here, and after it each one more than twice as large as the last that did, is
/// mirrored: glibc is given a block of the same size, which it maps on its own (one
/// page touched, for its header), and it is freed at once, so that glibc adapts as it
/// would have, to at least half the largest such block freed. At most eight such pairs
/// of calls in a process. Where glibc has adapted further on its own, or its
/// thresholds are fixed (`mallopt`, `MALLOC_MMAP_THRESHOLD_`), the block comes from its
/// heap or is mapped, and is freed, changing nothing. Elsewhere (musl, macOS) it does
/// nothing.
#[inline]
pub fn c_heap_freed_elsewhere(size: usize) {
    imp::freed_elsewhere(size)
}

/// At the end of the last open phase, and when the idle return gives memory back: the
/// trim, if it is on and worth its call.
/// Returns whether it trimmed.
pub(crate) fn trim_after_phase() -> bool {
    if !TRIM_AFTER.load(Ordering::Relaxed) {
        return false;
    }
    let Some(now) = imp::figures() else {
        return false;
    };
    let (in_use, free) = (
        LAST_IN_USE.load(Ordering::Relaxed),
        LAST_FREE.load(Ordering::Relaxed),
    );
    let changed = if in_use == usize::MAX {
        usize::MAX
    } else {
        now.in_use.abs_diff(in_use) + now.free.abs_diff(free)
    };
    if now.free < MIN_FREE || changed < MIN_FREE {
        return false;
    }
    imp::trim();
    if let Some(after) = imp::figures() {
        LAST_IN_USE.store(after.in_use, Ordering::Relaxed);
        LAST_FREE.store(after.free, Ordering::Relaxed);
    }
    true
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
mod imp {
    use super::{CHeap, CHeapSource};

    use std::sync::atomic::{AtomicUsize, Ordering};

    use crate::mechanism::faults::{self, Fault};

    type MallInfo2 = unsafe extern "C" fn() -> libc::mallinfo2;

    /// `mallinfo2`'s address once looked up: [`UNKNOWN`] before, [`MISSING`] where
    /// glibc has none. No lock and no wait: threads that race to look it up each do
    /// (the same answer), so a `fork` at any point leaves the child nothing to wait for.
    static FOUND: AtomicUsize = AtomicUsize::new(UNKNOWN);
    const UNKNOWN: usize = 0;
    const MISSING: usize = 1;

    /// `mallinfo2`, looked up once at run time: glibc has it from 2.33 on, and a
    /// program linked against it would not start on an older one.
    fn mallinfo2() -> Option<MallInfo2> {
        let mut found = FOUND.load(Ordering::Acquire);
        if found == UNKNOWN {
            // SAFETY: `dlsym` with `RTLD_DEFAULT` and a NUL-terminated name only looks
            // the symbol up.
            let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mallinfo2".as_ptr()) };
            found = if symbol.is_null() || faults::should_fail(Fault::Mallinfo2) {
                MISSING
            } else {
                symbol as usize
            };
            FOUND.store(found, Ordering::Release);
        }
        if found == MISSING {
            return None;
        }
        // SAFETY: `found` is the non-null address `dlsym` gave for glibc's `mallinfo2`,
        // which has this signature (malloc.h).
        Some(unsafe { std::mem::transmute::<usize, MallInfo2>(found) })
    }

    pub(super) fn figures() -> Option<CHeap> {
        let Some(mallinfo2) = mallinfo2() else {
            return Some(from_mallinfo());
        };
        // SAFETY: `mallinfo2` takes no argument, reads glibc's heaps under their locks
        // and returns a plain struct.
        let info = unsafe { mallinfo2() };
        Some(CHeap {
            in_use: info.uordblks.saturating_add(info.hblkhd),
            free: info.fordblks,
            source: CHeapSource::Mallinfo2,
        })
    }

    /// The figures of `mallinfo` (every glibc has it), whose `int` fields wrap past
    /// 2 GiB: read as unsigned (see [`CHeapSource::Mallinfo`]).
    fn from_mallinfo() -> CHeap {
        // SAFETY: `mallinfo` takes no argument, reads glibc's heaps under their locks
        // and returns a plain struct.
        #[allow(deprecated)]
        let info = unsafe { libc::mallinfo() };
        let unsigned = |field: libc::c_int| field as u32 as usize;
        CHeap {
            in_use: unsigned(info.uordblks).saturating_add(unsigned(info.hblkhd)),
            free: unsigned(info.fordblks),
            source: CHeapSource::Mallinfo,
        }
    }

    pub(super) fn trim() {
        // SAFETY: `malloc_trim` takes glibc's heap locks itself and only gives back
        // free pages; any thread may call it at any time.
        unsafe {
            libc::malloc_trim(0);
        }
    }

    /// glibc's first `mmap` threshold, and the most it adapts it to
    /// (`DEFAULT_MMAP_THRESHOLD_MAX`: 4 MiB times the size of a `long`).
    const FIRST_THRESHOLD: usize = 128 << 10;
    const MAX_THRESHOLD: usize = (4 << 20) * std::mem::size_of::<libc::c_long>();

    /// The size above which a block freed elsewhere is mirrored next (see
    /// `c_heap_freed_elsewhere`): twice the last one mirrored.
    static NEXT: AtomicUsize = AtomicUsize::new(FIRST_THRESHOLD);

    #[inline]
    pub(super) fn freed_elsewhere(size: usize) {
        if size > NEXT.load(Ordering::Relaxed) && size <= MAX_THRESHOLD {
            mirror(size);
        }
    }

    #[cold]
    #[inline(never)]
    fn mirror(size: usize) {
        // One thread mirrors each step: the one that moved `NEXT` past it.
        let next = size.saturating_mul(2);
        if NEXT.fetch_max(next, Ordering::Relaxed) >= size {
            return;
        }
        // glibc maps a large request with a header word, rounded up to 16 bytes and
        // then to whole pages: 32 bytes less than whole pages maps exactly those pages.
        // SAFETY: `sysconf` has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let request = size.div_ceil(page) * page - 32;
        // SAFETY: `malloc` takes any size; the block, null or not, is freed once by
        // the allocator that made it, and nothing reads or writes it. (`black_box`: a
        // block never used is not to be optimised away with its calls.)
        unsafe { libc::free(std::hint::black_box(libc::malloc(request))) };
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    use super::CHeap;

    pub(super) fn figures() -> Option<CHeap> {
        None
    }

    pub(super) fn trim() {}

    #[inline]
    pub(super) fn freed_elsewhere(_size: usize) {}
}
