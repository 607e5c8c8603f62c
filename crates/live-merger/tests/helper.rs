//! The live merger's orders and messages through control's one `Helper`,
//! against a stand-in that answers as the merger does: every order sent,
//! every message read, then mergers killed and replaced as often as the
//! restart table says. A plain `main` (no test harness): a helper is
//! forked, which needs a process with one thread.

use nix::sys::signal::{kill, Signal};
use shardrec_control::restart::{self, Helper as Kind};
use shardrec_control::{Helper, HelperEnds};
use shardrec_live_merger::{Message, Order, Outcome, Switch, WindowDone};

/// Plays the merger: an answer to each order, `Ended` at `Conclude`.
fn stand_in(mut ends: HelperEnds<Order, Message>) -> i32 {
    let mut window = 0;
    while let Ok(Some(order)) = ends.next_order() {
        let said = match order {
            Order::Begin => Message::Started,
            Order::Close => Message::Closing,
            Order::Switch(switch) => {
                window += 1;
                Message::WindowDone(WindowDone {
                    window: window - 1,
                    output: switch.output,
                    written: true,
                    why: None,
                })
            }
            Order::Conclude => Message::Ended(Outcome::Merged {
                report: Box::default(),
                cpus: Vec::new(),
            }),
        };
        let last = matches!(said, Message::Ended(_));
        if ends.report(&said).is_err() || last {
            return 0;
        }
    }
    0
}

fn spawn() -> Helper<Order, Message> {
    Helper::spawn(stand_in).expect("a helper forks")
}

fn serve_whole() {
    let mut merger = spawn();
    assert!(merger.send(&Order::Begin));
    assert!(matches!(
        merger.next_report().unwrap(),
        Some(Message::Started)
    ));
    assert!(merger.send(&Order::Close));
    assert!(matches!(
        merger.next_report().unwrap(),
        Some(Message::Closing)
    ));
    // A name that is not UTF-8 goes through.
    let output = {
        use std::os::unix::ffi::OsStringExt;
        std::path::PathBuf::from(std::ffi::OsString::from_vec(b"perf.data.\xff".to_vec()))
    };
    let switch = Switch {
        output: output.clone(),
        bases: vec![0, 4096],
    };
    assert!(merger.send(&Order::Switch(switch)));
    match merger.next_report().unwrap() {
        Some(Message::WindowDone(done)) => assert_eq!((done.window, done.output), (0, output)),
        other => panic!("window done: {other:?}"),
    }
    assert!(merger.send(&Order::Conclude));
    let said = merger.finish();
    assert!(
        matches!(said[..], [Message::Ended(Outcome::Merged { .. })]),
        "{said:?}"
    );
}

fn main() {
    serve_whole();
    let times = restart::times(Kind::LiveMerger);
    for _ in 0..=times {
        let mut merger = spawn();
        assert!(merger.send(&Order::Begin));
        assert!(matches!(
            merger.next_report().unwrap(),
            Some(Message::Started)
        ));
        kill(merger.pid, Signal::SIGKILL).unwrap();
        assert!(
            merger.next_report().unwrap().is_none(),
            "a dead merger says nothing"
        );
        assert!(merger.finish().is_empty());
    }
    // The replacement serves as the first did.
    serve_whole();
    println!("LiveMerger: every order and message, {times} replacements: ok");
}
