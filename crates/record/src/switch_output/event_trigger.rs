//! `--switch-output-event`: events that are not recorded, each hit of
//! which switches the output as SIGUSR2 does (perf's side-band evlist).
//!
//! The coordinator opens them itself, on the recording's CPUs and tasks,
//! each with a ring of one data page that wakes it at every sample, so a
//! switch follows a hit at once (perf's side-band thread polls with a 1 s
//! timeout). The rings are only drained: a sample says whose hit it was,
//! and the recorder's own processes never switch (a switch writes files,
//! sleeps and forks; a trigger on any of that would switch again and
//! again). Tracepoints leave the recorder out in the kernel too, so its
//! activity does not even wake the coordinator.

use std::os::fd::{AsFd, BorrowedFd};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use shardrec_format::header::RecordType;
use shardrec_format::walk::RecordWalker;
use shardrec_format::SampleIdLayout;
use shardrec_sys::{Attr, Flag, PerfEvent, RingBuffer, Target};

use crate::plan::{Plan, Scope};
use crate::RecordError;
use shardrec_events::{self as events, EventArg, EventError, EventSpec};

/// What a trigger's sample carries: enough to tell whose hit it was.
const SAMPLE_TYPE: u64 = shardrec_events::attrs::BASE_SAMPLE_TYPE;

/// Data pages of each trigger's ring: a page holds dozens of samples, and
/// the coordinator drains it at each wakeup.
const RING_PAGES: usize = 1;

/// Resolves each `--switch-output-event` as `-e` would be, naming the
/// option in what is wrong.
pub fn resolve(args: &[EventArg]) -> Result<Vec<EventSpec>, RecordError> {
    events::resolve(args, &[]).map_err(|error| match error {
        EventError::Unknown { .. } | EventError::Usage(_) => {
            RecordError::Usage(format!("--switch-output-event: {error}"))
        }
        other => other.into(),
    })
}

/// One trigger event on one CPU (and task), with its ring.
struct Trigger {
    name: String,
    event: PerfEvent,
    ring: RingBuffer,
    /// A tracepoint, which takes a filter.
    tracepoint: bool,
    /// Its task is gone: it reports nothing more (and poll would say so
    /// at every call).
    hung_up: bool,
}

/// The `--switch-output-event` events of a recording.
pub struct EventTrigger {
    triggers: Vec<Trigger>,
    /// The last wakeup was the recorder's own hits only: the next wait
    /// leaves the triggers out, so an event the coordinator's own sleep
    /// causes (a context switch) cannot keep waking it.
    resting: bool,
}

impl EventTrigger {
    /// Opens the plan's switch events, disabled, on each recorded CPU for
    /// each of `tasks` (-1: every task; the recorded events' tasks), as
    /// the recorded events are: following a workload's children, and
    /// enabled at its exec.
    pub fn open(plan: &Plan, tasks: &[i32]) -> Result<Option<EventTrigger>, RecordError> {
        if plan.switch_events.is_empty() {
            return Ok(None);
        }
        let mut triggers = Vec::new();
        for spec in &plan.switch_events {
            let attr = attr(plan, spec);
            for &cpu in &plan.cpus {
                for &task in tasks {
                    triggers.push(open_one(spec, &attr, Target::task_on_cpu(task, cpu))?);
                }
            }
        }
        Ok(Some(EventTrigger {
            triggers,
            resting: false,
        }))
    }

    /// Leaves out of the tracepoints' hits the recorder's processes, as
    /// `filter` (an ftrace filter) names them.
    pub fn set_filter(&self, filter: &str) -> Result<(), RecordError> {
        for trigger in self.triggers.iter().filter(|t| t.tracepoint) {
            trigger
                .event
                .set_filter(filter)
                .map_err(RecordError::system(format!(
                    "cannot set the filter of --switch-output-event {}",
                    trigger.name
                )))?;
        }
        Ok(())
    }

    /// Enables the triggers, where the workload's exec does not.
    pub fn enable(&self, plan: &Plan) -> Result<(), RecordError> {
        if plan.scope == Scope::Workload {
            return Ok(());
        }
        for trigger in &self.triggers {
            trigger.event.enable().map_err(RecordError::system(format!(
                "cannot enable --switch-output-event {}",
                trigger.name
            )))?;
        }
        Ok(())
    }

    /// The descriptors to wait on: none once after a wakeup by the
    /// recorder's own hits.
    pub fn fds(&mut self) -> Vec<BorrowedFd<'_>> {
        if std::mem::take(&mut self.resting) {
            return Vec::new();
        }
        let live = self.triggers.iter().filter(|t| !t.hung_up);
        live.map(|t| t.event.as_fd()).collect()
    }

    /// Empties every ring (so each wakes again at its next hit): whether
    /// some hit came from a process other than the recorder's `own`, or
    /// was lost (whose, the kernel does not say). Several hits make one
    /// switch.
    pub fn take_hits(&mut self, own: &[i32]) -> bool {
        let mut others = false;
        for trigger in &self.triggers {
            others |= trigger.ring.consume(|[first, second]| {
                // A page at most, copied where it wraps.
                let bytes = [first, second].concat();
                RecordWalker::new(&bytes).any(|record| match record.header.type_ {
                    RecordType::SAMPLE => {
                        sample_pid(record.bytes).is_none_or(|p| !own.contains(&p))
                    }
                    RecordType::LOST => true,
                    _ => false,
                })
            });
        }
        self.forget_hung_up();
        self.resting = !others;
        others
    }

    /// Leaves out the triggers whose task ended, which poll reports for
    /// good.
    fn forget_hung_up(&mut self) {
        let mut fds: Vec<PollFd> = self
            .triggers
            .iter()
            .map(|t| PollFd::new(t.event.as_fd(), PollFlags::empty()))
            .collect();
        if poll(&mut fds, PollTimeout::ZERO).unwrap_or(0) == 0 {
            return;
        }
        let hung_up: Vec<bool> = fds
            .iter()
            .map(|fd| {
                fd.revents()
                    .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
            })
            .collect();
        for (trigger, hung_up) in self.triggers.iter_mut().zip(hung_up) {
            trigger.hung_up |= hung_up;
        }
    }
}

/// The process a sample was taken in.
fn sample_pid(sample: &[u8]) -> Option<i32> {
    let (pid, _) = SampleIdLayout::new(SAMPLE_TYPE).sample_pid_ip(sample)?;
    Some(pid as i32)
}

/// A switch event's attr: the event as the user spelled it, sampling every
/// hit (or its own `period=`), waking its reader at each sample.
fn attr(plan: &Plan, spec: &EventSpec) -> Attr {
    let mut attr = shardrec_events::attrs::event_attr(&plan.attr_plan(), spec);
    attr.set_period(spec.terms.period.unwrap_or(1));
    attr.set_sample_type(SAMPLE_TYPE);
    attr.set_wakeup_events(1);
    let follows_tasks = plan.scope != Scope::SystemWide;
    attr.set_flag(Flag::Inherit, follows_tasks && plan.inherit);
    attr.set_flag(Flag::EnableOnExec, plan.scope == Scope::Workload);
    attr
}

fn open_one(spec: &EventSpec, attr: &Attr, target: Target) -> Result<Trigger, RecordError> {
    let failed = |what: &str| {
        RecordError::system(format!(
            "cannot {what} --switch-output-event {} on CPU {}",
            spec.name, target.cpu
        ))
    };
    let event = PerfEvent::open(attr, target).map_err(failed("open"))?;
    let ring = RingBuffer::map(&event, RING_PAGES).map_err(failed("map the ring of"))?;
    Ok(Trigger {
        name: spec.name.clone(),
        event,
        ring,
        tracepoint: spec.is_tracepoint(),
        hung_up: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_event_names_the_option() {
        let args = [EventArg::parse_for("--switch-output-event", "cyles").unwrap()];
        let error = resolve(&args).unwrap_err().to_string();
        assert_eq!(
            error,
            "--switch-output-event: event 'cyles' not found (did you mean 'cycles'?)"
        );
    }

    #[test]
    fn a_sample_says_its_process() {
        let layout = SampleIdLayout::new(SAMPLE_TYPE);
        let mut sample = Vec::new();
        shardrec_format::RecordHeader {
            type_: RecordType::SAMPLE,
            misc: 0,
            size: 48,
        }
        .write_to(&mut sample);
        // identifier, ip, pid/tid, time, cpu
        for field in [7u64, 0xffff, (9 << 32) | 1234, 5, 0] {
            sample.extend_from_slice(&field.to_ne_bytes());
        }
        assert_eq!(sample_pid(&sample), Some(1234));
        assert_eq!(layout.sample_pid_ip(&sample), Some((1234, 0xffff)));
    }
}
