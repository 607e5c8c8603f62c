//! Every BPF program captured in the kernel as it loads:
//! `src/bpf/capture.bpf.c` runs in the loader's own bpf(2) call (on
//! `bpf_prog_kallsyms_add`, which the kernel calls with the new program
//! once it has its id, before its descriptor exists) and writes what
//! `BPF_OBJ_GET_INFO_BY_FD` would give of the program, its BTF included,
//! to a ring buffer. A program that lives a microsecond is captured like
//! one that stays. Its records are read in `shardrec_sys::bpf::captured`:
//! there they add up to its info as the syscall path's.

use std::cell::{Ref, RefCell};
use std::io;
use std::mem::MaybeUninit;
use std::rc::Rc;
use std::time::Duration;

use crate::context;
use crate::OpenObject;
use libbpf_rs::skel::{OpenSkel, Skel, SkelBuilder};
use libbpf_rs::{RingBuffer, RingBufferBuilder};
use shardrec_sys::bpf::captured::{Captured, RecordedProgram};

use crate::skel::capture::{CaptureSkel, CaptureSkelBuilder};

/// How the program hooks the kernel's program loads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hook {
    /// `fentry` (a BPF trampoline: cheapest).
    Fentry,
    /// A kprobe, where the kernel refuses fentry programs.
    Kprobe,
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
    pub fn take(&mut self, id: u32) -> Option<RecordedProgram> {
        self.captured.borrow_mut().remove(id)
    }

    /// Forgets the oldest programs beyond the `most` newest (their loads
    /// were read before the side band's, or lost).
    pub fn keep_at_most(&mut self, most: usize) {
        self.captured.borrow_mut().keep_at_most(most);
    }

    /// Records the ring had no room for.
    pub fn lost(&self) -> u64 {
        self.skel.maps.bss_data.as_ref().map_or(0, |bss| bss.lost)
    }
}
