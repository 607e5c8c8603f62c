//! Every `shardrec record` option value, from the word the user typed to
//! a typed value, in one place. The command line calls these before the
//! recorder runs; each error names its option, in perf's spelling.

mod samples;
mod synthesis;

pub use samples::{parse_branch_filter, parse_registers};
pub use synthesis::{parse_map_timeout, parse_synth};

use shardrec_record::EventArg;
use shardrec_record::{CallGraph, ControlSpec, Delay, Sampling};

/// Parses `-C`: CPUs and ranges, `0,2-3`.
pub fn parse_cpus(text: &str) -> Result<Vec<u32>, String> {
    let cpus = shardrec_sys::cpu::parse_list(text).map_err(|e| format!("-C {text}: {e}"))?;
    if cpus.is_empty() {
        return Err(format!("-C '{text}' names no CPU"));
    }
    Ok(cpus)
}

/// Parses `-p`: process ids, comma separated.
pub fn parse_pids(text: &str) -> Result<Vec<i32>, String> {
    parse_ids(text, "-p", "process")
}

/// Parses `-t`: thread ids, comma separated.
pub fn parse_tids(text: &str) -> Result<Vec<i32>, String> {
    parse_ids(text, "-t", "thread")
}

fn parse_ids(text: &str, option: &str, what: &str) -> Result<Vec<i32>, String> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.trim()
                .parse::<i32>()
                .ok()
                .filter(|&id| id > 0)
                .ok_or_else(|| format!("{option}: '{p}' is not a {what} id"))
        })
        .collect()
}

/// Parses `-u`: a user name or number.
pub fn parse_uid(text: &str) -> Result<u32, String> {
    if let Ok(uid) = text.parse() {
        return Ok(uid);
    }
    match nix::unistd::User::from_name(text) {
        Ok(Some(user)) => Ok(user.uid.as_raw()),
        _ => Err(format!("-u: invalid user '{text}'")),
    }
}

/// Parses one `-e`: perf's event syntax (lists, groups, term lists,
/// modifiers). Whether each names an event on this machine the plan finds
/// out.
pub fn parse_events(text: &str) -> Result<EventArg, String> {
    EventArg::parse(text)
}

/// Parses one `--switch-output-event`: `-e`'s syntax.
pub fn parse_switch_output_event(text: &str) -> Result<EventArg, String> {
    EventArg::parse_for("--switch-output-event", text)
}

/// Parses `-F`: a frequency in Hz, or `max`.
pub fn parse_frequency(text: &str) -> Result<Sampling, String> {
    match text {
        "max" => Ok(Sampling::MaxFrequency),
        hz => hz
            .parse()
            .map(Sampling::Frequency)
            .map_err(|_| format!("-F: '{hz}' is not a frequency in Hz or 'max'")),
    }
}

pub use shardrec_record::DEFAULT_DWARF_STACK;

/// Parses `--call-graph`'s value: `fp`, `fp,FRAMES`, `dwarf`,
/// `dwarf,SIZE` or `lbr`; with `fp,FRAMES`, the most frames a callchain
/// holds (`sample_max_stack`), where it is below the kernel's
/// `perf_event_max_stack` (perf passes over a larger one).
pub fn parse_call_graph(text: &str) -> Result<(CallGraph, Option<u16>), String> {
    let limit = shardrec_sys::sysctl::read_sysctl("perf_event_max_stack").unwrap_or(127);
    call_graph(text, limit).map_err(|e| format!("--call-graph: {e}"))
}

fn call_graph(text: &str, max_stack_limit: u64) -> Result<(CallGraph, Option<u16>), String> {
    let (mode, size) = match text.split_once(',') {
        Some((mode, size)) => (mode, Some(size)),
        None => (text, None),
    };
    if let ("fp", Some(frames)) = (mode, size) {
        let frames: u64 = frames
            .parse()
            .map_err(|_| format!("'{frames}' is not a number of frames"))?;
        let max_stack = (frames < max_stack_limit).then_some(frames as u16);
        return Ok((CallGraph::FramePointer, max_stack));
    }
    call_graph_mode(mode, size, text).map(|mode| (mode, None))
}

fn call_graph_mode(mode: &str, size: Option<&str>, text: &str) -> Result<CallGraph, String> {
    match (mode, size) {
        ("fp", None) => Ok(CallGraph::FramePointer),
        ("lbr", None) => Ok(CallGraph::Lbr),
        ("dwarf", None) => Ok(CallGraph::Dwarf(DEFAULT_DWARF_STACK)),
        ("dwarf", Some(size)) => {
            let size: u32 = size
                .parse()
                .map_err(|_| format!("'{size}' is not a stack dump size in bytes"))?;
            // The kernel wants a multiple of 8 below 64 KiB, as perf checks.
            if size == 0 || size % 8 != 0 || size > 65528 {
                return Err(format!(
                    "dwarf stack size {size} must be a multiple of 8 between 8 and 65528"
                ));
            }
            Ok(CallGraph::Dwarf(size))
        }
        _ => Err(format!(
            "'{text}' is not a call-graph mode (fp, fp,FRAMES, dwarf, dwarf,SIZE or lbr)"
        )),
    }
}

/// Parses `-z`'s level: 1 (perf's default when none is given) to 22.
pub fn parse_compression_level(text: &str) -> Result<i32, String> {
    match text {
        "" => Ok(1),
        level => level
            .parse()
            .ok()
            .filter(|l| (1..=22).contains(l))
            .ok_or_else(|| format!("-z: compression level '{level}' must be in [1, 22]")),
    }
}

/// Parses `-D`: milliseconds to wait before counting, or -1 for "until
/// `--control` enables".
pub fn parse_delay(text: &str) -> Result<Delay, String> {
    match text.trim().parse::<i64>() {
        Ok(-1) => Ok(Delay::UntilEnabled),
        Ok(ms) if ms >= 0 => Ok(Delay::Millis(ms as u64)),
        _ => Err(format!(
            "-D: '{text}' is not a delay in milliseconds (or -1)"
        )),
    }
}

/// Parses `--control`: `fifo:CTL[,ACK]` or `fd:CTL[,ACK]`, as perf.
pub fn parse_control(text: &str) -> Result<ControlSpec, String> {
    let bad = || format!("--control '{text}': use fifo:ctl-fifo[,ack-fifo] or fd:ctl-fd[,ack-fd]");
    let (kind, rest) = text.split_once(':').ok_or_else(bad)?;
    let (ctl, ack) = match rest.split_once(',') {
        Some((ctl, ack)) => (ctl, Some(ack)),
        None => (rest, None),
    };
    if ctl.is_empty() || ack == Some("") {
        return Err(bad());
    }
    let fd = |t: &str| t.parse::<i32>().ok().filter(|&fd| fd >= 0).ok_or_else(bad);
    match kind {
        "fifo" => Ok(ControlSpec::Fifo(ctl.into(), ack.map(Into::into))),
        "fd" => Ok(ControlSpec::Fd(fd(ctl)?, ack.map(fd).transpose()?)),
        _ => Err(bad()),
    }
}

/// Parses `-k`: a clock name as perf knows them, or a number.
pub fn parse_clockid(text: &str) -> Result<i32, String> {
    clockid(text).map_err(|e| format!("-k: {e}"))
}

fn clockid(text: &str) -> Result<i32, String> {
    const CLOCKS: &[(&str, i32)] = &[
        ("monotonic", libc::CLOCK_MONOTONIC),
        ("mono", libc::CLOCK_MONOTONIC),
        ("monotonic_raw", libc::CLOCK_MONOTONIC_RAW),
        ("raw", libc::CLOCK_MONOTONIC_RAW),
        ("realtime", libc::CLOCK_REALTIME),
        ("real", libc::CLOCK_REALTIME),
        ("boottime", libc::CLOCK_BOOTTIME),
        ("boot", libc::CLOCK_BOOTTIME),
        ("tai", libc::CLOCK_TAI),
    ];
    let name = text.to_ascii_lowercase();
    let name = name.strip_prefix("clock_").unwrap_or(&name);
    CLOCKS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, id)| id)
        .or_else(|| text.parse().ok())
        .ok_or_else(|| {
            format!("'{text}' is not a clock (monotonic, monotonic_raw, realtime, boottime, tai)")
        })
}

/// Parses a size in bytes with an optional B/K/M/G suffix (K = 1024).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (number, shift) = match text.chars().last().map(|c| c.to_ascii_uppercase()) {
        Some('B') => (&text[..text.len() - 1], 0),
        Some('K') => (&text[..text.len() - 1], 10),
        Some('M') => (&text[..text.len() - 1], 20),
        Some('G') => (&text[..text.len() - 1], 30),
        Some(c) if c.is_ascii_alphabetic() => {
            return Err(format!("'{text}' has an unknown size unit"))
        }
        _ => (text, 0),
    };
    let number: u64 = number
        .parse()
        .map_err(|_| format!("'{text}' is not a size"))?;
    number
        .checked_mul(1 << shift)
        .ok_or_else(|| format!("'{text}' is too large"))
}

/// Parses `--switch-output[=signal|TIME|SIZE]` as perf does: `signal`
/// (the default), a time with s/m/h/d (and, beyond perf, ms), or a size
/// with B/K/M/G (a unit is needed, since a bare number could be either).
pub fn parse_switch_trigger(text: &str) -> Result<shardrec_record::SwitchTrigger, String> {
    use shardrec_record::SwitchTrigger;
    use std::time::Duration;
    let text = text.trim();
    if text.is_empty() || text == "signal" {
        return Ok(SwitchTrigger::Signal);
    }
    let bad = || {
        format!("--switch-output={text}: expected signal, a time (30s, 5m, 1h, 1d) or a size (100M, 1G)")
    };
    // Milliseconds are shardrec's own (perf's least unit is the second);
    // 'M' is perf's megabytes and 'm' its minutes.
    let (number, unit) = match text.strip_suffix("ms") {
        Some(number) => (number, "ms"),
        None => text.split_at(text.len() - text.chars().last().map_or(0, char::len_utf8)),
    };
    let time = |per: u64| {
        Some(Duration::from_millis(
            number.parse::<u64>().ok()?.checked_mul(per)?,
        ))
    };
    let trigger = match unit {
        "ms" => time(1).map(SwitchTrigger::Every),
        "s" | "S" => time(1_000).map(SwitchTrigger::Every),
        "m" => time(60_000).map(SwitchTrigger::Every),
        "h" | "H" => time(3_600_000).map(SwitchTrigger::Every),
        "d" | "D" => time(86_400_000).map(SwitchTrigger::Every),
        "B" | "b" | "K" | "k" | "M" | "G" | "g" => parse_size(text).ok().map(SwitchTrigger::Bytes),
        _ => None,
    };
    match trigger {
        Some(SwitchTrigger::Every(Duration::ZERO) | SwitchTrigger::Bytes(0)) | None => Err(bad()),
        Some(trigger) => Ok(trigger),
    }
}

/// Parses `-m`: a number of pages (a power of two), or a size with a
/// B/K/M/G suffix, as perf accepts; perf's `PAGES,AUXPAGES` form is read,
/// but an AUX area (Intel PT, Arm SPE) is not recorded yet.
pub fn parse_ring_pages(text: &str, page_size: usize) -> Result<usize, String> {
    let text = match text.split_once(',') {
        Some((pages, "" | "0")) => pages,
        Some((_, aux)) => {
            return Err(format!(
                "-m {text}: {aux} AUX area pages asked for, but AUX area tracing (intel_pt, arm_spe) is not supported by shardrec yet"
            ))
        }
        None => text,
    };
    let text = text.trim();
    let pages = match text.chars().last().is_some_and(|c| c.is_ascii_alphabetic()) {
        true => (parse_size(text)? / page_size as u64) as usize,
        false => text
            .parse()
            .map_err(|_| format!("'{text}' is not a number of pages"))?,
    };
    if pages == 0 || !pages.is_power_of_two() {
        return Err(format!(
            "-m {text}: the ring needs a power-of-two number of data pages (got {pages})"
        ));
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_of_cpus_pids_and_events() {
        assert_eq!(parse_cpus("0,2-3"), Ok(vec![0, 2, 3]));
        assert!(parse_cpus("1-x").unwrap_err().starts_with("-C 1-x:"));
        assert!(parse_cpus(",").is_err());
        assert_eq!(parse_pids("12, 34"), Ok(vec![12, 34]));
        assert!(parse_pids("0").is_err());
        let events = parse_events("cs:u,sched:sched_switch").unwrap();
        assert_eq!(events.groups.len(), 2);
        assert_eq!(events.groups[0].events[0].modifiers, "u");
        assert!(parse_events("{cs").is_err());
        assert_eq!(parse_frequency("max"), Ok(Sampling::MaxFrequency));
        assert_eq!(parse_frequency("99"), Ok(Sampling::Frequency(99)));
        assert!(parse_frequency("fast").is_err());
    }

    #[test]
    fn switch_output_triggers_as_perf_reads_them() {
        use shardrec_record::SwitchTrigger::*;
        use std::time::Duration;
        assert_eq!(parse_switch_trigger(""), Ok(Signal));
        assert_eq!(parse_switch_trigger("signal"), Ok(Signal));
        assert_eq!(
            parse_switch_trigger("30s"),
            Ok(Every(Duration::from_secs(30)))
        );
        assert_eq!(
            parse_switch_trigger("5m"),
            Ok(Every(Duration::from_secs(300)))
        );
        assert_eq!(
            parse_switch_trigger("2h"),
            Ok(Every(Duration::from_secs(7200)))
        );
        assert_eq!(
            parse_switch_trigger("1d"),
            Ok(Every(Duration::from_secs(86400)))
        );
        assert_eq!(
            parse_switch_trigger("250ms"),
            Ok(Every(Duration::from_millis(250)))
        );
        assert_eq!(parse_switch_trigger("100M"), Ok(Bytes(100 << 20)));
        assert_eq!(parse_switch_trigger("1G"), Ok(Bytes(1 << 30)));
        assert_eq!(parse_switch_trigger("512K"), Ok(Bytes(512 << 10)));
        for bad in ["100", "0s", "1x", "fast", "-1s", "0M"] {
            assert!(parse_switch_trigger(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn call_graph_modes() {
        let mode = |text| call_graph(text, 127).map(|(mode, _)| mode);
        assert_eq!(mode("fp"), Ok(CallGraph::FramePointer));
        assert_eq!(mode("dwarf"), Ok(CallGraph::Dwarf(8192)));
        assert_eq!(mode("dwarf,4096"), Ok(CallGraph::Dwarf(4096)));
        assert!(mode("dwarf,7").is_err());
        assert_eq!(mode("lbr"), Ok(CallGraph::Lbr));
        assert!(mode("lbr,1").is_err());
        // fp,FRAMES: at most FRAMES, where the kernel allows more.
        assert_eq!(
            call_graph("fp,8", 127),
            Ok((CallGraph::FramePointer, Some(8)))
        );
        assert_eq!(
            call_graph("fp,200", 127),
            Ok((CallGraph::FramePointer, None))
        );
        assert!(call_graph("fp,x", 127).is_err());
    }

    #[test]
    fn delays_and_controls() {
        assert_eq!(parse_delay("500"), Ok(Delay::Millis(500)));
        assert_eq!(parse_delay("-1"), Ok(Delay::UntilEnabled));
        assert!(parse_delay("-2").is_err() && parse_delay("soon").is_err());
        assert_eq!(
            parse_control("fifo:/tmp/c,/tmp/a"),
            Ok(ControlSpec::Fifo("/tmp/c".into(), Some("/tmp/a".into())))
        );
        assert_eq!(parse_control("fd:5"), Ok(ControlSpec::Fd(5, None)));
        assert!(parse_control("fd:x").is_err() && parse_control("pipe:1").is_err());
    }

    #[test]
    fn ring_sizes() {
        assert_eq!(parse_ring_pages("16", 4096), Ok(16));
        assert_eq!(parse_ring_pages("4M", 4096), Ok(1024));
        assert!(parse_ring_pages("3", 4096).is_err());
        assert!(parse_ring_pages("0", 4096).is_err());
        assert_eq!(parse_ring_pages("16,", 4096), Ok(16));
        assert!(parse_ring_pages("16,8", 4096)
            .unwrap_err()
            .contains("AUX area"));
    }
}
