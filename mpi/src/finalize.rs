//! Live windows versus `MPI_Finalize`: finalising unmaps every window's memory, so a
//! slice still borrowed from a live window would point at nothing. A hook that MPI runs
//! at the start of `MPI_Finalize` stops the process instead, with a message saying
//! what to do.

use std::io::Write;
use std::os::raw::{c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use mpi::ffi;

use crate::error::Error;
use crate::raw;

/// Windows made and not yet freed, in this process.
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// Whether the hook is attached (once is enough: MPI is initialised once per process).
static ATTACHED: AtomicBool = AtomicBool::new(false);

/// Counts a new window, attaching the finalisation hook first if it is not yet.
///
/// # Errors
///
/// The MPI library refused to attach the hook; the window must then be freed.
pub(crate) fn window_made() -> Result<(), Error> {
    if !ATTACHED.load(Ordering::Acquire) {
        attach()?;
        ATTACHED.store(true, Ordering::Release);
    }
    LIVE.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Counts a window freed.
pub(crate) fn window_freed() {
    LIVE.fetch_sub(1, Ordering::Relaxed);
}

/// Attaches an attribute to `MPI_COMM_SELF` whose delete callback MPI calls first
/// thing in `MPI_Finalize` (MPI standard, section 8.7.1).
fn attach() -> Result<(), Error> {
    let mut keyval: c_int = 0;
    // SAFETY: MPI is initialised (every caller checked); the callbacks have the
    // signatures MPI expects and do not unwind; `keyval` receives one int.
    let rc = unsafe {
        ffi::MPI_Comm_create_keyval(
            Some(no_copy),
            Some(on_finalize),
            &mut keyval,
            std::ptr::null_mut(),
        )
    };
    raw::check("MPI_Comm_create_keyval", rc)?;
    // SAFETY: `keyval` was just created; the attribute value is never read.
    let rc = unsafe { ffi::MPI_Comm_set_attr(ffi::RSMPI_COMM_SELF, keyval, std::ptr::null_mut()) };
    raw::check("MPI_Comm_set_attr", rc)
}

/// Duplicating `MPI_COMM_SELF` does not copy the hook.
unsafe extern "C" fn no_copy(
    _comm: ffi::MPI_Comm,
    _keyval: c_int,
    _extra: *mut c_void,
    _value_in: *mut c_void,
    _value_out: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    // SAFETY: MPI passes a valid place for the flag.
    unsafe { *flag = 0 };
    ffi::MPI_SUCCESS as c_int
}

/// Runs at the start of `MPI_Finalize`: with windows still alive, stops the process
/// before their memory is unmapped under a live borrow.
unsafe extern "C" fn on_finalize(
    _comm: ffi::MPI_Comm,
    _keyval: c_int,
    _value: *mut c_void,
    _extra: *mut c_void,
) -> c_int {
    let live = LIVE.load(Ordering::Relaxed);
    if live > 0 {
        // Nothing here may unwind into MPI: write errors are ignored.
        let _ = writeln!(
            std::io::stderr(),
            "arenapool-mpi: MPI is being finalised with {live} shared window(s) still alive \
             (or leaked); finalising would unmap their memory under the program. Drop every \
             SharedWindow and SharedState before the mpi::Universe. Aborting."
        );
        std::process::abort();
    }
    ffi::MPI_SUCCESS as c_int
}
