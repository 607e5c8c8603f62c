//! The live merger: one process, forked at the start with the writers (so
//! tracepoints leave it out with them), that writes perf.data while the
//! recording goes on ([`shardrec_merge::live`]). It runs at the workload's
//! priority, as perf record does: at the least priority, a host whose CPUs
//! the workload keeps busy would starve it (rounds a second apart on two
//! busy CPUs) and leave the whole merge for the stop.
//!
//! It maps every ring (the CPUs' and the side band's) to read their
//! control pages: how far the kernel has published (`data_head`) and how
//! far the writer has written (`data_tail`). Where a CPU's writer has a
//! few bytes left unwritten (a quiet CPU's records, below its wakeup
//! point), it copies them from the ring, leaving the ring as it is
//! ([`RingBuffer::peek_unread`]), and writes them out from the copy; the
//! writer writes them into the shard in its own time, where the merger
//! passes over them. It never writes a ring's tail and never wakes a
//! writer. Its only
//! commands come on a pipe: `b` once `synth.shard` and `meta.start` are
//! whole, `f` once every writer and the VIP are done and `meta` is final;
//! the pipe's end without `f` abandons the output. It answers `f` with the
//! merge's report.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::unistd::Pid;
use shardrec_merge::live::{LiveMerge, LiveOutput};
use shardrec_merge::{MergeOptions, MergeReport};
use shardrec_shard::{CpuStats, RecordingDir};
use shardrec_sys::{process, PerfEvent, RingBuffer};

use crate::RecordError;

/// How often a round is written while data flows; a quiet recording is
/// looked at less often. What a round leaves behind is what the stop
/// still has to merge: in alternating runs on a 2-vCPU VM, 50 ms rounds
/// against 100 ms took the syscall storm's last round from 0.07 s to
/// 0.03-0.04 s and the DWARF storm's from 0.13-0.16 s to 0.06-0.09 s, for
/// the same CPU.
const ROUND: Duration = Duration::from_millis(50);
const QUIET_ROUND: Duration = Duration::from_millis(1000);

/// The most bytes of a ring its writer has not written yet that a round
/// copies from the ring: a quiet ring's few records (a busy ring's writer
/// is woken at a quarter of its ring or more, and writes them soon).
const COPY_UNWRITTEN_MOST: u64 = 64 << 10;

/// A ring the merger watches.
pub struct WatchedRing<'a> {
    /// The event that owns it.
    pub event: &'a PerfEvent,
    /// Its data pages.
    pub pages: usize,
    /// For a CPU's ring, the ring position of its shard's first byte; a
    /// side-band ring's records go to the VIP's shard.
    pub base: Option<u64>,
}

/// Where the live merger writes.
#[derive(Clone, Debug)]
pub enum Destination {
    /// perf.data at this path.
    File(PathBuf),
    /// perf's pipe format into this stream.
    Stream(Arc<OwnedFd>),
}

/// The coordinator's handle on the live merger.
pub struct LiveMerger {
    /// Its process.
    pub pid: Pid,
    commands: File,
    results: File,
    /// Whether it ended (the coordinator's reaping saw it go).
    pub ended: bool,
}

impl LiveMerger {
    /// Forks the merger of the recording in `dir` into `output`, watching
    /// `rings` (the CPUs' in `meta.cpus` order, then the side band's);
    /// `restarted` after one that died, whose output it goes on with.
    pub fn spawn(
        dir: &RecordingDir,
        output: Destination,
        options: MergeOptions,
        rings: Vec<WatchedRing>,
        restarted: bool,
    ) -> Result<LiveMerger, RecordError> {
        let failed = |e: nix::Error| RecordError::system("starting the live merger")(e.into());
        let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
        let (commands_in, commands) = nix::unistd::pipe2(cloexec).map_err(failed)?;
        let (results, results_out) = nix::unistd::pipe2(cloexec).map_err(failed)?;
        let mut keep = vec![commands_in.as_raw_fd(), results_out.as_raw_fd()];
        keep.extend(rings.iter().map(|r| r.event.as_fd().as_raw_fd()));
        if let Destination::Stream(stream) = &output {
            keep.push(stream.as_raw_fd());
        }
        let dir = dir.clone();
        let pid = process::spawn(move || {
            // SAFETY: this forked child uses only the descriptors in `keep`
            // (its two pipe ends and the rings' events, whose mappings it
            // makes itself) and leaves through `exit_now`, never dropping
            // what it inherited.
            if unsafe { process::close_fds_except(&keep) }.is_err() {
                return 1;
            }
            if restarted {
                shardrec_control::fault::disarm_crashes();
            }
            let mut commands = File::from(commands_in);
            let mut results = File::from(results_out);
            let (outcome, code) = match serve(&dir, &output, &options, &rings, &mut commands) {
                Ok(None) => return 0,
                Ok(Some(Merged { report, cpus })) => (Outcome::Merged { report, cpus }, 0),
                Err(Stopped::ReaderLeft) => (Outcome::ReaderLeft, READER_LEFT),
                Err(Stopped::Failed(why)) => (Outcome::Failed(why), 1),
            };
            match send(&mut results, &outcome) {
                Ok(()) => code,
                Err(_) => 1,
            }
        })
        .map_err(RecordError::system("starting the live merger"))?;
        Ok(LiveMerger {
            pid,
            commands: File::from(commands),
            results: File::from(results),
            ended: false,
        })
    }

    /// `synth.shard` and `meta.start` are whole: the merger starts.
    pub fn begin(&mut self) {
        self.ended |= self.commands.write_all(b"b").is_err();
    }

    /// Every shard is whole and `meta` holds the stop's counts: the merger
    /// writes the rest and the header while the coordinator goes on.
    pub fn conclude(&mut self) {
        if !self.ended {
            self.ended = self.commands.write_all(b"f").is_err();
        }
    }

    /// What the merger did, once [`conclude`](Self::conclude)d (or once
    /// it ended on its own): when it failed, the merge is done after the
    /// fact, from where its output stopped.
    pub fn outcome(mut self) -> Outcome {
        drop(self.commands);
        let mut bytes = Vec::new();
        let read = self.results.read_to_end(&mut bytes);
        let _ = nix::sys::wait::waitpid(self.pid, None);
        match read.map(|_| rmp_serde::from_slice(&bytes)) {
            Ok(Ok(outcome)) => outcome,
            _ => Outcome::Failed("the live merger was killed".into()),
        }
    }

    /// Ends the merger without an output.
    pub fn abandon(self) {
        let LiveMerger { pid, commands, .. } = self;
        drop(commands);
        let _ = nix::sys::wait::waitpid(pid, None);
    }
}

/// How a live merge ended.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    /// The output is written.
    Merged {
        /// The merge's report.
        report: Box<MergeReport>,
        /// What each CPU's shard held, for `meta`.
        cpus: Vec<CpuStats>,
    },
    /// It stopped, for this reason; its output and the shards wait for a
    /// merge after the fact.
    Failed(String),
    /// The reader of its stream went away (perf record dies of SIGPIPE
    /// then).
    ReaderLeft,
}

/// The merger's exit status when the reader of its stream went away (a
/// shell's for a process killed by SIGPIPE): the coordinator stops the
/// recording when it sees it.
pub const READER_LEFT: i32 = 141;

/// Why the merger stopped early.
enum Stopped {
    ReaderLeft,
    Failed(String),
}

impl<E: std::error::Error + 'static> From<E> for Stopped {
    fn from(error: E) -> Stopped {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        while let Some(error) = cause {
            let io = error.downcast_ref::<std::io::Error>();
            if io.is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
                return Stopped::ReaderLeft;
            }
            cause = error.source();
        }
        Stopped::Failed(shardrec_shard::with_causes(&error))
    }
}

fn send(out: &mut File, outcome: &Outcome) -> std::io::Result<()> {
    let bytes = rmp_serde::to_vec(outcome).map_err(std::io::Error::other)?;
    out.write_all(&bytes)
}

/// What a live merge that wrote its output sends back.
struct Merged {
    report: Box<MergeReport>,
    cpus: Vec<CpuStats>,
}

/// The merger's life: wait for `b`, write rounds until `f`, finish.
/// `None` when the coordinator went away first.
fn serve(
    dir: &RecordingDir,
    output: &Destination,
    options: &MergeOptions,
    watched: &[WatchedRing],
    commands: &mut File,
) -> Result<Option<Merged>, Stopped> {
    let rings: Vec<(RingBuffer, Option<u64>)> = watched
        .iter()
        .map(|w| Ok((RingBuffer::map(w.event, w.pages)?, w.base)))
        .collect::<std::io::Result<_>>()?;
    if next_event(commands, None, None)? != Event::Command(b'b') {
        return Ok(None);
    }
    let (meta, _) = dir.read_surviving_meta()?;
    let layouts = meta.layouts();
    let (output, stream) = match output {
        Destination::File(path) => (LiveOutput::File(path), None),
        Destination::Stream(stream) => (
            LiveOutput::Stream(File::from(stream.try_clone()?)),
            Some(stream.as_fd()),
        ),
    };
    let mut merge = LiveMerge::start(dir.path(), &meta, &layouts, output, options)?;
    let cpu_rings = watched.iter().filter(|w| w.base.is_some());
    let smallest = cpu_rings
        .map(|w| w.pages * shardrec_sys::ring::page_size())
        .min();
    merge.rings_are(smallest.unwrap_or(0) as u64);
    let mut heads = Vec::new();
    loop {
        // While the kernel writes, a round every ROUND; a recording whose
        // rings are all quiet is looked at less often.
        let now: Vec<u64> = rings.iter().map(|(ring, _)| ring.head()).collect();
        let wait = if now != heads { ROUND } else { QUIET_ROUND };
        heads = now;
        match next_event(commands, stream, Some(wait))? {
            Event::Command(b'f') => break,
            Event::Command(_) => {
                merge.abandon();
                return Ok(None);
            }
            Event::ReaderLeft => return Err(Stopped::ReaderLeft),
            Event::Timeout => {}
        }
        if let Err(error) = round(&mut merge, &rings) {
            merge.abandon();
            return Err(error.into());
        }
    }
    let (meta, damage) = dir.read_surviving_meta()?;
    let damage = damage.map(|e| shardrec_shard::with_causes(&e));
    let (report, summaries) = merge.finish(&meta, damage)?;
    let report = Box::new(report);
    // The stop wrote meta with its counts before asking for the end.
    let Some(mut stats) = meta.stats.clone() else {
        let cpus = Vec::new();
        return Ok(Some(Merged { report, cpus }));
    };
    stats.cpus.clear();
    for (&cpu, summary) in meta.cpus.iter().zip(&summaries) {
        let bytes = std::fs::metadata(dir.shard_path(cpu)).map_or(0, |m| m.len());
        stats.count_cpu(cpu, bytes, summary);
        if !options.consume {
            // The shards are kept: a merge of a time window reads their
            // index (without one it walks them).
            let index = shardrec_shard::shard_index::ShardIndex::of(summary);
            let _ = dir.write_index(cpu, &index);
        }
    }
    Ok(Some(Merged {
        report,
        cpus: stats.cpus,
    }))
}

/// One round over `rings`, each read from its control page.
fn round(
    merge: &mut LiveMerge,
    rings: &[(RingBuffer, Option<u64>)],
) -> std::io::Result<shardrec_merge::live::Round> {
    // Tails first: everything before them is in the files read next.
    let tails: Vec<u64> = rings.iter().map(|(ring, _)| ring.tail()).collect();
    let written: Vec<u64> = rings
        .iter()
        .zip(&tails)
        .filter_map(|((_, base), tail)| Some(tail - (*base)?))
        .collect();
    // A ring's few bytes its writer has not written are copied instead of
    // waited for: a quiet CPU neither holds the output back nor is woken.
    let unwritten = |i: usize, at: u64| {
        let (ring, base) = &rings[i];
        ring.peek_unread(base.as_ref()? + at, COPY_UNWRITTEN_MOST)
    };
    merge.round(
        &written,
        unwritten,
        |taken| {
            rings
                .iter()
                .zip(&tails)
                .enumerate()
                .map(|(i, ((_, base), tail))| match base {
                    Some(base) => base + taken[i],
                    None => *tail,
                })
                .collect()
        },
        || rings.iter().map(|(ring, _)| ring.head()).collect(),
    )
}

/// What the merger waits for.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// A command; 0 when the pipe ended.
    Command(u8),
    /// The reader of the stream went away.
    ReaderLeft,
    /// Nothing within the wait.
    Timeout,
}

/// The next command, or the stream's reader leaving (a pipe's writing end
/// reports POLLERR once no reader is left), waiting up to `wait`
/// (forever if `None`).
fn next_event(
    commands: &mut File,
    stream: Option<BorrowedFd>,
    wait: Option<Duration>,
) -> std::io::Result<Event> {
    let timeout = match wait {
        Some(wait) => PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX),
        None => PollTimeout::NONE,
    };
    let mut fds = vec![PollFd::new(commands.as_fd(), PollFlags::POLLIN)];
    fds.extend(stream.map(|fd| PollFd::new(fd, PollFlags::empty())));
    match nix::poll::poll(&mut fds, timeout) {
        Ok(0) | Err(nix::errno::Errno::EINTR) => return Ok(Event::Timeout),
        Ok(_) => {}
        Err(e) => return Err(e.into()),
    }
    let error = PollFlags::POLLERR | PollFlags::POLLHUP;
    if fds
        .get(1)
        .and_then(PollFd::revents)
        .is_some_and(|r| r.intersects(error))
    {
        return Ok(Event::ReaderLeft);
    }
    let mut byte = [0u8];
    match commands.read(&mut byte)? {
        0 => Ok(Event::Command(0)),
        _ => Ok(Event::Command(byte[0])),
    }
}
