//! perf's options for what is described of the tasks that exist before
//! recording (`--synth`, `--tail-synthesize`, `--proc-map-timeout`).

use std::time::Duration;

/// perf's `--synth` words, comma-separated: `no`, `all`, `task`, `mmap`
/// (tasks with their maps), `cgroup`; returns (tasks, maps). shardrec
/// synthesizes no cgroup records, so `cgroup` adds nothing.
pub fn parse_synth(text: &str) -> Result<(bool, bool), String> {
    let (mut tasks, mut maps) = (false, false);
    for word in text.split(',') {
        match word {
            "no" => {}
            "all" | "mmap" => (tasks, maps) = (true, true),
            "task" => tasks = true,
            "cgroup" => {}
            _ => {
                return Err(format!(
                    "--synth {text}: '{word}' is not one of no, all, task, mmap, cgroup"
                ))
            }
        }
    }
    Ok((tasks, maps))
}

/// `--proc-map-timeout`: milliseconds.
pub fn parse_map_timeout(text: &str) -> Result<Duration, String> {
    text.parse::<u64>()
        .map(Duration::from_millis)
        .map_err(|_| format!("--proc-map-timeout {text}: not a number of milliseconds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synth_words_as_perf_reads_them() {
        assert_eq!(parse_synth("no"), Ok((false, false)));
        assert_eq!(parse_synth("all"), Ok((true, true)));
        assert_eq!(parse_synth("task"), Ok((true, false)));
        assert_eq!(parse_synth("mmap"), Ok((true, true)));
        assert_eq!(parse_synth("cgroup"), Ok((false, false)));
        assert_eq!(parse_synth("task,cgroup"), Ok((true, false)));
        assert!(parse_synth("tasks").unwrap_err().contains("'tasks'"));
        assert_eq!(parse_map_timeout("0"), Ok(Duration::ZERO));
        assert!(parse_map_timeout("5s").is_err());
    }
}
