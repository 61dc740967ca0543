//! Fork safety: no lock or wait of this crate's is held by another thread when a
//! process forks, so a child made by `fork` never waits for a thread it does not have.
//!
//! A child of a multithreaded process has only the thread that called `fork`; a lock
//! another thread held at that moment stays held in the child for good. jemalloc avoids
//! that by taking all of its locks before `fork` and releasing them after it in the
//! parent and the child (`pthread_atfork`). This crate does the same with one gate
//! instead of a list of locks:
//!
//! - Every lock of the crate is a [`Lock`], which can only be taken inside a
//!   [`Section`]: taking it enters one, dropping its guard leaves it. A thread that
//!   waits for a lock is inside too. Other waits (for a purge under way, for the
//!   allocation of an arena) happen while a lock is held, so inside as well.
//! - Before `fork` ([`prepare`]) the gate closes: threads that would enter a section
//!   wait at it, and the forking thread waits until no other thread is inside one. At
//!   the moment of the fork no thread holds or waits for a lock of this crate's.
//! - After `fork`, in the parent and the child, the gate opens again. In the child the
//!   [fork generation](generation) moves on, and the modules that keep state tied to
//!   the parent's threads reset it ([`on_child`]): a phase open in the parent is not
//!   open in the child, the stand-by switcher's thread is the parent's.
//!
//! The handlers are registered once per process, before the first section is entered,
//! after jemalloc's own (so that ours run before jemalloc takes its locks, and after it
//! has released them): a section may call into jemalloc, which must not be locked
//! while the forking thread waits for the section to end. The handlers allocate
//! nothing and take no lock.
//!
//! Sections nest on a thread (a lock taken while another is held), and a nested entry
//! never waits at the gate, so a thread inside never waits for the fork that waits for
//! it.

use std::cell::Cell;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError, TryLockError};
use std::time::Duration;

use crate::mechanism::ctl;

/// Threads inside a section (or entering one), counted once per nesting level, each on
/// its thread's stripe ([`stripe`]); `fork` waits for their sum ([`inside`]). Every free
/// of a large block into one of this crate's arenas enters and leaves a section: with
/// one counter for all threads, two threads doing so at once took turns at its cache
/// line, and a 64 KiB block allocated and freed in a loop on each of two threads in a
/// phase took 1.2 times as long as without the section (`phase/64KiB` in `cargo bench
/// -p arenapool-alloc --bench alloc`).
static INSIDE: [Stripe; STRIPES] = [const { Stripe(AtomicUsize::new(0)) }; STRIPES];

/// How many stripes [`INSIDE`] has: threads are given them in turn, so that threads
/// share one only when more than this many have entered sections.
const STRIPES: usize = 32;

/// One stripe of [`INSIDE`], alone on its cache lines (two, as processors fetch lines
/// in pairs).
#[repr(align(128))]
struct Stripe(AtomicUsize);

/// The stripe the next thread to enter a section is given.
static NEXT_STRIPE: AtomicUsize = AtomicUsize::new(0);

/// The gate is closed: a `fork` is under way.
static CLOSED: AtomicBool = AtomicBool::new(false);

/// How many `fork`s lie between the first process and this one.
static GENERATION: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// How deep the calling thread is in sections. A plain `Cell` without destructor:
    /// readable at any point of a thread's life (a free may enter a section while the
    /// thread's other thread-locals are being destroyed).
    static DEPTH: Cell<usize> = const { Cell::new(0) };
    /// The calling thread's stripe of [`INSIDE`], plus one; 0 until its first section.
    /// A plain `Cell` without destructor, as `DEPTH`.
    static STRIPE: Cell<usize> = const { Cell::new(0) };
}

/// The calling thread's stripe of [`INSIDE`], given to it at its first call.
fn stripe() -> &'static AtomicUsize {
    let index = STRIPE
        .try_with(|stripe| {
            if stripe.get() == 0 {
                stripe.set(NEXT_STRIPE.fetch_add(1, Ordering::Relaxed) % STRIPES + 1);
            }
            stripe.get() - 1
        })
        .unwrap_or(0);
    &INSIDE[index].0
}

/// Threads inside a section (or entering one), counted once per nesting level: the sum
/// of [`INSIDE`]'s stripes, each read with the order [`section`] writes it with.
fn inside() -> usize {
    INSIDE
        .iter()
        .map(|stripe| stripe.0.load(Ordering::SeqCst))
        .sum()
}

/// Debug builds: whether the calling thread runs `fork` (its handlers, from [`prepare`]
/// to the one after it), and how deep it is in the extent hooks ([`in_hook`]). Checked
/// as a section is entered: on the forking thread while the gate is closed it would
/// wait for itself, and inside a hook it would wait with jemalloc's locks held for a
/// `fork` that waits for jemalloc's locks.
#[cfg(debug_assertions)]
mod checks {
    use std::cell::Cell;

    thread_local! {
        pub(super) static FORKING: Cell<bool> = const { Cell::new(false) };
        pub(super) static IN_HOOK: Cell<u32> = const { Cell::new(0) };
    }

    pub(super) fn forking() -> bool {
        FORKING.try_with(Cell::get).unwrap_or(false)
    }

    pub(super) fn set_forking(forking: bool) {
        let _ = FORKING.try_with(|f| f.set(forking));
    }

    pub(super) fn in_hook() -> bool {
        IN_HOOK.try_with(Cell::get).unwrap_or(0) > 0
    }

    pub(super) fn hook_depth(by: i32) {
        let _ = IN_HOOK.try_with(|d| d.set(d.get().saturating_add_signed(by)));
    }

    /// Writes `message` to stderr and aborts: nothing may unwind from where a section
    /// is entered (the allocator, a hook, a `fork` handler). No allocation.
    pub(super) fn abort(message: &str) -> ! {
        // SAFETY: writes the bytes of a live string to the standard error descriptor.
        unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
        std::process::abort()
    }
}

/// Marks the calling thread as inside one of the extent hooks (jemalloc calls them with
/// its locks held) until the guard is dropped: a debug build aborts if a section is
/// entered meanwhile. Nothing in a release build.
#[must_use = "the mark ends when dropped"]
pub(crate) struct InHook {
    _thread: PhantomData<*const ()>,
}

/// See [`InHook`].
#[inline]
pub(crate) fn in_hook() -> InHook {
    #[cfg(debug_assertions)]
    checks::hook_depth(1);
    InHook {
        _thread: PhantomData,
    }
}

impl Drop for InHook {
    #[inline]
    fn drop(&mut self) {
        #[cfg(debug_assertions)]
        checks::hook_depth(-1);
    }
}

fn depth() -> usize {
    DEPTH.try_with(Cell::get).unwrap_or(0)
}

fn set_depth(depth: usize) {
    let _ = DEPTH.try_with(|d| d.set(depth));
}

/// The number of `fork`s between the process that first loaded this crate and this one:
/// 0 there, one more in each child. State made in an earlier generation belongs to
/// threads this process may not have.
#[inline]
pub(crate) fn generation() -> u32 {
    GENERATION.load(Ordering::Acquire)
}

/// Waits a little, first by yielding, then by sleeping (a `fork` or a purge under way can
/// take milliseconds: no core is spun on meanwhile).
fn pause(round: &mut u32) {
    *round = round.saturating_add(1);
    if *round < 64 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Whether a `fork` is waiting at the gate (its handler runs, and waits for the
/// threads inside sections): a wait inside a section that can give up, gives up.
pub(crate) fn is_waiting() -> bool {
    CLOSED.load(Ordering::SeqCst)
}

/// A stretch of code that no `fork` may split: while a thread is inside one, `fork`
/// waits. Made by [`section`]; left when dropped, on the thread that made it.
#[derive(Debug)]
#[must_use = "the section ends when dropped"]
pub(crate) struct Section {
    /// The stripe of [`INSIDE`] the section is counted on, its thread's.
    stripe: &'static AtomicUsize,
    /// Not `Send`: the count of nesting is the thread's.
    _thread: PhantomData<*const ()>,
}

/// Enters a section, first waiting at the gate if a `fork` is under way (unless the
/// thread is already inside one).
pub(crate) fn section() -> Section {
    #[cfg(debug_assertions)]
    {
        if checks::in_hook() {
            checks::abort("arenapool: a section was entered inside an extent hook\n");
        }
        if checks::forking() && CLOSED.load(Ordering::SeqCst) {
            checks::abort(
                "arenapool: a section was entered on the forking thread while the fork gate \
                 is closed (a `fork` handler registered before arenapool's allocates)\n",
            );
        }
    }
    ensure_handlers();
    let depth = depth();
    let stripe = stripe();
    if depth > 0 {
        stripe.fetch_add(1, Ordering::SeqCst);
    } else {
        let mut round = 0;
        loop {
            // Sequentially consistent with the gate's closing in `prepare` and its
            // reads of the stripes: either the fork sees this thread inside, or this
            // thread sees the gate closed.
            stripe.fetch_add(1, Ordering::SeqCst);
            if !CLOSED.load(Ordering::SeqCst) {
                break;
            }
            stripe.fetch_sub(1, Ordering::SeqCst);
            while CLOSED.load(Ordering::SeqCst) {
                pause(&mut round);
            }
        }
    }
    set_depth(depth + 1);
    Section {
        stripe,
        _thread: PhantomData,
    }
}

impl Drop for Section {
    fn drop(&mut self) {
        set_depth(depth().saturating_sub(1));
        self.stripe.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A mutex of this crate's: taken only inside a [`Section`], so that no `fork` happens
/// while it is held or waited for. Poisoning is ignored: nothing of this crate's panics
/// while holding one, and what they protect stays consistent.
#[derive(Debug)]
pub(crate) struct Lock<T> {
    mutex: Mutex<T>,
}

/// A held [`Lock`]; the section is left after the lock is released.
#[derive(Debug)]
pub(crate) struct LockGuard<'a, T> {
    // Fields drop in order: the mutex first, then the section.
    guard: MutexGuard<'a, T>,
    _section: Section,
}

impl<T> Lock<T> {
    pub(crate) const fn new(value: T) -> Self {
        Lock {
            mutex: Mutex::new(value),
        }
    }

    /// Takes the lock, waiting for its holder, inside a section.
    pub(crate) fn lock(&self) -> LockGuard<'_, T> {
        let section = section();
        LockGuard {
            guard: self.mutex.lock().unwrap_or_else(PoisonError::into_inner),
            _section: section,
        }
    }

    /// Takes the lock if no one holds it.
    pub(crate) fn try_lock(&self) -> Option<LockGuard<'_, T>> {
        let section = section();
        let guard = match self.mutex.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        Some(LockGuard {
            guard,
            _section: section,
        })
    }
}

impl<T> Deref for LockGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for LockGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

/// Where the registration of the handlers stands: the low two bits one of the four
/// states below, the rest the id of the process that set them (so that a child made
/// while its parent was registering, which inherits that state but no handlers, sees
/// that it must register itself).
static HANDLERS: AtomicU64 = AtomicU64::new(NONE);
const NONE: u64 = 0;
const REGISTERING: u64 = 1;
const REGISTERED: u64 = 2;
const FAILED: u64 = 3;
const STATE: u64 = 3;

/// Whether the `fork` handlers are registered in this process (false only if
/// `pthread_atfork` failed, for want of memory).
#[cfg(test)]
fn handlers_registered() -> bool {
    HANDLERS.load(Ordering::Acquire) & STATE == REGISTERED
}

#[inline]
fn ensure_handlers() {
    if HANDLERS.load(Ordering::Acquire) & STATE < REGISTERED {
        register();
    }
}

fn this_process() -> u64 {
    // SAFETY: `getpid` has no preconditions and cannot fail.
    u64::from(unsafe { libc::getpid() }.unsigned_abs())
}

#[cold]
#[inline(never)]
fn register() {
    let mut round = 0;
    loop {
        let seen = HANDLERS.load(Ordering::Acquire);
        match seen & STATE {
            REGISTERED | FAILED => return,
            // Another thread of this process is registering: it will be done in a
            // moment (`pthread_atfork` waits only for a `fork` under way).
            REGISTERING if seen >> 2 == this_process() => pause(&mut round),
            _ => {
                let mine = this_process() << 2 | REGISTERING;
                if HANDLERS
                    .compare_exchange(seen, mine, Ordering::AcqRel, Ordering::Acquire)
                    .is_err()
                {
                    continue;
                }
                // jemalloc registers its handlers when it initialises: ours are then
                // registered after its, and run before its `prefork` and after its
                // `postfork_*`.
                ctl::initialise();
                // SAFETY: the three handlers are plain `extern "C"` functions that live
                // as long as the process, allocate nothing and take no lock.
                let rc = unsafe {
                    libc::pthread_atfork(Some(prepare), Some(after_in_parent), Some(after_in_child))
                };
                let state = if rc == 0 { REGISTERED } else { FAILED };
                HANDLERS.store(state, Ordering::Release);
                return;
            }
        }
    }
}

/// Before `fork`: closes the gate, then waits until no other thread is inside a section.
extern "C" fn prepare() {
    #[cfg(debug_assertions)]
    checks::set_forking(true);
    CLOSED.store(true, Ordering::SeqCst);
    // The forking thread itself may be inside (it cannot wait for itself).
    let own = depth();
    let mut round = 0;
    while inside() > own {
        pause(&mut round);
    }
}

/// After `fork`, in the parent: opens the gate.
extern "C" fn after_in_parent() {
    CLOSED.store(false, Ordering::SeqCst);
    #[cfg(debug_assertions)]
    checks::set_forking(false);
}

/// After `fork`, in the child: a new generation; the forking thread, the only one, is
/// all that can be inside a section; the gate opens; then the modules that asked for it
/// reset what belonged to the parent's threads.
extern "C" fn after_in_child() {
    GENERATION.fetch_add(1, Ordering::AcqRel);
    for stripe in &INSIDE {
        stripe.0.store(0, Ordering::SeqCst);
    }
    stripe().store(depth(), Ordering::SeqCst);
    HANDLERS.store(REGISTERED, Ordering::Release);
    CLOSED.store(false, Ordering::SeqCst);
    #[cfg(debug_assertions)]
    checks::set_forking(false);
    for slot in &ON_CHILD {
        let f = slot.load(Ordering::Acquire);
        if f != 0 {
            // SAFETY: a non-zero slot holds a `fn()` stored by `on_child`.
            let f: fn() = unsafe { std::mem::transmute::<usize, fn()>(f) };
            f();
        }
    }
}

/// The functions [`after_in_child`] calls, as addresses (0: none).
static ON_CHILD: [AtomicUsize; 8] = [const { AtomicUsize::new(0) }; 8];

/// Has `f` called in every child made by `fork` from now on, after the gate opened
/// (idempotent: a function is noted once). `f` must allocate nothing and must not wait
/// for any thread: it runs inside `fork`, on the only thread of the child. It may take
/// a [`Lock`] with [`Lock::try_lock`].
///
/// Registers the handlers if no section has yet: a child forked before the process's
/// first section (right after the idle return's thread started, say) must run `f` too.
/// So, as a section, never called inside the allocator (registering allocates).
pub(crate) fn on_child(f: fn()) {
    ensure_handlers();
    let address = f as usize;
    for slot in &ON_CHILD {
        match slot.compare_exchange(0, address, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return,
            Err(held) if held == address => return,
            Err(_) => {}
        }
    }
    // More functions than slots is a bug of this crate's, caught by its tests.
    debug_assert!(false, "fork::on_child: no slot left");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_nest_and_leave() {
        let before = depth();
        {
            let _a = section();
            assert_eq!(depth(), before + 1);
            {
                let _b = section();
                assert_eq!(depth(), before + 2);
            }
            assert_eq!(depth(), before + 1);
        }
        assert_eq!(depth(), before);
        assert!(handlers_registered());
    }

    #[test]
    fn a_lock_is_taken_inside_a_section() {
        static LOCK: Lock<u32> = Lock::new(0);
        let before = depth();
        {
            let mut guard = LOCK.lock();
            *guard += 1;
            assert_eq!(depth(), before + 1);
            assert!(LOCK.try_lock().is_none());
        }
        assert_eq!(depth(), before);
        assert_eq!(*LOCK.try_lock().expect("free"), 1);
    }
}
