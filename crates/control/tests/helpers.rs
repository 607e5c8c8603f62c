//! A writer's and the VIP's orders and reports through control's one
//! `Helper`, against a stand-in that answers as they do: every command
//! sent, every report read, then helpers killed and replaced as often as
//! the restart table says, each replacement served as the first. A plain
//! `main` (no test harness): a helper is forked, which needs a process
//! with one thread.

use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use shardrec_control::restart::{self, Helper as Kind};
use shardrec_control::{Command, Helper, HelperEnds, Outcome, Report, VipStats, WriterStats};

/// Plays a writer (or the VIP, `vip`) on its ends of the pipes: Ready,
/// then an answer to each command as the real one gives it, until a
/// Drain (Done) or a Quit.
fn stand_in(mut ends: HelperEnds<Command, Report>, vip: bool) -> i32 {
    let ready = Report::Ready {
        records: vec![1, 2, 3],
        capturing: vip,
    };
    if ends.report(&ready).is_err() {
        return 1;
    }
    let (mut flushes, mut base) = (0, 0);
    while let Ok(Some(command)) = ends.next_order() {
        let said = match command {
            Command::Start => Report::Started,
            Command::Flush => {
                flushes += 1;
                continue;
            }
            Command::Switch => {
                base += 4096;
                Report::Switched {
                    base,
                    records: vec![base as u8],
                }
            }
            Command::Drain if vip => Report::Done(Outcome::Vip(VipStats {
                loaded: flushes,
                ..VipStats::default()
            })),
            Command::Drain => Report::Done(Outcome::Writer(WriterStats {
                flushes,
                bytes: base,
                ..WriterStats::default()
            })),
            Command::Quit => return 0,
        };
        if ends.report(&said).is_err() {
            return 1;
        }
        if matches!(said, Report::Done(_)) {
            return 0;
        }
    }
    0
}

fn spawn(vip: bool) -> Helper<Command, Report> {
    Helper::spawn(move |ends| stand_in(ends, vip)).expect("a helper forks")
}

/// Every command, every report, in the order a recording gives them.
fn serve_whole(vip: bool) {
    let mut helper = spawn(vip);
    let ready = helper.next_report().unwrap();
    assert_eq!(
        ready,
        Some(Report::Ready {
            records: vec![1, 2, 3],
            capturing: vip
        })
    );
    assert!(helper.send(&Command::Start));
    assert_eq!(helper.next_report().unwrap(), Some(Report::Started));
    assert!(helper.send(&Command::Flush));
    assert!(helper.send(&Command::Flush));
    assert!(helper.send(&Command::Switch));
    let switched = Report::Switched {
        base: 4096,
        records: vec![0],
    };
    assert_eq!(helper.next_report().unwrap(), Some(switched));
    assert!(helper.send(&Command::Drain));
    let done = helper.next_report().unwrap();
    match (vip, done) {
        (true, Some(Report::Done(Outcome::Vip(stats)))) => assert_eq!(stats.loaded, 2),
        (false, Some(Report::Done(Outcome::Writer(stats)))) => {
            assert_eq!((stats.flushes, stats.bytes), (2, 4096))
        }
        (_, other) => panic!("done: {other:?}"),
    }
    assert!(helper.finish().is_empty(), "nothing after Done");
}

/// A helper killed after Started is replaced by a new one, which starts
/// as the first did, as often as the restart table says; the one killed
/// past that is not.
fn killed_and_replaced(kind: Kind, vip: bool) {
    let times = restart::times(kind);
    let mut replaced = 0;
    loop {
        let mut helper = spawn(vip);
        assert!(matches!(
            helper.next_report().unwrap(),
            Some(Report::Ready { .. })
        ));
        assert!(helper.send(&Command::Start));
        assert_eq!(helper.next_report().unwrap(), Some(Report::Started));
        kill(helper.pid, Signal::SIGKILL).unwrap();
        let status = waitpid(helper.pid, None).unwrap();
        assert_eq!(
            status,
            WaitStatus::Signaled(helper.pid, Signal::SIGKILL, false)
        );
        helper.mark_reaped();
        assert_eq!(
            helper.next_report().unwrap(),
            None,
            "a dead helper says nothing"
        );
        assert!(
            !helper.send(&Command::Drain),
            "a dead helper takes no order"
        );
        if replaced == times {
            break;
        }
        replaced += 1;
    }
    assert_eq!(replaced, times, "{kind:?}");
    // The last replacement serves a whole recording, as the first would.
    serve_whole(vip);
}

fn main() {
    for (kind, vip) in [(Kind::Writer, false), (Kind::Vip, true)] {
        serve_whole(vip);
        killed_and_replaced(kind, vip);
        // A Quit ends one at once, before Start.
        let mut helper = spawn(vip);
        assert!(matches!(
            helper.next_report().unwrap(),
            Some(Report::Ready { .. })
        ));
        assert!(helper.send(&Command::Quit));
        assert!(helper.finish().is_empty());
        println!("{kind:?}: every command and report, a death and its replacements: ok");
    }
}
