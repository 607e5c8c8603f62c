//! The shards of one recording by what each holds: every CPU's (with its
//! CPU), the VIP's side band where there is one, and the synthesized
//! state. The one place that knows the order the merge keeps them in (the
//! CPUs' in `meta.cpus` order, then the VIP's), so nothing else depends
//! on a position in a list.

use std::convert::Infallible;
use std::path::PathBuf;

use shardrec_format::layouts::Layouts;
use shardrec_shard::merged_prefix::MergedPrefix;
use shardrec_shard::scan::ScannedShard;
use shardrec_shard::{Meta, RecordingDir};

/// Where a recording's shards are.
pub(crate) struct ShardPaths {
    /// Each recorded CPU's shard, in `meta.cpus` order.
    cpus: Vec<(u32, PathBuf)>,
    /// The VIP's side-band shard, where it exists.
    vip: Option<PathBuf>,
    /// The synthesized state.
    synth: PathBuf,
}

/// A recording's shards, opened and walked.
pub(crate) struct OpenedShards {
    /// The recorded shards: the CPUs' in `meta.cpus` order, then the
    /// VIP's. The merge orders their records by time and may free them.
    pub(crate) recorded: Vec<ScannedShard>,
    /// The synthesized state, written first and whole.
    pub(crate) synth: ScannedShard,
}

impl ShardPaths {
    /// The shards of the recording in `recording`, as `meta` lists its CPUs.
    pub(crate) fn of(recording: &RecordingDir, meta: &Meta) -> ShardPaths {
        let cpus = meta
            .cpus
            .iter()
            .map(|&cpu| (cpu, recording.shard_path(cpu)))
            .collect();
        let vip = Some(recording.vip_path()).filter(|path| path.exists());
        let synth = recording.synth_path();
        ShardPaths { cpus, vip, synth }
    }

    /// The shards a live merge follows while they are written: the VIP's
    /// too, before its first record (its follower reads it as it comes).
    pub(crate) fn followed(recording: &RecordingDir, meta: &Meta) -> ShardPaths {
        ShardPaths {
            vip: Some(recording.vip_path()),
            ..ShardPaths::of(recording, meta)
        }
    }

    /// Each recorded CPU's shard, in `meta.cpus` order.
    pub(crate) fn cpus(&self) -> impl Iterator<Item = &PathBuf> {
        self.cpus.iter().map(|(_, path)| path)
    }

    /// The VIP's side-band shard, where it exists.
    pub(crate) fn vip(&self) -> Option<&PathBuf> {
        self.vip.as_ref()
    }

    /// The recorded shards' paths, in [`OpenedShards::recorded`]'s order.
    pub(crate) fn recorded(&self) -> Vec<PathBuf> {
        let cpus = self.cpus.iter().map(|(_, path)| path.clone());
        cpus.chain(self.vip.clone()).collect()
    }

    /// Opens every shard: those in `scanned` (walked by the recorder's
    /// stop) as they are, the others walked now, a thread each.
    pub(crate) fn open(
        &self,
        layouts: &Layouts,
        threads: usize,
        mut scanned: Vec<ScannedShard>,
    ) -> OpenedShards {
        let mut take = |path: &PathBuf| {
            let at = scanned.iter().position(|s| &s.path == path)?;
            Some(scanned.swap_remove(at))
        };
        let recorded = self.recorded();
        let known: Vec<Option<ScannedShard>> = recorded.iter().map(&mut take).collect();
        let synth = take(&self.synth);
        let unknown: Vec<&PathBuf> = recorded
            .iter()
            .zip(&known)
            .filter_map(|(path, known)| known.is_none().then_some(path))
            .collect();
        let Ok(opened) = shardrec_shard::parallel::try_map(&unknown, threads, |_, path| {
            Ok::<_, Infallible>(ScannedShard::open(path, layouts))
        });
        let mut opened = opened.into_iter();
        let recorded = known
            .into_iter()
            .map(|known| match known {
                Some(scanned) => scanned,
                None => opened.next().expect("a shard opened for each unknown path"),
            })
            .collect();
        let synth = synth.unwrap_or_else(|| ScannedShard::open(&self.synth, layouts));
        OpenedShards { recorded, synth }
    }

    /// Opens every shard from where an interrupted merge left it (the
    /// synthesized state is in its output whole, but for a stream's).
    pub(crate) fn open_resumed(
        &self,
        layouts: &Layouts,
        threads: usize,
        prefix: &MergedPrefix,
    ) -> OpenedShards {
        let Ok(recorded) =
            shardrec_shard::parallel::try_map(&self.recorded(), threads, |_, path| {
                let resume = prefix.resume(&shardrec_shard::scan::file_name(path));
                Ok::<_, Infallible>(ScannedShard::open_from(path, layouts, resume))
            });
        let synth = match prefix.streamed {
            true => ScannedShard::open(&self.synth, layouts),
            false => ScannedShard::empty(&self.synth),
        };
        OpenedShards { recorded, synth }
    }
}
