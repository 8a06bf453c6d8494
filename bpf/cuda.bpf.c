// SPDX-License-Identifier: GPL-2.0 OR MIT
/*
 * CUDA driver API telemetry and the synchronous GPU memory limit: uprobes on libcuda.so.1.
 * Processes are members of a task through the membership map "procs" (bpf/member_types.h):
 * on a node with the metering programs it is theirs, reused by fd (their fork and exit
 * programs keep it; this object's are not loaded), else this object's own with its own fork and
 * exit programs (cuda_opts.share_members). The entry probe
 * of an allocation reserves its size against the task's limit and, when the reservation would
 * exceed it, sends SIGKILL to the calling process before the allocation runs (bpf_send_signal
 * acts on current; the signal is taken on the way back to user space, so the call never
 * executes). The return probe records (tgid, device pointer) -> size or undoes the reservation
 * on failure. Sizes are what the application asked for, not the driver's rounding.
 */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/cuda_types.h"
#include "bpf/member_types.h"

#define SIGKILL	     9
#define CUDA_SUCCESS 0

char LICENSE[] SEC("license") = "Dual MIT/GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); /* set by the loader */
	__type(key, __u64);
	__type(value, struct cuda_task);
} tasks SEC(".maps");

/*
 * Per task with a limit: resident GPU memory its allocations do not account for (the CUDA
 * contexts, mostly), measured by user space from NVML on each tick. Counted against the limit
 * with the allocations, so the synchronous check and the NVML watchdog limit the same thing.
 * A map of its own: user space writes it while the programs update the task's counters.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024); /* set by the loader */
	__type(key, __u64);
	__type(value, __u64);
} overheads SEC(".maps");

/* Membership (key: TGID): the meter's map, or this object's own (see above). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct member);
} procs SEC(".maps");

/*
 * A process's share of its task's tracked bytes (key: TGID), made at its first allocation and
 * released when its leader exits: the only per-process state of this object, so an exit costs
 * a counter read while no process holds GPU memory through the API.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct cuda_proc);
} pbytes SEC(".maps");

/* Entries in "pbytes" (incremented before an insert, decremented after a delete). */
__s64 pbytes_n;
/* Set by the loader when "procs" is this object's own: its exit program deletes entries. */
const volatile __u32 own_members = 0;

static __always_inline struct member *current_proc(__u32 *tgid)
{
	*tgid = bpf_get_current_pid_tgid() >> 32;
	return bpf_map_lookup_elem(&procs, tgid);
}

/* Adds delta to process tgid's share (made on first use when delta > 0). */
static __always_inline void share_add(__u32 tgid, __u64 task_key, __s64 delta)
{
	struct cuda_proc *pb = bpf_map_lookup_elem(&pbytes, &tgid);

	if (!pb && delta > 0) {
		struct cuda_proc np = {.task_key = task_key};

		__sync_fetch_and_add(&pbytes_n, 1);
		if (bpf_map_update_elem(&pbytes, &tgid, &np, BPF_NOEXIST))
			__sync_fetch_and_add(&pbytes_n, -1);
		pb = bpf_map_lookup_elem(&pbytes, &tgid);
	}
	if (pb && pb->task_key == task_key)
		__sync_fetch_and_add(&pb->tracked_bytes, delta);
}

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__type(key, struct cuda_alloc_key);
	__type(value, struct cuda_alloc);
} allocs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct cuda_pending);
} pending SEC(".maps");

static __always_inline int alloc_enter(__u64 dptr_uaddr, __u64 size, __u64 pitch_uaddr,
				       __u64 height)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct cuda_pending pe = {};
	struct member *p;
	struct cuda_task *t;
	__u64 *overhead, extra = 0;
	__u32 tgid;
	__s64 before;

	p = current_proc(&tgid);
	if (!p)
		return 0;
	t = bpf_map_lookup_elem(&tasks, &p->task_key);
	if (!t)
		return 0;
	if (t->limit_bytes) {
		overhead = bpf_map_lookup_elem(&overheads, &p->task_key);
		if (overhead)
			extra = *overhead;
	}
	before = __sync_fetch_and_add(&t->tracked_bytes, (__s64)size);
	if (t->limit_bytes && (__u64)before + size + extra > t->limit_bytes) {
		__sync_fetch_and_add(&t->tracked_bytes, -(__s64)size);
		__sync_fetch_and_add(&t->limit_fired, 1);
		t->killed_tgid = tgid;
		t->killed_request_bytes = size;
		bpf_send_signal(SIGKILL);
		return 0;
	}
	share_add(tgid, p->task_key, (__s64)size);
	pe.task_key = p->task_key;
	pe.size = size;
	pe.dptr_uaddr = dptr_uaddr;
	pe.pitch_uaddr = pitch_uaddr;
	pe.height = height;
	if (bpf_map_update_elem(&pending, &id, &pe, BPF_ANY)) {
		/* Cannot follow the call: keep the reservation (the limit stays safe). */
		__sync_fetch_and_add(&t->untracked, 1);
	}
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(mem_alloc, __u64 dptr_uaddr, __u64 size)
{
	return alloc_enter(dptr_uaddr, size, 0, 0);
}

/* cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes): the pitch is known
 * only on return; the entry reserves WidthInBytes * Height (pitch >= width). */
SEC("uprobe")
int BPF_KPROBE(mem_alloc_pitch, __u64 dptr_uaddr, __u64 pitch_uaddr, __u64 width, __u64 height)
{
	return alloc_enter(dptr_uaddr, width * height, pitch_uaddr, height);
}

SEC("uretprobe")
int BPF_KRETPROBE(mem_alloc_ret, int rc)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct cuda_alloc_key k = {.tgid = tgid};
	struct cuda_alloc a = {};
	struct cuda_pending *pp, pe;
	struct cuda_task *t;
	__u64 pitch = 0;
	__s64 cur;

	pp = bpf_map_lookup_elem(&pending, &id);
	if (!pp)
		return 0;
	pe = *pp;
	bpf_map_delete_elem(&pending, &id);
	t = bpf_map_lookup_elem(&tasks, &pe.task_key);
	if (!t)
		return 0;
	if (rc != CUDA_SUCCESS ||
	    bpf_probe_read_user(&k.dptr, sizeof(k.dptr), (void *)pe.dptr_uaddr)) {
		__sync_fetch_and_add(&t->tracked_bytes, -(__s64)pe.size);
		share_add(tgid, pe.task_key, -(__s64)pe.size);
		return 0;
	}
	if (pe.pitch_uaddr && !bpf_probe_read_user(&pitch, sizeof(pitch), (void *)pe.pitch_uaddr) &&
	    pitch * pe.height > pe.size) {
		__u64 extra = pitch * pe.height - pe.size;
		__sync_fetch_and_add(&t->tracked_bytes, (__s64)extra);
		share_add(tgid, pe.task_key, (__s64)extra);
		pe.size += extra;
	}
	a.task_key = pe.task_key;
	a.size = pe.size;
	if (bpf_map_update_elem(&allocs, &k, &a, BPF_ANY))
		__sync_fetch_and_add(&t->untracked, 1);
	__sync_fetch_and_add(&t->alloc_bytes, pe.size);
	__sync_fetch_and_add(&t->alloc_calls, 1);
	cur = t->tracked_bytes;
	if (cur > 0 && (__u64)cur > t->peak_bytes)
		t->peak_bytes = cur; /* racy across threads by at most one allocation */
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(mem_free, __u64 dptr)
{
	struct cuda_alloc_key k = {.tgid = bpf_get_current_pid_tgid() >> 32, .dptr = dptr};
	struct cuda_alloc *a;
	struct cuda_task *t;
	__u64 size, key;

	a = bpf_map_lookup_elem(&allocs, &k);
	if (!a)
		return 0;
	size = a->size;
	key = a->task_key;
	t = bpf_map_lookup_elem(&tasks, &key);
	bpf_map_delete_elem(&allocs, &k);
	if (!t)
		return 0;
	__sync_fetch_and_add(&t->tracked_bytes, -(__s64)size);
	__sync_fetch_and_add(&t->free_bytes, size);
	__sync_fetch_and_add(&t->free_calls, 1);
	share_add(k.tgid, key, -(__s64)size);
	return 0;
}

static __always_inline struct cuda_task *current_task(void)
{
	struct member *p;
	__u32 tgid;

	p = current_proc(&tgid);
	return p ? bpf_map_lookup_elem(&tasks, &p->task_key) : NULL;
}

SEC("uprobe")
int BPF_KPROBE(launch_kernel)
{
	struct cuda_task *t = current_task();

	if (t)
		__sync_fetch_and_add(&t->launches, 1);
	return 0;
}

/* cuMemcpyHtoD_v2(dst, src, ByteCount) and the Async variant (same first three arguments). */
SEC("uprobe")
int BPF_KPROBE(memcpy_htod, __u64 dst, __u64 src, __u64 n)
{
	struct cuda_task *t = current_task();

	if (t)
		__sync_fetch_and_add(&t->htod_bytes, n);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(memcpy_dtoh, __u64 dst, __u64 src, __u64 n)
{
	struct cuda_task *t = current_task();

	if (t)
		__sync_fetch_and_add(&t->dtoh_bytes, n);
	return 0;
}

/*
 * Without the meter's membership map only (own_members): new processes of a tracked task are
 * tracked (threads share their TGID's entry). Not loaded otherwise.
 */
SEC("raw_tp/sched_process_fork")
int BPF_PROG(cuda_fork, struct task_struct *parent, struct task_struct *child)
{
	struct member *pp, np = {};
	__u32 ptgid = bpf_get_current_pid_tgid() >> 32;
	__u32 cpid = BPF_CORE_READ(child, pid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);

	if (cpid != ctgid)
		return 0;
	pp = bpf_map_lookup_elem(&procs, &ptgid);
	if (!pp)
		return 0;
	np.task_key = pp->task_key;
	bpf_map_update_elem(&procs, &ctgid, &np, BPF_NOEXIST);
	return 0;
}

/*
 * A process's allocations die with it: release its share when its leader exits (and, with a
 * membership map of its own, its entry). With the meter's map, the meter's exit program drops
 * the entry; while no process holds a share, an exit reads one counter.
 */
SEC("raw_tp/sched_process_exit")
int BPF_PROG(cuda_exit)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct cuda_proc *pb;
	struct cuda_task *t;
	__u64 key;

	if ((__u32)id != tgid)
		return 0;
	if (own_members)
		bpf_map_delete_elem(&procs, &tgid);
	if (pbytes_n <= 0)
		return 0;
	pb = bpf_map_lookup_elem(&pbytes, &tgid);
	if (!pb)
		return 0;
	key = pb->task_key;
	t = bpf_map_lookup_elem(&tasks, &key);
	if (t)
		__sync_fetch_and_add(&t->tracked_bytes,
				     -__sync_lock_test_and_set(&pb->tracked_bytes, 0));
	if (!bpf_map_delete_elem(&pbytes, &tgid))
		__sync_fetch_and_add(&pbytes_n, -1);
	return 0;
}
