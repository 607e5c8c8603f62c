//! Where a [`ShardWriter`](crate::ShardWriter) is headed: its state, and
//! every transition a command, a wakeup or a finished step makes.

use shardrec_control::Command;

/// What came since the last write started, while serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Asked {
    /// Nothing: a write starts only for a batch's worth.
    Nothing,
    /// The ring reached its wakeup watermark.
    Wakeup,
    /// The coordinator saw the ring hold data below the watermark for a
    /// while: a trickle, written at once by the writer itself.
    QuietFlush,
}

/// The writer's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Course {
    /// Recording into the current shard.
    Serving(Asked),
    /// A Switch came when the ring's head was at `at`: everything before
    /// it goes into the current shard, then the caller hands over the
    /// next. `then_drain`: a stop came meanwhile (the coordinator went
    /// away), carried out in the next shard.
    Switching { at: u64, then_drain: bool },
    /// A stop: the events are disabled; the ring is written until empty.
    Draining,
    /// Stop as soon as the write in flight (if any) ends.
    Quitting,
}

/// What a command asks of the writer besides its new course.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Effect {
    None,
    /// The first stop: disable the events, so the drain reaches an end.
    DisableEvents,
}

impl Course {
    /// The course after `command`, which came when the ring's head was
    /// `head`. Quit overrides everything; a stop is never taken back.
    pub(crate) fn after(self, command: Command, head: u64) -> (Course, Effect) {
        use Course::*;
        let stopping = matches!(self, Draining | Quitting);
        let effect = match command {
            Command::Drain | Command::Quit if !stopping => Effect::DisableEvents,
            _ => Effect::None,
        };
        let next = match (self, command) {
            (_, Command::Quit) | (Quitting, _) => Quitting,
            (Draining, _) => Draining,
            (Serving(_), Command::Drain) => Draining,
            (Serving(asked), Command::Flush) => Serving(asked.max(Asked::QuietFlush)),
            (Serving(_), Command::Switch) => Switching {
                at: head,
                then_drain: false,
            },
            (Switching { at, .. }, Command::Drain) => Switching {
                at,
                then_drain: true,
            },
            (course, Command::Start | Command::Flush | Command::Switch) => course,
        };
        (next, effect)
    }

    /// Whether the ring's wakeups still matter: a stop writes until the
    /// ring is empty without them.
    pub(crate) fn wants_wakeups(self) -> bool {
        matches!(self, Course::Serving(_) | Course::Switching { .. })
    }

    /// The course after the ring's wakeup.
    pub(crate) fn woken(self) -> Course {
        match self {
            Course::Serving(asked) => Course::Serving(asked.max(Asked::Wakeup)),
            course => course,
        }
    }

    /// The course once a Switch has been carried out: in the next shard,
    /// written at once (wakeups that came during the switch were spent on
    /// it), or drained if a stop came meanwhile.
    pub(crate) fn switched(self) -> Course {
        match self {
            Course::Switching {
                then_drain: true, ..
            } => Course::Draining,
            _ => Course::Serving(Asked::Wakeup),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(course: Course, commands: &[Command]) -> (Course, usize) {
        let mut disabled = 0;
        let course = commands.iter().fold(course, |course, &command| {
            let (next, effect) = course.after(command, 100);
            disabled += usize::from(effect == Effect::DisableEvents);
            next
        });
        (course, disabled)
    }

    #[test]
    fn quit_overrides_drain_and_drain_never_undoes_quit() {
        let serving = Course::Serving(Asked::Nothing);
        use Command::*;
        assert_eq!(after(serving, &[Drain, Quit]), (Course::Quitting, 1));
        assert_eq!(after(serving, &[Quit, Drain]), (Course::Quitting, 1));
        assert_eq!(
            after(serving, &[Drain, Flush, Switch]),
            (Course::Draining, 1)
        );
    }

    #[test]
    fn a_stop_during_a_switch_is_carried_out_after_it() {
        use Command::*;
        let (course, disabled) = after(Course::Serving(Asked::Wakeup), &[Switch, Drain]);
        assert_eq!(
            course,
            Course::Switching {
                at: 100,
                then_drain: true
            }
        );
        assert_eq!((course.switched(), disabled), (Course::Draining, 1));
        let (course, _) = after(Course::Serving(Asked::Nothing), &[Switch, Flush]);
        assert_eq!(course.switched(), Course::Serving(Asked::Wakeup));
    }

    #[test]
    fn a_flush_outranks_a_wakeup_until_the_next_write() {
        let course = Course::Serving(Asked::Nothing).woken();
        let (course, _) = course.after(Command::Flush, 0);
        assert_eq!(course.woken(), Course::Serving(Asked::QuietFlush));
        assert_eq!(Course::Draining.woken(), Course::Draining);
    }
}
