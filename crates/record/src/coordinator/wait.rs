//! Waiting for a reason to stop, and what comes meanwhile: signals,
//! `--control` commands, helpers that end, the ticks that flush quiet
//! rings, start a delayed recording, check `--max-size` and switch
//! output.

use shardrec_shard::StopReason;

use super::counting::TICK_MS;
use super::Recording;
use crate::plan::Scope;
use crate::say;
use crate::signals::{Signals, Wake};
use crate::RecordError;

impl Recording<'_> {
    /// Waits for a reason to stop. A writer that dies is a failure, but the
    /// others are still stopped cleanly so their shards are complete.
    pub(super) fn wait(
        &mut self,
        signals: &mut Signals,
    ) -> Result<(StopReason, Option<RecordError>), RecordError> {
        loop {
            let tick = self.tick_ms();
            let switch_events = self
                .switch_trigger
                .as_mut()
                .map_or_else(Vec::new, |t| t.fds());
            match signals.wait(tick, self.counting.control_fd(), &switch_events)? {
                Wake::Stop(signal) => {
                    return Ok((StopReason::Signal(signal.as_str().to_string()), None))
                }
                Wake::Control => {
                    if self.obey_control() {
                        return Ok((StopReason::ControlStop, None));
                    }
                }
                Wake::Child => {
                    if let Some(outcome) = self.reap_children() {
                        return Ok(outcome);
                    }
                }
                Wake::Timeout => {
                    if self.targets_gone() {
                        return Ok((StopReason::TargetsExited, None));
                    }
                }
                Wake::Switch => self.output.switch_asked |= self.output.switches_on_signal(),
                Wake::SwitchEvent => self.output.switch_asked |= self.switch_event_hit(),
            }
            self.counting.count_when_due(self.plan, &self.pool);
            // A merger that reads the rings first takes the quiet ones.
            if !self.output.merger_reading_first() {
                self.pool.flush_quiet_rings();
            }
            self.output.windows_written();
            if let Some(limit) = self.output.size_limit_reached(self.pool.produced()) {
                self.counting.say(&format!(
                    "[ shardrec record: size limit reached ({} KB), stopping ]",
                    limit / 1024
                ));
                return Ok((StopReason::SizeLimit(limit), None));
            }
            let asked = std::mem::take(&mut self.output.switch_asked);
            if asked || self.output.switch_due(self.pool.produced()) {
                if let Err(error) = self.switch_output(asked) {
                    return Ok((StopReason::SwitchFailed, Some(error)));
                }
            }
        }
    }

    /// How long the wait may sleep before it looks again: for as long as
    /// it takes (`None`) when only a signal, a `--control` command or a
    /// helper's end can move the recording on, as perf record's poll
    /// waits; else up to a tick, or less where a `-D` delay, `--max-size`
    /// or a window's end comes sooner. A tick every 250 ms was a fifth of
    /// the coordinator's samples in a 16-vCPU guest.
    fn tick_ms(&self) -> Option<u16> {
        let tick = self.counting.tick_ms(self.output.tick_ms(TICK_MS));
        // Quiet rings are flushed where the merger does not read them
        // first; `-p`'s targets are looked for.
        let ticks = self.counting.delayed()
            || self.output.needs_ticks()
            || !self.output.merger_reading_first()
            || matches!(self.plan.scope, Scope::Threads(_));
        ticks.then_some(tick)
    }

    /// Carries out the commands on `--control`; true when one is `stop`.
    fn obey_control(&mut self) -> bool {
        let asked = self.counting.obey_control(self.plan, &self.pool);
        if asked.snapshot {
            match self.output.windows.is_some() {
                true => self.output.switch_asked = true,
                false => {
                    say::warning("snapshot needs --switch-output (or --overwrite, or --keep-last)")
                }
            }
        }
        asked.stop
    }

    /// A `--switch-output-event` reported: whether some hit was not the
    /// recorder's own. It switches whatever else ends the windows (a
    /// size, a time), and snapshots `--overwrite` and `--keep-last` as
    /// SIGUSR2 does.
    fn switch_event_hit(&mut self) -> bool {
        let own = &self.output.meta.recorder_pids;
        let hit = self
            .switch_trigger
            .as_mut()
            .is_some_and(|t| t.take_hits(own));
        hit && self.output.windows.is_some()
    }

    /// `-p`/`-t`: whether every process followed has ended.
    fn targets_gone(&self) -> bool {
        matches!(self.plan.scope, Scope::Threads(_))
            && self.plan.pids.iter().all(|&pid| !running(pid))
    }
}

/// Whether process `pid` still runs: it exists and is not a zombie
/// waiting for its parent (which `kill(pid, 0)` cannot tell).
fn running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may
    // itself contain ") ".
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    !matches!(state, None | Some('Z') | Some('X'))
}
