//! Injected I/O faults, for the tests: `SHARDREC_FAULTS=SITE=FAULT[@N],...`
//! makes the Nth call (the first by default) at each named [`Site`] fail
//! as told, in whichever process reaches it (a writer, the VIP, the
//! coordinator, the merge). FAULT is an errno name (`ENOSPC`, `EIO`,
//! `EDQUOT`, `EINTR`), `short`: a write that takes half of what it was
//! given, `crash`: the process exits there at once, as one killed, or
//! `stall`: the process stops there for half a second, then goes on. At
//! `filter.load` any fault makes the VIP load a `--filter` program the
//! kernel's verifier must refuse (a register read before it is set), so
//! the verifier's real refusal is what the test sees.
//!
//! `shardrec` checks the variable before anything else
//! ([`check_planned`]) and refuses one with a mistake in it: a typo must
//! not make a test of a fault pass without injecting anything. Without
//! the variable nothing is injected, at the cost of one lookup per
//! process.

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
    /// Stop for [`STALL`], as a process the scheduler or the disk holds
    /// up, then go on as if nothing happened (done by [`inject`]).
    Stall,
}

/// How long a [`Fault::Stall`] holds its process up.
pub const STALL: std::time::Duration = std::time::Duration::from_millis(500);

impl Fault {
    /// The error of an [`Fault::Errno`]; `None` for a short write.
    pub fn error(self) -> Option<std::io::Error> {
        match self {
            Fault::Errno(errno) => Some(std::io::Error::from_raw_os_error(errno)),
            Fault::Short | Fault::Crash | Fault::Stall => None,
        }
    }
}

/// A place where a test may inject a fault: each is named in
/// `SHARDREC_FAULTS` as [`Site::name`] gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// A writer's write of its ring into its shard.
    WriterWrite,
    /// A writer's sync of its shard (`--no-merge`).
    WriterSync,
    /// The VIP's write of a side-band record.
    VipWrite,
    /// A synced write of `meta`.
    MetaWrite,
    /// Every write of the merge.
    MergeWrite,
    /// A write of a time slice's records (512 KiB each).
    MergeSlice,
    /// A round of the live merger that writes records.
    MergeRound,
    /// The live merger saying how far its output holds the recording.
    MergeCheckpoint,
    /// The live merger about to finish a `--switch-output` window.
    MergeWindow,
    /// The VIP loading a `--filter` program.
    FilterLoad,
}

impl Site {
    /// Every site.
    pub const ALL: [Site; 10] = [
        Site::WriterWrite,
        Site::WriterSync,
        Site::VipWrite,
        Site::MetaWrite,
        Site::MergeWrite,
        Site::MergeSlice,
        Site::MergeRound,
        Site::MergeCheckpoint,
        Site::MergeWindow,
        Site::FilterLoad,
    ];

    /// Its name in `SHARDREC_FAULTS`.
    pub fn name(self) -> &'static str {
        match self {
            Site::WriterWrite => "writer.write",
            Site::WriterSync => "writer.sync",
            Site::VipWrite => "vip.write",
            Site::MetaWrite => "meta.write",
            Site::MergeWrite => "merge.write",
            Site::MergeSlice => "merge.slice",
            Site::MergeRound => "merge.round",
            Site::MergeCheckpoint => "merge.checkpoint",
            Site::MergeWindow => "merge.window",
            Site::FilterLoad => "filter.load",
        }
    }

    fn named(name: &str) -> Option<Site> {
        Site::ALL.into_iter().find(|site| site.name() == name)
    }
}

/// The faults by name, as `SHARDREC_FAULTS` gives them.
const FAULTS: [(&str, Fault); 7] = [
    ("ENOSPC", Fault::Errno(libc::ENOSPC)),
    ("EIO", Fault::Errno(libc::EIO)),
    ("EDQUOT", Fault::Errno(libc::EDQUOT)),
    ("EINTR", Fault::Errno(libc::EINTR)),
    ("short", Fault::Short),
    ("crash", Fault::Crash),
    ("stall", Fault::Stall),
];

struct Planned {
    site: Site,
    fault: Fault,
    at: u64,
    calls: AtomicU64,
}

/// What `SHARDREC_FAULTS` plans. A process that checked it first
/// ([`check_planned`]) knows it is whole; one that did not injects
/// nothing from a variable with a mistake in it.
fn planned() -> &'static [Planned] {
    static PLANNED: OnceLock<Vec<Planned>> = OnceLock::new();
    PLANNED.get_or_init(|| {
        std::env::var("SHARDREC_FAULTS")
            .ok()
            .and_then(|spec| parse_all(&spec).ok())
            .unwrap_or_default()
    })
}

/// Checks `SHARDREC_FAULTS`: a mistake in it (an unknown site or fault, a
/// count that is not a number) would otherwise make a test of a fault
/// pass without injecting anything. The error is one line naming the
/// mistake and what is known.
pub fn check_planned() -> Result<(), String> {
    match std::env::var("SHARDREC_FAULTS") {
        Ok(spec) => parse_all(&spec)
            .map(drop)
            .map_err(|why| format!("SHARDREC_FAULTS: {why}")),
        Err(_) => Ok(()),
    }
}

fn parse_all(spec: &str) -> Result<Vec<Planned>, String> {
    spec.split(',')
        .filter(|entry| !entry.is_empty())
        .map(parse)
        .collect()
}

fn parse(entry: &str) -> Result<Planned, String> {
    let (site, rest) = entry
        .split_once('=')
        .ok_or_else(|| format!("'{entry}' is not SITE=FAULT[@N]"))?;
    let site = Site::named(site).ok_or_else(|| {
        let known: Vec<&str> = Site::ALL.iter().map(|s| s.name()).collect();
        format!("unknown site '{site}' (the sites: {})", known.join(", "))
    })?;
    let (fault, at) = match rest.split_once('@') {
        Some((fault, at)) => match at.parse() {
            Ok(at) if at > 0 => (fault, at),
            _ => {
                return Err(format!(
                    "'{at}' in '{entry}' is not a call's number (1, 2, ...)"
                ))
            }
        },
        None => (rest, 1),
    };
    let fault = FAULTS
        .iter()
        .find(|(name, _)| *name == fault)
        .map(|&(_, fault)| fault)
        .ok_or_else(|| {
            let known: Vec<&str> = FAULTS.iter().map(|f| f.0).collect();
            format!("unknown fault '{fault}' (the faults: {})", known.join(", "))
        })?;
    Ok(Planned {
        site,
        fault,
        at,
        calls: AtomicU64::new(0),
    })
}

static DISARMED: AtomicBool = AtomicBool::new(false);

/// In a helper restarted after one that ended: the crashes and stalls
/// planned are not injected again (an injected crash stands for one kill,
/// a stall for one stall, not for one in every process that replaces the
/// first).
pub fn disarm_in_replacement() {
    DISARMED.store(true, Ordering::Relaxed);
}

/// Counts a call at `site`; the fault to inject instead, if this is the
/// call the environment names.
pub fn inject(site: Site) -> Option<Fault> {
    let planned = planned().iter().find(|p| p.site == site)?;
    let call = planned.calls.fetch_add(1, Ordering::Relaxed) + 1;
    match (call == planned.at).then_some(planned.fault) {
        Some(Fault::Crash | Fault::Stall) if DISARMED.load(Ordering::Relaxed) => None,
        // As a process killed: no clean-up, no report (and no core file).
        Some(Fault::Crash) => std::process::exit(137),
        Some(Fault::Stall) => {
            std::thread::sleep(STALL);
            None
        }
        fault => fault,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_read_as_written() {
        let planned = parse("writer.write=ENOSPC@3").unwrap();
        assert_eq!(
            (planned.site, planned.fault, planned.at),
            (Site::WriterWrite, Fault::Errno(libc::ENOSPC), 3)
        );
        assert_eq!(parse("vip.write=short").unwrap().at, 1);
        assert_eq!(parse_all("merge.round=crash@2,").unwrap().len(), 1);
    }

    #[test]
    fn a_mistake_is_named_with_what_is_known() {
        let error = |entry| parse(entry).err().unwrap();
        assert_eq!(
            error("writer.wrte=EIO"),
            "unknown site 'writer.wrte' (the sites: writer.write, writer.sync, vip.write, \
             meta.write, merge.write, merge.slice, merge.round, merge.checkpoint, \
             merge.window, filter.load)"
        );
        assert_eq!(
            error("vip.write=ENOENT"),
            "unknown fault 'ENOENT' (the faults: ENOSPC, EIO, EDQUOT, EINTR, short, crash, stall)"
        );
        assert!(error("writer.write=EIO@0").contains("not a call's number"));
        assert!(error("nonsense").contains("not SITE=FAULT[@N]"));
        assert!(parse_all("vip.write=EIO,bad").is_err());
    }
}
