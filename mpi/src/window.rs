//! `SharedWindow`: memory shared by the ranks of a node, freed deterministically.

use std::cell::Cell;
use std::fmt;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::os::raw::{c_int, c_void};
use std::panic::{self, AssertUnwindSafe};
use std::ptr;

use mpi::ffi;

use crate::error::{Error, Kind};
use crate::finalize;
use crate::plain::Plain;
use crate::raw;
use crate::Node;

/// The alignment every segment is guaranteed: segments are allocated non-contiguous,
/// each starting on a page of its own.
const SEGMENT_ALIGN: usize = 4096;

/// Where the MPI library keeps the node's shared segments, checked for room first.
const SHM_DIR: &[u8] = b"/dev/shm\0";

/// A node-shared window (`MPI_Win_allocate_shared`): each rank of a [`Node`] owns one
/// segment of `T`s, and every rank can read every segment in place.
///
/// Made by [`Node::allocate`] (collective). Reading is a plain slice borrow
/// ([`segment`](SharedWindow::segment)); writing happens only in
/// [`write`](SharedWindow::write), a collective phase in which each rank writes its own
/// segment and which ends with every rank synchronised (`MPI_Win_sync` and a barrier),
/// so no rank ever reads a segment while it is written. Dropping the window is
/// collective too: a barrier, then `MPI_Win_free`, so the shared memory goes back to
/// the OS at once and a loop that makes a window per iteration runs in flat memory.
///
/// ```no_run
/// let universe = mpi::initialize().expect("MPI initialised twice");
/// let world = universe.world();
/// let node = arenapool_mpi::Node::split(&world)?;
/// let n = 100_000;
/// let mut w = node.allocate::<f64>(if node.rank() == 0 { n } else { 0 })?; // collective
/// w.write(|mine: &mut [f64]| mine.fill(1.0)); // collective: each rank writes its own
/// let s: &[f64] = w.segment(0); // any rank's segment, read-only
/// assert_eq!(s.len(), n);
/// assert!(s.iter().all(|&x| x == 1.0));
/// drop(w); // collective: barrier + MPI_Win_free
/// # Ok::<(), arenapool_mpi::Error>(())
/// ```
///
/// Borrows pin the rules down: a slice from `segment` borrows the window, so it cannot
/// outlive it or be held across `write` (which takes `&mut self`):
///
/// ```compile_fail,E0502
/// # let universe = mpi::initialize().unwrap();
/// # let world = universe.world();
/// # let node = arenapool_mpi::Node::split(&world).unwrap();
/// let mut w = node.allocate::<f64>(4).unwrap();
/// let s = w.segment(0);
/// w.write(|mine| mine.fill(2.0)); // refused: `s` still reads the window
/// println!("{}", s[0]);
/// ```
///
/// and the window borrows its node, so the node's communicator is freed after the
/// window:
///
/// ```compile_fail,E0505
/// # let universe = mpi::initialize().unwrap();
/// # let world = universe.world();
/// let node = arenapool_mpi::Node::split(&world).unwrap();
/// let w = node.allocate::<f64>(4).unwrap();
/// drop(node); // refused: `w` is still alive
/// drop(w);
/// ```
///
/// # Warning: every rank, the same order
///
/// `allocate`, `write` and dropping are collective, as in MPI: every rank of the node
/// must make the same calls on the same windows in the same order. Ranks that drop two
/// windows in different orders, or where one rank skips a `write`, wait for each other
/// forever; the types cannot see other processes.
///
/// A panic inside `write` on any rank makes every rank panic, and windows dropped
/// while all unwind are freed as usual. A panic elsewhere, on one rank, cannot be
/// matched by the others: a window dropped while that rank unwinds is not freed (that
/// would wait forever for the other ranks), so the rank dies of the panic and the MPI
/// job ends, instead of hanging. Catching such a panic and going on leaves the other
/// ranks waiting at their next collective call on that window, as in MPI.
///
/// A window leaked with `mem::forget` is never freed: its memory stays on every rank,
/// and finalising MPI then stops the process (see [`Node`]'s warning).
pub struct SharedWindow<'node, T: Plain> {
    node: &'node Node,
    win: ffi::MPI_Win,
    /// Every rank's segment, as mapped in this process: (start, length in elements).
    segments: Vec<(*mut T, usize)>,
    _owns: PhantomData<T>,
}

// SAFETY: the methods that take `&self` only read segments and lengths, never call MPI
// and never write, so other threads of this rank may share a `&SharedWindow` (an
// `ArenaPool`'s tasks reading a segment). Writing and freeing take `&mut self` or
// `self` and stay on the window's own thread (it is not `Send`).
unsafe impl<T: Plain> Sync for SharedWindow<'_, T> {}

/// What each rank tells the others before a window is made: its error code (0 if its
/// input is fine), the number of elements it asks for, the bytes free in `/dev/shm` as
/// it sees them (`u64::MAX` if it cannot tell), and a fingerprint of its element type.
#[derive(Clone, Copy)]
struct Ask {
    code: u64,
    len: u64,
    shm_free: u64,
    element: u64,
}

/// Words per `Ask` on the wire.
const ASK_WORDS: usize = 4;

const ASK_OK: u64 = 0;
const ASK_TOO_LARGE: u64 = 1;
const ASK_ZERO_SIZED: u64 = 2;
const ASK_OVER_ALIGNED: u64 = 3;

impl Ask {
    fn of<T>(len: usize) -> Ask {
        let fits = len
            .checked_mul(size_of::<T>())
            .is_some_and(|bytes| isize::try_from(bytes).is_ok());
        let code = if size_of::<T>() == 0 {
            ASK_ZERO_SIZED
        } else if align_of::<T>() > SEGMENT_ALIGN {
            ASK_OVER_ALIGNED
        } else if !fits {
            ASK_TOO_LARGE
        } else {
            ASK_OK
        };
        Ask {
            code,
            len: len as u64,
            shm_free: shm_available().unwrap_or(u64::MAX),
            element: fingerprint::<T>(),
        }
    }

    fn error<T>(self) -> Error {
        Error::new(match self.code {
            ASK_ZERO_SIZED => Kind::ZeroSized,
            ASK_OVER_ALIGNED => Kind::OverAligned {
                align: align_of::<T>(),
            },
            _ => Kind::TooLarge {
                len: self.len,
                elem_size: size_of::<T>(),
            },
        })
    }
}

impl<'node, T: Plain> SharedWindow<'node, T> {
    pub(crate) fn allocate(node: &'node Node, len: usize) -> Result<Self, Error> {
        raw::ready()?;
        IN_STEP_PANIC.set(false);
        let asks = exchange(node, Ask::of::<T>(len))?;
        // This rank's own error first; else the first faulty rank's.
        let own = asks[node.rank()];
        if own.code != ASK_OK {
            return Err(own.error::<T>());
        }
        if let Some((rank, ask)) = asks.iter().enumerate().find(|(_, a)| a.code != ASK_OK) {
            return Err(Error::new(Kind::OtherRank {
                rank,
                cause: Box::new(ask.error::<T>()),
            }));
        }
        // Every rank reads the others' bytes as its own `T`: the types must agree.
        if let Some(rank) = asks.iter().position(|a| a.element != own.element) {
            return Err(Error::new(Kind::TypeMismatch {
                rank,
                element: std::any::type_name::<T>(),
            }));
        }
        // Every rank saw the same asks, so every rank reaches the same verdict below.
        let bytes: u128 = asks
            .iter()
            .map(|a| u128::from(a.len) * size_of::<T>() as u128)
            .sum();
        if bytes > isize::MAX as u128 {
            return Err(Error::new(Kind::NodeTooLarge { bytes }));
        }
        // The smallest figure any rank saw, so that every rank decides alike.
        let available = asks.iter().map(|a| a.shm_free).min().unwrap_or(u64::MAX);
        // Each segment is rounded up to whole pages.
        let pages = asks.len() as u128 * SEGMENT_ALIGN as u128;
        if bytes + pages > u128::from(available) {
            return Err(Error::new(Kind::NoSpace { bytes, available }));
        }
        // SAFETY: the node's communicator is live, every rank has checked the same
        // asks and makes this call, and `len * size_of::<T>()` fits in `isize`.
        let mut window = unsafe { Self::create(node, len)? };
        window.map_segments(&asks)?;
        let (mine, len) = window.segments[node.rank()];
        // SAFETY: this rank's segment holds `len` elements of `T` starting at `mine`
        // (checked by `map_segments`) and no other rank reads it before the
        // synchronisation below.
        unsafe { ptr::write_bytes(mine, 0, len) };
        window.synchronise();
        Ok(window)
    }

    /// Makes the MPI window and opens the access epoch that lasts for its lifetime.
    ///
    /// # Safety
    ///
    /// Every rank of the node calls this with its checked length.
    unsafe fn create(node: &'node Node, len: usize) -> Result<Self, Error> {
        let bytes = (len * size_of::<T>()) as ffi::MPI_Aint;
        // Only RMA calls use the displacement unit, and the window makes none.
        let disp_unit = c_int::try_from(size_of::<T>()).unwrap_or(1);
        // SAFETY: constant handles defined by the MPI bindings, never written.
        let (mut info, mut win) = unsafe { (ffi::RSMPI_INFO_NULL, ffi::RSMPI_WIN_NULL) };
        let mut base: *mut c_void = ptr::null_mut();
        // SAFETY: `info` is created, set with NUL-terminated strings and freed here;
        // `MPI_Win_allocate_shared` writes the base address and the window handle to
        // the two out-pointers; the communicator is live (it belongs to `node`).
        let rc = unsafe {
            raw::check("MPI_Info_create", ffi::MPI_Info_create(&mut info))?;
            ffi::MPI_Info_set(info, c"alloc_shared_noncontig".as_ptr(), c"true".as_ptr());
            let rc = ffi::MPI_Win_allocate_shared(
                bytes,
                disp_unit,
                info,
                node.comm(),
                (&mut base as *mut *mut c_void).cast::<c_void>(),
                &mut win,
            );
            ffi::MPI_Info_free(&mut info);
            rc
        };
        raw::check("MPI_Win_allocate_shared", rc)?;
        // Counted from here: `Drop` frees the window and uncounts it.
        if let Err(e) = finalize::window_made() {
            // SAFETY: the window was just made on every rank, and every rank is here.
            unsafe { ffi::MPI_Win_free(&mut win) };
            return Err(e);
        }
        let window = SharedWindow {
            node,
            win,
            segments: Vec::new(),
            _owns: PhantomData,
        };
        // SAFETY: `win` is the live window just made. Passive-target access to every
        // rank, kept open until the window is freed, is what makes `MPI_Win_sync`
        // valid in `write`.
        unsafe {
            raw::check(
                "MPI_Win_set_errhandler",
                ffi::MPI_Win_set_errhandler(win, ffi::RSMPI_ERRORS_RETURN),
            )?;
            raw::check(
                "MPI_Win_lock_all",
                ffi::MPI_Win_lock_all(ffi::MPI_MODE_NOCHECK as c_int, win),
            )?;
        }
        Ok(window)
    }

    /// Finds every rank's segment in this process's address space and checks its size
    /// and alignment against what that rank asked for.
    fn map_segments(&mut self, asks: &[Ask]) -> Result<(), Error> {
        for (rank, ask) in asks.iter().enumerate() {
            let mut bytes: ffi::MPI_Aint = 0;
            let mut disp: c_int = 0;
            let mut base: *mut c_void = ptr::null_mut();
            // SAFETY: the window is live and `rank` is below the node's size; the call
            // writes a size, a displacement unit and an address.
            let rc = unsafe {
                ffi::MPI_Win_shared_query(
                    self.win,
                    rank as c_int,
                    &mut bytes,
                    &mut disp,
                    (&mut base as *mut *mut c_void).cast::<c_void>(),
                )
            };
            raw::check("MPI_Win_shared_query", rc)?;
            let len = ask.len as usize;
            let expected = len * size_of::<T>();
            // The library may round a segment up (to whole pages), never down.
            if usize::try_from(bytes).map_or(true, |b| b < expected) {
                return Err(Error::new(Kind::Mpi {
                    call: "MPI_Win_shared_query",
                    code: 0,
                    message: format!(
                        "rank {rank}'s segment has {bytes} bytes where {expected} were asked for"
                    ),
                }));
            }
            let start = if len == 0 {
                ptr::NonNull::<T>::dangling().as_ptr()
            } else if base.is_null() || (base as usize) % align_of::<T>() != 0 {
                return Err(Error::new(Kind::Misaligned {
                    rank,
                    align: align_of::<T>(),
                }));
            } else {
                base.cast::<T>()
            };
            self.segments.push((start, len));
        }
        Ok(())
    }

    /// This rank's number in the node.
    pub fn rank(&self) -> usize {
        self.node.rank()
    }

    /// The number of segments: one per rank of the node.
    pub fn ranks(&self) -> usize {
        self.segments.len()
    }

    /// Rank `rank`'s segment, read-only.
    ///
    /// # Panics
    ///
    /// If `rank` is not below [`ranks`](SharedWindow::ranks); see
    /// [`try_segment`](SharedWindow::try_segment).
    pub fn segment(&self, rank: usize) -> &[T] {
        match self.try_segment(rank) {
            Ok(s) => s,
            Err(e) => panic!("{e}"),
        }
    }

    /// Rank `rank`'s segment, read-only, or an error if there is no such rank.
    ///
    /// # Errors
    ///
    /// [`is_rank_out_of_range`](Error::is_rank_out_of_range) if `rank` is not below
    /// [`ranks`](SharedWindow::ranks). Not collective: only the calling rank sees it.
    pub fn try_segment(&self, rank: usize) -> Result<&[T], Error> {
        let &(start, len) = self.segments.get(rank).ok_or_else(|| {
            Error::new(Kind::RankOutOfRange {
                rank,
                size: self.segments.len(),
            })
        })?;
        // SAFETY: the segment holds `len` initialised `T`s (zeroed at creation, then
        // written only as `T`s) and stays mapped while the window lives, which the
        // borrow of `self` guarantees. Nobody writes it while the slice lives: writes
        // happen only in `write`, which every rank enters (so this rank's borrow has
        // ended) before any rank writes.
        Ok(unsafe { std::slice::from_raw_parts(start, len) })
    }

    /// This rank's own segment, read-only.
    pub fn mine(&self) -> &[T] {
        self.segment(self.node.rank())
    }

    /// A collective write phase: every rank waits until all have entered, each runs
    /// `f` on its own segment, then all synchronise (`MPI_Win_sync` and a barrier), so
    /// that when `write` returns every rank sees every segment as written.
    ///
    /// Returns what `f` returned on this rank.
    ///
    /// # Panics
    ///
    /// If `f` panics on any rank: the phase still ends on every rank, then the panic is
    /// resumed on the rank where it happened and every other rank panics too, so that
    /// all ranks stay in step.
    pub fn write<R>(&mut self, f: impl FnOnce(&mut [T]) -> R) -> R {
        IN_STEP_PANIC.set(false);
        // Every rank has ended its reads: `&mut self` proves it for this rank, and the
        // barrier inside `synchronise` for the others.
        self.synchronise();
        let (start, len) = self.segments[self.node.rank()];
        // SAFETY: this rank's segment holds `len` initialised `T`s; `&mut self` proves
        // this rank holds no slice of the window, and no other rank reads it until the
        // synchronisation below, which every rank reaches after its own `f`.
        let mine = unsafe { std::slice::from_raw_parts_mut(start, len) };
        let outcome = panic::catch_unwind(AssertUnwindSafe(|| f(mine)));
        self.synchronise();
        let panicked = u64::from(outcome.is_err());
        let mut any = 0u64;
        // SAFETY: the node's communicator is live; one u64 in, one out; every rank of
        // the node reaches this call.
        let rc = unsafe {
            ffi::MPI_Allreduce(
                (&panicked as *const u64).cast::<c_void>(),
                (&mut any as *mut u64).cast::<c_void>(),
                1,
                ffi::RSMPI_UINT64_T,
                ffi::RSMPI_MAX,
                self.node.comm(),
            )
        };
        raw::expect("MPI_Allreduce", rc);
        // Every rank now unwinds together: windows dropped on the way are freed
        // collectively (see `Drop`).
        IN_STEP_PANIC.set(any != 0);
        match outcome {
            Err(payload) => panic::resume_unwind(payload),
            Ok(_) if any != 0 => panic!(
                "another rank of the node panicked inside SharedWindow::write; this rank \
                 panics too so that all ranks stay in step"
            ),
            Ok(value) => value,
        }
    }

    /// Makes this rank's stores visible to the node and the others' to this rank:
    /// `MPI_Win_sync`, barrier, `MPI_Win_sync` (the MPI standard's unified-model
    /// pattern for shared windows).
    fn synchronise(&self) {
        // SAFETY: the window is live and in a passive-target epoch opened at creation;
        // the communicator is the node's, on which every rank makes the same calls.
        unsafe {
            raw::expect("MPI_Win_sync", ffi::MPI_Win_sync(self.win));
            raw::expect("MPI_Barrier", ffi::MPI_Barrier(self.node.comm()));
            raw::expect("MPI_Win_sync", ffi::MPI_Win_sync(self.win));
        }
    }
}

thread_local! {
    /// Whether the panic unwinding this thread, if any, was raised by `write` on every
    /// rank of the node at once (cleared by the next collective call).
    static IN_STEP_PANIC: Cell<bool> = const { Cell::new(false) };
}

impl<T: Plain> Drop for SharedWindow<'_, T> {
    fn drop(&mut self) {
        if std::thread::panicking() && !IN_STEP_PANIC.get() {
            // This rank alone is unwinding: freeing is collective and would wait for
            // ranks that are elsewhere. The window stays (counted: finalising MPI then
            // stops the process); a rank that dies of the panic ends the MPI job.
            return;
        }
        if raw::is_finalized() {
            // Not reached while the window is counted (finalising with live windows
            // aborts); kept so that no MPI call is ever made after finalisation.
            return;
        }
        // SAFETY: the window is live and no slice of it exists (they borrow `self`).
        // The epoch opened at creation is closed, every rank waits until all have
        // stopped reading, then the window is freed, collectively, before the node's
        // communicator (the window borrows the node).
        unsafe {
            ffi::MPI_Win_unlock_all(self.win);
            ffi::MPI_Barrier(self.node.comm());
            ffi::MPI_Win_free(&mut self.win);
        }
        finalize::window_freed();
    }
}

impl<T: Plain> fmt::Debug for SharedWindow<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lens: Vec<usize> = self.segments.iter().map(|&(_, len)| len).collect();
        f.debug_struct("SharedWindow")
            .field("rank", &self.node.rank())
            .field("segment_lens", &lens)
            .finish_non_exhaustive()
    }
}

/// Every rank's `Ask`, gathered on every rank (`MPI_Allgather`).
fn exchange(node: &Node, ask: Ask) -> Result<Vec<Ask>, Error> {
    let mine: [u64; ASK_WORDS] = [ask.code, ask.len, ask.shm_free, ask.element];
    let mut all = vec![0u64; ASK_WORDS * node.size()];
    // SAFETY: the node's communicator is live; ASK_WORDS u64s go out and as many per
    // rank come back, into a buffer of `ASK_WORDS * size` u64s. Every rank of the node
    // makes this call.
    let rc = unsafe {
        ffi::MPI_Allgather(
            mine.as_ptr().cast::<c_void>(),
            ASK_WORDS as c_int,
            ffi::RSMPI_UINT64_T,
            all.as_mut_ptr().cast::<c_void>(),
            ASK_WORDS as c_int,
            ffi::RSMPI_UINT64_T,
            node.comm(),
        )
    };
    raw::check("MPI_Allgather", rc)?;
    Ok(all
        .chunks_exact(ASK_WORDS)
        .map(|c| Ask {
            code: c[0],
            len: c[1],
            shm_free: c[2],
            element: c[3],
        })
        .collect())
}

/// A fingerprint of `T` that is the same in every process built from the same source:
/// FNV-1a over its name, size and alignment.
fn fingerprint<T>() -> u64 {
    let name = std::any::type_name::<T>().bytes();
    let layout = (size_of::<T>() as u64).to_le_bytes().into_iter();
    let align = (align_of::<T>() as u64).to_le_bytes().into_iter();
    name.chain(layout)
        .chain(align)
        .fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// Bytes free in the node's shared-memory file system, if it can be asked.
fn shm_available() -> Option<u64> {
    // SAFETY: an all-zero `statvfs` is a valid value for the call to overwrite.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: the path is NUL-terminated and `st` is a valid place to write to.
    let rc = unsafe { libc::statvfs(SHM_DIR.as_ptr().cast(), &mut st) };
    if rc != 0 {
        return None;
    }
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}
