//! The coordinator: open, synthesize, fork the writers, enable, wait, stop.

use std::io::{BufWriter, Write};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, Signal};
use shardrec_shard::{scan, ClockRef, EventMeta, Meta, RecordingDir, Stats, META_VERSION};
use shardrec_synth::{Synthesizer, Tasks as SynthTasks};
use shardrec_sys::Attr;
use shardrec_writer::Command;

use crate::open::{self, CpuEvents};
use crate::plan::{Plan, Tasks};
use crate::signals::{self, Signals, Wake};
use crate::summary::{CpuReport, RecordReport};
use crate::workload::Workload;
use crate::writers::{self, WriterProcess};
use crate::{attrs, host, RecordConfig, RecordError};

/// Records as `config` asks until the workload exits or a stop is asked
/// for, and leaves the shards and a final `meta` in `OUTPUT.shards/`.
pub fn record(config: &RecordConfig) -> Result<RecordReport, RecordError> {
    let plan = Plan::resolve(config)?;
    for warning in &plan.warnings {
        eprintln!("shardrec: warning: {warning}");
    }
    let mut signals = Signals::block()?;
    let mut workload = match config.command.is_empty() {
        true => None,
        false => Some(Workload::prepare(&config.command)?),
    };
    let result = Recording::open(config, &plan, workload.as_mut())
        .and_then(|recording| recording.run(&mut signals));
    if result.is_err() {
        if let Some(workload) = workload.as_mut() {
            workload.kill();
        }
    }
    result
}

/// A recording from the moment its directory exists.
struct Recording<'a> {
    plan: &'a Plan,
    cpus: Vec<CpuEvents>,
    dir: RecordingDir,
    writers: Vec<WriterProcess>,
    workload: Option<&'a mut Workload>,
    workload_code: Option<i32>,
    meta: Meta,
}

impl<'a> Recording<'a> {
    fn open(
        config: &RecordConfig,
        plan: &'a Plan,
        workload: Option<&'a mut Workload>,
    ) -> Result<Recording<'a>, RecordError> {
        let attrs = attrs::build(plan);
        let workload_pid = workload.as_ref().map(|w| w.pid.as_raw());
        let target_pid = workload_pid.filter(|_| plan.tasks == Tasks::Workload);
        let cpus = open::open_all(plan, &attrs, target_pid)?;
        let dir = RecordingDir::create(RecordingDir::for_output(&config.output))?;
        let meta = initial_meta(config, plan, &attrs, &cpus, workload_pid);
        Ok(Recording {
            plan,
            cpus,
            dir,
            writers: Vec::new(),
            workload,
            workload_code: None,
            meta,
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
    /// starts its threads.
    fn prepare(&mut self) -> Result<(), RecordError> {
        self.read_tracing_data()?;
        for cpu in &self.cpus {
            let shard = self.dir.create_file(&self.dir.shard_path(cpu.cpu))?;
            self.writers
                .push(writers::spawn(cpu, self.plan.ring_pages, shard)?);
        }
        for writer in &mut self.writers {
            writer.wait_ready()?;
        }
        self.synthesize()?;
        self.meta.recorder_pids = std::iter::once(std::process::id() as i32)
            .chain(self.writers.iter().map(|w| w.pid.as_raw()))
            .collect();
        self.exclude_recorder()?;
        self.dir.write_meta(&self.meta)?;
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
        let files = crate::tracing::read_files(&tracepoints)
            .map_err(|e| RecordError::Tracefs(format!("reading tracepoint formats: {e}")))?;
        self.meta.tracing_data = shardrec_perfdata::tracing_data::encode(&files);
        Ok(())
    }

    fn synthesize(&mut self) -> Result<(), RecordError> {
        let first = &self.cpus[0].events[0];
        let sample_type = self.meta.events[first.spec].sample_type();
        let synth = Synthesizer::new(sample_type, first.id);
        let path = self.dir.synth_path();
        let mut out = BufWriter::new(self.dir.create_file(&path)?);
        let tasks = match (&self.plan.tasks, &self.workload) {
            (Tasks::SystemWide, _) => SynthTasks::All,
            (Tasks::Threads(_), _) => SynthTasks::Processes(self.plan.pids.clone()),
            (Tasks::Workload, Some(w)) => SynthTasks::Processes(vec![w.pid.as_raw()]),
            (Tasks::Workload, None) => unreachable!("a workload plan has a workload"),
        };
        let output_error = |e| RecordError::Output {
            path: path.clone(),
            source: e,
        };
        synth.kernel(&mut out).map_err(output_error)?;
        synth.tasks(&tasks, &mut out).map_err(output_error)?;
        out.into_inner()
            .map_err(|e| output_error(e.into_error()))?
            .sync_data()
            .map_err(output_error)
    }

    /// Filters the recorder's own processes out of every tracepoint, so a
    /// syscall tracepoint does not record the writers' own io_uring calls.
    fn exclude_recorder(&self) -> Result<(), RecordError> {
        let filter = self
            .meta
            .recorder_pids
            .iter()
            .map(|pid| format!("common_pid != {pid}"))
            .collect::<Vec<_>>()
            .join(" && ");
        for cpu in &self.cpus {
            for event in cpu
                .events
                .iter()
                .filter(|e| self.plan.events[e.spec].is_tracepoint())
            {
                event
                    .event
                    .set_filter(&filter)
                    .map_err(|e| RecordError::Open {
                        name: self.plan.events[event.spec].name.clone(),
                        cpu: cpu.cpu,
                        source: e,
                    })?;
            }
        }
        Ok(())
    }

    fn enable(&mut self) -> Result<(), RecordError> {
        // A followed workload enables its own events at exec (enable_on_exec).
        if self.plan.tasks != Tasks::Workload {
            for cpu in &self.cpus {
                for event in &cpu.events {
                    event
                        .event
                        .enable()
                        .map_err(RecordError::system("enabling events"))?;
                }
            }
        }
        match self.workload.as_mut() {
            Some(workload) => workload.start(),
            None => Ok(()),
        }
    }

    /// Waits for a reason to stop. A writer that dies is a failure, but the
    /// others are still stopped cleanly so their shards are complete.
    fn wait(
        &mut self,
        signals: &mut Signals,
    ) -> Result<(String, Option<RecordError>), RecordError> {
        loop {
            match signals.wait(250)? {
                Wake::Stop(signal) => return Ok((signal.as_str().to_string(), None)),
                Wake::Child => {
                    if let Some(outcome) = self.reap_children() {
                        return Ok(outcome);
                    }
                }
                Wake::Timeout => {
                    if self.targets_gone() {
                        return Ok(("target processes exited".into(), None));
                    }
                }
            }
        }
    }

    fn reap_children(&mut self) -> Option<(String, Option<RecordError>)> {
        let mut outcome = None;
        for ended in signals::reap() {
            if self.workload.as_ref().is_some_and(|w| w.pid == ended.pid) {
                self.workload_code = Some(ended.code);
                outcome.get_or_insert(("workload exited".to_string(), None));
            } else if let Some(writer) = self.writers.iter_mut().find(|w| w.pid == ended.pid) {
                writer.exited = true;
                let error = writer.collect().err().unwrap_or(RecordError::Writer {
                    cpu: writer.cpu,
                    message: format!("exited early with status {}", ended.code),
                });
                outcome = Some((format!("writer of CPU {} failed", writer.cpu), Some(error)));
            }
        }
        outcome
    }

    fn targets_gone(&self) -> bool {
        matches!(self.plan.tasks, Tasks::Threads(_))
            && self.plan.pids.iter().all(|&pid| !running(pid))
    }

    /// Disables every event, lets each writer drain its ring, and waits for
    /// them. A second stop signal makes the writers quit at once.
    fn stop(&mut self, signals: &mut Signals) -> Result<(), RecordError> {
        for event in self.cpus.iter().flat_map(|c| &c.events) {
            let _ = event.event.disable();
        }
        self.send_all(Command::Drain);
        while self.writers.iter().any(|w| !w.exited) {
            match signals.wait(1000)? {
                Wake::Stop(_) => self.send_all(Command::Quit),
                Wake::Child => {
                    self.reap_children();
                }
                Wake::Timeout => {}
            }
        }
        self.end_workload();
        Ok(())
    }

    fn send_all(&mut self, command: Command) {
        for writer in self.writers.iter_mut().filter(|w| !w.exited) {
            writer.send(command);
        }
    }

    /// perf ends a workload still running at stop with SIGTERM, and reports
    /// its status.
    fn end_workload(&mut self) {
        let Some(workload) = self.workload.as_ref() else {
            return;
        };
        if self.workload_code.is_none() {
            let _ = kill(workload.pid, Signal::SIGTERM);
            if let Ok(status) = nix::sys::wait::waitpid(workload.pid, None) {
                self.workload_code = Some(match status {
                    nix::sys::wait::WaitStatus::Exited(_, code) => code,
                    nix::sys::wait::WaitStatus::Signaled(_, sig, _) => 128 + sig as i32,
                    _ => 0,
                });
            }
        }
    }

    /// Counts what each shard holds, rewrites meta with it, and reports.
    fn finish(mut self, stopped_by: String, started: Instant) -> Result<RecordReport, RecordError> {
        let elapsed = started.elapsed();
        let layouts = self.meta.layouts();
        let lost_by_event = self.read_lost_counts();
        let mut cpus = Vec::new();
        for (writer, cpu) in self.writers.iter_mut().zip(&self.cpus) {
            let path = self.dir.shard_path(writer.cpu);
            let bytes = scan::ShardBytes::open(&path)?;
            let (mut stats, _) = scan::scan(&bytes, &layouts);
            stats.cpu = writer.cpu;
            stats.lost_read = lost_by_event
                .iter()
                .filter(|(cpu, _, _)| *cpu == writer.cpu)
                .map(|(_, _, lost)| lost)
                .sum();
            let writer_stats = match writer.stats {
                Some(stats) => stats,
                None => writer.collect().unwrap_or_default(),
            };
            cpus.push(CpuReport {
                stats,
                writer: writer_stats,
                unwritten: cpu.ring.head() - cpu.ring.tail(),
            });
        }
        let synth_bytes = std::fs::metadata(self.dir.synth_path()).map_or(0, |m| m.len());
        self.meta.stats = Some(Stats {
            cpus: cpus.iter().map(|c| c.stats.clone()).collect(),
            synth_bytes,
            lost_by_event,
            stopped_by: stopped_by.clone(),
            stop_unix_ns: unix_ns(),
        });
        self.dir.write_meta(&self.meta)?;
        Ok(RecordReport {
            dir: self.dir.path().to_path_buf(),
            cpus,
            elapsed,
            stopped_by,
            exit_code: self.workload_code.unwrap_or(0),
        })
    }

    /// Each event's count of samples the kernel dropped, as `(cpu, id,
    /// lost)` for the non-zero ones; empty where the kernel keeps none.
    fn read_lost_counts(&self) -> Vec<(u32, u64, u64)> {
        if !self.plan.lost_counts {
            return Vec::new();
        }
        let mut counts = Vec::new();
        for cpu in &self.cpus {
            for event in &cpu.events {
                // read() gives value, id, lost (read_format ID | LOST).
                match event
                    .event
                    .read_values()
                    .ok()
                    .and_then(|v| v.get(2).copied())
                {
                    Some(lost) if lost > 0 => counts.push((cpu.cpu, event.id, lost)),
                    _ => {}
                }
            }
        }
        counts
    }

    /// After a failure before recording began: stop the writers and leave
    /// nothing behind.
    fn abandon(&mut self) {
        self.send_all(Command::Quit);
        for writer in self.writers.iter().filter(|w| !w.exited) {
            let _ = nix::sys::wait::waitpid(writer.pid, None);
        }
        let _ = std::fs::remove_dir_all(self.dir.path());
        let _ = std::io::stderr().flush();
    }
}

/// Whether process `pid` still runs: it exists and is not a zombie
/// waiting for its parent (which `kill(pid, 0)` cannot tell).
fn running(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The state follows the command name, which is in parentheses and may
    // itself contain ") ".
    let state = stat
        .rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next());
    !matches!(state, None | Some('Z') | Some('X'))
}

fn initial_meta(
    config: &RecordConfig,
    plan: &Plan,
    attrs: &[Attr],
    cpus: &[CpuEvents],
    workload_pid: Option<i32>,
) -> Meta {
    let events = plan
        .events
        .iter()
        .zip(attrs)
        .enumerate()
        .map(|(i, (spec, attr))| EventMeta {
            name: spec.name.clone(),
            attr: attr.to_bytes(),
            ids: cpus
                .iter()
                .flat_map(|c| {
                    c.events
                        .iter()
                        .filter(|e| e.spec == i)
                        .map(|e| (c.cpu, e.id))
                })
                .collect(),
        })
        .collect();
    Meta {
        version: META_VERSION,
        events,
        cpus: plan.cpus.clone(),
        ring_pages: plan.ring_pages,
        command_line: config.command_line.clone(),
        host: host::facts(),
        start_unix_ns: unix_ns(),
        recorder_pids: vec![std::process::id() as i32],
        workload_pid,
        clock: config.clockid.map(clock_ref),
        tracing_data: Vec::new(),
        stats: None,
    }
}

/// One instant read on the wall clock and on `clockid`, back to back, and
/// the clock's resolution, as perf record keeps them for `-k`.
fn clock_ref(clockid: i32) -> ClockRef {
    use nix::time::{clock_getres, clock_gettime, ClockId};
    let clock = ClockId::from_raw(clockid);
    let ns = |t: nix::sys::time::TimeSpec| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64;
    let tod = clock_gettime(ClockId::CLOCK_REALTIME).map_or(0, ns);
    let now = clock_gettime(clock).map_or(0, ns);
    ClockRef {
        clockid,
        resolution_ns: clock_getres(clock).map_or(0, ns),
        tod_ns: tod,
        clock_ns: now,
    }
}

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
