//! Compiles each `src/bpf/NAME.bpf.c` with clang (`-target bpf`, with
//! BTF, so libbpf relocates its field accesses to the running kernel)
//! and generates its skeleton, `NAME.skel.rs`, into OUT_DIR.

use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: [&str; 2] = ["off_cpu", "capture"];

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    for name in PROGRAMS {
        let source = format!("src/bpf/{name}.bpf.c");
        SkeletonBuilder::new()
            .source(&source)
            .clang_args(["-Wall", "-Werror"])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| {
                panic!("building {source} (needs clang: Debian's clang package): {e:#}")
            });
        println!("cargo:rerun-if-changed={source}");
    }
    println!("cargo:rerun-if-changed=src/bpf/kernel.h");
}
