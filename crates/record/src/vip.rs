//! The VIP process: the side-band events of every CPU, and the one place
//! `bpf(2)` is called (see the shardrec-vip crate).

use std::fs::File;
use std::io::{self, BufWriter};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

use shardrec_control::restart::Helper;
use shardrec_control::{Framed, Outcome, Report, Served, VipStats};
use shardrec_filter::FilterProgram;
use shardrec_format::SampleIdLayout;
use shardrec_shard::{RecordingDir, WindowCursor};
use shardrec_sys::{process, PerfEvent, RingBuffer};
use shardrec_vip::capture::Capturer;
use shardrec_vip::kernel_capture::KernelCapture;
use shardrec_vip::off_cpu::OffCpuSetup;
use shardrec_vip::{existing, SideBand, Vip, BUFFER};

use crate::helper_process::{self, HelperProcess};
use crate::open::{SideBandEvents, SIDE_BAND_RING_PAGES as RING_PAGES};
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

/// What a VIP runs besides the side band: the `--filter` programs it
/// loads and hands over, and `--off-cpu`'s program.
#[derive(Clone, Copy)]
pub struct VipPrograms<'p> {
    /// The `--filter` programs.
    pub filters: &'p [FilterProgram],
    /// `--off-cpu`'s program, as set up.
    pub off_cpu: Option<&'p OffCpuSetup>,
    /// Whether to start the capture program (not again where a VIP found
    /// the kernel refuses it: trying costs a VIP tens of milliseconds).
    pub capture_in_kernel: bool,
}

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
    let layout = SampleIdLayout::new(events.sample_type);
    let first_id = events.events.first().map_or(0, |(_, _, id)| *id);
    let fds: Vec<&PerfEvent> = events.events.iter().map(|(_, event, _)| event).collect();
    let (ours, theirs) = shardrec_sys::fds::socket_pair()
        .map_err(RecordError::system("making the VIP's descriptor socket"))?;
    let mut helper = HelperProcess::spawn("VIP".into(), move |control, mut report| {
        let mut keep: Vec<RawFd> = fds.iter().map(|e| e.as_fd().as_raw_fd()).collect();
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
            windows,
        };
        // SAFETY: this forked child uses only the kept descriptors and
        // leaves through `exit_now`, never dropping what it inherited.
        let outcome = unsafe { process::close_fds_except(&keep) }
            .and_then(|()| run(&fds, files, programs, &mut report, &layout, first_id))
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

/// The files a VIP writes and reads.
struct VipFiles {
    shard: File,
    bpf: File,
    control: OwnedFd,
    /// Where the loaded filters' descriptors go.
    filters: OwnedFd,
    /// With `--switch-output`: the window being written.
    windows: Option<WindowCursor>,
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

/// The VIP's body: load the filters and hand them over, start the
/// off-CPU program, map the rings, enable the side-band events (before
/// the walk, so no program loads unseen between the two), describe the
/// loaded programs, hand those records over, then watch.
fn run(
    events: &[&PerfEvent],
    files: VipFiles,
    programs: VipPrograms<'_>,
    report: &mut File,
    layout: &SampleIdLayout,
    event_id: u64,
) -> io::Result<VipStats> {
    let VipFiles {
        shard,
        bpf,
        control,
        filters,
        mut windows,
    } = files;
    if !programs.filters.is_empty() {
        let loaded = programs
            .filters
            .iter()
            .map(shardrec_vip::filters::load)
            .collect::<io::Result<Vec<_>>>()?;
        let fds: Vec<_> = loaded.iter().flat_map(|f| f.fds()).collect();
        shardrec_sys::fds::send(filters.as_fd(), &fds)?;
    }
    drop(filters);
    let mut storage = std::mem::MaybeUninit::uninit();
    let off_cpu = programs
        .off_cpu
        .map(|setup| shardrec_vip::off_cpu::start(&mut storage, setup))
        .transpose()?;
    // A program may live a millisecond: the VIP must run as soon as it is
    // woken, even when every CPU is busy.
    process::prefer_wakeups();
    let rings = events
        .iter()
        .map(|&event| {
            Ok(SideBand {
                event,
                ring: RingBuffer::map_reader(event, RING_PAGES)?,
            })
        })
        .collect::<io::Result<Vec<_>>>()?;
    // Started before the side band: from its first record on, every
    // program has been captured as it loaded.
    let mut storage = shardrec_vip::kernel_capture::Storage::default();
    let kernel = match programs.capture_in_kernel {
        true => KernelCapture::start(&mut storage).ok(),
        false => None,
    };
    for event in events {
        event.enable()?;
    }
    let mut capturer = Capturer::new(BufWriter::with_capacity(BUFFER, bpf));
    let (records, _) = existing::describe(&mut capturer, layout, event_id)?;
    capturer.flush()?;
    let capturing = kernel.is_some();
    Report::Ready { records, capturing }.write_to(report)?;
    let mut vip = Vip::new(rings, shard, capturer, kernel, File::from(control))?;
    while vip.serve()? == Served::Switch {
        // Without windows, a Switch goes on in the same files.
        let mut records = Vec::new();
        if let Some(windows) = windows.as_mut() {
            let dir = windows.advance();
            let create =
                |path: std::path::PathBuf| dir.create_file(&path).map_err(io::Error::other);
            let (shard, bpf) = (create(dir.vip_path())?, create(dir.bpf_path())?);
            records = vip.switch_files(shard, bpf, layout, event_id)?;
        }
        Report::Switched { base: 0, records }.write_to(report)?;
    }
    if let (Some(off_cpu), Some(setup)) = (&off_cpu, programs.off_cpu) {
        vip.append(&shardrec_vip::off_cpu::summed_records(off_cpu, setup)?)?;
    }
    let mut stats = vip.finish()?;
    stats.off_cpu = off_cpu
        .as_ref()
        .map(shardrec_vip::off_cpu::stats)
        .transpose()?;
    Ok(stats)
}
