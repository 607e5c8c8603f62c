//! Just enough BTF (Documentation/bpf/btf.rst): a blob that names a
//! program's functions, to load with it, and the names of types in a blob
//! the kernel hands back, to name sub-programs as the kernel does.

use std::io;

use crate::bytes::u32_at;

/// `BTF_MAGIC`, in the blob's (native) byte order.
pub(crate) const MAGIC: u16 = 0xeb9f;
/// `struct btf_header`: magic, version, flags, hdr_len, then offsets and
/// lengths of the type and string sections (relative to the header's end).
const HEADER_LEN: usize = 24;
/// `struct btf_type`: name_off, info (kind in bits 24..29, vlen in 0..16), size/type.
const TYPE_LEN: usize = 12;

const KIND_INT: u32 = 1;
const KIND_STRUCT: u32 = 4;
const KIND_FUNC: u32 = 12;
const KIND_FUNC_PROTO: u32 = 13;
/// `BTF_INT_SIGNED` in an INT's encoding byte.
const INT_SIGNED: u32 = 1;

/// A BTF blob for a program's functions, with the func_info and line_info
/// records (8 and 16 bytes each) that tie them to instructions.
pub(crate) struct FuncBtf {
    pub blob: Vec<u8>,
    pub func_info: Vec<u8>,
    pub line_info: Vec<u8>,
}

/// Strings section under construction: offset 0 is the empty name.
struct Strings(Vec<u8>);

impl Strings {
    fn add(&mut self, text: &str) -> u32 {
        let offset = self.0.len() as u32;
        self.0.extend_from_slice(text.as_bytes());
        self.0.push(0);
        offset
    }
}

fn push_u32s(out: &mut Vec<u8>, values: &[u32]) {
    for value in values {
        out.extend_from_slice(&value.to_ne_bytes());
    }
}

/// BTF with `int` (type 1), `int (void)` (type 2) and one static FUNC of that
/// prototype per `(insn_off, name)` (types 3, 4, ...). Each function also
/// gets one line_info record at its first instruction, naming `file` and the
/// function, because the verifier wants a line at every function start and
/// perf captures line info too.
pub(crate) fn for_functions(funcs: &[(u32, &str)], file: &str) -> FuncBtf {
    let mut strings = Strings(vec![0]);
    let mut types = Vec::new();
    let int = strings.add("int");
    push_u32s(&mut types, &[int, KIND_INT << 24, 4, INT_SIGNED << 24 | 32]);
    push_u32s(&mut types, &[0, KIND_FUNC_PROTO << 24, 1]);
    let file_off = strings.add(file);
    let (mut func_info, mut line_info) = (Vec::new(), Vec::new());
    for (index, &(insn_off, name)) in funcs.iter().enumerate() {
        let name_off = strings.add(name);
        push_u32s(&mut types, &[name_off, KIND_FUNC << 24, 2]);
        push_u32s(&mut func_info, &[insn_off, 3 + index as u32]);
        let line = index as u32 + 1;
        push_u32s(&mut line_info, &[insn_off, file_off, name_off, line << 10]);
    }
    let mut blob = Vec::with_capacity(HEADER_LEN + types.len() + strings.0.len());
    blob.extend_from_slice(&MAGIC.to_ne_bytes());
    blob.extend_from_slice(&[1, 0]); // version 1, no flags
    let (types_len, strings_len) = (types.len() as u32, strings.0.len() as u32);
    push_u32s(
        &mut blob,
        &[HEADER_LEN as u32, 0, types_len, types_len, strings_len],
    );
    blob.extend_from_slice(&types);
    blob.extend_from_slice(&strings.0);
    FuncBtf {
        blob,
        func_info,
        line_info,
    }
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("BTF: {what}"))
}

/// Bytes that follow a `struct btf_type` of `kind` with `vlen` members.
fn extra_len(kind: u32, vlen: usize) -> io::Result<usize> {
    Ok(match kind {
        2 | 7..=12 | 16 | 18 => 0, // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG
        1 | 14 | 17 => 4,          // INT, VAR, DECL_TAG
        3 => 12,                   // ARRAY
        4 | 5 | 15 | 19 => 12 * vlen, // STRUCT, UNION, DATASEC, ENUM64
        6 | 13 => 8 * vlen,        // ENUM, FUNC_PROTO
        _ => return Err(invalid(&format!("unknown kind {kind}"))),
    })
}

/// Type names of a BTF blob, by type id, and where each type's record
/// starts (for its members).
pub(crate) struct TypeNames<'a> {
    /// `name_off` of each type; index 0 is type 1 (type 0 is `void`).
    name_offs: Vec<u32>,
    /// Where each type's `struct btf_type` starts in `types`.
    starts: Vec<usize>,
    types: &'a [u8],
    strings: &'a [u8],
}

impl<'a> TypeNames<'a> {
    /// Indexes a standalone blob (a program's BTF is never split BTF).
    pub(crate) fn parse(blob: &'a [u8]) -> io::Result<TypeNames<'a>> {
        let header =
            |index: usize| u32_at(blob, 4 + 4 * index).ok_or_else(|| invalid("short header"));
        if blob.get(..2) != Some(&MAGIC.to_ne_bytes()[..]) {
            return Err(invalid("bad magic"));
        }
        let hdr_len = header(0)? as usize;
        let section = |off: u32, len: u32| {
            let start = hdr_len + off as usize;
            blob.get(start..start + len as usize)
                .ok_or_else(|| invalid("section out of bounds"))
        };
        let types = section(header(1)?, header(2)?)?;
        let strings = section(header(3)?, header(4)?)?;
        let (mut name_offs, mut starts) = (Vec::new(), Vec::new());
        let mut at = 0;
        while at < types.len() {
            let (name_off, info) = (u32_at(types, at), u32_at(types, at + 4));
            let (Some(name_off), Some(info)) = (name_off, info) else {
                return Err(invalid("truncated type"));
            };
            name_offs.push(name_off);
            starts.push(at);
            at += TYPE_LEN + extra_len((info >> 24) & 0x1f, (info & 0xffff) as usize)?;
        }
        Ok(TypeNames {
            name_offs,
            starts,
            types,
            strings,
        })
    }

    /// The name of type `id`, if it exists.
    pub(crate) fn name(&self, id: u32) -> Option<&'a str> {
        let off = *self.name_offs.get((id as usize).checked_sub(1)?)? as usize;
        self.string(off)
    }

    fn string(&self, off: usize) -> Option<&'a str> {
        let tail = self.strings.get(off..)?;
        let end = tail.iter().position(|&b| b == 0)?;
        std::str::from_utf8(&tail[..end]).ok()
    }

    /// The `info` word of type `id`: kind in bits 24..29, vlen in 0..16,
    /// `kind_flag` in bit 31.
    fn info(&self, id: u32) -> Option<u32> {
        u32_at(
            self.types,
            self.starts.get((id as usize).checked_sub(1)?)? + 4,
        )
    }

    /// The id of the type of `kind` named `name`.
    pub(crate) fn find(&self, kind: u32, name: &str) -> Option<u32> {
        (1..=self.starts.len() as u32).find(|&id| {
            self.info(id).is_some_and(|i| (i >> 24) & 0x1f == kind) && self.name(id) == Some(name)
        })
    }

    /// The byte offset of member `member` in struct `id`.
    pub(crate) fn member_offset(&self, id: u32, member: &str) -> Option<u32> {
        let info = self.info(id)?;
        if (info >> 24) & 0x1f != KIND_STRUCT {
            return None;
        }
        let members = self.starts.get(id as usize - 1)? + TYPE_LEN;
        // `struct btf_member`: name_off, type, offset (in bits; with
        // kind_flag, the bitfield size is in the top 8 bits).
        (0..(info & 0xffff) as usize)
            .map(|i| members + 12 * i)
            .find(|&at| {
                u32_at(self.types, at).and_then(|off| self.string(off as usize)) == Some(member)
            })
            .and_then(|at| u32_at(self.types, at + 8))
            .map(|bits| match info >> 31 {
                1 => bits & 0xff_ffff,
                _ => bits,
            })
            .filter(|bits| bits % 8 == 0)
            .map(|bits| bits / 8)
    }
}

/// The kernel's own BTF (`/sys/kernel/btf/vmlinux`), for the offsets and
/// ids a program written without a compiler needs: the kernel's structs
/// move between versions and builds, their BTF says where they are now.
pub struct KernelBtf {
    blob: Vec<u8>,
}

impl KernelBtf {
    /// Where the kernel publishes it (`CONFIG_DEBUG_INFO_BTF`).
    pub const PATH: &'static str = "/sys/kernel/btf/vmlinux";

    /// Reads it; an error where the kernel has none.
    pub fn load() -> io::Result<KernelBtf> {
        Ok(KernelBtf {
            blob: std::fs::read(Self::PATH)?,
        })
    }

    /// The byte offset of `member` in `struct name`.
    pub fn member_offset(&self, name: &str, member: &str) -> io::Result<u32> {
        let types = TypeNames::parse(&self.blob)?;
        types
            .find(KIND_STRUCT, name)
            .and_then(|id| types.member_offset(id, member))
            .ok_or_else(|| not_found(&format!("struct {name} with a member {member}")))
    }

    /// The BTF id of kernel function `name` (for a kfunc call).
    pub fn func_id(&self, name: &str) -> io::Result<u32> {
        let types = TypeNames::parse(&self.blob)?;
        types
            .find(KIND_FUNC, name)
            .ok_or_else(|| not_found(&format!("function {name}")))
    }
}

fn not_found(what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("the kernel's BTF has no {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_blob_reads_back() {
        let btf = for_functions(&[(0, "main_fn"), (4, "helper")], "test.rs");
        let names = TypeNames::parse(&btf.blob).unwrap();
        assert_eq!(names.name(1), Some("int"));
        assert_eq!(names.name(2), Some(""));
        assert_eq!(names.name(3), Some("main_fn"));
        assert_eq!(names.name(4), Some("helper"));
        assert_eq!(names.name(5), None);
        assert_eq!(btf.func_info.len(), 16);
        assert_eq!(u32_at(&btf.func_info, 8), Some(4));
        assert_eq!(u32_at(&btf.func_info, 12), Some(4));
        assert_eq!(btf.line_info.len(), 32);
    }

    #[test]
    fn the_kernels_structs_have_their_members() {
        let btf = KernelBtf::load().expect("the kernel's BTF, which shardrec's hosts have");
        // `struct list_head { next; prev; }` has never moved.
        assert_eq!(btf.member_offset("list_head", "prev").unwrap(), 8);
        assert!(btf.member_offset("perf_event", "id").unwrap() > 0);
        assert!(btf.member_offset("perf_event", "no_such_member").is_err());
        assert!(btf.func_id("bpf_cast_to_kern_ctx").unwrap() > 0);
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(TypeNames::parse(b"nope").is_err());
        let mut blob = for_functions(&[(0, "f")], "x").blob;
        blob.truncate(30);
        assert!(TypeNames::parse(&blob).is_err());
    }
}
