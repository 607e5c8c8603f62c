// SPDX-License-Identifier: GPL-2.0
/*
 * Every BPF program captured as it is loaded, in the loader's own
 * bpf(2) call: the kernel calls bpf_prog_kallsyms_add() once the program
 * has its id and its JITed image, and before its descriptor exists, so no
 * loader can unload it first. A kprobe, not fentry: some kernels (this
 * project's CI host among them) refuse every fentry program (EPERM at
 * load) but take kprobes.
 *
 * For each program (and each of its sub-programs) this writes to the ring
 * buffer a header (the program's id, tag, name, BTF id, its JITed length
 * and its sub-program count), then its JITed image in chunks.
 * shardrec_bpf::capture reads them; keep the two alike.
 */
#include "kernel.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

/* Bytes of image in one chunk, and chunks of one function at most. */
#define CHUNK 4096
#define MAX_CHUNKS 256
/* Sub-programs captured of one program, at most. */
#define MAX_FUNCS 64

enum record_kind { HEADER = 1, IMAGE = 2 };

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
};

struct image {
	__u32 kind;
	__u32 id;
	__u32 func;
	__u32 offset;
	__u32 len;
	__u32 pad;
	__u8 bytes[CHUNK];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} captured SEC(".maps");

/* Programs the ring buffer had no room for. */
__u64 lost;

/* What copy_chunk needs of one function. */
struct chunk_walk {
	__u64 image;
	__u32 len;
	__u32 id;
	__u32 func;
};

/* bpf_loop's callback: chunk `index` of a function's image; 1 stops. */
static long copy_chunk(__u32 index, struct chunk_walk *walk)
{
	__u32 offset = index * CHUNK;
	struct image *piece;

	if (offset >= walk->len)
		return 1;
	piece = bpf_ringbuf_reserve(&captured, sizeof(*piece), 0);
	if (!piece) {
		__sync_fetch_and_add(&lost, 1);
		return 1;
	}
	piece->kind = IMAGE;
	piece->id = walk->id;
	piece->func = walk->func;
	piece->offset = offset;
	piece->len = walk->len - offset < CHUNK ? walk->len - offset : CHUNK;
	piece->pad = 0;
	/* A last chunk that ends on an unmapped page is read to its end only. */
	if (bpf_probe_read_kernel(piece->bytes, CHUNK, (void *)(walk->image + offset)) &&
	    bpf_probe_read_kernel(piece->bytes, piece->len & (CHUNK - 1),
				  (void *)(walk->image + offset)))
		piece->len = 0;
	bpf_ringbuf_submit(piece, 0);
	return 0;
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
	__u32 id = program->id;
	struct chunk_walk walk = {
		.image = (__u64)BPF_CORE_READ(prog, bpf_func),
		.len = BPF_CORE_READ(prog, jited_len),
		.id = id,
		.func = func,
	};
	struct header *header;

	header = bpf_ringbuf_reserve(&captured, sizeof(*header), 0);
	if (!header) {
		__sync_fetch_and_add(&lost, 1);
		return;
	}
	header->kind = HEADER;
	header->id = id;
	__builtin_memcpy(header->tag, program->tag, sizeof(header->tag));
	__builtin_memcpy(header->name, program->name, sizeof(header->name));
	header->btf_id = program->btf_id;
	header->jited_len = walk.len;
	header->func = func;
	header->func_cnt = program->func_cnt;
	bpf_ringbuf_submit(header, 0);
	bpf_loop(MAX_CHUNKS, copy_chunk, &walk, 0);
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

SEC("kprobe/bpf_prog_kallsyms_add")
int BPF_KPROBE(capture_on_load, struct bpf_prog *prog)
{
	struct bpf_prog_aux *aux = BPF_CORE_READ(prog, aux);
	struct function_walk walk = {
		.funcs = BPF_CORE_READ(aux, func),
		.id = BPF_CORE_READ(aux, id),
		.func_cnt = BPF_CORE_READ(aux, func_cnt),
		.btf_id = BPF_CORE_READ(aux, btf, id),
	};

	/*
	 * The verifier adds each sub-program's symbols first, before the
	 * program has an id: those calls are left out, the program's own
	 * (with its id) captures every function.
	 */
	if (!walk.id)
		return 0;
	BPF_CORE_READ_STR_INTO(&walk.name, aux, name);
	BPF_CORE_READ_INTO(&walk.tag, prog, tag);
	if (!walk.func_cnt || !walk.funcs)
		capture_function(prog, &walk, 0);
	else
		bpf_loop(MAX_FUNCS, capture_nth, &walk, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
