//! Arenas that stand by in a child made by `fork`: the thread that switches them at
//! their first purge is the parent's, so the child starts its own. Alone in its binary:
//! it forks, and the child measures its RSS.
mod common;

use std::time::{Duration, Instant};

use arenapool_alloc::{flush_thread_cache, Arena, ArenaAlloc};
use common::*;

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

/// An arena that stands by: idle (its free pages given back), then left to
/// `retain_freed_on_use`.
fn standing_by() -> Arena {
    let arena = Arena::new().expect("an arena");
    arena.return_freed().expect("idle");
    arena.retain_freed_on_use().expect("standing by");
    arena
}

/// Allocates 16 MiB in objects of 1 KiB in `arena`, touches and frees them, until the
/// arena is seen to keep them (its first emptied slab was purged, which asks for the
/// switch) or 30 s have passed; returns what it kept, in bytes above `before`. `list`
/// is allocated outside the arena (a list of 16 KiB or more made inside would be a
/// large block, which switches the arena by itself).
fn churn_until_kept(arena: &Arena, list: &mut Vec<Vec<u8>>, before: usize) -> isize {
    let deadline = Instant::now() + Duration::from_secs(30);
    arena.enter(|| loop {
        list.extend((0..16 * MIB / 1024).map(|i| vec![(i % 251) as u8 + 1; 1024]));
        std::hint::black_box(&list);
        list.clear();
        flush_thread_cache().expect("a flush");
        let kept = rss() as isize - before as isize;
        if kept > 12 * MIB as isize || Instant::now() > deadline {
            return kept;
        }
    })
}

/// The child's part; `Err` says what went wrong.
fn in_the_child(inherited: &Arena) -> Result<(), String> {
    let mut list = Vec::with_capacity(16 * MIB / 1024);
    // A purge in the arena that stood by in the parent: it marks the arena, and no
    // switcher of the child's runs to see it.
    let before = rss();
    inherited.enter(|| {
        list.extend((0..16 * MIB / 1024).map(|i| vec![(i % 251) as u8 + 1; 1024]));
        list.clear();
        flush_thread_cache().expect("a flush");
    });
    // The child's first arena to stand by starts its switcher, which looks at the marks
    // it finds: the inherited arena switches without another wake-up (its next purges
    // find it marked already, and wake nobody).
    let own = standing_by();
    let kept = churn_until_kept(inherited, &mut list, before);
    eprintln!("inherited arena: kept {:+.1} MiB", kept as f64 / MIB as f64);
    if kept <= 12 * MIB as isize {
        return Err(format!(
            "the inherited arena went on giving freed pages back: {:+.1} MiB after 30 s",
            kept as f64 / MIB as f64
        ));
    }
    let before = rss();
    let kept = churn_until_kept(&own, &mut list, before);
    eprintln!(
        "the child's arena: kept {:+.1} MiB",
        kept as f64 / MIB as f64
    );
    if kept <= 12 * MIB as isize {
        return Err(format!(
            "the child's arena went on giving freed pages back: {:+.1} MiB after 30 s",
            kept as f64 / MIB as f64
        ));
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
