/* SPDX-License-Identifier: MIT */
/*
 * Audit trail in the agent: the BPF audit programs (bpf/audit.h) report every exec and every
 * connect/sendmsg decision of tracked tasks; each event becomes an audit.exec / audit.connect
 * record in the per-node hash chain. Per-task network policy (--allow-net / --deny-net, default
 * from [audit] net_default) is enforced in cgroup/connect4|6 and sendmsg4|6. Events the ring
 * buffer could not take are counted per task in BPF and reported as an audit.lost record.
 */
#include "agent/agent.h"
#include "agent/log.h"
#include "bpf/audit.h"
#include "common/macro.h"
#include "isolation/cgroup.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#define NET_RULES_MAX 32

int audit_glue_init(struct agent *a)
{
	struct audit_opts o = {.max_tasks = a->cfg.max_tasks,
			       .argv_max = a->cfg.audit_argv_max,
			       .force_raw_tp = a->cfg.bpf == BPF_MODE_RAW_TP};
	int r;

	if (!a->cfg.audit || a->cfg.bpf == BPF_MODE_OFF)
		return 0;
	r = audit_open(&o, &a->audit);
	if (r < 0) {
		log_warning("audit trail unavailable (%s): no exec/connect records, network policy "
			    "cannot be enforced (tasks asking for one are refused)",
			    strerror(-r));
		a->audit = NULL;
		return 0;
	}
	a->w_audit = (struct watch){.kind = WATCH_AUDIT};
	agent_watch_add(a, audit_fd(a->audit), EPOLLIN, &a->w_audit);
	log_info("audit trail loaded (%s)", audit_attach_mode(a->audit));
	return 0;
}

void audit_glue_fini(struct agent *a)
{
	if (a->audit)
		audit_free(a->audit);
	a->audit = NULL;
}

/* Rules in order: allow rules first, then deny rules, first match wins; then the default. */
static int build_policy(struct agent *a, const struct task_spec *s, struct audit_net_rule *rules,
			struct audit_net_policy *p, char *err, size_t errlen)
{
	char e[256];
	size_t n = 0;
	int r;

	if (s->n_net_allow + s->n_net_deny > NET_RULES_MAX) {
		snprintf(err, errlen, "allow_net/deny_net: at most %d rules", NET_RULES_MAX);
		return -EINVAL;
	}
	for (size_t i = 0; i < s->n_net_allow; i++) {
		r = audit_net_rule_parse(s->net_allow[i], AUDIT_NET_ALLOW, &rules[n++], e,
					 sizeof(e));
		if (r < 0) {
			snprintf(err, errlen, "allow_net[%zu]: %s", i, e);
			return r;
		}
	}
	for (size_t i = 0; i < s->n_net_deny; i++) {
		r = audit_net_rule_parse(s->net_deny[i], AUDIT_NET_DENY, &rules[n++], e, sizeof(e));
		if (r < 0) {
			snprintf(err, errlen, "deny_net[%zu]: %s", i, e);
			return r;
		}
	}
	*p = (struct audit_net_policy){
	    .default_action = a->cfg.net_default_deny ? AUDIT_NET_DENY : AUDIT_NET_ALLOW,
	    .n_rules = n,
	    .rules = rules,
	};
	return 0;
}

int audit_glue_check_rules(struct agent *a, const struct task_spec *s, char *err, size_t errlen)
{
	struct audit_net_rule rules[NET_RULES_MAX];
	struct audit_net_policy p;
	int r = build_policy(a, s, rules, &p, err, errlen);

	if (r < 0)
		return r;
	if (!a->audit && (p.n_rules || p.default_action == AUDIT_NET_DENY)) {
		snprintf(err, errlen,
			 "network policy requested but the audit/policy programs are not "
			 "loaded on this node");
		return -EOPNOTSUPP;
	}
	return 0;
}

int audit_glue_track(struct agent *a, struct task *t, char *err, size_t errlen)
{
	struct audit_net_rule rules[NET_RULES_MAX];
	struct audit_net_policy p;
	int r;

	if (!a->audit)
		return 0;
	r = build_policy(a, &t->spec, rules, &p, err, errlen);
	if (r < 0)
		return r;
	r = audit_track(a->audit, t->key, t->pid, t->cg ? cg_task_unified_fd(t->cg) : -1, &p);
	if (r < 0) {
		if (p.n_rules || p.default_action == AUDIT_NET_DENY) {
			snprintf(err, errlen, "network policy could not be attached: %s",
				 strerror(-r));
			return r;
		}
		log_warning("task %s: audit unavailable for this task: %s", t->id, strerror(-r));
		return 0;
	}
	t->audit_tracked = true;
	return 0;
}

static void on_event(const struct audit_event *ev, void *userdata)
{
	struct agent *a = userdata;
	struct acct_record r;
	struct task *t;

	for (t = a->tasks; t; t = t->next)
		if (t->key == ev->task_key && t->spec.argc)
			break;
	if (!t)
		return;
	task_fill_record(a, t, ev->type == AUDIT_EV_EXEC ? ACCT_AUDIT_EXEC : ACCT_AUDIT_CONNECT,
			 &r);
	r.event = audit_event_to_json(ev);
	if (ev->time_ns)
		r.time_ns = ev->time_ns;
	if (r.event)
		(void)agent_emit_record(a, &r);
	acct_record_clear(&r);
}

void audit_glue_poll(struct agent *a)
{
	if (a->audit)
		(void)audit_poll(a->audit, on_event, a);
}

void audit_glue_task_end(struct agent *a, struct task *t)
{
	uint64_t lost = 0;

	if (!a->audit || !t->audit_tracked)
		return;
	(void)audit_poll(a->audit, on_event, a);
	if (audit_lost(a->audit, t->key, &lost) == 0 && lost > t->audit_lost_reported) {
		struct acct_record r;

		task_fill_record(a, t, ACCT_AUDIT_LOST, &r);
		r.event =
		    json_pack("{s:I,s:I}", "lost", (json_int_t)(lost - t->audit_lost_reported),
			      "total", (json_int_t)lost);
		(void)agent_emit_record(a, &r);
		acct_record_clear(&r);
		log_warning("task %s: %llu audit event(s) lost (ring buffer full), reported as "
			    "audit.lost",
			    t->id, (unsigned long long)(lost - t->audit_lost_reported));
		t->audit_lost_reported = lost;
	}
	(void)audit_forget(a->audit, t->key);
	t->audit_tracked = false;
}
