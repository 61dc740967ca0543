//! `SharedState`: read-only data built once per node and read by every rank.

use std::fmt;
use std::ops::Deref;

use crate::error::{Error, Kind};
use crate::plain::Plain;
use crate::window::SharedWindow;
use crate::Node;

/// Read-only data held once per node: built by one rank into a shared window, read in
/// place by every rank of the node and by all of their threads.
///
/// Made by [`Node::share`]. It dereferences to `&[T]`, and it is `Sync`, so an
/// `ArenaPool` job on every rank reads it without copying: the node holds the data
/// once, not once per rank. Dropping it is collective, like dropping a
/// [`SharedWindow`].
///
/// ```no_run
/// #[global_allocator]
/// static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;
///
/// use rayon::prelude::*;
///
/// let universe = mpi::initialize().expect("MPI initialised twice");
/// let world = universe.world();
/// let node = arenapool_mpi::Node::split(&world)?;
/// // 256 MiB of f64, built on rank 0 of the node, held once by the node.
/// let table = node.share::<f64>(0, 32 << 20, |t| {
///     for (i, x) in t.iter_mut().enumerate() {
///         *x = i as f64;
///     }
/// })?;
/// let pool = arenapool_pool::ArenaPool::builder().num_threads(2).build()?;
/// let sum: f64 = pool.run(|| table.par_iter().sum());
/// println!("rank {}: sum {sum}", node.rank());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Warning: every rank, the same order
///
/// As for [`SharedWindow`]: every rank of the node makes the `share` call and drops
/// the state, in the same order relative to the node's other collective calls.
pub struct SharedState<'node, T: Plain> {
    window: SharedWindow<'node, T>,
    root: usize,
}

impl<'node, T: Plain> SharedState<'node, T> {
    pub(crate) fn build(
        node: &'node Node,
        root: usize,
        len: usize,
        build: impl FnOnce(&mut [T]),
    ) -> Result<Self, Error> {
        if root >= node.size() {
            // Every rank sees the same node size, so every rank returns here.
            return Err(Error::new(Kind::RankOutOfRange {
                rank: root,
                size: node.size(),
            }));
        }
        let mut window = node.allocate::<T>(if node.rank() == root { len } else { 0 })?;
        let is_root = node.rank() == root;
        window.write(|mine| {
            if is_root {
                build(mine);
            }
        });
        Ok(SharedState { window, root })
    }

    /// The node rank that built the data.
    pub fn root(&self) -> usize {
        self.root
    }

    /// The data, read-only (also reachable through `Deref`).
    pub fn as_slice(&self) -> &[T] {
        self.window.segment(self.root)
    }
}

impl<T: Plain> Deref for SharedState<'_, T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        self.as_slice()
    }
}

impl<T: Plain> fmt::Debug for SharedState<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedState")
            .field("root", &self.root)
            .field("len", &self.as_slice().len())
            .finish_non_exhaustive()
    }
}
