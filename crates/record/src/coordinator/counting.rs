//! When the events count: `-D` starts them late (or not until told), and
//! `--control` enables and disables them while the side-band goes on being
//! recorded, with perf's messages.

use std::time::{Duration, Instant};

use super::Recording;
use crate::config::Delay;
use crate::run_control::ControlCommand;

/// The longest the coordinator sleeps between checks, and how often it
/// looks at every ring for data waiting below its watermark.
const TICK_MS: u16 = 250;

/// How long data below a ring's watermark may wait before its writer is
/// asked to write it: what a quiet ring can lose to `kill -9` of the whole
/// tree. Longer would spare more wakeups (perf never flushes by time); one
/// second keeps a killed recording nearly whole.
const FLUSH_AFTER: Duration = Duration::from_secs(1);

/// The same for a recording streamed to a reader (`-o -`): the live merge
/// writes a record once every ring has been written past it, so this is
/// most of how long a reader waits for a quiet CPU's records.
const STREAM_FLUSH_AFTER: Duration = Duration::from_millis(250);

impl Recording<'_> {
    /// After the start: with `-D`, says the events are off and when they
    /// will be on.
    pub(super) fn count_later(&mut self) {
        let Some(delay) = self.plan.delay else {
            return;
        };
        self.say("Events disabled");
        if let Delay::Millis(ms) = delay {
            self.enable_at = Some(Instant::now() + Duration::from_millis(ms));
        }
    }

    /// How long to wait for signals before the delayed start is due.
    pub(super) fn tick_ms(&self) -> u16 {
        let mut tick = match self.max_size {
            Some(_) => super::size_limit::LIMIT_TICK_MS,
            None => TICK_MS,
        };
        if let Some(switch) = self
            .windows
            .as_ref()
            .and_then(|w| w.tick_ms(super::size_limit::LIMIT_TICK_MS))
        {
            tick = tick.min(switch.max(1));
        }
        match self.enable_at {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now()).as_millis();
                left.min(tick as u128) as u16
            }
            None => tick,
        }
    }

    /// Every TICK_MS, asks each writer whose ring has held data for
    /// FLUSH_AFTER to write it (see
    /// [`crate::writers::Writer::flush_if_waiting`]).
    pub(super) fn flush_quiet_rings(&mut self) {
        if self.rings_seen.elapsed() < Duration::from_millis(TICK_MS as u64) {
            return;
        }
        self.rings_seen = Instant::now();
        let after = match self.streamed {
            true => STREAM_FLUSH_AFTER,
            false => FLUSH_AFTER,
        };
        self.writers
            .iter_mut()
            .for_each(|w| w.flush_if_waiting(after));
    }

    /// Enables the events once a `-D MSECS` delay has passed.
    pub(super) fn count_when_due(&mut self) {
        if self.enable_at.is_some_and(|at| Instant::now() >= at) {
            self.enable_at = None;
            self.set_counting(true, None);
        }
    }

    /// Carries out the commands waiting on the control channel; true when
    /// one of them is `stop`.
    pub(super) fn obey_control(&mut self) -> bool {
        let Some(control) = self.control.as_mut() else {
            return false;
        };
        let mut stop = false;
        for command in control.read_commands() {
            match command {
                ControlCommand::Enable(name) => self.set_counting(true, name.as_deref()),
                ControlCommand::Disable(name) => self.set_counting(false, name.as_deref()),
                ControlCommand::Stop => stop = true,
                ControlCommand::Ping => {}
                ControlCommand::Evlist => {
                    for spec in &self.plan.events {
                        eprintln!("{}", spec.name);
                    }
                }
                // perf 6.1 switches output only on SIGUSR2; shardrec also
                // on `snapshot`, which a script can send and wait for.
                ControlCommand::Snapshot if self.windows.is_some() => self.switch_asked = true,
                ControlCommand::Snapshot => eprintln!(
                    "shardrec: snapshot needs --switch-output (or --overwrite, which shardrec does not support yet)"
                ),
                ControlCommand::Unknown(text) => {
                    eprintln!("shardrec: unknown control command '{text}'")
                }
            }
            if let Some(control) = self.control.as_mut() {
                control.ack();
            }
        }
        stop
    }

    /// Enables or disables every event (or those named `name`) on every
    /// CPU, except the tracking dummy, which keeps the side-band whole, as
    /// perf's `evlist__enable_non_dummy` does.
    fn set_counting(&mut self, on: bool, name: Option<&str>) {
        let wanted = |spec: &crate::events::EventSpec| {
            !spec.is_tracking_dummy() && name.is_none_or(|n| spec.name == n)
        };
        if name.is_some() && !self.plan.events.iter().any(wanted) {
            eprintln!("failed: can't find '{}' event", name.unwrap_or_default());
            return;
        }
        for writer in &self.writers {
            for event in &writer.events.events {
                if !wanted(&self.plan.events[event.spec]) {
                    continue;
                }
                let result = match on {
                    true => event.event.enable(),
                    false => event.event.disable(),
                };
                if let Err(e) = result {
                    eprintln!(
                        "shardrec: warning: cannot change event on CPU {}: {e}",
                        writer.cpu()
                    );
                }
            }
        }
        let state = if on { "enabled" } else { "disabled" };
        match name {
            Some(name) => self.say(&format!("Event {name} {state}")),
            None => self.say(&format!("Events {state}")),
        }
    }

    pub(super) fn say(&self, message: &str) {
        if !self.quiet {
            eprintln!("{message}");
        }
    }
}
