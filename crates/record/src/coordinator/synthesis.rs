//! `synth.shard`: the state that exists before the rings can tell of it
//! (the kernel's maps, the tasks, the BPF programs already loaded), made
//! as perf synthesizes it.

use std::io::{BufWriter, Write};

use shardrec_synth::{Synthesizer, Tasks};

use super::Recording;
use crate::plan::Scope;
use crate::{say, RecordError};

/// When `synth.shard` is written: at the start, at a switch of output
/// (the new window's, with the state of the recording so far), or at a
/// window's end (`--overwrite`: appended, with the state of that moment).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Moment {
    Start,
    Switch,
    End,
}

impl Recording<'_> {
    /// Writes `synth.shard`: the kernel's maps, the existing tasks, and the
    /// records the VIP made for the BPF programs already loaded. The kernel's
    /// maps (a read of most of kallsyms, for the end of its text) are made
    /// while the tasks are walked, and written after them; once made, they
    /// are kept for the next: as perf's, they are read at the start only.
    /// (Read again at each switch, they took 150 ms of the coordinator's
    /// CPU each, and `--keep-last`'s windows of 125 ms came every 300 to
    /// 500 ms.)
    pub(super) fn synthesize(
        &mut self,
        existing_bpf: &[u8],
        moment: Moment,
    ) -> Result<(), RecordError> {
        let kept_kernel_maps = self.kernel_maps.take();
        let output = &mut self.output;
        let first = &self.pool.writers()[0].events.events[0];
        let sample_type = output.meta.events[first.spec].sample_type();
        let dwarf = matches!(self.plan.call_graph, crate::config::CallGraph::Dwarf(_));
        let wanted = &self.plan.synthesis;
        // With --tail-synthesize, nothing at the start: the kernel and the
        // tasks at the end, and (--switch-output) at each window's start
        // too, so the last window still names a workload gone by its end.
        let describe = moment != Moment::Start || !wanted.at_end;
        // As the kernel's MMAP2 records: with build ids where they carry them.
        let mut synth = Synthesizer::new(sample_type, first.id)
            .with_data_maps(dwarf)
            .with_build_ids(self.plan.build_id_mmap)
            .with_maps(wanted.maps)
            .with_map_timeout(wanted.map_timeout);
        let workload = self.workload.as_ref().map(|w| w.pid.as_raw());
        if let (Some(pid), Moment::Start, true) = (workload, moment, describe && wanted.tasks) {
            synth = synth.with_held_workload(pid);
        }
        let path = output.dir.synth_path();
        let file = match moment {
            Moment::End => output.dir.reopen_file(&path).and_then(|mut file| {
                std::io::Seek::seek(&mut file, std::io::SeekFrom::End(0))
                    .map_err(shardrec_shard::Error::io(&path))?;
                Ok(file)
            })?,
            _ => output.dir.create_file(&path)?,
        };
        let mut out = BufWriter::new(file);
        let tasks = match (&self.plan.scope, workload, moment) {
            _ if !describe || !wanted.tasks => Tasks::Processes(Vec::new()),
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
        let (described, kernel_maps) = std::thread::scope(|scope| {
            let kernel = scope.spawn(|| match kept_kernel_maps {
                None if describe => {
                    let mut records = Vec::new();
                    synth.kernel(&mut records)?;
                    Ok::<_, std::io::Error>(Some(records))
                }
                kept => Ok(kept),
            });
            let described = synth.tasks(&tasks, &mut out)?;
            let kernel = kernel.join().expect("kernel synthesis does not panic")?;
            if describe {
                out.write_all(kernel.as_deref().unwrap_or_default())?;
            }
            out.write_all(existing_bpf)?;
            Ok::<_, std::io::Error>((described, kernel))
        })
        .map_err(output_error)?;
        self.kernel_maps = kernel_maps;
        if described.map_timeouts > 0 {
            say::warning(&format!(
                "the maps of {} processes took longer than --proc-map-timeout to read: \
                 the rest of their maps were left out (perf report counts them too)",
                described.map_timeouts
            ));
        }
        let file = out.into_inner().map_err(|e| output_error(e.into_error()))?;
        output.synth_bytes = file.metadata().map_or(0, |m| m.len());
        match output.sync_shards {
            true => file.sync_data().map_err(output_error),
            false => Ok(()),
        }
    }
}
