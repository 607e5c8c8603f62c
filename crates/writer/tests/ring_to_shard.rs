//! A real event's ring streamed into a real shard, through io_uring and
//! with `pwritev`.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use shardrec_control::{Command, Framed};
use shardrec_format::header::RecordType;
use shardrec_format::views::lost_count;
use shardrec_format::walk::{End, RecordWalker};
use shardrec_sys::abi;
use shardrec_sys::{Attr, PerfEvent, RingBuffer, Target};
use shardrec_writer::{RingWriter, ShardWriter, ShardWrites, WriterConfig};

/// Samples this thread's cpu-clock every 10 µs into a ring of `pages`,
/// streams it with a writer thread while busy for `busy`, and returns the
/// shard's bytes with the writer's byte count.
fn record_self(pages: usize, busy: Duration, config: WriterConfig) -> (Vec<u8>, u64) {
    // One at a time: two of these side by side are two busy threads and
    // two writers on this VM's two CPUs, each busy thread sampled every
    // 10 us, and a writer then ran once in 300 ms (4 KiB written).
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut attr = Attr::software(abi::PERF_COUNT_SW_TASK_CLOCK as u64);
    attr.set_period(10_000);
    attr.set_sample_type(
        (abi::PERF_SAMPLE_IP | abi::PERF_SAMPLE_TID | abi::PERF_SAMPLE_TIME) as u64,
    );
    attr.set_sample_id_all();
    attr.set_wakeup_watermark(1024);
    let tid = nix::unistd::gettid().as_raw();
    let event = PerfEvent::open(&attr, Target { pid: tid, cpu: -1 }).expect("perf_event_open");
    let ring = RingBuffer::map(&event, pages).expect("mmap ring");
    let dir = std::env::temp_dir().join(format!(
        "shardrec-writer-{}-{pages}-{}-{:?}",
        std::process::id(),
        config.multishot_poll,
        config.writes
    ));
    let _ = std::fs::remove_file(&dir);
    let shard = std::fs::File::create(&dir).unwrap();
    let (read_end, write_end): (OwnedFd, OwnedFd) = nix::unistd::pipe().unwrap();
    let stats = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            ShardWriter::new(&ring, &event, shard, read_end, config)
                .unwrap()
                .run()
                .unwrap()
        });
        event.enable().unwrap();
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < busy {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        std::hint::black_box(x);
        event.disable().unwrap();
        Command::Drain
            .write_to(&mut std::fs::File::from(write_end))
            .unwrap();
        writer.join().unwrap()
    });
    let bytes = std::fs::read(&dir).unwrap();
    std::fs::remove_file(&dir).unwrap();
    (bytes, stats.bytes)
}

fn count(bytes: &[u8]) -> (u64, u64) {
    let mut walker = RecordWalker::new(bytes);
    let (mut samples, mut lost) = (0, 0);
    for record in walker.by_ref() {
        match record.header.type_ {
            RecordType::SAMPLE => samples += 1,
            RecordType::LOST => lost += lost_count(record.header.type_, record.bytes).unwrap(),
            _ => {}
        }
    }
    assert_eq!(
        walker.end(),
        End::Clean,
        "shard is a clean sequence of records"
    );
    (samples, lost)
}

/// Both ways of waiting (one multishot poll, 5.13+; the one-shot poll
/// re-armed after each wakeup that older kernels get), each with both ways
/// of writing (through io_uring, and `pwritev` from the writer).
fn writer_modes() -> [WriterConfig; 4] {
    [
        (true, ShardWrites::IoUring),
        (false, ShardWrites::IoUring),
        (true, ShardWrites::Pwritev),
        (false, ShardWrites::Pwritev),
    ]
    .map(|(multishot_poll, writes)| WriterConfig {
        multishot_poll,
        writes,
        ..WriterConfig::default()
    })
}

#[test]
fn streams_every_byte_as_whole_records() {
    if !shardrec_testkit::require_root() {
        return;
    }
    for config in writer_modes() {
        // A 4 MiB ring (the recorder's default) holds a second of these
        // samples: a write stalled by the page cache's writeback of what
        // earlier tests wrote (64 pages lost 28,203 samples once in CI)
        // is absorbed, as in a real recording.
        let (bytes, written) = record_self(1024, Duration::from_millis(300), config);
        assert_eq!(bytes.len() as u64, written);
        let (samples, lost) = count(&bytes);
        assert!(samples > 1000, "only {samples} samples ({config:?})");
        assert_eq!(lost, 0, "{config:?}");
    }
}

#[test]
fn a_one_page_ring_wraps_and_stays_whole() {
    if !shardrec_testkit::require_root() {
        return;
    }
    for config in writer_modes() {
        let (bytes, written) = record_self(1, Duration::from_millis(300), config);
        assert_eq!(bytes.len() as u64, written);
        // 300 ms at 100 kHz of 40-byte samples is ~1.2 MB through a 4 KiB
        // ring when the writer runs as often as it is woken; how often it
        // runs is the scheduler's (19 KB once, with the other test of this
        // file beside it), so what is checked is that the ring went round
        // more than once, whole.
        assert!(
            written > 2 * 4096,
            "ring wrapped only {written} bytes ({config:?})"
        );
        let (samples, lost) = count(&bytes);
        assert!(samples > 0);
        eprintln!("one-page ring, {config:?}: {samples} samples, {lost} lost");
    }
}
