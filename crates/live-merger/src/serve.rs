//! The live merger's process: wait for `b`, write rounds until `f` (and,
//! with `--switch-output`, finish each window at its `s`), finish.

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use shardrec_control::fault::Site;
use shardrec_control::Framed;
use shardrec_merge::live::{LiveMerge, LiveOutput, Unwritten, ROUND_COPY_BUDGET};
use shardrec_merge::{MergeOptions, MergeReport};
use shardrec_shard::output::Output;
use shardrec_shard::{CpuStats, RecordingDir};
use shardrec_sys::ring::{Copied, Taken};
use shardrec_sys::RingBuffer;

use crate::pace::Pace;
use crate::{Destination, Message, Order, WatchedRing, WindowDone, WindowsOutput};

/// Why the merger stopped early.
pub(super) enum Stopped {
    ReaderLeft,
    /// A writer broke its claim and the kernel may have written over what
    /// it read: its output past the last checkpoint cannot be trusted
    /// ([`ClaimBroken`]).
    Overtaken,
    Failed(String),
}

/// A ring's writer broke the merger's claim on the bytes it read in
/// place, which held the ring half full (a merger stopped mid-round),
/// and the kernel has written nearly a ring past them since: they may
/// have been written over before they reached the output. The merger
/// stops before its next checkpoint, as one killed, and the next takes
/// the output up from the last (`shardrec_sys::ring::RingClaims`).
#[derive(Debug)]
struct ClaimBroken;

impl std::fmt::Display for ClaimBroken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a writer took back a ring the merger held too long")
    }
}

impl std::error::Error for ClaimBroken {}

impl<E: std::error::Error + 'static> From<E> for Stopped {
    fn from(error: E) -> Stopped {
        let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        while let Some(error) = cause {
            let io = error.downcast_ref::<std::io::Error>();
            if io
                .and_then(|e| e.get_ref())
                .is_some_and(|e| e.is::<ClaimBroken>())
            {
                return Stopped::Overtaken;
            }
            if io.is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe) {
                return Stopped::ReaderLeft;
            }
            cause = error.source();
        }
        Stopped::Failed(shardrec_shard::with_causes(&error))
    }
}

/// What a live merge that wrote its output sends back.
pub(super) struct Merged {
    pub(super) report: Box<MergeReport>,
    pub(super) cpus: Vec<CpuStats>,
}

/// The rings, each with where its shard begins (CPUs' rings), as mapped
/// in the merger.
struct Rings {
    rings: Vec<MergerRing>,
    /// The smallest CPU ring's bytes.
    smallest: u64,
    /// Whether a ring's bytes its writer has not written are copied.
    copies: bool,
    /// What the merger took from each ring it reads first and has not
    /// given back yet, for want of a checkpoint.
    unreleased: Vec<Option<Copied>>,
    /// When the output last said how far it holds the recording.
    checkpointed: Instant,
}

/// One ring as the merger reads it.
struct MergerRing {
    ring: RingBuffer,
    /// For a CPU's ring, the ring position of its shard's first byte.
    base: Option<u64>,
    /// A CPU's ring the merger reads first: it gives back what it took
    /// once its output holds it and says so.
    reads_first: bool,
    /// How far the last round read the ring (`None` before the first).
    read_to: Option<u64>,
}

/// What the merger took from the rings it reads first goes back to the
/// kernel after a checkpoint, which comes once a ring holds this share of
/// itself taken and not given back (its writer spills at half), or this
/// long after the last: in a DWARF storm a checkpoint after every round
/// was a sixth of the merger's samples, and in a 16-vCPU guest, where
/// rounds come every 50 ms, checkpoints every 50 ms were still 7% of
/// them. A recording killed whole loses what its rings held, and what
/// the output took past its checkpoint: a quarter second at most (perf
/// record's file holds nothing readable then).
const CHECKPOINT_SHARE: u64 = 8;
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// The merger's life: wait for `b`, write rounds until `f`, finish;
/// `say` answers the coordinator with each `--switch-output` window
/// finished, and `c`. `None` when the coordinator went away first.
pub(super) fn serve(
    dir: &RecordingDir,
    output: &Destination,
    options: &MergeOptions,
    watched: &[WatchedRing],
    commands: &mut File,
    mut say: impl FnMut(Message) -> std::io::Result<()>,
) -> Result<Option<Merged>, Stopped> {
    let mut rings = Rings {
        rings: watched
            .iter()
            .map(|w| {
                // Its pages faulted in a chunk at a time as reads reach
                // them: Linux 6.1 faults them in one by one (6.18 maps
                // them at mmap), which in a 16-vCPU guest was a third of
                // the merger's samples; all at once made the start at 64
                // vCPUs 8 s slower.
                let mut ring = RingBuffer::map_reader(w.event, w.pages)?;
                if let Some(slot) = w.claim.clone() {
                    ring.share_claim(slot);
                }
                Ok(MergerRing {
                    ring,
                    base: w.base,
                    reads_first: w.reads_first,
                    read_to: None,
                })
            })
            .collect::<std::io::Result<Vec<_>>>()?,
        smallest: watched
            .iter()
            .filter(|w| w.base.is_some())
            .map(|w| (w.pages * shardrec_sys::ring::page_size()) as u64)
            .min()
            .unwrap_or(0),
        copies: true,
        unreleased: watched.iter().map(|_| None).collect(),
        checkpointed: Instant::now(),
    };
    if next_event(commands, None, None)? != Event::Order(Order::Begin) {
        return Ok(None);
    }
    match output {
        Destination::File(target) => one_output(
            dir,
            LiveOutput::File(target),
            None,
            (options, &mut rings, commands),
            say,
        ),
        Destination::Stream(stream) => {
            let output = LiveOutput::Stream(File::from(stream.try_clone()?));
            one_output(
                dir,
                output,
                Some(stream.as_fd()),
                (options, &mut rings, commands),
                say,
            )
        }
        Destination::Windows(windows) => {
            serve_windows(windows, options, &mut rings, commands, &mut say)
        }
    }
}

/// What every output's merge works with.
type Context<'c> = (&'c MergeOptions, &'c mut Rings, &'c mut File);

/// The whole recording in `dir` into `output`; `say` answers `b` once
/// the output's head is written.
fn one_output(
    dir: &RecordingDir,
    output: LiveOutput,
    stream: Option<BorrowedFd>,
    (options, rings, commands): Context,
    mut say: impl FnMut(Message) -> std::io::Result<()>,
) -> Result<Option<Merged>, Stopped> {
    let (meta, _) = dir.read_surviving_meta()?;
    let layouts = meta.layouts();
    let mut merge = LiveMerge::start(dir.path(), &meta, &layouts, output, options)?;
    say(Message::Started)?;
    merge.rings_are(rings.smallest);
    match follow(&mut merge, rings, commands, stream)? {
        Event::Order(Order::Conclude) => finish(merge, dir, options).map(Some),
        _ => {
            merge.abandon();
            Ok(None)
        }
    }
}

/// `--switch-output`'s windows, each into a perf.data of its own: those
/// closed and not yet written first (they are whole: each is only
/// finished), then the window being recorded, followed until it closes,
/// and so on until `f`.
fn serve_windows(
    windows: &WindowsOutput,
    options: &MergeOptions,
    rings: &mut Rings,
    commands: &mut File,
    say: &mut impl FnMut(Message) -> std::io::Result<()>,
) -> Result<Option<Merged>, Stopped> {
    for (window, output) in &windows.closed {
        let done = finish_closed(windows, *window, output, options);
        say(Message::WindowDone(done))?;
    }
    let mut window = windows.current;
    let mut started = false;
    loop {
        let dir = windows.root.window(window);
        let (meta, _) = dir.read_surviving_meta()?;
        let layouts = meta.layouts();
        let output = Output::resolve(&dir.window_output_path())?;
        let output = LiveOutput::File(&output);
        let mut merge = LiveMerge::start(dir.path(), &meta, &layouts, output, options)?;
        if !std::mem::replace(&mut started, true) {
            say(Message::Started)?;
        }
        merge.rings_are(rings.smallest);
        rings.copies = true;
        let switch = loop {
            match follow(&mut merge, rings, commands, None)? {
                Event::Order(Order::Conclude) => return finish(merge, &dir, options).map(Some),
                // The writers switch next: what their rings hold past
                // their tails may be the next window's.
                Event::Order(Order::Close) => {
                    rings.copies = false;
                    say(Message::Closing)?;
                }
                Event::Order(Order::Switch(switch)) => break switch,
                _ => {
                    merge.abandon();
                    return Ok(None);
                }
            }
        };
        let injected = shardrec_control::fault::inject(Site::MergeWindow).and_then(|f| f.error());
        let written = match injected {
            Some(error) => Err(Stopped::from(error)),
            None => finish(merge, &dir, options),
        };
        let written = written.and_then(|merged| publish(windows, &dir, merged, &switch.output));
        say(Message::WindowDone(window_done(
            window,
            &switch.output,
            written,
        )))?;
        rings.based_at(&switch.bases);
        window += 1;
    }
}

/// Window `window`, closed and whole, into `output`.
fn finish_closed(
    windows: &WindowsOutput,
    window: u32,
    output: &Path,
    options: &MergeOptions,
) -> WindowDone {
    let dir = windows.root.window(window);
    // A merger killed after its rename, before it said so: done.
    if !dir.path().exists() && output.exists() {
        return window_done(window, output, Ok(()));
    }
    let written = (|| {
        let (meta, _) = dir.read_surviving_meta()?;
        let layouts = meta.layouts();
        let path = dir.window_output_path();
        let merge = LiveMerge::start(
            dir.path(),
            &meta,
            &layouts,
            LiveOutput::File(&Output::resolve(&path)?),
            options,
        )?;
        let merged = finish(merge, &dir, options)?;
        publish(windows, &dir, merged, output)
    })();
    window_done(window, output, written)
}

/// How writing window `window` into `output` went.
fn window_done(window: u32, output: &Path, written: Result<(), Stopped>) -> WindowDone {
    WindowDone {
        window,
        output: output.to_path_buf(),
        written: written.is_ok(),
        why: match written {
            Err(Stopped::Failed(why)) => Some(why),
            _ => None,
        },
    }
}

/// A window written: its `meta` completed with what its shards held, its
/// perf.data given its name, its directory removed (unless the shards are
/// kept).
fn publish(
    windows: &WindowsOutput,
    dir: &RecordingDir,
    merged: Merged,
    output: &Path,
) -> Result<(), Stopped> {
    let (mut meta, _) = dir.read_surviving_meta()?;
    if let Some(stats) = meta.stats.as_mut() {
        stats.cpus = merged.cpus;
    }
    dir.write_meta(&meta)?;
    shardrec_shard::output::move_output(&dir.window_output_path(), output)?;
    if !windows.keep_shards {
        let _ = std::fs::remove_dir_all(dir.path());
    }
    Ok(())
}

/// Rounds until a command comes (or the stream's reader leaves).
fn follow(
    merge: &mut LiveMerge,
    rings: &mut Rings,
    commands: &mut File,
    stream: Option<BorrowedFd>,
) -> Result<Event, Stopped> {
    // A file's rounds come as the rings the merger drains fill: the CPUs'
    // (the VIP drains the side band's).
    let paced = |r: &&MergerRing| stream.is_some() || r.base.is_some();
    let sizes = rings
        .rings
        .iter()
        .filter(paced)
        .map(|r| r.ring.data_size() as u64);
    let mut pace = Pace::new(sizes.collect(), stream.is_some());
    loop {
        let look = pace.look(
            rings
                .rings
                .iter()
                .filter(paced)
                .map(|r| r.ring.head())
                .collect(),
        );
        match look.round {
            true => rings.rounds(merge)?,
            false => rings.give_back_when_due(merge)?,
        }
        let wait = rings
            .checkpoint_in()
            .map_or(look.wait, |c| c.min(look.wait));
        match next_event(commands, stream, Some(wait))? {
            Event::Timeout => {}
            Event::ReaderLeft => return Err(Stopped::ReaderLeft),
            command => return Ok(command),
        }
    }
}

/// The end of the output in `dir` (`meta` final): the rest of every
/// shard, the header, and what each CPU's shard held.
fn finish(merge: LiveMerge, dir: &RecordingDir, options: &MergeOptions) -> Result<Merged, Stopped> {
    let (meta, damage) = dir.read_surviving_meta()?;
    let damage = damage.map(|e| shardrec_shard::with_causes(&e));
    let (report, summaries) = merge.finish(&meta, damage)?;
    let report = Box::new(report);
    // The stop wrote meta with its counts before asking for the end.
    let Some(mut stats) = meta.stats.clone() else {
        let cpus = Vec::new();
        return Ok(Merged { report, cpus });
    };
    stats.cpus.clear();
    for (&cpu, summary) in meta.cpus.iter().zip(&summaries) {
        // The CPU's bytes, whether its writer wrote them or the merger
        // took them from the ring (the shard then has holes there; it
        // may end before the last ones).
        let written = std::fs::metadata(dir.shard_path(cpu)).map_or(0, |m| m.len());
        let bytes = written.max(summary.valid_len as u64);
        stats.count_cpu(cpu, bytes, summary);
        if !options.consume {
            // The shards are kept: a merge of a time window reads their
            // index (without one it walks them).
            let index = shardrec_shard::shard_index::ShardIndex::of(summary);
            let _ = dir.write_index(cpu, &index);
        }
    }
    Ok(Merged {
        report,
        cpus: stats.cpus,
    })
}

impl Rings {
    /// The next window's shards begin at `bases` in the CPUs' rings.
    fn based_at(&mut self, bases: &[u64]) {
        let cpus = self.rings.iter_mut().filter_map(|r| r.base.as_mut());
        for (base, &next) in cpus.zip(bases) {
            *base = next;
        }
    }

    /// A round, and at once another while one left bytes past a ring's
    /// end: pacing goes by the heads, and would leave them for the ring's
    /// next round's worth, or, once the rings are still, in the rings.
    fn rounds(&mut self, merge: &mut LiveMerge) -> std::io::Result<()> {
        // Three suffice: up to a ring's end, around it, the rest. A
        // damaged ring's bytes, which no round takes, end it too.
        for _ in 0..4 {
            if !self.round(merge)?.1 {
                break;
            }
        }
        Ok(())
    }

    /// One round, each ring read from its control page. What the merger
    /// took from the rings it reads first goes back to the kernel once
    /// the output holds the round and its checkpoint says so; its claims
    /// on what it read in place, once the round is out. Returns the
    /// round and whether it left bytes past a ring's end.
    fn round(
        &mut self,
        merge: &mut LiveMerge,
    ) -> std::io::Result<(shardrec_merge::live::Round, bool)> {
        let rings = &self.rings;
        // How far the writers kept first: everything before is in the
        // files read next.
        let kept: Vec<u64> = rings.iter().map(|r| r.ring.kept()).collect();
        let written: Vec<u64> = rings
            .iter()
            .zip(&kept)
            .filter_map(|(r, kept)| Some(kept.saturating_sub(r.base?)))
            .collect();
        let mut taken = TakenFromRings {
            // Behind its writer by a quarter ring or more, a ring's round
            // reads its shard and claims nothing: a claim would last that
            // long round, and the kernel could come round to it (a
            // merger that took up a stalled one's output, 16 MiB behind,
            // was overtaken in turn).
            may_claim: (rings.iter().zip(&kept))
                .map(|(r, &kept)| {
                    let quarter = r.ring.data_size() as u64 / 4;
                    r.read_to.is_some_and(|read| read + quarter > kept)
                })
                .collect(),
            ..TakenFromRings::default()
        };
        let mut read_to = Vec::new();
        let copies = self.copies;
        let round = merge.round(
            &written,
            |i, at, into: &mut Vec<u8>| {
                let ring = &rings[i];
                let from = ring.base.filter(|_| copies)? + at;
                taken.take(i, ring, from, into)
            },
            |taken| {
                read_to = rings
                    .iter()
                    .zip(&kept)
                    .enumerate()
                    .map(|(i, (r, kept))| match r.base {
                        Some(base) => base + taken[i],
                        None => *kept,
                    })
                    .collect();
                read_to.clone()
            },
            || rings.iter().map(|r| r.ring.head()).collect(),
        );
        // Nothing reads the rings in place any more.
        let mut read_whole = true;
        for &i in &taken.claimed {
            read_whole &= self.rings[i].ring.unclaim();
        }
        let round = round?;
        if !read_whole {
            return Err(std::io::Error::other(ClaimBroken));
        }
        for (i, copied) in taken.held {
            self.unreleased[i] = Some(copied.up_to(read_to[i]));
        }
        for (ring, read_to) in self.rings.iter_mut().zip(read_to) {
            ring.read_to = Some(read_to);
        }
        self.give_back_when_due(merge)?;
        Ok((round, taken.left))
    }

    /// How long until what the merger took and holds is due a
    /// checkpoint, if it holds any: a file's rounds may be far apart.
    fn checkpoint_in(&self) -> Option<Duration> {
        let holds = self.unreleased.iter().any(Option::is_some);
        holds.then(|| CHECKPOINT_EVERY.saturating_sub(self.checkpointed.elapsed()))
    }

    /// Gives the rings back what the merger took from them, once the
    /// output holds it and says so (see [`CHECKPOINT_SHARE`]): a merger
    /// that dies before leaves it in the rings, for the next one (or
    /// their writers, which spill it into the shards).
    fn give_back_when_due(&mut self, merge: &mut LiveMerge) -> std::io::Result<()> {
        let pending = self.rings.iter().zip(&self.unreleased);
        let mut pending = pending.filter_map(|(r, copied)| Some((r, copied.as_ref()?)));
        let due = self.checkpointed.elapsed() >= CHECKPOINT_EVERY
            || pending.any(|(r, copied)| {
                let share = r.ring.data_size() as u64 / CHECKPOINT_SHARE;
                copied.end().saturating_sub(r.ring.tail()) >= share
            });
        if !due || self.unreleased.iter().all(Option::is_none) {
            return Ok(());
        }
        merge.checkpoint()?;
        self.checkpointed = Instant::now();
        for (r, copied) in self.rings.iter_mut().zip(&mut self.unreleased) {
            if let Some(copied) = copied.take() {
                r.ring.release_copied(copied);
            }
        }
        Ok(())
    }
}

/// What a round takes of what the rings hold past what their writers
/// wrote.
#[derive(Default)]
struct TakenFromRings {
    /// The rings read first that were taken from, to give back once
    /// secured.
    held: Vec<(usize, Copied)>,
    /// The rings read in place, whose claims go once the round is out.
    claimed: Vec<usize>,
    /// Whether a ring was read up to its end, or copied around it, and
    /// holds more past that.
    left: bool,
    bytes: u64,
    /// By ring: whether the round may read it in place.
    may_claim: Vec<bool>,
}

impl TakenFromRings {
    /// Ring `i`'s bytes from `from` (where its shard has been read to)
    /// to its head, if its writer has not written past there nor does so
    /// meanwhile (the shard then holds the bytes), and if there are not
    /// too many. A ring read first is read in place, under a claim that
    /// keeps its writer from freeing them (`shardrec_sys::ring::RingClaims`),
    /// but for bytes that wrap around its end: those, and the others',
    /// are copied into `into`. Each ring's bytes, at most:
    ///
    /// - of a ring the merger reads first, up to the whole ring, and up to
    ///   [`ROUND_COPY_BUDGET`] in a round: its writer spills only once it
    ///   is half full, and only what the merger did not take;
    /// - of another, up to half the ring: its writer writes nothing short
    ///   of its wakeup watermark (a quarter) on its own. A quiet CPU then
    ///   neither holds the output back nor is woken; nor does one a busy
    ///   thread just left, whose last quarter ring would otherwise wait
    ///   until the CPU is busy again (a 64 KiB limit here held a DWARF
    ///   storm's output 0.5 to 1.5 s behind each time its thread moved).
    ///   Up to the wakeup watermark only, a round waited for a woken
    ///   writer up to 50 ms, and its reader held as much.
    fn take<'r>(
        &mut self,
        i: usize,
        ring: &'r MergerRing,
        from: u64,
        into: &mut Vec<u8>,
    ) -> Option<Unwritten<'r>> {
        let size = ring.ring.data_size() as u64;
        let most = match ring.reads_first {
            true if self.bytes >= ROUND_COPY_BUDGET => return None,
            true => size,
            false => size / 2,
        };
        let before = into.len();
        // Only a ring read first has a claim slot.
        let taken = match ring.ring.claim_slot() {
            Some(_) if !self.may_claim[i] => return None,
            Some(_) => ring.ring.take_unread(from, most, into)?,
            None => Taken {
                in_place: None,
                copied: ring.ring.peek_unread(from, most, into)?,
                left: false,
            },
        };
        self.left |= taken.left;
        let (unwritten, bytes) = match taken.in_place {
            Some(bytes) => {
                self.claimed.push(i);
                (Unwritten::InPlace(bytes), bytes.len())
            }
            None => (Unwritten::Copied, into.len() - before),
        };
        let copied = taken.copied;
        if ring.reads_first {
            self.bytes += bytes as u64;
            self.held.push((i, copied));
        }
        Some(unwritten)
    }
}

/// What the merger waits for.
#[derive(Debug, PartialEq, Eq)]
enum Event {
    /// What the coordinator asks.
    Order(Order),
    /// The command pipe's end: the coordinator abandons the output.
    Ended,
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
    Ok(Order::read_from(commands)?.map_or(Event::Ended, Event::Order))
}
