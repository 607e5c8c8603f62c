//! The live merger: one process, forked at the start with the writers (so
//! tracepoints leave it out with them), that writes perf.data while the
//! recording goes on ([`shardrec_merge::live`]). It runs five nice levels
//! above the recorder where it may, with short time slices: its work is
//! what the rings bring, and the weight decides only how soon it does it
//! (`docs/live-merge.md`, "The merger's weight").
//!
//! It maps every ring (the CPUs' and the side band's) to read their
//! control pages: how far the kernel has published (`data_head`) and how
//! far the writer has kept the ring in its shard. Where it reads a CPU's
//! ring first (a perf.data file that frees its shards), it writes the
//! ring's bytes into the output from the ring's mapping, under a claim
//! the writer respects ([`RingBuffer::take_unread`](shardrec_sys::RingBuffer::take_unread)), and gives them back
//! to the kernel once a checkpoint says the output holds them. Elsewhere,
//! where a CPU's writer has up to half a ring unwritten (a quiet CPU's
//! records, what a busy thread left behind as it moved on, or what came
//! since the writer last woke), it copies them from the ring, leaving the
//! ring as it is ([`RingBuffer::peek_unread`](shardrec_sys::RingBuffer::peek_unread)), and writes them out from
//! the copy; the writer writes them into the shard in its own time, where
//! the merger passes over them. It never wakes a writer.
//!
//! With `--switch-output` it merges the windows one after the other, each
//! into a perf.data of its own ([`WindowsOutput`]): it follows the window
//! being recorded, and when the coordinator closes it, completes its
//! output, gives it its name and goes on with the next. Before the
//! writers switch, it stops copying from the rings until the next window
//! begins: what a ring holds past its writer's tail may belong there.
//!
//! Its only commands come on a pipe, as [`Order`]s: `Begin` once
//! `synth.shard` and `meta.start` are whole, which it answers once its
//! output's head is written (the coordinator enables the events only
//! then, as perf record writes its header before enabling: the merger's
//! start, its costliest moment, is then not taken from the workload);
//! `Close` before a window closes, which it answers once it copies no
//! more; `Switch` when the window closed; `Conclude` once every writer and
//! the VIP are done and `meta` is final; the pipe's end without
//! `Conclude` abandons the output. Its answers come on another pipe, as
//! [`Message`]s: `WindowDone` for each window finished, `Started`,
//! `Closing`, and how it `Ended` after `Conclude`. Both go in control's
//! one framing.

mod pace;
mod serve;

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::Arc;

use nix::unistd::Pid;
use shardrec_control::{Framed, Helper, HelperEnds};
use shardrec_merge::{MergeOptions, MergeReport};
use shardrec_shard::output::Output;
use shardrec_shard::{CpuStats, RecordingDir};
use shardrec_sys::{process, PerfEvent};

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
    /// The claim it shares with that ring's writer, under which it reads
    /// the ring in place.
    pub claim: Option<shardrec_sys::ring::ClaimSlot>,
}

/// Where the live merger writes.
#[derive(Clone, Debug)]
pub enum Destination {
    /// perf.data, where `-o` resolved.
    File(Output),
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
    #[serde(with = "shardrec_control::frame::path_bytes")]
    pub output: PathBuf,
    /// The next window's shards' first bytes in their rings.
    pub bases: Vec<u64>,
}

/// What the coordinator asks of the merger.
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Order {
    /// `synth.shard` and `meta.start` are whole: write the output's head.
    Begin,
    /// A `--switch-output` window is about to close: copy nothing more
    /// from the rings.
    Close,
    /// The window closed.
    Switch(Switch),
    /// Every shard is whole and `meta` final: finish the output.
    Conclude,
}

impl Framed for Order {}

/// What the merger says, in order: each window it finished (and that it
/// stopped copying, when asked), then how it ended.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub enum Message {
    /// A `--switch-output` window finished.
    WindowDone(WindowDone),
    /// The answer to `Begin`: the output's head is written.
    Started,
    /// The answer to `Close`: nothing more is copied from the rings in
    /// this window.
    Closing,
    /// The answer to `Conclude` (or to the orders' end): how it ended.
    Ended(Outcome),
}

impl Framed for Message {}

/// A `--switch-output` window the merger finished.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct WindowDone {
    /// The window.
    pub window: u32,
    /// Its output.
    #[serde(with = "shardrec_control::frame::path_bytes")]
    pub output: PathBuf,
    /// Whether the output was written (else its shards are kept).
    pub written: bool,
    /// Why it was not, where something failed.
    pub why: Option<String>,
}

/// What the merger keeps of the memory it frees: its rounds at 64 CPUs
/// with 4 MiB rings take up to a ring's copy for each, and when glibc
/// trimmed the heap past 32 MiB free the next round faulted the pages in
/// again.
const MERGER_FREED_KEPT: usize = 256 << 20;

/// How many nice levels the merger runs above the recorder (weight
/// 3121 against a busy task's 1024 at nice 0), where it may; it asks for
/// short time slices too, to run as it wakes. At the workload's weight
/// and slice, a merger that shares a CPU with it reads rings that fill
/// about as fast as it compresses at half a CPU, and waits 2 to 4 ms
/// for each wakeup; once it falls about 9 ms behind, the writers spill,
/// it must read the shards back, and it falls further behind: in a `-z`
/// DWARF storm on 2 vCPUs, 44 to 244 MB went through the shards a run
/// and up to 4,042 samples were lost (bench/README.md, "the merger's
/// weight"). Its work is what the rings bring, whatever its weight; the
/// weight decides only how soon it does it. perf's thread runs at the
/// workload's nice level, and loses what its rings cannot hold.
const MERGER_NICE_STEPS: i32 = 5;

/// The coordinator's handle on the live merger.
pub struct LiveMerger {
    /// Its process.
    pub pid: Pid,
    helper: Helper<Order, Message>,
    /// Messages read that no one waited for yet (how it ended).
    said: Vec<Message>,
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
    ) -> std::io::Result<LiveMerger> {
        let mut keep: Vec<RawFd> = rings.iter().map(|r| r.event.as_fd().as_raw_fd()).collect();
        if let Destination::Stream(stream) = &output {
            keep.push(stream.as_raw_fd());
        }
        let dir = dir.clone();
        let helper = Helper::spawn(move |ends: HelperEnds<Order, Message>| {
            keep.extend(ends.fds());
            // SAFETY: this forked child uses only the descriptors in `keep`
            // (its two pipe ends and the rings' events, whose mappings it
            // makes itself) and leaves through `exit_now`, never dropping
            // what it inherited.
            if unsafe { process::close_fds_except(&keep) }.is_err() {
                return 1;
            }
            if restarted {
                shardrec_control::fault::disarm_in_replacement();
            }
            // Its rounds take and free buffers the size of what the rings
            // held (up to a ring each) and more for its output's runs.
            process::keep_freed_memory(MERGER_FREED_KEPT);
            // Unprivileged, it stays at the recorder's weight.
            let _ = process::raise_weight(MERGER_NICE_STEPS);
            // After the nice level, which it keeps.
            process::short_time_slices();
            let HelperEnds {
                mut orders,
                mut reports,
                ..
            } = ends;
            let served = serve::serve(&dir, &output, &options, &rings, &mut orders, |said| {
                said.write_to(&mut reports)
            });
            let (outcome, code) = match served {
                Ok(None) => return 0,
                Ok(Some(serve::Merged { report, cpus })) => (Outcome::Merged { report, cpus }, 0),
                Err(serve::Stopped::ReaderLeft) => (Outcome::ReaderLeft, READER_LEFT),
                // As one killed: no word, and a new one goes on.
                Err(serve::Stopped::Overtaken) => return OVERTAKEN,
                Err(serve::Stopped::Failed(why)) => (Outcome::Failed(why), 1),
            };
            match Message::Ended(outcome).write_to(&mut reports) {
                Ok(()) => code,
                Err(_) => 1,
            }
        })?;
        Ok(LiveMerger {
            pid: helper.pid,
            helper,
            said: Vec::new(),
            ended: false,
        })
    }

    /// `synth.shard` and `meta.start` are whole: the merger starts.
    pub fn begin(&mut self) {
        self.order(&Order::Begin);
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
        self.order(&Order::Close);
        self.wait_for(|m| matches!(m, Message::Closing))
    }

    /// Reads what the merger says until `answer`, which is taken, or
    /// until it ends; returns the windows it finished meanwhile. Any other
    /// message (how it ended) is kept for [`outcome`](Self::outcome).
    fn wait_for(&mut self, answer: fn(&Message) -> bool) -> Vec<WindowDone> {
        let mut done = Vec::new();
        while !self.ended {
            match self.helper.next_report() {
                Ok(Some(Message::WindowDone(window))) => done.push(window),
                Ok(Some(message)) if answer(&message) => break,
                Ok(Some(message)) => {
                    self.said.push(message);
                    break;
                }
                Ok(None) | Err(_) => break,
            }
        }
        done
    }

    /// A `--switch-output` window closed (its shards and `meta` are whole,
    /// and so are the next window's `synth.shard` and `meta.start`).
    pub fn switch(&mut self, switch: &Switch) {
        self.order(&Order::Switch(switch.clone()));
    }

    /// Every shard is whole and `meta` holds the stop's counts: the merger
    /// writes the rest and the header while the coordinator goes on.
    pub fn conclude(&mut self) {
        self.order(&Order::Conclude);
    }

    fn order(&mut self, order: &Order) {
        if !self.ended {
            self.ended = !self.helper.send(order);
        }
    }

    /// The windows finished since last asked, without waiting.
    pub fn windows_done(&mut self) -> Vec<WindowDone> {
        let sent = self.helper.sent();
        windows_in(sent, &mut self.said)
    }

    /// What the merger did, once [`conclude`](Self::conclude)d (or once
    /// it ended on its own), and the windows it finished since last
    /// asked: when it failed, the merge is done after the fact, from where
    /// its output stopped.
    pub fn outcome(self) -> (Outcome, Vec<WindowDone>) {
        let LiveMerger {
            helper, mut said, ..
        } = self;
        let done = windows_in(helper.finish(), &mut said);
        let ended = said.into_iter().find_map(|m| match m {
            Message::Ended(outcome) => Some(outcome),
            _ => None,
        });
        let killed = || Outcome::Failed("the live merger was killed".into());
        (ended.unwrap_or_else(killed), done)
    }

    /// Ends the merger without an output.
    pub fn abandon(self) {
        let mut helper = self.helper;
        helper.close_orders();
        helper.reap();
    }
}

/// The windows finished among `messages`; the others go to `said`.
fn windows_in(messages: Vec<Message>, said: &mut Vec<Message>) -> Vec<WindowDone> {
    let mut done = Vec::new();
    for message in messages {
        match message {
            Message::WindowDone(window) => done.push(window),
            message => said.push(message),
        }
    }
    done
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

/// The merger's exit status when a writer broke its claim on a ring
/// (`shardrec_sys::ring::RingClaims`): it stopped as one killed, and
/// the coordinator starts another, which goes on from the last
/// checkpoint. Past every signal's 128 + number.
pub const OVERTAKEN: i32 = 200;
