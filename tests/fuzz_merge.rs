//! A fuzzer for everything the merge reads: `meta`, the shards, the `bpf`
//! file. On stable Rust, as a test: each case copies a recording of the
//! seed corpus (`tests/fuzz/corpus/*`, `tests/fixtures/*`), damages one or
//! more of its files (bits flipped, size fields set to edge values, cut,
//! chunks repeated or moved), and merges it in this process. A merge may
//! refuse with an error; it must not panic, hang, or allocate as much as a
//! size field says.
//!
//! It runs for `SHARDREC_FUZZ_SECONDS` (60 under `CI`, 10 otherwise) from
//! seed `SHARDREC_FUZZ_SEED` (the time by default; printed). A failing
//! case is left in `target/fuzz-failures/` with the seed and case number,
//! and `SHARDREC_FUZZ_SEED=S SHARDREC_FUZZ_CASE=N` replays it alone.

use std::alloc::{GlobalAlloc, Layout, System};

use shardrec_testkit::Noise;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// No allocation of the merge may be this large: only a size read from
/// the input could ask for it.
const MAX_ALLOCATION: usize = 1 << 30;

/// A case that takes this long hangs.
const CASE_LIMIT: Duration = Duration::from_secs(30);

struct Bounded;

// SAFETY: forwards to the system allocator unchanged; only refuses (by
// aborting, as allocation failure does) a request larger than the bound.
unsafe impl GlobalAlloc for Bounded {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > MAX_ALLOCATION {
            oversized();
        }
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > MAX_ALLOCATION {
            oversized();
        }
        // SAFETY: as `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Bounded = Bounded;

/// The case being run, for the messages of an abort.
static CASE: AtomicU64 = AtomicU64::new(u64::MAX);

fn oversized() -> ! {
    // No allocation here: formatting a message would recurse.
    let message = b"fuzz_merge: an allocation over 1 GiB; the case is in target/fuzz-failures/\n";
    // SAFETY: writes a static buffer to stderr.
    unsafe { libc::write(2, message.as_ptr().cast(), message.len()) };
    std::process::abort();
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every recording directory of the seed corpus.
fn seeds() -> Vec<PathBuf> {
    let mut seeds = Vec::new();
    for parent in ["tests/fuzz/corpus", "tests/fixtures"] {
        let Ok(entries) = std::fs::read_dir(repo().join(parent)) else {
            continue;
        };
        seeds.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.join("meta").exists()),
        );
    }
    seeds.sort();
    seeds
}

/// Values a size or count field is worth trying.
const EDGES: [u64; 10] = [
    0,
    1,
    7,
    8,
    0xff,
    0xffff,
    0x7fff_ffff,
    0xffff_ffff,
    u64::MAX,
    1 << 40,
];

/// Damages `bytes` one way, chosen by `rng`.
fn mutate(bytes: &mut Vec<u8>, rng: &mut Noise) {
    if bytes.is_empty() {
        bytes.extend((0..8 + rng.below(64)).map(|_| rng.next_u64() as u8));
        return;
    }
    let at = rng.below(bytes.len());
    match rng.below(6) {
        0 => bytes[at] ^= 1 << rng.below(8),
        1 => {
            // A field set to an edge value, at an 8-byte aligned place as
            // headers and sizes are, in one of the widths they have.
            let value = EDGES[rng.below(EDGES.len())];
            let width = [2, 4, 8][rng.below(3)];
            let at = (at & !7) + [0, 4, 6][rng.below(3)];
            let end = (at + width).min(bytes.len());
            if at < end {
                bytes[at..end].copy_from_slice(&value.to_ne_bytes()[..end - at]);
            }
        }
        2 => bytes.truncate(at),
        3 => {
            let len = rng.below(bytes.len() - at).min(4096);
            let chunk = bytes[at..at + len].to_vec();
            let to = rng.below(bytes.len());
            bytes.splice(to..to, chunk);
        }
        4 => {
            let len = rng.below(bytes.len() - at).min(4096);
            bytes.drain(at..at + len);
        }
        _ => bytes[at] = rng.next_u64() as u8,
    }
}

/// Copies `seed` into `dir`, damaging one to three of its files.
fn make_case(seed: &Path, dir: &Path, rng: &mut Noise) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(seed)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let damaged: Vec<usize> = (0..1 + rng.below(3))
        .map(|_| rng.below(files.len()))
        .collect();
    for (index, file) in files.iter().enumerate() {
        let mut bytes = std::fs::read(file).unwrap();
        for _ in damaged.iter().filter(|&&d| d == index) {
            for _ in 0..1 + rng.below(4) {
                mutate(&mut bytes, rng);
            }
        }
        if damaged.contains(&index) && rng.below(16) == 0 {
            continue; // the file deleted
        }
        std::fs::write(dir.join(file.file_name().unwrap()), bytes).unwrap();
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

/// Aborts the process if a case runs past [`CASE_LIMIT`].
fn watchdog(started: &'static AtomicU64) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let at = started.load(Ordering::Relaxed);
        let now = clock_ms();
        if at != 0 && now.saturating_sub(at) > CASE_LIMIT.as_millis() as u64 {
            eprintln!(
                "fuzz_merge: case {} ran over {CASE_LIMIT:?}: a hang; it is in target/fuzz-failures/",
                CASE.load(Ordering::Relaxed)
            );
            std::process::abort();
        }
    });
}

fn clock_ms() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

#[test]
fn the_merge_survives_damaged_recordings() {
    let seeds = seeds();
    assert!(seeds.len() >= 3, "the seed corpus is missing: {seeds:?}");
    // 30 s a CI run (a new seed each), so the whole run stays within 20
    // minutes on a new 2-vCPU machine; SHARDREC_FUZZ_SECONDS for longer.
    let default_seconds = if std::env::var_os("CI").is_some() {
        30
    } else {
        10
    };
    let seconds = env_u64("SHARDREC_FUZZ_SECONDS").unwrap_or(default_seconds);
    let seed = env_u64("SHARDREC_FUZZ_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let only = env_u64("SHARDREC_FUZZ_CASE");
    eprintln!(
        "fuzz_merge: seed {seed}, {seconds} s (SHARDREC_FUZZ_SEED={seed} replays these cases)"
    );
    let failures = repo().join("target/fuzz-failures");
    let dir = failures.join(format!("case-{seed}"));
    let out = failures.join(format!("out-{seed}.data"));
    static STARTED: AtomicU64 = AtomicU64::new(0);
    watchdog(&STARTED);
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (mut cases, mut refused) = (0u64, 0u64);
    let mut case = 0u64;
    while only.map_or(Instant::now() < deadline, |n| case <= n) {
        // Each case from its own generator, so one replays alone.
        let mut rng = Noise(seed ^ (case + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let source = &seeds[rng.below(seeds.len())];
        let options = shardrec_merge::MergeOptions {
            threads: Some(1 + rng.below(3)),
            slice_bytes: [None, Some(4096), Some(64 << 10)][rng.below(3)],
            compression_level: [None, Some(1)][rng.below(2)],
            ..Default::default()
        };
        if only.is_some_and(|n| n != case) {
            case += 1;
            continue;
        }
        make_case(source, &dir, &mut rng);
        CASE.store(case, Ordering::Relaxed);
        STARTED.store(clock_ms(), Ordering::Relaxed);
        let target = shardrec_shard::output::Output::resolve(&out).unwrap();
        let result = std::panic::catch_unwind(|| shardrec_merge::merge(&dir, &target, &options));
        STARTED.store(0, Ordering::Relaxed);
        match result {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => {
                refused += 1;
                assert!(!error.to_string().is_empty(), "an empty error");
            }
            Err(_) => panic!(
                "case {case} of seed {seed} (from {}, options {options:?}) panicked; \
                 the damaged recording is in {}; SHARDREC_FUZZ_SEED={seed} SHARDREC_FUZZ_CASE={case} replays it",
                source.display(),
                dir.display()
            ),
        }
        cases += 1;
        case += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_file(&out);
    eprintln!("fuzz_merge: {cases} cases, {refused} refused with an error, no panic, hang or oversized allocation");
    assert!(cases > 0);
}
