//! perf's `--control`: text commands read from a FIFO or an inherited
//! descriptor while recording (`enable`, `disable`, `stop`, `ping`,
//! `evlist`, `snapshot`), each answered with `ack` when an ack channel was
//! given, as perf answers them.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;

use crate::config::ControlSpec;
use crate::RecordError;

/// One command from the control channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ControlCommand {
    /// `enable [EVENT]`: count again (every event, or the one named).
    Enable(Option<String>),
    /// `disable [EVENT]`: stop counting, keep recording the side-band.
    Disable(Option<String>),
    /// `stop`: end the recording.
    Stop,
    /// `ping`: only the ack.
    Ping,
    /// `evlist`: list the events.
    Evlist,
    /// `snapshot`: not for rings that are drained continuously.
    Snapshot,
    /// Anything else.
    Unknown(String),
}

impl ControlCommand {
    fn parse(line: &str) -> ControlCommand {
        let line = line.trim();
        let (word, rest) = match line.split_once(' ') {
            Some((word, rest)) => (word, Some(rest.trim().to_string())),
            None => (line, None),
        };
        match word {
            "enable" => ControlCommand::Enable(rest),
            "disable" => ControlCommand::Disable(rest),
            "stop" => ControlCommand::Stop,
            "ping" => ControlCommand::Ping,
            "evlist" => ControlCommand::Evlist,
            "snapshot" => ControlCommand::Snapshot,
            _ => ControlCommand::Unknown(line.to_string()),
        }
    }
}

/// The open control channel.
pub struct ControlChannel {
    commands: File,
    acks: Option<File>,
    pending: Vec<u8>,
}

impl ControlChannel {
    /// Opens the channel `spec` names; the command side never blocks.
    pub fn open(spec: &ControlSpec) -> Result<ControlChannel, RecordError> {
        let failed = |what: String| {
            move |e: io::Error| RecordError::Usage(format!("--control: {what}: {e}"))
        };
        let (commands, acks) = match spec {
            // Read-write, as perf opens them: neither open blocks waiting for
            // the other end, and the commands never read as ended.
            ControlSpec::Fifo(ctl, ack) => {
                let open = |path: &std::path::Path, flags| {
                    OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(flags)
                        .open(path)
                        .map_err(failed(format!("cannot open {}", path.display())))
                };
                let commands = open(ctl, libc::O_NONBLOCK)?;
                let acks = ack.as_deref().map(|a| open(a, 0)).transpose()?;
                (commands, acks)
            }
            ControlSpec::Fd(ctl, ack) => {
                let adopt = |fd: i32| {
                    shardrec_sys::process::adopt_inherited_fd(fd)
                        .map(File::from)
                        .map_err(failed(format!("descriptor {fd} is not open")))
                };
                let commands = adopt(*ctl)?;
                nix::fcntl::fcntl(
                    &commands,
                    nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
                )
                .map_err(|e| failed(format!("descriptor {ctl}"))(e.into()))?;
                (commands, ack.map(adopt).transpose()?)
            }
        };
        Ok(ControlChannel {
            commands,
            acks,
            pending: Vec::new(),
        })
    }

    /// What to poll for commands.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.commands.as_fd()
    }

    /// The whole commands waiting (ended by a newline or a NUL, as perf
    /// reads them).
    pub fn read_commands(&mut self) -> Vec<ControlCommand> {
        let mut buffer = [0u8; 512];
        loop {
            match self.commands.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => self.pending.extend_from_slice(&buffer[..read]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        let mut commands = Vec::new();
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n' || b == 0) {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line[..end]);
            if !text.trim().is_empty() {
                commands.push(ControlCommand::parse(&text));
            }
        }
        commands
    }

    /// Answers the last command, if an ack channel was given.
    pub fn ack(&mut self) {
        if let Some(acks) = self.acks.as_mut() {
            // An ack nobody reads must not stop the recording.
            let _ = acks.write_all(b"ack\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_as_perf_spells_them() {
        assert_eq!(
            ControlCommand::parse("enable"),
            ControlCommand::Enable(None)
        );
        assert_eq!(
            ControlCommand::parse("disable cpu-clock"),
            ControlCommand::Disable(Some("cpu-clock".into()))
        );
        assert_eq!(ControlCommand::parse(" stop "), ControlCommand::Stop);
        assert_eq!(
            ControlCommand::parse("jump"),
            ControlCommand::Unknown("jump".into())
        );
    }
}
