//! `Node`: the ranks of one machine, which can share memory.

use std::fmt;
use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};

use mpi::ffi;
use mpi::traits::Communicator;

use crate::error::{Error, Kind};
use crate::plain::Plain;
use crate::raw;
use crate::state::SharedState;
use crate::window::SharedWindow;

/// The ranks of a communicator that run on one machine and can share memory: a
/// node-local communicator, freed when the `Node` is dropped.
///
/// Windows borrow their node, so a node cannot be dropped (its communicator freed)
/// while a window on it exists.
///
/// ```no_run
/// let universe = mpi::initialize().expect("MPI initialised twice");
/// let world = universe.world();
/// let node = arenapool_mpi::Node::split(&world)?;
/// println!("rank {} of {} on this node", node.rank(), node.size());
/// # Ok::<(), arenapool_mpi::Error>(())
/// ```
///
/// # Warning: MPI's lifetime
///
/// Drop nodes and windows before the `Universe` that `mpi::initialize` returned (in
/// `main`, declare the universe first: locals drop in reverse order). Finalising MPI
/// unmaps every window's memory, so if the `Universe` is dropped while a window is
/// alive (or leaked with `mem::forget`), the process stops with a message at the start
/// of `MPI_Finalize` rather than leave a slice pointing at nothing. A node that
/// outlives the `Universe` is harmless: its communicator is left to MPI.
pub struct Node {
    comm: ffi::MPI_Comm,
    rank: usize,
    size: usize,
    /// MPI calls stay on the thread that made the node, whatever type the MPI library
    /// uses for handles (a pointer in OpenMPI, an integer in MPICH).
    _one_thread: PhantomData<*const ()>,
}

impl Node {
    /// Splits `comm` into nodes: collective over `comm`, and each rank gets the node
    /// it belongs to, ranked in `comm`'s order (`MPI_Comm_split_type` with
    /// `MPI_COMM_TYPE_SHARED`).
    ///
    /// The node's communicator returns errors instead of aborting, so the calls made on
    /// it report failures as [`Error`]s.
    ///
    /// # Errors
    ///
    /// MPI is not initialised, or already finalised (checked before any MPI call, on
    /// every rank); the MPI library failed to split.
    pub fn split<C: Communicator + ?Sized>(comm: &C) -> Result<Node, Error> {
        raw::ready()?;
        // SAFETY: a constant handle defined by the MPI bindings, never written.
        let mut newcomm = unsafe { ffi::RSMPI_COMM_NULL };
        // SAFETY: `comm` is a live communicator (borrowed); the call writes one handle
        // to `newcomm`. Every rank of `comm` makes this call, as it is collective.
        let rc = unsafe {
            ffi::MPI_Comm_split_type(
                comm.as_raw(),
                ffi::RSMPI_COMM_TYPE_SHARED,
                comm.rank(),
                ffi::RSMPI_INFO_NULL,
                &mut newcomm,
            )
        };
        raw::check("MPI_Comm_split_type", rc)?;
        // SAFETY: `newcomm` was just made by the split and is owned by nobody else.
        unsafe { Node::from_owned(newcomm) }
    }

    /// The ranks of `comm` as one node, if they all share memory: collective over
    /// `comm`.
    ///
    /// # Errors
    ///
    /// [`is_not_node_local`](Error::is_not_node_local) on every rank if `comm` spans
    /// more than one node; the errors of [`split`](Node::split).
    pub fn from_comm<C: Communicator + ?Sized>(comm: &C) -> Result<Node, Error> {
        let node = Node::split(comm)?;
        let size = usize::try_from(comm.size()).unwrap_or(0);
        let whole = u64::from(node.size == size);
        let mut all_whole = 0u64;
        // SAFETY: `comm` is live; one u64 is sent and one received, in buffers of one
        // u64 each. Every rank of `comm` makes this call.
        let rc = unsafe {
            ffi::MPI_Allreduce(
                (&whole as *const u64).cast::<c_void>(),
                (&mut all_whole as *mut u64).cast::<c_void>(),
                1,
                ffi::RSMPI_UINT64_T,
                ffi::RSMPI_MIN,
                comm.as_raw(),
            )
        };
        raw::check("MPI_Allreduce", rc)?;
        if all_whole == 1 {
            Ok(node)
        } else {
            Err(Error::new(Kind::NotNodeLocal {
                size,
                node_size: node.size,
            }))
        }
    }

    /// Wraps a node-local communicator that the node will own and free.
    ///
    /// # Safety
    ///
    /// `comm` is a live intra-communicator whose ranks share memory, owned by no one
    /// else.
    unsafe fn from_owned(mut comm: ffi::MPI_Comm) -> Result<Node, Error> {
        let (mut rank, mut size): (c_int, c_int) = (0, 0);
        // SAFETY: `comm` is live (caller); each call writes one value.
        let rcs = unsafe {
            [
                ("MPI_Comm_set_errhandler", {
                    ffi::MPI_Comm_set_errhandler(comm, ffi::RSMPI_ERRORS_RETURN)
                }),
                ("MPI_Comm_rank", ffi::MPI_Comm_rank(comm, &mut rank)),
                ("MPI_Comm_size", ffi::MPI_Comm_size(comm, &mut size)),
            ]
        };
        if let Some(e) = rcs
            .iter()
            .find_map(|&(call, rc)| raw::check(call, rc).err())
        {
            // SAFETY: `comm` is owned here and nothing else refers to it.
            unsafe { ffi::MPI_Comm_free(&mut comm) };
            return Err(e);
        }
        Ok(Node {
            comm,
            rank: usize::try_from(rank).unwrap_or(0),
            size: usize::try_from(size).unwrap_or(0),
            _one_thread: PhantomData,
        })
    }

    /// This rank's number in the node, from 0 to `size() - 1`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks in the node.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Waits until every rank of the node has called `barrier`.
    ///
    /// # Panics
    ///
    /// If the MPI library reports an error, which on a live node means the ranks did
    /// not make the same collective calls.
    pub fn barrier(&self) {
        // SAFETY: the node's communicator is live while `self` is.
        raw::expect("MPI_Barrier", unsafe { ffi::MPI_Barrier(self.comm) });
    }

    /// Allocates a shared window on the node: collective. This rank's segment holds
    /// `len` elements, zeroed; every rank can read every segment. See
    /// [`SharedWindow`].
    ///
    /// # Errors
    ///
    /// Checked on every rank before any memory is allocated, so every rank returns an
    /// error if one rank's input is bad (the others get
    /// [`is_other_rank`](Error::is_other_rank)): a byte size that overflows, or a
    /// node total larger than `/dev/shm` has free ([`is_too_large`](Error::is_too_large));
    /// a zero-sized or over-aligned `T` ([`is_bad_type`](Error::is_bad_type)); MPI
    /// finalised. An error from the MPI library itself is returned as
    /// [`is_mpi`](Error::is_mpi).
    pub fn allocate<T: Plain>(&self, len: usize) -> Result<SharedWindow<'_, T>, Error> {
        SharedWindow::allocate(self, len)
    }

    /// One copy per node of read-only data: rank `root` allocates `len` elements in a
    /// shared window, fills them with `build`, and every rank of the node reads them.
    /// Collective; `build` runs on `root` only.
    ///
    /// The node holds the data once, however many ranks read it; a [`SharedState`] is
    /// `Sync`, so every thread of every rank (an `ArenaPool`'s tasks, say) reads it in
    /// place.
    ///
    /// # Errors
    ///
    /// [`is_rank_out_of_range`](Error::is_rank_out_of_range) on every rank if `root`
    /// is not below `size()`; the errors of [`allocate`](Node::allocate).
    ///
    /// # Panics
    ///
    /// If `build` panics: every rank then panics, so that all stay in step.
    pub fn share<T: Plain>(
        &self,
        root: usize,
        len: usize,
        build: impl FnOnce(&mut [T]),
    ) -> Result<SharedState<'_, T>, Error> {
        SharedState::build(self, root, len, build)
    }

    pub(crate) fn comm(&self) -> ffi::MPI_Comm {
        self.comm
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if raw::is_finalized() {
            return;
        }
        // SAFETY: the node owns its communicator, and no window on it is alive (they
        // borrow the node). `MPI_Comm_free` is collective in spirit but does not wait.
        unsafe { ffi::MPI_Comm_free(&mut self.comm) };
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Node")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}
