//! The VIP's `bpf` file, turned into HEADER_BPF_PROG_INFO and HEADER_BPF_BTF.

use std::collections::BTreeMap;
use std::path::Path;

use shardrec_perfdata::bpf_info::{
    bpf_btf_feature, bpf_btf_pieces, bpf_prog_info_feature, bpf_prog_info_pieces, bpil,
};
use shardrec_perfdata::feature::Feature;
use shardrec_shard::bpf_file::{self, BpfEntry};
use shardrec_sys::bpf::captured::RecordedProgram;
use shardrec_sys::bpf::ProgInfo;

use crate::MergeError;

/// What the VIP captured, one entry per program and per BTF object.
#[derive(Default)]
pub struct Captured {
    /// Program id → its `perf_bpil` block.
    pub programs: BTreeMap<u32, Vec<u8>>,
    /// BTF id → raw BTF.
    pub btfs: BTreeMap<u32, Vec<u8>>,
    /// Bytes after the last whole entry (a recording cut short).
    pub torn_bytes: usize,
    /// Programs whose records, as the VIP wrote them, made no program.
    pub broken: usize,
}

/// Reads the `bpf` file; a recording without one captured nothing.
pub fn read(path: &Path) -> Result<Captured, MergeError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Captured::default()),
        Err(source) => {
            return Err(shardrec_shard::Error::Io {
                path: path.to_path_buf(),
                source,
            }
            .into())
        }
    };
    let (entries, torn_bytes) = bpf_file::read(&bytes);
    let mut captured = Captured {
        torn_bytes,
        ..Captured::default()
    };
    for entry in entries {
        match entry {
            BpfEntry::Program { id, bpil, .. } => {
                captured.programs.insert(id, bpil);
            }
            BpfEntry::Btf { id, data } => {
                captured.btfs.insert(id, data);
            }
            BpfEntry::Recorded { id, records } => match put_together(&records) {
                Some(info) => {
                    let bpil = bpil(&info.info, &info.arrays_by_bit());
                    captured.programs.insert(id, bpil);
                    if let Some(btf) = info.btf.filter(|_| info.btf_id != 0) {
                        captured.btfs.entry(info.btf_id).or_insert(btf);
                    }
                }
                None => captured.broken += 1,
            },
        }
    }
    Ok(captured)
}

/// A program's info put together from the capture program's records of
/// it, as the VIP wrote them when it loaded; `None` if they do not add
/// up to one (the VIP writes only whole programs).
fn put_together(records: &[u8]) -> Option<ProgInfo> {
    let loaded = RecordedProgram::assemble(records)?.into_loaded()?;
    ProgInfo::from_loaded(loaded).ok()
}

/// BTF objects by id.
type Btfs = Vec<(u32, Vec<u8>)>;

impl Captured {
    /// The two features; with nothing captured each says so (count 0), as
    /// perf record writes them.
    pub fn features(&self) -> Vec<(Feature, Vec<u8>)> {
        let (bpils, btfs) = self.lists();
        vec![bpf_prog_info_feature(&bpils), bpf_btf_feature(&btfs)]
    }

    /// The programs' info blocks and the BTF objects, in id order.
    fn lists(&self) -> (Vec<Vec<u8>>, Btfs) {
        let bpils = self.programs.values().cloned().collect();
        let btfs = self
            .btfs
            .iter()
            .map(|(id, data)| (*id, data.clone()))
            .collect();
        (bpils, btfs)
    }

    /// The two features as perf's pipe format carries them: each in
    /// pieces that fit a record ([`shardrec_perfdata::pipe::MAX_FEATURE_LEN`]),
    /// which perf's reader adds together.
    pub fn pipe_features(&self) -> Vec<(Feature, Vec<u8>)> {
        use shardrec_perfdata::pipe::MAX_FEATURE_LEN;
        let (bpils, btfs) = self.lists();
        let mut features = bpf_prog_info_pieces(&bpils, MAX_FEATURE_LEN);
        features.extend(bpf_btf_pieces(&btfs, MAX_FEATURE_LEN));
        features
    }
}
