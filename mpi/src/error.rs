//! `Error`: why a node, a window or a gathered report could not be made.

use std::error::Error as StdError;
use std::fmt;

/// Why a [`Node`](crate::Node), a [`SharedWindow`](crate::SharedWindow), a
/// [`SharedState`](crate::SharedState) or a [`PhaseTable`](crate::PhaseTable) could not
/// be made. The message says what to do.
///
/// Collective calls check their input on every rank before any rank allocates, so a
/// bad input on one rank gives an error on every rank: the rank at fault gets the
/// error itself, the others get [`is_other_rank`](Error::is_other_rank), with the
/// first faulty rank's error as [`source`](std::error::Error::source). No rank is left
/// waiting, and the program can go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    NotInitialized,
    Finalized,
    TooLarge {
        len: u64,
        elem_size: usize,
    },
    NodeTooLarge {
        bytes: u128,
    },
    NoSpace {
        bytes: u128,
        available: u64,
    },
    ZeroSized,
    OverAligned {
        align: usize,
    },
    Misaligned {
        rank: usize,
        align: usize,
    },
    TypeMismatch {
        rank: usize,
        element: &'static str,
    },
    RankOutOfRange {
        rank: usize,
        size: usize,
    },
    NotNodeLocal {
        size: usize,
        node_size: usize,
    },
    OtherRank {
        rank: usize,
        cause: Box<Error>,
    },
    Mpi {
        call: &'static str,
        code: i32,
        message: String,
    },
}

impl Error {
    pub(crate) fn new(kind: Kind) -> Self {
        Error { kind }
    }

    /// MPI was not initialised when the call was made (or was already finalised).
    pub fn is_not_initialized(&self) -> bool {
        matches!(self.kind, Kind::NotInitialized | Kind::Finalized)
    }

    /// The window asked for does not fit: its byte size overflows, or the node's total
    /// does, or the node's shared-memory file system has no room for it.
    pub fn is_too_large(&self) -> bool {
        matches!(
            self.kind,
            Kind::TooLarge { .. } | Kind::NodeTooLarge { .. } | Kind::NoSpace { .. }
        )
    }

    /// The element type cannot live in a window: zero-sized, aligned beyond what the
    /// shared segments guarantee, or not the same on every rank.
    pub fn is_bad_type(&self) -> bool {
        matches!(
            self.kind,
            Kind::ZeroSized
                | Kind::OverAligned { .. }
                | Kind::Misaligned { .. }
                | Kind::TypeMismatch { .. }
        )
    }

    /// A rank number was not below the node's size.
    pub fn is_rank_out_of_range(&self) -> bool {
        matches!(self.kind, Kind::RankOutOfRange { .. })
    }

    /// The communicator given as a node spans ranks that do not share memory.
    pub fn is_not_node_local(&self) -> bool {
        matches!(self.kind, Kind::NotNodeLocal { .. })
    }

    /// This rank's input was fine, but another rank's was not; nothing was made on any
    /// rank. [`source`](std::error::Error::source) is that rank's error.
    pub fn is_other_rank(&self) -> bool {
        matches!(self.kind, Kind::OtherRank { .. })
    }

    /// The MPI library returned an error code.
    pub fn is_mpi(&self) -> bool {
        matches!(self.kind, Kind::Mpi { .. })
    }

    /// The rank at fault, for [`is_other_rank`](Error::is_other_rank) errors.
    pub fn faulty_rank(&self) -> Option<usize> {
        match self.kind {
            Kind::OtherRank { rank, .. } => Some(rank),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::NotInitialized => f.write_str(
                "MPI is not initialised: call `mpi::initialize()` first and keep the \
                 `Universe` it returns alive while nodes and windows exist",
            ),
            Kind::Finalized => f.write_str(
                "MPI is already finalised (its `Universe` was dropped): keep the `Universe` \
                 alive while nodes and windows exist",
            ),
            Kind::TooLarge { len, elem_size } => write!(
                f,
                "a window of {len} elements of {elem_size} bytes does not fit in the address \
                 space: ask for fewer elements"
            ),
            Kind::NodeTooLarge { bytes } => write!(
                f,
                "the node's segments add up to {bytes} bytes, more than the address space \
                 holds: ask for fewer elements"
            ),
            Kind::NoSpace { bytes, available } => write!(
                f,
                "the node's segments need {bytes} bytes of shared memory but /dev/shm has \
                 {available} bytes free: ask for less, free other windows first, or enlarge \
                 /dev/shm"
            ),
            Kind::ZeroSized => {
                f.write_str("a window of a zero-sized type holds nothing: use a type with a size")
            }
            Kind::OverAligned { align } => write!(
                f,
                "the element type needs {align}-byte alignment; window segments are only \
                 guaranteed page alignment (4096): use a less aligned type"
            ),
            Kind::Misaligned { rank, align } => write!(
                f,
                "the MPI library placed rank {rank}'s segment at an address that is not \
                 {align}-byte aligned: use a type with smaller alignment"
            ),
            Kind::TypeMismatch { rank, element } => write!(
                f,
                "rank {rank} of the node asked for a window of a different element type from \
                 this rank's `{element}`: every rank must allocate the same type"
            ),
            Kind::RankOutOfRange { rank, size } => write!(
                f,
                "rank {rank} is out of range: the node's ranks are numbered 0 to {}",
                size.saturating_sub(1)
            ),
            Kind::NotNodeLocal { size, node_size } => write!(
                f,
                "the communicator's {size} ranks do not all share memory (this rank's node \
                 holds {node_size} of them): use `Node::split` to get the ranks of each node"
            ),
            Kind::OtherRank { rank, cause } => write!(
                f,
                "rank {rank} of the node gave bad input, so nothing was made on any rank: \
                 fix that rank's call (rank {rank}: {cause})"
            ),
            Kind::Mpi {
                call,
                code,
                message,
            } => write!(f, "{call} failed with MPI error {code}: {message}"),
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match &self.kind {
            Kind::OtherRank { cause, .. } => Some(&**cause),
            _ => None,
        }
    }
}
