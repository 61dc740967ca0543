//! The suite's runner: `cargo run --release -p arenapool-bench [-- --help]`.
//!
//! Starts every contender binary (found next to this one) on every workload, and
//! writes the table, `results.json` and SVG charts.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match arenapool_bench::Options::parse(&args) {
        Ok(None) => {
            println!("{}", arenapool_bench::Options::USAGE);
            std::process::ExitCode::SUCCESS
        }
        Ok(Some(options)) => match arenapool_bench::run_suite(&options) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("arenapool-bench: {e}");
                std::process::ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!(
                "arenapool-bench: {e}\n\n{}",
                arenapool_bench::Options::USAGE
            );
            std::process::ExitCode::from(2)
        }
    }
}
