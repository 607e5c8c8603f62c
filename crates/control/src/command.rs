//! What the coordinator asks of a writer or the VIP over its control pipe.

use std::io::{self, Read};

use serde::{Deserialize, Serialize};

use crate::Framed;

/// What the coordinator asks of a helper (a writer, or the VIP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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

impl Framed for Command {}

impl Command {
    /// Blocks for the next command on `control`; the pipe's end (the
    /// coordinator is gone) reads as `Drain`, so a killed coordinator
    /// still leaves whole shards.
    pub fn next_or_drain(control: &mut impl Read) -> io::Result<Command> {
        Ok(Command::read_from(control)?.unwrap_or(Command::Drain))
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
