//! Injected I/O faults, for the tests: `SHARDREC_FAULTS=SITE=FAULT[@N],...`
//! makes the Nth call (the first by default) at each named site fail as
//! told, in whichever process reaches it (a writer, the VIP, the
//! coordinator, the merge). FAULT is an errno name (`ENOSPC`, `EIO`,
//! `EDQUOT`, `EINTR`), `short`: a write that takes half of what it was
//! given, or `crash`: the process exits there at once, as one killed. Without the variable nothing is injected, at the cost of one
//! lookup per process. The sites: `writer.write`, `writer.sync`,
//! `vip.write`, `meta.write`, `merge.write` (every write of the merge),
//! `merge.slice` (a write of a time slice's records: 512 KiB each, so the
//! Nth is as far into the data whatever came before), `merge.round` (a
//! round of the live merger that writes records), `merge.checkpoint` (the
//! live merger saying how far its output holds the recording, before it
//! frees the shards behind), `merge.window` (the live merger about to
//! finish a `--switch-output` window that closed), and `filter.load`,
//! where
//! any fault makes the VIP load a `--filter` program the kernel's
//! verifier must refuse (a register read before it is set), so the
//! verifier's real refusal is what the test sees.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

/// What a site is to do instead of its call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Fail with this errno.
    Errno(i32),
    /// Write half of what was given.
    Short,
    /// End the process at once (done by [`inject`]: never returned).
    Crash,
}

impl Fault {
    /// The error of an [`Fault::Errno`]; `None` for a short write.
    pub fn error(self) -> Option<std::io::Error> {
        match self {
            Fault::Errno(errno) => Some(std::io::Error::from_raw_os_error(errno)),
            Fault::Short | Fault::Crash => None,
        }
    }
}

struct Planned {
    site: String,
    fault: Fault,
    at: u64,
    calls: AtomicU64,
}

fn planned() -> &'static [Planned] {
    static PLANNED: OnceLock<Vec<Planned>> = OnceLock::new();
    PLANNED.get_or_init(|| {
        std::env::var("SHARDREC_FAULTS")
            .map(|spec| spec.split(',').filter_map(parse).collect())
            .unwrap_or_default()
    })
}

fn parse(entry: &str) -> Option<Planned> {
    let (site, rest) = entry.split_once('=')?;
    let (fault, at) = match rest.split_once('@') {
        Some((fault, at)) => (fault, at.parse().ok()?),
        None => (rest, 1),
    };
    let fault = match fault {
        "short" => Fault::Short,
        "ENOSPC" => Fault::Errno(libc::ENOSPC),
        "EIO" => Fault::Errno(libc::EIO),
        "EDQUOT" => Fault::Errno(libc::EDQUOT),
        "EINTR" => Fault::Errno(libc::EINTR),
        "crash" => Fault::Crash,
        _ => return None,
    };
    Some(Planned {
        site: site.to_string(),
        fault,
        at,
        calls: AtomicU64::new(0),
    })
}

static CRASHES_DISARMED: AtomicBool = AtomicBool::new(false);

/// In a helper restarted after one that crashed: the crashes planned are
/// not injected again (an injected crash stands for one kill, not for one
/// in every process that replaces the killed one).
pub fn disarm_crashes() {
    CRASHES_DISARMED.store(true, Ordering::Relaxed);
}

/// Counts a call at `site`; the fault to inject instead, if this is the
/// call the environment names.
pub fn inject(site: &str) -> Option<Fault> {
    let planned = planned().iter().find(|p| p.site == site)?;
    let call = planned.calls.fetch_add(1, Ordering::Relaxed) + 1;
    let fault = (call == planned.at).then_some(planned.fault);
    if fault == Some(Fault::Crash) && CRASHES_DISARMED.load(Ordering::Relaxed) {
        return None;
    }
    if fault == Some(Fault::Crash) {
        // As a process killed: no clean-up, no report (and no core file).
        std::process::exit(137);
    }
    fault
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_as_written() {
        let planned = parse("writer.write=ENOSPC@3").unwrap();
        assert_eq!(
            (planned.site.as_str(), planned.fault, planned.at),
            ("writer.write", Fault::Errno(libc::ENOSPC), 3)
        );
        assert_eq!(parse("vip.write=short").unwrap().at, 1);
        assert!(parse("vip.write=ENOENT").is_none());
        assert!(parse("nonsense").is_none());
    }
}
