//! Standard output while a recording runs that writes perf's pipe format
//! into it at the end: set aside for that stream, so nothing else reaches
//! it, and watched for its reader going away.
//!
//! perf record in pipe mode makes the workload's standard output its
//! standard error (`dup2(2, 1)` in `evlist__prepare_workload`), since only
//! perf.data may go down the pipe. Setting descriptor 1 to standard error
//! for the whole recording does that for the workload and for every
//! process of the recorder alike; the stream is kept on a close-on-exec
//! copy, and put back as descriptor 1 for the merge.
//!
//! A reader that goes away (`| head -c 100`) makes the kernel send a
//! signal, when asked (`O_ASYNC`, `F_SETOWN`, `F_SETSIG`): a pipe's writers
//! are signalled when its last reader closes it (`pipe_release`), and
//! otherwise only when a reader takes bytes from it, which it cannot do
//! before the stream is written. A reader gone before the signal was asked
//! for (`| true`) is found by `poll` (`POLLERR`), and the signal sent then.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::sys::stat::SFlag;

/// `F_SETSIG` of `<asm-generic/fcntl.h>`, which every architecture but
/// parisc takes (the libc crate leaves it out for glibc).
const F_SETSIG: libc::c_int = 10;

/// Standard output, set aside: descriptor 1 is standard error until
/// [`restore`](Self::restore) (or the drop) puts the stream back.
pub struct StdoutAside {
    stream: Option<OwnedFd>,
}

impl StdoutAside {
    /// Keeps standard output on a close-on-exec copy and makes descriptor
    /// 1 standard error.
    pub fn set_aside() -> io::Result<StdoutAside> {
        let stream = io::stdout().as_fd().try_clone_to_owned()?;
        nix::unistd::dup2_stdout(io::stderr())?;
        Ok(StdoutAside {
            stream: Some(stream),
        })
    }

    /// Asks the kernel for `signal`, sent to this process, when the last
    /// reader of the stream goes away. Only a pipe or FIFO says so (a
    /// file has no reader, a terminal signals its input): `false`, and
    /// nothing asked, for anything else.
    pub fn signal_when_reader_leaves(&self, signal: Signal) -> io::Result<bool> {
        let Some(stream) = &self.stream else {
            return Ok(false);
        };
        let mode = nix::sys::stat::fstat(stream)?.st_mode;
        if SFlag::from_bits_truncate(mode) & SFlag::S_IFMT != SFlag::S_IFIFO {
            return Ok(false);
        }
        let fd = stream.as_raw_fd();
        let pid = std::process::id() as libc::c_int;
        // SAFETY: fcntl with integer arguments on a descriptor this value
        // owns: it reads and writes no memory of ours. The owner and the
        // signal are set before O_ASYNC, so the first signal already goes
        // where asked.
        let set = unsafe {
            [
                libc::fcntl(fd, libc::F_SETOWN, pid),
                libc::fcntl(fd, F_SETSIG, signal as libc::c_int),
            ]
        };
        if set.contains(&-1) {
            return Err(io::Error::last_os_error());
        }
        set_async(stream, true)?;
        // A reader gone already (`| true`) sent nothing: the signal now.
        let mut fds = [PollFd::new(stream.as_fd(), PollFlags::empty())];
        poll(&mut fds, PollTimeout::ZERO)?;
        if fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLERR))
        {
            nix::sys::signal::kill(nix::unistd::getpid(), signal)?;
        }
        Ok(true)
    }

    /// A copy of the stream's descriptor.
    pub fn stream(&self) -> io::Result<OwnedFd> {
        match &self.stream {
            Some(stream) => stream.try_clone(),
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }

    /// Puts the stream back as descriptor 1, with no signal asked for.
    pub fn restore(mut self) -> io::Result<()> {
        self.put_back()
    }

    fn put_back(&mut self) -> io::Result<()> {
        let Some(stream) = self.stream.take() else {
            return Ok(());
        };
        set_async(&stream, false)?;
        nix::unistd::dup2_stdout(&stream)?;
        Ok(())
    }
}

impl Drop for StdoutAside {
    fn drop(&mut self) {
        let _ = self.put_back();
    }
}

/// Sets or clears `O_ASYNC` on `fd`.
fn set_async(fd: &OwnedFd, on: bool) -> io::Result<()> {
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    let flags = match on {
        true => flags | OFlag::O_ASYNC,
        false => flags - OFlag::O_ASYNC,
    };
    fcntl(fd, FcntlArg::F_SETFL(flags))?;
    Ok(())
}
