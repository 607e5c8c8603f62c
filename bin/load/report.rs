//! `--report FILE`: the workload's own account of itself, for the
//! benchmarks: when it started (CLOCK_REALTIME, comparable with the launch
//! time a harness reads), how long it ran, and the CPU it and its waited-for
//! children used, so a recorder's CPU is the recorder's tree minus this.
//! A workload of fixed time adds the work it got done; one of known
//! waits, how long each took.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use nix::sys::resource::{getrusage, Usage, UsageWho};

/// Taken as the first thing in `main`; a workload whose setup must not
/// count moves it to where its measured part starts (`restart`) and ends
/// (`stop`).
pub struct Start {
    unix_ns: u128,
    instant: Instant,
    end: Option<Instant>,
    /// What the workload adds, as `key=value` words after the rest.
    added: Vec<(&'static str, u64)>,
}

impl Start {
    pub fn now() -> Start {
        Start {
            unix_ns: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
            instant: Instant::now(),
            end: None,
            added: Vec::new(),
        }
    }

    /// The measured part starts now.
    pub fn restart(&mut self) {
        *self = Start::now();
    }

    /// The measured part ended now; what follows (joining threads, say) is
    /// left out of the elapsed time.
    pub fn stop(&mut self) {
        self.end = Some(Instant::now());
    }

    /// The work done in the measured part, for a workload that runs for a
    /// fixed time: a recorder that takes CPU from it leaves less done.
    pub fn set_work(&mut self, units: u64) {
        self.add("work", units);
    }

    /// A `key=value` word the workload adds to the line.
    pub fn add(&mut self, key: &'static str, value: u64) {
        self.added.push((key, value));
    }

    /// Writes one line of `key=value` words to `path`:
    /// `pid start_unix_ns elapsed_ns user_us sys_us maxrss_kb
    /// oncpu_ns runqueue_ns`, then what the workload added (`work`, say).
    pub fn write(&self, path: &str) -> Result<(), String> {
        let end = self.end.unwrap_or_else(Instant::now);
        let elapsed = end.duration_since(self.instant).as_nanos();
        let me = getrusage(UsageWho::RUSAGE_SELF).map_err(|e| e.to_string())?;
        let children = getrusage(UsageWho::RUSAGE_CHILDREN).map_err(|e| e.to_string())?;
        let micros = |u: &Usage, user: bool| {
            let t = if user { u.user_time() } else { u.system_time() };
            t.tv_sec() as i128 * 1_000_000 + t.tv_usec() as i128
        };
        let added: String = (self.added.iter())
            .map(|(key, value)| format!(" {key}={value}"))
            .collect();
        let line = format!(
            "pid={} start_unix_ns={} elapsed_ns={} user_us={} sys_us={} maxrss_kb={} oncpu_ns={} runqueue_ns={}{added}\n",
            std::process::id(),
            self.unix_ns,
            elapsed,
            micros(&me, true) + micros(&children, true),
            micros(&me, false) + micros(&children, false),
            me.max_rss().max(children.max_rss()),
            main_thread_schedstat(0),
            main_thread_schedstat(1),
        );
        std::fs::write(path, line).map_err(|e| format!("writing {path}: {e}"))
    }
}

/// The main thread's `/proc/self/schedstat` field `n` (0 where the kernel
/// keeps no schedstat): 0 is how long it ran, by the scheduler's own
/// clock, so exactly even where a VM delivers the sampling timer late; 1
/// is how long it waited on a run queue, runnable but not running (on a
/// busy host, time that is neither on-CPU nor a wait of its own).
fn main_thread_schedstat(n: usize) -> u64 {
    std::fs::read_to_string("/proc/self/schedstat")
        .ok()
        .and_then(|stat| stat.split_whitespace().nth(n)?.parse().ok())
        .unwrap_or(0)
}
