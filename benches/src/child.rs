//! The child side: what a contender binary runs.

use std::process::ExitCode;

use crate::phase::{emit, Message};
use crate::{Contender, Executor, Scale, Workload};

/// The entry point of every contender binary, after it has installed its allocator.
///
/// Usage: `bench-<contender> WORKLOAD SCALE THREADS`. Runs the workload, printing its
/// phase markers, its checksum and its huge pages at its end on stdout (see
/// [`Message`]). Exits with 2 on bad arguments or a misconfigured allocator.
pub fn child_main(contender: Contender) -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match parse(&args) {
        Ok((workload, scale, threads)) => {
            if let Err(e) = crate::tuning::at_start(contender).and_then(|()| contender.verify()) {
                eprintln!("bench-{contender}: {e}");
                return ExitCode::from(2);
            }
            let exec = match Executor::new(contender, threads) {
                Ok(exec) => exec,
                Err(e) => {
                    eprintln!("bench-{contender}: {e}");
                    return ExitCode::from(2);
                }
            };
            let sum = workload.run(&exec, scale);
            emit(&Message::Check(sum));
            // After the timed work: a reading walks the page tables.
            if let Some(huge) = crate::smaps::anon_huge_of(std::process::id(), &mut String::new()) {
                emit(&Message::Huge(huge));
            }
            // Exit with the pools' workers still parked, as a program on rayon's global
            // pool does: tearing thread pools down is not part of any workload, and
            // threads exiting while the process exits crash some allocators (rpmalloc).
            std::process::exit(0)
        }
        Err(e) => {
            eprintln!(
                "bench-{contender}: {e}\nusage: bench-{contender} WORKLOAD SCALE THREADS \
                 (normally started by arenapool-bench)"
            );
            ExitCode::from(2)
        }
    }
}

fn parse(args: &[String]) -> Result<(Workload, Scale, usize), String> {
    let [workload, scale, threads] = args else {
        return Err(format!("expected 3 arguments, got {}", args.len()));
    };
    let workload =
        Workload::from_name(workload).ok_or_else(|| format!("unknown workload `{workload}`"))?;
    let scale = Scale::from_name(scale).ok_or_else(|| format!("unknown scale `{scale}`"))?;
    let threads = threads
        .parse()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("bad thread count `{threads}`"))?;
    Ok((workload, scale, threads))
}
