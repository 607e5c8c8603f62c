//! Walking `/proc` with several threads. Each worker describes whole
//! processes into its own buffer and hands full buffers to the calling
//! thread, which alone writes to the output (so it need not be `Send`).

use crate::tasks::Walker;
use crate::{SynthStats, Synthesizer, FLUSH_AT};
use std::io::{self, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};

/// Beyond this, workers mostly contend in the kernel (on `/proc` lookups)
/// instead of adding throughput.
const MAX_THREADS: usize = 8;

/// A worker pays for its start-up only with this many processes to walk.
const MIN_PER_THREAD: usize = 256;

/// Processes a worker claims at a time: few enough to balance the load,
/// enough to keep the shared counter cold.
const BATCH: usize = 16;

/// How many threads to walk `processes` processes with; `requested` (if not
/// 0) overrides the choice.
pub(crate) fn threads_for(requested: usize, processes: usize) -> usize {
    if requested > 0 {
        return requested.min(processes).max(1);
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    cpus.min(MAX_THREADS).min(processes / MIN_PER_THREAD).max(1)
}

/// Describes `pids` with `threads` workers; the first write error stops
/// them all and is returned.
pub(crate) fn synthesize(
    synth: &Synthesizer,
    pids: &[i32],
    threads: usize,
    out: &mut impl Write,
) -> io::Result<SynthStats> {
    let next = AtomicUsize::new(0);
    let (tx, rx) = sync_channel::<Vec<u8>>(threads * 2);
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                let tx = tx.clone();
                let next = &next;
                scope.spawn(move || worker(synth, pids, next, tx))
            })
            .collect();
        drop(tx);
        let mut written = Ok(());
        for chunk in rx.iter() {
            if let Err(e) = out.write_all(&chunk) {
                written = Err(e);
                break;
            }
        }
        // Workers blocked in `send` see the receiver gone and stop.
        drop(rx);
        let mut stats = SynthStats::default();
        for handle in workers {
            match handle.join() {
                Ok(worker_stats) => stats += worker_stats,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        written.map(|()| stats)
    })
}

fn worker(
    synth: &Synthesizer,
    pids: &[i32],
    next: &AtomicUsize,
    tx: SyncSender<Vec<u8>>,
) -> SynthStats {
    let mut emitter = synth.emitter();
    let mut walker = Walker::default();
    loop {
        let start = next.fetch_add(BATCH, Ordering::Relaxed);
        if start >= pids.len() {
            break;
        }
        for &pid in &pids[start..(start + BATCH).min(pids.len())] {
            walker.process(&mut emitter, pid);
            if emitter.buf.len() >= FLUSH_AT {
                let full = std::mem::replace(&mut emitter.buf, Vec::with_capacity(FLUSH_AT * 2));
                if tx.send(full).is_err() {
                    return emitter.stats;
                }
            }
        }
    }
    if !emitter.buf.is_empty() {
        let _ = tx.send(std::mem::take(&mut emitter.buf));
    }
    emitter.stats
}
