//! An ordered, bounded streaming map on a plain rayon pool: the S2 pattern as a program
//! without arenapool would write it.

use std::collections::BTreeMap;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;

/// Pulls inputs lazily, keeps at most `window` tasks running or finished-but-unconsumed,
/// and yields results in input order.
pub(super) struct Stream<'p, I: Iterator, R, F> {
    pool: &'p rayon::ThreadPool,
    inputs: I,
    f: Arc<F>,
    window: usize,
    sender: Sender<(u64, R)>,
    receiver: Receiver<(u64, R)>,
    submitted: u64,
    yielded: u64,
    /// Finished results that came in ahead of their turn.
    ready: BTreeMap<u64, R>,
    exhausted: bool,
}

impl<'p, I, R, F> Stream<'p, I, R, F>
where
    I: Iterator,
    I::Item: Send + 'static,
    R: Send + 'static,
    F: Fn(I::Item) -> R + Send + Sync + 'static,
{
    pub(super) fn new(pool: &'p rayon::ThreadPool, inputs: I, f: F, window: usize) -> Self {
        let (sender, receiver) = channel();
        Stream {
            pool,
            inputs,
            f: Arc::new(f),
            window: window.max(1),
            sender,
            receiver,
            submitted: 0,
            yielded: 0,
            ready: BTreeMap::new(),
            exhausted: false,
        }
    }

    fn fill(&mut self) {
        while !self.exhausted && self.submitted - self.yielded < self.window as u64 {
            let Some(input) = self.inputs.next() else {
                self.exhausted = true;
                break;
            };
            let index = self.submitted;
            self.submitted += 1;
            let f = Arc::clone(&self.f);
            let sender = self.sender.clone();
            self.pool.spawn(move || {
                // The receiver is gone only if the stream was dropped early.
                let _ = sender.send((index, f(input)));
            });
        }
    }
}

impl<I, R, F> Iterator for Stream<'_, I, R, F>
where
    I: Iterator,
    I::Item: Send + 'static,
    R: Send + 'static,
    F: Fn(I::Item) -> R + Send + Sync + 'static,
{
    type Item = R;

    fn next(&mut self) -> Option<R> {
        self.fill();
        if self.yielded == self.submitted {
            return None;
        }
        let result = loop {
            if let Some(r) = self.ready.remove(&self.yielded) {
                break r;
            }
            let (index, r) = self
                .receiver
                .recv()
                .expect("a streaming task panicked (rayon aborts first)");
            self.ready.insert(index, r);
        };
        self.yielded += 1;
        Some(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn ordered_bounded_and_lazy() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        static RUNNING: AtomicUsize = AtomicUsize::new(0);
        static MAX: AtomicUsize = AtomicUsize::new(0);
        let f = |x: u64| {
            let now = RUNNING.fetch_add(1, Ordering::SeqCst) + 1;
            MAX.fetch_max(now, Ordering::SeqCst);
            std::thread::sleep(std::time::Duration::from_micros(200 * (x % 3)));
            RUNNING.fetch_sub(1, Ordering::SeqCst);
            x * x
        };
        let mut stream = Stream::new(&pool, 0..50u64, f, 3);
        let mut out = Vec::new();
        while let Some(r) = stream.next() {
            // Never more than the window submitted ahead of what was consumed.
            assert!(stream.submitted - stream.yielded <= 3);
            out.push(r);
        }
        assert_eq!(out, (0..50u64).map(|x| x * x).collect::<Vec<_>>());
        assert!(MAX.load(Ordering::SeqCst) <= 2);

        // An infinite input works: only what is consumed (plus the window) is pulled.
        let first: Vec<u64> = Stream::new(&pool, 0.., |x: u64| x + 1, 4).take(5).collect();
        assert_eq!(first, vec![1, 2, 3, 4, 5]);
    }
}
