//! One way to run a helper process, whatever its kind: forked with two
//! pipes, orders of type `O` going down one and reports of type `R` coming
//! up the other, each in the one [`frame`](crate::frame). The coordinator
//! holds a [`Helper`]; the helper's body gets its [`HelperEnds`].
//!
//! Each kind of helper names its own two types: a writer and the VIP
//! [`Command`](crate::Command) and [`Report`](crate::Report), the live
//! merger its orders and messages, the `--switch-output` merger its jobs
//! and outputs. What follows a death is [`restart`](crate::restart).

use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::unistd::Pid;
use shardrec_sys::process;

use crate::{Framed, Unframed};

/// The coordinator's end of a helper process.
pub struct Helper<O, R> {
    /// Its pid.
    pub pid: Pid,
    orders: Option<File>,
    reports: File,
    unread: Unframed,
    reaped: bool,
    kinds: PhantomData<fn(O) -> R>,
}

/// The helper's own ends of its two pipes.
pub struct HelperEnds<O, R> {
    /// Where its orders come.
    pub orders: File,
    /// Where its reports go.
    pub reports: File,
    kinds: PhantomData<fn(O) -> R>,
}

impl<O: Framed, R: Framed> HelperEnds<O, R> {
    /// Blocks for the next order; `None` once the coordinator closed its
    /// end (or is gone).
    pub fn next_order(&mut self) -> io::Result<Option<O>> {
        O::read_from(&mut self.orders)
    }

    /// Sends a report.
    pub fn report(&mut self, report: &R) -> io::Result<()> {
        report.write_to(&mut self.reports)
    }

    /// The descriptors of both ends, for a body that closes every other
    /// one it inherited.
    pub fn fds(&self) -> [RawFd; 2] {
        [self.orders.as_raw_fd(), self.reports.as_raw_fd()]
    }
}

impl<O: Framed, R: Framed> Helper<O, R> {
    /// Forks a helper running `body(ends)`; its return value is the exit
    /// code. The pipes are close-on-exec; the child inherits every
    /// descriptor of the coordinator, its ends of these pipes too, so a
    /// body that waits for its orders to end closes what it does not use
    /// first (`shardrec_sys::process::close_fds_except` with [`HelperEnds::fds`]).
    pub fn spawn(body: impl FnOnce(HelperEnds<O, R>) -> i32) -> io::Result<Helper<O, R>> {
        let (orders_in, orders) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (reports, reports_out) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let pid = process::spawn(move || {
            body(HelperEnds {
                orders: File::from(orders_in),
                reports: File::from(reports_out),
                kinds: PhantomData,
            })
        })?;
        Ok(Helper {
            pid,
            orders: Some(File::from(orders)),
            reports: File::from(reports),
            unread: Unframed::default(),
            reaped: false,
            kinds: PhantomData,
        })
    }

    /// Sends an order; false once the helper is gone (or its orders were
    /// closed), which is not an error: its end says how it ended.
    pub fn send(&mut self, order: &O) -> bool {
        let sent = self.orders.as_mut().map(|o| order.write_to(o));
        if matches!(sent, Some(Err(_))) {
            self.orders = None;
        }
        matches!(sent, Some(Ok(())))
    }

    /// Blocks for the next report; `None` once the helper closed its end
    /// (it exited). A garbled one is an error.
    pub fn next_report(&mut self) -> io::Result<Option<R>> {
        loop {
            if let Some(report) = self.unread.take() {
                return report.map(Some);
            }
            if self.unread.fill_from(&mut self.reports)? == 0 {
                return Ok(None);
            }
        }
    }

    /// The reports already sent, without waiting (garbled ones left out).
    pub fn sent(&mut self) -> Vec<R> {
        loop {
            let mut fds = [PollFd::new(self.reports.as_fd(), PollFlags::POLLIN)];
            if !matches!(nix::poll::poll(&mut fds, PollTimeout::ZERO), Ok(1)) {
                break;
            }
            if !matches!(self.unread.fill_from(&mut self.reports), Ok(1..)) {
                break;
            }
        }
        self.whole_reports()
    }

    /// Closes the orders' pipe: a helper reads its end as the last order.
    pub fn close_orders(&mut self) {
        self.orders = None;
    }

    /// Closes the orders' pipe, reads every report left until the helper
    /// exits, and reaps it.
    pub fn finish(mut self) -> Vec<R> {
        self.close_orders();
        let _ = self.unread.fill_to_end(&mut self.reports);
        self.reap();
        self.whole_reports()
    }

    /// The whole reports read and not yet taken (garbled ones left out).
    fn whole_reports(&mut self) -> Vec<R> {
        std::iter::from_fn(|| self.unread.take())
            .filter_map(Result::ok)
            .collect()
    }

    /// Waits for the process to exit, once.
    pub fn reap(&mut self) {
        if !std::mem::replace(&mut self.reaped, true) {
            let _ = nix::sys::wait::waitpid(self.pid, None);
        }
    }

    /// Notes that the process was reaped elsewhere (a SIGCHLD handler): it
    /// is not waited for again.
    pub fn mark_reaped(&mut self) {
        self.reaped = true;
    }

    /// Whether the process has been reaped.
    pub fn reaped(&self) -> bool {
        self.reaped
    }

    /// The report pipe's descriptor, to wait on with others.
    pub fn reports_fd(&self) -> RawFd {
        self.reports.as_raw_fd()
    }
}
