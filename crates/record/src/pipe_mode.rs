//! perf's pipe mode (`-o -`, or without `-o` when standard output is a
//! FIFO): standard output carries perf.data and nothing else, a reader
//! that leaves stops the recording, and shardrec then ends as perf does.

use std::path::Path;

use nix::sys::signal::{SigSet, Signal};
use shardrec_merge::MergeError;
use shardrec_shard::output::Output;
use shardrec_sys::process;
use shardrec_sys::stdout::StdoutAside;

use crate::RecordError;

/// The signal that stops the recording when the stream's reader leaves:
/// one the coordinator stops on (it reads INT, TERM and HUP), and the
/// one a terminal sends when its reader, the user, hangs up.
const READER_LEFT: Signal = Signal::SIGHUP;

/// Standard output, kept for the stream while the recording runs.
pub(crate) struct PipeMode {
    aside: StdoutAside,
}

impl PipeMode {
    /// For a recording into `output`: `None` unless that is standard
    /// output in the pipe format. Standard output is set aside (the
    /// workload's and every message go to standard error, as perf sends
    /// its workload's). Unless `streamed` (the live merger writes into it
    /// and watches its reader), the recording stops when its reader
    /// leaves: the kernel signals a pipe's writers when the last reader
    /// closes it, but also whenever a reader takes bytes from it, so the
    /// signal serves only a stream written at the stop.
    pub(crate) fn begin(output: &Output, streamed: bool) -> Result<Option<PipeMode>, RecordError> {
        if *output != Output::Pipe {
            return Ok(None);
        }
        let failed = RecordError::system;
        let aside = StdoutAside::set_aside().map_err(failed("setting standard output aside"))?;
        if streamed {
            return Ok(Some(PipeMode { aside }));
        }
        // Blocked now, as the coordinator blocks it once it starts: a
        // reader that leaves before then stops the recording at once
        // instead of ending this process.
        let mut set = SigSet::empty();
        set.add(READER_LEFT);
        process::block_signals(&set).map_err(failed("blocking SIGHUP"))?;
        aside
            .signal_when_reader_leaves(READER_LEFT)
            .map_err(failed("watching standard output's reader"))?;
        Ok(Some(PipeMode { aside }))
    }

    /// A copy of the stream, for the live merger that writes it.
    pub(crate) fn stream(&self) -> std::io::Result<std::sync::Arc<std::os::fd::OwnedFd>> {
        self.aside.stream().map(std::sync::Arc::new)
    }

    /// Standard output back, for the merge into it.
    pub(crate) fn end(self) -> Result<(), RecordError> {
        self.aside
            .restore()
            .map_err(RecordError::system("restoring standard output"))
    }
}

/// Whether `error` is a merge into standard output whose reader left.
pub fn reader_left(error: &MergeError) -> bool {
    match error {
        MergeError::Output { path, source } => {
            path == Path::new(shardrec_shard::output::STDOUT)
                && source.kind() == std::io::ErrorKind::BrokenPipe
        }
        _ => false,
    }
}

/// Ends as perf record does when its reader leaves: killed by SIGPIPE (a
/// shell reports 141), with nothing more said.
pub fn die_of_sigpipe() -> ! {
    process::die_of(Signal::SIGPIPE)
}
