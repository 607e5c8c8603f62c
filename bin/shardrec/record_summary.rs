//! The summary `shardrec record` prints when it stops, from the
//! recorder's report: one line as perf's, the table of CPUs, then
//! whatever else happened (events changed, BPF programs, filters, helpers
//! replaced).

use std::fmt::{self, Write};
use std::time::Duration;

use shardrec_control::VipStats;
use shardrec_record::RecordReport;

/// The summary's text.
pub fn render(report: &RecordReport) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = write_all(&mut text, report);
    text
}

fn write_all(f: &mut String, report: &RecordReport) -> fmt::Result {
    let secs = report.elapsed.as_secs_f64().max(1e-9);
    headline(f, report, secs)?;
    for event in &report.changed_events {
        let why = event.why.join("; ");
        let (asked, recorded) = (&event.asked, &event.recorded);
        writeln!(f, "  event {asked} recorded as {recorded}: {why}")?;
    }
    cpu_table(f, report, secs)?;
    spilled(f, report)?;
    if let Some(windows) = &report.windows {
        writeln!(
            f,
            "  the figures above are the last window's: {} earlier outputs kept, {} not written",
            windows.kept, windows.failed
        )?;
    }
    if let Some(bpf) = &report.bpf {
        bpf_programs(f, bpf)?;
    }
    for filter in &report.filters {
        writeln!(
            f,
            "  --filter '{}' on {}: {} samples kept, {} dropped in the kernel (filtered out, not lost)",
            filter.filter,
            filter.event,
            filter.kept(),
            filter.dropped()
        )?;
    }
    helpers_replaced(f, report)?;
    let unwritten: u64 = report.cpus.iter().map(|c| c.unwritten).sum();
    if unwritten > 0 {
        writeln!(
            f,
            "  {unwritten} bytes were still in the rings when the writers quit"
        )?;
    }
    Ok(())
}

fn headline(f: &mut String, report: &RecordReport, secs: f64) -> fmt::Result {
    let bytes: u64 = report.cpus.iter().map(|c| c.stats.bytes).sum();
    let samples: u64 = report.cpus.iter().map(|c| c.stats.samples).sum();
    writeln!(
        f,
        "[ shardrec record: {:.3} MB in {} ({} samples, {} lost) over {:.2} s; stopped by {} ]",
        bytes as f64 / 1e6,
        report.dir.display(),
        samples,
        report.lost(),
        secs,
        report.stopped_by
    )
}

fn cpu_table(f: &mut String, report: &RecordReport, secs: f64) -> fmt::Result {
    writeln!(
        f,
        "  {:>4} {:>12} {:>9} {:>10} {:>8}",
        "CPU", "bytes", "MB/s", "records", "lost"
    )?;
    for cpu in &report.cpus {
        let s = &cpu.stats;
        writeln!(
            f,
            "  {:>4} {:>12} {:>9.2} {:>10} {:>8}",
            s.cpu,
            s.bytes,
            s.bytes as f64 / 1e6 / secs,
            s.records,
            s.dropped()
        )?;
    }
    Ok(())
}

/// Where the live merger read the rings first: how much went through the
/// shards all the same, spilled by the writers while it was behind (with
/// the default rings, about nothing).
fn spilled(f: &mut String, report: &RecordReport) -> fmt::Result {
    let bytes: u64 = report.cpus.iter().map(|c| c.stats.bytes).sum();
    let spilled: u64 = report.cpus.iter().map(|c| c.writer.bytes).sum();
    if !report.merged_live || spilled >= bytes {
        return Ok(());
    }
    writeln!(
        f,
        "  through the shards: {:.3} MB; the live merger took the other {:.3} MB from the rings",
        spilled as f64 / 1e6,
        (bytes - spilled) as f64 / 1e6
    )
}

fn bpf_programs(f: &mut String, bpf: &VipStats) -> fmt::Result {
    let how = match bpf.kernel_capture {
        Some(hook) => format!(
            "{} of them as they loaded, by a {} in the kernel",
            bpf.captured_in_kernel,
            hook.name()
        ),
        None => "through bpf(2): no capture program in the kernel".into(),
    };
    writeln!(
        f,
        "  BPF programs: {} loaded, {} unloaded, {} captured ({how}), {} missed (gone before capture)",
        bpf.loaded, bpf.unloaded, bpf.captured, bpf.missed
    )?;
    if bpf.lost > 0 {
        writeln!(
            f,
            "  side-band: {} records lost in the VIP's rings (not samples: BPF programs may be unnamed)",
            bpf.lost
        )?;
    }
    let Some(waits) = &bpf.off_cpu else {
        return Ok(());
    };
    writeln!(
        f,
        "  off-CPU: {} waits written, {} lost to full rings, {} ended outside the recording (a CPU not recorded, before the exec or after the stop)",
        waits.written, waits.failed, waits.unrecorded
    )?;
    if waits.short + waits.unsummed > 0 {
        writeln!(
            f,
            "  off-CPU: {} waits under --off-cpu-thresh summed by thread and stack, written at the end; {} not summed (the sums were full)",
            waits.short, waits.unsummed
        )?;
    }
    Ok(())
}

fn helpers_replaced(f: &mut String, report: &RecordReport) -> fmt::Result {
    for cpu in report.cpus.iter().filter(|c| !c.replaced_at.is_empty()) {
        let end = match cpu.given_up {
            true => ", then died again and was given up on",
            false => "",
        };
        writeln!(
            f,
            "  the writer of CPU {} died and was replaced at {}{end}",
            cpu.stats.cpu,
            times(&cpu.replaced_at)
        )?;
    }
    if !report.vip_restarted_at.is_empty() {
        writeln!(
            f,
            "  the VIP died and was restarted at {} (programs loaded and unloaded while none ran were not captured)",
            times(&report.vip_restarted_at)
        )?;
    }
    Ok(())
}

/// `0.52 s, 1.20 s`.
fn times(at: &[Duration]) -> String {
    let times: Vec<String> = at
        .iter()
        .map(|t| format!("{:.2} s", t.as_secs_f64()))
        .collect();
    times.join(", ")
}
