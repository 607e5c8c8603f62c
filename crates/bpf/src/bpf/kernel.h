/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The few kernel types shardrec's BPF programs read, with
 * preserve_access_index: libbpf relocates each field access to where the
 * running kernel's BTF puts it (CO-RE), so no vmlinux.h of one kernel
 * is needed to build them.
 */
#ifndef SHARDREC_KERNEL_H
#define SHARDREC_KERNEL_H
/* This stands in for vmlinux.h: libbpf's headers then name the kernel's
 * struct pt_regs fields (di, si), not user space's (rdi, rsi). */
#define __VMLINUX_H__

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed int __s32;
typedef signed long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;
typedef _Bool bool;
#define true 1
#define false 0

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERF_EVENT_ARRAY = 4,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_STACK_TRACE = 7,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
	BPF_F_NO_PREALLOC = 1,
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
	BPF_F_USER_STACK = 256,
};

#define BPF_F_CURRENT_CPU 0xffffffffULL

struct task_struct {
	unsigned int __state;
	int pid;
	int tgid;
	struct task_struct *real_parent;
} __attribute__((preserve_access_index));

struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
} __attribute__((preserve_access_index));

struct btf {
	__u32 id;
	/* The raw BTF, as BPF_OBJ_GET_INFO_BY_FD gives it. */
	void *data;
	__u32 data_size;
} __attribute__((preserve_access_index));

typedef struct {
	__u32 val;
} kuid_t;

struct user_struct {
	kuid_t uid;
} __attribute__((preserve_access_index));

/* Only copied, as bytes: struct bpf_func_info, struct bpf_line_info. */
struct bpf_func_info;
struct bpf_line_info;

struct bpf_prog;

struct bpf_prog_aux {
	__u32 id;
	__u32 func_cnt;
	char name[16];
	struct bpf_prog **func;
	struct btf *btf;
	__u64 load_time;
	struct user_struct *user;
	__u32 used_map_cnt;
	__u32 verified_insns;
	struct btf *attach_btf;
	__u32 attach_btf_id;
	struct bpf_func_info *func_info;
	__u32 func_info_cnt;
	struct bpf_line_info *linfo;
	__u32 nr_linfo;
	void **jited_linfo;
} __attribute__((preserve_access_index));

/* Read as a number; declared as the kernel's enum, which CO-RE matches. */
enum bpf_prog_type {
	BPF_PROG_TYPE_UNSPEC = 0,
};

struct bpf_prog {
	__u16 gpl_compatible:1;
	enum bpf_prog_type type;
	__u32 len;
	__u32 jited_len;
	__u8 tag[8];
	struct bpf_prog_aux *aux;
	void *bpf_func;
} __attribute__((preserve_access_index));

#endif
