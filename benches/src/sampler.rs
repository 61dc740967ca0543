//! The RSS sampler: a child's resident set size over time, read from `/proc/<pid>/statm`.

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
    pid: u32,
    started: Instant,
    interval: Duration,
    next: Duration,
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
            pid,
            started,
            interval,
            next: Duration::ZERO,
            samples: Vec::new(),
        }
    }

    /// Takes a sample if one is due; returns the time until the next one is.
    ///
    /// A process that has exited (or whose `/proc` entry cannot be read) adds nothing.
    pub fn tick(&mut self) -> Duration {
        let now = self.started.elapsed();
        self.tick_at(now)
            .saturating_sub(self.started.elapsed().saturating_sub(now))
    }

    /// [`tick`](Sampler::tick) at time `now` since the start: takes a sample if one is
    /// due by then, and returns the time from `now` until the next one is.
    fn tick_at(&mut self, now: Duration) -> Duration {
        if now >= self.next {
            if let Some(rss) = arenapool_alloc::rss_of(self.pid) {
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
        self.next.saturating_sub(now)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    /// Samples are taken on the interval's grid, at most one per slot, missed slots
    /// skipped rather than caught up; the clock is given, so nothing depends on how
    /// fast this machine runs the test.
    #[test]
    fn samples_on_the_interval_grid() {
        let ms = Duration::from_millis;
        let mut sampler = Sampler::new(std::process::id(), ms(10));
        let waits: Vec<Duration> = [0, 3, 9, 10, 25, 26, 61]
            .into_iter()
            .map(|t| sampler.tick_at(ms(t)))
            .collect();
        assert_eq!(waits, [10, 7, 1, 10, 5, 4, 9].map(ms));
        let at: Vec<u64> = sampler.samples().iter().map(|s| s.ms).collect();
        assert_eq!(at, [0, 10, 25, 61]);
        assert!(sampler.samples().iter().all(|s| s.rss > 0));
    }

    /// A child's RSS is read while it lives (the reading sees memory the child is known
    /// to hold), and nothing is added once it has exited. The child and the test take
    /// turns through its stdin and stdout, so no timing is involved.
    #[test]
    fn samples_a_child_while_it_lives_and_stops_when_it_exits() {
        use std::io::{BufRead, BufReader, Write};
        // Holds a 64 MiB string, says so, and exits when its stdin closes.
        let mut child = Command::new("sh")
            .args([
                "-c",
                "x=$(head -c 67108864 /dev/zero | tr '\\0' a); echo ready; read -r line; \
                 echo ${#x}",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("sh runs");
        let mut sampler = Sampler::new(child.id(), Duration::from_millis(10));
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        sampler.tick_at(Duration::from_secs(1));
        let held = sampler
            .samples()
            .last()
            .expect("a sample of the live child")
            .rss;
        assert!(held >= 64 << 20, "sampled RSS {held} while 64 MiB are held");

        writeln!(child.stdin.take().unwrap(), "go").unwrap();
        line.clear();
        out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "67108864");
        assert!(child.wait().unwrap().success());
        // Reaped: its statm is gone, so a due tick adds nothing.
        let before = sampler.samples().len();
        sampler.tick_at(Duration::from_secs(2));
        assert_eq!(sampler.samples().len(), before);
    }
}
