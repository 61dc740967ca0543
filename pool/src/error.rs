//! `BuildError`: why a pool could not be built.

use std::error::Error;
use std::fmt;

/// Why [`ArenaPoolBuilder::build`](crate::ArenaPoolBuilder::build) failed.
///
/// The message says what to change.
#[derive(Debug)]
pub struct BuildError {
    kind: ErrorKind,
}

#[derive(Debug)]
enum ErrorKind {
    ZeroWindow,
    Threads(rayon::ThreadPoolBuildError),
    Timer(std::io::Error),
}

impl BuildError {
    pub(crate) fn zero_window() -> Self {
        BuildError {
            kind: ErrorKind::ZeroWindow,
        }
    }

    pub(crate) fn timer(e: std::io::Error) -> Self {
        BuildError {
            kind: ErrorKind::Timer(e),
        }
    }

    pub(crate) fn threads(e: rayon::ThreadPoolBuildError) -> Self {
        BuildError {
            kind: ErrorKind::Threads(e),
        }
    }
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::ZeroWindow => f.write_str(
                "a stream window of 0 would never let a task run: pass `stream_window(n)` with \
                 n >= 1, or leave it unset for twice the number of threads",
            ),
            ErrorKind::Threads(e) => write!(
                f,
                "the pool's threads could not be started: {e}; check that `stack_size(n)`, if \
                 set, asks for a stack the system can give, and that the process may start \
                 `num_threads` more threads (its thread limit: `ulimit -u`)",
            ),
            ErrorKind::Timer(e) => write!(
                f,
                "the pool's keep-warm timer thread could not be started: {e}; check that the \
                 process may start one more thread (its thread limit: `ulimit -u`), or build \
                 the pool without `keep_warm`",
            ),
        }
    }
}

impl Error for BuildError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match &self.kind {
            ErrorKind::Threads(e) => Some(e),
            ErrorKind::Timer(e) => Some(e),
            ErrorKind::ZeroWindow => None,
        }
    }
}
