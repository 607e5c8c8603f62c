//! What is synthesized of the tasks before recording, as perf's options
//! say it.

use clap::Args;
use shardrec_record::Synthesis;

use super::values as options;

#[derive(Args)]
#[command(next_help_heading = "Synthesis")]
pub struct SynthesisArgs {
    /// Fine-tune event synthesis: default=all (no, all, task, mmap, cgroup; comma-separated)
    #[arg(long = "synth", value_name = "no|all|task|mmap|cgroup")]
    synth: Option<String>,
    /// synthesize non-sample events at the end of output (the output is then merged after the stop)
    #[arg(long = "tail-synthesize")]
    tail_synthesize: bool,
    /// per thread proc mmap processing timeout in ms (default: no limit; perf's is 500)
    #[arg(long = "proc-map-timeout", value_name = "n")]
    proc_map_timeout: Option<String>,
}

impl SynthesisArgs {
    /// The synthesis asked for, or a message naming the bad value.
    pub fn synthesis(&self) -> Result<Synthesis, String> {
        let (tasks, maps) = match &self.synth {
            Some(words) => options::parse_synth(words)?,
            None => (true, true),
        };
        let map_timeout = self.proc_map_timeout.as_deref();
        Ok(Synthesis {
            tasks,
            maps,
            at_end: self.tail_synthesize,
            map_timeout: map_timeout.map(options::parse_map_timeout).transpose()?,
        })
    }
}
