//! Descriptors handed from one of the recorder's processes to another
//! (`SCM_RIGHTS` over a socket pair): the VIP, which makes every bpf(2)
//! call, gives the coordinator the programs it loaded.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags,
    SockFlag, SockType,
};

/// The most descriptors one message carries.
pub const MAX_FDS: usize = 64;

/// A connected pair of sockets, close-on-exec, each end for one process.
pub fn socket_pair() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?)
}

/// Sends `fds` (at most [`MAX_FDS`]) as one message.
pub fn send(socket: BorrowedFd<'_>, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} descriptors are more than one message carries",
                fds.len()
            ),
        ));
    }
    let raw: Vec<RawFd> = fds.iter().map(|fd| fd.as_raw_fd()).collect();
    let count = (raw.len() as u32).to_ne_bytes();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage] = if raw.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(&count)],
        cmsgs,
        MsgFlags::empty(),
        None,
    )?;
    Ok(())
}

/// Receives one message of descriptors sent by [`send`], in order.
pub fn receive(socket: BorrowedFd<'_>) -> io::Result<Vec<OwnedFd>> {
    let mut count = [0u8; 4];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let mut iov = [IoSliceMut::new(&mut count)];
    let message = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let (bytes, truncated) = (message.bytes, message.flags.contains(MsgFlags::MSG_CTRUNC));
    let mut fds = Vec::new();
    for cmsg in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            // SAFETY: SCM_RIGHTS installed these descriptors in this
            // process for this message; nothing else knows them yet.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    let sent = u32::from_ne_bytes(count) as usize;
    if truncated || bytes != 4 || fds.len() != sent {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("expected {sent} descriptors, received {}", fds.len()),
        ));
    }
    Ok(fds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_cross_a_socket_pair() {
        let (a, b) = socket_pair().unwrap();
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        send(a.as_fd(), &[file.as_fd(), file.as_fd()]).unwrap();
        let got = receive(b.as_fd()).unwrap();
        assert_eq!(got.len(), 2);
        let same = |fd: &OwnedFd| nix::sys::stat::fstat(fd).unwrap().st_ino;
        assert_eq!(same(&got[0]), nix::sys::stat::fstat(&file).unwrap().st_ino);
        send(a.as_fd(), &[]).unwrap();
        assert!(receive(b.as_fd()).unwrap().is_empty());
    }
}
