//! Every BPF program captured in the kernel as it loads:
//! `src/bpf/capture.bpf.c` runs in the loader's own bpf(2) call
//! (`fentry` on `bpf_prog_kallsyms_add`, which the kernel calls with the
//! new program once it has its id, before its descriptor exists) and writes the program's id,
//! tag, name and BTF id and each function's JITed image to a ring buffer.
//! A program that lives a microsecond is captured like one that stays.

use std::collections::BTreeMap;
use std::io;
use std::mem::MaybeUninit;
use std::time::Duration;

use crate::context;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{OpenObject, RingBufferBuilder};

use crate::skel::capture::{CaptureSkel, CaptureSkelBuilder};

/// Bytes of image in one chunk (`CHUNK` in the program).
const CHUNK: usize = 4096;
const HEADER: u32 = 1;
const IMAGE: u32 = 2;

/// One function of a captured program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapturedFunction {
    /// Its JITed length.
    pub jited_len: u32,
    /// Its JITed image, as much as arrived (all of it when whole).
    pub image: Vec<u8>,
}

/// A program as it was when it loaded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapturedProgram {
    /// The kernel's id.
    pub id: u32,
    /// Its tag.
    pub tag: [u8; 8],
    /// Its name (at most 15 bytes).
    pub name: String,
    /// The id of its BTF, 0 without.
    pub btf_id: u32,
    /// Its functions, the main one first.
    pub functions: Vec<CapturedFunction>,
}

impl CapturedProgram {
    /// Whether every function's whole image arrived.
    pub fn is_whole(&self) -> bool {
        !self.functions.is_empty()
            && self
                .functions
                .iter()
                .all(|f| f.image.len() == f.jited_len as usize)
    }

    /// The JITed image of every function back to back, as the kernel
    /// gives it in `jited_prog_insns`.
    pub fn image(&self) -> Vec<u8> {
        self.functions
            .iter()
            .flat_map(|f| f.image.clone())
            .collect()
    }
}

/// The programs captured so far, by id, put together from the ring's
/// records.
#[derive(Debug, Default)]
pub struct Captured {
    /// Each program, by id.
    pub programs: BTreeMap<u32, CapturedProgram>,
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

impl Captured {
    /// Takes one record of the ring (`struct header` or `struct image`).
    fn take(&mut self, record: &[u8]) -> Option<()> {
        let (kind, id) = (u32_at(record, 0)?, u32_at(record, 4)?);
        let program = self.programs.entry(id).or_default();
        program.id = id;
        match kind {
            HEADER => {
                let func = u32_at(record, 40)? as usize;
                if func == 0 {
                    program.tag = record.get(8..16)?.try_into().ok()?;
                    let name = record.get(16..32)?;
                    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
                    program.name = String::from_utf8_lossy(&name[..end]).into_owned();
                    program.btf_id = u32_at(record, 32)?;
                }
                if program.functions.len() <= func {
                    program
                        .functions
                        .resize(func + 1, CapturedFunction::default());
                }
                program.functions[func].jited_len = u32_at(record, 36)?;
            }
            IMAGE => {
                let func = u32_at(record, 8)? as usize;
                let (offset, len) = (u32_at(record, 12)? as usize, u32_at(record, 16)? as usize);
                let bytes = record.get(24..24 + len.min(CHUNK))?;
                let function = program.functions.get_mut(func)?;
                // Chunks come in order; one that was not read leaves a gap.
                if function.image.len() == offset {
                    function.image.extend_from_slice(bytes);
                }
            }
            _ => {}
        }
        Some(())
    }
}

/// The capture program, loaded (and attached once [`Capture::attach`]
/// is called).
pub struct Capture<'obj> {
    skel: CaptureSkel<'obj>,
}

impl<'obj> Capture<'obj> {
    /// Opens and loads it, in `storage` (where libbpf's object lives for
    /// as long as the program).
    pub fn load(storage: &'obj mut MaybeUninit<OpenObject>) -> io::Result<Capture<'obj>> {
        let open = CaptureSkelBuilder::default()
            .open(storage)
            .map_err(context("opening the capture program"))?;
        let skel = open
            .load()
            .map_err(context("loading the capture program"))?;
        Ok(Capture { skel })
    }

    /// Attaches it: every program loaded from now on is captured.
    pub fn attach(&mut self) -> io::Result<()> {
        self.skel
            .attach()
            .map_err(context("attaching the capture program"))
    }

    /// Takes what the ring holds into `captured`, waiting up to `timeout`
    /// for something to come.
    pub fn drain(&self, captured: &mut Captured, timeout: Duration) -> io::Result<()> {
        let mut builder = RingBufferBuilder::new();
        builder
            .add(&self.skel.maps.captured, |record: &[u8]| {
                let _ = captured.take(record);
                0
            })
            .map_err(context("reading the capture ring"))?;
        let ring = builder
            .build()
            .map_err(context("reading the capture ring"))?;
        ring.poll(timeout)
            .map_err(context("reading the capture ring"))?;
        ring.consume().map_err(context("reading the capture ring"))
    }

    /// Records the ring had no room for.
    pub fn lost(&self) -> u64 {
        self.skel.maps.bss_data.as_ref().map_or(0, |bss| bss.lost)
    }
}
