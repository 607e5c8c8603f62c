"""A minimal perf.data walker: the counts perf's own tools do not print.

`perf report --stats` gives the number of LOST records but not the sum of
their `lost` fields, and no per-pid sample counts; this walks the records
of a perf.data file (or of perf's `--threads` directory: `data` plus
`data.N`) and counts them. Only record headers and a few fixed offsets are
read, so it needs no perf and takes a second or two per GB.

`perf record -z` output holds PERF_RECORD_COMPRESSED records instead:
their payloads are one zstd stream (flushed, not ended, at each record's
end, so each payload reads only after the ones before it, and a record can
continue into the next payload). They are inflated with libzstd through
ctypes: the library perf links for -z, where no Python zstd module is
installed. Without it, `walk` raises NoZstd.
"""

import ctypes
import ctypes.util
import mmap
import os
import struct
from collections import Counter
from dataclasses import dataclass, field

MAGIC = b"PERFILE2"
LOST, FORK, SAMPLE, LOST_SAMPLES = 2, 7, 9, 13
AUXTRACE, COMPRESSED = 71, 81
SAMPLE_IP, SAMPLE_TID, SAMPLE_IDENTIFIER = 1 << 0, 1 << 1, 1 << 16


class NoZstd(Exception):
    """The file is compressed and libzstd cannot be loaded."""


@dataclass
class Counts:
    records: int = 0  # uncompressed records (COMPRESSED ones not counted)
    compressed: int = 0  # PERF_RECORD_COMPRESSED records
    samples: int = 0
    lost_records: int = 0  # PERF_RECORD_LOST records
    lost_in_ring: int = 0  # the sum of their `lost` fields
    lost_samples: int = 0  # the sum of PERF_RECORD_LOST_SAMPLES' `lost`
    samples_by_pid: Counter = field(default_factory=Counter)
    parent: dict = field(default_factory=dict)  # process pid -> parent pid

    def lost(self):
        """Records the kernel dropped. The kernel counts each drop twice, in
        the ring's LOST records and in the event's PERF_FORMAT_LOST count
        that LOST_SAMPLES carries (kernel/events/ring_buffer.c,
        perf_output_begin), so the two are alternatives, not addends."""
        return max(self.lost_in_ring, self.lost_samples)

    def descendants(self, root, exclude=()):
        """`root` and every process forked from it, without the subtrees
        rooted at `exclude`."""
        children = {}
        for pid, ppid in self.parent.items():
            children.setdefault(ppid, []).append(pid)
        found, todo = set(), [root]
        while todo:
            pid = todo.pop()
            if pid in found or pid in exclude:
                continue
            found.add(pid)
            todo.extend(children.get(pid, []))
        return found


def walk(path):
    """Counts the records of the perf.data file or directory at `path`."""
    header = os.path.join(path, "data") if os.path.isdir(path) else path
    counts = Counts()
    with open(header, "rb") as f, mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ) as m:
        if m[:8] != MAGIC:
            raise ValueError(f"{header}: not a perf.data file")
        attr_size, attrs_off, attrs_size, data_off, data_size = struct.unpack_from("<5Q", m, 16)
        pid_offset = _pid_offset(m, attrs_off, attrs_size, attr_size)
        _walk_file(m, data_off, data_off + data_size, pid_offset, counts)
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            if name.startswith("data.") and os.path.getsize(os.path.join(path, name)):
                with open(os.path.join(path, name), "rb") as f, mmap.mmap(
                    f.fileno(), 0, prot=mmap.PROT_READ
                ) as m:
                    _walk_file(m, 0, len(m), pid_offset, counts)
    return counts


def _walk_file(m, pos, end, pid_offset, counts):
    """Walks one file's records; its compressed records are one stream."""
    stream = _Inflater()
    _walk(m, pos, end, pid_offset, counts, stream)
    if stream.pending:
        cut = len(stream.pending)
        raise ValueError(f"{cut} bytes of a record cut off at the end of the compressed records")


def _pid_offset(m, attrs_off, attrs_size, attr_size):
    """Where a sample's pid sits: after IDENTIFIER and IP when present. The
    attrs must agree, as perf requires for samples it can parse."""
    offsets = set()
    for off in range(attrs_off, attrs_off + attrs_size, attr_size):
        (sample_type,) = struct.unpack_from("<Q", m, off + 24)
        if not sample_type & SAMPLE_TID:
            offsets.add(None)
            continue
        offsets.add(8 + 8 * bool(sample_type & SAMPLE_IDENTIFIER) + 8 * bool(sample_type & SAMPLE_IP))
    if len(offsets) != 1:
        raise ValueError(f"attrs disagree on where a sample's pid is: {offsets}")
    return offsets.pop()


def _walk(m, pos, end, pid_offset, counts, stream=None):
    """Counts the whole records in m[pos:end]; returns where the first
    incomplete one starts (`end` if none). `stream` inflates compressed
    records; inside them it is None (they do not nest)."""
    unpack = struct.unpack_from
    by_pid = counts.samples_by_pid
    while pos + 8 <= end:
        kind, _misc, size = unpack("<IHH", m, pos)
        if size < 8:
            raise ValueError(f"record of size {size} at byte {pos}")
        if pos + size > end:
            break
        if kind == COMPRESSED and stream is not None:
            counts.compressed += 1
            stream.feed(m[pos + 8 : pos + size])
            done = _walk(stream.pending, 0, len(stream.pending), pid_offset, counts)
            del stream.pending[:done]
            pos += size
            continue
        counts.records += 1
        if kind == SAMPLE:
            counts.samples += 1
            if pid_offset is not None:
                by_pid[unpack("<I", m, pos + pid_offset)[0]] += 1
        elif kind == LOST:
            counts.lost_records += 1
            counts.lost_in_ring += unpack("<Q", m, pos + 16)[0]
        elif kind == LOST_SAMPLES:
            counts.lost_samples += unpack("<Q", m, pos + 8)[0]
        elif kind == FORK:
            pid, ppid, tid = unpack("<3I", m, pos + 8)
            if pid == tid and pid != ppid:
                counts.parent[pid] = ppid
        elif kind == AUXTRACE:
            pos += unpack("<Q", m, pos + 8)[0]
        elif kind == COMPRESSED:
            raise ValueError(f"a compressed record inside compressed records, at byte {pos}")
        pos += size
    return pos


class _Buffer(ctypes.Structure):
    """ZSTD_inBuffer and ZSTD_outBuffer: where, how large, how far done."""

    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t)]


class _Inflater:
    """One zstd decompression stream, made on the first compressed record:
    `feed` appends what a payload inflates to to `pending`. A stream also
    reads frames that end and others that follow (shardrec's merge ends
    one per time slice)."""

    OUT = 4 << 20

    def __init__(self):
        self.pending = bytearray()
        self.lib = self.stream = None

    def feed(self, payload):
        if self.stream is None:
            self._open()
        lib, src = self.lib, ctypes.create_string_buffer(bytes(payload), len(payload))
        inb = _Buffer(ctypes.cast(src, ctypes.c_void_p), len(payload), 0)
        while True:
            outb = _Buffer(ctypes.cast(self.out, ctypes.c_void_p), self.OUT, 0)
            ret = lib.ZSTD_decompressStream(self.stream, ctypes.byref(outb), ctypes.byref(inb))
            if lib.ZSTD_isError(ret):
                raise ValueError(f"zstd: {lib.ZSTD_getErrorName(ret).decode()}")
            self.pending += ctypes.string_at(self.out, outb.pos)
            # A full output buffer may hide more output of the same input.
            if inb.pos == inb.size and outb.pos < self.OUT:
                return

    def _open(self):
        name = ctypes.util.find_library("zstd") or "libzstd.so.1"
        try:
            lib = ctypes.CDLL(name)
        except OSError as e:
            raise NoZstd(f"compressed records (perf record -z) and no libzstd: {e}") from e
        lib.ZSTD_createDStream.restype = ctypes.c_void_p
        lib.ZSTD_decompressStream.restype = ctypes.c_size_t
        lib.ZSTD_decompressStream.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.ZSTD_isError.argtypes = [ctypes.c_size_t]
        lib.ZSTD_getErrorName.restype = ctypes.c_char_p
        lib.ZSTD_getErrorName.argtypes = [ctypes.c_size_t]
        lib.ZSTD_freeDStream.argtypes = [ctypes.c_void_p]
        self.lib, self.stream = lib, lib.ZSTD_createDStream()
        if not self.stream:
            raise MemoryError("ZSTD_createDStream")
        self.out = ctypes.create_string_buffer(self.OUT)

    def __del__(self):
        if self.stream:
            self.lib.ZSTD_freeDStream(self.stream)
