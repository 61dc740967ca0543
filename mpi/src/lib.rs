#![doc = include_str!("../README.md")]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs, missing_debug_implementations)]

mod error;
mod finalize;
mod memory;
mod node;
mod plain;
mod raw;
mod report;
mod state;
mod window;

pub use self::error::Error;
pub use self::memory::{node_shmem, rss_anon, rss_shmem};
pub use self::node::Node;
pub use self::plain::Plain;
pub use self::report::{PhaseTable, RankReport};
pub use self::state::SharedState;
pub use self::window::SharedWindow;
