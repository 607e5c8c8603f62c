//! The side band: a dummy event per CPU for the records of BPF programs
//! (KSYMBOL, BPF_EVENT) and, with `--overwrite`, of tasks; the VIP that
//! streams them and captures each program; and the `--filter` programs it
//! loads, attached to the sampling events.

use std::time::Duration;

use shardrec_control::{Command, VipStats};
use shardrec_shard::{EventMeta, FilterStats, RecordingDir, WindowCursor};
use shardrec_sys::PerfEvent;
use shardrec_vip::off_cpu::OffCpuSetup;

use crate::helper_process::HelperProcess;
use crate::open::{self, CpuEvents, SideBandEvents};
use crate::pinned_filter::PinnedFilter;
use crate::plan::Plan;
use crate::sample_filters::{self, ActiveFilter};
use crate::vip::{self, VipProcess, VipPrograms};
use crate::{RecordConfig, RecordError};
use shardrec_live_merger::WatchedRing;

/// The side band's event in `meta` (perf's name for a dummy event).
pub(super) const SIDE_BAND_NAME: &str = "dummy";

/// The side-band events, their VIP and the filters it loaded.
pub(super) struct SideBand {
    /// The events, when the kernel and privileges allow them; none with
    /// `--no-bpf-event` (so no VIP either).
    events: Option<SideBandEvents>,
    vip: Option<VipProcess>,
    /// Without side-band events (a regular user), the pinned filter that
    /// `--filter` attaches instead of programs of its own.
    pinned: Option<PinnedFilter>,
    /// The `--filter` programs on sampling events, attached.
    filters: Vec<ActiveFilter>,
    /// `--off-cpu`'s program as the VIP sets it up (again, if it restarts).
    off_cpu: Option<OffCpuSetup>,
}

impl SideBand {
    /// Opens the side-band events, when the kernel and privileges allow
    /// them. A `--filter` on a sampling event needs the VIP that loads it:
    /// without one, nothing is recorded. A warning says what is missed
    /// when the recording goes on without them.
    pub(super) fn open(
        config: &RecordConfig,
        plan: &Plan,
    ) -> Result<(SideBand, Option<String>), RecordError> {
        let filtered = plan.sample_filters().next().is_some();
        let none = |warning| {
            let side_band = SideBand {
                events: None,
                vip: None,
                pinned: None,
                filters: Vec::new(),
                off_cpu: None,
            };
            Ok((side_band, warning))
        };
        if config.no_bpf_event {
            return match filtered {
                true => Err(RecordError::Usage(
                    "--filter on a sampling event is loaded by the VIP, which --no-bpf-event turns off"
                        .into(),
                )),
                false => none(None),
            };
        }
        match open::open_side_band(plan) {
            Ok(events) => Ok((
                SideBand {
                    events: Some(events),
                    vip: None,
                    pinned: None,
                    filters: Vec::new(),
                    off_cpu: None,
                },
                None,
            )),
            Err(source) if plan.off_cpu().is_some() => Err(RecordError::SideBand {
                needed_by: "--off-cpu's program is loaded by the VIP, which needs BPF (root, or CAP_BPF with CAP_PERFMON)".into(),
                source,
            }),
            Err(source) if filtered => match PinnedFilter::open() {
                Ok(pinned) => Ok((
                    SideBand {
                        events: None,
                        vip: None,
                        pinned: Some(pinned),
                        filters: Vec::new(),
                        off_cpu: None,
                    },
                    Some(format!(
                        "BPF programs will not be captured: {}",
                        shardrec_shard::with_causes(&source)
                    )),
                )),
                Err(no_pinned) => Err(RecordError::SideBand {
                    needed_by: format!(
                        "--filter on a sampling event needs BPF (root, or CAP_BPF with CAP_PERFMON), or {no_pinned}"
                    ),
                    source,
                }),
            },
            Err(source) if plan.side_band_tracking => Err(RecordError::SideBand {
                needed_by: "--overwrite streams the tasks' records through the side-band events (or use --no-bpf-event to keep them in the overwritten rings, as perf does)".into(),
                source,
            }),
            Err(why) => none(Some(format!(
                "BPF programs will not be captured: {}",
                shardrec_shard::with_causes(&why)
            ))),
        }
    }

    /// The side band's event as `meta` lists it.
    pub(super) fn event_meta(&self) -> Option<EventMeta> {
        let events = self.events.as_ref()?;
        Some(EventMeta {
            name: SIDE_BAND_NAME.into(),
            attr: events.attr.to_bytes(),
            ids: events
                .events
                .iter()
                .map(|(cpu, _, id)| (*cpu, *id))
                .collect(),
            threads: vec![-1],
            leader: None,
            off_cpu: false,
        })
    }

    /// The name of the side band's event in `meta`, when there is one.
    pub(super) fn event_name(&self) -> Option<&'static str> {
        self.events.as_ref().map(|_| SIDE_BAND_NAME)
    }

    /// The side-band event on `cpu`, which that CPU's writer disables.
    pub(super) fn on_cpu(&self, cpu: u32) -> Option<&PerfEvent> {
        self.events.as_ref().and_then(|s| s.on_cpu(cpu))
    }

    /// Forks the VIP with the `--filter` programs, which it attaches to
    /// the events of `cpus`, and `--off-cpu`'s program. Returns the records
    /// of the BPF programs already loaded, for `synth.shard`.
    pub(super) fn spawn(
        &mut self,
        dir: &RecordingDir,
        plan: &Plan,
        cpus: &[&CpuEvents],
        off_cpu: Option<OffCpuSetup>,
        windows: Option<WindowCursor>,
    ) -> Result<Vec<u8>, RecordError> {
        let programs = sample_filters::programs(plan)?;
        let Some(events) = &self.events else {
            if let Some(pinned) = self.pinned.take() {
                self.filters = sample_filters::attach_pinned(plan, cpus, pinned)?;
            }
            return Ok(Vec::new());
        };
        self.off_cpu = off_cpu;
        let vip_programs = VipPrograms {
            filters: &programs,
            off_cpu: self.off_cpu.as_ref(),
            capture_in_kernel: true,
        };
        let (vip, records, fds) = vip::spawn(events, dir, vip_programs, windows)?;
        self.vip = Some(vip);
        self.filters = sample_filters::attach(plan, cpus, &programs, fds)?;
        Ok(records)
    }

    /// The side-band rings, for the live merger to watch.
    pub(super) fn watched_rings(&self) -> impl Iterator<Item = WatchedRing<'_>> {
        let events = self.events.iter().flat_map(|s| &s.events);
        events.map(|(_, event, _)| WatchedRing {
            event,
            pages: crate::open::SIDE_BAND_RING_PAGES,
            base: None,
            reads_first: false,
            claim: None,
        })
    }

    /// The VIP's process.
    pub(super) fn process(&self) -> Option<&HelperProcess> {
        self.vip.as_ref().map(|v| &v.helper)
    }

    /// The VIP's process, to command.
    pub(super) fn process_mut(&mut self) -> Option<&mut HelperProcess> {
        self.vip.as_mut().map(|v| &mut v.helper)
    }

    /// Tells the VIP to drain: no side-band record can come any more.
    pub(super) fn drain(&mut self) {
        if let Some(vip) = self.process_mut() {
            vip.send(Command::Drain);
        }
    }

    /// Disables the side-band events of the CPUs no writer records (the
    /// writers disable the others from their own CPU), so the VIP's last
    /// read finds everything that came.
    pub(super) fn disable_unrecorded(&self, recorded: impl Fn(u32) -> bool) {
        let Some(events) = &self.events else {
            return;
        };
        for (cpu, event, _) in &events.events {
            if !recorded(*cpu) {
                let _ = event.disable();
            }
        }
    }

    /// The VIP's process `pid` has exited: its name and what it said
    /// went wrong, if anything.
    pub(super) fn ended(&mut self, pid: nix::unistd::Pid) -> Option<(String, Option<RecordError>)> {
        let vip = self.vip.as_mut().filter(|v| v.helper.pid == pid)?;
        Some((vip.helper.name.clone(), vip.ended().err()))
    }

    /// The VIP died while recording: a new one takes over its rings and
    /// files in `dir`, up to [`vip::MAX_RESTARTS`] times. Past that, or if
    /// it cannot start, the recording ends (cleanly) with `died`, why the
    /// VIP died.
    pub(super) fn restart_vip(
        &mut self,
        died: RecordError,
        dir: &RecordingDir,
        window: Option<WindowCursor>,
        since: Duration,
    ) -> Result<(), RecordError> {
        let (Some(events), Some(old)) = (self.events.as_ref(), self.vip.as_mut()) else {
            return Err(died);
        };
        if old.restarted_at.len() >= vip::MAX_RESTARTS {
            return Err(died);
        }
        let mut restarted = vip::restart(events, dir, self.off_cpu.as_ref(), old, window)?;
        restarted.restarted_at = std::mem::take(&mut old.restarted_at);
        restarted.restarted_at.push(since);
        self.vip = Some(restarted);
        Ok(())
    }

    /// After a Switch: the records of the BPF programs loaded now, which
    /// the VIP wrote for the next window's `synth.shard`.
    pub(super) fn switched(&mut self) -> Result<Vec<u8>, RecordError> {
        match self.process_mut().filter(|v| !v.has_exited()) {
            Some(vip) => Ok(vip.wait_switched()?.1),
            None => Ok(Vec::new()),
        }
    }

    /// What the VIP reported, with the side-band records lost in its
    /// rings: the kernel counts every one on its event (PERF_FORMAT_LOST,
    /// when `plan` reads it), while a LOST record comes only with the next
    /// record that fits, which after a burst may never come.
    pub(super) fn vip_stats(&self, plan: &Plan) -> Option<VipStats> {
        let mut stats = self.vip.as_ref()?.stats?;
        if let (Some(events), true) = (&self.events, plan.lost_counts) {
            let counted: u64 = events
                .events
                .iter()
                .filter_map(|(_, event, _)| event.read_values().ok()?.get(2).copied())
                .sum();
            stats.lost = stats.lost.max(counted);
        }
        Some(stats)
    }

    /// What each `--filter` kept and dropped.
    pub(super) fn filter_stats(&self, plan: &Plan) -> Vec<FilterStats> {
        self.filters.iter().map(|f| f.stats(plan)).collect()
    }

    /// When the VIP died and was restarted (since the start).
    pub(super) fn restarted_at(&self) -> Vec<Duration> {
        self.vip
            .as_ref()
            .map(|v| v.restarted_at.clone())
            .unwrap_or_default()
    }
}
