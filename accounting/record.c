/* SPDX-License-Identifier: MIT */
/*
 * Schema v1 record codec (jansson). The JSON form is the only wire format: the spool stores
 * encoded lines, the uploader sends them as NDJSON, the collector decodes them with
 * acct_record_decode(). Decoding is strict: every known member is type- and range-checked and
 * an error names the field path; unknown top-level members are kept in `extra` so additive
 * fields survive a round trip; unknown members inside the fixed objects are rejected.
 */
#include "accounting/record.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "accounting/jtree.h"
#include "common/error.h"
#include "common/macro.h"
#include "common/clock.h"

#define ACCT_MESSAGE_MAX 4096

static const char *const type_names[_ACCT_TYPE_MAX] = {
    [ACCT_TASK_START] = "task.start",	    [ACCT_TASK_SAMPLE] = "task.sample",
    [ACCT_TASK_END] = "task.end",	    [ACCT_AUDIT_EXEC] = "audit.exec",
    [ACCT_AUDIT_CONNECT] = "audit.connect", [ACCT_AUDIT_SYSCALL] = "audit.syscall",
    [ACCT_AUDIT_LIMIT] = "audit.limit",	    [ACCT_AUDIT_LOST] = "audit.lost",
    [ACCT_AUDIT_SUMMARY] = "audit.summary", [ACCT_AUDIT_GAP] = "audit.gap",
    [ACCT_NODE_SAMPLE] = "node.sample",
};

static const char *const exit_names[_ACCT_EXIT_MAX] = {
    [ACCT_EXIT_NONE] = "none",
    [ACCT_EXIT_EXITED] = "exited",
    [ACCT_EXIT_SIGNALED] = "signaled",
    [ACCT_EXIT_OOM_KILLED] = "oom_killed",
    [ACCT_EXIT_TIME_LIMIT] = "time_limit",
    [ACCT_EXIT_CPU_TIME_LIMIT] = "cpu_time_limit",
    [ACCT_EXIT_GPU_MEMORY_LIMIT] = "gpu_memory_limit",
    [ACCT_EXIT_SECCOMP_KILLED] = "seccomp_killed",
    [ACCT_EXIT_LAUNCH_FAILED] = "launch_failed",
    [ACCT_EXIT_LOST] = "lost",
};

static const char *const source_names[_ACCT_SRC_MAX] = {
    [ACCT_SRC_NONE] = "none",		[ACCT_SRC_EBPF] = "ebpf", [ACCT_SRC_CGROUP] = "cgroup",
    [ACCT_SRC_TASKSTATS] = "taskstats", [ACCT_SRC_NVML] = "nvml", [ACCT_SRC_AGENT] = "agent",
};

static const char *const usage_names[_ACCT_U_MAX] = {
    [ACCT_U_WALL_NS] = "wall_ns",
    [ACCT_U_CPU_USER_NS] = "cpu_user_ns",
    [ACCT_U_CPU_SYSTEM_NS] = "cpu_system_ns",
    [ACCT_U_MEMORY_PEAK_BYTES] = "memory_peak_bytes",
    [ACCT_U_MEMORY_BYTE_SECONDS] = "memory_byte_seconds",
    [ACCT_U_IO_READ_BYTES] = "io_read_bytes",
    [ACCT_U_IO_WRITE_BYTES] = "io_write_bytes",
    [ACCT_U_NET_RX_BYTES] = "net_rx_bytes",
    [ACCT_U_NET_TX_BYTES] = "net_tx_bytes",
    [ACCT_U_GPU_SECONDS] = "gpu_seconds",
    [ACCT_U_GPU_MEMORY_PEAK_BYTES] = "gpu_memory_peak_bytes",
    [ACCT_U_GPU_UTIL_AVG] = "gpu_util_avg",
};

static const char *const energy_part_names[_ACCT_ENERGY_MAX] = {
    [ACCT_ENERGY_CPU] = "cpu",
    [ACCT_ENERGY_DRAM] = "dram",
    [ACCT_ENERGY_GPU] = "gpu",
};
static const char *const energy_src_names[_ACCT_ESRC_MAX] = {
    [ACCT_ESRC_NOT_MEASURED] = "not_measured",
    [ACCT_ESRC_RAPL] = "rapl",
    [ACCT_ESRC_NVML] = "nvml",
    [ACCT_ESRC_NONE] = "none",
};

/* Top-level members with a fixed meaning; everything else is `extra`. */
static const char *const reserved_top[] = {"schema", "record_id", "type",  "time", "node",
					   "task",   "request",	  "usage", "exit", "sources",
					   "event",  "prev_hash", "hash"};

static int lookup(const char *const *names, size_t n, const char *s)
{
	if (!s)
		return -1;
	for (size_t i = 0; i < n; i++) /* the first byte inline: most names differ there */
		if (names[i] && names[i][0] == s[0] && strcmp(names[i], s) == 0)
			return (int)i;
	return -1;
}

const char *acct_type_to_string(enum acct_type t)
{
	return t >= 0 && t < _ACCT_TYPE_MAX ? type_names[t] : NULL;
}

enum acct_type acct_type_from_string(const char *s)
{
	return (enum acct_type)lookup(type_names, _ACCT_TYPE_MAX, s);
}

static const char *const by_names[_ACCT_BY_MAX] = {
    [ACCT_BY_NONE] = "none",	 [ACCT_BY_TASK] = "task",	  [ACCT_BY_LIMIT] = "limit",
    [ACCT_BY_CLIENT] = "client", [ACCT_BY_OPERATOR] = "operator",
};

const char *acct_exit_by_to_string(enum acct_exit_by b)
{
	return b >= 0 && b < _ACCT_BY_MAX ? by_names[b] : NULL;
}

enum acct_exit_by acct_exit_by_from_string(const char *s)
{
	return (enum acct_exit_by)lookup(by_names, _ACCT_BY_MAX, s);
}

const char *acct_exit_status_to_string(enum acct_exit_status s)
{
	return s >= 0 && s < _ACCT_EXIT_MAX ? exit_names[s] : NULL;
}

enum acct_exit_status acct_exit_status_from_string(const char *s)
{
	return (enum acct_exit_status)lookup(exit_names, _ACCT_EXIT_MAX, s);
}

const char *acct_source_to_string(enum acct_source s)
{
	return s >= 0 && s < _ACCT_SRC_MAX ? source_names[s] : NULL;
}

enum acct_source acct_source_from_string(const char *s)
{
	return (enum acct_source)lookup(source_names, _ACCT_SRC_MAX, s);
}

const char *acct_energy_src_to_string(enum acct_energy_src s)
{
	return s >= 0 && s < _ACCT_ESRC_MAX ? energy_src_names[s] : NULL;
}

const char *acct_energy_part_name(enum acct_energy_part p)
{
	return p >= 0 && p < _ACCT_ENERGY_MAX ? energy_part_names[p] : NULL;
}

bool acct_energy_total(const struct acct_energy *e, double *ret)
{
	double t = 0;

	*ret = 0;
	if (!e->present)
		return false;
	for (int p = 0; p < _ACCT_ENERGY_MAX; p++) {
		if (e->src[p] == ACCT_ESRC_NOT_MEASURED)
			return false;
		t += e->j[p];
	}
	*ret = t;
	return true;
}

const char *acct_usage_field_name(enum acct_usage_field f)
{
	return f >= 0 && f < _ACCT_U_MAX ? usage_names[f] : NULL;
}

bool acct_type_is_audit(enum acct_type t)
{
	return t >= ACCT_AUDIT_EXEC && t <= ACCT_AUDIT_GAP;
}

/* Members a node.sample defines (on other records they are ordinary extra members). */
static const char *const node_top[] = {"period_ns", "price_class",     "labels",
				       "capacity",  "allocated",       "used",
				       "energy",    "tasks_unchanged", "tasks_alive"};

static bool is_reserved_top(const char *key)
{
	return lookup(reserved_top, ARRAY_SIZE(reserved_top), key) >= 0;
}

static bool is_reserved_for(enum acct_type t, const char *key)
{
	return is_reserved_top(key) ||
	       (t == ACCT_NODE_SAMPLE && lookup(node_top, ARRAY_SIZE(node_top), key) >= 0);
}

/* ---- memory ------------------------------------------------------------------------------ */

static void task_clear(struct acct_task *t)
{
	free(t->job);
	free(t->user);
	free(t->account);
	for (size_t i = 0; i < t->n_labels; i++) {
		free(t->labels[i].key);
		free(t->labels[i].value);
	}
	free(t->labels);
}

static void node_sample_free(struct acct_node_sample *ns)
{
	if (!ns)
		return;
	free(ns->price_class);
	for (size_t i = 0; i < ns->n_labels; i++) {
		free(ns->labels[i].key);
		free(ns->labels[i].value);
	}
	free(ns->labels);
	for (size_t i = 0; i < ns->n_gpu_models; i++)
		free(ns->gpu_models[i]);
	free(ns->gpu_models);
	for (size_t i = 0; i < ns->n_unchanged; i++)
		free(ns->unchanged[i].id);
	free(ns->unchanged);
	for (size_t i = 0; i < ns->alive.n_except; i++)
		free(ns->alive.except[i]);
	free(ns->alive.except);
	free(ns);
}

int acct_record_node_sample(struct acct_record *r)
{
	if (!r->ns)
		r->ns = calloc(1, sizeof(*r->ns));
	return r->ns ? 0 : -ENOMEM;
}

int acct_node_add_label(struct acct_node_sample *ns, const char *key, const char *value)
{
	struct acct_task t = {.n_labels = ns->n_labels, .labels = ns->labels};
	int r = acct_task_add_label(&t, key, value);

	ns->labels = t.labels;
	ns->n_labels = t.n_labels;
	return r;
}

int acct_node_add_unchanged(struct acct_node_sample *ns, const char *id, uint64_t age_ms,
			    uint64_t rss_bytes)
{
	size_t n = ns->n_unchanged;
	char *d;

	if (!id || !*id || strlen(id) >= ACCT_ID_MAX || age_ms > INT64_MAX || rss_bytes > INT64_MAX)
		return -EINVAL;
	if (n >= ACCT_NODE_UNCHANGED_MAX)
		return -E2BIG;
	if ((n & (n - 1)) == 0) { /* 0, 1, 2, 4, ...: the array doubles */
		struct acct_task_unchanged *u =
		    realloc(ns->unchanged, (n ? 2 * n : 1) * sizeof(*ns->unchanged));

		if (!u)
			return -ENOMEM;
		ns->unchanged = u;
	}
	d = strdup(id);
	if (!d)
		return -ENOMEM;
	ns->unchanged[n] =
	    (struct acct_task_unchanged){.id = d, .age_ms = age_ms, .rss_bytes = rss_bytes};
	ns->n_unchanged = n + 1;
	return 0;
}

uint64_t acct_alive_digest(uint64_t digest, const char *id)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (const char *p = id; *p; p++)
		h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
	return digest ^ h;
}

int acct_node_add_alive_except(struct acct_node_sample *ns, const char *id)
{
	size_t n = ns->alive.n_except;
	char *d;

	if (!id || !*id || strlen(id) >= ACCT_ID_MAX)
		return -EINVAL;
	if (n >= ACCT_NODE_UNCHANGED_MAX)
		return -E2BIG;
	if ((n & (n - 1)) == 0) { /* the array doubles */
		char **e = realloc(ns->alive.except, (n ? 2 * n : 1) * sizeof(*e));

		if (!e)
			return -ENOMEM;
		ns->alive.except = e;
	}
	d = strdup(id);
	if (!d)
		return -ENOMEM;
	ns->alive.except[n] = d;
	ns->alive.n_except = n + 1;
	return 0;
}

int acct_node_add_gpu_model(struct acct_node_sample *ns, const char *model)
{
	char **n, *m;

	if (!model || strlen(model) >= ACCT_NAME_MAX)
		return -EINVAL;
	if (ns->n_gpu_models >= ACCT_NODE_GPU_MODELS_MAX)
		return -E2BIG;
	n = realloc(ns->gpu_models, (ns->n_gpu_models + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	ns->gpu_models = n;
	m = strdup(model);
	if (!m)
		return -ENOMEM;
	ns->gpu_models[ns->n_gpu_models++] = m;
	return 0;
}

static int node_sample_copy(struct acct_node_sample **dst, const struct acct_node_sample *src)
{
	struct acct_node_sample *c;
	int r = -ENOMEM;

	*dst = NULL;
	if (!src)
		return 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c = *src;
	c->price_class = NULL;
	c->labels = NULL;
	c->n_labels = 0;
	c->gpu_models = NULL;
	c->n_gpu_models = 0;
	c->unchanged = NULL;
	c->n_unchanged = 0;
	c->alive.except = NULL;
	c->alive.n_except = 0;
	if (src->price_class && !(c->price_class = strdup(src->price_class)))
		goto out_free;
	for (size_t i = 0; i < src->n_labels; i++)
		if ((r = acct_node_add_label(c, src->labels[i].key, src->labels[i].value)) < 0)
			goto out_free;
	for (size_t i = 0; i < src->n_gpu_models; i++)
		if ((r = acct_node_add_gpu_model(c, src->gpu_models[i])) < 0)
			goto out_free;
	for (size_t i = 0; i < src->n_unchanged; i++)
		if ((r = acct_node_add_unchanged(c, src->unchanged[i].id, src->unchanged[i].age_ms,
						 src->unchanged[i].rss_bytes)) < 0)
			goto out_free;
	for (size_t i = 0; i < src->alive.n_except; i++)
		if ((r = acct_node_add_alive_except(c, src->alive.except[i])) < 0)
			goto out_free;
	*dst = c;
	return 0;

out_free:
	node_sample_free(c);
	return r;
}

void acct_record_clear(struct acct_record *r)
{
	if (!r)
		return;
	node_sample_free(r->ns);
	if (!r->in_arena) {
		free(r->node);
		task_clear(&r->task);
		free(r->exit.message);
	}
	json_decref(r->extra);
	json_decref(r->event);
	memset(r, 0, sizeof(*r));
}

int acct_task_add_label(struct acct_task *t, const char *key, const char *value)
{
	struct acct_label *n;
	char *k, *v;

	if (!key || !value || !*key || strlen(key) >= ACCT_NAME_MAX ||
	    strlen(value) >= ACCT_NAME_MAX)
		return -EINVAL;
	if (t->n_labels >= ACCT_LABELS_MAX)
		return -E2BIG;
	for (size_t i = 0; i < t->n_labels; i++)
		if (strcmp(t->labels[i].key, key) == 0)
			return -EEXIST;
	n = realloc(t->labels, (t->n_labels + 1) * sizeof(*n));
	if (!n)
		return -ENOMEM;
	t->labels = n;
	k = strdup(key);
	v = strdup(value);
	if (!k || !v) {
		free(k);
		free(v);
		return -ENOMEM;
	}
	t->labels[t->n_labels].key = k;
	t->labels[t->n_labels].value = v;
	t->n_labels++;
	return 0;
}

static int dup_opt(char **dst, const char *src)
{
	*dst = NULL;
	if (!src)
		return 0;
	*dst = strdup(src);
	return *dst ? 0 : -ENOMEM;
}

int acct_record_copy(struct acct_record *dst, const struct acct_record *src)
{
	struct acct_record c;
	int r;

	c = *src;
	c.in_arena = false;
	c.node = NULL;
	c.task.job = c.task.user = c.task.account = NULL;
	c.task.labels = NULL;
	c.task.n_labels = 0;
	c.exit.message = NULL;
	c.extra = NULL;
	c.event = NULL;
	c.ns = NULL;

	if ((r = dup_opt(&c.node, src->node)) < 0 ||
	    (r = dup_opt(&c.task.job, src->task.job)) < 0 ||
	    (r = dup_opt(&c.task.user, src->task.user)) < 0 ||
	    (r = dup_opt(&c.task.account, src->task.account)) < 0 ||
	    (r = dup_opt(&c.exit.message, src->exit.message)) < 0)
		goto out_clear;
	for (size_t i = 0; i < src->task.n_labels; i++) {
		r = acct_task_add_label(&c.task, src->task.labels[i].key,
					src->task.labels[i].value);
		if (r < 0)
			goto out_clear;
	}
	if (src->extra) {
		c.extra = json_deep_copy(src->extra);
		if (!c.extra) {
			r = -ENOMEM;
			goto out_clear;
		}
	}
	if (src->event) {
		c.event = json_deep_copy(src->event);
		if (!c.event) {
			r = -ENOMEM;
			goto out_clear;
		}
	}
	if ((r = node_sample_copy(&c.ns, src->ns)) < 0)
		goto out_clear;
	*dst = c;
	return 0;

out_clear:
	acct_record_clear(&c);
	return r;
}

/* ---- encode ------------------------------------------------------------------------------ */

/* json_object_set_new that reports failure (jansson frees value on failure). */
static int set_new(json_t *o, const char *key, json_t *v)
{
	if (!v)
		return -ENOMEM;
	return json_object_set_new(o, key, v) < 0 ? -ENOMEM : 0;
}

static int set_u64(json_t *o, const char *key, uint64_t v)
{
	if (v > (uint64_t)INT64_MAX)
		return -ERANGE;
	return set_new(o, key, json_integer((json_int_t)v));
}

static int set_double(json_t *o, const char *key, double v)
{
	if (!isfinite(v) || v < 0)
		return -ERANGE;
	return set_new(o, key, json_real(v));
}

/* o, with src as its "sources", set as parent's key: both taken, on an error too */
static int set_with_sources(json_t *parent, const char *key, json_t *o, json_t *src)
{
	if (!o || !src || json_object_set_new(o, "sources", src) < 0) {
		if (!o)
			json_decref(src);
		json_decref(o);
		return -ENOMEM;
	}
	return set_new(parent, key, o);
}

static int set_str_opt(json_t *o, const char *key, const char *v)
{
	if (!v)
		return 0;
	return set_new(o, key, json_string(v));
}

static json_t *encode_task(const struct acct_task *t, int *ret)
{
	json_t *o = json_object(), *labels = json_object();
	int r = -ENOMEM;

	if (!o || !labels)
		goto out_fail;
	if ((r = set_new(o, "id", json_string(t->id))) < 0 ||
	    (r = set_str_opt(o, "job", t->job)) < 0 || (r = set_str_opt(o, "user", t->user)) < 0 ||
	    (r = set_new(o, "uid", json_integer(t->uid))) < 0 ||
	    (r = set_str_opt(o, "account", t->account)) < 0)
		goto out_fail;
	for (size_t i = 0; i < t->n_labels; i++)
		if ((r = set_new(labels, t->labels[i].key, json_string(t->labels[i].value))) < 0)
			goto out_fail;
	r = set_new(o, "labels", labels);
	labels = NULL;
	if (r < 0)
		goto out_fail;
	return o;

out_fail:
	json_decref(labels);
	json_decref(o);
	*ret = r;
	return NULL;
}

static json_t *encode_request(const struct acct_request *q, int *ret)
{
	json_t *o = json_object();
	int r = -ENOMEM;

	if (!o)
		goto out_fail;
	if ((r = set_double(o, "cpus", q->cpus)) < 0 ||
	    (r = set_u64(o, "memory_bytes", q->memory_bytes)) < 0 ||
	    (r = set_u64(o, "pids", q->pids)) < 0 || (r = set_u64(o, "gpus", q->gpus)) < 0 ||
	    (r = set_u64(o, "time_limit_s", q->time_limit_s)) < 0 ||
	    (r = set_u64(o, "cpu_time_limit_s", q->cpu_time_limit_s)) < 0 ||
	    (r = set_u64(o, "gpu_memory_bytes", q->gpu_memory_bytes)) < 0)
		goto out_fail;
	return o;
out_fail:
	json_decref(o);
	*ret = r;
	return NULL;
}

/* usage.energy_j: the measured parts, their sources, and the total when every part is
 * measured (a part not measured has no number: never a 0 that means unknown). */
static int encode_energy(json_t *usage, const struct acct_energy *en)
{
	json_t *o = json_object(), *src = json_object();
	double total;
	int r = o && src ? 0 : -ENOMEM;

	for (int p = 0; r == 0 && p < _ACCT_ENERGY_MAX; p++) {
		const char *sn = acct_energy_src_to_string(en->src[p]);

		if (!sn)
			r = -EINVAL;
		else if (en->src[p] != ACCT_ESRC_NOT_MEASURED &&
			 (r = set_double(o, energy_part_names[p], en->j[p])) < 0)
			break;
		else
			r = set_new(src, energy_part_names[p], json_string(sn));
	}
	if (r == 0 && acct_energy_total(en, &total))
		r = set_double(o, "total", total);
	if (r < 0) {
		json_decref(src);
		json_decref(o);
		return r;
	}
	return set_with_sources(usage, "energy_j", o, src);
}

static json_t *encode_usage(const struct acct_usage *u, int *ret)
{
	json_t *o = json_object();
	int r = -ENOMEM;

	if (!o)
		goto out_fail;
	if ((r = set_u64(o, "wall_ns", u->wall_ns)) < 0 ||
	    (r = set_u64(o, "cpu_user_ns", u->cpu_user_ns)) < 0 ||
	    (r = set_u64(o, "cpu_system_ns", u->cpu_system_ns)) < 0 ||
	    (r = set_u64(o, "memory_peak_bytes", u->memory_peak_bytes)) < 0 ||
	    (r = set_double(o, "memory_byte_seconds", u->memory_byte_seconds)) < 0 ||
	    (r = set_u64(o, "io_read_bytes", u->io_read_bytes)) < 0 ||
	    (r = set_u64(o, "io_write_bytes", u->io_write_bytes)) < 0 ||
	    (r = set_u64(o, "net_rx_bytes", u->net_rx_bytes)) < 0 ||
	    (r = set_u64(o, "net_tx_bytes", u->net_tx_bytes)) < 0 ||
	    (r = set_double(o, "gpu_seconds", u->gpu_seconds)) < 0 ||
	    (r = set_u64(o, "gpu_memory_peak_bytes", u->gpu_memory_peak_bytes)) < 0 ||
	    (r = set_double(o, "gpu_util_avg", u->gpu_util_avg)) < 0)
		goto out_fail;
	if (u->energy.present && (r = encode_energy(o, &u->energy)) < 0)
		goto out_fail;
	return o;
out_fail:
	json_decref(o);
	*ret = r;
	return NULL;
}

static json_t *encode_exit(const struct acct_exit *e, int *ret)
{
	json_t *o = json_object();
	const char *st = acct_exit_status_to_string(e->status);
	int r = -ENOMEM;

	if (!o)
		goto out_fail;
	r = -EINVAL;
	if (!st || e->status == ACCT_EXIT_NONE)
		goto out_fail;
	if ((r = set_new(o, "status", json_string(st))) < 0 ||
	    (r = set_new(o, "code", json_integer(e->code))) < 0 ||
	    (r = set_new(o, "signal", json_integer(e->signal))) < 0 ||
	    (r = set_str_opt(o, "message", e->message)) < 0 ||
	    (e->oom_kills && (r = set_u64(o, "oom_kills", e->oom_kills)) < 0) ||
	    (e->by > ACCT_BY_NONE && e->by < _ACCT_BY_MAX &&
	     (r = set_new(o, "by", json_string(by_names[e->by]))) < 0))
		goto out_fail;
	return o;
out_fail:
	json_decref(o);
	*ret = r;
	return NULL;
}

static json_t *encode_sources(const enum acct_source *src, int *ret)
{
	json_t *o = json_object();
	int r = -ENOMEM;

	if (!o)
		goto out_fail;
	for (int f = 0; f < _ACCT_U_MAX; f++) {
		const char *s;

		if (src[f] == ACCT_SRC_NONE)
			continue;
		s = acct_source_to_string(src[f]);
		r = -EINVAL;
		if (!s)
			goto out_fail;
		if ((r = set_new(o, usage_names[f], json_string(s))) < 0)
			goto out_fail;
	}
	return o;
out_fail:
	json_decref(o);
	*ret = r;
	return NULL;
}

/* node.sample "energy" (RAPL and NVML readings, with their sources), when there are any. */
static int encode_node_energy(json_t *o, const struct acct_node_sample *ns)
{
	int e = 0;

	if (ns->has_rapl || ns->has_gpu_energy) {
		json_t *en = json_object(), *src = json_object();

		e = en && src ? 0 : -ENOMEM;
		if (e == 0 && ns->has_rapl &&
		    (e = set_double(en, "package_j", ns->energy_package_j)) == 0 &&
		    (e = set_double(en, "dram_j", ns->energy_dram_j)) == 0 &&
		    (e = set_new(src, "package_j", json_string("rapl"))) == 0)
			e = set_new(src, "dram_j", json_string("rapl"));
		if (e == 0 && ns->has_rapl && ns->has_unattributed &&
		    (e = set_double(en, "unattributed_package_j", ns->unattributed_package_j)) == 0)
			e = set_double(en, "unattributed_dram_j", ns->unattributed_dram_j);
		if (e == 0 && ns->has_gpu_energy &&
		    (e = set_double(en, "gpu_j", ns->energy_gpu_j)) == 0)
			e = set_new(src, "gpu_j", json_string("nvml"));
		if (e == 0 && ns->has_gpu_energy && ns->has_unattributed_gpu &&
		    (e = set_double(en, "unattributed_gpu_j", ns->unattributed_gpu_j)) == 0)
			e = set_new(src, "unattributed_gpu_j", json_string("nvml"));
		if (e == 0)
			e = set_with_sources(o, "energy", en, src);
		else {
			json_decref(src);
			json_decref(en);
		}
		if (e < 0)
			return e;
	}
	return 0;
}

/* node.sample's statements on unchanged tasks: the listed ones and tasks_alive. */
static int encode_node_tasks(json_t *o, const struct acct_node_sample *ns)
{
	int e;

	if (ns->n_unchanged > 0) {
		json_t *list = json_array();

		if (!list)
			return -ENOMEM;
		for (size_t i = 0; i < ns->n_unchanged; i++) {
			const struct acct_task_unchanged *u = &ns->unchanged[i];

			if (json_array_append_new(list,
						  json_pack("[sII]", u->id, (json_int_t)u->age_ms,
							    (json_int_t)u->rss_bytes)) < 0) {
				json_decref(list);
				return -ENOMEM;
			}
		}
		if ((e = set_new(o, "tasks_unchanged", list)) < 0)
			return e;
	}
	if (ns->alive.present) {
		json_t *ex = json_array();
		char hex[17];

		if (!ex)
			return -ENOMEM;
		for (size_t i = 0; i < ns->alive.n_except; i++)
			if (json_array_append_new(ex, json_string(ns->alive.except[i])) < 0) {
				json_decref(ex);
				return -ENOMEM;
			}
		char since[RFC3339_MAX];

		snprintf(hex, sizeof(hex), "%016" PRIx64, ns->alive.digest);
		format_rfc3339_us(ns->alive.since_ns, since, sizeof(since));
		if ((e = set_new(o, "tasks_alive",
				 json_pack("{s:s,s:I,s:s,s:o}", "since", since, "n",
					   (json_int_t)ns->alive.n, "digest", hex, "except", ex))) <
		    0)
			return e;
	}
	return 0;
}

static int encode_node_sample(json_t *o, const struct acct_node_sample *ns)
{
	json_t *cap = json_object(), *alloc = json_object(), *used = json_object();
	json_t *labels = json_object(), *models = json_array();
	int e = -ENOMEM;

	if (!cap || !alloc || !used || !labels || !models)
		goto out_fail;
	for (size_t i = 0; i < ns->n_labels; i++)
		if ((e = set_new(labels, ns->labels[i].key, json_string(ns->labels[i].value))) < 0)
			goto out_fail;
	for (size_t i = 0; i < ns->n_gpu_models; i++)
		if (json_array_append_new(models, json_string(ns->gpu_models[i])) < 0) {
			e = -ENOMEM;
			goto out_fail;
		}
	if ((e = set_double(cap, "cpus", ns->cap_cpus)) < 0 ||
	    (e = set_u64(cap, "memory_bytes", ns->cap_memory_bytes)) < 0 ||
	    (e = set_u64(cap, "gpus", ns->cap_gpus)) < 0 ||
	    (e = set_double(alloc, "cpus", ns->alloc_cpus)) < 0 ||
	    (e = set_u64(alloc, "memory_bytes", ns->alloc_memory_bytes)) < 0 ||
	    (e = set_u64(alloc, "gpus", ns->alloc_gpus)) < 0 ||
	    (e = set_u64(alloc, "tasks", ns->alloc_tasks)) < 0 ||
	    (e = set_u64(used, "cpu_ns", ns->used_cpu_ns)) < 0 ||
	    (e = set_u64(used, "memory_bytes", ns->used_memory_bytes)) < 0)
		goto out_fail;
	e = set_new(cap, "gpu_models", models);
	models = NULL;
	if (e < 0 || (e = set_u64(o, "period_ns", ns->period_ns)) < 0 ||
	    (e = set_str_opt(o, "price_class", ns->price_class)) < 0)
		goto out_fail;
	e = set_new(o, "labels", labels);
	labels = NULL;
	if (e < 0)
		goto out_fail;
	e = set_new(o, "capacity", cap);
	cap = NULL;
	if (e < 0)
		goto out_fail;
	e = set_new(o, "allocated", alloc);
	alloc = NULL;
	if (e < 0)
		goto out_fail;
	e = set_new(o, "used", used);
	used = NULL;
	if (e < 0)
		goto out_fail;
	if ((e = encode_node_energy(o, ns)) < 0 || (e = encode_node_tasks(o, ns)) < 0)
		goto out_fail;
	return 0;

out_fail:
	json_decref(cap);
	json_decref(alloc);
	json_decref(used);
	json_decref(labels);
	json_decref(models);
	return e;
}

static bool valid_id(const char *s, size_t max)
{
	size_t n = strnlen(s, max);

	return n > 0 && n < max;
}

static bool valid_hex64(const char *s)
{
	if (strnlen(s, ACCT_HASH_HEX) != ACCT_HASH_HEX - 1)
		return false;
	for (size_t i = 0; i < ACCT_HASH_HEX - 1; i++)
		if (!isdigit((unsigned char)s[i]) && !(s[i] >= 'a' && s[i] <= 'f'))
			return false;
	return true;
}

/* Build the JSON object; include_hash=false gives the canonical (hash-less) object. */
static int to_json(const struct acct_record *r, bool include_hash, json_t **ret)
{
	json_t *o = NULL, *sub;
	const char *type = acct_type_to_string(r->type);
	char ts[RFC3339_MAX];
	bool audit = acct_type_is_audit(r->type);
	int e = 0;

	bool node = r->type == ACCT_NODE_SAMPLE;

	if (!type || !valid_id(r->record_id, ACCT_ID_MAX) ||
	    (!node && !valid_id(r->task.id, ACCT_ID_MAX)) || !r->node || !*r->node ||
	    strlen(r->node) >= ACCT_NAME_MAX)
		return -EINVAL;
	if (node != (r->ns != NULL))
		return -EINVAL;
	if (audit && !r->event)
		return -EINVAL;
	if (r->event && !json_is_object(r->event))
		return -EINVAL;
	if (r->extra && !json_is_object(r->extra))
		return -EINVAL;

	o = json_object();
	if (!o)
		return -ENOMEM;
	format_rfc3339_us(r->time_ns, ts, sizeof(ts));
	if ((e = set_new(
		 o, "schema",
		 json_string(node && r->ns->alive.present ? ACCT_SCHEMA_V2 : ACCT_SCHEMA))) < 0 ||
	    (e = set_new(o, "record_id", json_string(r->record_id))) < 0 ||
	    (e = set_new(o, "type", json_string(type))) < 0 ||
	    (e = set_new(o, "time", json_string(ts))) < 0 ||
	    (e = set_new(o, "node", json_string(r->node))) < 0)
		goto out_fail;

	if (node) {
		if ((e = encode_node_sample(o, r->ns)) < 0)
			goto out_fail;
		goto out_extra;
	}
	sub = encode_task(&r->task, &e);
	if ((e = sub ? set_new(o, "task", sub) : e) < 0)
		goto out_fail;
	if (!audit) {
		sub = encode_request(&r->request, &e);
		if ((e = sub ? set_new(o, "request", sub) : e) < 0)
			goto out_fail;
		sub = encode_usage(&r->usage, &e);
		if ((e = sub ? set_new(o, "usage", sub) : e) < 0)
			goto out_fail;
		sub = encode_sources(r->sources, &e);
		if ((e = sub ? set_new(o, "sources", sub) : e) < 0)
			goto out_fail;
	}
	if (r->type == ACCT_TASK_END) {
		sub = encode_exit(&r->exit, &e);
		if ((e = sub ? set_new(o, "exit", sub) : e) < 0)
			goto out_fail;
	}
	if (audit) {
		if ((e = set_new(o, "event", json_incref(r->event))) < 0)
			goto out_fail;
		e = -EINVAL;
		if (r->prev_hash[0] && !valid_hex64(r->prev_hash))
			goto out_fail;
		if ((e = set_new(o, "prev_hash", json_string(r->prev_hash))) < 0)
			goto out_fail;
		if (include_hash) {
			e = -EINVAL;
			if (!valid_hex64(r->hash))
				goto out_fail;
			if ((e = set_new(o, "hash", json_string(r->hash))) < 0)
				goto out_fail;
		}
	}
out_extra:
	if (r->extra) {
		const char *key;
		json_t *v;

		json_object_foreach(r->extra, key, v)
		{
			e = -EINVAL;
			if (is_reserved_for(r->type, key))
				goto out_fail;
			if ((e = set_new(o, key, json_incref(v))) < 0)
				goto out_fail;
		}
	}
	*ret = o;
	return 0;

out_fail:
	json_decref(o);
	return e;
}

int acct_record_to_json(const struct acct_record *r, json_t **ret)
{
	return to_json(r, true, ret);
}

static int dump(json_t *o, size_t flags, char **ret, size_t *ret_len)
{
	char *s = json_dumps(o, JSON_COMPACT | flags);
	size_t n;

	if (!s)
		return -ENOMEM;
	n = strlen(s);
	if (n > ACCT_RECORD_MAX_BYTES) {
		free(s);
		return -E2BIG;
	}
	*ret = s;
	if (ret_len)
		*ret_len = n;
	return 0;
}

int acct_record_encode(const struct acct_record *r, char **ret, size_t *ret_len)
{
	json_t *o;
	int e;

	e = to_json(r, true, &o);
	if (e < 0)
		return e;
	e = dump(o, 0, ret, ret_len);
	json_decref(o);
	return e;
}

int acct_record_canonical(const struct acct_record *r, char **ret, size_t *len)
{
	json_t *o;
	int e;

	e = to_json(r, false, &o);
	if (e < 0)
		return e;
	e = dump(o, JSON_SORT_KEYS, ret, len);
	json_decref(o);
	return e;
}

int acct_sha256_hex(const char *buf, size_t len, char out[ACCT_HASH_HEX])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	static const char hex[] = "0123456789abcdef";

	if (EVP_Digest(buf, len, md, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != 32)
		return -EIO;
	for (unsigned i = 0; i < 32; i++) {
		out[2 * i] = hex[md[i] >> 4];
		out[2 * i + 1] = hex[md[i] & 0xf];
	}
	out[64] = '\0';
	return 0;
}

int acct_record_compute_hash(struct acct_record *r)
{
	_cleanup_free_ char *c = NULL;
	size_t n;
	int e;

	e = acct_record_canonical(r, &c, &n);
	if (e < 0)
		return e;
	return acct_sha256_hex(c, n, r->hash);
}

int acct_record_verify_hash(const struct acct_record *r)
{
	_cleanup_free_ char *c = NULL;
	char h[ACCT_HASH_HEX];
	size_t n;
	int e;

	e = acct_record_canonical(r, &c, &n);
	if (e < 0)
		return e;
	e = acct_sha256_hex(c, n, h);
	if (e < 0)
		return e;
	return strcmp(h, r->hash) == 0 ? 0 : -EBADMSG;
}

/* ---- decode ------------------------------------------------------------------------------ */

struct dctx {
	char *err;
	size_t errlen;
	int schema; /* 1 or 2 */
};

static int get_u64(struct dctx *c, const struct jnode *o, const char *obj, const char *key,
		   bool required, uint64_t max, uint64_t *ret)
{
	const struct jnode *v = jtree_get(o, key);

	if (!v) {
		if (required)
			return err_set(c->err, c->errlen, -EINVAL, "%s%s%s: missing", obj,
				       *obj ? "." : "", key);
		*ret = 0;
		return 0;
	}
	if (v->type != JT_INT || v->i < 0)
		return err_set(c->err, c->errlen, -EINVAL,
			       "%s%s%s: expected a non-negative integer", obj, *obj ? "." : "",
			       key);
	if ((uint64_t)v->i > max)
		return err_set(c->err, c->errlen, -EINVAL, "%s%s%s: out of range", obj,
			       *obj ? "." : "", key);
	*ret = (uint64_t)v->i;
	return 0;
}

static int get_int(struct dctx *c, const struct jnode *o, const char *obj, const char *key,
		   int *ret)
{
	const struct jnode *v = jtree_get(o, key);

	*ret = 0;
	if (!v)
		return 0;
	if (v->type != JT_INT)
		return err_set(c->err, c->errlen, -EINVAL, "%s.%s: expected an integer", obj, key);
	if (v->i < -2147483647LL - 1 || v->i > 2147483647LL)
		return err_set(c->err, c->errlen, -EINVAL, "%s.%s: out of range", obj, key);
	*ret = (int)v->i;
	return 0;
}

static int get_double(struct dctx *c, const struct jnode *o, const char *obj, const char *key,
		      double *ret)
{
	const struct jnode *v = jtree_get(o, key);
	double d;

	*ret = 0;
	if (!v)
		return 0;
	if (!jtree_is_number(v))
		return err_set(c->err, c->errlen, -EINVAL, "%s.%s: expected a non-negative number",
			       obj, key);
	d = jtree_number(v);
	if (!isfinite(d) || d < 0)
		return err_set(c->err, c->errlen, -EINVAL, "%s.%s: expected a non-negative number",
			       obj, key);
	*ret = d;
	return 0;
}

/* String member; max is the buffer size (length must be < max). */
static int get_str(struct dctx *c, const struct jnode *o, const char *obj, const char *key,
		   bool required, size_t max, const char **ret)
{
	const struct jnode *v = jtree_get(o, key);
	const char *dot = *obj ? "." : "";

	*ret = NULL;
	if (!v || v->type == JT_NULL) {
		if (required)
			return err_set(c->err, c->errlen, -EINVAL, "%s%s%s: missing", obj, dot,
				       key);
		return 0;
	}
	if (v->type != JT_STRING)
		return err_set(c->err, c->errlen, -EINVAL, "%s%s%s: expected a string", obj, dot,
			       key);
	if (v->str.len >= max)
		return err_set(c->err, c->errlen, -EINVAL, "%s%s%s: longer than %zu bytes", obj,
			       dot, key, max - 1);
	if (required && v->str.len == 0)
		return err_set(c->err, c->errlen, -EINVAL, "%s%s%s: must not be empty", obj, dot,
			       key);
	*ret = v->str.s;
	return 0;
}

static int get_str_dup(struct dctx *c, const struct jnode *o, const char *obj, const char *key,
		       bool required, size_t max, char **ret)
{
	const char *s;
	int e = get_str(c, o, obj, key, required, max, &s);

	if (e < 0)
		return e;
	if (!s)
		return 0;
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

/* Reject members of a fixed-shape object not in names[]. */
static int check_members(struct dctx *c, const struct jnode *o, const char *obj,
			 const char *const *names, size_t n)
{
	for (const struct jnode *k = o->kids.first; k; k = k->next)
		if (lookup(names, n, k->key) < 0)
			return err_set(c->err, c->errlen, -EINVAL, "%s.%.64s: unknown field", obj,
				       k->key);
	return 0;
}

static int get_object(struct dctx *c, const struct jnode *root, const char *key, bool required,
		      const struct jnode **ret)
{
	const struct jnode *v = jtree_get(root, key);

	*ret = NULL;
	if (!v) {
		if (required)
			return err_set(c->err, c->errlen, -EINVAL, "%s: missing", key);
		return 0;
	}
	if (v->type != JT_OBJECT)
		return err_set(c->err, c->errlen, -EINVAL, "%s: expected an object", key);
	*ret = v;
	return 0;
}

static int decode_task(struct dctx *c, const struct jnode *o, struct acct_task *t)
{
	static const char *const names[] = {"id", "job", "user", "uid", "account", "labels"};
	const struct jnode *labels;
	const char *id;
	uint64_t uid;
	int e;

	if ((e = check_members(c, o, "task", names, ARRAY_SIZE(names))) < 0)
		return e;
	if ((e = get_str(c, o, "task", "id", true, ACCT_ID_MAX, &id)) < 0)
		return e;
	strcpy(t->id, id);
	if ((e = get_str_dup(c, o, "task", "job", false, ACCT_NAME_MAX, &t->job)) < 0 ||
	    (e = get_str_dup(c, o, "task", "user", false, ACCT_NAME_MAX, &t->user)) < 0 ||
	    (e = get_str_dup(c, o, "task", "account", false, ACCT_NAME_MAX, &t->account)) < 0 ||
	    (e = get_u64(c, o, "task", "uid", false, UINT32_MAX, &uid)) < 0)
		return e;
	t->uid = (uint32_t)uid;
	labels = jtree_get(o, "labels");
	if (!labels)
		return 0;
	if (labels->type != JT_OBJECT)
		return err_set(c->err, c->errlen, -EINVAL, "task.labels: expected an object");
	if (labels->kids.n > ACCT_LABELS_MAX)
		return err_set(c->err, c->errlen, -EINVAL, "task.labels: more than %d labels",
			       ACCT_LABELS_MAX);
	for (const struct jnode *v = labels->kids.first; v; v = v->next) {
		if (v->type != JT_STRING)
			return err_set(c->err, c->errlen, -EINVAL,
				       "task.labels.%.64s: expected a string", v->key);
		e = acct_task_add_label(t, v->key, v->str.s);
		if (e == -ENOMEM)
			return e;
		if (e < 0)
			return err_set(c->err, c->errlen, -EINVAL,
				       "task.labels.%.64s: invalid label", v->key);
	}
	return 0;
}

static int decode_request(struct dctx *c, const struct jnode *o, struct acct_request *q)
{
	static const char *const names[] = {"cpus",
					    "memory_bytes",
					    "pids",
					    "gpus",
					    "time_limit_s",
					    "cpu_time_limit_s",
					    "gpu_memory_bytes"};
	uint64_t gpus;
	int e;

	if ((e = check_members(c, o, "request", names, ARRAY_SIZE(names))) < 0 ||
	    (e = get_double(c, o, "request", "cpus", &q->cpus)) < 0 ||
	    (e = get_u64(c, o, "request", "memory_bytes", false, INT64_MAX, &q->memory_bytes)) <
		0 ||
	    (e = get_u64(c, o, "request", "pids", false, INT64_MAX, &q->pids)) < 0 ||
	    (e = get_u64(c, o, "request", "gpus", false, UINT32_MAX, &gpus)) < 0 ||
	    (e = get_u64(c, o, "request", "time_limit_s", false, INT64_MAX, &q->time_limit_s)) <
		0 ||
	    (e = get_u64(c, o, "request", "cpu_time_limit_s", false, INT64_MAX,
			 &q->cpu_time_limit_s)) < 0 ||
	    (e = get_u64(c, o, "request", "gpu_memory_bytes", false, INT64_MAX,
			 &q->gpu_memory_bytes)) < 0)
		return e;
	q->gpus = (uint32_t)gpus;
	return 0;
}

/* usage.energy_j: every part has a source; a measured part has its number, a part not
 * measured has none; total, where present, is the parts' sum. */
static int decode_energy(struct dctx *c, const struct jnode *o, struct acct_energy *en)
{
	static const char *const names[] = {"cpu", "dram", "gpu", "total", "sources"};
	const struct jnode *src = jtree_get(o, "sources");
	double total, want;
	int e;

	if (o->type != JT_OBJECT)
		return err_set(c->err, c->errlen, -EINVAL, "usage.energy_j: expected an object");
	if ((e = check_members(c, o, "usage.energy_j", names, ARRAY_SIZE(names))) < 0)
		return e;
	if (!src || src->type != JT_OBJECT)
		return err_set(c->err, c->errlen, -EINVAL, "usage.energy_j.sources: %s",
			       src ? "expected an object" : "missing");
	if ((e = check_members(c, src, "usage.energy_j.sources", energy_part_names,
			       _ACCT_ENERGY_MAX)) < 0)
		return e;
	en->present = true;
	for (int p = 0; p < _ACCT_ENERGY_MAX; p++) {
		const struct jnode *v = jtree_get(src, energy_part_names[p]);
		int s = v && v->type == JT_STRING
			    ? lookup(energy_src_names, _ACCT_ESRC_MAX, v->str.s)
			    : -1;
		bool have = jtree_get(o, energy_part_names[p]) != NULL;

		if (s < 0 || (p == ACCT_ENERGY_GPU ? s == ACCT_ESRC_RAPL
						   : s == ACCT_ESRC_NVML || s == ACCT_ESRC_NONE))
			return err_set(
			    c->err, c->errlen, -EINVAL, "usage.energy_j.sources.%s: expected %s",
			    energy_part_names[p],
			    p == ACCT_ENERGY_GPU ? "\"nvml\", \"none\" or \"not_measured\""
						 : "\"rapl\" or \"not_measured\"");
		en->src[p] = (enum acct_energy_src)s;
		if (have != (s != ACCT_ESRC_NOT_MEASURED))
			return err_set(c->err, c->errlen, -EINVAL, "usage.energy_j.%s: %s",
				       energy_part_names[p],
				       have ? "present but its source says not_measured"
					    : "missing");
		if ((e = get_double(c, o, "usage.energy_j", energy_part_names[p], &en->j[p])) < 0)
			return e;
	}
	if ((e = get_double(c, o, "usage.energy_j", "total", &total)) < 0)
		return e;
	if (jtree_get(o, "total") &&
	    (!acct_energy_total(en, &want) || fabs(total - want) > 1e-9 * (1 + want)))
		return err_set(c->err, c->errlen, -EINVAL,
			       "usage.energy_j.total: not the sum of the measured parts");
	return 0;
}

static int decode_usage(struct dctx *c, const struct jnode *o, struct acct_usage *u)
{
	uint64_t *ints[_ACCT_U_MAX] = {
	    [ACCT_U_WALL_NS] = &u->wall_ns,
	    [ACCT_U_CPU_USER_NS] = &u->cpu_user_ns,
	    [ACCT_U_CPU_SYSTEM_NS] = &u->cpu_system_ns,
	    [ACCT_U_MEMORY_PEAK_BYTES] = &u->memory_peak_bytes,
	    [ACCT_U_IO_READ_BYTES] = &u->io_read_bytes,
	    [ACCT_U_IO_WRITE_BYTES] = &u->io_write_bytes,
	    [ACCT_U_NET_RX_BYTES] = &u->net_rx_bytes,
	    [ACCT_U_NET_TX_BYTES] = &u->net_tx_bytes,
	    [ACCT_U_GPU_MEMORY_PEAK_BYTES] = &u->gpu_memory_peak_bytes,
	};
	double *reals[_ACCT_U_MAX] = {
	    [ACCT_U_MEMORY_BYTE_SECONDS] = &u->memory_byte_seconds,
	    [ACCT_U_GPU_SECONDS] = &u->gpu_seconds,
	    [ACCT_U_GPU_UTIL_AVG] = &u->gpu_util_avg,
	};
	const struct jnode *en = NULL;
	int e;

	for (const struct jnode *k = o->kids.first; k; k = k->next)
		if (strcmp(k->key, "energy_j") == 0)
			en = k;
		else if (lookup(usage_names, _ACCT_U_MAX, k->key) < 0)
			return err_set(c->err, c->errlen, -EINVAL, "usage.%.64s: unknown field",
				       k->key);
	if (en && (e = decode_energy(c, en, &u->energy)) < 0)
		return e;
	for (int f = 0; f < _ACCT_U_MAX; f++) {
		if (ints[f])
			e = get_u64(c, o, "usage", usage_names[f], false, INT64_MAX, ints[f]);
		else
			e = get_double(c, o, "usage", usage_names[f], reals[f]);
		if (e < 0)
			return e;
	}
	return 0;
}

static int decode_exit(struct dctx *c, const struct jnode *o, struct acct_exit *x)
{
	static const char *const names[] = {"status",  "code",	    "signal",
					    "message", "oom_kills", "by"};
	const char *st, *by = NULL;
	int e;

	if ((e = check_members(c, o, "exit", names, ARRAY_SIZE(names))) < 0 ||
	    (e = get_str(c, o, "exit", "status", true, 64, &st)) < 0)
		return e;
	x->status = acct_exit_status_from_string(st);
	if (x->status == _ACCT_EXIT_INVALID || x->status == ACCT_EXIT_NONE)
		return err_set(c->err, c->errlen, -EINVAL, "exit.status: unknown status \"%.32s\"",
			       st);
	if ((e = get_int(c, o, "exit", "code", &x->code)) < 0 ||
	    (e = get_int(c, o, "exit", "signal", &x->signal)) < 0 ||
	    (e = get_str_dup(c, o, "exit", "message", false, ACCT_MESSAGE_MAX, &x->message)) < 0 ||
	    (e = get_u64(c, o, "exit", "oom_kills", false, INT64_MAX, &x->oom_kills)) < 0)
		return e;
	if (x->signal < 0 || x->signal > 128)
		return err_set(c->err, c->errlen, -EINVAL, "exit.signal: out of range");
	if ((e = get_str(c, o, "exit", "by", false, 64, &by)) < 0)
		return e;
	if (by) {
		x->by = acct_exit_by_from_string(by);
		if (x->by == _ACCT_BY_INVALID || x->by == ACCT_BY_NONE)
			return err_set(c->err, c->errlen, -EINVAL,
				       "exit.by: unknown value \"%.32s\" (task, limit, client, "
				       "operator)",
				       by);
	}
	return 0;
}

static int decode_sources(struct dctx *c, const struct jnode *o, enum acct_source *src)
{
	for (const struct jnode *v = o->kids.first; v; v = v->next) {
		int f = lookup(usage_names, _ACCT_U_MAX, v->key);
		enum acct_source s;

		if (f < 0)
			return err_set(c->err, c->errlen, -EINVAL,
				       "sources.%.64s: unknown usage field", v->key);
		if (v->type != JT_STRING)
			return err_set(c->err, c->errlen, -EINVAL, "sources.%s: expected a string",
				       v->key);
		s = acct_source_from_string(v->str.s);
		if (s == _ACCT_SRC_INVALID || s == ACCT_SRC_NONE)
			return err_set(c->err, c->errlen, -EINVAL,
				       "sources.%s: unknown source \"%.32s\"", v->key, v->str.s);
		src[f] = s;
	}
	return 0;
}

/* node.sample energy: joules and their sources (rapl for the CPU ones, nvml for the GPUs). */
static int decode_node_energy(struct dctx *c, const struct jnode *root, struct acct_node_sample *ns)
{
	const struct jnode *o, *v;
	int e;

	if ((e = get_object(c, root, "energy", false, &o)) < 0)
		return e;
	if (o) {
		static const char *const energy_names[] = {"package_j",
							   "dram_j",
							   "gpu_j",
							   "unattributed_package_j",
							   "unattributed_dram_j",
							   "unattributed_gpu_j",
							   "sources"};
		const struct jnode *src = jtree_get(o, "sources");

		if ((e = check_members(c, o, "energy", energy_names, ARRAY_SIZE(energy_names))) <
			0 ||
		    (e = get_double(c, o, "energy", "package_j", &ns->energy_package_j)) < 0 ||
		    (e = get_double(c, o, "energy", "dram_j", &ns->energy_dram_j)) < 0 ||
		    (e = get_double(c, o, "energy", "gpu_j", &ns->energy_gpu_j)) < 0 ||
		    (e = get_double(c, o, "energy", "unattributed_package_j",
				    &ns->unattributed_package_j)) < 0 ||
		    (e = get_double(c, o, "energy", "unattributed_dram_j",
				    &ns->unattributed_dram_j)) < 0 ||
		    (e = get_double(c, o, "energy", "unattributed_gpu_j",
				    &ns->unattributed_gpu_j)) < 0)
			return e;
		ns->has_unattributed_gpu = jtree_get(o, "unattributed_gpu_j") != NULL;
		if (ns->has_unattributed_gpu &&
		    (!jtree_get(o, "gpu_j") ||
		     ns->unattributed_gpu_j > ns->energy_gpu_j * (1 + 1e-12)))
			return err_set(c->err, c->errlen, -EINVAL,
				       "energy.unattributed_gpu_j: at most gpu_j, which it needs");
		ns->has_unattributed =
		    jtree_get(o, "unattributed_package_j") || jtree_get(o, "unattributed_dram_j");
		if (ns->has_unattributed &&
		    (!jtree_get(o, "unattributed_package_j") ||
		     !jtree_get(o, "unattributed_dram_j") ||
		     ns->unattributed_package_j > ns->energy_package_j * (1 + 1e-12) ||
		     ns->unattributed_dram_j > ns->energy_dram_j * (1 + 1e-12)))
			return err_set(
			    c->err, c->errlen, -EINVAL,
			    "energy.unattributed_package_j: both unattributed parts, each "
			    "at most its zone's energy");
		if (src && src->type != JT_OBJECT)
			return err_set(c->err, c->errlen, -EINVAL,
				       "energy.sources: expected an object");
		for (v = src ? src->kids.first : NULL; v; v = v->next) {
			bool cpu =
			    strcmp(v->key, "package_j") == 0 || strcmp(v->key, "dram_j") == 0;

			if (!cpu && strcmp(v->key, "gpu_j") != 0 &&
			    strcmp(v->key, "unattributed_gpu_j") != 0)
				return err_set(c->err, c->errlen, -EINVAL,
					       "energy.sources.%.64s: unknown field", v->key);
			if (v->type != JT_STRING || strcmp(v->str.s, cpu ? "rapl" : "nvml") != 0)
				return err_set(c->err, c->errlen, -EINVAL,
					       "energy.sources.%s: expected \"%s\"", v->key,
					       cpu ? "rapl" : "nvml");
			if (cpu)
				ns->has_rapl = true;
			else
				ns->has_gpu_energy = true;
		}
	}
	return 0;
}

/* node.sample tasks_unchanged: [[task id, age_ms, rss_bytes], ...] (an id twice is harmless:
 * the collector keeps the newest). */
static int decode_node_unchanged(struct dctx *c, const struct jnode *root,
				 struct acct_node_sample *ns)
{
	const struct jnode *list = jtree_get(root, "tasks_unchanged"), *v;
	size_t i = 0;
	int e;

	if (!list)
		return 0;
	if (list->type != JT_ARRAY)
		return err_set(c->err, c->errlen, -EINVAL, "tasks_unchanged: expected an array");
	if (list->kids.n > ACCT_NODE_UNCHANGED_MAX)
		return err_set(c->err, c->errlen, -EINVAL, "tasks_unchanged: more than %d entries",
			       ACCT_NODE_UNCHANGED_MAX);
	for (v = list->kids.first; v; v = v->next, i++) {
		const struct jnode *id = v->type == JT_ARRAY ? v->kids.first : NULL;
		const struct jnode *age = id ? id->next : NULL, *rss = age ? age->next : NULL;

		if (v->type != JT_ARRAY || v->kids.n != 3 || id->type != JT_STRING ||
		    age->type != JT_INT || rss->type != JT_INT)
			return err_set(
			    c->err, c->errlen, -EINVAL,
			    "tasks_unchanged[%zu]: expected [task id, age_ms, rss_bytes]", i);
		if (!valid_id(id->str.s, ACCT_ID_MAX) || id->str.len != strlen(id->str.s))
			return err_set(
			    c->err, c->errlen, -EINVAL,
			    "tasks_unchanged[%zu]: task id empty or longer than %d bytes", i,
			    ACCT_ID_MAX - 1);
		if (age->i < 0 || rss->i < 0)
			return err_set(c->err, c->errlen, -EINVAL,
				       "tasks_unchanged[%zu]: expected non-negative integers", i);
		e = acct_node_add_unchanged(ns, id->str.s, (uint64_t)age->i, (uint64_t)rss->i);
		if (e < 0)
			return e;
	}
	return 0;
}

/* node.sample tasks_alive (schema v2 only): {"since": time, "n": count, "digest": 16 hex
 * digits, "except": [task id, ...]} */
static int decode_time(struct dctx *c, const char *s, uint64_t *ret);
static int decode_node_alive(struct dctx *c, const struct jnode *root, struct acct_node_sample *ns)
{
	static const char *const names[] = {"since", "n", "digest", "except"};
	const struct jnode *o = jtree_get(root, "tasks_alive"), *ex, *v;
	const char *hex;
	uint64_t u;
	char *end;
	size_t i = 0;
	int e;

	if (!o)
		return 0;
	if (c->schema < 2)
		return err_set(c->err, c->errlen, -EINVAL, "tasks_alive: needs schema \"%s\"",
			       ACCT_SCHEMA_V2);
	if (o->type != JT_OBJECT)
		return err_set(c->err, c->errlen, -EINVAL, "tasks_alive: expected an object");
	if ((e = check_members(c, o, "tasks_alive", names, ARRAY_SIZE(names))) < 0 ||
	    (e = get_u64(c, o, "tasks_alive", "n", true, UINT32_MAX, &u)) < 0 ||
	    (e = get_str(c, o, "tasks_alive", "since", true, RFC3339_MAX + 16, &hex)) < 0)
		return e;
	if (decode_time(c, hex, &ns->alive.since_ns) < 0)
		return err_set(c->err, c->errlen, -EINVAL,
			       "tasks_alive.since: expected an RFC 3339 UTC time");
	if ((e = get_str(c, o, "tasks_alive", "digest", true, 17, &hex)) < 0)
		return e;
	ns->alive.n = (uint32_t)u;
	errno = 0;
	ns->alive.digest = strtoull(hex, &end, 16);
	if (strlen(hex) != 16 || *end || errno || !isxdigit((unsigned char)hex[0]))
		return err_set(c->err, c->errlen, -EINVAL,
			       "tasks_alive.digest: expected 16 hex digits");
	ex = jtree_get(o, "except");
	if (!ex || ex->type != JT_ARRAY)
		return err_set(c->err, c->errlen, -EINVAL,
			       "tasks_alive.except: expected an array of task ids");
	if (ex->kids.n > ACCT_NODE_UNCHANGED_MAX)
		return err_set(c->err, c->errlen, -EINVAL,
			       "tasks_alive.except: more than %d entries", ACCT_NODE_UNCHANGED_MAX);
	for (v = ex->kids.first; v; v = v->next, i++) {
		if (v->type != JT_STRING || !valid_id(v->str.s, ACCT_ID_MAX) ||
		    v->str.len != strlen(v->str.s))
			return err_set(c->err, c->errlen, -EINVAL,
				       "tasks_alive.except[%zu]: task id empty or longer than %d "
				       "bytes",
				       i, ACCT_ID_MAX - 1);
		if ((e = acct_node_add_alive_except(ns, v->str.s)) < 0)
			return e;
	}
	ns->alive.present = true;
	return 0;
}

/* The node.sample members (node_top); capacity is required, the rest may be absent (0); the
 * members of task and audit records are refused. */
static int decode_node_sample(struct dctx *c, const struct jnode *root, struct acct_record *rec)
{
	static const char *const not_node[] = {"task",	  "request", "usage",	  "exit",
					       "sources", "event",   "prev_hash", "hash"};
	static const char *const cap_names[] = {"cpus", "memory_bytes", "gpus", "gpu_models"};
	static const char *const alloc_names[] = {"cpus", "memory_bytes", "gpus", "tasks"};
	static const char *const used_names[] = {"cpu_ns", "memory_bytes"};
	const struct jnode *o, *v;
	struct acct_node_sample *ns;
	const char *s;
	uint64_t u;
	int e;

	for (size_t i = 0; i < ARRAY_SIZE(not_node); i++)
		if (jtree_get(root, not_node[i]))
			return err_set(c->err, c->errlen, -EINVAL,
				       "%s: not allowed on node.sample records", not_node[i]);
	if ((e = acct_record_node_sample(rec)) < 0)
		return e;
	ns = rec->ns;
	if ((e = get_u64(c, root, "", "period_ns", false, INT64_MAX, &ns->period_ns)) < 0 ||
	    (e = get_str(c, root, "", "price_class", false, ACCT_NAME_MAX, &s)) < 0)
		return e;
	if (s && *s && !(ns->price_class = strdup(s)))
		return -ENOMEM;
	if ((e = get_object(c, root, "labels", false, &o)) < 0)
		return e;
	if (o && o->kids.n > ACCT_LABELS_MAX)
		return err_set(c->err, c->errlen, -EINVAL, "labels: more than %d labels",
			       ACCT_LABELS_MAX);
	for (v = o ? o->kids.first : NULL; v; v = v->next) {
		if (v->type != JT_STRING)
			return err_set(c->err, c->errlen, -EINVAL,
				       "labels.%.64s: expected a string", v->key);
		e = acct_node_add_label(ns, v->key, v->str.s);
		if (e == -ENOMEM)
			return e;
		if (e < 0)
			return err_set(c->err, c->errlen, -EINVAL, "labels.%.64s: invalid label",
				       v->key);
	}

	if ((e = get_object(c, root, "capacity", true, &o)) < 0 ||
	    (e = check_members(c, o, "capacity", cap_names, ARRAY_SIZE(cap_names))) < 0 ||
	    (e = get_double(c, o, "capacity", "cpus", &ns->cap_cpus)) < 0 ||
	    (e = get_u64(c, o, "capacity", "memory_bytes", false, INT64_MAX,
			 &ns->cap_memory_bytes)) < 0 ||
	    (e = get_u64(c, o, "capacity", "gpus", false, UINT32_MAX, &u)) < 0)
		return e;
	ns->cap_gpus = (uint32_t)u;
	v = jtree_get(o, "gpu_models");
	if (v && v->type != JT_ARRAY)
		return err_set(c->err, c->errlen, -EINVAL,
			       "capacity.gpu_models: expected an array");
	if (v && v->kids.n > ACCT_NODE_GPU_MODELS_MAX)
		return err_set(c->err, c->errlen, -EINVAL,
			       "capacity.gpu_models: more than %d entries",
			       ACCT_NODE_GPU_MODELS_MAX);
	for (v = v ? v->kids.first : NULL; v; v = v->next) {
		if (v->type != JT_STRING)
			return err_set(c->err, c->errlen, -EINVAL,
				       "capacity.gpu_models: expected strings");
		e = acct_node_add_gpu_model(ns, v->str.s);
		if (e == -ENOMEM)
			return e;
		if (e < 0)
			return err_set(c->err, c->errlen, -EINVAL,
				       "capacity.gpu_models: a model name longer than %d bytes",
				       ACCT_NAME_MAX - 1);
	}

	if ((e = get_object(c, root, "allocated", false, &o)) < 0)
		return e;
	if (o) {
		if ((e = check_members(c, o, "allocated", alloc_names, ARRAY_SIZE(alloc_names))) <
			0 ||
		    (e = get_double(c, o, "allocated", "cpus", &ns->alloc_cpus)) < 0 ||
		    (e = get_u64(c, o, "allocated", "memory_bytes", false, INT64_MAX,
				 &ns->alloc_memory_bytes)) < 0 ||
		    (e = get_u64(c, o, "allocated", "gpus", false, UINT32_MAX, &u)) < 0)
			return e;
		ns->alloc_gpus = (uint32_t)u;
		if ((e = get_u64(c, o, "allocated", "tasks", false, UINT32_MAX, &u)) < 0)
			return e;
		ns->alloc_tasks = (uint32_t)u;
	}
	if ((e = get_object(c, root, "used", false, &o)) < 0)
		return e;
	if (o && ((e = check_members(c, o, "used", used_names, ARRAY_SIZE(used_names))) < 0 ||
		  (e = get_u64(c, o, "used", "cpu_ns", false, INT64_MAX, &ns->used_cpu_ns)) < 0 ||
		  (e = get_u64(c, o, "used", "memory_bytes", false, INT64_MAX,
			       &ns->used_memory_bytes)) < 0))
		return e;
	if ((e = decode_node_unchanged(c, root, ns)) < 0 ||
	    (e = decode_node_alive(c, root, ns)) < 0)
		return e;
	return decode_node_energy(c, root, ns);
}

/* Strict "YYYY-MM-DDTHH:MM:SS[.frac](Z|+00:00)", years 1970..2500 (fits in uint64 ns). */
static int decode_time(struct dctx *c, const char *s, uint64_t *ret)
{
	static const char pat[] = "dddd-dd-ddTdd:dd:dd";
	int year;

	if (strlen(s) < sizeof(pat) - 1)
		goto out_bad;
	for (size_t i = 0; i < sizeof(pat) - 1; i++) {
		if (pat[i] == 'd' ? !isdigit((unsigned char)s[i]) : s[i] != pat[i])
			goto out_bad;
	}
	year = (s[0] - '0') * 1000 + (s[1] - '0') * 100 + (s[2] - '0') * 10 + (s[3] - '0');
	if (year < 1970 || year > 2500)
		return err_set(c->err, c->errlen, -EINVAL, "time: out of range");
	if (parse_rfc3339(s, ret) < 0)
		goto out_bad;
	return 0;
out_bad:
	return err_set(c->err, c->errlen, -EINVAL,
		       "time: expected RFC 3339 UTC (2026-12-02T15:04:05.123456Z)");
}

/* An audit record's prev_hash (optional) and hash; neither on other records. */
static int decode_hashes(struct dctx *c, const struct jnode *root, bool audit,
			 struct acct_record *rec)
{
	const char *s;
	int e;

	if (!audit) {
		if (jtree_get(root, "prev_hash") || jtree_get(root, "hash"))
			return err_set(c->err, c->errlen, -EINVAL,
				       "hash: only allowed on audit records");
		return 0;
	}
	if ((e = get_str(c, root, "", "prev_hash", false, ACCT_HASH_HEX, &s)) < 0)
		return e;
	if (s && *s && !valid_hex64(s))
		return err_set(c->err, c->errlen, -EINVAL,
			       "prev_hash: expected 64 lowercase hex digits");
	if (s)
		strcpy(rec->prev_hash, s);
	if ((e = get_str(c, root, "", "hash", true, ACCT_HASH_HEX, &s)) < 0)
		return e;
	if (!valid_hex64(s))
		return err_set(c->err, c->errlen, -EINVAL,
			       "hash: expected 64 lowercase hex digits");
	strcpy(rec->hash, s);
	return 0;
}

static int from_tree(const struct jnode *root, struct acct_record *ret, char *err, size_t errlen)
{
	struct dctx c = {.err = err, .errlen = errlen};
	struct acct_record rec = {0};
	const struct jnode *o;
	const char *s;
	bool audit;
	int e;

	if (err && errlen)
		err[0] = '\0';
	if (root->type != JT_OBJECT)
		return err_set(err, errlen, -EINVAL, "record: expected a JSON object");

	if ((e = get_str(&c, root, "", "schema", true, 64, &s)) < 0)
		return e;
	if (strcmp(s, ACCT_SCHEMA) == 0)
		c.schema = 1;
	else if (strcmp(s, ACCT_SCHEMA_V2) == 0)
		c.schema = 2;
	else
		return err_set(err, errlen, -EINVAL,
			       "schema: unsupported schema \"%.64s\" (expected \"%s\" or \"%s\")",
			       s, ACCT_SCHEMA, ACCT_SCHEMA_V2);
	if ((e = get_str(&c, root, "", "type", true, 64, &s)) < 0)
		return e;
	rec.type = acct_type_from_string(s);
	if (rec.type == _ACCT_TYPE_INVALID)
		return err_set(err, errlen, -EINVAL, "type: unknown record type \"%.64s\"", s);
	audit = acct_type_is_audit(rec.type);

	if ((e = get_str(&c, root, "", "record_id", true, ACCT_ID_MAX, &s)) < 0)
		goto out_clear;
	strcpy(rec.record_id, s);
	if ((e = get_str(&c, root, "", "time", true, RFC3339_MAX + 16, &s)) < 0 ||
	    (e = decode_time(&c, s, &rec.time_ns)) < 0)
		goto out_clear;
	if ((e = get_str_dup(&c, root, "", "node", true, ACCT_NAME_MAX, &rec.node)) < 0)
		goto out_clear;

	if (rec.type == ACCT_NODE_SAMPLE) {
		if ((e = decode_node_sample(&c, root, &rec)) < 0)
			goto out_clear;
		goto out_extra;
	}
	if ((e = get_object(&c, root, "task", true, &o)) < 0 ||
	    (e = decode_task(&c, o, &rec.task)) < 0)
		goto out_clear;
	if ((e = get_object(&c, root, "request", rec.type == ACCT_TASK_START, &o)) < 0 ||
	    (o && (e = decode_request(&c, o, &rec.request)) < 0))
		goto out_clear;
	if ((e = get_object(&c, root, "usage",
			    rec.type == ACCT_TASK_SAMPLE || rec.type == ACCT_TASK_END, &o)) < 0 ||
	    (o && (e = decode_usage(&c, o, &rec.usage)) < 0))
		goto out_clear;
	if ((e = get_object(&c, root, "sources", false, &o)) < 0 ||
	    (o && (e = decode_sources(&c, o, rec.sources)) < 0))
		goto out_clear;
	if ((e = get_object(&c, root, "exit", rec.type == ACCT_TASK_END, &o)) < 0)
		goto out_clear;
	if (o && rec.type != ACCT_TASK_END) {
		e = err_set(err, errlen, -EINVAL, "exit: only allowed on task.end records");
		goto out_clear;
	}
	if (o && (e = decode_exit(&c, o, &rec.exit)) < 0)
		goto out_clear;

	if ((e = get_object(&c, root, "event", audit, &o)) < 0)
		goto out_clear;
	if (o && !audit) {
		e = err_set(err, errlen, -EINVAL, "event: only allowed on audit records");
		goto out_clear;
	}
	if (o && !(rec.event = jtree_to_json(o))) {
		e = -ENOMEM;
		goto out_clear;
	}
	if ((e = decode_hashes(&c, root, audit, &rec)) < 0)
		goto out_clear;

out_extra:
	for (const struct jnode *v = root->kids.first; v; v = v->next) {
		if (is_reserved_for(rec.type, v->key))
			continue;
		if (!rec.extra) {
			rec.extra = json_object();
			if (!rec.extra) {
				e = -ENOMEM;
				goto out_clear;
			}
		}
		if (json_object_set_new(rec.extra, v->key, jtree_to_json(v)) < 0) {
			e = -ENOMEM;
			goto out_clear;
		}
	}
	*ret = rec;
	return 0;

out_clear:
	acct_record_clear(&rec);
	return e;
}

int acct_record_decode(const char *buf, size_t len, struct acct_record *ret, char *err,
		       size_t errlen)
{
	return acct_record_decode_in(buf, len, ret, err, errlen, NULL);
}

int acct_record_decode_in(const char *buf, size_t len, struct acct_record *ret, char *err,
			  size_t errlen, struct acct_arena *arena)
{
	int e = acct_record_scan(buf, len, ret, arena);

	if (e <= 0) {
		if (err && errlen)
			err[0] = '\0';
		return e;
	}
	return acct_record_decode_tree(buf, len, ret, err, errlen);
}

int acct_record_decode_tree(const char *buf, size_t len, struct acct_record *ret, char *err,
			    size_t errlen)
{
	char jerr[160];
	struct jtree t;
	int e;

	if (err && errlen)
		err[0] = '\0';
	if (len > ACCT_RECORD_MAX_BYTES)
		return err_set(err, errlen, -EINVAL, "record: longer than %d bytes",
			       ACCT_RECORD_MAX_BYTES);
	e = jtree_parse(&t, buf, len, jerr, sizeof(jerr));
	if (e == -EINVAL)
		e = err_set(err, errlen, -EINVAL, "record: invalid JSON %s", jerr);
	else if (e == 0)
		e = from_tree(t.root, ret, err, errlen);
	jtree_free(&t);
	return e;
}
