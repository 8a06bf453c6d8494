/* SPDX-License-Identifier: MIT */
/* Backend dispatch and the parts both backends share: record columns and rollup deltas. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collector/store.h"
#include "common/macro.h"
#include "common/util.h"

static const char *const sum_names[_COLL_SUM_MAX] = {
    [COLL_SUM_TASKS] = "tasks",
    [COLL_SUM_FAILED_TASKS] = "failed_tasks",
    [COLL_SUM_WALL_S] = "wall_s",
    [COLL_SUM_CPU_S] = "cpu_s",
    [COLL_SUM_CPU_REQ_CORE_S] = "cpu_req_core_s",
    [COLL_SUM_CPU_CHARGED_CORE_S] = "cpu_charged_core_s",
    [COLL_SUM_MEM_BYTE_S] = "mem_byte_s",
    [COLL_SUM_MEM_REQ_BYTE_S] = "mem_req_byte_s",
    [COLL_SUM_MEM_CHARGED_BYTE_S] = "mem_charged_byte_s",
    [COLL_SUM_GPU_S] = "gpu_s",
    [COLL_SUM_GPU_REQ_S] = "gpu_req_s",
    [COLL_SUM_GPU_CHARGED_S] = "gpu_charged_s",
    [COLL_SUM_IO_READ_BYTES] = "io_read_bytes",
    [COLL_SUM_IO_WRITE_BYTES] = "io_write_bytes",
    [COLL_SUM_NET_RX_BYTES] = "net_rx_bytes",
    [COLL_SUM_NET_TX_BYTES] = "net_tx_bytes",
};

const char *coll_sum_name(enum coll_sum s)
{
	return (unsigned)s < _COLL_SUM_MAX ? sum_names[s] : NULL;
}

static const char *const table_names[_COLL_ROLLUP_MAX] = {
    [COLL_ROLLUP_HOUR] = "rollup_hour",
    [COLL_ROLLUP_DAY] = "rollup_day",
    [COLL_ROLLUP_LABEL_DAY] = "rollup_label_day",
};

const char *coll_rollup_table_name(enum coll_rollup_table t)
{
	return (unsigned)t < _COLL_ROLLUP_MAX ? table_names[t] : NULL;
}

const struct coll_col coll_cols[COLL_N_COLS] = {
    {"record_id", COLL_COL_TEXT},
    {"type", COLL_COL_TEXT},
    {"time", COLL_COL_TIME},
    {"time_ns", COLL_COL_INT},
    {"node", COLL_COL_TEXT},
    {"task_id", COLL_COL_TEXT},
    {"job", COLL_COL_TEXT},
    {"\"user\"", COLL_COL_TEXT},
    {"account", COLL_COL_TEXT},
    {"labels", COLL_COL_JSON},
    {"req_cpus", COLL_COL_REAL},
    {"req_memory_bytes", COLL_COL_INT},
    {"req_gpus", COLL_COL_INT},
    {"req_time_limit_s", COLL_COL_INT},
    {"wall_ns", COLL_COL_INT},
    {"cpu_user_ns", COLL_COL_INT},
    {"cpu_system_ns", COLL_COL_INT},
    {"memory_peak_bytes", COLL_COL_INT},
    {"memory_byte_seconds", COLL_COL_REAL},
    {"io_read_bytes", COLL_COL_INT},
    {"io_write_bytes", COLL_COL_INT},
    {"net_rx_bytes", COLL_COL_INT},
    {"net_tx_bytes", COLL_COL_INT},
    {"gpu_seconds", COLL_COL_REAL},
    {"exit_status", COLL_COL_TEXT},
    {"body", COLL_COL_JSON},
};

/* SQL integers are signed 64-bit: clamp the (absurd) values above INT64_MAX. */
static int64_t clamp_u64(uint64_t v)
{
	return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v;
}

static void set_text(struct coll_value *v, const char *s)
{
	if (!s) {
		v->null = true;
		return;
	}
	v->s = s;
	v->len = strlen(s);
}

static void set_int(struct coll_value *v, uint64_t x)
{
	v->i = clamp_u64(x);
}

int coll_item_values(const struct coll_item *it, struct coll_item_scratch *sc,
		     struct coll_value vals[COLL_N_COLS])
{
	const struct acct_record *r = it->rec;
	json_t *labels;
	int k = 0;

	memset(vals, 0, sizeof(struct coll_value) * COLL_N_COLS);
	format_rfc3339_us(r->time_ns, sc->time, sizeof(sc->time));
	labels = json_object();
	if (!labels)
		return -ENOMEM;
	for (size_t i = 0; i < r->task.n_labels; i++)
		if (json_object_set_new(labels, r->task.labels[i].key,
					json_string(r->task.labels[i].value ?: "")) < 0) {
			json_decref(labels);
			return -ENOMEM;
		}
	sc->labels = json_dumps(labels, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(labels);
	if (!sc->labels)
		return -ENOMEM;

	set_text(&vals[k++], r->record_id);
	set_text(&vals[k++], acct_type_to_string(r->type));
	set_text(&vals[k++], sc->time);
	set_int(&vals[k++], r->time_ns);
	set_text(&vals[k++], r->node);
	set_text(&vals[k++], r->task.id[0] ? r->task.id : NULL);
	set_text(&vals[k++], r->task.job);
	set_text(&vals[k++], r->task.user);
	set_text(&vals[k++], r->task.account);
	set_text(&vals[k++], sc->labels);
	vals[k++].d = r->request.cpus;
	set_int(&vals[k++], r->request.memory_bytes);
	set_int(&vals[k++], r->request.gpus);
	set_int(&vals[k++], r->request.time_limit_s);
	set_int(&vals[k++], r->usage.wall_ns);
	set_int(&vals[k++], r->usage.cpu_user_ns);
	set_int(&vals[k++], r->usage.cpu_system_ns);
	set_int(&vals[k++], r->usage.memory_peak_bytes);
	vals[k++].d = r->usage.memory_byte_seconds;
	set_int(&vals[k++], r->usage.io_read_bytes);
	set_int(&vals[k++], r->usage.io_write_bytes);
	set_int(&vals[k++], r->usage.net_rx_bytes);
	set_int(&vals[k++], r->usage.net_tx_bytes);
	vals[k++].d = r->usage.gpu_seconds;
	if (r->exit.status != ACCT_EXIT_NONE)
		set_text(&vals[k++], acct_exit_status_to_string(r->exit.status));
	else
		vals[k++].null = true;
	vals[k].s = it->json;
	vals[k++].len = it->json_len;
	return 0;
}

void coll_item_scratch_free(struct coll_item_scratch *sc)
{
	free(sc->labels);
	sc->labels = NULL;
}

void coll_record_sums(const struct acct_record *r, double v[_COLL_SUM_MAX])
{
	double wall = (double)r->usage.wall_ns / 1e9;
	double cpu = (double)(r->usage.cpu_user_ns + r->usage.cpu_system_ns) / 1e9;
	double cpu_req = r->request.cpus * wall;
	double mem_req = (double)r->request.memory_bytes * wall;
	double gpu_req = (double)r->request.gpus * wall;

	memset(v, 0, sizeof(double) * _COLL_SUM_MAX);
	v[COLL_SUM_TASKS] = 1;
	v[COLL_SUM_FAILED_TASKS] =
	    !(r->exit.status == ACCT_EXIT_EXITED && r->exit.code == 0) ? 1 : 0;
	v[COLL_SUM_WALL_S] = wall;
	v[COLL_SUM_CPU_S] = cpu;
	v[COLL_SUM_CPU_REQ_CORE_S] = cpu_req;
	v[COLL_SUM_CPU_CHARGED_CORE_S] = MAX(cpu_req, cpu);
	v[COLL_SUM_MEM_BYTE_S] = r->usage.memory_byte_seconds;
	v[COLL_SUM_MEM_REQ_BYTE_S] = mem_req;
	v[COLL_SUM_MEM_CHARGED_BYTE_S] = MAX(mem_req, r->usage.memory_byte_seconds);
	v[COLL_SUM_GPU_S] = r->usage.gpu_seconds;
	v[COLL_SUM_GPU_REQ_S] = gpu_req;
	v[COLL_SUM_GPU_CHARGED_S] = MAX(gpu_req, r->usage.gpu_seconds);
	v[COLL_SUM_IO_READ_BYTES] = (double)r->usage.io_read_bytes;
	v[COLL_SUM_IO_WRITE_BYTES] = (double)r->usage.io_write_bytes;
	v[COLL_SUM_NET_RX_BYTES] = (double)r->usage.net_rx_bytes;
	v[COLL_SUM_NET_TX_BYTES] = (double)r->usage.net_tx_bytes;
}

static int delta_cmp(const void *a, const void *b)
{
	const struct coll_delta *x = a, *y = b;
	int c;

	if (x->table != y->table)
		return x->table < y->table ? -1 : 1;
	if ((c = strcmp(x->bucket, y->bucket)) || (c = strcmp(x->account, y->account)) ||
	    (c = strcmp(x->user, y->user)) || (c = strcmp(x->label_key, y->label_key)) ||
	    (c = strcmp(x->label_value, y->label_value)))
		return c;
	return 0;
}

int coll_deltas_build(const struct coll_item *items, size_t n, struct coll_delta **ret,
		      size_t *ret_n)
{
	_cleanup_free_ struct coll_delta *d = NULL;
	size_t cap = 0, nd = 0, out;

	for (size_t i = 0; i < n; i++)
		if (items[i].is_new && items[i].rec->type == ACCT_TASK_END)
			cap += 2 + items[i].rec->task.n_labels;
	if (cap == 0) {
		*ret = NULL;
		*ret_n = 0;
		return 0;
	}
	d = calloc(cap, sizeof(*d));
	if (!d)
		return -ENOMEM;

	for (size_t i = 0; i < n; i++) {
		const struct acct_record *r = items[i].rec;
		double v[_COLL_SUM_MAX];
		time_t secs;
		struct tm tm;
		char hour[16], day[16];

		if (!items[i].is_new || r->type != ACCT_TASK_END)
			continue;
		coll_record_sums(r, v);
		secs = (time_t)(r->time_ns / NSEC_PER_SEC);
		gmtime_r(&secs, &tm);
		strftime(hour, sizeof(hour), "%Y-%m-%dT%H", &tm);
		strftime(day, sizeof(day), "%Y-%m-%d", &tm);
		for (size_t k = 0; k < 2 + r->task.n_labels; k++) {
			struct coll_delta *x = &d[nd++];

			x->table = k == 0   ? COLL_ROLLUP_HOUR
				   : k == 1 ? COLL_ROLLUP_DAY
					    : COLL_ROLLUP_LABEL_DAY;
			snprintf(x->bucket, sizeof(x->bucket), "%s", k == 0 ? hour : day);
			x->account = r->task.account ?: "";
			x->user = r->task.user ?: "";
			x->label_key = k >= 2 ? r->task.labels[k - 2].key : "";
			x->label_value = k >= 2 ? (r->task.labels[k - 2].value ?: "") : "";
			memcpy(x->v, v, sizeof(v));
		}
	}
	qsort(d, nd, sizeof(*d), delta_cmp);
	out = 0;
	for (size_t i = 0; i < nd; i++) {
		if (out > 0 && delta_cmp(&d[out - 1], &d[i]) == 0) {
			for (int s = 0; s < _COLL_SUM_MAX; s++)
				d[out - 1].v[s] += d[i].v[s];
			continue;
		}
		if (out != i)
			d[out] = d[i];
		out++;
	}
	*ret_n = out;
	*ret = TAKE_PTR(d);
	return 0;
}

/* ---- dispatch ---- */

static bool has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

int coll_store_open(const char *uri, unsigned flags, struct coll_store **ret, char *err,
		    size_t errlen)
{
	const struct coll_store_ops *ops;
	struct coll_store *s = NULL;
	int r;

	if (errlen)
		err[0] = 0;
	if (!uri || !*uri) {
		snprintf(err, errlen, "empty database URI");
		return -EINVAL;
	}
	if (has_prefix(uri, "sqlite:"))
		ops = &coll_store_sqlite_ops;
	else if (has_prefix(uri, "postgresql:") || has_prefix(uri, "postgres:"))
		ops = &coll_store_pg_ops;
	else {
		snprintf(err, errlen,
			 "unknown database URI scheme in '%.64s' (want sqlite:/path or "
			 "postgresql://...)",
			 uri);
		return -EPROTONOSUPPORT;
	}
	r = ops->open(uri, &s, err, errlen);
	if (r < 0)
		return r;
	s->ops = ops;
	s->no_rollups = flags & COLL_STORE_NO_ROLLUPS;
	pthread_mutex_init(&s->lock, NULL);
	*ret = s;
	return 0;
}

void coll_store_close(struct coll_store *s)
{
	if (!s)
		return;
	pthread_mutex_destroy(&s->lock);
	s->ops->close(s);
}

#define LOCKED(s, call)                                                                            \
	({                                                                                         \
		int _r;                                                                            \
		pthread_mutex_lock(&(s)->lock);                                                    \
		_r = (call);                                                                       \
		pthread_mutex_unlock(&(s)->lock);                                                  \
		_r;                                                                                \
	})

int coll_store_insert_batch(struct coll_store *s, struct coll_item *items, size_t n)
{
	if (n == 0)
		return 0;
	return LOCKED(s, s->ops->insert_batch(s, items, n));
}

int coll_store_query(struct coll_store *s, const struct coll_query *q, coll_row_fn fn, void *ud)
{
	return LOCKED(s, s->ops->query(s, q, fn, ud));
}

int coll_store_rollup_query(struct coll_store *s, enum coll_rollup_table t, const char *from,
			    const char *to, coll_rollup_fn fn, void *ud)
{
	if ((unsigned)t >= _COLL_ROLLUP_MAX)
		return -EINVAL;
	return LOCKED(s, s->ops->rollup_query(s, t, from, to, fn, ud));
}

int coll_store_count(struct coll_store *s, uint64_t *ret)
{
	return LOCKED(s, s->ops->count(s, ret));
}

int coll_store_ping(struct coll_store *s)
{
	return LOCKED(s, s->ops->ping(s));
}

int coll_store_schema_version(struct coll_store *s, int *ret)
{
	return LOCKED(s, s->ops->schema_version(s, ret));
}

const char *coll_store_errmsg(struct coll_store *s)
{
	return s->errmsg;
}
