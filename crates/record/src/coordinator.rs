//! The coordinator: open, synthesize, fork the writers, enable, wait, stop.

use std::io::{BufWriter, Write};
use std::time::Instant;

use shardrec_control::Command;
use shardrec_shard::{EventMeta, Meta, RecordingDir, WindowCursor};
use shardrec_synth::{Synthesizer, Tasks};

mod counting;
mod recovery;
mod size_limit;
mod stop;
mod switching;

pub(crate) use stop::account;

use crate::helper::HelperProcess;
use crate::live_merger::{self, LiveMerger, WatchedRing};
use crate::meta::initial_meta;
use crate::open;
use crate::open::SideBandEvents;
use crate::plan::{Plan, Scope};
use crate::run_control::ControlChannel;
use crate::sample_filters::{self, ActiveFilter};
use crate::signals::Signals;
use crate::summary::RecordReport;
use crate::vip::{self, VipProcess};
use crate::windows::Windows;
use crate::workload::Workload;
use crate::writers::{self, Writer, WriterOptions};
use crate::{RecordConfig, RecordError};

/// Records as `config` asks until the workload exits or a stop is asked
/// for, and leaves the shards and a final `meta` in `OUTPUT.shards/`; the
/// live merger writes the output meanwhile (into `stream`, perf's pipe
/// format, when given). `command_line` is the recorder's own, for the
/// header's `cmdline`.
pub(crate) fn record(
    config: &RecordConfig,
    stream: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    command_line: &[String],
) -> Result<RecordReport, RecordError> {
    let plan = Plan::resolve(config)?;
    for warning in &plan.warnings {
        eprintln!("shardrec: warning: {warning}");
    }
    let mut signals = Signals::block()?;
    let mut workload = match config.command.is_empty() {
        true => None,
        false => Some(Workload::prepare(&config.command)?),
    };
    let result = Recording::open(config, stream, command_line, &plan, workload.as_mut())
        .and_then(|recording| recording.run(&mut signals));
    if result.is_err() {
        if let Some(workload) = workload.as_mut() {
            workload.kill();
        }
    }
    result
}

/// The side-band events, when the kernel and privileges allow them;
/// none with --no-bpf-event (so no VIP either). A `--filter` on a sampling
/// event needs the VIP that loads it: without one, nothing is recorded.
fn side_band(config: &RecordConfig, plan: &Plan) -> Result<Option<SideBandEvents>, RecordError> {
    let filtered = plan.sample_filters().next().is_some();
    if config.no_bpf_event {
        return match filtered {
            true => Err(RecordError::Usage(
                "--filter on a sampling event is loaded by the VIP, which --no-bpf-event turns off"
                    .into(),
            )),
            false => Ok(None),
        };
    }
    match open::open_side_band(plan) {
        Ok(events) => Ok(Some(events)),
        Err(why) if filtered => Err(RecordError::Kernel(format!(
            "--filter on a sampling event needs BPF (root, or CAP_BPF with CAP_PERFMON): {why}"
        ))),
        Err(why) if plan.side_band_tracking => Err(RecordError::Kernel(format!(
            "--overwrite streams the tasks' records through the side-band events (or use --no-bpf-event to keep them in the overwritten rings, as perf does): {why}"
        ))),
        Err(why) => {
            eprintln!("shardrec: warning: BPF programs will not be captured: {why}");
            Ok(None)
        }
    }
}

/// The side band's event in `meta` (perf's name for a dummy event).
const SIDE_BAND_NAME: &str = "dummy";

/// When `synth.shard` is written: at the start, at a switch of output
/// (the new window's, with the state of the recording so far), or at a
/// window's end (`--overwrite`: appended, with the state of that moment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Moment {
    Start,
    Switch,
    End,
}

/// A recording from the moment its directory exists.
struct Recording<'a> {
    plan: &'a Plan,
    dir: RecordingDir,
    /// One per recorded CPU, in CPU order, each with its CPU's events.
    writers: Vec<Writer>,
    /// The side-band events, when the kernel and privileges allow them.
    side_band: Option<SideBandEvents>,
    vip: Option<VipProcess>,
    /// The `--filter` programs on sampling events, attached.
    filters: Vec<ActiveFilter>,
    workload: Option<&'a mut Workload>,
    workload_code: Option<i32>,
    meta: Meta,
    /// The shards are the product (`--no-merge`): sync them at the end. A
    /// merge that follows reads them from the page cache and deletes them,
    /// so most of their pages never need writing; perf does not sync
    /// perf.data either.
    sync_shards: bool,
    /// `--control`'s channel.
    control: Option<ControlChannel>,
    /// When a `-D MSECS` recording starts counting.
    enable_at: Option<Instant>,
    /// `-q`: no "Events enabled" lines.
    quiet: bool,
    /// When the rings were last looked at for data waiting (a writer
    /// sleeps until its watermark or a command).
    rings_seen: Instant,
    /// Stopping: a writer that ends now has drained, or was told to quit.
    stopping: bool,
    /// `--max-size`: stop once the rings have produced this many bytes.
    max_size: Option<u64>,
    /// Bytes of `synth.shard`, once written.
    synth_bytes: u64,
    /// `--switch-output`'s windows; `dir` is then the current one.
    windows: Option<Windows>,
    /// A switch of output was asked for (SIGUSR2, or `snapshot`).
    switch_asked: bool,
    /// Where the live merger writes, and how, until it is forked.
    live_output: Option<(live_merger::Destination, shardrec_merge::MergeOptions)>,
    /// The live merger, once forked.
    live: Option<LiveMerger>,
    /// The output is a stream a reader follows (`-o -`).
    streamed: bool,
}

impl<'a> Recording<'a> {
    fn open(
        config: &RecordConfig,
        stream: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
        command_line: &[String],
        plan: &'a Plan,
        workload: Option<&'a mut Workload>,
    ) -> Result<Recording<'a>, RecordError> {
        plan.reserve_file_descriptors()?;
        let control = config
            .control
            .as_ref()
            .map(ControlChannel::open)
            .transpose()?;
        let attrs = &plan.attrs;
        let workload_pid = workload.as_ref().map(|w| w.pid.as_raw());
        let target_pid = workload_pid.filter(|_| plan.scope == Scope::Workload);
        let (cpus, tasks) = open::open_all(plan, attrs, target_pid)?;
        let side_band = side_band(config, plan)?;
        if config.kcore {
            crate::kcore::copy_to(&config.output)?;
        }
        let mut dir = crate::shards_place::create_dir(config)?;
        let windows = match &config.switch_output {
            Some(switch) => {
                let windows = Windows::start(dir.clone(), switch.clone(), config.merge_output())?;
                dir = dir.create_window(windows.current)?;
                Some(windows)
            }
            None => None,
        };
        let mut meta = initial_meta(
            config,
            command_line,
            plan,
            attrs,
            &cpus,
            &tasks,
            workload_pid,
        );
        let writers = cpus.into_iter().map(Writer::new).collect();
        if let Some(side_band) = &side_band {
            meta.events.push(EventMeta {
                name: SIDE_BAND_NAME.into(),
                attr: side_band.attr.to_bytes(),
                ids: side_band
                    .events
                    .iter()
                    .map(|(cpu, _, id)| (*cpu, *id))
                    .collect(),
                threads: vec![-1],
                leader: None,
            });
        }
        Ok(Recording {
            plan,
            dir,
            writers,
            side_band,
            vip: None,
            filters: Vec::new(),
            workload,
            workload_code: None,
            meta,
            sync_shards: config.no_merge,
            control,
            enable_at: None,
            quiet: config.quiet,
            rings_seen: Instant::now(),
            stopping: false,
            max_size: config.max_size,
            synth_bytes: 0,
            streamed: stream.is_some(),
            live_output: (windows.is_none() && !plan.overwrite && !config.no_merge).then(|| {
                let output = match stream {
                    Some(stream) => live_merger::Destination::Stream(stream),
                    None => live_merger::Destination::File(config.merge_output()),
                };
                (output, config.merge.clone())
            }),
            windows,
            switch_asked: false,
            live: None,
        })
    }

    fn run(mut self, signals: &mut Signals) -> Result<RecordReport, RecordError> {
        if let Err(error) = self.prepare() {
            self.abandon();
            return Err(error);
        }
        let started = Instant::now();
        if let Err(error) = self.enable() {
            self.abandon();
            return Err(error);
        }
        let (stopped_by, failure) = self.wait(signals)?;
        self.stop(signals)?;
        let report = self.finish(stopped_by, started)?;
        match failure {
            Some(error) => Err(error),
            None => Ok(report),
        }
    }

    /// Everything before enabling: writers, synthesis, filters, meta. The
    /// writers come first so that synthesis describes them too (a profile
    /// then names their threads), and forking happens before synthesis
    /// starts its threads. The writers pin themselves and map their rings
    /// while the VIP starts and synthesis runs.
    fn prepare(&mut self) -> Result<(), RecordError> {
        self.read_tracing_data()?;
        let options = WriterOptions {
            enable: self.plan.scope != Scope::Workload && self.plan.delay.is_none(),
            ring_pages: self.plan.ring_pages,
            sync_shard: self.sync_shards,
            overwrite: self.plan.overwrite,
            writes: writers::shard_writes(&self.dir)?,
        };
        let windows = self.window_at();
        for writer in self.writers.iter_mut() {
            writer.in_windows(windows.clone());
            let shard = self.dir.create_file(&self.dir.shard_path(writer.cpu()))?;
            let side_band = self.side_band.as_ref().and_then(|s| s.on_cpu(writer.cpu()));
            writer.spawn(side_band, options, shard)?;
        }
        let programs = sample_filters::programs(self.plan)?;
        let existing_bpf = match &self.side_band {
            Some(side_band) => {
                let (vip, records, fds) = vip::spawn(side_band, &self.dir, &programs, windows)?;
                self.vip = Some(vip);
                let cpus: Vec<_> = self.writers.iter().map(|w| &w.events).collect();
                self.filters = sample_filters::attach(self.plan, &cpus, &programs, fds)?;
                records
            }
            None => Vec::new(),
        };
        self.spawn_live_merger()?;
        self.synthesize(&existing_bpf, Moment::Start)?;
        for writer in self.writers.iter_mut().filter_map(Writer::process_mut) {
            writer.wait_ready()?;
        }
        let merger = self.windows.as_ref().and_then(Windows::merger_pid);
        let merger = merger.or(self.live.as_ref().map(|l| l.pid));
        self.meta.recorder_pids = std::iter::once(std::process::id() as i32)
            .chain(self.helpers().map(|h| h.pid.as_raw()))
            .chain(merger.map(|pid| pid.as_raw()))
            .collect();
        self.exclude_recorder()?;
        self.dir.write_start_meta(&self.meta)?;
        self.dir.reserve_meta_room(&self.meta)?;
        if let Some(live) = self.live.as_mut() {
            live.begin();
        }
        Ok(())
    }

    /// Forks the live merger, watching every CPU's ring and the side
    /// band's, when the output is merged while recording.
    fn spawn_live_merger(&mut self) -> Result<(), RecordError> {
        let Some((output, options)) = self.live_output.take() else {
            return Ok(());
        };
        let cpus = self.writers.iter().map(|w| WatchedRing {
            event: w.events.ring_owner(),
            pages: self.plan.ring_pages,
            base: Some(w.base()),
        });
        let side_band = self.side_band.iter().flat_map(|s| &s.events);
        let side_band = side_band.map(|(_, event, _)| WatchedRing {
            event,
            pages: vip::RING_PAGES,
            base: None,
        });
        let rings = cpus.chain(side_band).collect();
        self.live = Some(LiveMerger::spawn(&self.dir, output, options, rings)?);
        Ok(())
    }

    /// The tracepoint formats perf needs to print fields, read now so that
    /// even a recording that is killed carries them.
    fn read_tracing_data(&mut self) -> Result<(), RecordError> {
        let tracepoints: Vec<(String, String)> = self
            .plan
            .events
            .iter()
            .filter_map(|e| e.tracepoint())
            .collect();
        if tracepoints.is_empty() {
            return Ok(());
        }
        let files = crate::tracing_files::read_files(&tracepoints)
            .map_err(|e| RecordError::Tracefs(format!("reading tracepoint formats: {e}")))?;
        self.meta.tracing_data = shardrec_perfdata::tracing_data::encode(&files);
        Ok(())
    }

    /// Writes `synth.shard`: the kernel's maps, the existing tasks, and the
    /// records the VIP made for the BPF programs already loaded. The kernel's
    /// maps (a read of most of kallsyms, for the end of its text) are made
    /// while the tasks are walked, and written after them.
    fn synthesize(&mut self, existing_bpf: &[u8], moment: Moment) -> Result<(), RecordError> {
        let first = &self.writers[0].events.events[0];
        let sample_type = self.meta.events[first.spec].sample_type();
        let dwarf = matches!(self.plan.call_graph, crate::config::CallGraph::Dwarf(_));
        // As the kernel's MMAP2 records: with build ids where they carry them.
        let mut synth = Synthesizer::new(sample_type, first.id)
            .with_data_maps(dwarf)
            .with_build_ids(self.plan.build_id_mmap);
        let workload = self.workload.as_ref().map(|w| w.pid.as_raw());
        if let (Some(pid), Moment::Start) = (workload, moment) {
            synth = synth.with_held_workload(pid);
        }
        let path = self.dir.synth_path();
        let file = match moment {
            Moment::End => self.dir.reopen_file(&path).and_then(|mut file| {
                std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))
                    .map_err(shardrec_shard::Error::io(&path))?;
                Ok(file)
            })?,
            _ => self.dir.create_file(&path)?,
        };
        let mut out = BufWriter::new(file);
        let tasks = match (&self.plan.scope, workload, moment) {
            (Scope::SystemWide, _, _) => Tasks::All,
            (Scope::Threads(_), _, _) => Tasks::Processes(self.plan.pids.clone()),
            // At a switch: the workload and the processes it started.
            (Scope::Workload, Some(pid), Moment::Switch | Moment::End) => {
                Tasks::Processes(shardrec_synth::process_tree(pid))
            }
            // Only the held workload, described by `with_held_workload`.
            (Scope::Workload, _, _) => Tasks::Processes(Vec::new()),
        };
        let output_error = |e| RecordError::Output {
            path: path.clone(),
            source: e,
        };
        std::thread::scope(|scope| {
            let kernel = scope.spawn(|| {
                let mut records = Vec::new();
                synth.kernel(&mut records).map(|_| records)
            });
            synth.tasks(&tasks, &mut out)?;
            let kernel = kernel.join().expect("kernel synthesis does not panic")?;
            out.write_all(&kernel)?;
            out.write_all(existing_bpf)
        })
        .map_err(output_error)?;
        let file = out.into_inner().map_err(|e| output_error(e.into_error()))?;
        self.synth_bytes = file.metadata().map_or(0, |m| m.len());
        match self.sync_shards {
            true => file.sync_data().map_err(output_error),
            false => Ok(()),
        }
    }

    /// Sets each tracepoint's filter: the user's `--filter`, and the
    /// recorder's own processes left out, so a syscall tracepoint does not
    /// record the writers' own io_uring calls.
    fn exclude_recorder(&self) -> Result<(), RecordError> {
        let own = self
            .meta
            .recorder_pids
            .iter()
            .map(|pid| format!("common_pid != {pid}"))
            .collect::<Vec<_>>()
            .join(" && ");
        for cpu in self.writers.iter().map(|w| &w.events) {
            for event in &cpu.events {
                let spec = &self.plan.events[event.spec];
                if !spec.is_tracepoint() {
                    continue;
                }
                let filter = match &spec.filter {
                    Some(user) => format!("({user}) && {own}"),
                    None => own.clone(),
                };
                event
                    .event
                    .set_filter(&filter)
                    .map_err(|e| spec.filter_refused(e))?;
            }
        }
        Ok(())
    }

    /// Each writer enables its CPU's events from that CPU, all at once. A
    /// followed workload's events the kernel enables at its exec
    /// (enable_on_exec); the writers are running by then.
    fn enable(&mut self) -> Result<(), RecordError> {
        for writer in self.writers.iter_mut().filter_map(Writer::process_mut) {
            writer.send(Command::Start);
        }
        for writer in self.writers.iter_mut().filter_map(Writer::process_mut) {
            writer.wait_started()?;
        }
        if let Some(workload) = self.workload.as_mut() {
            workload.start()?;
        }
        self.count_later();
        Ok(())
    }

    /// With `--switch-output`: the recording's directory and the window
    /// being recorded, for a helper that goes on from window to window.
    fn window_at(&self) -> Option<WindowCursor> {
        let windows = self.windows.as_ref()?;
        Some(WindowCursor::new(windows.root.clone(), windows.current))
    }

    /// The writers' and the VIP's processes.
    fn helpers(&self) -> impl Iterator<Item = &HelperProcess> {
        let vip = self.vip.iter().map(|v| &v.helper);
        self.writers.iter().filter_map(Writer::process).chain(vip)
    }

    /// The writers' and the VIP's processes, to command.
    fn helpers_mut(&mut self) -> impl Iterator<Item = &mut HelperProcess> {
        let vip = self.vip.iter_mut().map(|v| &mut v.helper);
        self.writers
            .iter_mut()
            .filter_map(Writer::process_mut)
            .chain(vip)
    }

    /// After a failure before recording began: stop the helpers and leave
    /// nothing behind.
    fn abandon(&mut self) {
        if let Some(live) = self.live.take() {
            live.abandon();
        }
        self.send_all(Command::Quit);
        for helper in self.helpers().filter(|h| !h.has_exited()) {
            let _ = nix::sys::wait::waitpid(helper.pid, None);
        }
        let _ = std::fs::remove_dir_all(self.dir.path());
        let _ = std::io::stderr().flush();
    }
}
