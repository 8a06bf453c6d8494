// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Per-task metering, kernel side. See docs/metering.md.
 *
 * Every tracepoint program exists twice: a tp_btf variant and a raw_tp variant with the same
 * body. The loader keeps one set (bpf_program__set_autoload) after a load probe. Bodies read
 * kernel memory with BPF_CORE_READ only, so they are valid in both program types.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "bpf/meter_types.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define PF_IDLE		  0x00000002
#define TASK_DEAD_STATE	  0x00000080
#define PF_EXITING	  0x00000004
#define SIGNAL_GROUP_EXIT 0x00000004
#define SIGNAL_UNKILLABLE 0x00000040
#define REQ_OP_MASK	  0xff
#define E2BIG		  7

/* Map sizes are placeholders: the loader sets them from meter_opts before load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct meter_task);
} tasks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct member);
} procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 131072);
	__type(key, __u32);
	__type(value, struct meter_thread);
} threads SEC(".maps");

/* Per-CPU counters of the sched_switch path, one element per task slot (see meter_types.h). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct meter_slot);
} slots SEC(".maps");

/* tp_btf mode keeps per-thread entries in task local storage instead of "threads". */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct meter_thread);
} tstore SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct meter_mm);
} mms SEC(".maps");

/*
 * tp_btf, per CPU: the values of one address space's counters (rss_stat members 0, 1, 3) that
 * an event on this CPU last wrote to, or found equal in, its "mms" entry (-1: none yet), and
 * the last address space whose entry an exit or exec on this CPU released. An address space
 * is its address with the kernel's identifier of the instance (x86 mm->context.ctx_id, never
 * reused), so a freed mm whose address is reused is another one. The values hold while
 * rss_gen is what it was then: it is bumped before any "mms" entry is made, so none of them
 * is a value of an older entry of the same mm. An own change that finds its member at that
 * value, or a change in the teardown of a released mm, stops there, without the thread's
 * storage. See rss_fast.
 */
struct meter_rss_cpu {
	__u64 mm, ctx, gen;
	__s64 seen[3];
	__u64 gone_mm, gone_ctx;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct meter_rss_cpu);
} rss_cpu SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct meter_net);
} net SEC(".maps");

/*
 * One mark per task slot (index: the slot; the loader sizes it), set to 1 by every program
 * that changes one of the task's counters, after the change; user space maps it, takes a mark
 * (atomic exchange with 0) before it reads the task's counters and reads only the tasks whose
 * mark is set: a task whose mark stays 0 has not changed since that read. See
 * docs/metering.md, "What changed".
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64); /* an array's elements are 8 bytes apart whatever their size */
} dirty SEC(".maps");

/* Plain store, after the counters' (atomic) updates: see "dirty". */
static __always_inline void dirty_set(__u32 slot)
{
	__u64 *d = bpf_map_lookup_elem(&dirty, &slot);

	if (d)
		*(volatile __u64 *)d = 1;
}

static __always_inline void task_dirty(struct meter_task *t)
{
	if (t)
		dirty_set(t->slot);
}

/* cpu_at_exit mode: exited threads whose last switch-out may still be ahead (meter_dying). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct meter_dying);
} dying SEC(".maps");

/*
 * cpu_at_exit mode: per CPU (index: the CPU; the loader sizes it), a reference to the last thread
 * whose exit ran on this CPU. The next exit here takes it out and settles it: it is off its CPU
 * for good by then (it almost always is: it ended its exit path before this CPU ran the next
 * one's); one that is not yet goes to "dying". So an exit costs no hash operation in the common
 * case, and "dying" holds only the rare thread that was not done; meter_settle_prog looks at
 * both.
 */
struct meter_recent {
	struct task_struct __kptr *task;
	/* a bare thread's task key, slot and generation (gen 0: a thread with its entry) */
	__u64 task_key;
	__u32 slot, gen;
	/* 1 while a program moves the reference and these three together (see stash_recent) */
	__u32 busy;
	__u32 _pad;
};

/*
 * Accounting at exit: a thread created in a process whose threads all started inside its task
 * (MEMBER_BARE_THREADS) gets no entry of its own, a "bare" thread: its totals started at zero
 * at its creation, so its exit folds them whole, and only its task's threads_live counts it
 * (at its creation). What its settle needs, an entry would have had: the task, slot and
 * generation, carried with the reference (recent, dying). A live read gives a running bare
 * thread an entry (a zero base, folded up to now through it: walk_bare), and every final fold
 * looks for one first, so no nanosecond is folded twice. See docs/metering.md, "Threads".
 */
struct meter_bare {
	__u64 task_key;
	__u32 slot, gen;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct meter_recent);
} recent SEC(".maps");

/* Weak: before Linux 6.2 they do not exist, and only the programs of accounting at exit
 * call them. */
extern struct task_struct *bpf_task_acquire(struct task_struct *p) __ksym __weak;
extern void bpf_task_release(struct task_struct *p) __ksym __weak;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);
} events SEC(".maps");

const volatile __u64 page_size = 4096;
/* IO bytes from task->ioac at each switch (default), or from sys_exit when 0. */
const volatile __u32 io_from_ioac = 1;
/*
 * CPU and IO of each thread folded at its exit and, exactly, after its last switch-out
 * (meter_settle), instead of at every sched_switch (which is then not attached). tp_btf only.
 * See docs/metering.md, "Accounting at exit".
 */
const volatile __u32 cpu_at_exit = 0;

/* Read by user space through the mmaped .bss. */
__u64 ringbuf_drops;
__u64 map_full;
/* cpu_at_exit: threads whose tail after their exit was lost ("dying" full). */
__u64 tail_lost;
/* cpu_at_exit: entries in "dying" and filled "recent" slots (+1 by whoever adds one or fills
 * one, -1 by whoever deletes or empties one), and whether a drain request is pending (set by
 * BPF with the event, cleared by user space). */
__s64 dying_n;
__u32 drain_wanted;
/* cpu_at_exit: max_entries of "dying"; past a quarter of it the exit program asks for a drain. */
const volatile __u32 dying_max = 1024;
/* Tests (meter_opts.no_drain): the exit program settles nothing itself. */
const volatile __u32 self_drain = 1;
/*
 * Set by user space when it tracks a process that may already have several threads: then a
 * switch-in without task storage also looks the thread's process up in "procs" (the slow
 * path). Otherwise (tp_btf) every tracked thread gets its storage at fork or from user space,
 * and an untracked thread costs one storage lookup per switch, no hash lookup.
 */
__u32 lazy_threads;
/*
 * Thread entries made by user space (METER_TH_NEED_BASE) that have not taken their base yet:
 * incremented by user space before it makes one, decremented when BPF takes the base. While
 * it is 0 (and lazy_threads too), sched_switch does not look at the incoming thread at all.
 */
__s64 need_base;
/* cpu_at_exit: entries given to bare threads by live reads (walk_bare; also its barrier). */
__u64 bare_given;
/* tp_btf: bumped before every "mms" entry BPF makes (see meter_rss_cpu). */
__u64 rss_gen;

/*
 * RD(btf, ptr, field): a direct load in tp_btf programs (trusted BTF pointers: a plain load,
 * no helper call), BPF_CORE_READ in raw_tp programs. btf is a compile-time constant in every
 * caller (the bodies are always_inline), so the other branch never reaches the verifier.
 */
#define RD(btf, p, f) ((btf) ? (p)->f : BPF_CORE_READ(p, f))

static __always_inline struct meter_task *task_of_current(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct member *p = bpf_map_lookup_elem(&procs, &tgid);

	if (!p || !p->gen)
		return NULL; /* not a member, or one the meter does not account */
	return bpf_map_lookup_elem(&tasks, &p->task_key);
}

/* ---- CPU ---------------------------------------------------------------------------------- */

/* Start a thread's accounting from its current totals. */
static __always_inline void take_base(struct meter_thread *th, struct task_struct *tsk,
				      const bool btf)
{
	if (th->flags & METER_TH_NEED_BASE)
		__sync_fetch_and_add(&need_base, -1);
	th->sum_exec = RD(btf, tsk, se.sum_exec_runtime);
	th->utime = RD(btf, tsk, utime);
	th->stime = RD(btf, tsk, stime);
	th->flags = 0;
	if (!io_from_ioac)
		return;
	if (btf) {
		th->rchar = tsk->ioac.rchar;
		th->wchar = tsk->ioac.wchar;
		th->read_bytes = tsk->ioac.read_bytes;
		th->write_bytes = tsk->ioac.write_bytes;
		th->cancelled = tsk->ioac.cancelled_write_bytes;
	} else {
		struct task_io_accounting io;

		if (bpf_core_read(&io, sizeof(io), &tsk->ioac))
			return;
		th->rchar = io.rchar;
		th->wchar = io.wchar;
		th->read_bytes = io.read_bytes;
		th->write_bytes = io.write_bytes;
		th->cancelled = io.cancelled_write_bytes;
	}
}

/* *acc += cur - *last (when the counter moved forward); *last = cur. */
#define FOLD(acc, last, cur)                                                                       \
	do {                                                                                       \
		__u64 __c = (cur);                                                                 \
		if (__c > (last))                                                                  \
			(acc) += __c - (last);                                                     \
		(last) = __c;                                                                      \
	} while (0)

/*
 * Advance *last to cur and return what was claimed, atomically: in this mode a thread's
 * totals are folded from several contexts that may run at once or nest on one CPU (its exit,
 * the live-read iterator, meter_settle), so every delta is claimed with cmpxchg and added with
 * an atomic add: each nanosecond counts once.
 */
static __always_inline __u64 claim(__u64 *last, __u64 cur)
{
	for (int i = 0; i < 8; i++) {
		__u64 old = *(volatile __u64 *)last;

		if (cur <= old)
			return 0;
		if (__sync_val_compare_and_swap(last, old, cur) == old)
			return cur - old;
	}
	return 0;
}

#define AFOLD(acc, last, cur)                                                                      \
	do {                                                                                       \
		__u64 __d = claim(&(last), (cur));                                                 \
		if (__d)                                                                           \
			__sync_fetch_and_add(&(acc), __d);                                         \
	} while (0)

/* FOLD, or AFOLD where the thread may be folded from several contexts at once (atomic). */
#define FOLDX(atomic, acc, last, cur)                                                              \
	do {                                                                                       \
		if (atomic)                                                                        \
			AFOLD(acc, last, cur);                                                     \
		else                                                                               \
			FOLD(acc, last, cur);                                                      \
	} while (0)

/*
 * Account what thread tsk ran since it was last accounted: the delta of se.sum_exec_runtime,
 * which update_curr() has brought up to date before trace_sched_switch. These are the very
 * deltas the scheduler charges to cpuacct / cpu.stat, so a missed event loses nothing: the
 * next one catches up. utime/stime deltas (tick-sampled) only feed the user/system ratio.
 * The deltas go to this CPU's element of the task's slot with plain adds: the callers
 * (sched_switch, sched_process_exit) run with preemption off and never nest on one CPU.
 * With accounting at exit (atomic, tp_btf only) the exit program, the live-read iterator and
 * meter_settle may fold one thread at once: deltas are claimed and added atomically, and an
 * entry waiting for its base (a re-adopted process's thread) is based once.
 * Returns false when the thread's task is gone (slot given back or to another task).
 */
static __always_inline bool slice_end(struct meter_thread *th, struct task_struct *tsk,
				      const bool btf, const bool atomic)
{
	__u32 slot = th->slot;
	struct meter_slot *a;

	if (th->flags & METER_TH_NEED_BASE) {
		if (!atomic ||
		    (__sync_fetch_and_and(&th->flags, ~METER_TH_NEED_BASE) & METER_TH_NEED_BASE))
			take_base(th, tsk, btf);
		return true;
	}
	a = bpf_map_lookup_elem(&slots, &slot);
	if (!a || a->gen != th->gen)
		return false;
	FOLDX(atomic, a->cpu_ns, th->sum_exec, RD(btf, tsk, se.sum_exec_runtime));
	FOLDX(atomic, a->utime_ticks_ns, th->utime, RD(btf, tsk, utime));
	FOLDX(atomic, a->stime_ticks_ns, th->stime, RD(btf, tsk, stime));
	if (!io_from_ioac) {
		dirty_set(slot);
		return true;
	}
	/* The kernel's own per-thread IO accounting, the source of /proc/PID/io. */
	if (btf) {
		FOLDX(atomic, a->io_read_bytes, th->rchar, tsk->ioac.rchar);
		FOLDX(atomic, a->io_write_bytes, th->wchar, tsk->ioac.wchar);
		FOLDX(atomic, a->blk_read_bytes, th->read_bytes, tsk->ioac.read_bytes);
		FOLDX(atomic, a->blk_write_bytes, th->write_bytes, tsk->ioac.write_bytes);
		FOLDX(atomic, a->blk_cancelled_bytes, th->cancelled,
		      tsk->ioac.cancelled_write_bytes);
	} else {
		struct task_io_accounting io;

		if (!bpf_core_read(&io, sizeof(io), &tsk->ioac)) {
			FOLD(a->io_read_bytes, th->rchar, io.rchar);
			FOLD(a->io_write_bytes, th->wchar, io.wchar);
			FOLD(a->blk_read_bytes, th->read_bytes, io.read_bytes);
			FOLD(a->blk_write_bytes, th->write_bytes, io.write_bytes);
			FOLD(a->blk_cancelled_bytes, th->cancelled, io.cancelled_write_bytes);
		}
	}
	dirty_set(slot);
	return true;
}

static __always_inline struct meter_thread *thread_get(struct task_struct *tsk, __u32 tid,
						       const bool btf)
{
	if (btf)
		return bpf_task_storage_get(&tstore, tsk, 0, 0);
	return bpf_map_lookup_elem(&threads, &tid);
}

static __always_inline void thread_del(struct task_struct *tsk, __u32 tid, const bool btf)
{
	if (btf)
		bpf_task_storage_delete(&tstore, tsk);
	else
		bpf_map_delete_elem(&threads, &tid);
}

/*
 * Accounting at every switch: count the thread in (delta 1, at its exit) or out of (-1, at
 * its last switch-out) its task's "exiting" threads, which meter_settle waits for. Returns
 * false when the task is gone.
 */
static __always_inline bool exiting_add(struct meter_thread *th, const __s64 delta)
{
	__u32 slot = th->slot;
	struct meter_slot *a = bpf_map_lookup_elem(&slots, &slot);

	if (!a || a->gen != th->gen)
		return false;
	a->exiting += delta;
	dirty_set(slot);
	return true;
}

/* Whether tsk is switching out for the last time (do_task_dead() set TASK_DEAD). */
struct task_struct___pre514 {
	long state;
};

static __always_inline bool task_dead(struct task_struct *tsk, const bool btf)
{
	if (bpf_core_field_exists(tsk->__state))
		return RD(btf, tsk, __state) & TASK_DEAD_STATE;
	return BPF_CORE_READ((struct task_struct___pre514 *)tsk, state) & TASK_DEAD_STATE;
}

/*
 * The incoming thread, looked at only while user-space entries wait for their base or a
 * re-adopted process may have threads without an entry (lazy_threads).
 */
static __always_inline void switch_in(struct task_struct *next, const bool btf)
{
	struct meter_thread *th;
	struct member *p;
	__u32 tid = btf ? 0 : RD(btf, next, pid), tgid;

	th = thread_get(next, tid, btf);
	if (th) {
		if (th->flags & METER_TH_NEED_BASE)
			take_base(th, next, btf);
		return;
	}
	if (!lazy_threads)
		return;
	tgid = RD(btf, next, tgid);
	p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p || !p->gen)
		return;
	/* First run of the thread since it is tracked: start from its current totals. */
	struct meter_thread nt = {.task_key = p->task_key, .slot = p->slot, .gen = p->gen};

	take_base(&nt, next, btf);
	if (btf) {
		if (!bpf_task_storage_get(&tstore, next, &nt, BPF_LOCAL_STORAGE_GET_F_CREATE))
			__sync_fetch_and_add(&map_full, 1);
	} else if (bpf_map_update_elem(&threads, &tid, &nt, BPF_ANY) == -E2BIG) {
		__sync_fetch_and_add(&map_full, 1);
	}
}

/*
 * Every thread of a tracked task has its entry from fork (or from meter_track), so the common
 * case is one entry lookup for the outgoing thread and nothing for the incoming one.
 */
static __always_inline void on_switch(struct task_struct *prev, struct task_struct *next,
				      const bool btf)
{
	__u32 tid = btf ? 0 : RD(btf, prev, pid);
	struct meter_thread *th;

	/* The idle task is never tracked (tp_btf: flags is on a line the scheduler has read). */
	if (btf ? !(prev->flags & PF_IDLE) : tid != 0) {
		th = thread_get(prev, tid, btf);
		/*
		 * Gone task, or the thread's last switch-out. Not the first one after
		 * exit_notify() (exit_state set): the thread may be preempted after it and run on.
		 */
		if (th && !slice_end(th, prev, btf, false)) {
			thread_del(prev, tid, btf);
		} else if (th && task_dead(prev, btf)) {
			if (th->flags & METER_TH_EXITING)
				exiting_add(th, -1);
			thread_del(prev, tid, btf);
		}
	}
	if (need_base > 0 || lazy_threads)
		switch_in(next, btf);
}

/* ---- accounting at exit (cpu_at_exit) ---------------------------------------------------- */

/*
 * tsk's totals are final (it has switched out for the last time, or its tail cannot be read).
 * Fold them; the first caller to set METER_TH_FINAL gives the thread back to its task's
 * threads_live. When that was the task's last one and notify is set (the exit program, which
 * user space does not wait on), METER_BPF_EV_SETTLED tells user space; meter_settle's caller
 * learns it from the map.
 */
static __always_inline void thread_gone(__u64 key, const bool notify)
{
	struct meter_bpf_event *ev;
	struct meter_task *t;

	t = bpf_map_lookup_elem(&tasks, &key);
	if (!t)
		return;
	if (__sync_fetch_and_add(&t->threads_live, -1) != 1 || !notify) {
		task_dirty(t);
		return;
	}
	task_dirty(t);
	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&ringbuf_drops, 1);
		return;
	}
	ev->type = METER_BPF_EV_SETTLED;
	ev->pid = 0;
	ev->task_key = key;
	ev->exit_code = 0;
	ev->_pad = 0;
	/* forced: exit events before it may be waiting without a wakeup (see on_exit) */
	bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
}

static __always_inline void thread_final(struct meter_thread *th, struct task_struct *tsk,
					 const bool notify)
{
	slice_end(th, tsk, true, true);
	if (__sync_fetch_and_or(&th->flags, METER_TH_FINAL) & METER_TH_FINAL)
		return;
	thread_gone(th->task_key, notify);
}

/*
 * A bare thread's final totals (tsk off its CPU for good, or its tail lost), folded whole:
 * they started at zero. The caller owns the reference it came with (one fold per thread).
 */
static __always_inline void bare_fold(struct task_struct *tsk, const struct meter_bare *b)
{
	__u32 slot = b->slot;
	struct meter_slot *a = bpf_map_lookup_elem(&slots, &slot);
	__u64 v;

	if (!a || a->gen != b->gen)
		return;
#define BARE_ADD(f, x)                                                                             \
	do {                                                                                       \
		v = (x);                                                                           \
		if (v)                                                                             \
			__sync_fetch_and_add(&a->f, v);                                            \
	} while (0)
	BARE_ADD(cpu_ns, tsk->se.sum_exec_runtime);
	BARE_ADD(utime_ticks_ns, tsk->utime);
	BARE_ADD(stime_ticks_ns, tsk->stime);
	if (io_from_ioac) {
		BARE_ADD(io_read_bytes, tsk->ioac.rchar);
		BARE_ADD(io_write_bytes, tsk->ioac.wchar);
		BARE_ADD(blk_read_bytes, tsk->ioac.read_bytes);
		BARE_ADD(blk_write_bytes, tsk->ioac.write_bytes);
		BARE_ADD(blk_cancelled_bytes, tsk->ioac.cancelled_write_bytes);
	}
#undef BARE_ADD
	dirty_set(slot);
}

/*
 * The final fold of a thread taken out of "recent" or "dying": through its entry when it has
 * one (a live read may have given a bare thread one: then the entry's base says what is
 * folded already), else whole when it is bare (b->gen).
 */
static __always_inline void final_of(struct task_struct *tsk, struct meter_thread *th,
				     const struct meter_bare *b, const bool notify)
{
	struct meter_bare nb;
	__u64 old;

	if (th && (th->flags & METER_TH_NEW)) {
		/* A live read's entry not taken over: METER_TH_FINAL over it ends the live
		 * read's claim (walk_bare); still new, the thread is folded whole. */
		old = __sync_fetch_and_or(&th->flags, METER_TH_FINAL);
		if (old & METER_TH_FINAL)
			return;
		if (old & METER_TH_NEW) {
			nb.task_key = th->task_key;
			nb.slot = th->slot;
			nb.gen = th->gen;
			bare_fold(tsk, &nb);
		} else {
			slice_end(th, tsk, true, true);
		}
		thread_gone(th->task_key, notify);
	} else if (th) {
		thread_final(th, tsk, notify);
	} else if (b->gen) {
		bare_fold(tsk, b);
		thread_gone(b->task_key, notify);
	}
}

/* Takes over a live read's new entry (METER_TH_NEW) unless its final fold came first. */
static __always_inline bool take_new(struct meter_thread *th)
{
	__u64 f = th->flags;

	if (!(f & METER_TH_NEW))
		return !(f & METER_TH_FINAL);
	if (f & METER_TH_FINAL)
		return false;
	return __sync_val_compare_and_swap(&th->flags, f, f & ~METER_TH_NEW) == f;
}

/*
 * A live read's fold of a thread that exited but is not off its CPU yet: up to now, through its
 * entry; a bare one gets its entry here (a zero base), which its final fold then finds.
 */
static __always_inline void fold_now(struct task_struct *tsk, struct meter_thread *th,
				     const struct meter_bare *b)
{
	struct meter_thread nt = {
	    .task_key = b->task_key, .slot = b->slot, .gen = b->gen, .flags = METER_TH_BARE_KIDS};

	if (!th && b->gen)
		th = bpf_task_storage_get(&tstore, tsk, &nt, BPF_LOCAL_STORAGE_GET_F_CREATE);
	/* the caller holds the reference: no final fold runs meanwhile */
	if (th && take_new(th))
		slice_end(th, tsk, true, true);
}

/* Off its CPU for good: finish_task_switch() clears on_cpu after the last switch-out, whose
 * update_curr() has charged the thread's last slice; TASK_DEAD is set just before. */
static __always_inline bool off_cpu_for_good(struct task_struct *t)
{
	return !t->on_cpu && (t->__state & TASK_DEAD_STATE);
}

/*
 * The exit path (file release, exit_mm, exit_notify) still runs after sched_process_exit and
 * is charged to the thread at its last switch-out. A reference to the task_struct (ref, from
 * bpf_task_acquire or a kptr) lets a later settle read the final figures once it is off the
 * CPU for good, without waiting for sched_process_free (an RCU grace period later; with lazy
 * RCU, seconds here). This keeps it in "dying" and takes the reference on success. Returns
 * false when the map is full: then the caller still owns ref, and the thread's figures now
 * are its final ones.
 */
static __always_inline bool keep_dying(struct task_struct *ref, __u64 task_key,
				       const struct meter_bare *b)
{
	struct meter_dying nv = {.task_key = task_key, .slot = b->slot, .gen = b->gen}, *v;
	struct task_struct *old;
	__u64 k = (__u64)ref;

	if (bpf_map_update_elem(&dying, &k, &nv, BPF_NOEXIST))
		return false;
	v = bpf_map_lookup_elem(&dying, &k);
	if (!v)
		return false;
	old = bpf_kptr_xchg(&v->task, ref);
	if (old)
		bpf_task_release(old);
	if (__sync_fetch_and_add(&dying_n, 1) + 1 >= dying_max / 4 && !drain_wanted &&
	    __sync_val_compare_and_swap(&drain_wanted, 0, 1) == 0) {
		struct meter_bpf_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);

		if (!ev) {
			drain_wanted = 0;
			__sync_fetch_and_add(&ringbuf_drops, 1);
			return true;
		}
		ev->type = METER_BPF_EV_DRAIN;
		ev->pid = 0;
		ev->task_key = 0;
		ev->exit_code = 0;
		ev->_pad = 0;
		bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
	}
	return true;
}

/* A thread whose tail after its exit is lost ("dying" full): its figures now are final. */
static __always_inline void tail_dropped(__u64 tk)
{
	struct meter_task *lt = bpf_map_lookup_elem(&tasks, &tk);

	__sync_fetch_and_add(&tail_lost, 1);
	if (lt) {
		__sync_fetch_and_add(&lt->threads_lost, 1);
		task_dirty(lt);
	}
}

/*
 * A referenced thread whose exit ran (taken out of a "recent" slot; b: what the slot carried
 * with it): folded and released when it is off its CPU for good, else kept in "dying" for a
 * later settle. Consumes ref.
 */
static __always_inline void settle_or_keep(struct task_struct *ref, const struct meter_bare *b)
{
	struct meter_thread *th = bpf_task_storage_get(&tstore, ref, 0, 0);

	if (!th && !b->gen) {
		bpf_task_release(ref);
		return;
	}
	if (!off_cpu_for_good(ref)) {
		if (keep_dying(ref, th ? th->task_key : b->task_key, b))
			return;
		tail_dropped(th ? th->task_key : b->task_key);
	}
	final_of(ref, th, b, true);
	bpf_task_release(ref);
}

/*
 * The exiting thread p goes to this CPU's "recent" slot, with b (a bare thread's task; gen 0
 * for a thread with its entry); the one there before (the previous exit on this CPU) is
 * settled, or kept in "dying" if it is not off its CPU yet. The reference and b move together:
 * the slot's busy word is taken around them (an exit program does not nest on its CPU, but a
 * settle on another CPU takes a slot's thread out and may put it back); an exit that finds it
 * taken keeps its thread in "dying" instead. Returns false (nothing taken) when there is no
 * slot, the slot is busy or no reference is to be had.
 */
static __always_inline bool stash_recent(struct task_struct *p, const struct meter_bare *b)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct meter_recent *s = bpf_map_lookup_elem(&recent, &cpu);
	struct task_struct *ref, *old;
	struct meter_bare ob;

	if (!s)
		return false;
	ref = bpf_task_acquire(p);
	if (!ref)
		return false;
	if (__sync_val_compare_and_swap(&s->busy, 0, 1)) {
		bpf_task_release(ref);
		return false;
	}
	old = bpf_kptr_xchg(&s->task, ref);
	ob.task_key = s->task_key;
	ob.slot = s->slot;
	ob.gen = s->gen;
	s->task_key = b->task_key;
	s->slot = b->slot;
	s->gen = b->gen;
	__sync_lock_test_and_set(&s->busy, 0);
	if (old)
		settle_or_keep(old, &ob);
	else
		__sync_fetch_and_add(&dying_n, 1); /* a slot filled: the poll's drain looks */
	return true;
}

/* Keep the exiting thread p in "dying" (no self drain: the tests' mode; or a busy slot). */
static __always_inline bool stash_dying(struct task_struct *p, __u64 task_key,
					const struct meter_bare *b)
{
	struct task_struct *ref = bpf_task_acquire(p);

	if (!ref)
		return false;
	if (keep_dying(ref, task_key, b))
		return true;
	bpf_task_release(ref);
	return false;
}

/*
 * A thread without an entry exits (accounting at exit): a bare thread of a tracked task (proc:
 * its process's entry, NULL when gone) is stashed with its task, or folded now if that fails.
 * The process's entry goes with its last thread's exit, which can run before another thread's
 * (both decremented the group's count of live threads before their tracepoint): then the
 * leader's entry (freed after every other thread of the group) says whose it is; a leader
 * without one has no other thread (it gets its entry when it makes its first: see
 * fork_thread_at_exit), unless a live read's new entry (own, METER_TH_NEW) says it.
 */
static __always_inline void bare_exit(struct task_struct *p, struct member *proc,
				      struct meter_thread *own)
{
	struct task_struct *leader = p->group_leader;
	struct meter_thread *lt;
	struct meter_bare b;

	if (proc) {
		if (!proc->gen || !(proc->flags & MEMBER_BARE_THREADS))
			return;
		b.task_key = proc->task_key;
		b.slot = proc->slot;
		b.gen = proc->gen;
	} else {
		if (leader == p)
			lt = own;
		else if (!bpf_core_field_exists(struct task_struct, bpf_storage) ||
			 !leader->bpf_storage)
			return;
		else
			lt = bpf_task_storage_get(&tstore, leader, 0, 0);
		if (!lt || !(lt->flags & METER_TH_BARE_KIDS))
			return;
		b.task_key = lt->task_key;
		b.slot = lt->slot;
		b.gen = lt->gen;
	}
	if (self_drain ? stash_recent(p, &b) || stash_dying(p, b.task_key, &b)
		       : stash_dying(p, b.task_key, &b))
		return;
	tail_dropped(b.task_key);
	final_of(p, NULL, &b, true);
}

/* ---- process lifetime --------------------------------------------------------------------- */

/*
 * A new thread or process of a tracked task gets its entry here (task storage in tp_btf mode,
 * "threads" in raw_tp mode), zeroed: the kernel starts a child's sum_exec_runtime,
 * utime/stime and ioac at zero. So its switches never need the "procs" lookup.
 */
static __always_inline void entry_for_child(struct task_struct *child, __u32 cpid,
					    const struct member *p, struct meter_task *t,
					    const bool btf, const __u64 flags)
{
	struct meter_thread nt = {
	    .task_key = p->task_key, .slot = p->slot, .gen = p->gen, .flags = flags};
	bool ok;

	if (btf)
		ok = bpf_task_storage_get(&tstore, child, &nt, BPF_LOCAL_STORAGE_GET_F_CREATE);
	else
		ok = !bpf_map_update_elem(&threads, &cpid, &nt, BPF_ANY);
	if (!t && (!ok || cpu_at_exit))
		t = bpf_map_lookup_elem(&tasks, &nt.task_key); /* a new thread's: looked up here */
	if (!ok) {
		/* Its CPU will be missing from the slot: the task's figure is short. */
		__sync_fetch_and_add(&map_full, 1);
		if (t) {
			__sync_fetch_and_add(&t->threads_lost, 1);
			task_dirty(t);
		}
		return;
	}
	if (cpu_at_exit && t) {
		__sync_fetch_and_add(&t->threads_live, 1);
		task_dirty(t);
	}
}

/*
 * Accounting at exit: a new thread of a tracked process. Its creator is of the same process:
 * its entry (a thread with one) says whose the process is and whether its threads are bare
 * (METER_TH_BARE_KIDS); a creator without one (itself bare, or a re-adopted process's thread)
 * is looked up in "procs". A bare thread gets no entry: its task counts it in threads_live.
 */
static __always_inline bool task_no_storage(struct task_struct *tsk);

static __always_inline void fork_thread_at_exit(struct task_struct *parent,
						struct task_struct *child, __u32 cpid, __u32 tgid)
{
	struct meter_thread *pt =
	    task_no_storage(parent) ? NULL : bpf_task_storage_get(&tstore, parent, 0, 0);
	struct member *p, np = {};
	struct meter_task *t;
	bool bare;

	if (pt) {
		np.task_key = pt->task_key;
		np.slot = pt->slot;
		np.gen = pt->gen;
		bare = pt->flags & METER_TH_BARE_KIDS;
	} else {
		p = bpf_map_lookup_elem(&procs, &tgid);
		if (!p || !p->gen)
			return;
		np = *p;
		bare = p->flags & MEMBER_BARE_THREADS;
	}
	if (!bare) {
		entry_for_child(child, cpid, &np, NULL, true, 0);
		return;
	}
	/*
	 * A forked process's main thread creating its first thread (it has no entry: see
	 * on_fork; a creator other than the leader has one, or the leader has): the leader's
	 * entry now, so that every thread of a process with several has its leader's (what
	 * bare_exit needs when the process's entry went first). Counted from its fork.
	 */
	if (parent->pid == tgid && (!pt || (pt->flags & METER_TH_NEW))) {
		struct meter_thread lt = {.task_key = np.task_key,
					  .slot = np.slot,
					  .gen = np.gen,
					  .flags = METER_TH_BARE_KIDS};

		pt = bpf_task_storage_get(&tstore, parent, &lt, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (pt)
			take_new(pt);
		else
			__sync_fetch_and_add(&map_full, 1);
	}
	t = bpf_map_lookup_elem(&tasks, &np.task_key);
	if (t) {
		__sync_fetch_and_add(&t->threads_live, 1);
		task_dirty(t);
	}
}

/*
 * Accounting at exit: whether the leader of thread parent (the creator of a new process) has
 * its entry in "tstore": then the new process's rss_stat events see it through its parent
 * (tracked_kin) and its main thread needs none. The entry stays until the leader is freed,
 * after every child it had was reparented.
 */
static __always_inline bool leader_kept(struct task_struct *parent)
{
	struct task_struct *leader = parent->group_leader;

	if (!bpf_core_field_exists(struct task_struct, bpf_storage) || !leader->bpf_storage)
		return false;
	return bpf_task_storage_get(&tstore, leader, 0, 0) != NULL;
}

/*
 * The one fork program of the membership map: a new process of a member becomes a member of
 * the same task (whether the meter accounts it or the audit trail alone tracks it); the meter's
 * own work follows for members it accounts (gen != 0).
 */
static __always_inline void on_fork(struct task_struct *parent, struct task_struct *child,
				    const bool btf)
{
	__u32 ptgid, cpid, ctgid;
	struct member *p, np = {};
	struct meter_task *t = NULL;

	/* tp_btf: direct loads (a probe-read helper call each in raw_tp) */
	cpid = RD(btf, child, pid);
	ctgid = RD(btf, child, tgid);
	if (cpid != ctgid && btf && cpu_at_exit) {
		fork_thread_at_exit(parent, child, cpid, ctgid);
		return;
	}
	if (cpid != ctgid) {
		/*
		 * A new thread. Its creator (parent, the current thread) is of the same process:
		 * in tp_btf mode every thread of an accounted process has its storage (unless
		 * lazy_threads), which has what the entry needs; no "procs" lookup then.
		 */
		if (btf && !lazy_threads) {
			struct meter_thread *pt = bpf_task_storage_get(&tstore, parent, 0, 0);

			if (!pt)
				return;
			np.task_key = pt->task_key;
			np.slot = pt->slot;
			np.gen = pt->gen;
			entry_for_child(child, cpid, &np, NULL, btf, 0);
			return;
		}
		p = bpf_map_lookup_elem(&procs, &ctgid);
		if (!p || !p->gen)
			return;
		entry_for_child(child, cpid, p, NULL, btf, 0);
		return;
	}
	ptgid = RD(btf, parent, tgid);
	p = bpf_map_lookup_elem(&procs, &ptgid);
	if (!p)
		return;
	np.task_key = p->task_key;
	np.slot = p->slot;
	np.gen = p->gen;
	/* Accounting at exit: the child's threads will all start inside the task. */
	if (cpu_at_exit && np.gen)
		np.flags = MEMBER_BARE_THREADS;
	if (np.gen) {
		t = bpf_map_lookup_elem(&tasks, &np.task_key);
		if (!t)
			return; /* a forgotten task's straggler */
	}
	/* The tracepoint fires before the child is first woken: it cannot have exited yet. */
	if (bpf_map_update_elem(&procs, &cpid, &np, BPF_NOEXIST)) {
		__sync_fetch_and_add(&map_full, 1);
		if (t) {
			__sync_fetch_and_add(&t->threads_lost, 1);
			task_dirty(t);
		}
		return;
	}
	if (!t)
		return;
	__sync_fetch_and_add(&t->procs_alive, 1);
	__sync_fetch_and_add(&t->forks, 1);
	/*
	 * Accounting at exit: the child's main thread gets no entry while its parent's leader
	 * has one (the child's rss_stat events find it through its parent: tracked_kin), a bare
	 * thread counted in threads_live: its exit folds its whole totals. The entry cost more
	 * than the rest of this program (about 1.5 us a fork).
	 */
	if (btf && np.flags && !lazy_threads && leader_kept(parent)) {
		__sync_fetch_and_add(&t->threads_live, 1);
		task_dirty(t);
		return;
	}
	task_dirty(t);
	entry_for_child(child, cpid, &np, t, btf, np.flags ? METER_TH_BARE_KIDS : 0);
}

static __always_inline int exit_status(struct task_struct *p, const bool btf)
{
	unsigned int flags = btf ? p->signal->flags : BPF_CORE_READ(p, signal, flags);

	if (flags & SIGNAL_GROUP_EXIT)
		return btf ? p->signal->group_exit_code : BPF_CORE_READ(p, signal, group_exit_code);
	return RD(btf, p, exit_code);
}

static __always_inline __s64 mm_sum(struct meter_mm *e)
{
	return e->pages[0] + e->pages[1] + e->pages[3];
}

/*
 * Whoever deletes an "mms" entry (BPF or meter_forget) owns its owner's decrement. t: the
 * owner's entry, already looked up by the caller (NULL: gone).
 */
static __always_inline void mm_del_t(__u64 *mmkey, struct meter_task *t)
{
	if (!bpf_map_delete_elem(&mms, mmkey) && t)
		__sync_fetch_and_add(&t->mms_alive, -1);
}

static __always_inline void mm_del(__u64 *mmkey, struct meter_mm *e)
{
	__u64 owner = e->task_key;
	struct meter_task *t;

	if (bpf_map_delete_elem(&mms, mmkey))
		return;
	t = bpf_map_lookup_elem(&tasks, &owner);
	if (t)
		__sync_fetch_and_add(&t->mms_alive, -1);
}

static __always_inline bool mm_exit(struct task_struct *p, __u64 mm, __u64 key,
				    struct meter_task *t, const bool btf);
static __always_inline void rss_cpu_gone(struct mm_struct *mm);

static __always_inline void on_exit(struct task_struct *p, const bool btf, const bool at_exit)
{
	__u32 tid = RD(btf, p, pid), tgid = RD(btf, p, tgid);
	const struct meter_bare entry = {};
	struct member *proc = NULL;
	struct meter_bpf_event *ev;
	struct meter_thread *th;
	bool looked = false;
	struct meter_task *t;
	__u64 key, mm;
	__u32 gen;
	int code;

	/*
	 * Account the exiting thread up to now; its last switch-out adds the remainder. Looked up
	 * before "procs": an entry still waiting for its base (never switched in) gives its
	 * need_base count back here, tracked process or not.
	 * Accounting at exit folds nothing here when the thread is stashed: its settle folds its
	 * final totals in one go (the fold here was 8 claimed deltas, 16 locked instructions, done
	 * again by the settle). Only an entry still waiting for its base takes it now, so that
	 * the exit path's tail counts.
	 */
	/* tp_btf: a thread without task local storage of any map (bare, or untracked) spares
	 * the storage helper */
	th = btf && task_no_storage(p) ? NULL : thread_get(p, tid, btf);
	if (th && !(th->flags & METER_TH_NEW)) {
		if (at_exit) {
			if (th->flags & METER_TH_NEED_BASE)
				slice_end(th, p, true, true);
			if (th->flags & METER_TH_FINAL) {
				/* nothing left to fold */
			} else if (self_drain ? !stash_recent(p, &entry) &&
						    !stash_dying(p, th->task_key, &entry)
					      : !stash_dying(p, th->task_key, &entry)) {
				tail_dropped(th->task_key);
				thread_final(th, p, true);
			}
		} else if (slice_end(th, p, btf, false) && !(th->flags & METER_TH_EXITING) &&
			   exiting_add(th, 1)) {
			/* its last switch-out (meter_settle waits for it) folds the rest */
			th->flags |= METER_TH_EXITING;
		}
	} else if (at_exit) {
		/* A bare thread, or a forked process's main thread? (its process's entry serves
		 * the group's end below too; a live read's new entry counts as none) */
		proc = bpf_map_lookup_elem(&procs, &tgid);
		looked = true;
		bare_exit(p, proc, th);
	}

	/*
	 * signal->live was decremented before the tracepoint: 0 means the group is dead. Read
	 * first: every other thread's exit, tracked or not, ends here without a "procs" lookup.
	 */
	if ((btf ? p->signal->live.counter : BPF_CORE_READ(p, signal, live.counter)) != 0)
		return;
	if (!looked)
		proc = bpf_map_lookup_elem(&procs, &tgid);
	if (!proc)
		return;
	key = proc->task_key;
	mm = proc->mm;
	gen = proc->gen;
	/*
	 * The task's entry, looked up once for the mm's release and the process's end (it was
	 * three lookups). Only an accounted member (gen) has an mm entry (proc->mm).
	 */
	t = gen ? bpf_map_lookup_elem(&tasks, &key) : NULL;

	/*
	 * Its entry gone, the exiting thread's teardown of that mm (exit_mm, after this) is no
	 * tracked mm's: its rss_stat events stop at this CPU's note of it, or at the thread's
	 * storage where the teardown runs on another CPU (rss_fast).
	 */
	if (mm && mm_exit(p, mm, key, t, btf) && btf) {
		if (th && th->mm == mm)
			__sync_fetch_and_or(&th->flags, METER_TH_MM_GONE);
		if ((__u64)p->mm == mm)
			rss_cpu_gone(p->mm);
	}
	/* Whoever deletes the entry (exit or meter_forget) owns the decrement. */
	if (bpf_map_delete_elem(&procs, &tgid) || !gen || !t)
		return; /* gone, or a member the meter does not account */
	code = exit_status(p, btf);
	if (t->root_tgid == tgid) {
		t->root_exit_code = code;
		t->root_exited = 1;
	}
	if (__sync_fetch_and_add(&t->procs_alive, -1) != 1) {
		task_dirty(t);
		return;
	}
	task_dirty(t);

	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&ringbuf_drops, 1);
		return;
	}
	ev->type = METER_BPF_EV_EXIT;
	ev->pid = tgid;
	ev->task_key = key;
	ev->exit_code = t->root_exited ? (int)t->root_exit_code : code;
	ev->_pad = 0;
	/*
	 * No wakeup: the agent learns of exits from its shims and reads these at its tick. A
	 * wakeup is an irq_work self-IPI, which in a VM costs a trap: it was most of this
	 * program's run time per task end here (7.4 -> 2.0 us, BPF statistics).
	 */
	bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
}

/* ---- memory ------------------------------------------------------------------------------- */

/*
 * Linux before 6.2 keeps mm->rss_stat as one struct of atomic counters; 6.2 made it an array
 * of percpu_counter. Both layouts are described; the relocation of the one the running
 * kernel lacks resolves to dead code, which the verifier drops.
 */
struct mm_rss_stat___pre62 {
	atomic_long_t count[4];
};
struct mm_struct___pre62 {
	struct mm_rss_stat___pre62 rss_stat;
};

static __always_inline __s64 read_rss_pages(struct mm_struct *mm, int member, const bool btf)
{
	if (bpf_core_type_exists(struct mm_rss_stat___pre62)) {
		struct mm_struct___pre62 *old = (void *)mm;

		switch (member) {
		case 0:
			return BPF_CORE_READ(old, rss_stat.count[0].counter);
		case 1:
			return BPF_CORE_READ(old, rss_stat.count[1].counter);
		case 3:
			return BPF_CORE_READ(old, rss_stat.count[3].counter);
		}
		return 0;
	}
	switch (member) {
	case 0:
		return RD(btf, mm, rss_stat[0].count);
	case 1:
		return RD(btf, mm, rss_stat[1].count);
	case 3:
		return RD(btf, mm, rss_stat[3].count);
	}
	return 0;
}

/* A member's value in pages, never below 0 (the global part of a percpu counter can be). */
static __always_inline __s64 rss_now(struct mm_struct *mm, int member, const bool btf)
{
	__s64 pages = read_rss_pages(mm, member, btf);

	return pages < 0 ? 0 : pages;
}

static __always_inline void mem_integrate(struct meter_task *t, __u64 now)
{
	__u64 prev = __sync_lock_test_and_set(&t->mem_ts, now);
	__s64 cur = t->rss_bytes;
	__u64 x, v;

	if (!prev || now <= prev || cur <= 0)
		return;
	x = ((__u64)cur >> 10) * ((now - prev) / 1000);
	if (!x)
		return;
	v = __sync_fetch_and_add(&t->mem_kib_us, x) + x;
	/* Carry whole KiB*s so that the KiB*us accumulator never overflows. */
	if (v >= 1000000000000ULL &&
	    __sync_val_compare_and_swap(&t->mem_kib_us, v, v % 1000000) == v)
		__sync_fetch_and_add(&t->mem_kib_s, v / 1000000);
}

/*
 * The last thread of process p exits; mm was its address space. The tracepoint fires before
 * exit_mm(): the pages are all still there, and the counters read during the teardown that
 * follows keep a per-CPU residue (up to 32 pages per CPU and member), so waiting for them to
 * reach 0 left most entries behind until meter_forget swept the map. When no one else uses
 * the mm, its pages leave the task's RSS now and the entry goes; the teardown's events then
 * find no entry.
 */
/*
 * Drop the entry of an address space the task is done with: its pages leave the task's RSS.
 * t: the owner's entry, looked up by the caller (NULL: gone).
 */
static __always_inline void mm_release_t(__u64 *mmkey, struct meter_mm *e, struct meter_task *t)
{
	__s64 left = mm_sum(e);

	if (left > 0 && t) {
		mem_integrate(t, bpf_ktime_get_ns());
		__sync_fetch_and_add(&t->rss_bytes, -left * (__s64)page_size);
		task_dirty(t);
	}
	mm_del_t(mmkey, t);
}

/* The same, the owner's entry looked up here. */
static __always_inline void mm_release(__u64 *mmkey, struct meter_mm *e)
{
	__u64 owner = e->task_key;

	mm_release_t(mmkey, e, bpf_map_lookup_elem(&tasks, &owner));
}

/*
 * Returns true when mm had an entry of the task (key; t its entry) and no longer has one
 * (released here).
 */
static __always_inline bool mm_exit(struct task_struct *p, __u64 mm, __u64 key,
				    struct meter_task *t, const bool btf)
{
	struct meter_mm *e = bpf_map_lookup_elem(&mms, &mm);

	if (!e || e->task_key != key)
		return false;
	if (mm_sum(e) != 0 &&
	    (btf ? p->mm->mm_users.counter : BPF_CORE_READ(p, mm, mm_users.counter)) != 1)
		return false; /* shared (CLONE_VM): its last user's teardown ends it */
	mm_release_t(&mm, e, t);
	return true;
}

#define PF_KTHREAD 0x00200000

/*
 * tp_btf fast paths, in front of on_rss_stat's general path (the event fires at every change
 * of an mm's counters: hundreds of times per fork+exec, on every process of the node). Every
 * thread of a tracked process has its task storage (from fork or meter_track; not so only
 * while lazy_threads is set, and for a bare thread, see meter_bare), so without storage:
 * - a change of the current thread's own mm is not a tracked process's (but a bare thread's,
 *   whose leader has storage, or a forked process's main thread whose parent's leader has it,
 *   or a reaper after its parent's end: tracked_kin, the general path): one storage lookup;
 * - nor is a change while the thread tears down its own mm at its exit (current->mm is NULL
 *   then, and the thread is no kernel thread);
 * every other change takes the general path (an untracked parent copying into its child's mm,
 * reclaim in a kernel thread: one "mms" lookup). And a tracked thread whose mm is the one it
 * saw last (th->mm, learnt by the general path) skips the "procs" lookup and the exec check.
 * Returns the mm's entry for the fast path; NULL with *ret_slow set for the general path, NULL
 * with *ret_slow clear to ignore the event.
 * A stale entry (an exited shared mm whose teardown left a residue) is no longer dropped by the
 * first own event of an untracked process that gets the same address: meter_forget sweeps it.
 */
static __always_inline bool parent_keeps(struct task_struct *leader);

/*
 * A change of another context's mm (a parent copying its page tables into its child's at fork,
 * reclaim in a kernel thread) concerns a tracked process only if the mm's owner is one, and
 * the owner is a live user of the mm (the kernel hands it on when the owner leaves the mm).
 * An owner with task local storage of some map may be one (the general path looks). One
 * without: a thread of a tracked process without an entry is a bare thread whose leader has
 * storage, or a forked process's thread whose leader has none and whose parent may have made
 * it tracked (parent_keeps), as tracked_kin; any other is not tracked, which spares the "mms"
 * lookup, which otherwise misses. The fork's copy into a child (most of these events) is
 * told apart first: the child, made from a copy of its parent (the current thread), has the
 * parent's pid until after the copy, and is not tracked yet (it is at the fork tracepoint,
 * after the copy); its first own change makes its entry from the counters' totals. Unknown
 * (no owner field, no owner): the general path.
 */
static __always_inline bool mm_owner_untracked(struct mm_struct *mm, struct task_struct *cur)
{
	struct task_struct *o, *leader;

	if (!bpf_core_field_exists(mm->owner) ||
	    !bpf_core_field_exists(struct task_struct, bpf_storage))
		return false;
	o = mm->owner;
	/*
	 * An untrusted pointer for the verifier (the field carries no RCU tag): no storage
	 * helper on it, but a read of its storage list, NULL when it has none of any map. A
	 * plain load (the program type's fault-checked load of a kernel pointer), not a
	 * probe-read helper call: the guard above has made sure the field exists.
	 */
	if (!o || o->bpf_storage)
		return false;
	if (!cpu_at_exit || o->pid == cur->pid)
		return true;
	leader = o->group_leader;
	if (leader != o && leader->bpf_storage)
		return false;
	return !parent_keeps(leader);
}

/*
 * Whether thread tsk has no task local storage of any map: then it has none of "tstore"
 * either, and the storage helper (the largest part of an event that ends in rss_fast) need
 * not be called to learn it. False when unknown (no such field).
 */
static __always_inline bool task_no_storage(struct task_struct *tsk)
{
	if (!bpf_core_field_exists(struct task_struct, bpf_storage))
		return false;
	return !tsk->bpf_storage;
}

/*
 * Accounting at exit: whether the process whose leader is leader, which has no task local
 * storage, may be a tracked one: its parent's leader has storage of some map (a forked
 * process gets no entry of its own while its parent's leader has one: on_fork), or its parent
 * is a reaper, which the process was reparented to when its parent's group ended (the init of
 * a PID namespace, or a subreaper). Else it is not tracked: a tracked process without storage
 * was forked by one whose leader had it, and a parent's death hands its children to a thread
 * of the same group first, then to a reaper.
 */
static __always_inline bool parent_keeps(struct task_struct *leader)
{
	struct task_struct *rp = leader->real_parent;
	struct signal_struct *sig;

	if (!rp)
		return false;
	if (rp->group_leader->bpf_storage)
		return true;
	sig = rp->signal;
	return (sig->flags & SIGNAL_UNKILLABLE) || BPF_CORE_READ_BITFIELD(sig, is_child_subreaper);
}

/*
 * Accounting at exit: a thread without storage may be a bare thread of a tracked process (see
 * meter_bare) or a forked process's main thread, whose own changes the general path counts:
 * one whose leader has task local storage of some map, or whose leader has none and whose
 * parent may have made it a tracked one (parent_keeps).
 */
static __always_inline bool tracked_kin(struct task_struct *cur)
{
	struct task_struct *leader = cur->group_leader;

	if (!cpu_at_exit || !bpf_core_field_exists(struct task_struct, bpf_storage))
		return false;
	if (leader != cur && leader->bpf_storage)
		return true;
	return parent_keeps(leader);
}

/*
 * The slot of an rss_stat member (0, 1 or 3) in a value noted per member, meter_thread.rss_seen
 * or meter_rss_cpu.seen: a constant offset into the map value for each member, which the
 * verifier wants.
 */
static __always_inline __s64 *rss_seen(__s64 seen[3], int member)
{
	switch (member) {
	case 0:
		return &seen[0];
	case 1:
		return &seen[1];
	}
	return &seen[2];
}

/* The kernel's identifier of address space mm, never reused (x86); 0 where there is none. */
static __always_inline __u64 mm_ctx_id(struct mm_struct *mm)
{
	if (!bpf_core_field_exists(mm->context.ctx_id))
		return 0;
	return mm->context.ctx_id;
}

static __always_inline struct meter_rss_cpu *rss_cpu_get(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&rss_cpu, &zero);
}

/*
 * An own change of mm on this CPU wrote value pages of member to the mm's entry, or found the
 * entry at it; gen: rss_gen read before the entry was looked up. (Programs on one CPU do not
 * interleave: tracepoints run with preemption disabled.)
 */
static __always_inline void rss_cpu_note(struct mm_struct *mm, int member, __s64 pages, __u64 gen)
{
	struct meter_rss_cpu *rc = rss_cpu_get();
	__u64 ctx = mm_ctx_id(mm);

	if (!rc || !ctx)
		return;
	if (rc->mm != (__u64)mm || rc->ctx != ctx || rc->gen != gen) {
		rc->mm = (__u64)mm;
		rc->ctx = ctx;
		rc->gen = gen;
		rc->seen[0] = rc->seen[1] = rc->seen[2] = -1;
	}
	*rss_seen(rc->seen, member) = pages;
}

/* The entry of mm (the current thread's, or the one its exec left) was released on this CPU. */
static __always_inline void rss_cpu_gone(struct mm_struct *mm)
{
	struct meter_rss_cpu *rc = rss_cpu_get();
	__u64 ctx = mm_ctx_id(mm);

	if (rc && ctx) {
		rc->gone_mm = (__u64)mm;
		rc->gone_ctx = ctx;
	}
}

/*
 * Whether the event stops at this CPU's note (meter_rss_cpu), before the thread's storage:
 * - an own change that leaves its member at the value an event here last wrote to the mm's
 *   entry, or found in it, since that entry was made (gen): the entry has it (the argument of
 *   rss_seen below, which holds for any event that wrote the value, on one CPU in order);
 * - a change in the teardown of the mm whose entry an exit or exec here released, with no
 *   user left (mm_users 0: no own change, so no new entry, can come for it any more).
 * *ret_pages: the member's value when it was read, -1 otherwise.
 */
static __always_inline bool rss_cpu_hit(struct mm_struct *mm, struct mm_struct *own, int member,
					__u64 gen, __s64 *ret_pages)
{
	struct meter_rss_cpu *rc = rss_cpu_get();
	__u64 ctx = mm_ctx_id(mm);

	if (!rc || !ctx)
		return false;
	if (own != mm)
		return rc->gone_mm == (__u64)mm && rc->gone_ctx == ctx && mm->mm_users.counter == 0;
	if (rc->mm != (__u64)mm || rc->ctx != ctx || rc->gen != gen)
		return false;
	*ret_pages = rss_now(mm, member, true);
	return *ret_pages == *rss_seen(rc->seen, member);
}

/*
 * *ret_th: the current thread's storage when the event is a change of its own mm (NULL
 * otherwise); *ret_pages: the member's value then, read once. gen: rss_gen at the event's
 * start.
 */
static __always_inline struct meter_mm *rss_fast(struct task_struct *cur, struct mm_struct *mm,
						 int member, __u64 gen, bool *ret_slow,
						 struct meter_thread **ret_th, __s64 *ret_pages)
{
	struct mm_struct *own = cur->mm;
	__u64 mmkey = (__u64)mm;
	struct meter_thread *th;
	struct meter_mm *e;
	__s64 pages = -1;

	*ret_slow = true;
	*ret_th = NULL;
	if (lazy_threads)
		return NULL;
	/*
	 * Another live context's mm (mm_users not 0: not an exec's teardown of the mm it left,
	 * which the thread's storage decides below) whose owner has no storage: what the checks
	 * below end in, with or without the thread's storage (the fork's copy into an untracked
	 * child, about a fifth of the events of a tracked fork+exec), without the storage
	 * helper.
	 */
	if (own && own != mm && mm->mm_users.counter != 0 && mm_owner_untracked(mm, cur)) {
		*ret_slow = false;
		return NULL;
	}
	if (rss_cpu_hit(mm, own, member, gen, &pages)) {
		*ret_slow = false;
		return NULL;
	}
	th = task_no_storage(cur) ? NULL : bpf_task_storage_get(&tstore, cur, 0, 0);
	if (!th) {
		if (own == mm ? !tracked_kin(cur)
			      : (!own && !(cur->flags & PF_KTHREAD)) || mm_owner_untracked(mm, cur))
			*ret_slow = false;
		return NULL;
	}
	if (own != mm) {
		/*
		 * The thread tears down the mm it saw last, whose entry is released
		 * (METER_TH_MM_GONE: by its exit, or by the first event of this teardown below):
		 * nothing to count, and no entry can exist for that address before the mm is
		 * freed. own NULL otherwise (a shared mm whose entry lives until its last user's
		 * exit): the general path.
		 */
		if (th->mm == mmkey && (th->flags & METER_TH_MM_GONE)) {
			*ret_slow = false;
			return NULL;
		}
		if (!own)
			return NULL;
		/*
		 * exec: the thread drops the mm it left (exit_mmap after its last user went,
		 * mm_users 0) in the new one's context. Its pages leave the task's RSS at the
		 * first event, at once, and the entry goes; the rest of the teardown (each event
		 * a counted change before) stops here. The entry's values are what
		 * the task counted for that mm: the same sum as the teardown's events (less the
		 * counters' per-CPU residue, which was left in the entry until the new mm's first
		 * change released it).
		 */
		if (th->mm == mmkey && mm->mm_users.counter == 0) {
			e = bpf_map_lookup_elem(&mms, &mmkey);
			if (e && e->task_key == th->task_key)
				mm_release(&mmkey, e);
			__sync_fetch_and_or(&th->flags, METER_TH_MM_GONE);
			rss_cpu_gone(mm);
			*ret_slow = false;
			return NULL;
		}
		/* Another context's mm (a fork's copy into the child, reclaim). */
		if (mm_owner_untracked(mm, cur))
			*ret_slow = false;
		return NULL;
	}
	if (th->mm != mmkey)
		return NULL;
	/*
	 * The value this thread last wrote to the mm's entry: the entry has it too, or a later
	 * event of another context moved the counter away and the change back to this value
	 * fired an event that wrote it again (every change of the counter's total fires one, and
	 * each writes what it reads). Either way the entry's value is this one: nothing to add,
	 * and no "mms" lookup (the bulk of the events of a tracked process's page faults).
	 */
	if (pages < 0)
		pages = rss_now(mm, member, true);
	if (pages == *rss_seen(th->rss_seen, member)) {
		*ret_slow = false;
		return NULL;
	}
	e = bpf_map_lookup_elem(&mms, &mmkey);
	if (!e || e->task_key != th->task_key)
		return NULL;
	*ret_th = th;
	*ret_pages = pages;
	return e;
}

/*
 * A tracked thread's mm, checked by the general path: the fast path's next time, with no
 * value seen yet. Returns the thread's storage.
 */
static __always_inline struct meter_thread *rss_fast_learn(struct task_struct *cur, __u64 mmkey)
{
	/* none for a forked process's main thread (see on_fork): no helper call */
	struct meter_thread *th =
	    task_no_storage(cur) ? NULL : bpf_task_storage_get(&tstore, cur, 0, 0);

	if (th) {
		if (th->mm != mmkey && (th->flags & METER_TH_MM_GONE))
			__sync_fetch_and_and(&th->flags, ~METER_TH_MM_GONE);
		th->mm = mmkey;
		th->rss_seen[0] = th->rss_seen[1] = th->rss_seen[2] = -1;
	}
	return th;
}

/* The entry's last value of an rss_stat member (0, 1 or 3). */
static __always_inline __s64 mm_pages(struct meter_mm *e, int member)
{
	switch (member) {
	case 0:
		return *(volatile __s64 *)&e->pages[0];
	case 1:
		return *(volatile __s64 *)&e->pages[1];
	}
	return *(volatile __s64 *)&e->pages[3];
}

static __always_inline void on_rss_stat(struct mm_struct *mm, int member, const bool btf)
{
	struct task_struct *cur;
	__u64 mmkey = (__u64)mm, now, peak;
	struct member *proc = NULL;
	struct meter_task *t = NULL;
	struct meter_thread *th = NULL;
	struct meter_mm *e = NULL;
	__s64 pages = -1, old, delta, sum;
	bool curr, slow = true;
	__u64 gen = 0;
	__u32 tgid;

	if (member != 0 && member != 1 && member != 3)
		return; /* MM_SWAPENTS is not resident */
	if (btf) {
		/* before any "mms" lookup (see meter_rss_cpu) */
		gen = *(volatile __u64 *)&rss_gen;
		cur = bpf_get_current_task_btf();
		e = rss_fast(cur, mm, member, gen, &slow, &th, &pages);
		if (e) {
			curr = true;
			goto count;
		}
		if (!slow)
			return;
		curr = cur->mm == mm;
	} else {
		cur = (struct task_struct *)bpf_get_current_task();
		curr = (__u64)BPF_CORE_READ(cur, mm) == mmkey;
	}
	/*
	 * A vfork child (the task's first process is one until its execve) runs in its parent's
	 * mm: those pages are the parent's (the agent's shim), not the task's. Binding that mm to
	 * the task put the shim's whole RSS into the task's peak and left the entry to the shim's
	 * exit, after the task's end (then meter_forget had to sweep "mms").
	 */
	if (curr && RD(btf, cur, vfork_done))
		return;
	e = bpf_map_lookup_elem(&mms, &mmkey);
	/*
	 * The teardown of an mm no one uses any more (the mm an exec left, torn down in the new
	 * one's context, by a thread without an entry: see on_fork; or a shared mm's last user):
	 * no own change can come for it, so its pages leave the task's RSS at its first event, at
	 * once, and the entry goes, as the exit and the exec of a thread with an entry do; this
	 * CPU's note of it stops the rest of the teardown before any lookup (rss_cpu_hit).
	 */
	if (e && !curr && RD(btf, mm, mm_users.counter) == 0) {
		mm_release(&mmkey, e);
		if (btf)
			rss_cpu_gone(mm);
		return;
	}
	if (!e || curr) {
		if (!curr)
			return;
		tgid = bpf_get_current_pid_tgid() >> 32;
		proc = bpf_map_lookup_elem(&procs, &tgid);
		if (!proc || !proc->gen) {
			/* A freed mm of a tracked process, reused by an untracked one. */
			if (e)
				mm_del(&mmkey, e);
			return;
		}
		if (e && e->task_key != proc->task_key) {
			/* A freed mm of an ended task, reused by another task's process. */
			mm_del(&mmkey, e);
			e = NULL;
		}
		if (!e) {
			struct meter_mm ne = {.task_key = proc->task_key};
			int err;

			/* every CPU's note of an older entry of this address goes */
			__sync_fetch_and_add(&rss_gen, 1);
			err = bpf_map_update_elem(&mms, &mmkey, &ne, BPF_NOEXIST);

			if (err == -E2BIG)
				__sync_fetch_and_add(&map_full, 1);
			e = bpf_map_lookup_elem(&mms, &mmkey);
			if (!e)
				return;
			if (!err) {
				t = bpf_map_lookup_elem(&tasks, &ne.task_key);
				if (t)
					__sync_fetch_and_add(&t->mms_alive, 1);
			}
		}
		if (proc->mm != mmkey) {
			/*
			 * exec: the old mm is torn down by now (its teardown's events found the
			 * entry), but the per-CPU residue of its counters keeps it from reaching 0.
			 * Another process still using it (CLONE_VM) makes a new entry at its next
			 * change, from the counters' totals: the task's sum stays right.
			 */
			__u64 oldmm = proc->mm;
			struct meter_mm *oe = oldmm ? bpf_map_lookup_elem(&mms, &oldmm) : NULL;

			if (oe && oe->task_key == proc->task_key)
				mm_release(&oldmm, oe);
			proc->mm = mmkey;
		}
		if (btf)
			th = rss_fast_learn(cur, mmkey);
	}
	if (pages < 0)
		pages = rss_now(mm, member, btf);
count:
	/* What the fast path compares with next time (the entry gets this value below). */
	if (th)
		*rss_seen(th->rss_seen, member) = pages;
	/*
	 * Most events change no counter the tracepoint reads (the per-CPU part of the counter
	 * absorbs up to 32 pages per CPU before it folds them into the total): nothing to add.
	 * Equal to the entry's value when read is as if swapped with it (delta 0).
	 */
	if (curr && pages == mm_pages(e, member)) {
		if (btf)
			rss_cpu_note(mm, member, pages, gen);
		return;
	}
	if (!t) {
		t = bpf_map_lookup_elem(&tasks, &e->task_key);
		if (!t)
			return;
	}
	switch (member) {
	case 0:
		old = __sync_lock_test_and_set(&e->pages[0], pages);
		break;
	case 1:
		old = __sync_lock_test_and_set(&e->pages[1], pages);
		break;
	default:
		old = __sync_lock_test_and_set(&e->pages[3], pages);
		break;
	}
	if (btf && curr)
		rss_cpu_note(mm, member, pages, gen);
	delta = (pages - old) * (__s64)page_size;
	/*
	 * The last page of an exited process's mm going away (exit_mmap runs after the exit
	 * tracepoint, in a context whose mm is no longer this one, and after its last user left
	 * it): the entry is done. A live mm emptied by another context (reclaim) keeps its
	 * entry: its threads' fast path skips a value they saw last without looking it up.
	 */
	if (!curr && mm_sum(e) == 0 && RD(btf, mm, mm_users.counter) == 0)
		mm_del(&mmkey, e);
	if (!delta)
		return;
	now = bpf_ktime_get_ns();
	mem_integrate(t, now);
	sum = __sync_fetch_and_add(&t->rss_bytes, delta) + delta;
	if (sum > 0) {
		for (int i = 0; i < 8; i++) {
			peak = t->rss_peak_bytes;
			if ((__u64)sum <= peak)
				break;
			if (__sync_val_compare_and_swap(&t->rss_peak_bytes, peak, (__u64)sum) ==
			    peak)
				break;
		}
	}
	task_dirty(t);
}

/* ---- IO ----------------------------------------------------------------------------------- */

#if defined(__TARGET_ARCH_x86)
#define SYSCALL_NR(regs) BPF_CORE_READ(regs, orig_ax)
enum {
	NR_read = 0,
	NR_write = 1,
	NR_pread64 = 17,
	NR_pwrite64 = 18,
	NR_readv = 19,
	NR_writev = 20,
	NR_sendfile = 40,
	NR_preadv = 295,
	NR_pwritev = 296,
	NR_copy_file_range = 326,
	NR_preadv2 = 327,
	NR_pwritev2 = 328,
};
#elif defined(__TARGET_ARCH_arm64)
#define SYSCALL_NR(regs) BPF_CORE_READ(regs, syscallno)
enum {
	NR_read = 63,
	NR_write = 64,
	NR_pread64 = 67,
	NR_pwrite64 = 68,
	NR_readv = 65,
	NR_writev = 66,
	NR_sendfile = 71,
	NR_preadv = 69,
	NR_pwritev = 70,
	NR_copy_file_range = 285,
	NR_preadv2 = 286,
	NR_pwritev2 = 287,
};
#else
#error "meter.bpf.c: syscall numbers for this architecture are missing"
#endif

/* Mirrors the kernel's rchar/wchar accounting (add_rchar/add_wchar callers). */
static __always_inline void on_sys_exit(struct pt_regs *regs, long ret)
{
	struct meter_task *t;
	int rd = 0, wr = 0;
	long nr;

	if (ret <= 0)
		return;
	nr = SYSCALL_NR(regs);
	switch (nr) {
	case NR_read:
	case NR_pread64:
	case NR_readv:
	case NR_preadv:
	case NR_preadv2:
		rd = 1;
		break;
	case NR_write:
	case NR_pwrite64:
	case NR_writev:
	case NR_pwritev:
	case NR_pwritev2:
		wr = 1;
		break;
	case NR_sendfile:
	case NR_copy_file_range:
		rd = wr = 1;
		break;
	default:
		return;
	}
	t = task_of_current();
	if (!t)
		return;
	if (rd)
		__sync_fetch_and_add(&t->io_read_bytes, ret);
	if (wr)
		__sync_fetch_and_add(&t->io_write_bytes, ret);
	task_dirty(t);
}

static __always_inline void on_rq_issue(struct request *rq)
{
	struct meter_task *t = task_of_current();
	__u32 len, op;

	if (!t)
		return;
	len = BPF_CORE_READ(rq, __data_len);
	op = BPF_CORE_READ(rq, cmd_flags) & REQ_OP_MASK;
	if (op == 0)
		__sync_fetch_and_add(&t->rq_read_bytes, len);
	else if (op == 1)
		__sync_fetch_and_add(&t->rq_write_bytes, len);
	task_dirty(t);
}

/* ---- program variants --------------------------------------------------------------------- */

SEC("tp_btf/sched_switch")
int BPF_PROG(btf_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	on_switch(prev, next, true);
	return 0;
}
SEC("raw_tp/sched_switch")
int BPF_PROG(raw_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	on_switch(prev, next, false);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(btf_sched_fork, struct task_struct *parent, struct task_struct *child)
{
	on_fork(parent, child, true);
	return 0;
}
SEC("raw_tp/sched_process_fork")
int BPF_PROG(raw_sched_fork, struct task_struct *parent, struct task_struct *child)
{
	on_fork(parent, child, false);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(btf_sched_exit, struct task_struct *p)
{
	on_exit(p, true, false);
	return 0;
}
SEC("raw_tp/sched_process_exit")
int BPF_PROG(raw_sched_exit, struct task_struct *p)
{
	on_exit(p, false, false);
	return 0;
}
/* cpu_at_exit mode (the kfuncs it calls are missing before 6.2: a separate program). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(btf_exit_final, struct task_struct *p)
{
	on_exit(p, true, true);
	return 0;
}

static long settle_one(struct bpf_map *map, __u64 *key, struct meter_dying *v,
		       struct meter_settle_ctx *c)
{
	struct meter_bare b = {.task_key = v->task_key, .slot = v->slot, .gen = v->gen};
	struct task_struct *t;

	if (!c->all && v->task_key != c->task_key)
		return 0;
	t = bpf_kptr_xchg(&v->task, NULL);
	if (!t)
		return 0;
	if (!off_cpu_for_good(t)) {
		if (!c->force) {
			/* A live read's settle (c->live): folded up to now (the live read's walk
			 * no longer sees it: it left the thread list at its exit). */
			if (c->live)
				fold_now(t, bpf_task_storage_get(&tstore, t, 0, 0), &b);
			t = bpf_kptr_xchg(&v->task, t);
			if (t)
				bpf_task_release(t);
			return 0;
		}
	} else {
		/* The periodic drain tells user space of a task it settles (not waited on). */
		final_of(t, bpf_task_storage_get(&tstore, t, 0, 0), &b, c->all);
	}
	bpf_task_release(t);
	if (!bpf_map_delete_elem(&dying, key))
		__sync_fetch_and_add(&dying_n, -1);
	return 0;
}

/*
 * The same for a "recent" slot, its busy word taken (see stash_recent; taken by an exit
 * there now: left to the next settle). The thread's task is in its entry, or in the slot for a
 * bare thread.
 */
static long settle_slot(struct bpf_map *map, __u32 *key, struct meter_recent *v,
			struct meter_settle_ctx *c)
{
	struct meter_thread *th;
	struct task_struct *t;
	struct meter_bare b;
	bool done;

	if (__sync_val_compare_and_swap(&v->busy, 0, 1))
		return 0;
	t = bpf_kptr_xchg(&v->task, NULL);
	if (!t)
		goto out;
	b.task_key = v->task_key;
	b.slot = v->slot;
	b.gen = v->gen;
	th = bpf_task_storage_get(&tstore, t, 0, 0);
	done = off_cpu_for_good(t);
	if (c->all || (th ? th->task_key : b.task_key) == c->task_key || (!th && !b.gen)) {
		if (done)
			final_of(t, th, &b, c->all);
		if (done || c->force || (!th && !b.gen)) {
			bpf_task_release(t);
			__sync_fetch_and_add(&dying_n, -1); /* the slot emptied */
			goto out;
		}
		if (c->live)
			fold_now(t, th, &b);
	}
	/* Not this one's to settle, or not done: back to its slot (empty: its busy word is
	 * ours). */
	t = bpf_kptr_xchg(&v->task, t);
	if (t)
		bpf_task_release(t);
out:
	__sync_lock_test_and_set(&v->busy, 0);
	return 0;
}

/* Run by meter_settle (BPF_PROG_RUN): final folds of the task's threads that are done. */
SEC("syscall")
int meter_settle_prog(struct meter_settle_ctx *ctx)
{
	struct meter_settle_ctx c = {.task_key = ctx->task_key,
				     .force = ctx->force && !ctx->all,
				     .all = ctx->all,
				     .live = ctx->live && ctx->all};

	bpf_for_each_map_elem(&recent, settle_slot, &c, 0);
	bpf_for_each_map_elem(&dying, settle_one, &c, 0);
	return 0;
}

/*
 * A live read's visit of a thread without an entry that has run (or with a new one it made
 * before, METER_TH_NEW): a bare thread of a tracked task (its leader's entry says so), or a
 * forked process's thread (no entry at its fork, see on_fork; its process's "procs" entry
 * says so, looked up only where its parent may have made it a tracked one: parent_keeps)
 * gets one now, with a zero base, and is folded up to now through it, unless its exit has
 * begun. The entry is made new: every fold takes it for none until this takes it over
 * (take_new), which it does only after a fully ordered atomic (bare_given) and a look at
 * PF_EXITING. The exit program sets PF_EXITING and makes a fully ordered atomic (the group's
 * live count) before it looks for the entry: so either it sees the entry taken over (and the
 * settle folds through it), or this sees PF_EXITING and leaves it new; a final fold of a new
 * entry sets METER_TH_FINAL over it and folds the thread whole, and the take-over (one
 * compare-and-swap) fails once that is set. No nanosecond is folded twice, also for a zombie
 * leader this meets after its final fold. A bare thread that became its process's leader
 * (exec in a thread) is found as a leader.
 */
static __always_inline void walk_bare(struct task_struct *t, struct meter_thread *th)
{
	struct task_struct *leader = t->group_leader;
	struct meter_thread nt = {.flags = METER_TH_BARE_KIDS | METER_TH_NEW}, *lt = NULL;
	__u32 tgid;
	struct member *p;

	if (!t->se.sum_exec_runtime || !bpf_core_field_exists(struct task_struct, bpf_storage))
		return;
	if (!th) {
		if (leader != t && leader->bpf_storage)
			lt = bpf_task_storage_get(&tstore, leader, 0, 0);
		if (lt && (lt->flags & METER_TH_BARE_KIDS)) {
			nt.task_key = lt->task_key;
			nt.slot = lt->slot;
			nt.gen = lt->gen;
		} else if (!lt && parent_keeps(leader)) {
			tgid = t->tgid;
			p = bpf_map_lookup_elem(&procs, &tgid);
			if (!p || !p->gen || !(p->flags & MEMBER_BARE_THREADS))
				return;
			nt.task_key = p->task_key;
			nt.slot = p->slot;
			nt.gen = p->gen;
		} else {
			return;
		}
		th = bpf_task_storage_get(&tstore, t, &nt, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!th)
			return;
	}
	__sync_fetch_and_add(&bare_given, 1);
	if (!(t->flags & PF_EXITING) && take_new(th))
		slice_end(th, t, true, true);
}

/* cpu_at_exit mode, live reads: fold every tracked thread's totals up to now. */
SEC("iter/task")
int meter_live(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct meter_thread *th;

	if (!t)
		return 0;
	th = bpf_task_storage_get(&tstore, t, 0, 0);
	if (!th || (th->flags & METER_TH_NEW))
		walk_bare(t, th);
	else if (!(th->flags & METER_TH_FINAL))
		slice_end(th, t, true, true);
	return 0;
}

/* Open-coded task iterator and RCU kfuncs (Linux 6.7 and 6.2): declared here, the libbpf
 * headers of this build do not have them. */
extern int bpf_iter_task_new(struct bpf_iter_task *it, struct task_struct *task,
			     unsigned int flags) __ksym __weak;
extern struct task_struct *bpf_iter_task_next(struct bpf_iter_task *it) __ksym __weak;
extern void bpf_iter_task_destroy(struct bpf_iter_task *it) __ksym __weak;
extern void bpf_rcu_read_lock(void) __ksym __weak;
extern void bpf_rcu_read_unlock(void) __ksym __weak;

/*
 * cpu_at_exit mode, live reads where the kernel has open-coded task iterators (run by
 * BPF_PROG_RUN): the fold of meter_live, but a walk of the thread list under RCU, without
 * iter/task's pid lookup and seq_file step per thread, and a fold only for the threads that
 * ran since their last one (se.sum_exec_runtime moved; a thread that did not run changed none
 * of the counters folded: utime, stime and ioac move only with it on its CPU) or wait for
 * their base. So a sleeping task's threads cost a storage lookup and a compare each, and its
 * mark in "dirty" stays 0.
 */
SEC("syscall")
int meter_walk(void *ctx)
{
	struct bpf_iter_task it;
	struct meter_thread *th;
	struct task_struct *t;

	bpf_rcu_read_lock();
	bpf_iter_task_new(&it, NULL, BPF_TASK_ITER_ALL_THREADS);
	while ((t = bpf_iter_task_next(&it))) {
		th = bpf_task_storage_get(&tstore, t, 0, 0);
		if (!th || (th->flags & METER_TH_NEW)) {
			walk_bare(t, th);
			continue;
		}
		if (th->flags & METER_TH_FINAL)
			continue;
		if (!(th->flags & METER_TH_NEED_BASE) && t->se.sum_exec_runtime == th->sum_exec)
			continue;
		slice_end(th, t, true, true);
	}
	bpf_iter_task_destroy(&it);
	bpf_rcu_read_unlock();
	return 0;
}

SEC("tp_btf/rss_stat")
int BPF_PROG(btf_rss_stat, struct mm_struct *mm, int member)
{
	on_rss_stat(mm, member, true);
	return 0;
}
SEC("raw_tp/rss_stat")
int BPF_PROG(raw_rss_stat, struct mm_struct *mm, int member)
{
	on_rss_stat(mm, member, false);
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(btf_sys_exit, struct pt_regs *regs, long ret)
{
	on_sys_exit(regs, ret);
	return 0;
}
SEC("raw_tp/sys_exit")
int BPF_PROG(raw_sys_exit, struct pt_regs *regs, long ret)
{
	on_sys_exit(regs, ret);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(btf_rq_issue, struct request *rq)
{
	on_rq_issue(rq);
	return 0;
}
SEC("raw_tp/block_rq_issue")
int BPF_PROG(raw_rq_issue, struct request *rq)
{
	on_rq_issue(rq);
	return 0;
}

/* ---- OOM kills ---------------------------------------------------------------------------- */

/*
 * oom:mark_victim fires when the kernel's OOM killer has chosen a victim and sent it SIGKILL,
 * whoever ran out of memory: the node as a whole (the global OOM killer) or a memory cgroup at
 * its limit. The kill is counted in the victim's memory cgroup (memory.oom_control's oom_kill
 * on v1, memory.events on v2) just before. A victim that is a member of a task is reported at
 * once (forced wakeup): on cgroup v1 the kernel signals the cgroup's own OOM only, so a node-wide
 * OOM kill would otherwise be seen at the task's next sample. Rare: no fast path needed.
 */
static __always_inline void on_mark_victim(__u32 pid, __u32 tgid)
{
	struct meter_bpf_event *ev;
	struct member *p = bpf_map_lookup_elem(&procs, &tgid);

	if (!p)
		return;
	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&ringbuf_drops, 1);
		return;
	}
	ev->type = METER_BPF_EV_OOM_VICTIM;
	ev->pid = tgid;
	ev->task_key = p->task_key;
	ev->exit_code = (__s32)pid;
	ev->_pad = 0;
	bpf_ringbuf_submit(ev, BPF_RB_FORCE_WAKEUP);
}

/* Recent kernels: mark_victim(struct task_struct *task, uid_t uid). */
SEC("tp_btf/mark_victim")
int BPF_PROG(btf_mark_victim, struct task_struct *task, uid_t uid)
{
	on_mark_victim(task->pid, task->tgid);
	return 0;
}

/*
 * Older kernels pass the victim's pid (a thread's id: the process's leader in the common case,
 * looked up as its TGID); recent ones the task_struct, recognised by the event's "uid" field,
 * which came with it.
 */
SEC("raw_tp/mark_victim")
int BPF_PROG(raw_mark_victim, __u64 arg)
{
	if (bpf_core_field_exists(struct trace_event_raw_mark_victim, uid)) {
		struct task_struct *task = (void *)arg;

		on_mark_victim(BPF_CORE_READ(task, pid), BPF_CORE_READ(task, tgid));
	} else {
		on_mark_victim((__u32)arg, (__u32)arg);
	}
	return 0;
}

/* ---- network ------------------------------------------------------------------------------ */

SEC("cgroup_skb/ingress")
int meter_ingress(struct __sk_buff *skb)
{
	__u64 id = bpf_skb_cgroup_id(skb);
	struct meter_net *n = bpf_map_lookup_elem(&net, &id);

	if (n) {
		__sync_fetch_and_add(&n->rx_bytes, skb->len);
		__sync_fetch_and_add(&n->rx_packets, 1);
		dirty_set(n->slot);
	}
	return 1;
}

SEC("cgroup_skb/egress")
int meter_egress(struct __sk_buff *skb)
{
	__u64 id = bpf_skb_cgroup_id(skb);
	struct meter_net *n = bpf_map_lookup_elem(&net, &id);

	if (n) {
		__sync_fetch_and_add(&n->tx_bytes, skb->len);
		__sync_fetch_and_add(&n->tx_packets, 1);
		dirty_set(n->slot);
	}
	return 1;
}
