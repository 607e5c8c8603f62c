//! CPU numbers: the kernel's list syntax, the online set, pinning.

use std::fmt;
use std::io;

/// Parses a CPU list as the kernel and perf write it: `0,2-3,8`.
pub fn parse_list(text: &str) -> Result<Vec<u32>, String> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (lo, hi) = match part.split_once('-') {
            Some((lo, hi)) => (number(lo, part)?, number(hi, part)?),
            None => (number(part, part)?, number(part, part)?),
        };
        if lo > hi {
            return Err(format!("'{part}' is a decreasing range"));
        }
        cpus.extend(lo..=hi);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

fn number(text: &str, part: &str) -> Result<u32, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("'{part}' is not a CPU number or range"))
}

/// The online CPUs, from `/sys/devices/system/cpu/online`.
pub fn online() -> io::Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online")?;
    parse_list(&text).map_err(io::Error::other)
}

/// The CPUs the kernel could ever bring online (`possible`).
pub fn possible() -> io::Result<Vec<u32>> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    parse_list(&text).map_err(io::Error::other)
}

/// The CPU the caller runs on now (it may move right after).
pub fn current() -> Option<u32> {
    nix::sched::sched_getcpu().ok().map(|cpu| cpu as u32)
}

/// Pins the calling process to `cpu`.
pub fn pin_to(cpu: u32) -> io::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu as usize).map_err(io::Error::from)?;
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).map_err(io::Error::from)
}

/// Runs `work(item)` for every item at once, each on a thread pinned to
/// the item's CPU (`cpu_of(item)`), and returns the results in order.
///
/// Installing, enabling, disabling or reading a CPU-bound perf event from
/// another CPU costs an IPI and a wait for that CPU; done one CPU after
/// another, such work grows with the number of CPUs times the IPI latency,
/// which is what makes startup and stop slow on large hosts. On its own
/// CPU the kernel runs it directly. A thread that cannot be started (a
/// process limit) leaves its CPU's work to the calling thread.
pub fn on_each<I: Sync, T: Send>(
    items: &[I],
    cpu_of: impl Fn(&I) -> u32,
    work: impl Fn(&I) -> T + Sync,
) -> Vec<T> {
    let work = &work;
    std::thread::scope(|scope| {
        let threads: Vec<_> = items
            .iter()
            .map(|item| {
                let cpu = cpu_of(item);
                let thread = std::thread::Builder::new()
                    .name(format!("cpu{cpu}"))
                    .stack_size(256 << 10)
                    .spawn_scoped(scope, move || {
                        // Unpinned, the work is only slower, never wrong.
                        let _ = pin_to(cpu);
                        work(item)
                    });
                (item, thread)
            })
            .collect();
        threads
            .into_iter()
            .map(|(item, thread)| match thread {
                Ok(thread) => thread
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
                Err(_) => work(item),
            })
            .collect()
    })
}

/// A CPU list written back in the kernel's compact form (`0-3,8`).
pub struct CpuList<'a>(pub &'a [u32]);

impl fmt::Display for CpuList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut i = 0;
        while i < self.0.len() {
            let start = self.0[i];
            let mut end = start;
            while i + 1 < self.0.len() && self.0[i + 1] == end + 1 {
                i += 1;
                end = self.0[i];
            }
            if i > 0 && start != self.0[0] {
                f.write_str(",")?;
            }
            if start == end {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
            i += 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sched::CpuSet;

    #[test]
    fn on_each_runs_pinned_to_each_cpu_in_order() {
        let cpus = online().unwrap();
        let affinities = on_each(
            &cpus,
            |&cpu| cpu,
            |&cpu| {
                let set = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
                let pinned: Vec<u32> = (0..CpuSet::count() as u32)
                    .filter(|&c| set.is_set(c as usize).unwrap())
                    .collect();
                (cpu, pinned)
            },
        );
        for (&cpu, (ran, pinned)) in cpus.iter().zip(&affinities) {
            assert_eq!((*ran, pinned.as_slice()), (cpu, &[cpu][..]));
        }
    }

    #[test]
    fn parses_and_prints_lists() {
        assert_eq!(parse_list("0,2-3,8\n").unwrap(), vec![0, 2, 3, 8]);
        assert_eq!(CpuList(&[0, 1, 2, 3, 8]).to_string(), "0-3,8");
        assert_eq!(CpuList(&[1]).to_string(), "1");
        assert!(parse_list("3-1").is_err());
        assert!(parse_list("x").is_err());
    }
}
