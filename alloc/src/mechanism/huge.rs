//! The huge-page setting: whether arenas handed out from now on have huge pages
//! ([`set_huge_pages`], or the environment), and whether the kernel gives them at all.
//! How an arena's memory is advised and given back so that huge pages come back whole
//! is the extent hooks' (`hooks/huge.rs`).

use std::sync::atomic::{AtomicU8, Ordering};

/// Whether arenas created from now on by [`Arena::new`](crate::Arena::new), scopes and
/// phases have huge pages (see [`set_huge_pages`]): [`UNSET`] until set or read.
static DEFAULT: AtomicU8 = AtomicU8::new(UNSET);

const UNSET: u8 = 0;
const ON: u8 = 1;
const OFF: u8 = 2;

/// The environment variable that sets the default of [`set_huge_pages`].
pub const HUGE_PAGES_ENV: &str = "ARENAPOOL_HUGE_PAGES";

/// Sets whether arenas this crate hands out from now on use huge pages: those of
/// [`Arena::new`](crate::Arena::new), [`with_arena`](crate::with_arena) and its twins,
/// and the phase arenas if no [`phase`](crate::phase) has opened yet (they are made
/// once, by the first). Off by default. A pool's workers' arenas follow this unless the
/// pool's builder says otherwise.
///
/// Until it is called, the environment variable `ARENAPOOL_HUGE_PAGES` sets the default,
/// read once: `1`, `on` or `true` turn huge pages on, `0`, `off` or `false` leave them
/// off; any other value leaves them off, with a warning on stderr.
///
/// With huge pages, the kernel faults an arena's memory in 2 MiB at a time where it
/// can, and a purge gives back whole 2 MiB pages where they are free, so that they are
/// faulted in whole again. What a purge gives back is the same either way: every free
/// page. A huge page that holds live data is resident in full until a purge finds its
/// free part, so a few MiB more may stay resident per arena while small objects live in
/// it. Where the kernel's transparent huge pages are `never` or not supported, this
/// changes nothing.
///
/// # When they pay
///
/// Faulting memory in costs a fraction with huge pages where the kernel has free huge
/// pages at hand: a program that runs phase after phase reuses the same memory, and
/// runs them faster (in the benchmark suite, each run after the first of the same S1
/// job takes 0.05–0.06 s with huge pages, 0.10–0.13 s without). But a virtual machine whose guest
/// reports its free memory to the host (virtio-balloon free page reporting) gets its
/// huge pages from memory the host took back, and the first touch of such memory costs
/// the host's own page faults: 4.4 s per GiB against 0.5 s in 4 KiB pages on the
/// machine docs/benchmarks.md was measured on, so that a one-off phase in a fresh
/// process ran 2x slower. Hence off by default; docs/design.md has the figures.
pub fn set_huge_pages(on: bool) {
    DEFAULT.store(if on { ON } else { OFF }, Ordering::Relaxed);
}

/// Whether arenas handed out from now on use huge pages (see [`set_huge_pages`]): the
/// setting, and the kernel allowing them.
pub fn huge_pages() -> bool {
    default_setting() && available()
}

/// The setting of [`set_huge_pages`] (or of the environment), whatever the kernel
/// allows.
pub(crate) fn default_setting() -> bool {
    let mut setting = DEFAULT.load(Ordering::Relaxed);
    if setting == UNSET {
        setting = match std::env::var(HUGE_PAGES_ENV).as_deref() {
            Ok("1" | "on" | "true") => ON,
            Err(std::env::VarError::NotPresent) | Ok("0" | "off" | "false") => OFF,
            Ok(other) => {
                eprintln!(
                    "arenapool: {HUGE_PAGES_ENV}={other:?} is not 0, off, false, 1, on or \
                     true: huge pages stay off"
                );
                OFF
            }
            Err(std::env::VarError::NotUnicode(_)) => {
                eprintln!("arenapool: {HUGE_PAGES_ENV} is not valid Unicode: huge pages stay off");
                OFF
            }
        };
        // A call of `set_huge_pages` meanwhile wins.
        setting =
            match DEFAULT.compare_exchange(UNSET, setting, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => setting,
                Err(set) => set,
            };
    }
    setting == ON
}

/// Whether the kernel may give this process's advised memory huge pages: transparent
/// huge pages are built in and `enabled` is `always` or `madvise`.
///
/// Read once; threads that race to read it first each read it (no lock, so a `fork`
/// meanwhile leaves the child nothing to wait for).
pub(crate) fn available() -> bool {
    static AVAILABLE: AtomicU8 = AtomicU8::new(UNSET);
    match AVAILABLE.load(Ordering::Relaxed) {
        ON => true,
        OFF => false,
        _ => {
            let on = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .is_ok_and(|policy| policy.contains("[always]") || policy.contains("[madvise]"));
            AVAILABLE.store(if on { ON } else { OFF }, Ordering::Relaxed);
            on
        }
    }
}
