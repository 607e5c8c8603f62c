//! Every BPF program captured in the kernel as it loads:
//! `src/bpf/capture.bpf.c` runs in the loader's own bpf(2) call (on
//! `bpf_prog_kallsyms_add`, which the kernel calls with the new program
//! once it has its id, before its descriptor exists) and writes what
//! `BPF_OBJ_GET_INFO_BY_FD` would give of the program, its BTF included,
//! to a ring buffer. A program that lives a microsecond is captured like
//! one that stays; [`CapturedProgram::loaded`] is its info as the syscall
//! path's.

use std::cell::{Ref, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::mem::MaybeUninit;
use std::rc::Rc;
use std::time::Duration;

use crate::context;
use crate::OpenObject;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{RingBuffer, RingBufferBuilder};
use shardrec_sys::bpf::{LoadedFunction, LoadedProg};

use crate::skel::capture::{CaptureSkel, CaptureSkelBuilder};

/// Bytes in one chunk (`CHUNK` in the program).
const CHUNK: usize = 4096;
const HEADER: u32 = 1;
const IMAGE: u32 = 2;
const PROGRAM: u32 = 3;
const ARRAY: u32 = 4;

/// How the program hooks the kernel's program loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// `fentry` (a BPF trampoline: cheapest).
    Fentry,
    /// A kprobe, where the kernel refuses fentry programs.
    Kprobe,
}

/// A program as it was when it loaded, put together from the ring's
/// records: the info's fields in `loaded`, each function's image and the
/// arrays as much as arrived.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CapturedProgram {
    /// The program, as much of it as arrived.
    pub loaded: LoadedProg,
    /// Each function's JITed length, as its header said.
    pub jited_lens: Vec<u32>,
    /// The bytes each array should have (func info, line info, JITed line
    /// info, BTF), once the PROGRAM record said.
    expected: Option<[usize; 4]>,
    /// The arrays' bytes so far, in that order.
    arrays: [Vec<u8>; 4],
}

impl CapturedProgram {
    /// Whether every part arrived whole: its facts, each function's
    /// image and each array.
    pub fn is_whole(&self) -> bool {
        let functions = &self.loaded.functions;
        let images = functions.iter().map(|f| f.image.len());
        let lens = self.jited_lens.iter().map(|&len| len as usize);
        self.expected
            .is_some_and(|sizes| self.arrays.iter().map(Vec::len).eq(sizes))
            && !functions.is_empty()
            && images.eq(lens)
    }

    /// The JITed image of every function back to back, as the kernel
    /// gives it in `jited_prog_insns`.
    pub fn image(&self) -> Vec<u8> {
        let functions = self.loaded.functions.iter();
        functions.flat_map(|f| f.image.clone()).collect()
    }

    /// The program as [`shardrec_sys::bpf::ProgInfo::from_loaded`] takes
    /// it (moved, not copied: its images and arrays are most of it);
    /// `None` unless it arrived whole. Its BTF is there if it came with it
    /// (a BTF object comes with the first program that has it).
    pub fn into_loaded(self) -> Option<LoadedProg> {
        if !self.is_whole() {
            return None;
        }
        let [func_info, line_info, jited_line_info, btf] = self.arrays;
        Some(LoadedProg {
            func_info,
            line_info,
            jited_line_info,
            btf: (!btf.is_empty()).then_some(btf),
            ..self.loaded
        })
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
    crate::word(bytes, at).map(u32::from_ne_bytes)
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    crate::word(bytes, at).map(u64::from_ne_bytes)
}

impl Captured {
    /// Takes one record of the ring (`struct header`, `struct program`
    /// or `struct chunk`).
    fn take(&mut self, record: &[u8]) -> Option<()> {
        let (kind, id) = (u32_at(record, 0)?, u32_at(record, 4)?);
        let program = self.programs.entry(id).or_default();
        program.loaded.id = id;
        match kind {
            HEADER => take_header(program, record),
            PROGRAM => take_program(program, record),
            IMAGE | ARRAY => {
                let what = u32_at(record, 8)? as usize;
                let (offset, len) = (u32_at(record, 12)? as usize, u32_at(record, 16)? as usize);
                let bytes = record.get(24..24 + len.min(CHUNK))?;
                let into = match kind {
                    IMAGE => &mut program.loaded.functions.get_mut(what)?.image,
                    _ => program.arrays.get_mut(what)?,
                };
                // Chunks come in order; one that was not read leaves a gap.
                if into.len() == offset {
                    into.extend_from_slice(bytes);
                }
                Some(())
            }
            _ => Some(()),
        }
    }

    /// Forgets program `id` (taken, or gone).
    pub fn remove(&mut self, id: u32) -> Option<CapturedProgram> {
        self.programs.remove(&id)
    }
}

/// A function's `struct header`: the program's name, tag and BTF id with
/// the first, and the function's own address, tag and length.
fn take_header(program: &mut CapturedProgram, record: &[u8]) -> Option<()> {
    let func = u32_at(record, 40)? as usize;
    let loaded = &mut program.loaded;
    if func == 0 {
        loaded.tag = record.get(8..16)?.try_into().ok()?;
        let name = record.get(16..32)?;
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        loaded.name = String::from_utf8_lossy(&name[..end]).into_owned();
        loaded.btf_id = u32_at(record, 32)?;
    }
    if loaded.functions.len() <= func {
        loaded.functions.resize(func + 1, LoadedFunction::default());
        program.jited_lens.resize(func + 1, 0);
    }
    program.jited_lens[func] = u32_at(record, 36)?;
    let function = &mut loaded.functions[func];
    function.address = u64_at(record, 48)?;
    function.tag = record.get(56..64)?.try_into().ok()?;
    Some(())
}

/// The `struct program` record: the info's fields that are the
/// program's, and the size of each array that follows.
fn take_program(program: &mut CapturedProgram, record: &[u8]) -> Option<()> {
    let at = |offset| u32_at(record, offset);
    let loaded = &mut program.loaded;
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
    program.expected = Some([count(48, 8)?, count(52, 16)?, count(56, 8)?, count(60, 1)?]);
    Some(())
}

/// Whether libbpf can attach a kprobe here: through the kprobe PMU, or
/// tracefs's `kprobe_events` (older kernels).
fn kernel_has_kprobes() -> bool {
    [
        "/sys/bus/event_source/devices/kprobe",
        "/sys/kernel/tracing/kprobe_events",
        "/sys/kernel/debug/tracing/kprobe_events",
    ]
    .iter()
    .any(|path| std::path::Path::new(path).exists())
}

/// The capture program, loaded (and attached once [`Capture::attach`]
/// is called), with a reader of its ring kept for its life (mapping the
/// 8 MiB ring for each read cost the VIP a mapping per batch of loads).
pub struct Capture<'obj> {
    /// Dropped before the program whose ring it maps.
    reader: RingBuffer<'static>,
    captured: Rc<RefCell<Captured>>,
    skel: CaptureSkel<'obj>,
    hook: Hook,
}

/// Why the capture program is not running: what the kernel said to each
/// hook.
#[derive(Debug)]
pub struct NotAttached {
    /// Loading or attaching with fentry.
    pub fentry: io::Error,
    /// Loading or attaching with a kprobe.
    pub kprobe: io::Error,
}

impl std::fmt::Display for NotAttached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "fentry: {}; kprobe: {}", self.fentry, self.kprobe)
    }
}

impl<'obj> Capture<'obj> {
    /// Opens and loads it with `hook`, in `storage` (where libbpf's object
    /// lives for as long as the program).
    pub fn load(
        storage: &'obj mut MaybeUninit<OpenObject>,
        hook: Hook,
    ) -> io::Result<Capture<'obj>> {
        crate::quiet_libbpf();
        let mut open = CaptureSkelBuilder::default()
            .open(storage)
            .map_err(context("opening the capture program"))?;
        open.progs.capture_fentry.set_autoload(hook == Hook::Fentry);
        open.progs.capture_kprobe.set_autoload(hook == Hook::Kprobe);
        let skel = open
            .load()
            .map_err(context("loading the capture program"))?;
        let captured = Rc::new(RefCell::new(Captured::default()));
        let into = Rc::clone(&captured);
        let mut builder = RingBufferBuilder::new();
        builder
            .add(&skel.maps.captured, move |record: &[u8]| {
                let _ = into.borrow_mut().take(record);
                0
            })
            .map_err(context("reading the capture ring"))?;
        let reader = builder
            .build()
            .map_err(context("reading the capture ring"))?;
        Ok(Capture {
            reader,
            captured,
            skel,
            hook,
        })
    }

    /// Loads and attaches it with fentry where the kernel takes that,
    /// else with a kprobe (each try in its own `storage`); what each
    /// refusal was when neither works.
    pub fn start(
        fentry: &'obj mut MaybeUninit<OpenObject>,
        kprobe: &'obj mut MaybeUninit<OpenObject>,
    ) -> Result<Capture<'obj>, NotAttached> {
        let try_hook = |storage, hook| {
            let mut capture = Capture::load(storage, hook)?;
            capture.attach()?;
            Ok::<_, io::Error>(capture)
        };
        let fentry = match try_hook(fentry, Hook::Fentry) {
            Ok(capture) => return Ok(capture),
            Err(error) => error,
        };
        // Loading the program takes the verifier tens of milliseconds,
        // during which a VIP (one that restarts, say) captures nothing:
        // not spent where no kprobe could be attached anyway.
        if !kernel_has_kprobes() {
            let kprobe = io::Error::new(
                io::ErrorKind::NotFound,
                "attaching the capture program: this kernel has no kprobes",
            );
            return Err(NotAttached { fentry, kprobe });
        }
        try_hook(kprobe, Hook::Kprobe).map_err(|kprobe| NotAttached { fentry, kprobe })
    }

    /// Attaches it: every program loaded from now on is captured.
    pub fn attach(&mut self) -> io::Result<()> {
        self.skel
            .attach()
            .map_err(context("attaching the capture program"))
    }

    /// How it hooks the loads.
    pub fn hook(&self) -> Hook {
        self.hook
    }

    /// Puts together what the ring holds ([`Capture::captured`]), waiting
    /// up to `timeout` for something to come. With no time to wait, the
    /// ring is read without a system call: `poll` would make an
    /// `epoll_wait` only to learn what `consume` reads anyway.
    pub fn drain(&mut self, timeout: Duration) -> io::Result<()> {
        if !timeout.is_zero() {
            self.reader
                .poll(timeout)
                .map_err(context("reading the capture ring"))?;
        }
        self.reader
            .consume()
            .map_err(context("reading the capture ring"))
    }

    /// What the ring has given so far and was not taken.
    pub fn captured(&self) -> Ref<'_, Captured> {
        self.captured.borrow()
    }

    /// Takes program `id` out of what was captured.
    pub fn take(&mut self, id: u32) -> Option<CapturedProgram> {
        self.captured.borrow_mut().remove(id)
    }

    /// Forgets the oldest programs beyond the `most` newest (their loads
    /// were read before the side band's, or lost).
    pub fn keep_at_most(&mut self, most: usize) {
        let programs = &mut self.captured.borrow_mut().programs;
        while programs.len() > most {
            programs.pop_first();
        }
    }

    /// Records the ring had no room for.
    pub fn lost(&self) -> u64 {
        self.skel.maps.bss_data.as_ref().map_or(0, |bss| bss.lost)
    }
}
