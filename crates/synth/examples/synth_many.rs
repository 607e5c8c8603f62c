//! Times `Synthesizer::tasks(&Tasks::All)` with 5,000 extra idle processes
//! alive, single-threaded and with the default number of threads.
//!
//! `cargo run --release -p shardrec-synth --example synth_many [COUNT [THREADS...]]`
//!
//! THREADS are thread counts to compare (0: the library's choice); the
//! default compares 1 and 0.
//!
//! The children are forked copies of this program blocked in `pause`; they
//! are killed and reaped on return or panic, and die with us (through
//! `PR_SET_PDEATHSIG`) if we are killed first.

use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{fork, getppid, pause, ForkResult, Pid};
use shardrec_synth::{SynthStats, Synthesizer, Tasks};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// `PERF_SAMPLE_IDENTIFIER | TID | TIME | CPU`, as perf record's default.
const SAMPLE_TYPE: u64 = (1 << 16) | (1 << 1) | (1 << 2) | (1 << 7);

/// Idle children, killed and reaped when dropped.
struct Children(Vec<Pid>);

impl Drop for Children {
    fn drop(&mut self) {
        for &pid in &self.0 {
            let _ = kill(pid, Signal::SIGKILL);
        }
        for &pid in &self.0 {
            let _ = waitpid(pid, None);
        }
    }
}

fn spawn_idle(count: usize) -> nix::Result<Children> {
    let parent = Pid::this();
    let mut children = Children(Vec::with_capacity(count));
    for _ in 0..count {
        // SAFETY: this program has not started a second thread yet, and the
        // child only makes async-signal-safe calls (prctl, getppid, kill,
        // pause) before it dies.
        match unsafe { fork() }? {
            ForkResult::Child => idle(parent),
            ForkResult::Parent { child } => children.0.push(child),
        }
    }
    Ok(children)
}

fn idle(parent: Pid) -> ! {
    let _ = set_pdeathsig(Signal::SIGKILL);
    // The parent may have died before the line above took effect.
    if getppid() != parent {
        let _ = kill(Pid::this(), Signal::SIGKILL);
    }
    loop {
        pause();
    }
}

/// The output file, removed when dropped.
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn time_once(synth: &Synthesizer, path: &TempFile) -> std::io::Result<(SynthStats, Duration)> {
    let start = Instant::now();
    let mut out = BufWriter::with_capacity(256 * 1024, File::create(&path.0)?);
    let stats = synth.tasks(&Tasks::All, &mut out)?;
    out.flush()?;
    Ok((stats, start.elapsed()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let count = match args.next() {
        Some(arg) => arg.parse()?,
        None => 5000,
    };
    let mut threads: Vec<usize> = args.map(|arg| arg.parse()).collect::<Result<_, _>>()?;
    if threads.is_empty() {
        threads = vec![1, 0];
    }
    let started = Instant::now();
    let _children = spawn_idle(count)?;
    println!("forked {count} idle processes in {:?}", started.elapsed());
    let path = TempFile(std::env::temp_dir().join(format!("synth_many.{}.shard", Pid::this())));
    for threads in threads {
        let label = match threads {
            0 => "auto threads".to_string(),
            1 => "1 thread".to_string(),
            n => format!("{n} threads"),
        };
        let synth = Synthesizer::new(SAMPLE_TYPE, 1).with_threads(threads);
        for round in 1..=3 {
            let (stats, elapsed) = time_once(&synth, &path)?;
            println!(
                "{label} #{round}: {:.1} ms, {} processes, {} threads, {} maps, {} records, {} bytes, {} skipped",
                elapsed.as_secs_f64() * 1e3,
                stats.processes,
                stats.threads,
                stats.maps,
                stats.records,
                stats.bytes,
                stats.skipped,
            );
        }
    }
    Ok(())
}
