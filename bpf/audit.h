/* SPDX-License-Identifier: MIT */
/*
 * Security audit trail (user-space side). Loads bpf/audit.bpf.c: exec events of tracked
 * processes (tp_btf, falling back to raw_tp, chosen by a load probe) and, per task with a
 * unified-hierarchy cgroup, the network policy programs cgroup/connect4|6 and
 * cgroup/sendmsg4|6 (deny -> EPERM, every decision an event). Events lost because the ring
 * buffer was full are counted per task (audit_lost). See docs/audit.md.
 * Library code: never prints, returns 0 or -errno.
 */
#pragma once

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#define AUDIT_NET_RULES_MAX 32 /* rules per task (AUDIT_MAX_RULES of the kernel side) */
#define AUDIT_ARGV_MAX_CAP  8192

struct audit_opts {
	uint32_t max_tasks;	/* tracked tasks, default 1024 */
	uint32_t max_pids;	/* tracked processes, default max_tasks * 64 */
	uint32_t argv_max;	/* argv bytes per exec event, default 1024, at most 8192 */
	uint32_t ringbuf_bytes; /* power of two >= page size, default 1 MiB */
	bool force_raw_tp;	/* skip the tp_btf attempt (tests) */
	/*
	 * Use the metering programs' task membership map (meter_members_fd) instead of fork and
	 * exit programs of the audit's own: one fork and one exit program on the node, not two
	 * each. The meter keeps the map; audit_track then finds the process there (meter_track
	 * first) or adds it. max_pids is the meter's then.
	 */
	bool share_members;
	int members_fd;
};
#define AUDIT_OPTS_SHARE_MEMBERS 1 /* audit_opts has share_members (benchmarks' A/B builds) */

enum audit_net_action {
	AUDIT_NET_ALLOW,
	AUDIT_NET_DENY,
	_AUDIT_NET_ACTION_MAX,
	_AUDIT_NET_ACTION_INVALID = -1,
};

/* One rule: destination address in a prefix, optionally one port (0 = any port). */
struct audit_net_rule {
	enum audit_net_action action;
	int family;	  /* AF_INET or AF_INET6 */
	uint8_t addr[16]; /* network order; IPv4 in the first 4 bytes; host bits cleared */
	uint8_t prefix_len;
	uint16_t port;
};

/*
 * A task's policy. Rules are evaluated in order, the first match decides; when none matches,
 * loopback destinations (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104) are allowed, everything else
 * gets default_action. IPv4 rules also match IPv4-mapped IPv6 destinations.
 */
struct audit_net_policy {
	enum audit_net_action default_action;
	size_t n_rules;
	const struct audit_net_rule *rules;
};

/*
 * Parse "CIDR[:PORT]": "10.0.0.0/8", "10.1.2.3", "10.1.2.3:443", "0.0.0.0/0:53",
 * "2001:db8::/32", "[2001:db8::1]:443", "[::/0]:53". A missing prefix length means a single
 * host. -EINVAL with a message in err ("bad port '99999' in '10.0.0.1:99999'").
 */
int audit_net_rule_parse(const char *s, enum audit_net_action action, struct audit_net_rule *ret,
			 char *err, size_t errlen);
/* "allow" / "deny" */
const char *audit_net_action_to_string(enum audit_net_action a);
enum audit_net_action audit_net_action_from_string(const char *s);

enum audit_event_type {
	AUDIT_EV_EXEC,
	AUDIT_EV_CONNECT,
	_AUDIT_EV_MAX,
	_AUDIT_EV_INVALID = -1,
};

enum audit_net_op {
	AUDIT_OP_CONNECT,
	AUDIT_OP_SENDMSG,
};

struct audit_exec_event {
	const char *path; /* file name given to execve */
	size_t argc;
	const char *const *argv;
	bool argv_truncated; /* argv longer than argv_max: the last element may be cut */
	uint32_t ppid, uid, gid;
	const char *cwd;    /* "/a/b"; "" when unknown */
	bool cwd_truncated; /* deeper than the kernel side walks: leading components missing */
};

struct audit_connect_event {
	int family;	  /* AF_INET | AF_INET6 */
	uint8_t addr[16]; /* network order */
	char address[INET6_ADDRSTRLEN];
	uint16_t port;
	int protocol; /* IPPROTO_TCP, IPPROTO_UDP, ... */
	enum audit_net_action verdict;
	enum audit_net_op op;
	int rule; /* index of the rule that decided, -1 = none (loopback or default) */
};

/* Strings and arrays are valid during the callback only. */
struct audit_event {
	enum audit_event_type type;
	uint64_t task_key;
	uint32_t pid;
	uint64_t time_ns; /* CLOCK_REALTIME */
	bool over_budget; /* past the task's record budget: one of the period's sample */
	union {
		struct audit_exec_event exec;
		struct audit_connect_event connect;
	};
};
typedef void (*audit_event_fn)(const struct audit_event *ev, void *userdata);

struct audit;

int audit_open(const struct audit_opts *opts, struct audit **ret);
void audit_free(struct audit *a);
/* "tp_btf" or "raw_tp" */
/*
 * Attach the connect/sendmsg programs once to the parent cgroup of every task (the agent's
 * unified subtree); they look the task up by cgroup id, so audit_track then registers the
 * task's cgroup without attaching four programs per launch. Cgroups below that are not
 * tracked are allowed and not audited, as before.
 */
int audit_attach_cgroup_root(struct audit *a, int root_fd);
const char *audit_attach_mode(const struct audit *a);
/* Ring buffer epoll fd; call audit_poll when readable. */
int audit_fd(const struct audit *a);
/* Delivers every event in the ring buffer. Returns the number delivered or -errno. */
int audit_poll(struct audit *a, audit_event_fn fn, void *userdata);
/*
 * Start auditing a task whose first process is tgid (call between fork and the child's exec).
 * cgroup_fd: the task's unified-hierarchy directory, or -1 (then no network policy: -EINVAL
 * if policy has rules or a deny default). policy NULL = allow all (still audited).
 * -EEXIST (key tracked), -EBUSY (tgid tracked), -ENOSPC (max_tasks), -E2BIG (too many rules).
 */
int audit_track(struct audit *a, uint64_t task_key, pid_t tgid, int cgroup_fd,
		const struct audit_net_policy *policy);
/*
 * Record budget in the kernel: a token bucket of `rate` events/s, `burst` deep, per task. An
 * event past it is not sent: it is counted in the task's entry by kind (audit_budget_state),
 * except the first sample_max of each sample_period_ns, sent with over_budget set. closed: every
 * event is past the budget. rate 0 and not closed: no bound. restore: the bucket starts with
 * `tokens` (a budget carried over an agent restart) instead of full.
 */
struct audit_budget {
	uint64_t rate, burst;
	uint32_t sample_max;
	uint64_t sample_period_ns;
	bool closed;
	bool restore;
	double tokens;
};
struct audit_budget_state {
	double tokens; /* in the bucket now; -1 when there is no rate bound */
	uint64_t over_exec, over_connect_allow, over_connect_deny; /* counted, not sent */
};
/* audit_track with a budget (NULL: none, every event is sent). */
int audit_track_budget(struct audit *a, uint64_t task_key, pid_t tgid, int cgroup_fd,
		       const struct audit_net_policy *policy, const struct audit_budget *budget);
/* Change a tracked task's budget (its bucket's level and counts stay; `restore` is ignored). */
int audit_set_budget(struct audit *a, uint64_t task_key, const struct audit_budget *budget);
int audit_budget_state(struct audit *a, uint64_t task_key, struct audit_budget_state *ret);
/*
 * Around a walk of every task's audit_budget_state (on: before, off: after): on reads the maps
 * it needs whole, one batched lookup per map and 1,024 entries (bpf_map_lookup_batch), so that
 * each audit_budget_state of the walk makes no system call; their figures are those of that
 * moment. -errno (the walk's reads then go to the maps one by one).
 */
int audit_batch(struct audit *a, bool on);
/* Re-adopt after an agent restart: track another process of a tracked task. */
int audit_track_more(struct audit *a, uint64_t task_key, pid_t tgid);
/*
 * The node's own addresses, for the network policy: a destination that reaches the node (a
 * wildcard, loopback, one of these) is denied when the policy denies any of them. audit_open
 * reads them (getifaddrs) and subscribes to rtnetlink address changes; the agent polls
 * audit_addr_fd and calls audit_addr_changed when it is readable (drains, re-reads).
 * audit_set_node_addrs sets them explicitly (tests); loopback 127.0.0.1 and ::1 are always
 * included. At most AUDIT_NODE_ADDRS_MAX are kept; audit_node_addrs says how many, and how
 * many did not fit.
 */
#define AUDIT_NODE_ADDRS_MAX 64
struct audit_node_addr {
	int family;	  /* AF_INET | AF_INET6 */
	uint8_t addr[16]; /* network order; IPv4 in the first 4 bytes */
};
int audit_set_node_addrs(struct audit *a, const struct audit_node_addr *addrs, size_t n);
int audit_refresh_node_addrs(struct audit *a);
size_t audit_node_addrs(const struct audit *a, size_t *ret_dropped);
/* rtnetlink socket (-errno when it could not be opened: then only audit_open's list holds). */
int audit_addr_fd(const struct audit *a);
int audit_addr_changed(struct audit *a);

/* Stop auditing: detach the network programs, free map entries. */
int audit_forget(struct audit *a, uint64_t task_key);
/*
 * Events of the task lost so far (ring buffer full); monotonic, so the agent emits the
 * difference since its last audit.lost record. Read it after the final audit_poll and before
 * audit_forget.
 */
int audit_lost(struct audit *a, uint64_t task_key, uint64_t *ret);
/* Events of the task written into the ring buffer so far. */
int audit_sent(struct audit *a, uint64_t task_key, uint64_t *ret);
/* Processes not tracked because the map was full; lost events of already-forgotten tasks. */
uint64_t audit_map_full(const struct audit *a);
uint64_t audit_lost_untracked(const struct audit *a);
/* Whole-map sweeps audit_forget had to do (a task's end normally needs none). */
uint64_t audit_sweeps(const struct audit *a);

/*
 * The record's `event` object (new reference, NULL on ENOMEM):
 * exec    {path, argv[], argv_truncated, pid, ppid, uid, gid, cwd}
 * connect {family "inet"|"inet6", address, port, protocol "tcp"|"udp"|"other", verdict
 *          "allow"|"deny", pid, op "connect"|"sendmsg"}
 */
json_t *audit_event_to_json(const struct audit_event *ev);
