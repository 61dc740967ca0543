//! Runs a command while this machine's free memory is fragmented: this program first
//! faults in `GIB` GiB in 4 KiB pages and gives every other page back, so that the
//! kernel's free memory is full of 4 KiB holes, then runs the command, and prints its
//! time and the kernel's huge-page counters (`/proc/vmstat`) around it: huge pages
//! faulted in, faults that fell back to small pages, and direct compactions (stalls).
//!
//! ```sh
//! cargo build --release --example huge_pages --example fragment
//! target/release/examples/fragment 8 target/release/examples/huge_pages --huge on
//! target/release/examples/fragment 8 target/release/examples/huge_pages --huge off
//! ```
use std::ffi::c_void;
use std::process::Command;
use std::time::Instant;

const PAGE: usize = 4096;
const COUNTERS: [&str; 4] = [
    "thp_fault_alloc",
    "thp_fault_fallback",
    "compact_stall",
    "thp_split_pmd",
];

fn vmstat() -> Vec<u64> {
    let text = std::fs::read_to_string("/proc/vmstat").unwrap_or_default();
    COUNTERS
        .iter()
        .map(|name| {
            text.lines()
                .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: fragment GIB COMMAND [ARGS...]";
    let gib: usize = args
        .next()
        .ok_or(usage)?
        .parse()
        .map_err(|e| format!("GIB: {e}; {usage}"))?;
    let command = args.next().ok_or(usage)?;
    let rest: Vec<String> = args.collect();

    let len = gib << 30;
    // SAFETY: a new private anonymous mapping, held until the end of `main`.
    let memory = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if memory == libc::MAP_FAILED {
        return Err(format!("mmap of {gib} GiB failed"));
    }
    let memory = memory.cast::<u8>();
    // SAFETY: advice on the mapping just made changes no data.
    unsafe { libc::madvise(memory.cast::<c_void>(), len, libc::MADV_NOHUGEPAGE) };
    for offset in (0..len).step_by(PAGE) {
        // SAFETY: inside the mapping.
        unsafe { memory.add(offset).write_volatile(1) };
    }
    for offset in (0..len).step_by(2 * PAGE) {
        // SAFETY: one page inside the mapping, which nothing reads again.
        unsafe {
            libc::madvise(
                memory.add(offset).cast::<c_void>(),
                PAGE,
                libc::MADV_DONTNEED,
            )
        };
    }
    println!(
        "fragment: {gib} GiB faulted in, every other 4 KiB page given back ({} MiB resident)",
        arenapool::rss() >> 20
    );

    let before = vmstat();
    let started = Instant::now();
    let status = Command::new(&command)
        .args(&rest)
        .status()
        .map_err(|e| format!("{command}: {e}"))?;
    let took = started.elapsed();
    let after = vmstat();
    print!(
        "fragment: {command} took {:.3} s ({status});",
        took.as_secs_f64()
    );
    for ((name, a), b) in COUNTERS.iter().zip(after).zip(before) {
        print!(" {name} +{}", a.saturating_sub(b));
    }
    println!();
    // SAFETY: the mapping made above, used no more.
    unsafe { libc::munmap(memory.cast::<c_void>(), len) };
    Ok(())
}
