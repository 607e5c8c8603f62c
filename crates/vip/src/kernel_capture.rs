//! The in-kernel capture, in the VIP: shardrec's capture program
//! (`shardrec_bpf::capture`) writes each program's info as it loads, in
//! the loader's own call, so the VIP takes it from there when it reads
//! the program's PROG_LOAD, however short the program's life. Where the
//! kernel takes neither its fentry nor its kprobe, or when
//! `SHARDREC_NO_KERNEL_CAPTURE` is set, the VIP captures through bpf(2)
//! alone, as before.

use std::io;
use std::mem::MaybeUninit;
use std::time::Duration;

use shardrec_bpf::capture::{Capture, Hook, NotAttached};
use shardrec_bpf::OpenObject;
use shardrec_control::CaptureHook;
use shardrec_sys::bpf::captured::RecordedProgram;

/// Programs kept whose PROG_LOAD has not been read: beyond this, the
/// oldest go (their loads were before the side band's, or lost).
const KEPT: usize = 4096;

/// Where libbpf keeps the capture program: one object per hook tried.
pub struct Storage {
    fentry: MaybeUninit<OpenObject>,
    kprobe: MaybeUninit<OpenObject>,
}

impl Default for Storage {
    fn default() -> Self {
        Storage {
            fentry: MaybeUninit::uninit(),
            kprobe: MaybeUninit::uninit(),
        }
    }
}

/// The capture program running, and what it wrote not yet taken.
pub struct KernelCapture<'obj> {
    capture: Capture<'obj>,
}

/// Why the VIP captures through bpf(2) alone.
#[derive(Debug)]
pub enum Unavailable {
    /// `SHARDREC_NO_KERNEL_CAPTURE` asked for it.
    Asked,
    /// The kernel refused both hooks.
    Refused(NotAttached),
}

impl<'obj> KernelCapture<'obj> {
    /// Starts the capture program in `storage`: from now on every program
    /// loaded is captured.
    pub fn start(storage: &'obj mut Storage) -> Result<KernelCapture<'obj>, Unavailable> {
        if std::env::var_os("SHARDREC_NO_KERNEL_CAPTURE").is_some() {
            return Err(Unavailable::Asked);
        }
        let capture = Capture::start(&mut storage.fentry, &mut storage.kprobe)
            .map_err(Unavailable::Refused)?;
        Ok(KernelCapture { capture })
    }

    /// How it hooks the kernel's loads, as the VIP reports it.
    pub fn hook(&self) -> CaptureHook {
        match self.capture.hook() {
            Hook::Fentry => CaptureHook::Fentry,
            Hook::Kprobe => CaptureHook::Kprobe,
        }
    }

    /// Reads what the ring holds: every program whose PROG_LOAD has been
    /// read from a side-band ring by now (its records are written before
    /// the kernel emits the PROG_LOAD).
    pub fn collect(&mut self) -> io::Result<()> {
        self.capture.drain(Duration::ZERO)?;
        self.capture.keep_at_most(KEPT);
        Ok(())
    }

    /// Program `id`'s records as it loaded, if [`KernelCapture::collect`]
    /// found it whole.
    pub fn take(&mut self, id: u32) -> Option<RecordedProgram> {
        self.capture.take(id).filter(|r| r.program.is_whole())
    }
}
