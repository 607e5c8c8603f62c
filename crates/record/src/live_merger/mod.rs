//! The live merger: one process, forked at the start with the writers (so
//! tracepoints leave it out with them), that writes perf.data while the
//! recording goes on ([`shardrec_merge::live`]). It runs at the workload's
//! priority, as perf record does: at the least priority, a host whose CPUs
//! the workload keeps busy would starve it (rounds a second apart on two
//! busy CPUs) and leave the whole merge for the stop.
//!
//! It maps every ring (the CPUs' and the side band's) to read their
//! control pages: how far the kernel has published (`data_head`) and how
//! far the writer has written (`data_tail`). Where a CPU's writer has
//! up to half a ring unwritten (a quiet CPU's records, what a busy thread
//! left behind as it moved on, or what came since the writer last woke),
//! it copies them from
//! the ring, leaving the ring as it is ([`RingBuffer::peek_unread`]), and
//! writes them out from the copy; the
//! writer writes them into the shard in its own time, where the merger
//! passes over them. It never writes a ring's tail and never wakes a
//! writer.
//!
//! With `--switch-output` it merges the windows one after the other, each
//! into a perf.data of its own ([`WindowsOutput`]): it follows the window
//! being recorded, and when the coordinator closes it, completes its
//! output, gives it its name and goes on with the next. Before the
//! writers switch, it stops copying from the rings until the next window
//! begins: what a ring holds past its writer's tail may belong there.
//!
//! Its only commands come on a pipe: `b` once `synth.shard` and
//! `meta.start` are whole, which it answers once its output's head is
//! written (the coordinator enables the events only then, as perf
//! record writes its header before enabling: the merger's start, its
//! costliest moment, is then not taken from the workload); `c` before a window closes, which it answers
//! once it copies no more; `s` with a [`Switch`] when the window closed;
//! `f` once every writer and the VIP are done and `meta` is final; the
//! pipe's end without `f` abandons the output. Its answers come on
//! another pipe: a [`Message::WindowDone`] for each window finished,
//! [`Message::Closing`], and the merge's [`Outcome`] for `f`.

mod pace;
mod serve;

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::Arc;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::unistd::Pid;
use shardrec_merge::{MergeOptions, MergeReport};
use shardrec_shard::{CpuStats, RecordingDir};
use shardrec_sys::{process, PerfEvent};

use crate::RecordError;

/// A ring the merger watches.
pub struct WatchedRing<'a> {
    /// The event that owns it.
    pub event: &'a PerfEvent,
    /// Its data pages.
    pub pages: usize,
    /// For a CPU's ring, the ring position of its shard's first byte; a
    /// side-band ring's records go to the VIP's shard.
    pub base: Option<u64>,
    /// A CPU's ring the merger reads first: it takes the ring's bytes
    /// itself and gives them back once its output holds them and says so
    /// (its writer spills only what it did not take).
    pub reads_first: bool,
}

/// Where the live merger writes.
#[derive(Clone, Debug)]
pub enum Destination {
    /// perf.data at this path.
    File(PathBuf),
    /// perf's pipe format into this stream.
    Stream(Arc<OwnedFd>),
    /// Each `--switch-output` window into a perf.data of its own.
    Windows(WindowsOutput),
}

/// The windows of a `--switch-output` recording, as a merger takes them
/// over: first those closed that no merger finished (a merger restarted
/// after one died), then the window being recorded and those that follow.
#[derive(Clone, Debug)]
pub struct WindowsOutput {
    /// The recording's directory, which holds the windows.
    pub root: RecordingDir,
    /// Windows closed and not yet written, oldest first, each with the
    /// name its output takes.
    pub closed: Vec<(u32, PathBuf)>,
    /// The window being recorded.
    pub current: u32,
    /// `--keep-shards`: a window's directory stays once it is written.
    pub keep_shards: bool,
}

/// A window closed: its output's name, and where the next window's
/// shards begin in their CPUs' rings (in `meta.cpus` order).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Switch {
    /// The name the closing window's perf.data takes.
    pub output: PathBuf,
    /// The next window's shards' first bytes in their rings.
    pub bases: Vec<u64>,
}

/// What the merger says, in order: each window it finished (and that it
/// stopped copying, when asked), then how it ended.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
enum Message {
    WindowDone(WindowDone),
    /// The answer to `b`: the output's head is written.
    Started,
    /// The answer to `c`: nothing more is copied from the rings in this
    /// window.
    Closing,
    Ended(Outcome),
}

/// A `--switch-output` window the merger finished.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct WindowDone {
    /// The window.
    pub window: u32,
    /// Its output.
    pub output: PathBuf,
    /// Whether the output was written (else its shards are kept).
    pub written: bool,
}

/// What the merger keeps of the memory it frees: its rounds at 64 CPUs
/// with 4 MiB rings take up to a ring's copy for each, and when glibc
/// trimmed the heap past 32 MiB free the next round faulted the pages in
/// again.
const MERGER_FREED_KEPT: usize = 256 << 20;

/// The coordinator's handle on the live merger.
pub struct LiveMerger {
    /// Its process.
    pub pid: Pid,
    commands: File,
    results: File,
    /// What was read of `results` short of a whole message.
    unread: Vec<u8>,
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
            // Its rounds take and free buffers the size of what the rings
            // held (up to a ring each) and more for its output's runs.
            process::keep_freed_memory(MERGER_FREED_KEPT);
            let mut commands = File::from(commands_in);
            let mut results = File::from(results_out);
            let served = serve::serve(&dir, &output, &options, &rings, &mut commands, |said| {
                send(&mut results, &said)
            });
            let (outcome, code) = match served {
                Ok(None) => return 0,
                Ok(Some(serve::Merged { report, cpus })) => (Outcome::Merged { report, cpus }, 0),
                Err(serve::Stopped::ReaderLeft) => (Outcome::ReaderLeft, READER_LEFT),
                Err(serve::Stopped::Failed(why)) => (Outcome::Failed(why), 1),
            };
            match send(&mut results, &Message::Ended(outcome)) {
                Ok(()) => code,
                Err(_) => 1,
            }
        })
        .map_err(RecordError::system("starting the live merger"))?;
        Ok(LiveMerger {
            pid,
            commands: File::from(commands),
            results: File::from(results),
            unread: Vec::new(),
            ended: false,
        })
    }

    /// `synth.shard` and `meta.start` are whole: the merger starts.
    pub fn begin(&mut self) {
        self.command(b"b");
    }

    /// [`begin`](Self::begin), then returns once the merger has written
    /// its output's head (or has ended), with the windows it finished
    /// meanwhile.
    pub fn begin_and_wait(&mut self) -> Vec<WindowDone> {
        self.begin();
        self.wait_for(|m| matches!(m, Message::Started))
    }

    /// A `--switch-output` window is about to close: returns once the
    /// merger copies nothing more from the rings (or has ended), with the
    /// windows it finished meanwhile.
    pub fn closing(&mut self) -> Vec<WindowDone> {
        self.command(b"c");
        self.wait_for(|m| matches!(m, Message::Closing))
    }

    /// Reads what the merger says until `answer`, which is taken, or
    /// until it ends; returns the windows it finished meanwhile. Any other
    /// message (how it ended) stays unread for [`outcome`](Self::outcome).
    fn wait_for(&mut self, answer: fn(&Message) -> bool) -> Vec<WindowDone> {
        let mut done = Vec::new();
        let mut buffer = [0u8; 4096];
        while !self.ended {
            while let Some((message, len)) = decode_one(&self.unread) {
                match message {
                    Some(Message::WindowDone(window)) => done.push(window),
                    Some(message) if answer(&message) => {
                        self.unread.drain(..len);
                        return done;
                    }
                    Some(_) => return done,
                    None => {}
                }
                self.unread.drain(..len);
            }
            match self.results.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.unread.extend_from_slice(&buffer[..n]),
            }
        }
        done
    }

    /// A `--switch-output` window closed (its shards and `meta` are whole,
    /// and so are the next window's `synth.shard` and `meta.start`).
    pub fn switch(&mut self, switch: &Switch) {
        let Ok(payload) = rmp_serde::to_vec(switch) else {
            return;
        };
        let mut command = vec![b's'];
        command.extend_from_slice(&(payload.len() as u32).to_le_bytes());
        command.extend_from_slice(&payload);
        self.command(&command);
    }

    /// Every shard is whole and `meta` holds the stop's counts: the merger
    /// writes the rest and the header while the coordinator goes on.
    pub fn conclude(&mut self) {
        self.command(b"f");
    }

    fn command(&mut self, bytes: &[u8]) {
        if !self.ended {
            self.ended = self.commands.write_all(bytes).is_err();
        }
    }

    /// The windows finished since last asked, without waiting.
    pub fn windows_done(&mut self) -> Vec<WindowDone> {
        let mut buffer = [0u8; 4096];
        loop {
            let mut fds = [PollFd::new(self.results.as_fd(), PollFlags::POLLIN)];
            match nix::poll::poll(&mut fds, PollTimeout::ZERO) {
                Ok(1) => {}
                _ => break,
            }
            match self.results.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.unread.extend_from_slice(&buffer[..n]),
            }
        }
        decode(&mut self.unread).0
    }

    /// What the merger did, once [`conclude`](Self::conclude)d (or once
    /// it ended on its own), and the windows it finished since last
    /// asked: when it failed, the merge is done after the fact, from where
    /// its output stopped.
    pub fn outcome(self) -> (Outcome, Vec<WindowDone>) {
        let LiveMerger {
            pid,
            commands,
            mut results,
            mut unread,
            ..
        } = self;
        drop(commands);
        let _ = results.read_to_end(&mut unread);
        let _ = nix::sys::wait::waitpid(pid, None);
        let (done, said) = decode(&mut unread);
        let ended = said.into_iter().find_map(|m| match m {
            Message::Ended(outcome) => Some(outcome),
            _ => None,
        });
        let killed = || Outcome::Failed("the live merger was killed".into());
        (ended.unwrap_or_else(killed), done)
    }

    /// Ends the merger without an output.
    pub fn abandon(self) {
        let LiveMerger { pid, commands, .. } = self;
        drop(commands);
        let _ = nix::sys::wait::waitpid(pid, None);
    }
}

/// The whole messages in `unread`, which keeps the rest: the windows
/// finished, and the others.
fn decode(unread: &mut Vec<u8>) -> (Vec<WindowDone>, Vec<Message>) {
    let (mut done, mut said, mut at) = (Vec::new(), Vec::new(), 0);
    while let Some((message, len)) = decode_one(&unread[at..]) {
        match message {
            Some(Message::WindowDone(window)) => done.push(window),
            Some(message) => said.push(message),
            None => {}
        }
        at += len;
    }
    unread.drain(..at);
    (done, said)
}

/// The first whole message in `bytes` (`None` if it cannot be read) and
/// the bytes it takes, framing included; `None` short of a whole one.
fn decode_one(bytes: &[u8]) -> Option<(Option<Message>, usize)> {
    let len = bytes.get(..4)?;
    let len = u32::from_le_bytes(len.try_into().expect("four bytes")) as usize;
    let message = bytes.get(4..4 + len)?;
    Some((rmp_serde::from_slice(message).ok(), 4 + len))
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

/// One message, its length first.
fn send(out: &mut File, message: &Message) -> std::io::Result<()> {
    let bytes = rmp_serde::to_vec(message).map_err(std::io::Error::other)?;
    let mut framed = (bytes.len() as u32).to_le_bytes().to_vec();
    framed.extend_from_slice(&bytes);
    out.write_all(&framed)
}
