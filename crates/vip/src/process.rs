//! The VIP process's body, from its fork to its stats: it loads the
//! `--filter` programs and hands them over, starts the off-CPU program
//! and the capture program, enables the side-band events, describes the
//! programs already loaded and says Ready, then watches until a stop.
//! The coordinator forks it and talks to it in control's `Command`s and
//! [`Report`]s.

use std::fs::File;
use std::io::{self, BufWriter};
use std::os::fd::{AsFd, OwnedFd};

use shardrec_control::{Framed, Report, Served, VipStats};
use shardrec_filter::FilterProgram;
use shardrec_format::SampleIdLayout;
use shardrec_sys::{process, PerfEvent, RingBuffer};

use crate::capture::Capturer;
use crate::kernel_capture::{self, KernelCapture};
use crate::off_cpu::{self, OffCpuSetup};
use crate::{existing, filters, SideBand, Vip, BUFFER};

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

/// The side-band events a VIP watches.
pub struct VipEvents<'e> {
    /// One per CPU.
    pub events: Vec<&'e PerfEvent>,
    /// Their rings' size in pages.
    pub ring_pages: usize,
    /// Their records' trailer.
    pub layout: SampleIdLayout,
    /// The id the records it makes name.
    pub event_id: u64,
}

/// The files a VIP writes and reads.
pub struct VipFiles {
    /// `vip.shard`.
    pub shard: File,
    /// The `bpf` file.
    pub bpf: File,
    /// Its commands.
    pub control: OwnedFd,
    /// Where the loaded filters' descriptors go.
    pub filters: OwnedFd,
}

/// The VIP's body: load the filters and hand them over, start the
/// off-CPU program, map the rings, enable the side-band events (before
/// the walk, so no program loads unseen between the two), describe the
/// loaded programs, hand those records over, then watch. At a Switch,
/// `next_files` gives the next window's shard and `bpf` file (`None`: go
/// on in the same ones).
pub fn run(
    side_band: &VipEvents,
    files: VipFiles,
    programs: VipPrograms<'_>,
    report: &mut File,
    mut next_files: impl FnMut() -> io::Result<Option<(File, File)>>,
) -> io::Result<VipStats> {
    let VipFiles {
        shard,
        bpf,
        control,
        filters,
    } = files;
    hand_over_filters(programs.filters, filters)?;
    let mut storage = std::mem::MaybeUninit::uninit();
    let off_cpu = programs
        .off_cpu
        .map(|setup| off_cpu::start(&mut storage, setup))
        .transpose()?;
    // A program may live a millisecond: the VIP must run as soon as it is
    // woken, even when every CPU is busy.
    process::prefer_wakeups();
    let rings = side_band
        .events
        .iter()
        .map(|&event| {
            Ok(SideBand {
                event,
                ring: RingBuffer::map_reader(event, side_band.ring_pages)?,
            })
        })
        .collect::<io::Result<Vec<_>>>()?;
    // Started before the side band: from its first record on, every
    // program has been captured as it loaded.
    let mut storage = kernel_capture::Storage::default();
    let kernel = match programs.capture_in_kernel {
        true => KernelCapture::start(&mut storage).ok(),
        false => None,
    };
    for event in &side_band.events {
        event.enable()?;
    }
    let (layout, event_id) = (&side_band.layout, side_band.event_id);
    let mut capturer = Capturer::new(BufWriter::with_capacity(BUFFER, bpf));
    let (records, _) = existing::describe(&mut capturer, layout, event_id)?;
    capturer.flush()?;
    let capturing = kernel.is_some();
    Report::Ready { records, capturing }.write_to(report)?;
    let mut vip = Vip::new(rings, shard, capturer, kernel, File::from(control))?;
    while vip.serve()? == Served::Switch {
        // Without windows, a Switch goes on in the same files.
        let records = match next_files()? {
            Some((shard, bpf)) => vip.switch_files(shard, bpf, layout, event_id)?,
            None => Vec::new(),
        };
        Report::Switched { base: 0, records }.write_to(report)?;
    }
    if let (Some(off_cpu), Some(setup)) = (&off_cpu, programs.off_cpu) {
        vip.append(&off_cpu::summed_records(off_cpu, setup)?)?;
    }
    let mut stats = vip.finish()?;
    stats.off_cpu = off_cpu.as_ref().map(off_cpu::stats).transpose()?;
    Ok(stats)
}

/// Loads the `--filter` programs and sends their descriptors down `to`.
fn hand_over_filters(programs: &[FilterProgram], to: OwnedFd) -> io::Result<()> {
    if programs.is_empty() {
        return Ok(());
    }
    let loaded = programs
        .iter()
        .map(filters::load)
        .collect::<io::Result<Vec<_>>>()?;
    let fds: Vec<_> = loaded.iter().flat_map(|f| f.fds()).collect();
    shardrec_sys::fds::send(to.as_fd(), &fds)
}
