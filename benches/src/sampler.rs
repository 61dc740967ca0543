//! The RSS sampler: a child's resident set size over time, read from `/proc/<pid>/statm`.

use std::io::Read;
use std::time::{Duration, Instant};

/// One RSS reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Sample {
    /// Milliseconds since the sampler started (the child's spawn).
    pub ms: u64,
    /// Resident set size in bytes.
    pub rss: usize,
}

/// Reads a process's RSS at a fixed interval into a timeline.
///
/// The runner calls [`tick`](Sampler::tick) from its wait loop; a tick that comes
/// before the interval has passed reads nothing, so the timeline is evenly spaced no
/// matter how often it is called.
#[derive(Debug)]
pub struct Sampler {
    path: String,
    started: Instant,
    interval: Duration,
    next: Duration,
    page: usize,
    samples: Vec<Sample>,
}

impl Sampler {
    /// A sampler of process `pid`, every `interval`, timed from now.
    pub fn new(pid: u32, interval: Duration) -> Sampler {
        Sampler::starting_at(pid, interval, Instant::now())
    }

    /// A sampler of process `pid`, every `interval`, timed from `started`.
    pub fn starting_at(pid: u32, interval: Duration, started: Instant) -> Sampler {
        Sampler {
            path: format!("/proc/{pid}/statm"),
            started,
            interval,
            next: Duration::ZERO,
            page: page_size(),
            samples: Vec::new(),
        }
    }

    /// Takes a sample if one is due; returns the time until the next one is.
    ///
    /// A process that has exited (or whose `/proc` entry cannot be read) adds nothing.
    pub fn tick(&mut self) -> Duration {
        let now = self.started.elapsed();
        if now >= self.next {
            if let Some(rss) = read_statm(&self.path, self.page) {
                self.samples.push(Sample {
                    ms: now.as_millis() as u64,
                    rss,
                });
            }
            // Skip missed ticks rather than bunching samples together.
            while self.next <= now {
                self.next += self.interval;
            }
        }
        self.next.saturating_sub(self.started.elapsed())
    }

    /// The samples so far.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The timeline, ending the sampler.
    pub fn into_samples(self) -> Vec<Sample> {
        self.samples
    }
}

/// The RSS in bytes from the text of a `statm` file (its second field, in pages).
pub(crate) fn parse_statm(statm: &str, page: usize) -> Option<usize> {
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page)
}

fn read_statm(path: &str, page: usize) -> Option<usize> {
    let mut buf = [0u8; 256];
    let mut file = std::fs::File::open(path).ok()?;
    let mut len = 0;
    loop {
        match file.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
        if len == buf.len() {
            break;
        }
    }
    parse_statm(std::str::from_utf8(&buf[..len]).ok()?, page)
}

fn page_size() -> usize {
    // SAFETY: `sysconf` has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn parses_statm() {
        assert_eq!(
            parse_statm("5000 1200 300 10 0 900 0\n", 4096),
            Some(1200 * 4096)
        );
        assert_eq!(parse_statm("1 2", 16384), Some(2 * 16384));
        assert_eq!(parse_statm("5000", 4096), None);
        assert_eq!(parse_statm("", 4096), None);
        assert_eq!(parse_statm("a b c", 4096), None);
    }

    #[test]
    fn samples_a_child_at_the_interval_and_stops_when_it_exits() {
        // A child that grows to >= 64 MiB resident, holds it, then exits.
        let mut child = Command::new("sh")
            .args([
                "-c",
                "x=$(head -c 67108864 /dev/zero | tr '\\0' a); sleep 0.3",
            ])
            .stdout(Stdio::null())
            .spawn()
            .expect("sh runs");
        let pid = child.id();
        let mut sampler = Sampler::new(pid, Duration::from_millis(10));
        let started = Instant::now();
        loop {
            let wait = sampler.tick();
            if child.try_wait().expect("wait works").is_some() {
                break;
            }
            assert!(wait <= Duration::from_millis(10));
            std::thread::sleep(wait.max(Duration::from_millis(1)));
        }
        let elapsed = started.elapsed();
        // After the child is reaped its statm is gone: no sample is added.
        let before = sampler.samples().len();
        std::thread::sleep(Duration::from_millis(15));
        sampler.tick();
        assert_eq!(sampler.samples().len(), before);

        let samples = sampler.into_samples();
        let expected = elapsed.as_millis() as usize / 10;
        assert!(
            samples.len() >= expected / 2 && samples.len() <= expected + 2,
            "{} samples in {elapsed:?}",
            samples.len()
        );
        // At most one sample per 10 ms slot, in order.
        assert!(samples.windows(2).all(|w| w[1].ms / 10 > w[0].ms / 10));
        // The shell holds the 64 MiB string while it sleeps.
        let peak = samples.iter().map(|s| s.rss).max().unwrap();
        assert!(peak >= 64 << 20, "peak sampled RSS {peak}");
        assert!(samples[0].rss < 64 << 20, "first sample {}", samples[0].rss);
    }

    #[test]
    fn reads_own_rss() {
        let rss = read_statm("/proc/self/statm", page_size()).unwrap();
        assert!(rss > 0);
        assert_eq!(read_statm("/proc/0/statm", 4096), None);
    }
}
