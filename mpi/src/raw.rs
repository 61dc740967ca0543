//! The MPI library's state and error codes, shared by every call the crate makes.

use std::os::raw::{c_char, c_int};

use mpi::ffi;

use crate::error::{Error, Kind};

/// `Ok` if MPI may be called now: initialised and not yet finalised.
pub(crate) fn ready() -> Result<(), Error> {
    let mut flag: c_int = 0;
    // SAFETY: `MPI_Initialized` may be called at any time, even before `MPI_Init`; it
    // writes one int.
    unsafe { ffi::MPI_Initialized(&mut flag) };
    if flag == 0 {
        return Err(Error::new(Kind::NotInitialized));
    }
    if is_finalized() {
        return Err(Error::new(Kind::Finalized));
    }
    Ok(())
}

/// Whether `MPI_Finalize` has run, after which no MPI object may be freed.
pub(crate) fn is_finalized() -> bool {
    let mut flag: c_int = 0;
    // SAFETY: `MPI_Finalized` may be called at any time, even after `MPI_Finalize`; it
    // writes one int.
    unsafe { ffi::MPI_Finalized(&mut flag) };
    flag != 0
}

/// Turns the return code of the MPI call named `call` into a `Result`.
pub(crate) fn check(call: &'static str, code: c_int) -> Result<(), Error> {
    if code == ffi::MPI_SUCCESS as c_int {
        return Ok(());
    }
    Err(Error::new(Kind::Mpi {
        call,
        code,
        message: error_string(code),
    }))
}

/// Like [`check`], for calls that cannot fail on live handles unless the MPI library is
/// broken, in places that have no way to return an error.
pub(crate) fn expect(call: &'static str, code: c_int) {
    if let Err(e) = check(call, code) {
        panic!("{e}; every rank must take part in the same collective calls, in the same order");
    }
}

fn error_string(code: c_int) -> String {
    let mut buf = [0 as c_char; ffi::MPI_MAX_ERROR_STRING as usize];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds MPI_MAX_ERROR_STRING characters, as the call requires;
    // it writes at most that many and their count to `len`.
    let rc = unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr(), &mut len) };
    if rc != ffi::MPI_SUCCESS as c_int {
        return String::from("(no description)");
    }
    let len = usize::try_from(len).unwrap_or(0).min(buf.len());
    let bytes: Vec<u8> = buf[..len].iter().map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
