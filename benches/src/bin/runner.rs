//! The suite's runner: `cargo run --release -p arenapool-bench [-- --help]`.
//!
//! Starts every contender binary (found next to this one) on every workload, and
//! writes the table, `results.json` and SVG charts.

use std::process::ExitCode;

use arenapool_bench::{Command, Options};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match Options::parse(&args) {
        Ok(Command::Help) => {
            println!("{}", Options::USAGE);
            ExitCode::SUCCESS
        }
        Ok(Command::List) => {
            print!("{}", Options::list());
            ExitCode::SUCCESS
        }
        Ok(Command::Run(options)) => match arenapool_bench::run_suite(&options) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("arenapool-bench: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("arenapool-bench: {e}\n\n{}", Options::USAGE);
            ExitCode::from(2)
        }
    }
}
