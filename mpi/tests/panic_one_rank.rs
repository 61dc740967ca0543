//! A panic on one rank, outside `write`, with a window alive ends the MPI job instead
//! of hanging it: the panicking rank does not join the window's collective free, dies,
//! and `mpirun` stops the other ranks.
//!
//! Launches itself under `mpirun -np 2` (run it directly, not under `mpirun`): the last
//! rank panics while the others enter `write`. The job must fail with the panic's
//! message, well before the 120-second timeout that would mean a hang.

use std::process::Command;

use arenapool_mpi::Node;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const CHILD: &str = "ARENAPOOL_MPI_PANIC_CHILD";
const MESSAGE: &str = "a bad input on the last rank, outside any write";

fn child() {
    let universe = mpi::initialize().expect("MPI initialised twice");
    let world = universe.world();
    let node = Node::split(&world).expect("node");
    let mut w = node.allocate::<u64>(16).expect("window");
    if node.rank() == node.size() - 1 {
        panic!("{MESSAGE}");
    }
    w.write(|mine| mine.fill(1));
    println!("rank {} wrote after the other rank died", node.rank());
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let own = std::env::current_exe().expect("own path");
    let mut args: Vec<String> = ["120", "mpirun", "-np", "2", "--oversubscribe"]
        .map(String::from)
        .into();
    args.extend(["--mca", "mpi_yield_when_idle", "1", "--bind-to", "none"].map(String::from));
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        args.push("--allow-run-as-root".into());
    }
    args.extend(["-x".into(), CHILD.into(), own.display().to_string()]);
    let out = Command::new("timeout")
        .args(&args)
        .env(CHILD, "1")
        .output()
        .expect("run timeout mpirun");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("panic_one_rank: the job ended with {}", out.status);
    assert_ne!(out.status.code(), Some(124), "the job hung:\n{text}");
    assert!(!out.status.success(), "the job did not fail:\n{text}");
    assert!(
        text.contains(MESSAGE),
        "the job failed without the panic:\n{text}"
    );
    println!("panic_one_rank: ok");
}
