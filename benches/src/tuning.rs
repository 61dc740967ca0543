//! The settings a contender applies inside its child process: once before the workload
//! starts (glibc's trim threshold, mimalloc's purge delay), and at the end of every
//! phase (glibc's `malloc_trim`). The compiled-in jemalloc configurations are in the
//! contender binaries, since jemalloc reads them before `main`.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::contender::GLIBC_TRIM_THRESHOLD;
use crate::Contender;

/// mimalloc's `mi_option_purge_delay`: its place in mimalloc 3's `mi_option_t`
/// enumeration (`mimalloc.h`), which `libmimalloc-sys` does not name.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Whether every phase end calls `malloc_trim(0)` (the `glibc-trim` contender).
static TRIM_AT_PHASE_END: AtomicBool = AtomicBool::new(false);

/// Applies `contender`'s run-time settings; call once, before the workload.
///
/// # Errors
///
/// The allocator refused a setting, or does not read back what was set.
pub(crate) fn at_start(contender: Contender) -> Result<(), String> {
    match contender {
        Contender::GlibcTrim => {
            TRIM_AT_PHASE_END.store(true, Ordering::Relaxed);
            Ok(())
        }
        Contender::GlibcTrim64k => {
            let threshold = libc::c_int::try_from(GLIBC_TRIM_THRESHOLD)
                .map_err(|e| format!("trim threshold out of range: {e}"))?;
            // SAFETY: `mallopt` takes plain integers and has no preconditions.
            match unsafe { libc::mallopt(libc::M_TRIM_THRESHOLD, threshold) } {
                1 => Ok(()),
                _ => Err("glibc refused mallopt(M_TRIM_THRESHOLD, 65536)".to_owned()),
            }
        }
        Contender::MimallocPurge0 => {
            // SAFETY: `mi_option_set` and `mi_option_get` take a valid option number
            // and a value, and mimalloc allows setting options at any time.
            let delay = unsafe {
                libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0);
                libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY)
            };
            match delay {
                0 => Ok(()),
                other => Err(format!(
                    "mimalloc's purge delay reads {other} after setting 0"
                )),
            }
        }
        _ => Ok(()),
    }
}

/// What the contender does when a phase ends, before its RSS is read.
pub(crate) fn at_phase_end() {
    if TRIM_AT_PHASE_END.load(Ordering::Relaxed) {
        // SAFETY: `malloc_trim` has no preconditions; it is only called in the
        // `glibc-trim` contender's process, whose allocator is glibc malloc.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
