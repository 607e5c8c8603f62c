//! The writer pool: one writer per recorded CPU, its process started,
//! asked to flush a quiet ring, replaced when it dies, drained at the
//! stop; and what the rings and the writers tell of the recording (bytes
//! produced, samples the kernel dropped, what each CPU's writer did).

use std::time::{Duration, Instant};

use shardrec_control::Command;
use shardrec_format::layouts::Layouts;
use shardrec_shard::{CpuStats, EventLoss, RecordingDir, WindowCursor};

use super::side_band::SideBand;
use crate::helper_process::HelperProcess;
use crate::open::CpuEvents;
use crate::plan::Plan;
use crate::summary::CpuReport;
use crate::writers::{Writer, MAX_REPLACEMENTS};
use crate::RecordError;
use shardrec_writer::WriterOptions;

/// How often the rings are looked at for data waiting below their
/// watermark (a writer sleeps until its watermark or a command).
const LOOK_EVERY: Duration = Duration::from_millis(250);

/// How long data below a ring's watermark may wait before its writer is
/// asked to write it: what a quiet ring can lose to `kill -9` of the whole
/// tree. Longer would spare more wakeups (perf never flushes by time); one
/// second keeps a killed recording nearly whole.
const FLUSH_AFTER: Duration = Duration::from_secs(1);

/// Every recorded CPU's writer, in CPU order.
pub(super) struct WriterPool {
    writers: Vec<Writer>,
    /// When the rings were last looked at for data waiting.
    rings_seen: Instant,
}

impl WriterPool {
    /// The writers of these CPUs' events, not started.
    pub(super) fn new(cpus: Vec<CpuEvents>) -> WriterPool {
        WriterPool {
            writers: cpus.into_iter().map(Writer::new).collect(),
            rings_seen: Instant::now(),
        }
    }

    /// The writers, in CPU order.
    pub(super) fn writers(&self) -> &[Writer] {
        &self.writers
    }

    /// Every recorded CPU's events.
    pub(super) fn cpus(&self) -> impl Iterator<Item = &CpuEvents> {
        self.writers.iter().map(|w| &w.events)
    }

    /// Enables `--off-cpu`'s output event on every CPU.
    pub(super) fn enable_off_cpu(&self, plan: &Plan) -> Result<(), RecordError> {
        let Some(spec) = plan.off_cpu() else {
            return Ok(());
        };
        for cpu in self.cpus() {
            for output in cpu.events.iter().filter(|e| e.spec == spec) {
                output
                    .event
                    .enable()
                    .map_err(RecordError::system("enabling the off-CPU output events"))?;
            }
        }
        Ok(())
    }

    /// Forks every writer, each over its CPU's shard in `dir` (and that
    /// CPU's side-band event, which it disables at stop).
    pub(super) fn spawn(
        &mut self,
        dir: &RecordingDir,
        side_band: &SideBand,
        options: WriterOptions,
        windows: Option<WindowCursor>,
    ) -> Result<(), RecordError> {
        // The merger copies what it takes of a smaller ring.
        let ring_bytes = options.ring_pages * shardrec_sys::ring::page_size();
        let in_place = ring_bytes >= shardrec_sys::ring::READ_IN_PLACE_FROM;
        if options.merger_reads_first && !options.overwrite && in_place {
            self.share_claims()?;
        }
        for writer in self.writers.iter_mut() {
            writer.in_windows(windows.clone());
            let shard = dir.create_file(&dir.shard_path(writer.cpu()))?;
            writer.spawn(side_band.on_cpu(writer.cpu()), options, shard)?;
        }
        Ok(())
    }

    /// Gives every ring a claim slot its writer and the live merger share
    /// (see `shardrec_sys::ring::RingClaims`), before either is forked.
    fn share_claims(&mut self) -> Result<(), RecordError> {
        let claims = shardrec_sys::ring::RingClaims::new(self.writers.len())
            .map_err(RecordError::system("mapping the rings' claims"))?;
        for (index, writer) in self.writers.iter_mut().enumerate() {
            writer.events.ring.share_claim(claims.slot(index));
        }
        Ok(())
    }

    /// Drops whatever claim a live merger that ended left on the rings:
    /// what their writers kept meanwhile is freed.
    pub(super) fn drop_claims(&mut self) {
        for writer in &mut self.writers {
            writer.events.ring.unclaim();
        }
    }

    /// Waits until every writer has pinned itself and mapped its ring.
    pub(super) fn wait_ready(&mut self) -> Result<(), RecordError> {
        for writer in self.writers.iter_mut().filter_map(Writer::process_mut) {
            writer.wait_ready()?;
        }
        Ok(())
    }

    /// Each writer enables its CPU's events from that CPU, all at once.
    pub(super) fn start(&mut self) -> Result<(), RecordError> {
        for writer in self.writers.iter_mut().filter_map(Writer::process_mut) {
            writer.send(Command::Start);
        }
        for writer in self.writers.iter_mut().filter_map(Writer::process_mut) {
            writer.wait_started()?;
        }
        Ok(())
    }

    /// The writers' processes.
    pub(super) fn processes(&self) -> impl Iterator<Item = &HelperProcess> {
        self.writers.iter().filter_map(Writer::process)
    }

    /// The writers' processes, to command.
    pub(super) fn processes_mut(&mut self) -> impl Iterator<Item = &mut HelperProcess> {
        self.writers.iter_mut().filter_map(Writer::process_mut)
    }

    /// Every [`LOOK_EVERY`], asks each writer whose ring has held data for
    /// the flush interval to write it (see
    /// [`crate::writers::Writer::flush_if_waiting`]).
    pub(super) fn flush_quiet_rings(&mut self) {
        if self.rings_seen.elapsed() < LOOK_EVERY {
            return;
        }
        self.rings_seen = Instant::now();
        self.writers
            .iter_mut()
            .for_each(|w| w.flush_if_waiting(FLUSH_AFTER));
    }

    /// Bytes every ring has produced since the recording began.
    pub(super) fn produced(&self) -> u64 {
        self.writers.iter().map(|w| w.events.ring.produced()).sum()
    }

    /// Disables every CPU's events (the side-band ones too) from here,
    /// this CPU's first, before any writer wakes for the stop, as perf
    /// record disables its events before its last pass: what the writers
    /// then do is not sampled. Woken first and left to disable their own
    /// CPU's events, they were sampled on their way out of the wait (in a
    /// 16-vCPU guest, a tenth of shardrec's own samples came after the
    /// workload ended). Each disable costs an IPI to an idle CPU, as
    /// perf's own do.
    pub(super) fn disable_events(&self, side_band: &SideBand) {
        let here = shardrec_sys::cpu::current();
        let mut cpus: Vec<_> = self.cpus().collect();
        cpus.sort_by_key(|cpu| Some(cpu.cpu) != here);
        for cpu in cpus {
            let own = cpu.events.iter().map(|e| &e.event);
            own.chain(side_band.on_cpu(cpu.cpu))
                .for_each(|e| drop(e.disable()));
        }
    }

    /// Tells each writer to drain its ring (disabling its CPU's events
    /// from its own CPU, where they are still enabled); for a writer
    /// already gone, disables them here.
    pub(super) fn drain(&mut self, side_band: &SideBand) {
        for writer in self.writers.iter_mut() {
            writer.drain(side_band.on_cpu(writer.cpu()));
        }
    }

    /// Whether a writer still streams its ring.
    pub(super) fn any_running(&self) -> bool {
        self.writers.iter().any(Writer::is_running)
    }

    /// Whether `cpu` is recorded.
    pub(super) fn records(&self, cpu: u32) -> bool {
        self.writers.iter().any(|w| w.cpu() == cpu)
    }

    /// Writer `index` ended while the recording stopped, before its ring
    /// was drained (killed, or failed): its events are disabled here (it
    /// may have died before it could) and its ring is written at the end
    /// with those of the writers given up on.
    pub(super) fn died_while_stopping(&mut self, index: usize, side_band: &SideBand) {
        let writer = &mut self.writers[index];
        if writer.unwritten() == 0 && writer.stats().cut.is_none() {
            return;
        }
        writer.drain(side_band.on_cpu(writer.cpu()));
        writer.given_up = writer.stats().cut.is_none();
    }

    /// The rings of the writers given up on, written into their shards in
    /// `dir` now that every event is disabled.
    pub(super) fn write_given_up_rings(&self, dir: &RecordingDir) -> Result<(), RecordError> {
        for writer in self.writers.iter().filter(|w| w.given_up) {
            let path = dir.shard_path(writer.cpu());
            let shard = dir.reopen_file(&path)?;
            writer
                .write_remaining(&shard)
                .map_err(RecordError::system(format!("writing {}", path.display())))?;
        }
        Ok(())
    }

    /// The first CPU whose shard its storage cut, with the errno.
    pub(super) fn first_cut(&self) -> Option<(u32, i32)> {
        self.writers
            .iter()
            .find_map(|w| Some((w.cpu(), w.stats().cut?)))
    }

    /// Each event's count of samples the kernel dropped, the non-zero
    /// ones; empty where the kernel keeps none.
    pub(super) fn read_lost_counts(&self, plan: &Plan) -> Vec<EventLoss> {
        if !plan.lost_counts {
            return Vec::new();
        }
        // The events are disabled: reading them needs no IPI.
        let counts = self.cpus().flat_map(|cpu| {
            cpu.events.iter().filter_map(|event| {
                // read() gives value, id, lost (read_format ID | LOST).
                let values = event.event.read_values().ok()?;
                let lost = values.get(2).copied().filter(|&lost| lost > 0)?;
                Some(EventLoss {
                    cpu: cpu.cpu,
                    id: event.id,
                    lost,
                })
            })
        });
        counts.collect()
    }

    /// [`read_lost_counts`](Self::read_lost_counts) with the samples left
    /// in the rings of writers that quit without draining.
    pub(super) fn lost_counts(&self, plan: &Plan, layouts: &Layouts) -> Vec<EventLoss> {
        let mut counts = self.read_lost_counts(plan);
        for writer in &self.writers {
            for (id, samples) in writer.unwritten_samples(layouts) {
                add_lost(&mut counts, writer.cpu(), id, samples);
            }
        }
        counts
    }

    /// The writer whose process is `pid`, by index.
    pub(super) fn index_of(&self, pid: nix::unistd::Pid) -> Option<usize> {
        self.writers
            .iter()
            .position(|w| w.process().is_some_and(|p| p.pid == pid))
    }

    /// The writer at `index`.
    pub(super) fn writer_mut(&mut self, index: usize) -> &mut Writer {
        &mut self.writers[index]
    }

    /// A writer died while recording: a new one takes over its ring and
    /// shard in `dir`, up to [`MAX_REPLACEMENTS`] times; after that, or if
    /// the replacement cannot start, the kernel goes on filling its ring,
    /// which is written at the stop, and the rest of the recording goes
    /// on. A warning says which, when it is given up on.
    pub(super) fn replace(
        &mut self,
        index: usize,
        dir: &RecordingDir,
        side_band: &SideBand,
        since: Duration,
    ) -> Option<String> {
        let writer = &mut self.writers[index];
        let cpu = writer.cpu();
        if writer.replaced_at.len() >= MAX_REPLACEMENTS {
            writer.given_up = true;
            return Some(format!(
                "the writer of CPU {cpu} died {} times and is not replaced again ({:.2} s): its ring is written at the stop, and what it cannot hold until then is counted as lost",
                MAX_REPLACEMENTS + 1,
                since.as_secs_f64()
            ));
        }
        let path = dir.shard_path(cpu);
        let replaced = dir
            .reopen_file(&path)
            .map_err(RecordError::from)
            .and_then(|shard| writer.replace(side_band.on_cpu(cpu), shard, since));
        let error = replaced.err()?;
        writer.given_up = true;
        Some(format!(
            "the writer of CPU {cpu} died and could not be replaced ({}) at {:.2} s: its ring is written at the stop, and what it cannot hold until then is counted as lost",
            shardrec_shard::with_causes(&error),
            since.as_secs_f64()
        ))
    }

    /// After a Switch: every writer goes on in the next window (those
    /// given up on write their rings into `closing`).
    pub(super) fn switched(&mut self, closing: &RecordingDir) -> Result<(), RecordError> {
        self.writers
            .iter_mut()
            .try_for_each(|w| w.switched(closing))
    }

    /// Each CPU's report: what its shard holds (`stats`, in CPU order)
    /// and what its writer did.
    pub(super) fn reports(&self, stats: &[CpuStats]) -> Vec<CpuReport> {
        let reports = self
            .writers
            .iter()
            .zip(stats)
            .map(|(writer, stats)| CpuReport {
                stats: stats.clone(),
                writer: writer.stats(),
                unwritten: writer.unwritten(),
                replaced_at: writer.replaced_at.clone(),
                given_up: writer.given_up,
            });
        reports.collect()
    }
}

/// Adds `lost` samples of event `id` on `cpu` to the per-event counts.
fn add_lost(counts: &mut Vec<EventLoss>, cpu: u32, id: u64, lost: u64) {
    match counts.iter_mut().find(|l| (l.cpu, l.id) == (cpu, id)) {
        Some(count) => count.lost += lost,
        None => counts.push(EventLoss { cpu, id, lost }),
    }
}
