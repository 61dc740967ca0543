//! Command-line options of the runner.

use std::path::PathBuf;
use std::time::Duration;

use crate::{Contender, Workload};

/// How big the workloads are, and so how long the suite takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scale {
    /// Seconds in all: for the suite's own tests.
    Tiny,
    /// `--quick`: at most 90 seconds on a 2-core machine.
    Quick,
    /// The default: at most six minutes on a 2-core machine.
    Default,
    /// `--full`: larger sizes (S1 with 8,000 tasks, the S3 loop with 100,000 jobs).
    Full,
}

impl Scale {
    /// The name a child is given on its command line.
    pub fn name(self) -> &'static str {
        match self {
            Scale::Tiny => "tiny",
            Scale::Quick => "quick",
            Scale::Default => "default",
            Scale::Full => "full",
        }
    }

    /// Looks a scale up by [`name`](Scale::name).
    pub fn from_name(name: &str) -> Option<Scale> {
        [Scale::Tiny, Scale::Quick, Scale::Default, Scale::Full]
            .into_iter()
            .find(|s| s.name() == name)
    }

    /// Repetitions per (contender, workload) unless `--reps` says otherwise.
    pub fn default_reps(self) -> usize {
        match self {
            Scale::Tiny | Scale::Quick => 1,
            Scale::Default => 3,
            Scale::Full => 5,
        }
    }

    /// Picks one of four values by scale.
    pub(crate) fn pick<T>(self, tiny: T, quick: T, default: T, full: T) -> T {
        match self {
            Scale::Tiny => tiny,
            Scale::Quick => quick,
            Scale::Default => default,
            Scale::Full => full,
        }
    }
}

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    /// Run the suite.
    Run(Options),
    /// Print the help text.
    Help,
    /// List the workloads and contenders.
    List,
}

/// What a suite run is asked to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// Workload sizes.
    pub scale: Scale,
    /// Repetitions of every (contender, workload) pair.
    pub reps: usize,
    /// Workloads to run, in order.
    pub workloads: Vec<Workload>,
    /// Contenders to run, in order.
    pub contenders: Vec<Contender>,
    /// Thread counts of the parallel phases: every workload runs at each (a sweep).
    pub threads: Vec<usize>,
    /// Where `results.json` and `charts/` go; `None`: `<target dir>/arenapool-bench`.
    pub out: Option<PathBuf>,
    /// A child still running after this long is killed and reported as timed out.
    pub timeout: Duration,
    /// Where the contender binaries are; `None`: next to the runner.
    pub bin_dir: Option<PathBuf>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            scale: Scale::Default,
            reps: Scale::Default.default_reps(),
            workloads: Workload::ALL.to_vec(),
            contenders: Contender::ALL.to_vec(),
            threads: vec![2],
            out: None,
            timeout: Duration::from_secs(120),
            bin_dir: None,
        }
    }
}

impl Options {
    /// The runner's help text.
    pub const USAGE: &'static str = "\
usage: arenapool-bench [OPTIONS]

Runs every workload under every contender allocator in child processes and reports
time, peak RSS, RSS after each phase, peak memory in huge pages and page faults.

options:
  --quick               smaller workloads, one repetition (about 90 s)
  --full                larger sizes (S1 with 8,000 tasks), 5 repetitions
  --tiny                minimal sizes (for the suite's own tests)
  --reps N              repetitions per contender and workload (default 3)
  --only W[,W...]       run only these workloads (repeatable)
  --contenders C[,C...] run only these contenders (see --list)
  --threads N[,N...]    threads in parallel phases (default 2); several numbers run
                        every workload at each and chart time against threads
  --out DIR             where results.json and charts/ go
                        (default: <target dir>/arenapool-bench)
  --bin-dir DIR         where the bench-<contender> binaries are (default: next to
                        this binary)
  --timeout SECS        kill a child after this long (default 120)
  --list                list the workloads and contenders, and exit
  -h, --help            this text";

    /// Parses the runner's arguments (without the program name).
    ///
    /// # Errors
    ///
    /// An unknown option, workload or contender, or a missing or malformed value.
    pub fn parse(args: &[String]) -> Result<Command, String> {
        let mut o = Options::default();
        let mut reps = None;
        let mut only: Vec<Workload> = Vec::new();
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |name: &str| {
                args.next()
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))
            };
            match arg.as_str() {
                "-h" | "--help" => return Ok(Command::Help),
                "--list" => return Ok(Command::List),
                "--quick" => o.scale = Scale::Quick,
                "--full" => o.scale = Scale::Full,
                "--tiny" => o.scale = Scale::Tiny,
                "--reps" => reps = Some(parse_count(&value("--reps")?, "--reps")?),
                "--threads" => {
                    let mut list = Vec::new();
                    for n in value("--threads")?.split(',').filter(|s| !s.is_empty()) {
                        let n = parse_count(n, "--threads")?;
                        if !list.contains(&n) {
                            list.push(n);
                        }
                    }
                    if list.is_empty() {
                        return Err("--threads needs at least one number".to_owned());
                    }
                    o.threads = list;
                }
                "--timeout" => {
                    let secs = parse_count(&value("--timeout")?, "--timeout")?;
                    o.timeout = Duration::from_secs(secs as u64);
                }
                "--out" => o.out = Some(PathBuf::from(value("--out")?)),
                "--bin-dir" => o.bin_dir = Some(PathBuf::from(value("--bin-dir")?)),
                "--only" => {
                    for name in value("--only")?.split(',').filter(|s| !s.is_empty()) {
                        let w = Workload::from_name(name)
                            .ok_or_else(|| format!("unknown workload `{name}` (see --list)"))?;
                        if !only.contains(&w) {
                            only.push(w);
                        }
                    }
                }
                "--contenders" => {
                    let mut list = Vec::new();
                    for name in value("--contenders")?.split(',').filter(|s| !s.is_empty()) {
                        let c = Contender::from_name(name)
                            .ok_or_else(|| format!("unknown contender `{name}`"))?;
                        if !list.contains(&c) {
                            list.push(c);
                        }
                    }
                    if list.is_empty() {
                        return Err("--contenders needs at least one name".to_owned());
                    }
                    o.contenders = list;
                }
                other => return Err(format!("unknown option `{other}`")),
            }
        }
        o.reps = reps.unwrap_or_else(|| o.scale.default_reps());
        if !only.is_empty() {
            o.workloads = only;
        }
        Ok(Command::Run(o))
    }

    /// The text `--list` prints: every workload with what it stands for, and every
    /// contender with its configuration.
    pub fn list() -> String {
        let mut out = String::from("workloads:\n");
        for w in Workload::ALL {
            out += &format!("  {:<16} {}\n", w.name(), w.description());
        }
        out += "contenders:\n";
        for c in Contender::ALL {
            let built = if c.is_built() { "" } else { " [not built]" };
            out += &format!("  {:<16} {}{built}\n", c.name(), c.configuration());
        }
        out
    }
}

fn parse_count(s: &str, name: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("{name} needs a positive whole number, not `{s}`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Command, String> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        Options::parse(&args)
    }

    fn run(args: &[&str]) -> Options {
        match parse(args) {
            Ok(Command::Run(o)) => o,
            other => panic!("{args:?} parsed as {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let o = run(&[]);
        assert_eq!(o, Options::default());
        assert_eq!(o.reps, 3);
        assert_eq!(o.threads, vec![2]);
        assert_eq!(o.contenders, Contender::ALL.to_vec());
        assert_eq!(o.workloads, Workload::ALL.to_vec());
    }

    #[test]
    fn selections_and_scales() {
        let o = run(&[
            "--quick",
            "--only",
            "s1-phase,s3-loop",
            "--only",
            "s1-phase",
            "--contenders",
            "glibc,arenapool",
            "--out",
            "x",
        ]);
        assert_eq!(o.scale, Scale::Quick);
        assert_eq!(o.reps, 1);
        assert_eq!(o.workloads, vec![Workload::S1Phase, Workload::S3Loop]);
        assert_eq!(o.contenders, vec![Contender::Glibc, Contender::Arenapool]);
        assert_eq!(o.out, Some(PathBuf::from("x")));
        let o = run(&["--full", "--reps", "2"]);
        assert_eq!((o.scale, o.reps), (Scale::Full, 2));
        let o = run(&["--threads", "1,2,4,8", "--threads", "8,2"]);
        assert_eq!(o.threads, vec![8, 2]);
        let o = run(&["--threads", "1,2,2,4"]);
        assert_eq!(o.threads, vec![1, 2, 4]);
    }

    #[test]
    fn errors() {
        assert!(parse(&["--only", "nope"]).unwrap_err().contains("nope"));
        assert!(parse(&["--contenders", "hoard"]).is_err());
        assert!(parse(&["--threads", "2,0"]).is_err());
        assert!(parse(&["--threads", ","]).is_err());
        assert!(parse(&["--reps", "0"]).is_err());
        assert!(parse(&["--reps"]).unwrap_err().contains("needs a value"));
        assert!(parse(&["--frobnicate"]).is_err());
        assert_eq!(parse(&["--help"]), Ok(Command::Help));
    }

    /// `--list` is a command like `--help`: parsing it returns, it does not exit the
    /// process (which would end this test binary early).
    #[test]
    fn list_is_returned_not_acted_on() {
        assert_eq!(parse(&["--quick", "--list"]), Ok(Command::List));
        let list = Options::list();
        for w in Workload::ALL {
            assert!(list.contains(w.name()) && list.contains(w.description()));
        }
        for c in Contender::ALL {
            assert!(list.contains(c.configuration()), "{c}");
        }
    }
}
