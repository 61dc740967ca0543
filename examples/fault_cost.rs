//! The physical limit of giving memory back: what it costs this machine to fault
//! memory in, give it back and fault it in again, in 4 KiB pages and in 2 MiB huge
//! pages, per GiB (best of a few rounds). Every figure of a phase's memory cost is a
//! multiple of these.
//!
//! ```sh
//! cargo run --release --example fault_cost            # 1 GiB, best of 3
//! cargo run --release --example fault_cost -- 4 5     # 4 GiB, best of 5
//! ```
//!
//! Each round maps fresh memory, advised `MADV_NOHUGEPAGE` or `MADV_HUGEPAGE`, and
//! times: the first touch (one write per 4 KiB), a write of every byte of the resident
//! memory, `MADV_DONTNEED` of all of it, and a second touch. It also reports how much
//! of the memory the kernel gave in huge pages (`AnonHugePages`), since it may refuse.
use std::ffi::c_void;
use std::time::{Duration, Instant};

const GIB: usize = 1 << 30;
const HUGE_PAGE: usize = 2 << 20;

/// One round's times, and the bytes in huge pages after the first touch.
struct Round {
    first_touch: Duration,
    write: Duration,
    give_back: Duration,
    refault: Duration,
    huge: usize,
}

fn touch(memory: *mut u8, len: usize) {
    for offset in (0..len).step_by(4096) {
        // SAFETY: `offset < len`, inside the caller's mapping.
        unsafe { memory.add(offset).write_volatile(1) };
    }
}

fn round(len: usize, huge: bool) -> Result<Round, String> {
    // SAFETY: a new private anonymous mapping, of `len` plus a huge page of slack so
    // that an aligned `len` fits; unmapped at the end of this function.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len + HUGE_PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(format!("mmap of {len} bytes failed"));
    }
    let memory = (base as usize).next_multiple_of(HUGE_PAGE) as *mut u8;
    let advice = if huge {
        libc::MADV_HUGEPAGE
    } else {
        libc::MADV_NOHUGEPAGE
    };
    // SAFETY: advice on the mapping just made changes no data.
    unsafe { libc::madvise(memory.cast::<c_void>(), len, advice) };

    let started = Instant::now();
    touch(memory, len);
    let first_touch = started.elapsed();
    let huge_bytes = arenapool::huge_page_rss();

    let started = Instant::now();
    // SAFETY: `[memory, memory + len)` is inside the mapping, and nothing else uses it.
    unsafe { std::ptr::write_bytes(memory, 2, len) };
    let write = started.elapsed();

    let started = Instant::now();
    // SAFETY: the range is ours and holds nothing anyone reads again.
    unsafe { libc::madvise(memory.cast::<c_void>(), len, libc::MADV_DONTNEED) };
    let give_back = started.elapsed();

    let started = Instant::now();
    touch(memory, len);
    let refault = started.elapsed();

    // SAFETY: the whole mapping made above, used no more.
    unsafe { libc::munmap(base, len + HUGE_PAGE) };
    Ok(Round {
        first_touch,
        write,
        give_back,
        refault,
        huge: huge_bytes,
    })
}

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let gib: usize = match args.next() {
        Some(n) => n.parse().map_err(|e| format!("GiB {n:?}: {e}"))?,
        None => 1,
    };
    let rounds: usize = match args.next() {
        Some(n) => n.parse().map_err(|e| format!("rounds {n:?}: {e}"))?,
        None => 3,
    };
    if gib == 0 || rounds == 0 {
        return Err("both the GiB and the rounds must be at least 1".into());
    }
    let len = gib * GIB;
    println!("{gib} GiB, best of {rounds} rounds, seconds per GiB:");
    println!(
        "pages     first touch   write resident   MADV_DONTNEED   touch again   in huge pages"
    );
    for huge in [false, true] {
        let all = (0..rounds)
            .map(|_| round(len, huge))
            .collect::<Result<Vec<_>, _>>()?;
        let best = |f: fn(&Round) -> Duration| {
            all.iter().map(f).min().unwrap_or_default().as_secs_f64() / gib as f64
        };
        let huge_share = all.iter().map(|r| r.huge).max().unwrap_or(0) as f64 / len as f64;
        println!(
            "{:<9} {:>11.4} {:>16.4} {:>15.4} {:>13.4} {:>14.0}%",
            if huge { "2 MiB" } else { "4 KiB" },
            best(|r| r.first_touch),
            best(|r| r.write),
            best(|r| r.give_back),
            best(|r| r.refault),
            100.0 * huge_share
        );
    }
    Ok(())
}
