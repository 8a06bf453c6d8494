// SPDX-License-Identifier: (MIT OR GPL-2.0)
/*
 * Security audit trail, kernel side. See docs/audit.md.
 *
 * Exec events: sched_process_exec of a tracked process (tgid map, inherited in
 * sched_process_fork, dropped in sched_process_exit when the thread group is dead). Each
 * tracepoint program exists as tp_btf and raw_tp with the same body; the loader keeps one set.
 * Network policy: cgroup/connect4|6 and cgroup/sendmsg4|6 attached to each task's
 * unified-hierarchy cgroup; rules in order, first match wins, else loopback is allowed, else
 * the task's default. A destination that reaches the node itself (a wildcard address, loopback,
 * any of the node's addresses) is one destination: it is denied when the policy denies any
 * address of the node, and the event names the address the kernel connects to (the wildcard
 * resolved). Every decision is an event. Events past the task's record budget (budgets[key], a
 * token bucket) are counted per task and kind instead of being sent, a sample of them sent
 * flagged; events that do not fit in the ring buffer are counted per task (tasks[key].lost),
 * so the agent can report the exact number of each.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "bpf/audit_types.h"
#include "bpf/member_types.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define AF_INET	    2
#define AF_INET6    10
#define IPPROTO_TCP 6
#define IPPROTO_UDP 17

/* Map sizes are placeholders: the loader sets them from audit_opts before load. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct audit_task);
} tasks SEC(".maps");

/*
 * The task membership map (member_types.h). Shared with the metering programs where they are
 * loaded (the loader reuses their map: then this object's fork and exit programs are not
 * loaded, the meter's keep it); otherwise this object's own, kept by its own fork and exit
 * programs.
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct member);
} procs SEC(".maps");

/* Unified-hierarchy cgroup id -> task_key (tasks with a cgroup). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u64);
} cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct audit_bpf_policy);
} policies SEC(".maps");

/* Per-task record budget, written by user space (audit_set_budget). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, struct audit_bpf_budget);
} budgets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1024 * 1024);
} events SEC(".maps");

/* Exec records are built here (too big for the stack), then copied to the ring buffer. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct audit_bpf_exec);
} scratch SEC(".maps");

const volatile __u32 argv_max = 1024;
/* 1: "procs" is the meter's; its members include tasks this object does not audit. */
const volatile __u32 shared_members = 0;

/*
 * The node's own addresses, loopback included (written by user space through the mmaped .bss
 * when they change: audit_set_node_addrs). A reader may see a list being rewritten; entries
 * are written before the count grows.
 */
struct audit_bpf_addr node_addrs[AUDIT_MAX_NODE_ADDRS];
__u32 node_addr_count;

/* Read by user space through the mmaped .bss. */
__u64 lost_untracked; /* drops of events whose task entry was already gone */
__u64 map_full;	      /* processes not tracked: procs map full */

/* ---- record budget ----------------------------------------------------------------------- */

enum { BUDGET_SEND, BUDGET_SEND_QUIET, BUDGET_SAMPLE, BUDGET_COUNT };

/*
 * Ring buffer bytes below which an event of a task running on its bucket (or a sampled one)
 * is submitted without waking the agent (BPF_RB_NO_WAKEUP): the agent reads it at its next
 * wakeup or tick (250 ms), with others, instead of once per event (set by the loader: a
 * quarter of the ring buffer).
 */
const volatile __u32 quiet_bytes = 256 * 1024;

static __always_inline __u64 wake_flags(int verdict)
{
	if (verdict == BUDGET_SEND)
		return 0;
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) < quiet_bytes ? BPF_RB_NO_WAKEUP : 0;
}

/*
 * Is an event of the task within its record budget? BUDGET_SEND: yes, send it;
 * BUDGET_SEND_QUIET: yes, and the task has used more than half its burst (a flood held to the
 * rate: no wakeup per event, see wake_flags); BUDGET_SAMPLE:
 * no, but send it flagged as one of the period's sample; BUDGET_COUNT: no, the caller counts it
 * in the task's entry. A token bucket as a GCRA over one word (tat), without a lock (tracing
 * programs cannot take bpf_spin_lock) and without a loop: under concurrent events of one task
 * the bucket may let a few more through than the rate; each event is sent or counted exactly.
 * t: the task's entry, or NULL. A global function: the verifier checks it once, on its own;
 * inlined, its outcomes multiplied the states of each program that reaches it (with the cwd
 * walk after it in the exec programs, Linux 6.1's verifier ran for minutes: see
 * docs/audit.md, "Verifier cost").
 */
__noinline int budget_check(struct audit_task *t, __u64 key, __u64 now)
{
	struct audit_bpf_budget *b;
	__u64 step, old, period;

	if (!t)
		return BUDGET_SEND;
	b = bpf_map_lookup_elem(&budgets, &key);
	if (!b)
		return BUDGET_SEND;
	step = b->interval_ns;
	if (!b->closed) {
		if (!step)
			return BUDGET_SEND;
		old = __sync_fetch_and_add(&t->tat, step);
		if (old <= now) {
			/* the bucket was full: the next arrival is one step from now */
			__sync_val_compare_and_swap(&t->tat, old + step, now + step);
			return BUDGET_SEND;
		}
		if (old - now <= b->tau_ns)
			return old - now > b->tau_ns / 2 ? BUDGET_SEND_QUIET : BUDGET_SEND;
		__sync_fetch_and_add(&t->tat, -step); /* not taken: give the step back */
	}
	if (!b->sample_max || !b->sample_period_ns)
		return BUDGET_COUNT;
	period = now / b->sample_period_ns;
	if (t->sample_period != period) {
		t->sample_period = period;
		t->sample_used = 0;
	}
	if (__sync_fetch_and_add(&t->sample_used, 1) < b->sample_max)
		return BUDGET_SAMPLE;
	return BUDGET_COUNT;
}

/* ---- process lifetime --------------------------------------------------------------------- */

static __always_inline void on_fork(struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid, cpid, ctgid;
	struct member *m, nm = {};
	struct audit_task *t;
	__u64 k;

	cpid = BPF_CORE_READ(child, pid);
	ctgid = BPF_CORE_READ(child, tgid);
	if (cpid != ctgid)
		return; /* a new thread: same tgid, already tracked */
	ptgid = BPF_CORE_READ(parent, tgid);
	m = bpf_map_lookup_elem(&procs, &ptgid);
	if (!m)
		return;
	k = m->task_key;
	nm.task_key = k;
	/* The tracepoint fires before the child is first woken: no entry of its own yet (a
	 * leftover of a forgotten task is replaced: its count errs high, which only sweeps). */
	if (bpf_map_update_elem(&procs, &cpid, &nm, BPF_ANY)) {
		__sync_fetch_and_add(&map_full, 1);
		return;
	}
	t = bpf_map_lookup_elem(&tasks, &k);
	if (t)
		__sync_fetch_and_add(&t->procs_alive, 1);
}

static __always_inline void on_exit(struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	struct audit_task *t;
	struct member *m;
	__u64 k;

	/* signal->live was decremented before the tracepoint: 0 means the group is dead. */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return;
	m = bpf_map_lookup_elem(&procs, &tgid);
	if (!m)
		return;
	k = m->task_key;
	/* Whoever deletes the entry (exit or audit_forget) owns the decrement. */
	if (bpf_map_delete_elem(&procs, &tgid))
		return;
	t = bpf_map_lookup_elem(&tasks, &k);
	if (t)
		__sync_fetch_and_add(&t->procs_alive, -1);
}

/* ---- exec --------------------------------------------------------------------------------- */

struct cwd_walk {
	__u64 d, mnt;	/* struct dentry *, struct mount * */
	__u64 mnt_root; /* struct dentry *: the mount's root, read when the mount changes */
	__u32 depth;
	__u32 truncated;
};

/*
 * bpf_loop callback: one step of the walk up from the working directory: cross a mount point,
 * or record one component into the exec record being built (scratch), innermost first; stop
 * (1) at the root of the mount namespace or when the record has no room left. Each kernel
 * field is a probe-read helper call (the pointers are scalars here): the mount's root is read
 * once per mount, not once per component.
 */
static long cwd_step(__u32 i, void *data)
{
	struct cwd_walk *w = data;
	struct dentry *d = (struct dentry *)w->d, *parent;
	struct mount *mnt = (struct mount *)w->mnt, *mnt_parent;
	struct audit_bpf_exec *e;
	__u32 zero = 0, depth = w->depth;

	/* depth is checked and used from one register: reloaded from *w for the use (as clang
	 * does without this), its bound is lost for Linux 6.1's verifier */
	barrier_var(depth);
	parent = BPF_CORE_READ(d, d_parent);
	if ((__u64)d == w->mnt_root || d == parent) {
		mnt_parent = BPF_CORE_READ(mnt, mnt_parent);
		if ((__u64)d != w->mnt_root || mnt_parent == mnt) {
			w->truncated = 0; /* reached the root */
			return 1;
		}
		w->d = (__u64)BPF_CORE_READ(mnt, mnt_mountpoint);
		w->mnt = (__u64)mnt_parent;
		w->mnt_root = (__u64)BPF_CORE_READ(mnt_parent, mnt.mnt_root);
		return 0;
	}
	if (depth >= AUDIT_CWD_DEPTH)
		return 1;
	e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 1;
	bpf_probe_read_kernel_str(e->cwd[depth], AUDIT_CWD_NAME_CAP, BPF_CORE_READ(d, d_name.name));
	w->depth = depth + 1;
	w->d = (__u64)parent;
	return 0;
}

/*
 * Working directory of the exec record in scratch, innermost component first, by walking
 * d_parent and crossing mount points (struct mount), from the task's fs->pwd (dentry,
 * vfsmount). bpf_d_path is not allowed in tracepoint programs. Stops at the root of the mount
 * namespace (a chroot's root is not recognised: the path is then the global one). A global
 * function and a bpf_loop callback: the verifier checks the walk once; inlined (20 unrolled
 * steps) in the exec programs, it was checked once per state that reaches it, which made Linux
 * 6.1's verifier run for minutes (docs/audit.md, "Verifier cost"). The kernel pointers come as
 * scalars: a global function takes no BTF pointer.
 */
__noinline int read_cwd(__u64 dentry, __u64 vfsmount)
{
	struct cwd_walk w = {.d = dentry, .depth = 0, .truncated = 1};
	struct audit_bpf_exec *e;
	__u32 zero = 0;

	e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 0;
	e->cwd_depth = 0;
	e->cwd_truncated = 0;
	if (!dentry || !vfsmount)
		return 0;
	w.mnt = (__u64)container_of((struct vfsmount *)vfsmount, struct mount, mnt);
	w.mnt_root = (__u64)BPF_CORE_READ((struct vfsmount *)vfsmount, mnt_root);
	bpf_loop(AUDIT_CWD_DEPTH + 8, cwd_step, &w, 0);
	e->cwd_depth = w.depth;
	e->cwd_truncated = w.truncated;
	return 0;
}

/* tp_btf: a direct load (a probe-read helper call per pointer in raw_tp) */
#define RD(btf, p, f) ((btf) ? (p)->f : BPF_CORE_READ(p, f))

static __always_inline void on_exec(struct task_struct *p, struct linux_binprm *bprm,
				    const bool btf)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32, zero = 0, len, total;
	__u64 k, uidgid, start, end, now;
	struct audit_bpf_exec *e;
	struct member *m;
	struct audit_task *t;
	struct fs_struct *fs;
	struct mm_struct *mm;
	int verdict;
	long r;

	m = bpf_map_lookup_elem(&procs, &tgid);
	if (!m)
		return;
	k = m->task_key;
	now = bpf_ktime_get_ns();
	t = bpf_map_lookup_elem(&tasks, &k);
	if (!t && shared_members)
		return; /* a member this object does not audit */
	verdict = budget_check(t, k, now);
	if (verdict == BUDGET_COUNT) {
		if (t)
			__sync_fetch_and_add(&t->over_exec, 1);
		return;
	}
	e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return;
	e->h.type = AUDIT_BPF_EV_EXEC;
	e->h.flags = verdict == BUDGET_SAMPLE ? AUDIT_BPF_F_OVER : 0;
	e->h.pid = tgid;
	e->h.task_key = k;
	e->h.ktime_ns = now;
	e->ppid = btf ? p->real_parent->tgid : BPF_CORE_READ(p, real_parent, tgid);
	uidgid = bpf_get_current_uid_gid();
	e->uid = (__u32)uidgid;
	e->gid = (__u32)(uidgid >> 32);
	e->cwd_depth = 0;
	e->cwd_truncated = 0;
	e->_pad = 0;
	e->path[0] = '\0';
	bpf_probe_read_kernel_str(e->path, sizeof(e->path), RD(btf, bprm, filename));
	/* read_cwd, a global function, takes scalars: the path's fields come by probe-read */
	fs = RD(btf, p, fs);
	read_cwd((__u64)BPF_CORE_READ(fs, pwd.dentry), (__u64)BPF_CORE_READ(fs, pwd.mnt));

	mm = RD(btf, p, mm);
	start = RD(btf, mm, arg_start);
	end = RD(btf, mm, arg_end);
	total = end > start ? (__u32)(end - start) : 0;
	len = total < argv_max ? total : argv_max;
	if (len > AUDIT_ARGV_CAP)
		len = AUDIT_ARGV_CAP;
	e->argv_total = total;
	e->argv_len = 0;
	barrier_var(len);
	if (len > 0 && len <= AUDIT_ARGV_CAP) {
		/* The argument pages were written by execve a moment ago: they are present. */
		r = bpf_probe_read_user(e->argv, len, (void *)start);
		if (r == 0)
			e->argv_len = len;
	}
	len = e->argv_len;
	barrier_var(len);
	if (len > AUDIT_ARGV_CAP)
		len = AUDIT_ARGV_CAP;
	/* counted in the task's entry found above (as the network decisions do) */
	if (bpf_ringbuf_output(&events, e, offsetof(struct audit_bpf_exec, argv) + len,
			       wake_flags(verdict))) {
		if (t)
			__sync_fetch_and_add(&t->lost, 1);
		else
			__sync_fetch_and_add(&lost_untracked, 1);
	} else if (t) {
		__sync_fetch_and_add(&t->events, 1);
	}
}

/* ---- network policy ----------------------------------------------------------------------- */

/* The audited task of the current process: by cgroup id, else by membership. */
static __always_inline bool task_of_current(__u64 *ret)
{
	__u64 cg = bpf_get_current_cgroup_id();
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 *key = bpf_map_lookup_elem(&cgroups, &cg);
	struct member *m;

	if (key) {
		*ret = *key;
		return true;
	}
	m = bpf_map_lookup_elem(&procs, &tgid);
	if (!m)
		return false;
	*ret = m->task_key;
	/* A member this object does not audit (the map is the meter's). */
	return !shared_members || bpf_map_lookup_elem(&tasks, ret);
}

static __always_inline bool is_loopback(const __u32 a[4], __u8 family)
{
	if (family == 4)
		return (bpf_ntohl(a[0]) >> 24) == 127;
	return a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == bpf_htonl(1);
}

/* ::ffff:a.b.c.d */
static __always_inline bool is_v4mapped(const __u32 a[4])
{
	return a[0] == 0 && a[1] == 0 && a[2] == bpf_htonl(0xffff);
}

static __always_inline bool rule_match(const struct audit_bpf_rule *r, const __u32 a[4],
				       __u8 family, bool mapped, __u16 port)
{
	if (r->port && r->port != port)
		return false;
	if (r->family == 4) {
		__u32 v4 = family == 4 ? a[0] : (mapped ? a[3] : 0);

		if (family != 4 && !mapped)
			return false;
		return (v4 & r->mask[0]) == r->addr[0];
	}
	if (family != 6)
		return false;
	return (a[0] & r->mask[0]) == r->addr[0] && (a[1] & r->mask[1]) == r->addr[1] &&
	       (a[2] & r->mask[2]) == r->addr[2] && (a[3] & r->mask[3]) == r->addr[3];
}

/* A destination as the rules see it (family 4 or 6; mapped: ::ffff:a.b.c.d). */
struct dest {
	__u32 a[4];
	__u16 port;
	__u8 family;
	__u8 mapped;
};

/*
 * Rules in order, first match: AUDIT_BPF_ALLOW / AUDIT_BPF_DENY | the rule's number (1-based)
 * << 8, 0 when none matches (or pol is NULL). A global function: the verifier checks the walk
 * over the rules once, instead of once per state of each sock_addr program (and of the
 * callback below) that reaches it (docs/audit.md, "Verifier cost").
 */
__noinline int policy_match(const struct audit_bpf_policy *pol, const struct dest *q)
{
	if (!pol || !q)
		return 0;
	for (__u32 i = 0; i < AUDIT_MAX_RULES; i++) {
		if (i >= pol->n_rules)
			break;
		if (rule_match(&pol->rules[i], q->a, q->family, q->mapped, q->port))
			return pol->rules[i].action | (int)(i + 1) << 8;
	}
	return 0;
}

/* Rules in order, first match: AUDIT_BPF_ALLOW / AUDIT_BPF_DENY, 0 when none matches. */
static __always_inline __u8 first_match(const struct audit_bpf_policy *pol, const __u32 a[4],
					__u8 family, bool mapped, __u16 port, __u8 *rule)
{
	struct dest q = {.a = {a[0], a[1], a[2], a[3]},
			 .port = port,
			 .family = family,
			 .mapped = mapped ? 1 : 0};
	int m = policy_match(pol, &q);

	if (!m)
		return 0;
	*rule = (__u8)(m >> 8);
	return (__u8)(m & 0xff);
}

static __always_inline bool is_any(const __u32 a[4], __u8 family, bool mapped)
{
	if (family == 4)
		return a[0] == 0;
	if (mapped)
		return a[3] == 0;
	return a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == 0;
}

struct node_addr_walk {
	__u32 a[4];
	__u8 family;
	bool mapped;
	bool found;
};

/*
 * bpf_loop callback over node_addrs: stop (1) at the first that equals w->a (IPv4 also as
 * ::ffff:a.b.c.d). A callback, not an inlined loop: the verifier checks its body once, where a
 * 64-times unrolled comparison inside each sock_addr program made older verifiers give up
 * (E2BIG on Linux 6.1).
 */
static long match_node_addr(__u32 i, void *data)
{
	struct node_addr_walk *w = data;
	const struct audit_bpf_addr *na;

	if (i >= AUDIT_MAX_NODE_ADDRS || i >= node_addr_count)
		return 1;
	na = &node_addrs[i];
	if (na->family == 4 && (w->family == 4 || w->mapped)) {
		if (na->addr[0] != (w->family == 4 ? w->a[0] : w->a[3]))
			return 0;
	} else if (na->family == 6 && w->family == 6 && !w->mapped) {
		if (na->addr[0] != w->a[0] || na->addr[1] != w->a[1] || na->addr[2] != w->a[2] ||
		    na->addr[3] != w->a[3])
			return 0;
	} else {
		return 0;
	}
	w->found = true;
	return 1;
}

/*
 * A node address (IPv4 also as ::ffff:a.b.c.d); fam_mapped: family | mapped << 8. A global
 * function: the verifier checks it once, on its own, instead of once per state of each
 * sock_addr program that reaches it (with the walk below, that made Linux 6.1's verifier run
 * for minutes and give up with E2BIG).
 */
__noinline int node_addr_match(__u32 a0, __u32 a1, __u32 a2, __u32 a3, __u32 fam_mapped)
{
	struct node_addr_walk w = {.a = {a0, a1, a2, a3},
				   .family = (__u8)(fam_mapped & 0xff),
				   .mapped = (fam_mapped >> 8) != 0,
				   .found = false};

	bpf_loop(AUDIT_MAX_NODE_ADDRS, match_node_addr, &w, 0);
	return w.found ? 1 : 0;
}

struct local_walk {
	__u64 key;
	__u16 port;
	__u8 rule;
};

/*
 * bpf_loop callback over node_addrs: stop (1) at the first node address the policy denies.
 * The policy is looked up again here: the callback cannot carry the caller's map pointer.
 */
static long deny_any_node_addr(__u32 i, void *data)
{
	struct local_walk *w = data;
	struct audit_bpf_policy *pol;
	const struct audit_bpf_addr *na;
	__u32 a[4];
	__u8 rule = 0;

	if (i >= AUDIT_MAX_NODE_ADDRS || i >= node_addr_count)
		return 1;
	pol = bpf_map_lookup_elem(&policies, &w->key);
	if (!pol)
		return 1;
	na = &node_addrs[i];
	a[0] = na->addr[0];
	a[1] = na->addr[1];
	a[2] = na->addr[2];
	a[3] = na->addr[3];
	if (first_match(pol, a, na->family == 4 ? 4 : 6, false, w->port, &rule) == AUDIT_BPF_DENY) {
		w->rule = rule;
		return 1;
	}
	return 0;
}

/* The rule number (1-based) of the first node address the task's policy denies for port, 0
 * when none is denied. A global function, for the same reason as node_addr_match. */
__noinline int node_deny_rule(__u64 key, __u32 port)
{
	struct local_walk w = {.key = key, .port = (__u16)port, .rule = 0};

	bpf_loop(AUDIT_MAX_NODE_ADDRS, deny_any_node_addr, &w, 0);
	return w.rule;
}

/*
 * The address a connect to a wildcard reaches, as the kernel resolves it: IPv4 0.0.0.0 -> the
 * socket's bound source address, else 127.0.0.1 (ip_route_output_key_hash_rcu); IPv6 :: ->
 * ::1, or ::ffff:127.0.0.1 for a socket bound to a v4-mapped address; ::ffff:0.0.0.0 goes the
 * IPv4 way.
 */
static __always_inline void resolve_any(struct bpf_sock_addr *ctx, __u32 a[4], __u8 family,
					bool mapped)
{
	struct bpf_sock *sk = ctx->sk;
	__u32 s0 = 0, s1 = 0, s2 = 0, s3 = 0;

	if (sk) {
		if (family == 4) {
			s3 = sk->src_ip4;
		} else {
			s0 = sk->src_ip6[0];
			s1 = sk->src_ip6[1];
			s2 = sk->src_ip6[2];
			s3 = sk->src_ip6[3];
		}
	}
	if (family == 4) {
		a[0] = s3 ? s3 : bpf_htonl(0x7f000001);
		return;
	}
	if (mapped || (s0 == 0 && s1 == 0 && s2 == bpf_htonl(0xffff))) {
		bool src_mapped = s0 == 0 && s1 == 0 && s2 == bpf_htonl(0xffff);

		a[0] = 0;
		a[1] = 0;
		a[2] = bpf_htonl(0xffff);
		a[3] = mapped && src_mapped && s3 ? s3 : bpf_htonl(0x7f000001);
		return;
	}
	a[0] = 0;
	a[1] = 0;
	a[2] = 0;
	a[3] = bpf_htonl(1);
}

/* Returns 1 (allow) or 0 (deny: the system call fails with EPERM). */
static __always_inline int decide(struct bpf_sock_addr *ctx, __u8 family, __u8 op)
{
	struct audit_bpf_policy *pol;
	struct audit_bpf_net *ev;
	__u32 a[4] = {};
	__u8 verdict = 0, rule = 0;
	__u64 key, now;
	struct audit_task *t;
	__u16 port;
	bool mapped, loopback, local;
	int send;

	if (!task_of_current(&key))
		return 1; /* not a tracked task (see docs/audit.md) */
	if (family == 4) {
		a[0] = ctx->user_ip4;
	} else {
		a[0] = ctx->user_ip6[0];
		a[1] = ctx->user_ip6[1];
		a[2] = ctx->user_ip6[2];
		a[3] = ctx->user_ip6[3];
	}
	port = bpf_ntohs((__u16)ctx->user_port);
	mapped = family == 6 && is_v4mapped(a);
	if (is_any(a, family, mapped))
		resolve_any(ctx, a, family, mapped);
	loopback = is_loopback(a, family) || (mapped && (bpf_ntohl(a[3]) >> 24) == 127);
	local = loopback ||
		node_addr_match(a[0], a[1], a[2], a[3], family | (mapped ? 1u << 8 : 0u)) != 0;

	pol = bpf_map_lookup_elem(&policies, &key);
	if (pol)
		verdict = first_match(pol, a, family, mapped, port, &rule);
	if (local && pol && verdict != AUDIT_BPF_DENY) {
		/* The node is one destination: denied if any of its addresses is. */
		int r = node_deny_rule(key, port);

		if (r > 0) {
			verdict = AUDIT_BPF_DENY;
			rule = (__u8)r;
		}
	}
	if (!verdict) {
		if (loopback)
			verdict = AUDIT_BPF_ALLOW;
		else if (pol && pol->default_action == AUDIT_BPF_DENY)
			verdict = AUDIT_BPF_DENY;
		else
			verdict = AUDIT_BPF_ALLOW;
	}

	now = bpf_ktime_get_ns();
	t = bpf_map_lookup_elem(&tasks, &key);
	send = budget_check(t, key, now);
	if (send == BUDGET_COUNT) {
		if (t)
			__sync_fetch_and_add(
			    verdict == AUDIT_BPF_DENY ? &t->over_net_deny : &t->over_net_allow, 1);
		return verdict == AUDIT_BPF_DENY ? 0 : 1;
	}
	ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (ev) {
		ev->h.type = AUDIT_BPF_EV_NET;
		ev->h.flags = send == BUDGET_SAMPLE ? AUDIT_BPF_F_OVER : 0;
		ev->h.pid = bpf_get_current_pid_tgid() >> 32;
		ev->h.task_key = key;
		ev->h.ktime_ns = now;
		ev->addr[0] = a[0];
		ev->addr[1] = a[1];
		ev->addr[2] = a[2];
		ev->addr[3] = a[3];
		ev->port = port;
		ev->family = family;
		ev->protocol = (__u8)ctx->protocol;
		ev->verdict = verdict;
		ev->op = op;
		ev->rule = rule;
		__builtin_memset(ev->_pad, 0, sizeof(ev->_pad));
		bpf_ringbuf_submit(ev, wake_flags(send));
		if (t)
			__sync_fetch_and_add(&t->events, 1);
	} else if (t) {
		__sync_fetch_and_add(&t->lost, 1);
	} else {
		__sync_fetch_and_add(&lost_untracked, 1);
	}
	return verdict == AUDIT_BPF_DENY ? 0 : 1;
}

SEC("cgroup/connect4")
int audit_connect4(struct bpf_sock_addr *ctx)
{
	return decide(ctx, 4, AUDIT_BPF_OP_CONNECT);
}

SEC("cgroup/connect6")
int audit_connect6(struct bpf_sock_addr *ctx)
{
	return decide(ctx, 6, AUDIT_BPF_OP_CONNECT);
}

SEC("cgroup/sendmsg4")
int audit_sendmsg4(struct bpf_sock_addr *ctx)
{
	return decide(ctx, 4, AUDIT_BPF_OP_SENDMSG);
}

SEC("cgroup/sendmsg6")
int audit_sendmsg6(struct bpf_sock_addr *ctx)
{
	return decide(ctx, 6, AUDIT_BPF_OP_SENDMSG);
}

/* ---- program variants --------------------------------------------------------------------- */

SEC("tp_btf/sched_process_fork")
int BPF_PROG(btf_sched_fork, struct task_struct *parent, struct task_struct *child)
{
	on_fork(parent, child);
	return 0;
}
SEC("raw_tp/sched_process_fork")
int BPF_PROG(raw_sched_fork, struct task_struct *parent, struct task_struct *child)
{
	on_fork(parent, child);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(btf_sched_exit, struct task_struct *p)
{
	on_exit(p);
	return 0;
}
SEC("raw_tp/sched_process_exit")
int BPF_PROG(raw_sched_exit, struct task_struct *p)
{
	on_exit(p);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(btf_sched_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	on_exec(p, bprm, true);
	return 0;
}
SEC("raw_tp/sched_process_exec")
int BPF_PROG(raw_sched_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	on_exec(p, bprm, false);
	return 0;
}
