//! `--setup-filter pin|unpin` (perf 6.12's option): root pins one filter
//! program and its map on the bpf file system, so that `--filter` works
//! for regular users, whose recordings cannot load programs of their own
//! (`shardrec_filter::pinned` says how the program finds each event's
//! filter).
//!
//! A regular user's recording has no VIP (it exists for the CPU-wide
//! side band, which such a user cannot open), so the coordinator makes
//! the few bpf(2) calls of the pinned filter itself: it gets the pinned
//! objects, writes its filters into the map before the events are
//! enabled, reads their counts at the stop and removes them.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use shardrec_filter::pinned::{self, KernelLayout};
use shardrec_sys::bpf::{self, HashMap, KernelBtf};

use crate::RecordError;

/// Where the program and its map are pinned.
pub fn pin_dir() -> PathBuf {
    Path::new(bpf::BPFFS).join("shardrec_filter")
}

const PROGRAM: &str = "program";
const FILTERS: &str = "filters";
/// Events that may have a filter at once, over every recording.
const MAX_EVENTS: u32 = 16384;

/// What `--setup-filter` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetupFilter {
    /// Load and pin the program and its map, for every user.
    Pin,
    /// Remove them.
    Unpin,
}

/// Carries out `action`; returns what to tell the user.
pub fn setup(action: SetupFilter) -> Result<String, RecordError> {
    let dir = pin_dir();
    let removed =
        unpin(&dir).map_err(RecordError::system(format!("unpinning {}", dir.display())))?;
    match action {
        SetupFilter::Unpin => Ok(match removed {
            true => format!("the pinned sample filter is removed from {}", dir.display()),
            false => format!("no sample filter was pinned in {}", dir.display()),
        }),
        SetupFilter::Pin => pin(&dir),
    }
}

/// Removes what is pinned in `dir`; true when there was something.
fn unpin(dir: &Path) -> io::Result<bool> {
    if !dir.exists() {
        return Ok(false);
    }
    for name in [PROGRAM, FILTERS] {
        match std::fs::remove_file(dir.join(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    std::fs::remove_dir(dir)?;
    Ok(true)
}

/// Loads the program against a new map and pins both in `dir`, open to
/// every user.
fn pin(dir: &Path) -> Result<String, RecordError> {
    let mounted = bpf::mount_bpffs().map_err(RecordError::system("--setup-filter pin"))?;
    let layout = KernelBtf::load()
        .and_then(|btf| KernelLayout::read(&btf))
        .map_err(RecordError::system(format!(
            "--setup-filter pin: reading the kernel's layout from {}",
            KernelBtf::PATH
        )))?;
    let map = HashMap::create(
        "shardrec_filters",
        pinned::KEY_SIZE,
        pinned::VALUE_SIZE,
        MAX_EVENTS,
    )
    .map_err(RecordError::system(
        "--setup-filter pin: creating the filters map",
    ))?;
    let prog = pinned::load(&layout, &map).map_err(RecordError::system(
        "--setup-filter pin: loading the program",
    ))?;
    let pinned = || -> io::Result<()> {
        std::fs::create_dir(dir)?;
        std::fs::set_permissions(dir, PermissionsExt::from_mode(0o755))?;
        for (name, fd) in [(PROGRAM, prog.as_fd()), (FILTERS, map.fd())] {
            bpf::pin(fd, &dir.join(name))?;
            // A user's recording gets both read-write (BPF_OBJ_GET of a
            // program takes nothing less) and writes its filters.
            std::fs::set_permissions(dir.join(name), PermissionsExt::from_mode(0o666))?;
        }
        Ok(())
    };
    if let Err(error) = pinned() {
        let _ = unpin(dir);
        return Err(RecordError::system(format!(
            "--setup-filter pin: pinning in {}",
            dir.display()
        ))(error));
    }
    let mut said = format!(
        "the sample filter is pinned in {}: --filter now works for every user (until a reboot, or --setup-filter unpin)",
        dir.display()
    );
    if mounted {
        said.push_str(&format!(
            "; mounted a bpf file system on {} for it",
            bpf::BPFFS
        ));
    }
    if let Some(why) = unreachable_for_users() {
        said.push_str(&format!("; but {why}"));
    }
    Ok(said)
}

/// Why a regular user could not reach the pinned objects, if so.
fn unreachable_for_users() -> Option<String> {
    let mode = std::fs::metadata(bpf::BPFFS).ok()?.permissions().mode();
    (mode & 0o001 == 0).then(|| {
        format!(
            "{} is mode {:o}: users cannot reach it (mount it with mode=1777, or 0755)",
            bpf::BPFFS,
            mode & 0o7777
        )
    })
}

/// The pinned program and map, as a regular user's recording gets them.
pub struct PinnedFilter {
    /// The program, to attach to the events.
    pub prog: OwnedFd,
    /// The filters, by event id.
    pub filters: HashMap,
}

impl PinnedFilter {
    /// Gets them; the error says what a user can do about it.
    pub fn open() -> io::Result<PinnedFilter> {
        let dir = pin_dir();
        let got = || -> io::Result<PinnedFilter> {
            Ok(PinnedFilter {
                prog: bpf::pinned(&dir.join(PROGRAM))?,
                filters: HashMap::pinned(&dir.join(FILTERS), pinned::KEY_SIZE, pinned::VALUE_SIZE)?,
            })
        };
        got().map_err(|error| {
            let hint = match error.kind() {
                io::ErrorKind::NotFound => "none is pinned: root can pin one with 'shardrec record --setup-filter pin'".to_string(),
                // Before Linux 6.5, kernel.unprivileged_bpf_disabled
                // refuses every bpf(2) command to regular users.
                io::ErrorKind::PermissionDenied => "it cannot be opened: before Linux 6.5, kernel.unprivileged_bpf_disabled refuses a regular user every bpf(2) call".to_string(),
                _ => "it cannot be opened".to_string(),
            };
            io::Error::new(
                error.kind(),
                format!("the pinned sample filter in {}: {hint} ({error})", dir.display()),
            )
        })
    }
}
