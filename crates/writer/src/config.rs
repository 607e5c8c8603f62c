//! How a writer behaves: chosen once per recording.

/// How a writer behaves.
#[derive(Clone, Copy, Debug)]
pub struct WriterConfig {
    /// Use one multishot poll (5.13+). Without it, or when the kernel
    /// refuses it, a one-shot poll is re-armed after each wakeup.
    pub multishot_poll: bool,
    /// Bytes worth a write of their own. A write starts on a ring wakeup,
    /// a Flush from the coordinator or a stop; right after another write completes it
    /// starts only if this much is waiting, so a busy ring is written in
    /// large pieces instead of a stream of small ones. Set it to the
    /// events' wakeup watermark.
    pub batch_bytes: u64,
    /// `fdatasync` the shard before exiting. Only worth it when the shards
    /// are what the recording leaves: shards merged and deleted right away
    /// then never need to reach the disk at all. Off by default, as in
    /// `shardrec record` without `--no-merge`.
    pub sync_shard: bool,
    /// How the ring's bytes go into the shard.
    pub writes: ShardWrites,
    /// The live merger takes the ring's bytes into the output first (see
    /// `shardrec_sys::ring` on a ring's two readers): a wakeup is
    /// answered only once the ring holds `batch_bytes` (set it above the
    /// wakeup watermark then), as the writer only spills what the merger
    /// has not kept up with.
    pub merger_reads_first: bool,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            multishot_poll: true,
            batch_bytes: 0,
            sync_shard: false,
            writes: ShardWrites::IoUring,
            merger_reads_first: false,
        }
    }
}

/// How a writer writes: chosen once per recording by whether the shards'
/// file system takes a buffered write without blocking
/// ([`shardrec_sys::file_writes::takes_nonblocking_writes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShardWrites {
    /// Submitted to io_uring, which completes them in the submitting call
    /// where the file system allows it, while the writer goes on waiting
    /// for its ring and its commands.
    IoUring,
    /// `pwritev` from the writer itself. Where the file system cannot take
    /// a buffered write without blocking (ext4), io_uring hands each write
    /// to a kernel worker thread that makes the same copy, plus a wakeup
    /// and two switches: by hand, at 20 kHz with DWARF stacks and 256 KiB
    /// rings on ext4, the recorder's CPU was 1.02–1.07 s that way and
    /// 0.75–0.92 s with `pwritev` (five runs each). The writer holds one
    /// write in flight at a time either way, so it waits no longer.
    Pwritev,
}
