//! Capturing a BPF program: its info in perf's layout, and its BTF once.

use std::collections::HashSet;
use std::io::{self, Write};

use shardrec_perfdata::bpf_info::bpil;
use shardrec_shard::bpf_file::{self, BpfEntry};
use shardrec_sys::bpf::captured::RecordedProgram;
use shardrec_sys::bpf::{self, CaptureScratch, HeldProg, ProgInfo};

/// Captures programs into a `bpf` file.
pub struct Capturer<W: Write> {
    out: W,
    programs: HashSet<u32>,
    btfs: HashSet<u32>,
    scratch: CaptureScratch,
    /// Programs captured.
    pub captured: u64,
    /// Programs gone before they could be captured.
    pub missed: u64,
    /// Of `captured`, those the kernel capture read as they loaded.
    pub captured_in_kernel: u64,
}

impl<W: Write> Capturer<W> {
    /// Appends to `out`.
    pub fn new(out: W) -> Self {
        Capturer {
            out,
            programs: HashSet::new(),
            btfs: HashSet::new(),
            scratch: CaptureScratch::default(),
            captured: 0,
            missed: 0,
            captured_in_kernel: 0,
        }
    }

    /// Captures program `id` (once: a program seen again is skipped), and
    /// its BTF if not yet captured. `Ok(None)` when the program is already
    /// gone (counted as missed) or was captured before.
    pub fn capture(&mut self, id: u32) -> io::Result<Option<ProgInfo>> {
        match self.hold(id)? {
            Some(held) => self.capture_held(held).map(Some),
            None => Ok(None),
        }
    }

    /// Takes a fd on program `id` so it stays until captured; `Ok(None)`
    /// when it is already gone (counted as missed) or was seen before.
    pub fn hold(&mut self, id: u32) -> io::Result<Option<HeldProg>> {
        if !self.programs.insert(id) {
            return Ok(None);
        }
        let held = bpf::hold_prog(id)?;
        self.missed += u64::from(held.is_none());
        Ok(held)
    }

    /// What it counted, to go on with in another file.
    pub fn counts(&self) -> [u64; 3] {
        [self.captured, self.missed, self.captured_in_kernel]
    }

    /// Goes on counting from `counts` ([`Capturer::counts`]).
    pub fn set_counts(&mut self, counts: [u64; 3]) {
        [self.captured, self.missed, self.captured_in_kernel] = counts;
    }

    /// Writes out what `out` buffers.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Captures a program taken by [`Capturer::hold`].
    pub fn capture_held(&mut self, held: HeldProg) -> io::Result<ProgInfo> {
        let info = held.capture_with(&mut self.scratch)?;
        self.write(&info)?;
        Ok(info)
    }

    /// Writes program `recorded`, which the kernel capture read whole as
    /// it loaded (once: a program seen before is skipped), as its records
    /// came: the merge puts them together. Its BTF, when it did not come
    /// with it (another program brought it first), is read through bpf(2)
    /// if not captured yet.
    pub fn capture_recorded(&mut self, recorded: RecordedProgram) -> io::Result<()> {
        let (id, btf_id) = (recorded.program.loaded.id, recorded.program.loaded.btf_id);
        if !self.programs.insert(id) {
            return Ok(());
        }
        let entry = BpfEntry::Recorded {
            id,
            records: recorded.records,
        };
        bpf_file::append(&mut self.out, &entry)?;
        let new_btf = btf_id != 0 && self.btfs.insert(btf_id);
        if new_btf && !recorded.program.has_btf() {
            if let Some(data) = bpf::btf_data(btf_id)? {
                bpf_file::append(&mut self.out, &BpfEntry::Btf { id: btf_id, data })?;
            }
        }
        self.captured += 1;
        self.captured_in_kernel += 1;
        Ok(())
    }

    /// Writes a captured program's entry, and its BTF's if new.
    fn write(&mut self, info: &ProgInfo) -> io::Result<()> {
        let entry = BpfEntry::Program {
            id: info.id,
            bpil: bpil(&info.info, &info.arrays_by_bit()),
            btf_id: info.btf_id,
        };
        bpf_file::append(&mut self.out, &entry)?;
        // The BTF was read while the program's fd was open (or in the
        // kernel as it loaded): a program that unloads now cannot take its
        // BTF with it.
        if let Some(data) = info.btf.as_ref().filter(|_| info.btf_id != 0) {
            if self.btfs.insert(info.btf_id) {
                let entry = BpfEntry::Btf {
                    id: info.btf_id,
                    data: data.clone(),
                };
                bpf_file::append(&mut self.out, &entry)?;
            }
        }
        self.captured += 1;
        Ok(())
    }
}
