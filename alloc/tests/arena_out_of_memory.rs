//! An arena that cannot be made for want of address space is a clear error that says
//! so, never an abort; the next arena is made once there is room again. Alone in its
//! binary: it lowers the process's address-space limit (`RLIMIT_AS`) for a moment.
#![cfg(target_os = "linux")]

use arenapool_alloc::{Arena, ArenaAlloc};

#[global_allocator]
static GLOBAL: ArenaAlloc = ArenaAlloc;

/// The process's mapped address space (`VmSize`), in bytes.
fn vm_size() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let line = status
        .lines()
        .find(|l| l.starts_with("VmSize:"))
        .expect("VmSize");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .expect("a figure")
        .parse()
        .expect("a number");
    kib * 1024
}

fn set_soft_limit(bytes: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `getrlimit` and `setrlimit` read and write one `rlimit`, ours.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_AS, &mut limit), 0);
        limit.rlim_cur = bytes.min(limit.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &limit), 0);
    }
}

#[test]
fn an_arena_without_address_space_is_an_out_of_memory_error() {
    // Room for nothing larger than a few pages: the new arena's metadata cannot be mapped.
    set_soft_limit(vm_size() + (64 << 10));
    let made = Arena::new();
    set_soft_limit(u64::MAX);
    let err = made.expect_err("an arena made with no address space left");
    eprintln!("{err}");
    assert!(err.is_out_of_memory(), "{err}");
    assert!(!err.is_arena_limit() && !err.is_not_installed());
    assert!(err.to_string().contains("address space is full"), "{err}");
    Arena::new().expect("an arena once there is room");
}
