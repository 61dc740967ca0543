//! The RSS sampler: a child's resident set size over time, read from `/proc/<pid>/statm`,
//! and the most of its memory it was seen to hold in transparent huge pages.

use std::time::{Duration, Instant};

/// One RSS reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Sample {
    /// Milliseconds since the sampler started (the child's spawn).
    pub ms: u64,
    /// Resident set size in bytes.
    pub rss: usize,
}

/// Reads a process's RSS at a fixed interval into a timeline, and keeps the peak of its
/// anonymous memory in transparent huge pages.
///
/// The runner calls [`tick`](Sampler::tick) from its wait loop; a tick that comes
/// before the interval has passed reads nothing, so the timeline is evenly spaced no
/// matter how often it is called.
///
/// Huge pages (`AnonHugePages` of `/proc/<pid>/smaps_rollup`) are read on the same
/// ticks, but a reading walks the process's page tables, so after one that took `t` of
/// CPU time the next waits at least `HUGE_PAGE_BACKOFF × t` (and one interval): the
/// readings take at most 1/`HUGE_PAGE_BACKOFF` of a CPU however big the process, every
/// interval for a small one, every ~250 ms for 1.5 GiB in small pages. The peak is that
/// of the readings, so a peak shorter than the wait between them can be missed.
#[derive(Debug)]
pub struct Sampler {
    pid: u32,
    started: Instant,
    interval: Duration,
    next: Duration,
    samples: Vec<Sample>,
    /// When the next huge-page reading is due.
    huge_next: Duration,
    /// The largest huge-page reading, in bytes; `None` before the first.
    peak_anon_huge: Option<usize>,
    /// The text of `smaps_rollup`, kept between readings.
    smaps: String,
}

/// How many times its own cost the sampler waits after a huge-page reading.
const HUGE_PAGE_BACKOFF: u32 = 32;

/// The wait after a huge-page reading that took `cost`, on a sampler of `interval`.
fn huge_page_wait(interval: Duration, cost: Duration) -> Duration {
    interval.max(cost.saturating_mul(HUGE_PAGE_BACKOFF))
}

/// The CPU time the calling thread has used, in user and kernel mode (zero if the clock
/// cannot be read).
fn thread_cpu_time() -> Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable `timespec` for the call, and
    // `CLOCK_THREAD_CPUTIME_ID` is a clock every Linux kernel has.
    match unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) } {
        0 => Duration::new(
            u64::try_from(t.tv_sec).unwrap_or(0),
            u32::try_from(t.tv_nsec).unwrap_or(0),
        ),
        _ => Duration::ZERO,
    }
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
            huge_next: Duration::ZERO,
            peak_anon_huge: None,
            smaps: String::new(),
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
    /// due by then (and reads huge pages if that is due too), and returns the time from
    /// `now` until the next sample is.
    fn tick_at(&mut self, now: Duration) -> Duration {
        if now >= self.next {
            if let Some(rss) = arenapool_alloc::rss_of(self.pid) {
                self.samples.push(Sample {
                    ms: now.as_millis() as u64,
                    rss,
                });
                if now >= self.huge_next {
                    self.read_huge_pages(now);
                }
            }
            // Skip missed ticks rather than bunching samples together.
            while self.next <= now {
                self.next += self.interval;
            }
        }
        self.next.saturating_sub(now)
    }

    /// Reads the process's huge pages into the peak, and sets when the next reading is
    /// due (from `now`, by the CPU time this one cost: not the time it waited for the
    /// process's memory-map lock, which an exec or a large `mmap` can hold for
    /// milliseconds).
    fn read_huge_pages(&mut self, now: Duration) {
        let began = thread_cpu_time();
        if let Some(huge) = crate::smaps::anon_huge_of(self.pid, &mut self.smaps) {
            self.peak_anon_huge = Some(self.peak_anon_huge.map_or(huge, |p| p.max(huge)));
        }
        let cost = thread_cpu_time().saturating_sub(began);
        self.huge_next = now + huge_page_wait(self.interval, cost);
    }

    /// The samples so far.
    pub fn samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The most anonymous memory, in bytes, the process was seen to hold in transparent
    /// huge pages (`AnonHugePages`); `None` if it was never read.
    pub fn peak_anon_huge(&self) -> Option<usize> {
        self.peak_anon_huge
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
        // Huge pages were read with the first sample, at least.
        assert!(sampler.peak_anon_huge().is_some());
    }

    /// Huge pages are read every interval while that is cheap, and less often the more a
    /// reading costs, so that readings never take more than 1/32 of the time.
    #[test]
    fn huge_page_readings_back_off_with_their_cost() {
        let (ms, us) = (Duration::from_millis, Duration::from_micros);
        assert_eq!(huge_page_wait(ms(10), us(50)), ms(10));
        assert_eq!(huge_page_wait(ms(10), ms(8)), ms(256));
        assert_eq!(huge_page_wait(ms(10), Duration::MAX), Duration::MAX);
        // A reading due at 0 is not due again before the interval has passed.
        let mut sampler = Sampler::new(std::process::id(), ms(10));
        sampler.tick_at(ms(0));
        assert!(sampler.huge_next >= ms(10));
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
        let huge = sampler
            .peak_anon_huge()
            .expect("huge pages of the live child");
        assert!(
            huge <= held,
            "{huge} bytes in huge pages of {held} resident"
        );

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
