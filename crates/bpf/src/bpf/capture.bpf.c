// SPDX-License-Identifier: GPL-2.0
/*
 * Every BPF program captured as it is loaded, in the loader's own
 * bpf(2) call: the kernel calls bpf_prog_kallsyms_add() once the program
 * has its id, its JITed image and its line info, and before its
 * descriptor exists, so no loader can unload it first. Attached with
 * fentry where the kernel takes it, else with a kprobe (some kernels,
 * this project's CI host's among them, refuse every fentry program).
 *
 * For each program this writes to the ring buffer what
 * BPF_OBJ_GET_INFO_BY_FD would give of it, as perf asks for it: a
 * PROGRAM record (the info's scalar fields), for each function a HEADER
 * (id, tags, name, BTF id, address, JITed length) and its image in
 * chunks, then its func info, line info and JITed line info, and its BTF
 * (once per BTF object), in chunks. shardrec_bpf::capture reads them;
 * keep the two alike.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/* Bytes in one chunk, and chunks of one image or array at most. */
#define CHUNK 4096
#define MAX_CHUNKS 256
/* Sub-programs captured of one program, at most. */
#define MAX_FUNCS 64

enum record_kind { HEADER = 1, IMAGE = 2, PROGRAM = 3, ARRAY = 4 };

/* What an ARRAY chunk is part of. */
enum array_kind { FUNC_INFO = 0, LINE_INFO = 1, JITED_LINE_INFO = 2, BTF = 3 };

struct header {
	__u32 kind;
	__u32 id;
	__u8 tag[8];
	char name[16];
	__u32 btf_id;
	__u32 jited_len;
	/* Which function of the program this is: 0 the main one (or the
	 * only one), then each sub-program in the kernel's order. */
	__u32 func;
	__u32 func_cnt;
	/* Where its image is (its kernel symbol's address). */
	__u64 address;
	/* The function's own tag (`tag` is the program's). */
	__u8 func_tag[8];
};

/* The info's fields that are the program's, not its functions'. */
struct program {
	__u32 kind;
	__u32 id;
	__u32 type;
	__u32 gpl_compatible;
	__u64 load_time;
	__u32 created_by_uid;
	__u32 nr_map_ids;
	__u32 verified_insns;
	__u32 xlated_len;
	__u32 attach_btf_obj_id;
	__u32 attach_btf_id;
	__u32 nr_func_info;
	__u32 nr_line_info;
	__u32 nr_jited_line_info;
	/* Bytes of BTF that follow (0: its BTF object was sent before). */
	__u32 btf_size;
};

/* A piece of an image (`what`: the function) or of an array. */
struct chunk {
	__u32 kind;
	__u32 id;
	__u32 what;
	__u32 offset;
	__u32 len;
	__u32 pad;
	__u8 bytes[CHUNK];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} captured SEC(".maps");

/* BTF objects already sent: a program's BTF is often its neighbours'. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u8));
	__uint(max_entries, 4096);
} btf_sent SEC(".maps");

/* Records the ring buffer had no room for. */
__u64 lost;

/* What copy_chunk needs of one image or array. */
struct chunk_walk {
	__u64 source;
	__u32 len;
	__u32 id;
	__u32 what;
	__u32 kind;
};

/* bpf_loop's callback: chunk `index` of an image or array; 1 stops. */
static long copy_chunk(__u32 index, struct chunk_walk *walk)
{
	__u32 offset = index * CHUNK;
	struct chunk *piece;
	__u32 len, size;

	if (offset >= walk->len)
		return 1;
	piece = bpf_ringbuf_reserve(&captured, sizeof(*piece), 0);
	if (!piece) {
		__sync_fetch_and_add(&lost, 1);
		return 1;
	}
	len = walk->len - offset < CHUNK ? walk->len - offset : CHUNK;
	piece->kind = walk->kind;
	piece->id = walk->id;
	piece->what = walk->what;
	piece->offset = offset;
	piece->len = len;
	piece->pad = 0;
	/*
	 * Exactly the bytes that are the array's (a last chunk ends early):
	 * its length masked on the register the call takes, which the
	 * verifier needs to see bounded (clang would otherwise pass its
	 * unmasked copy, knowing the mask changes nothing).
	 */
	size = len;
	barrier_var(size);
	size &= CHUNK - 1;
	if (len == CHUNK) {
		if (bpf_probe_read_kernel(piece->bytes, CHUNK, (void *)(walk->source + offset)))
			piece->len = 0;
	} else if (bpf_probe_read_kernel(piece->bytes, size, (void *)(walk->source + offset))) {
		piece->len = 0;
	}
	bpf_ringbuf_submit(piece, 0);
	return 0;
}

/* Sends `len` bytes at `source` as chunks of `kind`. */
static void send_bytes(__u32 kind, __u32 id, __u32 what, const void *source, __u32 len)
{
	struct chunk_walk walk = {
		.source = (__u64)source,
		.len = len,
		.id = id,
		.what = what,
		.kind = kind,
	};

	if (source && len)
		bpf_loop(MAX_CHUNKS, copy_chunk, &walk, 0);
}

/* What capture_nth needs of one program. */
struct function_walk {
	struct bpf_prog **funcs;
	__u32 id;
	__u32 func_cnt;
	__u32 btf_id;
	/* The program's name and tag: a sub-program has its own tag and
	 * no name; a program is known by its own. */
	char name[16];
	__u8 tag[8];
};

static void capture_function(struct bpf_prog *prog, struct function_walk *program, __u32 func)
{
	void *image = BPF_CORE_READ(prog, bpf_func);
	__u32 len = BPF_CORE_READ(prog, jited_len);
	struct header *header;

	header = bpf_ringbuf_reserve(&captured, sizeof(*header), 0);
	if (!header) {
		__sync_fetch_and_add(&lost, 1);
		return;
	}
	header->kind = HEADER;
	header->id = program->id;
	__builtin_memcpy(header->tag, program->tag, sizeof(header->tag));
	__builtin_memcpy(header->name, program->name, sizeof(header->name));
	header->btf_id = program->btf_id;
	header->jited_len = len;
	header->func = func;
	header->func_cnt = program->func_cnt;
	header->address = (__u64)image;
	BPF_CORE_READ_INTO(&header->func_tag, prog, tag);
	bpf_ringbuf_submit(header, 0);
	send_bytes(IMAGE, program->id, func, image, len);
}

/* bpf_loop's callback: the program's function `index`; 1 stops. */
static long capture_nth(__u32 index, struct function_walk *walk)
{
	struct bpf_prog *func = NULL;

	if (index >= walk->func_cnt)
		return 1;
	bpf_probe_read_kernel(&func, sizeof(func), &walk->funcs[index]);
	if (func)
		capture_function(func, walk, index);
	return 0;
}

/* Whether the BTF object `id` is to be sent with this program. */
static bool first_sight_of_btf(__u32 id)
{
	__u8 yes = 1;

	return id && !bpf_map_update_elem(&btf_sent, &id, &yes, BPF_NOEXIST);
}

/* The PROGRAM record; returns the bytes of BTF to send after it. */
static __u32 capture_program(struct bpf_prog *prog, struct bpf_prog_aux *aux, __u32 id,
			     __u32 btf_id)
{
	struct program *program;
	__u32 btf_size = 0;

	program = bpf_ringbuf_reserve(&captured, sizeof(*program), 0);
	if (!program) {
		__sync_fetch_and_add(&lost, 1);
		return 0;
	}
	if (first_sight_of_btf(btf_id))
		btf_size = BPF_CORE_READ(aux, btf, data_size);
	program->kind = PROGRAM;
	program->id = id;
	program->type = BPF_CORE_READ(prog, type);
	program->gpl_compatible = BPF_CORE_READ_BITFIELD_PROBED(prog, gpl_compatible);
	program->load_time = BPF_CORE_READ(aux, load_time);
	program->created_by_uid = BPF_CORE_READ(aux, user, uid.val);
	program->nr_map_ids = BPF_CORE_READ(aux, used_map_cnt);
	program->verified_insns = BPF_CORE_READ(aux, verified_insns);
	program->xlated_len = BPF_CORE_READ(prog, len) * 8;
	program->attach_btf_obj_id = BPF_CORE_READ(aux, attach_btf, id);
	program->attach_btf_id = BPF_CORE_READ(aux, attach_btf_id);
	program->nr_func_info = BPF_CORE_READ(aux, func_info_cnt);
	program->nr_line_info = BPF_CORE_READ(aux, nr_linfo);
	program->nr_jited_line_info = BPF_CORE_READ(aux, jited_linfo) ? program->nr_line_info : 0;
	program->btf_size = btf_size;
	bpf_ringbuf_submit(program, 0);
	return btf_size;
}

/* Everything of the program being added: the program, its functions,
 * its arrays and its BTF. */
static void capture(struct bpf_prog *prog)
{
	struct bpf_prog_aux *aux = BPF_CORE_READ(prog, aux);
	struct function_walk walk = {
		.funcs = BPF_CORE_READ(aux, func),
		.id = BPF_CORE_READ(aux, id),
		.func_cnt = BPF_CORE_READ(aux, func_cnt),
		.btf_id = BPF_CORE_READ(aux, btf, id),
	};
	__u32 lines, btf_size;

	/*
	 * The verifier adds each sub-program's symbols first, before the
	 * program has an id: those calls are left out, the program's own
	 * (with its id) captures every function.
	 */
	if (!walk.id)
		return;
	btf_size = capture_program(prog, aux, walk.id, walk.btf_id);
	BPF_CORE_READ_STR_INTO(&walk.name, aux, name);
	BPF_CORE_READ_INTO(&walk.tag, prog, tag);
	if (!walk.func_cnt || !walk.funcs)
		capture_function(prog, &walk, 0);
	else
		bpf_loop(MAX_FUNCS, capture_nth, &walk, 0);
	lines = BPF_CORE_READ(aux, nr_linfo);
	send_bytes(ARRAY, walk.id, FUNC_INFO, BPF_CORE_READ(aux, func_info),
		   BPF_CORE_READ(aux, func_info_cnt) * 8);
	send_bytes(ARRAY, walk.id, LINE_INFO, BPF_CORE_READ(aux, linfo), lines * 16);
	send_bytes(ARRAY, walk.id, JITED_LINE_INFO, BPF_CORE_READ(aux, jited_linfo), lines * 8);
	send_bytes(ARRAY, walk.id, BTF, BPF_CORE_READ(aux, btf, data), btf_size);
}

SEC("fentry/bpf_prog_kallsyms_add")
int BPF_PROG(capture_fentry, struct bpf_prog *prog)
{
	capture(prog);
	return 0;
}

SEC("kprobe/bpf_prog_kallsyms_add")
int BPF_KPROBE(capture_kprobe, struct bpf_prog *prog)
{
	capture(prog);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
