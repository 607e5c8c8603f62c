//! A live merge that frees each shard's bytes once they are in the output
//! ([`shardrec_shard::merged_prefix`]), as the merge after the fact does
//! ([`crate::consume`]): the recording then never needs twice its size on
//! disk, and a merger killed along the way is completed from where its
//! output stopped by `shardrec merge` (or the recorder's own merge at the
//! stop): the output's part as written, the shards' from where it had got.
//!
//! Every [`CHECKPOINT`] bytes of output, after a round, the output is
//! flushed, `merged.prefix` says how far it holds the recording, and only
//! then is each shard punched up to its first record not yet written. A
//! stream (`-o -`) is freed behind the same way: the disk holds what its
//! reader has not been sent, and a recording killed leaves the rest, which
//! a merge makes into a perf.data of its own.
//!
//! A punch holds the shard's lock, which its writer's next write waits
//! for: punching 32 MiB at once while recording lost 2.3k samples of 118k
//! (`-a --call-graph dwarf -F 20000 -m 64`, whose 256 KiB rings fill in
//! about 1.5 ms), against about ten with the shards kept. So the shards
//! are punched by a thread of their own, in steps with a pause between
//! them for the writers, while the merge goes on; and behind a file output
//! only where the rings can absorb a write held up that long
//! ([`PUNCH_RING_MIN`]): in 256 KiB rings that still lost 130 to 670 of
//! 120k. A stream's shards are always freed: the disk must hold no more
//! than what its reader has not been sent.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use shardrec_control::fault::Site;
use shardrec_shard::merged_prefix::{MergedPrefix, PrefixSlots};
use shardrec_shard::scan::file_name;
use shardrec_shard::RecordingDir;

use super::rounds::Rounds;
use crate::consume::{open_to_punch, punch};

/// Output bytes between two checkpoints.
pub const CHECKPOINT: u64 = 32 << 20;

/// The smallest ring behind which a file output's shards are punched
/// while recording (4 MiB is the default ring: 25 ms of a DWARF storm).
pub const PUNCH_RING_MIN: u64 = 1 << 20;

/// The most one punch frees while the writers append to the same files,
/// and the pause after it, for a writer waiting on the file's lock.
const PUNCH_STEP: u64 = 1 << 20;
const PUNCH_PAUSE: Duration = Duration::from_micros(200);

/// When [`Freeing::after_round`] writes a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Checkpoint {
    /// Every [`CHECKPOINT`] bytes of output, at a round's end, the shards
    /// punched behind it where they are while recording.
    Periodic,
    /// Now, round's end or not: a merger that reads the rings first gives
    /// them back what it took only once the output says it holds it.
    Now,
}

/// The shards being freed.
pub struct Freeing {
    /// Punches the shards behind the checkpoints.
    puncher: Puncher,
    /// What the next checkpoint writes: each shard, by file name in the
    /// merge's order, is given where it stands then.
    prefix: MergedPrefix,
    /// Data bytes written at the last checkpoint.
    checkpointed: u64,
    /// Whether a checkpoint was written: the shards then lack what the
    /// output holds.
    pub freed: bool,
    /// The first sample's time in what an earlier merger of this output
    /// wrote (0 if none): the shards no longer hold it.
    first_sample_before: u64,
    /// Whether the shards are punched while the writers append to them.
    punch_while_recording: bool,
    /// `merged.prefix`, once this merger has written it.
    slots: Option<PrefixSlots>,
}

impl Freeing {
    /// Frees the shards at `paths` (in the merge's order), behind a file
    /// or, `streamed`, a stream, with checkpoints at `prefix_path`, made
    /// ready now (the first written only at the first checkpoint): the
    /// live merger opens its output before the recording starts.
    pub fn open(paths: &[PathBuf], streamed: bool, prefix_path: &Path) -> io::Result<Freeing> {
        let files = open_to_punch(paths)?;
        let prefix = prefix_of(paths, streamed);
        let slots = PrefixSlots::prepare(prefix_path, &prefix)?;
        Ok(Freeing {
            puncher: Puncher::start(files, vec![0; paths.len()]),
            prefix,
            checkpointed: 0,
            freed: false,
            punch_while_recording: streamed,
            first_sample_before: 0,
            slots: Some(slots),
        })
    }

    /// Frees the shards at `paths` behind a file output an earlier merger
    /// wrote up to `prefix`, its last checkpoint: they are freed up to it.
    pub fn resume(paths: &[PathBuf], prefix: &MergedPrefix) -> io::Result<Freeing> {
        let files = open_to_punch(paths)?;
        let next = prefix_of(paths, false);
        let punched = (next.shards.iter()).map(|(name, _)| prefix.resume(name).start as u64);
        Ok(Freeing {
            puncher: Puncher::start(files, punched.collect()),
            prefix: next,
            checkpointed: prefix.data_len,
            freed: true,
            punch_while_recording: false,
            first_sample_before: prefix.first_sample,
            slots: None,
        })
    }

    /// After a round of an output whose data section starts at
    /// `data_offset` and holds `data_len` bytes, all of them flushed by
    /// `flush`: writes down how far it holds the recording, `when` says,
    /// and periodically frees the shards behind it.
    pub fn after_round(
        &mut self,
        recording: &RecordingDir,
        rounds: &Rounds,
        (data_offset, data_len): (u64, u64),
        flush: impl FnOnce() -> io::Result<()>,
        when: Checkpoint,
    ) -> io::Result<()> {
        if !self.due(when, data_len) {
            return Ok(());
        }
        self.checkpoint(recording, rounds, (data_offset, data_len), flush)?;
        match when == Checkpoint::Periodic && self.punch_while_recording {
            true => self.puncher.punch_to(self.points(rounds)),
            false => Ok(()),
        }
    }

    /// Whether [`after_round`](Self::after_round) writes a checkpoint
    /// `when` says, with `data_len` bytes of data written.
    pub fn due(&self, when: Checkpoint, data_len: u64) -> bool {
        when == Checkpoint::Now || data_len >= self.checkpointed + CHECKPOINT
    }

    /// Each shard's first record not yet written, in the merge's order.
    fn points(&self, rounds: &Rounds) -> Vec<u64> {
        rounds.resume_points().map(|p| p.start as u64).collect()
    }

    /// Flushes the output (`flush`) and writes down how far it holds the
    /// recording, whether or not a round ended there: a merger taken up
    /// from a checkpoint inside a round keeps perf's rule, as all it
    /// reads was published after the look that the last FINISHED_ROUND
    /// covered; a merge after the fact, which sorts what is left, ends
    /// no round before the latest time written (`MergedPrefix::latest`).
    fn checkpoint(
        &mut self,
        recording: &RecordingDir,
        rounds: &Rounds,
        (data_offset, data_len): (u64, u64),
        flush: impl FnOnce() -> io::Result<()>,
    ) -> io::Result<()> {
        flush()?;
        crate::data_out::injected_fault(&[Site::MergeCheckpoint])?;
        let first_sample = rounds
            .followers
            .iter()
            .map(|f| f.summary.first_sample)
            .chain([self.first_sample_before])
            .filter(|&t| t > 0)
            .min();
        let prefix = &mut self.prefix;
        let shards = prefix.shards.iter_mut().zip(&mut prefix.taken);
        for (((_, start), (_, taken)), point) in shards.zip(rounds.resume_points()) {
            (*start, *taken) = (point.start as u64, point.taken as u64);
        }
        (prefix.data_offset, prefix.data_len) = (data_offset, data_len);
        prefix.until = rounds.cut();
        prefix.latest = rounds.latest();
        prefix.first_sample = first_sample.unwrap_or(0);
        let prefix = &self.prefix;
        let written = match self.slots.as_mut() {
            Some(slots) => slots.write(prefix)?,
            None => false,
        };
        if !written {
            let path = recording.merged_prefix_path();
            self.slots = Some(PrefixSlots::create(&path, prefix)?);
        }
        self.checkpointed = data_len;
        self.freed = true;
        Ok(())
    }

    /// Punches the shards of a file output while recording, rings of
    /// `smallest_ring` bytes at least permitting ([`PUNCH_RING_MIN`]).
    pub fn rings_are(&mut self, smallest_ring: u64) {
        self.punch_while_recording |= smallest_ring >= PUNCH_RING_MIN;
    }

    /// The writers are done: the shards go with their directory once the
    /// output is whole, so what is left is not punched; waits for the
    /// punch under way.
    pub fn stop_punching(&mut self) -> io::Result<()> {
        self.puncher.stop()
    }
}

/// A checkpoint's [`MergedPrefix`] for the shards at `paths`, each at
/// its start, for the checkpoints to fill in.
fn prefix_of(paths: &[PathBuf], streamed: bool) -> MergedPrefix {
    let names = paths.iter().map(|p| (file_name(p), 0));
    MergedPrefix {
        data_offset: 0,
        data_len: 0,
        until: 0,
        latest: 0,
        shards: names.clone().collect(),
        taken: names.collect(),
        first_sample: 0,
        streamed,
    }
}

/// A thread that punches the shards up to the points it is sent, in
/// steps with a pause between them.
struct Puncher {
    points: Option<mpsc::Sender<Vec<u64>>>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Puncher {
    /// Punches `files` (none where a shard has no file yet), each from
    /// where it is `punched` already.
    fn start(files: Vec<Option<File>>, mut punched: Vec<u64>) -> Puncher {
        let (points, received) = mpsc::channel::<Vec<u64>>();
        let thread = std::thread::spawn(move || {
            while let Ok(mut points) = received.recv() {
                // Only the latest points matter.
                while let Ok(later) = received.try_recv() {
                    points = later;
                }
                let shards = files.iter().zip(&mut punched).zip(&points);
                for ((file, punched), &to) in shards {
                    if let Some(file) = file {
                        *punched = punch_in_steps(file, *punched, to)?;
                    }
                }
            }
            Ok(())
        });
        Puncher {
            points: Some(points),
            thread: Some(thread),
        }
    }

    /// Punches each shard up to its point, once it is done with the
    /// points before; a punch that failed fails here.
    fn punch_to(&mut self, points: Vec<u64>) -> io::Result<()> {
        if self.thread.as_ref().is_some_and(JoinHandle::is_finished) {
            self.stop()?;
        }
        if let Some(sender) = &self.points {
            // A thread gone after an error said so above.
            let _ = sender.send(points);
        }
        Ok(())
    }

    /// Waits for the punches asked for; what went wrong, if anything.
    fn stop(&mut self) -> io::Result<()> {
        self.points = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("the thread punching the shards panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for Puncher {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// Frees `file` from `from` to `to` a [`PUNCH_STEP`] at a time, pausing
/// between steps; how far it is freed.
fn punch_in_steps(file: &File, from: u64, to: u64) -> io::Result<u64> {
    let mut at = from;
    while at < to {
        let step = (at + PUNCH_STEP).min(to);
        let reached = punch(file, at, step)?;
        if reached < step {
            // The last partial page, or a file system that cannot punch.
            return Ok(reached.max(at));
        }
        at = reached;
        if at < to {
            std::thread::sleep(PUNCH_PAUSE);
        }
    }
    Ok(at)
}
