//! shardrec's BPF programs written ahead of time, in C, built by
//! libbpf-cargo (`build.rs`) into skeletons that libbpf loads with CO-RE:
//! each field of a kernel struct is read where the running kernel's BTF
//! says it is, so one build runs on every kernel shardrec supports (6.1
//! and later, with `CONFIG_DEBUG_INFO_BTF`).
//!
//! - [`off_cpu`]: off-CPU time, each wait written to a BPF output event as
//!   it ends;
//! - [`capture`]: every BPF program captured in the kernel as it loads.
//!
//! The sample filters (`shardrec-filter`) are not here: they are compiled
//! at run time from the user's expression, with no compiler at all.
//!
//! ```no_run
//! let mut storage = std::mem::MaybeUninit::uninit();
//! let mut off_cpu = shardrec_bpf::off_cpu::OffCpu::load(
//!     &mut storage,
//!     &shardrec_bpf::off_cpu::Settings { follow_all: true, follow_children: true, follow_threads: false, threshold_ns: 0 },
//! )?;
//! off_cpu.attach()?;
//! # Ok::<(), std::io::Error>(())
//! ```

pub mod capture;
pub mod off_cpu;

/// libbpf's errors as I/O errors, with what was being done.
fn context(what: &'static str) -> impl FnOnce(libbpf_rs::Error) -> std::io::Error {
    move |error| std::io::Error::other(format!("{what}: {error}"))
}

/// The skeletons libbpf-cargo generates: code of its own, held to its
/// own conventions rather than this workspace's lints.
#[allow(
    missing_docs,
    clippy::all,
    clippy::undocumented_unsafe_blocks,
    unsafe_op_in_unsafe_fn
)]
mod skel {
    pub mod off_cpu {
        include!(concat!(env!("OUT_DIR"), "/off_cpu.skel.rs"));
    }
    pub mod capture {
        include!(concat!(env!("OUT_DIR"), "/capture.skel.rs"));
    }
}
