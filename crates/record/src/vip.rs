//! The coordinator's VIP: the process over every CPU's side-band event,
//! the one place `bpf(2)` is called, forked and restarted here (its body
//! is `shardrec_vip::process`).

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use shardrec_control::restart::Helper;
use shardrec_control::{Outcome, VipStats};
use shardrec_format::SampleIdLayout;
use shardrec_shard::{RecordingDir, WindowCursor};
use shardrec_sys::process;
use shardrec_vip::off_cpu::OffCpuSetup;
pub use shardrec_vip::process::VipPrograms;
use shardrec_vip::process::{self as vip, VipEvents, VipFiles};

use crate::helper_process::{self, HelperProcess};
use crate::open::{SideBandEvents, SIDE_BAND_RING_PAGES};
use crate::RecordError;

/// The VIP process and what it reported.
pub struct VipProcess {
    /// The process.
    pub helper: HelperProcess,
    /// What it reported at exit.
    pub stats: Option<VipStats>,
    /// When a VIP died and was restarted (since the recording began).
    pub restarted_at: Vec<std::time::Duration>,
    /// Whether its capture program runs in the kernel.
    pub capturing: bool,
}

/// A VIP that dies this often is not restarted again.
pub const MAX_RESTARTS: usize = shardrec_control::restart::times(Helper::Vip);

/// Forks the VIP over the side-band events, loading `programs`. Returns
/// it once it has described the programs already loaded, with those
/// records and, for each filter, the descriptors of its program and
/// counters map.
pub fn spawn(
    events: &SideBandEvents,
    dir: &RecordingDir,
    programs: VipPrograms<'_>,
    windows: Option<WindowCursor>,
) -> Result<(VipProcess, Vec<u8>, Vec<OwnedFd>), RecordError> {
    let shard = dir.create_file(&dir.vip_path())?;
    let bpf = dir.create_file(&dir.bpf_path())?;
    start(events, shard, bpf, programs, windows)
}

/// Restarts a VIP that died: its shard and `bpf` file cut back to their
/// last whole record and entry, and a new VIP appending to them. It maps
/// the same rings, so the side-band records that came meanwhile are
/// still there; the programs loaded meanwhile and still loaded it
/// captures as it captures those loaded before a recording (their records
/// are in the rings, so the ones it describes are dropped). Programs
/// loaded and unloaded while no VIP ran are not captured. The off-CPU
/// program went with the VIP that died: the new one loads it again (the
/// waits that began meanwhile are not written).
pub fn restart(
    events: &SideBandEvents,
    dir: &RecordingDir,
    off_cpu: Option<&OffCpuSetup>,
    dead: &VipProcess,
    windows: Option<WindowCursor>,
) -> Result<VipProcess, RecordError> {
    let whole_records = |bytes: &[u8]| {
        shardrec_format::walk::RecordWalker::new(bytes)
            .last()
            .map_or(0, |r| r.offset + r.bytes.len())
    };
    let whole_entries = |bytes: &[u8]| bytes.len() - shardrec_shard::bpf_file::read(bytes).1;
    let shard = reopen_whole(dir, &dir.vip_path(), whole_records)?;
    let bpf = reopen_whole(dir, &dir.bpf_path(), whole_entries)?;
    // The filters stay attached to their events: a new VIP loads none.
    let programs = VipPrograms {
        filters: &[],
        off_cpu,
        capture_in_kernel: dead.capturing,
    };
    let (vip, _described, _) = start(events, shard, bpf, programs, windows)?;
    Ok(vip)
}

/// `path` cut back to the length `whole` finds whole in it, open for
/// appending.
fn reopen_whole(
    dir: &RecordingDir,
    path: &std::path::Path,
    whole: impl Fn(&[u8]) -> usize,
) -> Result<File, RecordError> {
    use std::io::Seek;
    let what = || format!("reopening {}", path.display());
    let bytes = std::fs::read(path).map_err(RecordError::system(what()))?;
    let mut file = dir.reopen_file(path)?;
    file.set_len(whole(&bytes) as u64)
        .and_then(|()| file.seek(io::SeekFrom::End(0)))
        .map_err(RecordError::system(what()))?;
    Ok(file)
}

fn start(
    events: &SideBandEvents,
    shard: File,
    bpf: File,
    programs: VipPrograms<'_>,
    windows: Option<WindowCursor>,
) -> Result<(VipProcess, Vec<u8>, Vec<OwnedFd>), RecordError> {
    let side_band = VipEvents {
        events: events.events.iter().map(|(_, event, _)| event).collect(),
        ring_pages: SIDE_BAND_RING_PAGES,
        layout: SampleIdLayout::new(events.sample_type),
        event_id: events.events.first().map_or(0, |(_, _, id)| *id),
    };
    let (ours, theirs) = shardrec_sys::fds::socket_pair()
        .map_err(RecordError::system("making the VIP's descriptor socket"))?;
    let mut helper = HelperProcess::spawn("VIP".into(), move |control, mut report| {
        let fds = side_band.events.iter().map(|e| e.as_fd().as_raw_fd());
        let mut keep: Vec<RawFd> = fds.collect();
        let outputs = programs.off_cpu.iter().flat_map(|s| &s.outputs);
        keep.extend(outputs.map(|(_, event)| event.as_raw_fd()));
        keep.extend([
            shard.as_raw_fd(),
            bpf.as_raw_fd(),
            control.as_raw_fd(),
            report.as_raw_fd(),
            theirs.as_raw_fd(),
        ]);
        let files = VipFiles {
            shard,
            bpf,
            control,
            filters: theirs,
        };
        // SAFETY: this forked child uses only the kept descriptors and
        // leaves through `exit_now`, never dropping what it inherited.
        let outcome = unsafe { process::close_fds_except(&keep) }
            .and_then(|()| {
                vip::run(
                    &side_band,
                    files,
                    programs,
                    &mut report,
                    next_files(windows),
                )
            })
            .map(Outcome::Vip);
        helper_process::finish(&mut report, outcome)
    })?;
    let (records, capturing) = helper.wait_ready()?;
    let filters = match programs.filters.is_empty() {
        true => Vec::new(),
        false => shardrec_sys::fds::receive(ours.as_fd()).map_err(RecordError::system(
            "receiving the --filter programs from the VIP",
        ))?,
    };
    Ok((
        VipProcess {
            helper,
            stats: None,
            restarted_at: Vec::new(),
            capturing,
        },
        records,
        filters,
    ))
}

impl VipProcess {
    /// Its process has exited: reads its final report.
    pub fn ended(&mut self) -> Result<VipStats, RecordError> {
        self.helper.mark_exited();
        match self.helper.read_outcome()? {
            Outcome::Vip(stats) => {
                self.stats = Some(stats);
                Ok(stats)
            }
            other => Err(self.helper.failure(&format!("reported {other:?}"))),
        }
    }
}

/// At a Switch, the next window's `vip.shard` and `bpf` file; without
/// windows, none: the VIP goes on in the same ones.
fn next_files(
    mut windows: Option<WindowCursor>,
) -> impl FnMut() -> io::Result<Option<(File, File)>> {
    move || {
        let Some(windows) = windows.as_mut() else {
            return Ok(None);
        };
        let dir = windows.advance();
        let create = |path: std::path::PathBuf| dir.create_file(&path).map_err(io::Error::other);
        Ok(Some((create(dir.vip_path())?, create(dir.bpf_path())?)))
    }
}
