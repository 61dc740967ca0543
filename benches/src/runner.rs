//! The runner: one child process per (contender, workload, repetition), contenders
//! interleaved, RSS and huge pages sampled while it runs, its resource usage (time,
//! peak RSS, page faults) taken when it is reaped; then the table, results file and
//! charts.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use indicatif::{ProgressBar, ProgressStyle};

use crate::phase::Message;
use crate::results::{PhaseRecord, Run, RunStatus};
use crate::{charts, table, Contender, Options, Results, Sampler, Scale, Workload};

/// How often a child's RSS is sampled (its huge pages at most as often).
const SAMPLE_INTERVAL: Duration = Duration::from_millis(10);

/// Runs the suite as `options` say: prints the table and writes `results.json`,
/// `results.md` and `charts/*.svg` to the output directory.
///
/// # Errors
///
/// A contender binary is missing, or the output cannot be written. A contender that
/// crashes is not an error: it is reported in the results.
pub fn run_suite(options: &Options) -> Result<(), String> {
    let bin_dir = match &options.bin_dir {
        Some(dir) => dir.clone(),
        None => {
            let dir = runner_dir()?;
            build_contenders(&dir)?;
            dir
        }
    };
    // A contender whose binary is missing is reported as not available, never dropped.
    let binaries: Vec<(Contender, Option<PathBuf>)> = options
        .contenders
        .iter()
        .map(|&c| (c, Some(bin_dir.join(c.binary())).filter(|p| p.is_file())))
        .collect();
    if binaries.iter().all(|(_, path)| path.is_none()) {
        return Err(format!(
            "no contender binary found in {} (build them with `cargo build --release -p \
             arenapool-bench`, or pass --bin-dir)",
            bin_dir.display()
        ));
    }
    let out = match &options.out {
        Some(dir) => dir.clone(),
        None => default_out_dir()?,
    };
    let charts_dir = out.join("charts");
    std::fs::create_dir_all(&charts_dir)
        .map_err(|e| format!("cannot create {}: {e}", charts_dir.display()))?;

    let available = binaries.iter().filter(|(_, p)| p.is_some()).count();
    println!(
        "arenapool-bench: {} workloads x {} contenders x {} repetitions x threads {:?}, \
         scale {}",
        options.workloads.len(),
        available,
        options.reps,
        options.threads,
        options.scale.name(),
    );
    for (contender, path) in &binaries {
        if path.is_none() {
            println!("  {contender}: {}", contender.how_to_enable());
        }
    }
    let started = Instant::now();
    let started_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let cells = options.workloads.len() * options.threads.len();
    let total = (options.reps * cells * available) as u64;
    let bar = ProgressBar::new(total).with_style(
        ProgressStyle::with_template("{bar:32} {pos}/{len} [{elapsed_precise} / ~{eta}] {msg}")
            .map_err(|e| e.to_string())?,
    );
    let mut runs = Vec::new();
    for (contender, path) in &binaries {
        if path.is_none() {
            for &workload in &options.workloads {
                for &threads in &options.threads {
                    let how = contender.how_to_enable();
                    let status = RunStatus::NotAvailable { how };
                    runs.push(Run::new(*contender, workload, threads, 0, status));
                }
            }
        }
    }
    for rep in 0..options.reps {
        for &workload in &options.workloads {
            for &threads in &options.threads {
                for (contender, binary) in &binaries {
                    let Some(binary) = binary else { continue };
                    bar.set_message(format!(
                        "rep {}/{}: {workload} x{threads} / {contender}",
                        rep + 1,
                        options.reps
                    ));
                    let child = Child {
                        binary,
                        contender: *contender,
                        workload,
                        scale: options.scale,
                        threads,
                        rep,
                    };
                    let run = child.run(options.timeout);
                    if !run.status.is_ok() {
                        bar.println(format!(
                            "{workload} x{threads} / {contender} (rep {}): {}{}",
                            rep + 1,
                            run.status.describe(),
                            last_line(&run.stderr)
                        ));
                    }
                    runs.push(run);
                    bar.inc(1);
                }
                if bar.is_hidden() {
                    // No terminal to draw the bar on (a log, CI): a line per workload.
                    println!(
                        "[{:>4.0} s] {}/{} runs: rep {}/{} {workload} x{threads} done",
                        started.elapsed().as_secs_f64(),
                        bar.position(),
                        total,
                        rep + 1,
                        options.reps
                    );
                }
            }
        }
    }
    bar.finish_and_clear();

    let results = Results::new(options, runs, started_unix, started.elapsed().as_secs_f64());
    let text = table::text(&results);
    println!("{text}");
    let json = out.join("results.json");
    results
        .write(&json)
        .map_err(|e| format!("cannot write {}: {e}", json.display()))?;
    let md = out.join("results.md");
    std::fs::write(&md, table::markdown(&results))
        .map_err(|e| format!("cannot write {}: {e}", md.display()))?;
    let charts = charts::write_all(&results, &charts_dir)?;
    println!("results: {}\ntable:   {}", json.display(), md.display());
    for chart in charts {
        println!("chart:   {}", chart.display());
    }
    Ok(())
}

/// Under `cargo run`, builds the contender binaries too: `cargo run` builds only the
/// binary it runs, and a contender binary left from an older build would run old code.
/// Started any other way, the binaries must have been built (`cargo build -p
/// arenapool-bench`), or be named with `--bin-dir`.
fn build_contenders(bin_dir: &Path) -> Result<(), String> {
    let (Some(cargo), Some(manifest)) = (
        std::env::var_os("CARGO"),
        std::env::var_os("CARGO_MANIFEST_DIR"),
    ) else {
        return Ok(());
    };
    if std::env::var_os("CARGO_PKG_NAME").is_none_or(|n| n != env!("CARGO_PKG_NAME")) {
        return Ok(());
    }
    let (Some(profile_dir), Some(target)) = (bin_dir.file_name(), bin_dir.parent()) else {
        return Ok(());
    };
    let profile = if profile_dir == "debug" {
        "dev".into()
    } else {
        profile_dir.to_os_string()
    };
    let mut build = Command::new(cargo);
    build.arg("build");
    // The optional contenders this runner was built with.
    let features: Vec<&str> = Contender::ALL
        .into_iter()
        .filter(|c| c.is_built())
        .filter_map(Contender::feature)
        .collect();
    if !features.is_empty() {
        build.arg("--features").arg(features.join(","));
    }
    let status = build
        .arg("--manifest-path")
        .arg(Path::new(&manifest).join("Cargo.toml"))
        .arg("--profile")
        .arg(profile)
        .arg("--target-dir")
        .arg(target)
        .arg("--bins")
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run cargo to build the contender binaries: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("building the contender binaries failed ({status})"))
    }
}

/// The directory of the running binary: the contender binaries are built next to it.
fn runner_dir() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    exe.parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| format!("{} has no directory", exe.display()))
}

/// `<target dir>/arenapool-bench`: the target directory is `CARGO_TARGET_DIR` when set,
/// else the one this binary was built into (`<target>/<profile>/arenapool-bench`).
fn default_out_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR").filter(|d| !d.is_empty()) {
        return Ok(PathBuf::from(dir).join("arenapool-bench"));
    }
    let dir = runner_dir()?;
    let profile_dir = if dir.file_name().is_some_and(|n| n == "deps") {
        dir.parent().unwrap_or(&dir).to_path_buf()
    } else {
        dir
    };
    let target = profile_dir.parent().ok_or_else(|| {
        format!(
            "cannot find the target directory above {}",
            profile_dir.display()
        )
    })?;
    Ok(target.join("arenapool-bench"))
}

/// One child process to run: a contender binary on one workload.
#[derive(Debug)]
struct Child<'a> {
    binary: &'a Path,
    contender: Contender,
    workload: Workload,
    scale: Scale,
    threads: usize,
    rep: usize,
}

impl Child<'_> {
    /// Runs the child to its end and records what it did.
    fn run(&self, timeout: Duration) -> Run {
        let (binary, workload, threads) = (self.binary, self.workload, self.threads);
        let mut run = Run::new(self.contender, workload, threads, self.rep, RunStatus::Ok);
        let scale = self.scale;
        let started = Instant::now();
        let spawned = Command::new(binary)
            .args([workload.name(), scale.name(), &threads.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                run.status = RunStatus::Failed {
                    message: format!("cannot start {}: {e}", binary.display()),
                };
                return run;
            }
        };
        let pid = child.id();
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = child.stderr.take().expect("stderr is piped");
        let messages = std::thread::spawn(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .filter_map(|line| Some((started.elapsed(), Message::parse(&line)?)))
                .collect::<Vec<_>>()
        });
        let errors = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = BufReader::new(stderr).read_to_string(&mut text);
            text
        });

        let mut sampler = Sampler::starting_at(pid, SAMPLE_INTERVAL, started);
        let mut timed_out = false;
        let (status, usage) = loop {
            let next = sampler.tick();
            match reap(pid) {
                Ok(Some(done)) => break done,
                Ok(None) => {}
                Err(e) => {
                    run.status = RunStatus::Failed {
                        message: format!("cannot wait for the child: {e}"),
                    };
                    let _ = child.kill();
                    let _ = child.wait();
                    return run;
                }
            }
            if !timed_out && started.elapsed() > timeout {
                // The child has not been reaped (reap returned None), so `pid` is still
                // ours to signal.
                let _ = child.kill();
                timed_out = true;
            }
            std::thread::sleep(next.clamp(Duration::from_millis(1), SAMPLE_INTERVAL));
        };
        run.wall_s = started.elapsed().as_secs_f64();
        run.peak_anon_huge = sampler.peak_anon_huge();
        run.timeline = sampler.into_samples();
        run.user_s = seconds(usage.ru_utime);
        run.sys_s = seconds(usage.ru_stime);
        run.peak_rss = usize::try_from(usage.ru_maxrss).unwrap_or(0) * 1024;
        run.minor_faults = u64::try_from(usage.ru_minflt).unwrap_or(0);
        for (at, message) in messages.join().unwrap_or_default() {
            match message {
                Message::Phase(m) => run.phases.push(PhaseRecord {
                    name: m.name,
                    rss: m.rss,
                    elapsed_s: m.elapsed.as_secs_f64(),
                    at_ms: at.as_millis() as u64,
                }),
                Message::Check(sum) => run.checksum = Some(format!("{sum:016x}")),
                // A reading the sampler may have missed: the child's own, at its end.
                Message::Huge(huge) => {
                    run.peak_anon_huge = Some(run.peak_anon_huge.map_or(huge, |p| p.max(huge)));
                }
            }
        }
        run.stderr = tail(&errors.join().unwrap_or_default(), 2000);
        let out_of_memory =
            run.stderr.contains("memory allocation of") || run.stderr.contains("out of memory");
        run.status = if timed_out {
            RunStatus::Timeout {
                seconds: timeout.as_secs(),
            }
        } else if libc::WIFSIGNALED(status) {
            RunStatus::Signal {
                signal: libc::WTERMSIG(status),
                out_of_memory,
                at_exit: run.checksum.is_some(),
            }
        } else if libc::WEXITSTATUS(status) != 0 {
            RunStatus::Exit {
                code: libc::WEXITSTATUS(status),
                out_of_memory,
            }
        } else if run.phases.len() < 2 || run.phases[0].name != "start" {
            RunStatus::Failed {
                message: "no phase markers".to_owned(),
            }
        } else if run.checksum.is_none() {
            RunStatus::Failed {
                message: "no checksum".to_owned(),
            }
        } else {
            RunStatus::Ok
        };
        run
    }
}

/// Reaps child `pid` if it has exited: its wait status and resource usage.
fn reap(pid: u32) -> std::io::Result<Option<(i32, libc::rusage)>> {
    let pid = libc::pid_t::try_from(pid).map_err(std::io::Error::other)?;
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of this plain C struct.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `usage` are valid, writable and live for the call.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        match r {
            0 => return Ok(None),
            r if r == pid => return Ok(Some((status, usage))),
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

fn seconds(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 * 1e-6
}

/// The last `max` bytes of `text`, cut at a line start.
fn tail(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut start = text.len() - max;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let cut = &text[start..];
    cut.find('\n').map_or(cut, |i| &cut[i + 1..]).to_owned()
}

fn last_line(stderr: &str) -> String {
    stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| format!(": {l}"))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails() {
        assert_eq!(tail("abc", 10), "abc");
        assert_eq!(tail("line one\nline two\nthree\n", 12), "three\n");
        assert_eq!(last_line("a\nb\n\n"), ": b");
        assert_eq!(last_line(""), "");
    }
}
