//! What shardrec's in-kernel capture program (`crates/bpf/src/bpf/
//! capture.bpf.c`) writes of each program as it loads: one ring record
//! per function's header, one for the program's facts, and the JITed
//! images and arrays in chunks. One place reads those records, for two
//! readers:
//!
//! - the VIP, which only measures them ([`Counted`]: whether a program
//!   arrived whole, whether its BTF came with it) and keeps the records
//!   as they came ([`RecordedProgram`]), to write them as they are;
//! - the merge, which puts them together ([`RecordedProgram::assemble`])
//!   into the program's info, long after the program is gone. So the VIP
//!   does no conversion while the workload runs (it was a quarter of the
//!   VIP's samples in a 16-vCPU guest loading 50 programs).

use std::collections::BTreeMap;

use super::{LoadedFunction, LoadedProg};
use crate::bytes::{u32_at, u64_at};

/// Bytes in one chunk (`CHUNK` in the program).
pub const CHUNK: usize = 4096;
const HEADER: u32 = 1;
const IMAGE: u32 = 2;
const PROGRAM: u32 = 3;
const ARRAY: u32 = 4;

/// Where a captured program's images and arrays go: kept, or counted.
pub trait Part: Default + Clone {
    /// Bytes so far.
    fn len(&self) -> usize;
    /// Whether none arrived.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// `bytes` arrived next.
    fn append(&mut self, bytes: &[u8]);
}

impl Part for Vec<u8> {
    fn len(&self) -> usize {
        Vec::len(self)
    }

    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }

    fn append(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Bytes only counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counted(usize);

impl Part for Counted {
    fn len(&self) -> usize {
        self.0
    }

    fn append(&mut self, bytes: &[u8]) {
        self.0 += bytes.len();
    }
}

/// A program as it was when it loaded, put together from the ring's
/// records: the info's fields in `loaded` (its functions without their
/// images), each function's image and the arrays as much as arrived.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapturedProgram<P: Part = Vec<u8>> {
    /// The program's facts, as much of them as arrived.
    pub loaded: LoadedProg,
    /// Each function's JITed image.
    pub images: Vec<P>,
    /// Each function's JITed length, as its header said.
    pub jited_lens: Vec<u32>,
    /// The bytes each array should have (func info, line info, JITed line
    /// info, BTF), once the PROGRAM record said.
    expected: Option<[usize; 4]>,
    /// The arrays' bytes so far, in that order.
    arrays: [P; 4],
}

impl<P: Part> CapturedProgram<P> {
    /// Whether every part arrived whole: its facts, each function's
    /// image and each array.
    pub fn is_whole(&self) -> bool {
        let images = self.images.iter().map(Part::len);
        let lens = self.jited_lens.iter().map(|&len| len as usize);
        self.expected
            .is_some_and(|sizes| self.arrays.iter().map(Part::len).eq(sizes))
            && !self.images.is_empty()
            && images.eq(lens)
    }

    /// Whether its BTF object came with it (a BTF object comes with the
    /// first program that has it).
    pub fn has_btf(&self) -> bool {
        !self.arrays[3].is_empty()
    }

    /// Takes one record of the ring (`struct header`, `struct program`
    /// or `struct chunk`) of this program.
    fn take(&mut self, kind: u32, record: &[u8]) -> Option<()> {
        match kind {
            HEADER => self.take_header(record),
            PROGRAM => self.take_program(record),
            IMAGE | ARRAY => {
                let what = u32_at(record, 8)? as usize;
                let (offset, len) = (u32_at(record, 12)? as usize, u32_at(record, 16)? as usize);
                let bytes = record.get(24..24 + len.min(CHUNK))?;
                let into = match kind {
                    IMAGE => self.images.get_mut(what)?,
                    _ => self.arrays.get_mut(what)?,
                };
                // Chunks come in order; one that was not read leaves a gap.
                if into.len() == offset {
                    into.append(bytes);
                }
                Some(())
            }
            _ => Some(()),
        }
    }

    /// A function's `struct header`: the program's name, tag and BTF id
    /// with the first, and the function's own address, tag and length.
    fn take_header(&mut self, record: &[u8]) -> Option<()> {
        let func = u32_at(record, 40)? as usize;
        let loaded = &mut self.loaded;
        if func == 0 {
            loaded.tag = record.get(8..16)?.try_into().ok()?;
            let name = record.get(16..32)?;
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            loaded.name = String::from_utf8_lossy(&name[..end]).into_owned();
            loaded.btf_id = u32_at(record, 32)?;
        }
        if loaded.functions.len() <= func {
            loaded.functions.resize(func + 1, LoadedFunction::default());
            self.images.resize(func + 1, P::default());
            self.jited_lens.resize(func + 1, 0);
        }
        self.jited_lens[func] = u32_at(record, 36)?;
        let function = &mut loaded.functions[func];
        function.address = u64_at(record, 48)?;
        function.tag = record.get(56..64)?.try_into().ok()?;
        Some(())
    }

    /// The `struct program` record: the info's fields that are the
    /// program's, and the size of each array that follows.
    fn take_program(&mut self, record: &[u8]) -> Option<()> {
        let at = |offset| u32_at(record, offset);
        let loaded = &mut self.loaded;
        loaded.prog_type = at(8)?;
        loaded.gpl_compatible = at(12)? != 0;
        loaded.load_time = u64_at(record, 16)?;
        loaded.created_by_uid = at(24)?;
        loaded.nr_map_ids = at(28)?;
        loaded.verified_insns = at(32)?;
        loaded.xlated_len = at(36)?;
        loaded.attach_btf_obj_id = at(40)?;
        loaded.attach_btf_id = at(44)?;
        let count = |offset, size: usize| Some(at(offset)? as usize * size);
        self.expected = Some([count(48, 8)?, count(52, 16)?, count(56, 8)?, count(60, 1)?]);
        Some(())
    }
}

impl CapturedProgram {
    /// The JITed image of every function back to back, as the kernel
    /// gives it in `jited_prog_insns`.
    pub fn image(&self) -> Vec<u8> {
        self.images.concat()
    }

    /// The program as [`super::ProgInfo::from_loaded`] takes it (moved,
    /// not copied: its images and arrays are most of it); `None` unless
    /// it arrived whole. Its BTF is there if it came with it.
    pub fn into_loaded(self) -> Option<LoadedProg> {
        if !self.is_whole() {
            return None;
        }
        let [func_info, line_info, jited_line_info, btf] = self.arrays;
        let mut loaded = self.loaded;
        for (function, image) in loaded.functions.iter_mut().zip(self.images) {
            function.image = image;
        }
        Some(LoadedProg {
            func_info,
            line_info,
            jited_line_info,
            btf: (!btf.is_empty()).then_some(btf),
            ..loaded
        })
    }
}

/// One program's records as the ring gave them, each framed by its
/// length (a u32), and what they add up to so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordedProgram {
    /// What the records say, their bytes only counted.
    pub program: CapturedProgram<Counted>,
    /// The records, framed.
    pub records: Vec<u8>,
}

impl RecordedProgram {
    /// The program put together from `records` (framed as a
    /// [`RecordedProgram`] keeps them): `None` if they are cut short or
    /// name no program.
    pub fn assemble(records: &[u8]) -> Option<CapturedProgram> {
        let mut program = CapturedProgram::default();
        let mut rest = records;
        while !rest.is_empty() {
            let len = u32_at(rest, 0)? as usize;
            let record = rest.get(4..4 + len)?;
            let (kind, id) = (u32_at(record, 0)?, u32_at(record, 4)?);
            program.loaded.id = id;
            program.take(kind, record)?;
            rest = &rest[4 + len..];
        }
        (program.loaded.id != 0).then_some(program)
    }
}

/// The programs captured so far, by id, as the ring gave them.
#[derive(Debug, Default)]
pub struct Captured {
    /// Each program, by id.
    pub programs: BTreeMap<u32, RecordedProgram>,
}

impl Captured {
    /// Takes one record of the ring: kept only up to what it carries (a
    /// chunk is a whole `struct chunk` in the ring, 4 KiB, however few
    /// bytes it holds: kept whole, the records of a program of a few
    /// hundred bytes were tens of KiB).
    pub fn take(&mut self, record: &[u8]) -> Option<()> {
        let (kind, id) = (u32_at(record, 0)?, u32_at(record, 4)?);
        let used = match kind {
            IMAGE | ARRAY => record
                .len()
                .min(24 + (u32_at(record, 16)? as usize).min(CHUNK)),
            _ => record.len(),
        };
        let record = &record[..used];
        let len = u32::try_from(record.len()).ok()?;
        let recorded = self.programs.entry(id).or_default();
        recorded.program.loaded.id = id;
        recorded.records.extend_from_slice(&len.to_ne_bytes());
        recorded.records.extend_from_slice(record);
        recorded.program.take(kind, record)
    }

    /// Takes program `id` out (to be written, or gone).
    pub fn remove(&mut self, id: u32) -> Option<RecordedProgram> {
        self.programs.remove(&id)
    }

    /// Forgets the oldest programs beyond the `most` newest (their loads
    /// were read before the side band's, or lost).
    pub fn keep_at_most(&mut self, most: usize) {
        while self.programs.len() > most {
            self.programs.pop_first();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring record of `kind` for program `id`, with `fields` after.
    fn record(kind: u32, id: u32, fields: &[(usize, &[u8])], len: usize) -> Vec<u8> {
        let mut bytes = vec![0; len];
        bytes[0..4].copy_from_slice(&kind.to_ne_bytes());
        bytes[4..8].copy_from_slice(&id.to_ne_bytes());
        for (at, field) in fields {
            bytes[*at..*at + field.len()].copy_from_slice(field);
        }
        bytes
    }

    /// A one-function program of id 7: its header, facts, a 5-byte image
    /// and 3 bytes of BTF.
    fn records() -> Vec<Vec<u8>> {
        let header = record(
            HEADER,
            7,
            &[
                (16, b"prog\0"),
                (32, &9u32.to_ne_bytes()),
                (36, &5u32.to_ne_bytes()),
                (48, &0xffff_1000u64.to_ne_bytes()),
            ],
            64,
        );
        let program = record(PROGRAM, 7, &[(60, &3u32.to_ne_bytes())], 64);
        let chunk = |kind, what: u32, bytes: &[u8]| {
            let len = (bytes.len() as u32).to_ne_bytes();
            let fields = [(8, &what.to_ne_bytes()[..]), (16, &len[..]), (24, bytes)];
            // A whole `struct chunk`, as the ring holds it.
            record(kind, 7, &fields, 24 + CHUNK)
        };
        vec![
            header,
            program,
            chunk(IMAGE, 0, b"\xcc\xcc\xcc\xcc\xc3"),
            chunk(ARRAY, 3, b"btf"),
        ]
    }

    #[test]
    fn records_kept_as_they_came_make_the_program_they_measured() {
        let mut captured = Captured::default();
        let all = records();
        for record in &all[..3] {
            captured.take(record).unwrap();
        }
        assert!(!captured.programs[&7].program.is_whole(), "its BTF is due");
        captured.take(&all[3]).unwrap();
        let recorded = captured.remove(7).unwrap();
        assert!(recorded.program.is_whole() && recorded.program.has_btf());
        // Each chunk kept only up to its bytes.
        assert_eq!(
            recorded.records.len(),
            4 * 4 + 64 + 64 + (24 + 5) + (24 + 3)
        );
        let program = RecordedProgram::assemble(&recorded.records).unwrap();
        assert_eq!(program.image(), b"\xcc\xcc\xcc\xcc\xc3");
        let loaded = program.into_loaded().unwrap();
        assert_eq!(
            (loaded.id, loaded.name.as_str(), loaded.btf_id),
            (7, "prog", 9)
        );
        assert_eq!(loaded.functions[0].address, 0xffff_1000);
        assert_eq!(loaded.btf.as_deref(), Some(&b"btf"[..]));
    }

    #[test]
    fn records_cut_short_make_no_program() {
        let mut captured = Captured::default();
        records().iter().for_each(|r| captured.take(r).unwrap());
        let records = captured.remove(7).unwrap().records;
        assert!(RecordedProgram::assemble(&records[..records.len() - 1]).is_none());
    }
}
