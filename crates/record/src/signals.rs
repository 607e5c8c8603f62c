//! Signals as events: INT/TERM/HUP ask for a stop, CHLD says a child ended,
//! USR2 switches output.

use std::os::fd::{AsFd, BorrowedFd};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use shardrec_sys::process;

use crate::RecordError;

/// What woke the coordinator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake {
    /// A stop was asked for by this signal.
    Stop(Signal),
    /// A child changed state: reap with [`reap`].
    Child,
    /// SIGUSR2: `--switch-output`'s signal (ignored otherwise, as perf
    /// ignores it without a mode that uses it).
    Switch,
    /// The `--control` channel has something to read.
    Control,
    /// A `--switch-output-event` event was hit (or hung up): its rings
    /// say whose hits they were.
    SwitchEvent,
    /// Nothing happened within the timeout.
    Timeout,
}

/// The coordinator's signals, blocked and read from a signalfd. Children
/// inherit the block: writers thereby ignore the terminal's Ctrl-C and stop
/// only when told; the workload unblocks before exec.
pub struct Signals {
    fd: SignalFd,
}

impl Signals {
    /// Blocks INT, TERM, HUP, CHLD and USR2 and opens their signalfd.
    pub fn block() -> Result<Signals, RecordError> {
        let mut set = SigSet::empty();
        for signal in [
            Signal::SIGINT,
            Signal::SIGTERM,
            Signal::SIGHUP,
            Signal::SIGCHLD,
            Signal::SIGUSR2,
        ] {
            set.add(signal);
        }
        process::block_signals(&set).map_err(RecordError::system("blocking signals"))?;
        let fd = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
            .map_err(|e| RecordError::system("opening a signalfd")(e.into()))?;
        Ok(Signals { fd })
    }

    /// Waits up to `timeout_ms` (`None`: for as long as it takes) for a
    /// signal, for `control` to be readable, or for one of the
    /// `--switch-output-event` events in `switch_events` to report.
    pub fn wait(
        &mut self,
        timeout_ms: Option<u16>,
        control: Option<BorrowedFd<'_>>,
        switch_events: &[BorrowedFd<'_>],
    ) -> Result<Wake, RecordError> {
        loop {
            if let Some(info) = self
                .fd
                .read_signal()
                .map_err(|e| RecordError::system("reading signals")(e.into()))?
            {
                let signal = Signal::try_from(info.ssi_signo as i32).ok();
                return Ok(match signal {
                    Some(Signal::SIGCHLD) => Wake::Child,
                    Some(Signal::SIGUSR2) => Wake::Switch,
                    Some(signal) => Wake::Stop(signal),
                    None => continue,
                });
            }
            let mut fds = vec![PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            fds.extend(control.map(|fd| PollFd::new(fd, PollFlags::POLLIN)));
            let first_event = fds.len();
            fds.extend(
                switch_events
                    .iter()
                    .map(|&fd| PollFd::new(fd, PollFlags::POLLIN)),
            );
            let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
            let timeout = timeout_ms.map_or(PollTimeout::NONE, PollTimeout::from);
            match poll(&mut fds, timeout) {
                Ok(0) => return Ok(Wake::Timeout),
                Ok(_) if control.is_some() && ready(&fds[1]) => return Ok(Wake::Control),
                Ok(_) if fds[first_event..].iter().any(ready) => return Ok(Wake::SwitchEvent),
                Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(RecordError::system("waiting for signals")(e.into())),
            }
        }
    }
}

/// One child that ended, with the exit code a shell would report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// Its pid.
    pub pid: Pid,
    /// Exit code, or 128 + signal.
    pub code: i32,
}

/// Reaps every child that has ended.
pub fn reap() -> Vec<Ended> {
    let mut ended = Vec::new();
    while let Ok(status) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
        match status {
            WaitStatus::Exited(pid, code) => ended.push(Ended { pid, code }),
            WaitStatus::Signaled(pid, signal, _) => ended.push(Ended {
                pid,
                code: 128 + signal as i32,
            }),
            WaitStatus::StillAlive => break,
            _ => {}
        }
    }
    ended
}
