//! The recording's output: its directory and `meta`, the live merger
//! that writes perf.data as the recording goes, the `--switch-output`
//! windows and their merger, and `--max-size`.

use std::sync::Arc;

use shardrec_control::restart::Helper;
use shardrec_shard::{EventLoss, Meta, RecordingDir, Stats, StopReason, WindowCursor};

use super::recovery::Ended;
use crate::config::OutputTarget;
use crate::meta::unix_ns;
use crate::plan::Plan;
use crate::switch_output::Windows;
use crate::{RecordConfig, RecordError};
use shardrec_live_merger::{self as live_merger, LiveMerger, Outcome, Switch, WatchedRing};

/// How often the coordinator looks while a size limit is set: at most
/// this long a rate past the limit.
const LIMIT_TICK_MS: u16 = 20;

/// Where the recording goes, and what writes it there.
pub(super) struct RecordingOutput {
    /// The recording's directory (with `--switch-output`, the current
    /// window's).
    pub(super) dir: RecordingDir,
    pub(super) meta: Meta,
    /// Bytes of `synth.shard`, once written.
    pub(super) synth_bytes: u64,
    /// The shards are the product (`--no-merge`): sync them at the end. A
    /// merge that follows reads them from the page cache and deletes them,
    /// so most of their pages never need writing; perf does not sync
    /// perf.data either.
    pub(super) sync_shards: bool,
    /// `--switch-output`'s windows; `dir` is then the current one.
    pub(super) windows: Option<Windows>,
    /// A switch of output was asked for (SIGUSR2, or `snapshot`).
    pub(super) switch_asked: bool,
    /// Where the live merger writes, and how (with `--switch-output`,
    /// the windows say which).
    live_output: Option<(live_merger::Destination, shardrec_merge::MergeOptions)>,
    /// The live merger, once forked.
    live: Option<LiveMerger>,
    /// Whether the live merge began (`synth.shard` and `meta.start` are
    /// whole).
    live_began: bool,
    /// How many times the live merger was restarted.
    live_restarts: usize,
    /// The live merger reads the CPUs' rings first, into a file it
    /// checkpoints ([`RecordingOutput::merger_reads_first`]).
    reads_first: bool,
    /// `--max-size`: stop once the rings have produced this many bytes.
    max_size: Option<u64>,
}

/// How many times a live merger that dies is restarted while recording;
/// past that, the merge at the stop completes its output.
pub(super) const MAX_LIVE_RESTARTS: usize = shardrec_control::restart::times(Helper::LiveMerger);

impl RecordingOutput {
    /// The output `config` asks for, recorded in `dir` with `meta` as
    /// known at the start; merged live (into `stream`, when given) unless
    /// the recording makes several outputs or none.
    pub(super) fn new(
        config: &RecordConfig,
        target: &OutputTarget,
        plan: &Plan,
        stream: Option<Arc<std::os::fd::OwnedFd>>,
        mut dir: RecordingDir,
        meta: Meta,
    ) -> Result<RecordingOutput, RecordError> {
        // Merged as the rings fill unless the records are known only at
        // a snapshot, the tasks only at the end, or there is no output.
        let live = !plan.synthesizes_at_end() && !config.no_merge;
        let windows = match &config.switch_output {
            Some(switch) => {
                let output = target.merged.path().to_path_buf();
                let windows = Windows::start(dir.clone(), switch.clone(), output, live)?;
                dir = dir.create_window(windows.current)?;
                Some(windows)
            }
            None => None,
        };
        let live = live && windows.as_ref().is_none_or(Windows::live);
        let live_output = live.then(|| {
            let output = match stream {
                Some(stream) => live_merger::Destination::Stream(stream),
                None => live_merger::Destination::File(target.merged.clone()),
            };
            (output, config.merge.clone())
        });
        let reads_first = match (&live_output, &windows) {
            (Some((live_merger::Destination::File(merged), options)), None) => {
                shardrec_merge::live::frees_shards(&dir, merged, options)
            }
            _ => false,
        };
        Ok(RecordingOutput {
            dir,
            meta,
            synth_bytes: 0,
            sync_shards: config.no_merge,
            windows,
            switch_asked: false,
            live_output,
            live: None,
            live_began: false,
            live_restarts: 0,
            reads_first,
            max_size: config.max_size,
        })
    }

    /// Whether the live merger reads the CPUs' rings first, straight into
    /// the output, and the writers spill into the shards only what it has
    /// not taken once a ring is half full: where its output is one file
    /// whose merge frees the shards behind it, and so writes down how far
    /// it holds the recording each round it read a ring (a merger that
    /// dies is then taken up from there, and what it read past that is
    /// still in the rings). A stream's merger would hold the rings while
    /// its reader is late; windows and kept shards keep every byte in the
    /// shards. A compressed output (`-z`) is read first too: its
    /// checkpoints end a zstd frame, where a new merger starts its own.
    pub(super) fn merger_reads_first(&self) -> bool {
        self.reads_first
    }

    /// Whether a live merger that reads the rings first runs: the quiet
    /// rings are its to take, not their writers'.
    pub(super) fn merger_reading_first(&self) -> bool {
        self.reads_first && self.live.as_ref().is_some_and(|l| !l.ended)
    }

    /// With `--switch-output`: the recording's directory and the window
    /// being recorded, for a helper that goes on from window to window.
    pub(super) fn window_at(&self) -> Option<WindowCursor> {
        let windows = self.windows.as_ref()?;
        Some(WindowCursor::new(windows.root.clone(), windows.current))
    }

    /// Forks the live merger over these rings, when the output is merged
    /// while recording.
    pub(super) fn spawn_live_merger(
        &mut self,
        rings: Vec<WatchedRing<'_>>,
    ) -> Result<(), RecordError> {
        if let Some((output, options)) = self.live_destination() {
            let restarted = false;
            let live = LiveMerger::spawn(&self.dir, output, options, rings, restarted);
            self.live = Some(live.map_err(RecordError::system("starting the live merger"))?);
        }
        Ok(())
    }

    /// Where a live merger forked now writes: with `--switch-output`, the
    /// windows from the oldest one not yet written on.
    fn live_destination(&self) -> Option<(live_merger::Destination, shardrec_merge::MergeOptions)> {
        let (output, options) = self.live_output.clone()?;
        match self.windows.as_ref().and_then(Windows::live_output) {
            Some(windows) => Some((live_merger::Destination::Windows(windows), options)),
            None => Some((output, options)),
        }
    }

    /// A `--switch-output` window is about to close: the live merger
    /// copies nothing more from the rings until the next one begins.
    pub(super) fn closing_live(&mut self) {
        let (Some(live), Some(windows)) = (self.live.as_mut(), self.windows.as_mut()) else {
            return;
        };
        windows.written(live.closing());
    }

    /// A `--switch-output` window closed: the live merger finishes it into
    /// `switch.output` and goes on with the next.
    pub(super) fn switch_live(&mut self, switch: &Switch) {
        if let Some(live) = self.live.as_mut() {
            live.switch(switch);
        }
    }

    /// Takes note of the windows the live merger finished.
    pub(super) fn windows_written(&mut self) {
        let (Some(live), Some(windows)) = (self.live.as_mut(), self.windows.as_mut()) else {
            return;
        };
        windows.written(live.windows_done());
    }

    /// `synth.shard` and `meta.start` are whole: the live merge begins,
    /// and this returns once its output's head is written, before the
    /// events are enabled, as perf record writes its header.
    pub(super) fn begin(&mut self) {
        self.live_began = true;
        if let Some(live) = self.live.as_mut() {
            let done = live.begin_and_wait();
            if let Some(windows) = self.windows.as_mut() {
                windows.written(done);
            }
        }
    }

    /// Whether the live merger writes perf's pipe format into a stream.
    pub(super) fn streamed(&self) -> bool {
        matches!(
            self.live_output,
            Some((live_merger::Destination::Stream(_), _))
        )
    }

    /// The live merger died while recording: a new one goes on from
    /// where its file output stopped (over the same `rings`; with
    /// `--switch-output`, from the oldest window it did not finish), up to
    /// [`MAX_LIVE_RESTARTS`] times, and its process id is returned.
    pub(super) fn restart_live_merger(
        &mut self,
        rings: Vec<WatchedRing<'_>>,
    ) -> Result<Option<nix::unistd::Pid>, RecordError> {
        if self.streamed() {
            return Ok(None);
        }
        if self.live_restarts >= MAX_LIVE_RESTARTS || !self.live.as_ref().is_some_and(|l| l.ended) {
            return Ok(None);
        }
        // What the one that died said it finished is not to be done again.
        if let Some(dead) = self.live.take() {
            let (_, done) = dead.outcome();
            if let Some(windows) = self.windows.as_mut() {
                windows.written(done);
            }
        }
        let Some((output, options)) = self.live_destination() else {
            return Ok(None);
        };
        let mut live = LiveMerger::spawn(&self.dir, output, options, rings, true)
            .map_err(RecordError::system("starting the live merger"))?;
        if self.live_began {
            live.begin();
        }
        let pid = live.pid;
        self.live = Some(live);
        self.live_restarts += 1;
        Ok(Some(pid))
    }

    /// The merger's process (the live merger's or the windows'), which
    /// tracepoints leave out with the other helpers.
    pub(super) fn merger_pid(&self) -> Option<nix::unistd::Pid> {
        let windows = self.windows.as_ref().and_then(Windows::merger_pid);
        windows.or(self.live.as_ref().map(|l| l.pid))
    }

    /// Whether the output needs the coordinator to look at it now and
    /// then: for `--max-size`, and for `--switch-output`'s windows.
    pub(super) fn needs_ticks(&self) -> bool {
        self.max_size.is_some() || self.windows.is_some()
    }

    /// The longest the coordinator may sleep for the output's sake, if
    /// shorter than `tick`.
    pub(super) fn tick_ms(&self, tick: u16) -> u16 {
        let tick = match self.max_size {
            Some(_) => tick.min(LIMIT_TICK_MS),
            None => tick,
        };
        match self.windows.as_ref().and_then(|w| w.tick_ms(LIMIT_TICK_MS)) {
            Some(switch) => tick.min(switch.max(1)),
            None => tick,
        }
    }

    /// `--max-size`: the limit, once the rings have produced `produced`
    /// bytes and `synth.shard` the rest to reach it (the rings' `data_head`
    /// counters count every byte the shards hold or will, so the check
    /// costs nothing a writer notices).
    pub(super) fn size_limit_reached(&self, produced: u64) -> Option<u64> {
        let limit = self.max_size?;
        (produced + self.synth_bytes >= limit).then_some(limit)
    }

    /// Whether the current window has reached `--switch-output`'s time or
    /// size, the rings having produced `produced` bytes.
    pub(super) fn switch_due(&self, produced: u64) -> bool {
        self.windows.as_ref().is_some_and(|w| w.due(produced))
    }

    /// A SIGUSR2 (or `snapshot` on `--control`) came: whether it switches.
    pub(super) fn switches_on_signal(&self) -> bool {
        self.windows.as_ref().is_some_and(|w| w.on_signal())
    }

    /// Process `pid` ended with `code`: whether it was a merger of the
    /// output's, and how it ended.
    pub(super) fn helper_ended(&mut self, pid: nix::unistd::Pid, code: i32) -> Option<Ended> {
        if self.windows.as_mut().is_some_and(|w| w.merger_ended(pid)) {
            return Some(Ended::MergerStopped);
        }
        let live = self.live.as_mut().filter(|l| l.pid == pid)?;
        live.ended = true;
        // A merger that failed said why, and a new one would fail alike;
        // one killed (a signal, or an injected crash) is restarted.
        match code {
            live_merger::READER_LEFT => Some(Ended::ReaderLeft),
            live_merger::OVERTAKEN => Some(Ended::LiveMergerDied { overtaken: true }),
            killed if killed > 128 => Some(Ended::LiveMergerDied { overtaken: false }),
            _ => Some(Ended::MergerStopped),
        }
    }

    /// Writes `meta` as the stop made it: the room kept at start is given
    /// back first, which on a full disk is what lets it be written.
    pub(super) fn write_final_meta(&self) -> Result<(), RecordError> {
        self.dir.release_meta_room();
        self.dir.write_meta(&self.meta)?;
        Ok(())
    }

    /// At the stop, with `meta` final: the live merger writes its last
    /// round and the header, and says how it ended (`None` without one).
    pub(super) fn conclude_live(&mut self) -> Result<Option<Outcome>, RecordError> {
        let Some(mut live) = self.live.take() else {
            return Ok(None);
        };
        let written = self.write_final_meta();
        live.conclude();
        let (outcome, done) = live.outcome();
        if let Some(windows) = self.windows.as_mut() {
            windows.written(done);
        }
        written.map(|()| Some(outcome))
    }

    /// Ends the live merger without an output: a recording that never
    /// began, or one its storage cut (the merger gives back the room its
    /// output took, or keeps what it freed from the shards, and the
    /// shards are what the recording leaves).
    pub(super) fn abandon_live(&mut self) {
        if let Some(live) = self.live.take() {
            live.abandon();
        }
    }

    /// The current window's (or the recording's) statistics as far as they
    /// are known without walking its shards, which accounting then does.
    pub(super) fn unwalked_stats(
        &self,
        lost_by_event: Vec<EventLoss>,
        stopped_by: StopReason,
    ) -> Stats {
        Stats {
            cpus: Vec::new(),
            synth_bytes: self.synth_bytes,
            lost_by_event,
            bpf: None,
            filters: Vec::new(),
            stopped_by,
            stop_unix_ns: unix_ns(),
        }
    }
}
