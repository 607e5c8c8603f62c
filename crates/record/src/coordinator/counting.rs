//! When the events count: `-D` starts them late (or not until told), and
//! `--control` enables and disables them while the side-band goes on being
//! recorded, with perf's messages.

use std::time::{Duration, Instant};

use super::writer_pool::WriterPool;
use crate::config::Delay;
use crate::plan::Plan;
use crate::run_control::{ControlChannel, ControlCommand};
use crate::say;
use crate::{RecordConfig, RecordError};

/// The longest the coordinator sleeps between checks.
pub(super) const TICK_MS: u16 = 250;

/// `-D` and `--control`.
pub(super) struct Counting {
    /// `--control`'s channel.
    control: Option<ControlChannel>,
    /// When a `-D MSECS` recording starts counting.
    enable_at: Option<Instant>,
    /// `-q`: no "Events enabled" lines.
    quiet: bool,
}

/// What the commands on the control channel asked of the recording as a
/// whole.
#[derive(Default)]
pub(super) struct Asked {
    /// `stop`.
    pub(super) stop: bool,
    /// `snapshot`.
    pub(super) snapshot: bool,
}

impl Counting {
    /// Opens `--control`'s channel.
    pub(super) fn open(config: &RecordConfig) -> Result<Counting, RecordError> {
        let control = config.control.as_ref().map(ControlChannel::open);
        Ok(Counting {
            control: control.transpose()?,
            enable_at: None,
            quiet: config.quiet,
        })
    }

    /// The control channel's descriptor, to wait on.
    pub(super) fn control_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.control.as_ref().map(|c| c.fd())
    }

    /// After the start: with `-D`, says the events are off and when they
    /// will be on.
    pub(super) fn count_later(&mut self, plan: &Plan) {
        let Some(delay) = plan.delay else {
            return;
        };
        self.say("Events disabled");
        if let Delay::Millis(ms) = delay {
            self.enable_at = Some(Instant::now() + Duration::from_millis(ms));
        }
    }

    /// How long to wait, at most `tick`, before the delayed start is due.
    pub(super) fn tick_ms(&self, tick: u16) -> u16 {
        match self.enable_at {
            Some(at) => {
                let left = at.saturating_duration_since(Instant::now()).as_millis();
                left.min(tick as u128) as u16
            }
            None => tick,
        }
    }

    /// Whether a `-D MSECS` delay is still to pass.
    pub(super) fn delayed(&self) -> bool {
        self.enable_at.is_some()
    }

    /// Enables the events once a `-D MSECS` delay has passed.
    pub(super) fn count_when_due(&mut self, plan: &Plan, pool: &WriterPool) {
        if self.enable_at.is_some_and(|at| Instant::now() >= at) {
            self.enable_at = None;
            self.set_counting(plan, pool, true, None);
        }
    }

    /// Carries out the commands waiting on the control channel; what they
    /// ask of the recording as a whole is the caller's to do.
    pub(super) fn obey_control(&mut self, plan: &Plan, pool: &WriterPool) -> Asked {
        let mut asked = Asked::default();
        let Some(control) = self.control.as_mut() else {
            return asked;
        };
        let commands = control.read_commands();
        for command in commands {
            match command {
                ControlCommand::Enable(name) => {
                    self.set_counting(plan, pool, true, name.as_deref())
                }
                ControlCommand::Disable(name) => {
                    self.set_counting(plan, pool, false, name.as_deref())
                }
                ControlCommand::Stop => asked.stop = true,
                ControlCommand::Ping => {}
                ControlCommand::Evlist => {
                    for spec in &plan.events {
                        say::detail(&spec.name);
                    }
                }
                // perf 6.1 switches output only on SIGUSR2; shardrec also
                // on `snapshot`, which a script can send and wait for.
                ControlCommand::Snapshot => asked.snapshot = true,
                ControlCommand::Unknown(text) => {
                    say::warning(&format!("unknown control command '{text}'"))
                }
            }
            if let Some(control) = self.control.as_mut() {
                control.ack();
            }
        }
        asked
    }

    /// Enables or disables every event (or those named `name`) on every
    /// CPU, except the tracking dummy, which keeps the side-band whole, as
    /// perf's `evlist__enable_non_dummy` does.
    fn set_counting(&self, plan: &Plan, pool: &WriterPool, on: bool, name: Option<&str>) {
        let wanted = |spec: &shardrec_events::EventSpec| {
            !spec.is_tracking_dummy() && name.is_none_or(|n| spec.name == n)
        };
        if name.is_some() && !plan.events.iter().any(wanted) {
            say::detail(&format!(
                "failed: can't find '{}' event",
                name.unwrap_or_default()
            ));
            return;
        }
        for cpu in pool.cpus() {
            for event in cpu.events.iter().filter(|e| wanted(&plan.events[e.spec])) {
                let result = match on {
                    true => event.event.enable(),
                    false => event.event.disable(),
                };
                if let Err(e) = result {
                    say::warning(&format!("cannot change event on CPU {}: {e}", cpu.cpu));
                }
            }
        }
        let state = if on { "enabled" } else { "disabled" };
        match name {
            Some(name) => self.say(&format!("Event {name} {state}")),
            None => self.say(&format!("Events {state}")),
        }
    }

    /// One of perf's status lines, unless `-q`.
    pub(super) fn say(&self, message: &str) {
        if !self.quiet {
            say::note(message);
        }
    }
}
