//! Finalising MPI while a window is alive stops the process with a message, instead of
//! unmapping memory that a live slice still points into.
//!
//! Runs itself as a child (a one-rank MPI program, started without `mpirun`) that
//! makes a window, borrows a segment, drops the `Universe`, then reads the segment;
//! the child must abort with the message before the read. Run it directly, not under
//! `mpirun`.

use std::process::Command;

use arenapool_mpi::Node;

#[global_allocator]
static GLOBAL: arenapool_alloc::ArenaAlloc = arenapool_alloc::ArenaAlloc;

const CHILD: &str = "ARENAPOOL_MPI_FINALIZE_CHILD";

fn child() {
    let universe = mpi::initialize().expect("MPI initialised twice");
    let world = universe.world();
    let node = Node::split(&world).expect("node");
    let mut w = node.allocate::<u64>(1024).expect("window");
    w.write(|mine| mine.fill(7));
    let seen = w.segment(0);
    drop(universe); // MPI_Finalize, with the window alive and borrowed
    println!("read after finalising: {}", seen[1023]);
}

fn main() {
    if std::env::var_os(CHILD).is_some() {
        child();
        return;
    }
    let mut cmd = Command::new(std::env::current_exe().expect("own path"));
    // A fresh one-rank program: nothing of an enclosing mpirun job.
    for (key, _) in std::env::vars_os() {
        let key_text = key.to_string_lossy();
        if ["OMPI_", "PMIX_", "OPAL_", "ORTE_"]
            .iter()
            .any(|p| key_text.starts_with(p))
        {
            cmd.env_remove(&key);
        }
    }
    let out = cmd
        .env(CHILD, "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("finalize_abort: child exited with {}", out.status);
    assert!(
        !out.status.success(),
        "finalising with a live window did not stop the process:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("Drop every SharedWindow and SharedState before the mpi::Universe"),
        "the child did not stop with the message:\n{stderr}"
    );
    assert!(
        !stdout.contains("read after finalising"),
        "the child read the window after finalising"
    );
    println!("finalize_abort: ok");
}
