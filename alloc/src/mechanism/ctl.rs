//! The one module that talks to jemalloc's control interface (`mallctl`).
//!
//! Every control name is translated to a MIB once, on first use, and cached in [`Mibs`];
//! per-arena names are looked up with index 0 and the index component is patched in, so
//! no name is ever formatted or parsed on a scope's path. The allocator itself reaches
//! this module on two rare paths only: a large free whose purge jemalloc skipped, into
//! an idle arena of this crate's (`crate::policy::purge::free`), and a thread's first
//! large block outside phases (`crate::work::route::before_jemallocs`).
//!
//! The rest of the crate is kept away from `mallctl*` by `clippy::disallowed_methods`.
#![allow(clippy::disallowed_methods)]

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::mem::{size_of, MaybeUninit};
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};

use tikv_jemalloc_sys as ffi;

use crate::mechanism::faults::{self, Fault};

/// `MALLCTL_ARENAS_ALL`: the pseudo arena index that addresses every arena at once.
pub(crate) const ARENAS_ALL: u32 = 4096;

/// The most arenas jemalloc lets a process have (`MALLOCX_ARENA_LIMIT - 1`).
pub(crate) const ARENA_LIMIT: u32 = 4095;

/// A control call that jemalloc refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CtlError {
    /// The control name, with `<i>` where an arena index goes.
    pub(crate) name: &'static str,
    /// The error number `mallctl*` returned.
    pub(crate) errno: c_int,
}

impl CtlError {
    /// Whether `arenas.create` refused for want of memory: jemalloc answers `EAGAIN`
    /// when it cannot map a new arena's metadata (and at its limit of arenas, which
    /// [`crate::work::recycler`] checks before it asks).
    pub(crate) fn is_arena_without_memory(&self) -> bool {
        self.name == "arenas.create" && self.errno == libc::EAGAIN
    }
}

pub(crate) type CtlResult<T> = Result<T, CtlError>;

/// How many times a control call refused with `EAGAIN` is made in all.
const ATTEMPTS: u32 = 3;

/// One cached MIB: its name (for errors) and its components.
#[derive(Clone, Copy)]
struct Mib<const N: usize> {
    name: &'static str,
    mib: [usize; N],
}

impl<const N: usize> Mib<N> {
    /// Looks `name` up once.
    fn lookup(name: &'static CStr) -> CtlResult<Self> {
        // Every name is an ASCII literal; a non-UTF-8 one would only lose its text in
        // error messages.
        let shown = name.to_str().unwrap_or("?");
        let mut mib = [0usize; N];
        let mut len = N;
        // SAFETY: `name` is a NUL-terminated C string (its type says so); `mib` has
        // room for `len` components.
        let rc = unsafe { ffi::mallctlnametomib(name.as_ptr(), mib.as_mut_ptr(), &mut len) };
        if rc != 0 || len != N {
            return Err(CtlError {
                name: shown,
                errno: if rc != 0 { rc } else { libc::EINVAL },
            });
        }
        Ok(Mib { name: shown, mib })
    }

    /// The same MIB with component `at` (an arena index) replaced by `index`.
    fn at(mut self, at: usize, index: u32) -> Self {
        self.mib[at] = index as usize;
        self
    }

    /// `mallctlbymib` with raw old/new pointers. A call jemalloc refuses with `EAGAIN`
    /// (it could not get memory for the call; a control that fails changes nothing) is
    /// made again, up to [`ATTEMPTS`] in all.
    ///
    /// # Safety
    /// `old`/`new` must be null or point to values of exactly the type this control
    /// reads or writes, of the given lengths.
    unsafe fn call(
        &self,
        old: *mut c_void,
        old_len: *mut usize,
        new: *mut c_void,
        new_len: usize,
    ) -> CtlResult<()> {
        let mut rc = libc::EAGAIN;
        for _ in 0..ATTEMPTS {
            rc = if faults::should_fail(Fault::Control) {
                libc::EAGAIN
            } else {
                // SAFETY: the MIB came from `mallctlnametomib` with exactly `N`
                // components; the pointer contract is the caller's.
                unsafe { ffi::mallctlbymib(self.mib.as_ptr(), N, old, old_len, new, new_len) }
            };
            if rc != libc::EAGAIN {
                break;
            }
        }
        if rc == 0 {
            Ok(())
        } else {
            Err(CtlError {
                name: self.name,
                errno: rc,
            })
        }
    }

    /// Reads a value.
    ///
    /// # Safety
    /// `T` must be the exact type of this control's value.
    unsafe fn read<T: Copy>(&self) -> CtlResult<T> {
        let mut value = MaybeUninit::<T>::uninit();
        let mut len = size_of::<T>();
        // SAFETY: `value` has room for a `T`, the type the caller vouches for.
        unsafe { self.call(value.as_mut_ptr().cast(), &mut len, ptr::null_mut(), 0)? };
        debug_assert_eq!(len, size_of::<T>());
        // SAFETY: jemalloc wrote a whole `T` (it fails with EINVAL on a size mismatch).
        Ok(unsafe { value.assume_init() })
    }

    /// Writes a value.
    ///
    /// # Safety
    /// `T` must be the exact type of this control's value.
    unsafe fn write<T: Copy>(&self, mut value: T) -> CtlResult<()> {
        // SAFETY: `value` is a live `T`, the type the caller vouches for.
        unsafe {
            self.call(
                ptr::null_mut(),
                ptr::null_mut(),
                (&mut value as *mut T).cast(),
                size_of::<T>(),
            )
        }
    }

    /// Writes `value` and returns the previous value, in one call.
    ///
    /// # Safety
    /// `T` must be the exact type of this control's value.
    unsafe fn swap<T: Copy>(&self, mut value: T) -> CtlResult<T> {
        let mut old = MaybeUninit::<T>::uninit();
        let mut len = size_of::<T>();
        // SAFETY: both pointers are to `T`s, the type the caller vouches for.
        unsafe {
            self.call(
                old.as_mut_ptr().cast(),
                &mut len,
                (&mut value as *mut T).cast(),
                size_of::<T>(),
            )?
        };
        // SAFETY: jemalloc wrote the previous value, a whole `T`.
        Ok(unsafe { old.assume_init() })
    }

    /// Runs a control that takes and returns nothing (`purge`, `tcache.flush`): those
    /// must be called with null pointers.
    fn act(&self) -> CtlResult<()> {
        // SAFETY: null old and new pointers are always valid for `mallctlbymib`.
        unsafe { self.call(ptr::null_mut(), ptr::null_mut(), ptr::null_mut(), 0) }
    }
}

/// Every MIB this crate uses, looked up once.
struct Mibs {
    thread_arena: Mib<2>,
    thread_tcache_flush: Mib<3>,
    thread_allocatedp: Mib<2>,
    thread_deallocatedp: Mib<2>,
    epoch: Mib<1>,
    arenas_create: Mib<2>,
    arenas_narenas: Mib<2>,
    arena_purge: Mib<3>,
    arena_extent_hooks: Mib<3>,
    arena_pactivep: Mib<4>,
    arena_dss: Mib<3>,
    arena_dirty_decay_ms: Mib<3>,
    arena_muzzy_decay_ms: Mib<3>,
    arena_oversize_threshold: Mib<3>,
    /// `None` where jemalloc was built without background threads.
    background_thread: Option<Mib<1>>,
    arena_dirty_purged: Mib<4>,
    arena_muzzy_purged: Mib<4>,
    arena_resident: Mib<4>,
    arena_pactive: Mib<4>,
    arena_pdirty: Mib<4>,
    arena_pmuzzy: Mib<4>,
    allocated: Mib<2>,
    active: Mib<2>,
    resident: Mib<2>,
    retained: Mib<2>,
    mapped: Mib<2>,
    metadata: Mib<2>,
    /// jemalloc's page size.
    page: usize,
    /// The smallest size jemalloc serves with an extent of its own (a large size
    /// class) rather than a slot in a slab.
    large_min: usize,
    /// The largest size a thread's cache holds (`arenas.tcache_max`).
    tcache_max: usize,
    /// `opt.percpu_arena` is set: jemalloc ties threads to per-CPU arenas and refuses
    /// to move them back from a manual arena to an automatic one.
    percpu_arena: bool,
    /// `opt.process_madvise_max_batch`: above 0, jemalloc may purge an arena whose
    /// hooks have no `dalloc` with `process_madvise`, without calling them (0 where the
    /// option does not exist).
    process_madvise_max_batch: usize,
}

impl Mibs {
    fn lookup() -> CtlResult<Self> {
        let page = Mib::<2>::lookup(c"arenas.page")?;
        let large_min = Mib::<4>::lookup(c"arenas.lextent.0.size")?;
        let percpu = Mib::<2>::lookup(c"opt.percpu_arena")?;
        let tcache_max = Mib::<2>::lookup(c"arenas.tcache_max")?;
        // Missing from jemalloc builds older than the option: as if 0.
        let process_madvise = Mib::<2>::lookup(c"opt.process_madvise_max_batch").ok();
        Ok(Mibs {
            thread_arena: Mib::lookup(c"thread.arena")?,
            thread_tcache_flush: Mib::lookup(c"thread.tcache.flush")?,
            thread_allocatedp: Mib::lookup(c"thread.allocatedp")?,
            thread_deallocatedp: Mib::lookup(c"thread.deallocatedp")?,
            epoch: Mib::lookup(c"epoch")?,
            arenas_create: Mib::lookup(c"arenas.create")?,
            arenas_narenas: Mib::lookup(c"arenas.narenas")?,
            arena_purge: Mib::lookup(c"arena.0.purge")?,
            arena_extent_hooks: Mib::lookup(c"arena.0.extent_hooks")?,
            arena_pactivep: Mib::lookup(c"experimental.arenas.0.pactivep")?,
            arena_dss: Mib::lookup(c"arena.0.dss")?,
            arena_dirty_decay_ms: Mib::lookup(c"arena.0.dirty_decay_ms")?,
            arena_muzzy_decay_ms: Mib::lookup(c"arena.0.muzzy_decay_ms")?,
            arena_oversize_threshold: Mib::lookup(c"arena.0.oversize_threshold")?,
            background_thread: Mib::lookup(c"background_thread").ok(),
            arena_dirty_purged: Mib::lookup(c"stats.arenas.0.dirty_purged")?,
            arena_muzzy_purged: Mib::lookup(c"stats.arenas.0.muzzy_purged")?,
            arena_resident: Mib::lookup(c"stats.arenas.0.resident")?,
            arena_pactive: Mib::lookup(c"stats.arenas.0.pactive")?,
            arena_pdirty: Mib::lookup(c"stats.arenas.0.pdirty")?,
            arena_pmuzzy: Mib::lookup(c"stats.arenas.0.pmuzzy")?,
            allocated: Mib::lookup(c"stats.allocated")?,
            active: Mib::lookup(c"stats.active")?,
            resident: Mib::lookup(c"stats.resident")?,
            retained: Mib::lookup(c"stats.retained")?,
            mapped: Mib::lookup(c"stats.mapped")?,
            metadata: Mib::lookup(c"stats.metadata")?,
            // SAFETY: `arenas.page` is a `size_t`.
            page: unsafe { page.read::<usize>()? },
            // SAFETY: `arenas.lextent.<i>.size` is a `size_t`.
            large_min: unsafe { large_min.read::<usize>()? },
            // SAFETY: `arenas.tcache_max` is a `size_t`.
            tcache_max: unsafe { tcache_max.read::<usize>()? },
            percpu_arena: {
                // SAFETY: `opt.percpu_arena` is a `const char *`.
                let name = unsafe { percpu.read::<*const c_char>()? };
                // SAFETY: jemalloc returns a pointer to one of its static,
                // NUL-terminated option names ("disabled", "percpu", "phycpu").
                !name.is_null() && unsafe { CStr::from_ptr(name) }.to_bytes() != b"disabled"
            },
            process_madvise_max_batch: match process_madvise {
                // SAFETY: `opt.process_madvise_max_batch` is a `size_t`.
                Some(mib) => unsafe { mib.read::<usize>()? },
                None => 0,
            },
        })
    }
}

/// The MIBs, once looked up: a leaked box, never freed.
static MIBS: AtomicPtr<CtlResult<Mibs>> = AtomicPtr::new(ptr::null_mut());

/// The MIBs, looked up on first use. No lock and no wait: threads that race to look them
/// up each do it, and the first to publish its table wins (the others free theirs). A
/// `fork` at any point leaves the child nothing to wait for.
fn mibs() -> CtlResult<&'static Mibs> {
    let mut mibs = MIBS.load(Ordering::Acquire);
    if mibs.is_null() {
        mibs = publish_mibs();
    }
    // SAFETY: a non-null pointer is a leaked box, never freed or written again.
    unsafe { &*mibs }.as_ref().map_err(|e| *e)
}

#[cold]
#[inline(never)]
fn publish_mibs() -> *mut CtlResult<Mibs> {
    let mine = Box::into_raw(Box::new(Mibs::lookup()));
    match MIBS.compare_exchange(ptr::null_mut(), mine, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => mine,
        Err(theirs) => {
            // SAFETY: `mine` was never published: this thread owns it alone.
            drop(unsafe { Box::from_raw(mine) });
            theirs
        }
    }
}

/// Makes sure jemalloc has initialised (read its settings, registered its `fork`
/// handlers), without a control call, whose first sets up jemalloc's control tables: a
/// size-class query.
pub(crate) fn initialise() {
    // SAFETY: `nallocx` only reads jemalloc's size classes (initialising jemalloc first
    // if it was not); any size and flags 0 are valid.
    let _ = unsafe { ffi::nallocx(1, 0) };
}

/// `Ok` when every control this crate uses exists in the linked jemalloc; otherwise
/// the first that does not, with jemalloc's error.
pub(crate) fn available() -> CtlResult<()> {
    mibs().map(|_| ())
}

/// jemalloc's `opt.process_madvise_max_batch` (0 where it does not exist): above 0,
/// jemalloc may purge arenas whose hooks have no `dalloc` without calling their hooks.
pub(crate) fn process_madvise_max_batch() -> CtlResult<usize> {
    Ok(mibs()?.process_madvise_max_batch)
}

/// Whether jemalloc runs with `percpu_arena`, which makes threads unbindable.
pub(crate) fn percpu_arena() -> CtlResult<bool> {
    Ok(mibs()?.percpu_arena)
}

/// Binds the calling thread to arena `index` and returns the arena it was bound to.
pub(crate) fn thread_arena_swap(index: u32) -> CtlResult<u32> {
    // SAFETY: `thread.arena` is an `unsigned`.
    unsafe { mibs()?.thread_arena.swap::<c_uint>(index) }
}

/// Binds the calling thread to arena `index`.
pub(crate) fn thread_arena_set(index: u32) -> CtlResult<()> {
    // SAFETY: `thread.arena` is an `unsigned`.
    unsafe { mibs()?.thread_arena.write::<c_uint>(index) }
}

/// The arena the calling thread allocates from.
pub(crate) fn thread_arena() -> CtlResult<u32> {
    // SAFETY: `thread.arena` is an `unsigned`.
    unsafe { mibs()?.thread_arena.read::<c_uint>() }
}

/// Returns every object cached by the calling thread to the arena that owns it.
pub(crate) fn thread_tcache_flush() -> CtlResult<()> {
    match mibs()?.thread_tcache_flush.act() {
        // EFAULT: this thread has no tcache (disabled by configuration): nothing cached.
        Err(CtlError { errno, .. }) if errno == libc::EFAULT => Ok(()),
        other => other,
    }
}

/// Where jemalloc keeps the calling thread's byte counters.
#[derive(Clone, Copy)]
struct CounterPtrs {
    allocated: *const u64,
    deallocated: *const u64,
}

thread_local! {
    /// The calling thread's counter addresses, looked up on first use. A plain `Cell`
    /// without destructor, so it can be read while the thread's other thread-locals
    /// are being destroyed.
    static COUNTERS: Cell<Option<CounterPtrs>> = const { Cell::new(None) };
}

/// Bytes ever allocated and freed by the calling thread (both wrap around): if neither
/// moved between two reads, the thread's cache did not change in between.
///
/// Two plain memory reads after the first call on a thread: jemalloc hands out the
/// addresses of its per-thread counters (`thread.allocatedp`, `thread.deallocatedp`).
pub(crate) fn thread_counters() -> CtlResult<(u64, u64)> {
    let ptrs = match COUNTERS.try_with(Cell::get) {
        Ok(Some(ptrs)) => ptrs,
        cached => {
            let m = mibs()?;
            // SAFETY: `thread.{allocated,deallocated}p` are `uint64_t *`.
            let ptrs = unsafe {
                CounterPtrs {
                    allocated: m.thread_allocatedp.read::<*const u64>()?,
                    deallocated: m.thread_deallocatedp.read::<*const u64>()?,
                }
            };
            if cached.is_ok() {
                let _ = COUNTERS.try_with(|c| c.set(Some(ptrs)));
            }
            ptrs
        }
    };
    // SAFETY: the pointers address the calling thread's own counters inside jemalloc's
    // thread-specific data, which lives (at a fixed address: it is a thread-local of
    // jemalloc's) as long as the thread; only this thread writes them, so a read races
    // with nothing. Volatile, because jemalloc updates them behind the compiler's back.
    unsafe {
        Ok((
            ptr::read_volatile(ptrs.allocated),
            ptr::read_volatile(ptrs.deallocated),
        ))
    }
}

/// Creates a new manual arena whose extent hooks are `hooks`, and returns its index.
///
/// # Safety
/// `hooks` must point to a valid `extent_hooks_t` that lives, unchanged, for the rest of
/// the process (jemalloc keeps the pointer and arenas are never destroyed).
pub(crate) unsafe fn arenas_create(hooks: *mut ffi::extent_hooks_t) -> CtlResult<u32> {
    let m = mibs()?;
    let mut index: c_uint = 0;
    let mut len = size_of::<c_uint>();
    let mut hooks = hooks;
    // SAFETY: `arenas.create` reads an `unsigned` and takes an `extent_hooks_t *`,
    // whose validity and lifetime the caller vouches for.
    unsafe {
        m.arenas_create.call(
            (&mut index as *mut c_uint).cast(),
            &mut len,
            (&mut hooks as *mut *mut ffi::extent_hooks_t).cast(),
            size_of::<*mut ffi::extent_hooks_t>(),
        )?
    };
    Ok(index)
}

/// jemalloc's own extent hooks, which every arena has unless created with others.
pub(crate) fn default_extent_hooks() -> CtlResult<ffi::extent_hooks_t> {
    // Arena 0 always exists and this crate never gives it hooks of its own.
    // SAFETY: `arena.<i>.extent_hooks` is an `extent_hooks_t *`.
    let hooks = unsafe {
        mibs()?
            .arena_extent_hooks
            .read::<*mut ffi::extent_hooks_t>()?
    };
    if hooks.is_null() {
        return Err(CtlError {
            name: "arena.<i>.extent_hooks",
            errno: libc::EFAULT,
        });
    }
    // SAFETY: jemalloc returns a pointer to a live hooks table (its static default
    // one); the table is plain function pointers, copied out.
    Ok(unsafe { *hooks })
}

/// Where jemalloc keeps arena `index`'s count of active pages (pages of live
/// allocations, and of slabs with any object allocated or in a thread's cache). The
/// address is the arena's for the life of the process; the count is updated with
/// atomic operations, before a freed extent is handed to the arena's free pages.
pub(crate) fn arena_active_pages(index: u32) -> CtlResult<&'static AtomicUsize> {
    // SAFETY: `experimental.arenas.<i>.pactivep` is a `size_t *`.
    let count = unsafe { mibs()?.arena_pactivep.at(2, index).read::<*mut usize>()? };
    if count.is_null() {
        return Err(CtlError {
            name: "experimental.arenas.<i>.pactivep",
            errno: libc::EFAULT,
        });
    }
    // SAFETY: jemalloc returns the address of the arena's `size_t` counter, which it
    // only ever reads and writes with atomic operations of that size; arenas are never
    // destroyed, so it stays valid.
    Ok(unsafe { AtomicUsize::from_ptr(count) })
}

/// Makes arena `index` take its memory from `mmap` only, never from the data segment
/// (`sbrk`).
pub(crate) fn arena_disable_dss(index: u32) -> CtlResult<()> {
    // SAFETY: `arena.<i>.dss` is a `const char *`; jemalloc reads the static,
    // NUL-terminated string during the call.
    unsafe {
        mibs()?
            .arena_dss
            .at(1, index)
            .write::<*const c_char>(c"disabled".as_ptr())
    }
}

/// The largest size that threads' caches hold: blocks larger than this are always
/// allocated from and freed to their arena.
pub(crate) fn tcache_max() -> CtlResult<usize> {
    Ok(mibs()?.tcache_max)
}

/// A size class that threads' caches hold, as jemalloc describes it: what it takes to
/// keep its cached objects each in a slab of their own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CachedClass {
    /// The size of the extent one slab of this class takes (for a large class, one
    /// object's).
    pub(crate) slab: usize,
    /// How many objects of the class a thread's cache holds at most.
    pub(crate) cached: usize,
}

/// Every size class threads' caches hold, with its slab size and how many objects a
/// cache holds: jemalloc's rule (`tcache_ncached_max_compute` in its `tcache.c`) from
/// its `opt.tcache_nslots_*` options. Looks every name up afresh: not for hot paths.
pub(crate) fn cached_classes() -> CtlResult<Vec<CachedClass>> {
    fn read<T: Copy>(name: &'static CStr) -> CtlResult<T> {
        // SAFETY: every name passed here is of type `T`, per jemalloc's manual (the
        // callers below pair each with its type).
        unsafe { Mib::<2>::lookup(name)?.read::<T>() }
    }
    fn read_at<T: Copy>(name: &'static CStr, index: u32) -> CtlResult<T> {
        // SAFETY: as above; component 2 is the bin or extent index.
        unsafe { Mib::<4>::lookup(name)?.at(2, index).read::<T>() }
    }
    let even_up = |n: usize| n + n % 2;
    let min = even_up(read::<c_uint>(c"opt.tcache_nslots_small_min")? as usize).max(2);
    let max = (read::<c_uint>(c"opt.tcache_nslots_small_max")? as usize & !1).max(2);
    let lg_mul = read::<isize>(c"opt.lg_tcache_nslots_mul")?;
    let large = read::<c_uint>(c"opt.tcache_nslots_large")? as usize;
    let mut classes = Vec::new();
    for i in 0..read::<c_uint>(c"arenas.nbins")? {
        let nregs = read_at::<u32>(c"arenas.bin.0.nregs", i)? as usize;
        let candidate = even_up(if lg_mul < 0 {
            nregs >> lg_mul.unsigned_abs()
        } else {
            nregs << lg_mul
        });
        classes.push(CachedClass {
            slab: read_at::<usize>(c"arenas.bin.0.slab_size", i)?,
            cached: candidate.clamp(min.min(max), max),
        });
    }
    let tcache_max = tcache_max()?;
    for i in 0..read::<c_uint>(c"arenas.nlextents")? {
        let size = read_at::<usize>(c"arenas.lextent.0.size", i)?;
        if size > tcache_max {
            break;
        }
        classes.push(CachedClass {
            slab: size,
            cached: large,
        });
    }
    Ok(classes)
}

/// Sets arena `index`'s oversize threshold: a free that leaves a free extent of this
/// size or more is purged at once, whatever the arena's decay (unless it is -1, or
/// background threads run), and, for an automatic arena, a block of this size or more
/// asked for by a thread it serves goes to jemalloc's arena for oversize blocks.
/// `usize::MAX`: never.
pub(crate) fn arena_set_oversize_threshold(index: u32, bytes: usize) -> CtlResult<()> {
    // SAFETY: `arena.<i>.oversize_threshold` is a `size_t`.
    unsafe {
        mibs()?
            .arena_oversize_threshold
            .at(1, index)
            .write::<usize>(bytes)
    }
}

/// Stops jemalloc's background threads if they run (`background_thread`, which
/// `_RJEM_MALLOC_CONF` can turn on); returns whether they ran (never, in a jemalloc
/// built without them).
pub(crate) fn stop_background_threads() -> CtlResult<bool> {
    match mibs()?.background_thread {
        // SAFETY: `background_thread` is a `bool`.
        Some(mib) => unsafe { mib.swap::<bool>(false) },
        None => Ok(false),
    }
}

/// The smallest allocation jemalloc serves with an extent of its own.
pub(crate) fn large_min() -> CtlResult<usize> {
    Ok(mibs()?.large_min)
}

/// How many arena indices exist in the process (automatic and manual).
pub(crate) fn arenas_count() -> CtlResult<u32> {
    // SAFETY: `arenas.narenas` is an `unsigned`.
    unsafe { mibs()?.arenas_narenas.read::<c_uint>() }
}

/// Returns all of arena `index`'s unused dirty and muzzy pages to the OS
/// (`MADV_DONTNEED`), unless a purge of that arena is already under way: jemalloc then
/// returns at once, having done nothing. `crate::policy::purge` makes sure a purge ran.
///
/// For an index with no arena (an automatic one no thread has used yet) it does
/// nothing and succeeds.
pub(crate) fn arena_purge(index: u32) -> CtlResult<()> {
    mibs()?.arena_purge.at(1, index).act()
}

/// Which of an arena's two decay times a call sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pages {
    /// Freed pages not yet purged. At -1 they stay until a purge (-1 also stops
    /// jemalloc's eager purge of freed extents of 8 MiB and more, which any other
    /// decay keeps); at 0 they go back at once, and setting 0 purges every dirty page
    /// the arena holds right away (jemalloc restarts its decay curve on every change).
    Dirty,
    /// Pages purged lazily. At 0 every purge of dirty pages is a forced one
    /// (`MADV_DONTNEED`, RSS drops at once) rather than a lazy one that leaves them
    /// resident until the kernel needs them.
    Muzzy,
}

/// Sets arena `index`'s dirty or muzzy decay time, in milliseconds (-1: never).
/// Setting 0 purges the arena's pages of that kind, as [`arena_purge`] does (with the
/// same exception).
pub(crate) fn arena_set_decay(index: u32, pages: Pages, decay_ms: isize) -> CtlResult<()> {
    let m = mibs()?;
    let mib = match pages {
        Pages::Dirty => m.arena_dirty_decay_ms,
        Pages::Muzzy => m.arena_muzzy_decay_ms,
    };
    // SAFETY: `arena.<i>.{dirty,muzzy}_decay_ms` are `ssize_t`.
    unsafe { mib.at(1, index).write::<isize>(decay_ms) }
}

/// Refreshes jemalloc's statistics snapshot (`epoch`), which the `stats.*` reads below
/// return. Costs time in proportion to the number of arenas.
pub(crate) fn refresh_stats() -> CtlResult<()> {
    // SAFETY: `epoch` is a `uint64_t`.
    unsafe { mibs()?.epoch.write::<u64>(1) }
}

/// How many times jemalloc's statistics were refreshed so far (`epoch`, read without
/// a refresh): figures read between two equal counts come from one refresh, which
/// another thread's [`refresh_stats`] would otherwise replace halfway through a read.
pub(crate) fn stats_epoch() -> CtlResult<u64> {
    // SAFETY: `epoch` is a `uint64_t`; read without a new value, it refreshes nothing.
    unsafe { mibs()?.epoch.read::<u64>() }
}

/// Bytes arena `index` has given back to the OS since it was created, as of the last
/// [`refresh_stats`]: its purged dirty and muzzy pages. (A page that went dirty to
/// muzzy to clean would count twice, but arenas here never purge lazily: their decay
/// is -1, or 0 for both kinds, and full purges go straight to clean.)
pub(crate) fn arena_purged_bytes(index: u32) -> CtlResult<usize> {
    let m = mibs()?;
    // SAFETY: `stats.arenas.<i>.{dirty,muzzy}_purged` are `uint64_t`.
    let pages = unsafe {
        m.arena_dirty_purged.at(2, index).read::<u64>()?
            + m.arena_muzzy_purged.at(2, index).read::<u64>()?
    };
    Ok(usize::try_from(pages)
        .unwrap_or(usize::MAX)
        .saturating_mul(m.page))
}

/// One arena's figures, in bytes, as of the last [`refresh_stats`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ArenaFigures {
    /// Resident: its active, dirty and muzzy pages, and its metadata's resident pages
    /// (arena 0's metadata is jemalloc's global one).
    pub(crate) resident: usize,
    /// In pages that hold live allocations.
    pub(crate) active: usize,
    /// In freed pages not yet given back.
    pub(crate) dirty: usize,
    /// In pages purged lazily (resident until the kernel needs them).
    pub(crate) muzzy: usize,
}

/// Arena `index`'s figures as of the last [`refresh_stats`]; an error (`ENOENT`) for an
/// index with no arena (an automatic one no thread has used yet). Every arena's figures
/// come from the same refresh, so they add up to [`totals`]: the sum of the arenas'
/// `resident` is jemalloc's.
pub(crate) fn arena_figures(index: u32) -> CtlResult<ArenaFigures> {
    let m = mibs()?;
    // SAFETY: `stats.arenas.<i>.{resident,pactive,pmuzzy}` are `size_t`.
    unsafe {
        Ok(ArenaFigures {
            resident: m.arena_resident.at(2, index).read::<usize>()?,
            active: m.arena_pactive.at(2, index).read::<usize>()? * m.page,
            dirty: arena_dirty(index)?,
            muzzy: m.arena_pmuzzy.at(2, index).read::<usize>()? * m.page,
        })
    }
}

/// Arena `index`'s free pages not yet given back (its [`ArenaFigures::dirty`]), in
/// bytes, as of the last [`refresh_stats`]: one read where a caller needs no other, and
/// the one [`arena_figures`] makes.
pub(crate) fn arena_dirty(index: u32) -> CtlResult<usize> {
    let m = mibs()?;
    // SAFETY: `stats.arenas.<i>.pdirty` is a `size_t`.
    Ok(unsafe { m.arena_pdirty.at(2, index).read::<usize>()? } * m.page)
}

/// jemalloc's process-wide totals, as of the last [`refresh_stats`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Totals {
    pub(crate) allocated: usize,
    pub(crate) active: usize,
    pub(crate) resident: usize,
    pub(crate) retained: usize,
    pub(crate) mapped: usize,
    pub(crate) metadata: usize,
}

pub(crate) fn totals() -> CtlResult<Totals> {
    let m = mibs()?;
    // SAFETY: every `stats.*` total read here is a `size_t`.
    unsafe {
        Ok(Totals {
            allocated: m.allocated.read()?,
            active: m.active.read()?,
            resident: m.resident.read()?,
            retained: m.retained.read()?,
            mapped: m.mapped.read()?,
            metadata: m.metadata.read()?,
        })
    }
}

/// How many automatic arenas jemalloc may create (`opt.narenas`): indices `0..n` are
/// its own, whether created yet or not. Looks the name up afresh: not for hot paths.
pub(crate) fn automatic_arenas() -> CtlResult<u32> {
    // SAFETY: `opt.narenas` is an `unsigned`.
    unsafe { Mib::<2>::lookup(c"opt.narenas")?.read::<c_uint>() }
}
