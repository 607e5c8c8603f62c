//! Tracepoint formats (HEADER_TRACING_DATA), as perf's trace-event-info.c
//! (`tracing_data_get`) writes them and trace-event-read.c (`trace_report`)
//! reads them.
//!
//! The blob, all numbers in native byte order:
//!
//! | part | bytes |
//! |---|---|
//! | magic | `23 8 68` then `tracing` (10 bytes, no NUL) |
//! | version | `"0.6\0"` (0.6 is the first with saved_cmdlines) |
//! | endianness | 1 byte: 0 little, 1 big |
//! | long size | 1 byte: `sizeof(long)` |
//! | page size | u32 |
//! | header page | `"header_page\0"`, u64 size, `events/header_page` |
//! | header event | `"header_event\0"`, u64 size, `events/header_event` |
//! | ftrace formats | u32 count, then per file u64 size and `events/ftrace/*/format` |
//! | event systems | u32 count, then per system its name with NUL, u32 count, per file u64 size and the format |
//! | kallsyms | u32 size, then the file (perf 6.1 writes size 0, no file) |
//! | printk formats | u32 size, then `printk_formats` |
//! | saved cmdlines | u64 size, then `saved_cmdlines` |
//!
//! The feature section holds exactly these bytes, unpadded: perf reads the
//! file-mode section with `trace_report` from its offset.

use crate::feature::Feature;

/// The first ten bytes: three magic numbers and `tracing`.
pub const MAGIC: [u8; 10] = [23, 8, 68, b't', b'r', b'a', b'c', b'i', b'n', b'g'];

/// The format version perf 6.1 writes; readers take saved_cmdlines from
/// versions ≥ 0.6 only.
pub const VERSION: &str = "0.6";

/// The tracefs files perf copies into a recording.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TracingFiles {
    /// The system page size.
    pub page_size: u32,
    /// `events/header_page`.
    pub header_page: Vec<u8>,
    /// `events/header_event`.
    pub header_event: Vec<u8>,
    /// `events/ftrace/NAME/format` of each recorded `ftrace:NAME` event
    /// (usually none: ordinary tracepoints live in other systems).
    pub ftrace_formats: Vec<Vec<u8>>,
    /// Per event system (other than `ftrace`): its name and the format files
    /// of its recorded events.
    pub systems: Vec<(String, Vec<Vec<u8>>)>,
    /// `/proc/kallsyms`; may be empty (perf writes it empty, and its readers
    /// resolve kernel symbols elsewhere).
    pub kallsyms: Vec<u8>,
    /// `printk_formats`; may be empty.
    pub printk_formats: Vec<u8>,
    /// `saved_cmdlines`; may be empty.
    pub saved_cmdlines: Vec<u8>,
}

/// The exact HEADER_TRACING_DATA feature content.
///
/// # Panics
///
/// If `kallsyms` or `printk_formats` is 4 GiB or longer (their sizes are
/// u32 in the format).
pub fn encode(files: &TracingFiles) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(VERSION.as_bytes());
    out.push(0);
    out.push(u8::from(cfg!(target_endian = "big")));
    out.push(std::mem::size_of::<std::ffi::c_long>() as u8);
    out.extend_from_slice(&files.page_size.to_ne_bytes());

    out.extend_from_slice(b"header_page\0");
    sized64(&mut out, &files.header_page);
    out.extend_from_slice(b"header_event\0");
    sized64(&mut out, &files.header_event);

    formats(&mut out, &files.ftrace_formats);
    out.extend_from_slice(&(files.systems.len() as u32).to_ne_bytes());
    for (system, files) in &files.systems {
        out.extend_from_slice(system.as_bytes());
        out.push(0);
        formats(&mut out, files);
    }

    sized32(&mut out, &files.kallsyms, "kallsyms");
    sized32(&mut out, &files.printk_formats, "printk_formats");
    sized64(&mut out, &files.saved_cmdlines);
    out
}

/// HEADER_TRACING_DATA as a feature for [`crate::PerfDataWriter::finish`].
pub fn feature(files: &TracingFiles) -> (Feature, Vec<u8>) {
    (Feature::TracingData, encode(files))
}

/// u32 count, then each file with a u64 size (`copy_event_system`).
fn formats(out: &mut Vec<u8>, files: &[Vec<u8>]) {
    out.extend_from_slice(&(files.len() as u32).to_ne_bytes());
    for file in files {
        sized64(out, file);
    }
}

fn sized64(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_ne_bytes());
    out.extend_from_slice(bytes);
}

fn sized32(out: &mut Vec<u8>, bytes: &[u8], what: &str) {
    let len = u32::try_from(bytes.len())
        .unwrap_or_else(|_| panic!("{what} is {} bytes, over the format's u32", bytes.len()));
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads the blob back the way `trace_report` does.
    struct Reader<'a>(&'a [u8]);

    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> &'a [u8] {
            let (head, tail) = self.0.split_at(n);
            self.0 = tail;
            head
        }
        fn u32(&mut self) -> u32 {
            u32::from_ne_bytes(self.take(4).try_into().unwrap())
        }
        fn u64(&mut self) -> u64 {
            u64::from_ne_bytes(self.take(8).try_into().unwrap())
        }
        fn string(&mut self) -> &'a [u8] {
            let end = self.0.iter().position(|&b| b == 0).unwrap();
            let s = self.take(end);
            self.take(1);
            s
        }
        fn sized64(&mut self) -> &'a [u8] {
            let n = self.u64() as usize;
            self.take(n)
        }
        fn sized32(&mut self) -> &'a [u8] {
            let n = self.u32() as usize;
            self.take(n)
        }
    }

    fn sample() -> TracingFiles {
        TracingFiles {
            page_size: 4096,
            header_page: b"page".to_vec(),
            header_event: b"event!".to_vec(),
            ftrace_formats: vec![b"name: function\n".to_vec()],
            systems: vec![
                (
                    "sched".into(),
                    vec![
                        b"name: sched_switch\n".to_vec(),
                        b"name: sched_wakeup\n".to_vec(),
                    ],
                ),
                ("irq".into(), vec![b"name: irq_handler_entry\n".to_vec()]),
            ],
            kallsyms: Vec::new(),
            printk_formats: b"0x1 : \"x\"\n".to_vec(),
            saved_cmdlines: b"1 init\n".to_vec(),
        }
    }

    #[test]
    fn framing_matches_trace_report() {
        let files = sample();
        let blob = encode(&files);
        let mut r = Reader(&blob);
        assert_eq!(r.take(3), &[23, 8, 68]);
        assert_eq!(r.take(7), b"tracing");
        assert_eq!(r.string(), b"0.6");
        assert_eq!(r.take(1), &[u8::from(cfg!(target_endian = "big"))]);
        assert_eq!(r.take(1), &[std::mem::size_of::<std::ffi::c_long>() as u8]);
        assert_eq!(r.u32(), 4096);
        assert_eq!(r.take(12), b"header_page\0");
        assert_eq!(r.sized64(), b"page");
        assert_eq!(r.take(13), b"header_event\0");
        assert_eq!(r.sized64(), b"event!");
        assert_eq!(r.u32(), 1);
        assert_eq!(r.sized64(), b"name: function\n");
        assert_eq!(r.u32(), 2);
        assert_eq!(r.string(), b"sched");
        assert_eq!(r.u32(), 2);
        assert_eq!(r.sized64(), b"name: sched_switch\n");
        assert_eq!(r.sized64(), b"name: sched_wakeup\n");
        assert_eq!(r.string(), b"irq");
        assert_eq!(r.u32(), 1);
        assert_eq!(r.sized64(), b"name: irq_handler_entry\n");
        assert_eq!(r.sized32(), b"");
        assert_eq!(r.sized32(), files.printk_formats.as_slice());
        assert_eq!(r.sized64(), b"1 init\n");
        assert!(r.0.is_empty(), "{} bytes left over", r.0.len());
    }

    #[test]
    fn empty_parts_are_zero_sizes() {
        let files = TracingFiles {
            page_size: 65536,
            ..TracingFiles::default()
        };
        let blob = encode(&files);
        // magic 10, "0.6\0" 4, endian 1, long 1, page 4, two headers
        // (12 + 8, 13 + 8), ftrace count 4, system count 4, kallsyms 4,
        // printk 4, cmdlines 8.
        assert_eq!(blob.len(), 10 + 4 + 1 + 1 + 4 + 20 + 21 + 4 + 4 + 4 + 4 + 8);
        assert_eq!(&blob[16..20], &65536u32.to_ne_bytes());
        assert!(blob[blob.len() - 24..].iter().all(|&b| b == 0));
        assert_eq!(feature(&files), (Feature::TracingData, blob));
    }

    #[test]
    fn kallsyms_is_u32_framed() {
        let files = TracingFiles {
            kallsyms: b"ffffffff81000000 T _text\n".to_vec(),
            ..TracingFiles::default()
        };
        let blob = encode(&files);
        let at = 10 + 4 + 1 + 1 + 4 + 20 + 21 + 4 + 4;
        assert_eq!(&blob[at..at + 4], &25u32.to_ne_bytes());
        assert_eq!(&blob[at + 4..at + 29], files.kallsyms.as_slice());
        assert_eq!(blob.len(), at + 29 + 4 + 8);
    }
}
