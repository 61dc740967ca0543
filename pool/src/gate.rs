//! One job at a time: the gate a job holds from its start to its end.

use std::marker::PhantomData;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, ThreadId};

/// Lets one job at a time into a pool and remembers which thread started it.
#[derive(Debug, Default)]
pub(crate) struct Gate {
    /// The thread that started the running job, if one is running.
    owner: Mutex<Option<ThreadId>>,
    opened: Condvar,
}

impl Gate {
    fn owner(&self) -> MutexGuard<'_, Option<ThreadId>> {
        // Nothing panics while the lock is held; a poisoned gate is still consistent.
        self.owner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until no job is running, then lets the calling thread's job in.
    pub(crate) fn enter(&self) -> Ticket<'_> {
        let me = thread::current().id();
        let mut owner = self.owner();
        while owner.is_some() {
            owner = self
                .opened
                .wait(owner)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *owner = Some(me);
        Ticket {
            gate: self,
            _not_send: PhantomData,
        }
    }

    /// Whether the calling thread started the job that is running now (and so is
    /// inside it: it holds a stream, or it is nesting calls).
    pub(crate) fn is_held_by_current_thread(&self) -> bool {
        *self.owner() == Some(thread::current().id())
    }
}

/// A job's right to run; the gate opens for the next job when this is dropped.
///
/// It stays on the thread that entered, which is what [`Gate::is_held_by_current_thread`]
/// relies on.
#[derive(Debug)]
pub(crate) struct Ticket<'g> {
    gate: &'g Gate,
    _not_send: PhantomData<*const ()>,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        *self.gate.owner() = None;
        self.gate.opened.notify_one();
    }
}
