//! The coordinator: a thin run loop over the parts of a recording, each
//! owning its state:
//!
//! - the writer pool ([`writer_pool`]): one writer process per CPU, its
//!   replacement, flush requests, the drain;
//! - the side band ([`side_band`]): the VIP and the `--filter` programs;
//! - the output ([`output`]): the directory and `meta`, the live merger,
//!   the `--switch-output` windows, `--max-size`;
//! - `-D` and `--control` ([`counting`]).
//!
//! The run loop opens the events, prepares the parts, enables, waits for
//! a reason to stop ([`wait`]), replaces what dies ([`recovery`]), stops
//! and accounts for what was recorded ([`stop`]).

use std::io::Write;
use std::time::{Duration, Instant};

mod counting;
mod output;
mod recovery;
mod side_band;
mod stop;
mod switching;
mod synthesis;
mod wait;
mod writer_pool;

use crate::config::OutputTarget;
use crate::helper_process::HelperProcess;
use crate::meta::{initial_meta, unix_ns};
use crate::open;
use crate::plan::{Plan, Scope};
use crate::say;
use crate::signals::Signals;
use crate::summary::RecordReport;
use crate::switch_output::event_trigger::EventTrigger;
use crate::workload::Workload;
use crate::writers;
use crate::{RecordConfig, RecordError};
use counting::Counting;
use output::RecordingOutput;
use shardrec_live_merger::WatchedRing;
use shardrec_writer::WriterOptions;
use side_band::SideBand;
use synthesis::Moment;
use writer_pool::WriterPool;

/// Records as `config` asks until the workload exits or a stop is asked
/// for, and leaves the shards and a final `meta` in `OUTPUT.shards/`; the
/// live merger writes the output meanwhile (into `stream`, perf's pipe
/// format, when given). `command_line` is the recorder's own, for the
/// header's `cmdline`.
pub(crate) fn record(
    config: &RecordConfig,
    target: &OutputTarget,
    stream: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
    command_line: &[String],
) -> Result<(RecordReport, HandOff), RecordError> {
    let plan = Plan::resolve(config)?;
    for warning in &plan.warnings {
        say::warning(warning);
    }
    let mut signals = Signals::block()?;
    let mut workload = match config.command.is_empty() {
        true => None,
        false => Some(Workload::prepare(&config.command)?),
    };
    let result = Recording::open(
        config,
        target,
        stream,
        command_line,
        &plan,
        workload.as_mut(),
    )
    .and_then(|recording| recording.run(&mut signals));
    if result.is_err() {
        if let Some(workload) = workload.as_mut() {
            workload.kill();
        }
    }
    result
}

/// What the recording leaves for the step after its stop, apart from the
/// user's report.
pub(crate) struct HandOff {
    /// Every CPU's shard as the stop walked it, for the merge that
    /// follows to take as it is (`shardrec_merge::merge_scanned`).
    pub(crate) scanned: Vec<shardrec_shard::scan::ScannedShard>,
    /// How the live merger ended, when there was one.
    pub(crate) live: Option<shardrec_live_merger::Outcome>,
    /// With `--switch-output`: the windows merged while recording (the
    /// report's `dir` is then the last window, not merged yet).
    pub(crate) switched: Option<crate::switch_output::Outputs>,
}

/// A recording from the moment its directory exists: the run loop over
/// its parts.
struct Recording<'a> {
    plan: &'a Plan,
    workload: Option<&'a mut Workload>,
    workload_code: Option<i32>,
    /// One writer per recorded CPU, in CPU order, each with its CPU's
    /// events.
    pool: WriterPool,
    side_band: SideBand,
    output: RecordingOutput,
    counting: Counting,
    /// `--switch-output-event`'s events.
    switch_trigger: Option<EventTrigger>,
    /// Stopping: a writer that ends now has drained, or was told to quit.
    stopping: bool,
    /// The kernel's maps as first synthesized: every later `synth.shard`
    /// (a switch of output) has them again without a read of kallsyms.
    kernel_maps: Option<Vec<u8>>,
}

impl<'a> Recording<'a> {
    fn open(
        config: &RecordConfig,
        target: &OutputTarget,
        stream: Option<std::sync::Arc<std::os::fd::OwnedFd>>,
        command_line: &[String],
        plan: &'a Plan,
        workload: Option<&'a mut Workload>,
    ) -> Result<Recording<'a>, RecordError> {
        plan.reserve_file_descriptors()?;
        let counting = Counting::open(config)?;
        let attrs = &plan.attrs;
        let workload_pid = workload.as_ref().map(|w| w.pid.as_raw());
        let target_pid = workload_pid.filter(|_| plan.scope == Scope::Workload);
        let (cpus, tasks) = open::open_all(plan, attrs, target_pid)?;
        let switch_trigger = EventTrigger::open(plan, &tasks)?;
        let (side_band, warning) = SideBand::open(config, plan)?;
        if let Some(warning) = warning {
            say::warning(&warning);
        }
        if config.kcore {
            crate::kcore::copy_to(&config.output, &target.given)?;
        }
        let dir = crate::shards_place::create_dir(config, &target.given)?;
        let mut meta = initial_meta(
            config,
            command_line,
            plan,
            attrs,
            &cpus,
            &tasks,
            workload_pid,
        );
        meta.events.extend(side_band.event_meta());
        let output = RecordingOutput::new(config, target, plan, stream, dir, meta)?;
        Ok(Recording {
            plan,
            workload,
            workload_code: None,
            pool: WriterPool::new(cpus),
            side_band,
            output,
            counting,
            switch_trigger,
            stopping: false,
            kernel_maps: None,
        })
    }

    fn run(mut self, signals: &mut Signals) -> Result<(RecordReport, HandOff), RecordError> {
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
            sync_shard: self.output.sync_shards,
            overwrite: self.plan.overwrite,
            realtime: self.plan.realtime,
            writes: writers::shard_writes(&self.output.dir)?,
            merger_reads_first: self.output.merger_reads_first(),
        };
        let (dir, windows) = (&self.output.dir, self.output.window_at());
        self.pool
            .spawn(dir, &self.side_band, options, windows.clone())?;
        let cpus: Vec<_> = self.pool.cpus().collect();
        let recorder: Vec<i32> = std::iter::once(std::process::id() as i32)
            .chain(self.pool.processes().map(|p| p.pid.as_raw()))
            .collect();
        let off_cpu = crate::off_cpu::setup(self.plan, &cpus, &recorder, self.workload_pid())?;
        let existing_bpf = self
            .side_band
            .spawn(dir, self.plan, &cpus, off_cpu, windows)?;
        self.spawn_live_merger()?;
        self.synthesize(&existing_bpf, Moment::Start)?;
        self.pool.wait_ready()?;
        let merger = self.output.merger_pid().map(|pid| pid.as_raw());
        self.output.meta.recorder_pids = std::iter::once(std::process::id() as i32)
            .chain(self.helpers().map(|h| h.pid.as_raw()))
            .chain(merger)
            .collect();
        self.exclude_recorder()?;
        // A stream's features go first, as perf's pipe mode writes them.
        if self.output.streamed() {
            shardrec_shard::host::complete(&mut self.output.meta.host);
        }
        self.output.dir.write_start_meta(&self.output.meta)?;
        self.output.dir.reserve_meta_room(&self.output.meta)?;
        self.output.begin();
        Ok(())
    }

    /// Forks the live merger, watching every CPU's ring and the side
    /// band's, when the output is merged while recording.
    fn spawn_live_merger(&mut self) -> Result<(), RecordError> {
        let reads_first = self.output.merger_reads_first();
        let rings = watched_rings(
            &self.pool,
            &self.side_band,
            self.plan.ring_pages,
            reads_first,
        );
        self.output.spawn_live_merger(rings)
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
        let files = shardrec_perfdata::tracing_files::read_files(&tracepoints)
            .map_err(|e| RecordError::Tracefs(format!("reading tracepoint formats: {e}")))?;
        self.output.meta.tracing_data = shardrec_perfdata::tracing_data::encode(&files);
        Ok(())
    }

    /// Sets each tracepoint's filter: the user's `--filter`, and, in the
    /// tracepoints the recorder's own writing would feed (the system
    /// calls', io_uring's: [`FED_BY_THE_RECORDER`]), the recorder's own
    /// processes left out, so a syscall tracepoint does not record the
    /// writers' own io_uring calls (nor a switch trigger the switch's
    /// own). Elsewhere the recorder is recorded as perf records itself:
    /// left out of `sched_switch`, a CPU's switches would not chain (a
    /// switch away from a writer missing, `perf sched latency` counted
    /// each next one a context switch bug).
    fn exclude_recorder(&self) -> Result<(), RecordError> {
        let own = self
            .output
            .meta
            .recorder_pids
            .iter()
            .map(|pid| format!("common_pid != {pid}"))
            .collect::<Vec<_>>()
            .join(" && ");
        if let Some(trigger) = &self.switch_trigger {
            trigger.set_filter(&own)?;
        }
        for cpu in self.pool.cpus() {
            for event in &cpu.events {
                let spec = &self.plan.events[event.spec];
                let Some((system, _)) = spec.tracepoint() else {
                    continue;
                };
                let fed = FED_BY_THE_RECORDER.contains(&system.as_str());
                let filter = match (&spec.filter, fed) {
                    (Some(user), true) => format!("({user}) && {own}"),
                    (None, true) => own.clone(),
                    (Some(user), false) => user.clone(),
                    (None, false) => continue,
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
        self.pool.start()?;
        if let Some(trigger) = &self.switch_trigger {
            trigger.enable(self.plan)?;
        }
        if let Some(workload) = self.workload.as_mut() {
            workload.start()?;
        }
        if self.plan.scope == Scope::Workload && self.plan.delay.is_none() {
            // The workload's events the kernel enabled at its exec; the
            // off-CPU output events follow no task, so they are enabled
            // now, after it: the wait of the child held for its exec is
            // not the workload's.
            self.pool.enable_off_cpu(self.plan)?;
        }
        self.counting.count_later(self.plan);
        Ok(())
    }

    /// The workload's pid, when there is one.
    fn workload_pid(&self) -> Option<i32> {
        self.workload.as_ref().map(|w| w.pid.as_raw())
    }

    /// The writers' and the VIP's processes.
    fn helpers(&self) -> impl Iterator<Item = &HelperProcess> {
        self.pool.processes().chain(self.side_band.process())
    }

    /// Sends `command` to every writer and the VIP still running.
    fn send_all(&mut self, command: shardrec_control::Command) {
        let vip = self.side_band.process_mut();
        for helper in self.pool.processes_mut().chain(vip) {
            if !helper.has_exited() {
                helper.send(command);
            }
        }
    }

    /// Time since the recording began.
    fn since_start(&self) -> Duration {
        Duration::from_nanos(unix_ns().saturating_sub(self.output.meta.start_unix_ns))
    }

    /// After a failure before recording began: stop the helpers and leave
    /// nothing behind.
    fn abandon(&mut self) {
        self.output.abandon_live();
        self.send_all(shardrec_control::Command::Quit);
        for helper in self.helpers().filter(|h| !h.has_exited()) {
            let _ = nix::sys::wait::waitpid(helper.pid, None);
        }
        let _ = std::fs::remove_dir_all(self.output.dir.path());
        let _ = std::io::stderr().flush();
    }
}

/// The tracepoint systems the recorder's own work would feed, each of its
/// writes a record: the recorder's processes are left out of these.
const FED_BY_THE_RECORDER: &[&str] = &["raw_syscalls", "syscalls", "io_uring"];

/// What the live merger watches: every CPU's ring (of `pages` data
/// pages), with its claim where it `reads_first`, and the side band's.
fn watched_rings<'r>(
    pool: &'r WriterPool,
    side_band: &'r SideBand,
    pages: usize,
    reads_first: bool,
) -> Vec<WatchedRing<'r>> {
    let cpus = pool.writers().iter().map(|w| WatchedRing {
        event: w.events.ring_owner(),
        pages,
        base: Some(w.base()),
        reads_first,
        claim: w.events.ring.claim_slot().filter(|_| reads_first).cloned(),
    });
    cpus.chain(side_band.watched_rings()).collect()
}
