//! `--switch-output`: ending one window of the recording and going on in
//! the next without a gap (see [`crate::windows`]).

use shardrec_control::Command;
use shardrec_shard::StopReason;

use super::{Moment, Recording};
use crate::RecordError;

impl Recording<'_> {
    /// Whether the current window has reached `--switch-output`'s time or
    /// size.
    pub(super) fn switch_due(&self) -> bool {
        self.windows
            .as_ref()
            .is_some_and(|w| w.due(self.produced()))
    }

    /// A SIGUSR2 (or `snapshot` on `--control`) came: whether it switches.
    pub(super) fn switch_on_signal(&self) -> bool {
        self.windows.as_ref().is_some_and(|w| w.on_signal())
    }

    /// Bytes every ring has produced since the recording began.
    pub(super) fn produced(&self) -> u64 {
        self.writers.iter().map(|w| w.events.ring.produced()).sum()
    }

    /// Ends the current window and goes on in the next (a `snapshot`: one
    /// asked for, not the turn of a `--keep-last` window): every writer
    /// writes what its ring holds into the window's shard and goes on in
    /// the next window's (the events stay enabled, so nothing falls
    /// between), the VIP likewise; the new window gets the state of the
    /// tasks and BPF programs of now in its `synth.shard`, so its perf.data
    /// reads alone; the closing window goes to a merge in the background.
    pub(super) fn switch_output(&mut self, snapshot: bool) -> Result<(), RecordError> {
        let Some(windows) = self.windows.as_mut() else {
            return Ok(());
        };
        let next = windows.root.create_window(windows.current + 1)?;
        self.send_switch();
        for writer in self.writers.iter_mut() {
            writer.switched(&self.dir)?;
        }
        let bpf = match self.vip.as_mut().filter(|v| !v.helper.has_exited()) {
            Some(vip) => vip.helper.wait_switched()?.1,
            None => Vec::new(),
        };
        if self.plan.overwrite {
            self.synthesize_at_end()?;
        }
        let lost = self.read_lost_counts();
        let produced = self.produced();
        let windows = self.windows.as_mut().expect("checked above");
        let lost_by_event = windows.open_next(produced, lost);
        let mut meta = self.meta.clone();
        meta.stats = Some(self.unwalked_stats(lost_by_event, StopReason::Switched));
        let closing = std::mem::replace(&mut self.dir, next);
        self.synthesize(&bpf, Moment::Switch)?;
        self.dir.write_start_meta(&self.meta)?;
        self.dir.reserve_meta_room(&self.meta)?;
        closing.release_meta_room();
        closing.write_meta(&meta)?;
        let windows = self.windows.as_mut().expect("checked above");
        let snapshot = snapshot || windows.merges_every_window();
        windows.close(windows.current - 1, snapshot)
    }

    /// `--overwrite`: a window's records are the rings' last moments
    /// before its end, so the tasks of that moment are added to its
    /// `synth.shard` (as perf's `--tail-synthesize` writes them), after
    /// those of its start, which they override: a task that began after
    /// the window's start and whose beginning the rings no longer hold is
    /// still named.
    pub(super) fn synthesize_at_end(&mut self) -> Result<(), RecordError> {
        self.synthesize(&[], Moment::End)
    }

    /// Tells every helper still running to switch.
    fn send_switch(&mut self) {
        for helper in self.helpers_mut().filter(|h| !h.has_exited()) {
            helper.send(Command::Switch);
        }
    }
}
