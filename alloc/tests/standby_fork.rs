//! Arenas that stand by in a child made by `fork`: the thread that switches them at
//! their first purge is the parent's, so the child starts its own. Alone in its binary:
//! it forks, and the child measures its RSS.
mod common;

use arenapool_alloc::{flush_thread_cache, Arena, ArenaAlloc};
use common::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

/// The child's part; `Err` says what went wrong.
fn in_the_child(inherited: &Arena) -> Result<(), String> {
    let mut blocks = list(16 * MIB, 1024);
    // A purge in the arena that stood by in the parent: it marks the arena, and no
    // switcher of the child's runs to see it.
    inherited.enter(|| {
        churn(&mut blocks, 16 * MIB, 1024);
        flush_thread_cache().expect("a flush");
    });
    // The child's first arena to stand by starts its switcher, which looks at the marks
    // it finds: the inherited arena switches without another wake-up (its next purges
    // find it marked already, and wake nobody).
    let own = standing_by();
    for (name, arena) in [
        ("the inherited arena", inherited),
        ("the child's arena", &own),
    ] {
        let before = rss();
        let kept = churn_small_until_kept(arena, &mut blocks, before);
        eprintln!("{name}: kept {:+.1} MiB", mib_diff(kept, before));
        if kept <= before + 12 * MIB {
            return Err(format!(
                "{name} went on giving freed pages back: {:+.1} MiB after 30 s",
                mib_diff(kept, before)
            ));
        }
    }
    let used = own.return_freed_if_used().map_err(|e| e.to_string())?;
    let inherited_used = inherited
        .return_freed_if_used()
        .map_err(|e| e.to_string())?;
    if !(used && inherited_used) {
        return Err("an arena was not seen used".to_owned());
    }
    Ok(())
}

#[test]
fn a_child_made_by_fork_switches_arenas_that_stand_by_at_their_first_purge() {
    // The parent's first arena to stand by starts its switcher.
    let inherited = standing_by();
    // SAFETY: the child only allocates (jemalloc's own fork handlers leave its locks
    // usable), starts a thread, and leaves with `_exit`, never returning into the
    // test harness, whose other threads it does not have.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let code = match std::panic::catch_unwind(|| in_the_child(&inherited)) {
            Ok(Ok(())) => 0,
            Ok(Err(e)) => {
                eprintln!("in the child: {e}");
                1
            }
            Err(_) => 2,
        };
        // SAFETY: ends the child at once, running no exit handler of the parent's.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: `pid` is our child and `status` is valid for the call.
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid: {}", std::io::Error::last_os_error());
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed (wait status {status:#x}); its stderr says why"
    );
    inherited.return_freed_if_used().expect("the end");
}
