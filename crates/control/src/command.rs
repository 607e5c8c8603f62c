//! The one-byte words the coordinator sends a helper over its control pipe.

use std::io::{self, Read};

/// What the coordinator asks of a helper (a writer, or the VIP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Command {
    /// Recording begins: enable this CPU's events (from this CPU, so the
    /// kernel needs no IPI), say so, and start writing.
    Start,
    /// Recording ends: disable this CPU's events, write everything left in
    /// the ring, sync, exit.
    Drain,
    /// Write what the ring holds now: it is below its wakeup watermark but
    /// has held data for a while (the coordinator watches every ring, so
    /// a writer never wakes on a timer of its own).
    Flush,
    /// Stop as soon as the write in flight (if any) completes.
    Quit,
    /// `--switch-output`: write what the ring holds now into the current
    /// shard, go on in the next window's, and report `Switched`. The events
    /// stay enabled throughout: nothing falls between the two files.
    Switch,
}

impl Command {
    /// The byte sent for this command.
    pub fn byte(self) -> u8 {
        match self {
            Command::Start => b'S',
            Command::Drain => b'D',
            Command::Quit => b'Q',
            Command::Flush => b'F',
            Command::Switch => b'W',
        }
    }

    /// The command a byte stands for. End of file (the coordinator is gone)
    /// reads as `Drain`, so a killed coordinator still leaves whole shards.
    pub fn from_read(read: &[u8]) -> Command {
        match read.first() {
            Some(b'S') => Command::Start,
            Some(b'Q') => Command::Quit,
            Some(b'F') => Command::Flush,
            Some(b'W') => Command::Switch,
            _ => Command::Drain,
        }
    }

    /// Blocks for the next word on `control` (end of file reads as Drain).
    pub fn read_from(control: &mut impl Read) -> io::Result<Command> {
        let mut byte = [0u8; 1];
        loop {
            match control.read(&mut byte) {
                Ok(read) => return Ok(Command::from_read(&byte[..read])),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Why a helper's loop handed control back to its caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Served {
    /// A `Switch` came and everything recorded before it is written: the
    /// caller opens the next window's files, reports `Switched`, and
    /// serves on.
    Switch,
    /// A stop came and was carried out.
    Stopped,
}
