//! `--switch-output`: ending one window of the recording and going on in
//! the next without a gap (see [`crate::switch_output`]).

use shardrec_shard::StopReason;

use super::synthesis::Moment;
use super::Recording;
use crate::RecordError;
use shardrec_live_merger::Switch;

impl Recording<'_> {
    /// Ends the current window and goes on in the next (a `snapshot`: one
    /// asked for, not the turn of a `--keep-last` window): every writer
    /// writes what its ring holds into the window's shard and goes on in
    /// the next window's (the events stay enabled, so nothing falls
    /// between), the VIP likewise; the new window gets the state of the
    /// tasks and BPF programs of now in its `synth.shard`, so its perf.data
    /// reads alone; the live merger finishes the closing window's
    /// perf.data (or the batch merger merges it in the background).
    pub(super) fn switch_output(&mut self, snapshot: bool) -> Result<(), RecordError> {
        let Some(windows) = self.output.windows.as_mut() else {
            return Ok(());
        };
        let next = windows.root.create_window(windows.current + 1)?;
        self.output.closing_live();
        self.send_all(shardrec_control::Command::Switch);
        self.pool.switched(&self.output.dir)?;
        let bpf = self.side_band.switched()?;
        if self.plan.synthesizes_at_end() {
            self.synthesize_at_end()?;
        }
        let lost = self.pool.read_lost_counts(self.plan);
        let produced = self.pool.produced();
        let output = &mut self.output;
        let windows = output.windows.as_mut().expect("checked above");
        let lost_by_event = windows.open_next(produced, lost);
        // Each window's perf.data has the host's facts in its header.
        shardrec_shard::host::complete(&mut output.meta.host);
        let mut meta = output.meta.clone();
        meta.stats = Some(output.unwalked_stats(lost_by_event, StopReason::Switched));
        let closing = std::mem::replace(&mut output.dir, next);
        self.synthesize(&bpf, Moment::Switch)?;
        let output = &mut self.output;
        output.dir.write_start_meta(&output.meta)?;
        output.dir.reserve_meta_room(&output.meta)?;
        closing.release_meta_room();
        closing.write_meta(&meta)?;
        let windows = output.windows.as_mut().expect("checked above");
        let snapshot = snapshot || windows.merges_every_window();
        if let Some(output) = windows.close(windows.current - 1, snapshot)? {
            let bases = self.pool.writers().iter().map(|w| w.base()).collect();
            self.output.switch_live(&Switch { output, bases });
        }
        Ok(())
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
}
