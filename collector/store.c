/* SPDX-License-Identifier: MIT */
/* Backend dispatch and the parts both backends share: record columns, rollup keys, DDL and
 * the records query (the rollup deltas of records are in billing.c). */
#include <errno.h>
#include <stdio.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collector/store.h"
#include "common/error.h"
#include "common/macro.h"
#include "common/clock.h"

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
    [COLL_SUM_OOM_KILLED] = "oom_killed",
    [COLL_SUM_TIME_LIMIT] = "time_limit",
    [COLL_SUM_CPU_TIME_LIMIT] = "cpu_time_limit",
    [COLL_SUM_GPU_MEMORY_LIMIT] = "gpu_memory_limit",
    [COLL_SUM_NO_REQUEST_TASKS] = "no_request_tasks",
    [COLL_SUM_CARRIED_TASKS] = "carried_tasks",
    [COLL_SUM_ENERGY_CPU_J] = "energy_cpu_j",
    [COLL_SUM_ENERGY_DRAM_J] = "energy_dram_j",
    [COLL_SUM_ENERGY_GPU_J] = "energy_gpu_j",
    [COLL_SUM_ENERGY_UNMEASURED_TASKS] = "energy_unmeasured_tasks",
};

const char *coll_sum_name(enum coll_sum s)
{
	return (unsigned)s < _COLL_SUM_MAX ? sum_names[s] : NULL;
}

bool coll_sum_is_count(enum coll_sum s)
{
	switch (s) {
	case COLL_SUM_TASKS:
	case COLL_SUM_FAILED_TASKS:
	case COLL_SUM_OOM_KILLED:
	case COLL_SUM_TIME_LIMIT:
	case COLL_SUM_CPU_TIME_LIMIT:
	case COLL_SUM_GPU_MEMORY_LIMIT:
	case COLL_SUM_NO_REQUEST_TASKS:
	case COLL_SUM_CARRIED_TASKS:
	case COLL_SUM_ENERGY_UNMEASURED_TASKS:
		return true;
	default:
		return false;
	}
}

const struct coll_rollup_def coll_rollup_defs[_COLL_ROLLUP_MAX] = {
    [COLL_ROLLUP_DAY] = {"rollup_day", 2, {COLL_KEY_ACCOUNT, COLL_KEY_USER}},
    [COLL_ROLLUP_LABEL_DAY] = {"rollup_label_day",
			       4,
			       {COLL_KEY_LABEL_KEY, COLL_KEY_LABEL_VALUE, COLL_KEY_ACCOUNT,
				COLL_KEY_USER}},
    [COLL_ROLLUP_JOB_DAY] = {"rollup_job_day",
			     4,
			     {COLL_KEY_ACCOUNT, COLL_KEY_USER, COLL_KEY_JOB, COLL_KEY_NODE}},
    [COLL_ROLLUP_JOB_LABEL_DAY] = {"rollup_job_label_day",
				   6,
				   {COLL_KEY_LABEL_KEY, COLL_KEY_LABEL_VALUE, COLL_KEY_ACCOUNT,
				    COLL_KEY_USER, COLL_KEY_JOB, COLL_KEY_NODE}},
    [COLL_ROLLUP_JOB_MONTH] = {"rollup_job_month",
			       4,
			       {COLL_KEY_ACCOUNT, COLL_KEY_USER, COLL_KEY_JOB, COLL_KEY_NODE}},
    [COLL_ROLLUP_NODE_DAY] = {"rollup_node_day",
			      3,
			      {COLL_KEY_NODE, COLL_KEY_LABEL_KEY, COLL_KEY_LABEL_VALUE}},
    [COLL_ROLLUP_NODE_ALLOC_DAY] = {"rollup_node_alloc_day", 1, {COLL_KEY_NODE}},
    [COLL_ROLLUP_OPEN] = {"rollup_open", 2, {COLL_KEY_NODE, COLL_KEY_TASK_ID}},
};

const char *coll_rollup_table_name(enum coll_rollup_table t)
{
	return (unsigned)t < _COLL_ROLLUP_MAX ? coll_rollup_defs[t].name : NULL;
}

static const char *const key_columns[_COLL_KEY_MAX] = {
    [COLL_KEY_ACCOUNT] = "account",
    [COLL_KEY_USER] = "\"user\"",
    [COLL_KEY_LABEL_KEY] = "label_key",
    [COLL_KEY_LABEL_VALUE] = "label_value",
    [COLL_KEY_JOB] = "job",
    [COLL_KEY_NODE] = "node",
    [COLL_KEY_TASK_ID] = "task_id",
};

const char *coll_key_column(enum coll_key k)
{
	return (unsigned)k < _COLL_KEY_MAX ? key_columns[k] : NULL;
}

static char *put_json_str(char *o, const char *s)
{
	static const char hex[] = "0123456789abcdef";

	*o++ = '"';
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p == '"' || *p == '\\') {
			*o++ = '\\';
			*o++ = (char)*p;
		} else if (*p < 0x20) {
			memcpy(o, "\\u00", 4);
			o[4] = hex[*p >> 4];
			o[5] = hex[*p & 15];
			o += 6;
		} else
			*o++ = (char)*p;
	}
	*o++ = '"';
	return o;
}

/* Compact, keys sorted by strcmp (what jansson's JSON_SORT_KEYS printed before), written
 * directly: this runs for every ingested record. */
char *coll_labels_json(const struct acct_record *r)
{
	const struct acct_label *l = r->task.labels;
	size_t n = MIN(r->task.n_labels, (size_t)ACCT_LABELS_MAX), idx[ACCT_LABELS_MAX];
	size_t cap = 3;
	char *buf, *o;

	for (size_t i = 0; i < n; i++) {
		size_t j = i;

		cap += 6 * (strlen(l[i].key) + strlen(l[i].value ?: "")) + 6;
		for (; j > 0 && strcmp(l[idx[j - 1]].key, l[i].key) > 0; j--)
			idx[j] = idx[j - 1];
		idx[j] = i;
	}
	buf = malloc(cap);
	if (!buf)
		return NULL;
	o = buf;
	*o++ = '{';
	for (size_t i = 0; i < n; i++) {
		if (i)
			*o++ = ',';
		o = put_json_str(o, l[idx[i]].key);
		*o++ = ':';
		o = put_json_str(o, l[idx[i]].value ?: "");
	}
	*o++ = '}';
	*o = 0;
	return buf;
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
    {"labels", COLL_COL_JSONB},
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
	int k = 0;

	memset(vals, 0, sizeof(struct coll_value) * COLL_N_COLS);
	format_rfc3339_us(r->time_ns, sc->time, sizeof(sc->time));
	sc->labels = coll_labels_json(r);
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
		return err_set(err, errlen, -EINVAL, "empty database URI");
	}
	if (has_prefix(uri, "sqlite:"))
		ops = &coll_store_sqlite_ops;
	else if (has_prefix(uri, "postgresql:") || has_prefix(uri, "postgres:"))
		ops = &coll_store_pg_ops;
	else {
		return err_set(err, errlen, -EPROTONOSUPPORT,
			       "unknown database URI scheme in '%.64s' (want sqlite:/path or "
			       "postgresql://...)",
			       uri);
	}
	r = ops->open(uri, flags, &s, err, errlen);
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
	return coll_store_insert_batch_pre(s, items, n, NULL);
}

int coll_store_insert_batch_pre(struct coll_store *s, struct coll_item *items, size_t n,
				const struct coll_deltas *pre)
{
	if (n == 0)
		return 0;
	return LOCKED(s, s->ops->insert_batch(s, items, n, pre));
}

int coll_store_query(struct coll_store *s, const struct coll_query *q, coll_row_fn fn, void *ud)
{
	return LOCKED(s, s->ops->query(s, q, fn, ud));
}

int coll_store_rollup_query(struct coll_store *s, enum coll_rollup_table t, const char *from,
			    const char *to, coll_rollup_fn fn, void *ud)
{
	return coll_store_rollup_query_sums(s, t, from, to, COLL_SUMS_ALL, fn, ud);
}

int coll_store_rollup_query_sums(struct coll_store *s, enum coll_rollup_table t, const char *from,
				 const char *to, uint32_t sums, coll_rollup_fn fn, void *ud)
{
	if ((unsigned)t >= _COLL_ROLLUP_MAX || t == COLL_ROLLUP_OPEN)
		return -EINVAL;
	return LOCKED(s, s->ops->rollup_query(s, t, from, to, sums & COLL_SUMS_ALL, fn, ud));
}

int coll_store_open_query(struct coll_store *s, coll_open_fn fn, void *ud)
{
	return LOCKED(s, s->ops->open_query(s, fn, ud));
}

int coll_store_text_query(struct coll_store *s, const char *sql, int n, const char *const *params,
			  coll_text_fn fn, void *ud)
{
	return LOCKED(s, s->ops->text_query(s, sql, n, params, fn, ud));
}

struct cap_q {
	coll_node_cap_fn fn;
	void *ud;
};

static int cap_q_row(const char *const *c, int n, void *ud)
{
	const struct cap_q *q = ud;
	struct coll_node_cap_row row;

	if (n != 10)
		return -EPROTO;
	row = (struct coll_node_cap_row){
	    .bucket = c[0] ? c[0] : "",
	    .node = c[1] ? c[1] : "",
	    .label_value = c[2] ? c[2] : "",
	    .cpu_cap = c[3] ? strtod(c[3], NULL) : 0,
	    .mem_cap = c[4] ? strtod(c[4], NULL) : 0,
	    .gpu_cap = c[5] ? strtod(c[5], NULL) : 0,
	    .units = c[6] ? strtoll(c[6], NULL, 10) : 0,
	    .tasks = c[7] ? strtod(c[7], NULL) : 0,
	    .wall_s = c[8] ? strtod(c[8], NULL) : 0,
	    .cpu_s = c[9] ? strtod(c[9], NULL) : 0,
	};
	return q->fn(&row, q->ud);
}

int coll_store_node_cap_query(struct coll_store *s, bool month, const char *from, const char *to,
			      coll_node_cap_fn fn, void *ud)
{
	const char *params[] = {from, to};
	struct cap_q q = {.fn = fn, .ud = ud};
	char sql[512];

	snprintf(sql, sizeof(sql),
		 "SELECT bucket, %s, label_value, cpu_cap, mem_cap, gpu_cap, units, tasks, wall_s,"
		 " cpu_s FROM %s WHERE (?1 IS NULL OR bucket >= ?1) AND (?2 IS NULL OR bucket < ?2)"
		 " AND units > 0",
		 month ? "node" : "''", month ? "rollup_node_cap_month" : "rollup_node_cap_day");
	return coll_store_text_query(s, sql, 2, params, cap_q_row, &q);
}

struct energy_q {
	coll_node_energy_fn fn;
	void *ud;
};

static int energy_q_row(const char *const *c, int n, void *ud)
{
	const struct energy_q *q = ud;
	struct coll_node_energy_row row;

	if (n != 5)
		return -EPROTO;
	row = (struct coll_node_energy_row){
	    .bucket = c[0] ? c[0] : "",
	    .rows = c[1] ? strtoll(c[1], NULL, 10) : 0,
	    .mj = {c[2] ? strtoll(c[2], NULL, 10) : 0, c[3] ? strtoll(c[3], NULL, 10) : 0,
		   c[4] ? strtoll(c[4], NULL, 10) : 0},
	};
	return q->fn(&row, q->ud);
}

int coll_store_node_energy_query(struct coll_store *s, const char *from, const char *to,
				 coll_node_energy_fn fn, void *ud)
{
	const char *params[] = {from, to};
	struct energy_q q = {.fn = fn, .ud = ud};

	return coll_store_text_query(
	    s,
	    "SELECT bucket, node_rows, cpu_mj, dram_mj, gpu_mj FROM rollup_node_energy_day"
	    " WHERE (?1 IS NULL OR bucket >= ?1) AND (?2 IS NULL OR bucket < ?2) ORDER BY bucket",
	    2, params, energy_q_row, &q);
}

struct priced_q {
	uint32_t sums;
	coll_rollup_fn fn;
	void *ud;
};

static int priced_q_row(const char *const *c, int n, void *ud)
{
	const struct priced_q *q = ud;
	struct coll_rollup_row row = {
	    .bucket = c[0] ? c[0] : "",
	    .account = "",
	    .user = "",
	    .label_key = c[1] ? c[1] : "",
	    .label_value = c[2] ? c[2] : "",
	    .job = "",
	    .node = c[3] ? c[3] : "",
	};
	int i = 4;

	for (int k = 0; k < _COLL_SUM_MAX; k++)
		if (q->sums & 1u << k) {
			if (i >= n)
				return -EPROTO;
			row.v[k] = c[i] ? strtod(c[i], NULL) : 0;
			i++;
		}
	return q->fn(&row, q->ud);
}

int coll_store_node_day_priced(struct coll_store *s, const char *from, const char *to,
			       const char *const *nodes, size_t n_nodes, uint32_t sums,
			       coll_rollup_fn fn, void *ud)
{
	_cleanup_free_ const char **params = calloc(n_nodes + 2, sizeof(*params));
	_cleanup_free_ char *sql = NULL, *day = NULL;
	struct priced_q q = {.sums = sums & COLL_SUMS_ALL, .fn = fn, .ud = ud};
	size_t len = 0;
	FILE *f;

	if (!params || n_nodes > 30000 ||
	    asprintf(&day, "%so.start_ns%s", s->ops->day_of_ns_sql[0], s->ops->day_of_ns_sql[1]) <
		0)
		return -ENOMEM;
	f = open_memstream(&sql, &len);
	if (!f)
		return -ENOMEM;
	/* a union led by the small tables (allocation rows, running tasks' nodes, the nodes
	 * named), so that the node rows are found by key, not all scanned */
	fputs("SELECT bucket, label_key, label_value, node", f);
	for (int k = 0; k < _COLL_SUM_MAX; k++)
		if (q.sums & 1u << k)
			fprintf(f, ", %s", coll_sum_name(k));
	fputs(" FROM rollup_node_day WHERE (bucket, node) IN (SELECT bucket, node FROM"
	      " rollup_node_alloc_day WHERE (?1 IS NULL OR bucket >= ?1) AND (?2 IS NULL OR"
	      " bucket < ?2)) UNION SELECT n.bucket, n.label_key, n.label_value, n.node",
	      f);
	for (int k = 0; k < _COLL_SUM_MAX; k++)
		if (q.sums & 1u << k)
			fprintf(f, ", n.%s", coll_sum_name(k));
	fprintf(f,
		" FROM (SELECT node, min(start_ns) AS start_ns FROM rollup_open GROUP BY node) o"
		" JOIN rollup_node_day n ON n.node = o.node WHERE (?1 IS NULL OR n.bucket >= ?1)"
		" AND (?2 IS NULL OR n.bucket < ?2) AND n.bucket >= %s",
		day);
	if (n_nodes) {
		fputs(" UNION SELECT bucket, label_key, label_value, node", f);
		for (int k = 0; k < _COLL_SUM_MAX; k++)
			if (q.sums & 1u << k)
				fprintf(f, ", %s", coll_sum_name(k));
		fputs(" FROM rollup_node_day WHERE (?1 IS NULL OR bucket >= ?1) AND (?2 IS NULL OR"
		      " bucket < ?2) AND node IN (",
		      f);
		for (size_t i = 0; i < n_nodes; i++)
			fprintf(f, "%s?%zu", i ? ", " : "", i + 3);
		fputc(')', f);
	}
	fputs(" ORDER BY 1, 4, 2, 3", f);
	if (fclose(f) != 0)
		return -ENOMEM;
	params[0] = from;
	params[1] = to;
	for (size_t i = 0; i < n_nodes; i++)
		params[i + 2] = nodes[i];
	return coll_store_text_query(s, sql, (int)n_nodes + 2, params, priced_q_row, &q);
}

int coll_store_rollup_batch(struct coll_store *s, struct coll_item *items, size_t n)
{
	if (n == 0)
		return 0;
	return LOCKED(s, s->ops->rollup_batch(s, items, n));
}

bool coll_store_defers_rollups(const struct coll_store *s)
{
	return s->queues_rollups && !s->no_rollups;
}

int coll_store_fold(struct coll_store *s, bool wait)
{
	if (s->no_rollups)
		return 0;
	return LOCKED(s, s->ops->fold(s, wait));
}

int coll_store_sync(struct coll_store *s)
{
	return s->ops->sync ? s->ops->sync(s) : 0;
}

bool coll_store_syncs(const struct coll_store *s)
{
	return s->defers_sync;
}

bool coll_store_single_writer(const struct coll_store *s)
{
	return s->ops->single_writer;
}

unsigned coll_store_default_connections(const struct coll_store *s)
{
	return s->ops->default_connections;
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

int coll_store_break_add(struct coll_store *s, const struct coll_audit_break *b)
{
	if (!b->record_id || !b->node || !b->kind || !b->reason || !b->detected)
		return -EINVAL;
	return LOCKED(s, s->ops->break_add(s, b));
}

int coll_store_body_get(struct coll_store *s, const char *record_id, char **ret)
{
	return LOCKED(s, s->ops->body_get(s, record_id, ret));
}

int coll_store_conflict_add(struct coll_store *s, const struct coll_conflict *c)
{
	if (!c->record_id || !c->node || !c->detected || !c->stored_body || !c->received_body ||
	    !c->received_sha256)
		return -EINVAL;
	return LOCKED(s, s->ops->conflict_add(s, c));
}

int coll_store_conflict_query(struct coll_store *s, const char *node, coll_conflict_fn fn, void *ud)
{
	if (!node)
		return -EINVAL;
	return LOCKED(s, s->ops->conflict_query(s, node, fn, ud));
}

int coll_conflict_from_text(const char *const *cols, void *sink)
{
	const struct coll_text_sink *k = sink;
	struct coll_conflict c = {
	    .record_id = cols[0],
	    .node = cols[1],
	    .detected = cols[2],
	    .stored_body = cols[3],
	    .received_body = cols[4],
	    .received_sha256 = cols[5],
	};

	return k->conflict(&c, k->userdata);
}

int coll_break_from_text(const char *const *cols, void *sink)
{
	const struct coll_text_sink *k = sink;
	struct coll_audit_break b = {
	    .record_id = cols[0],
	    .node = cols[1],
	    .kind = cols[2],
	    .reason = cols[3],
	    .detected = cols[4],
	};

	return k->brk(&b, k->userdata);
}

int coll_store_break_query(struct coll_store *s, const char *node, size_t limit, coll_break_fn fn,
			   void *ud)
{
	return LOCKED(s, s->ops->break_query(s, node, limit, fn, ud));
}

const char *coll_store_errmsg(struct coll_store *s)
{
	return s->errmsg;
}

/* ---- DDL shared by the backends ---- */

static void pk_columns(FILE *f, enum coll_rollup_table t)
{
	const struct coll_rollup_def *def = coll_rollup_def(t);

	if (t != COLL_ROLLUP_OPEN)
		fputs("bucket", f);
	for (size_t k = 0; k < def->n_keys; k++)
		fprintf(f, "%s%s", k || t != COLL_ROLLUP_OPEN ? ", " : "",
			coll_key_column(def->keys[k]));
}

char *coll_rollup_pk(enum coll_rollup_table t)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	pk_columns(f, t);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

char *coll_rollup_ddl(enum coll_rollup_table t, const char *real_type, const char *int_type)
{
	const struct coll_rollup_def *def = coll_rollup_def(t);
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	fprintf(f, "CREATE TABLE %s (", def->name);
	if (t != COLL_ROLLUP_OPEN)
		fputs("bucket TEXT NOT NULL, ", f);
	for (size_t k = 0; k < def->n_keys; k++)
		fprintf(f, "%s TEXT NOT NULL, ", coll_key_column(def->keys[k]));
	if (t == COLL_ROLLUP_OPEN)
		fprintf(f,
			"account TEXT NOT NULL, \"user\" TEXT NOT NULL, job TEXT NOT NULL,"
			" labels TEXT NOT NULL, start_ns %s NOT NULL, sample_ns %s NOT NULL,"
			" rss_bytes %s, listed_ns %s, ",
			int_type, int_type, int_type, int_type);
	for (int s = 0; s < _COLL_SUM_MAX; s++)
		fprintf(f, "%s %s NOT NULL DEFAULT 0, ", coll_sum_name(s), real_type);
	fputs("PRIMARY KEY (", f);
	pk_columns(f, t);
	fputs("));", f);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

void coll_open_touch_set(FILE *f, const char *t, const char *rss, const char *listed,
			 const char *real_type, const char *greatest)
{
	const char *wall = coll_sum_name(COLL_SUM_WALL_S);
	static const enum coll_sum req[][3] = {
	    {COLL_SUM_CPU_REQ_CORE_S, COLL_SUM_CPU_CHARGED_CORE_S, COLL_SUM_CPU_S},
	    {COLL_SUM_GPU_REQ_S, COLL_SUM_GPU_CHARGED_S, COLL_SUM_GPU_S},
	};
	char w2[160], mem[200], memreq[200];

	/* the new wall (s), the memory integral grown by rss over the time since the row's time */
	snprintf(w2, sizeof(w2), "(CAST(%s - start_ns AS %s) / 1e9)", t, real_type);
	snprintf(mem, sizeof(mem), "(%s + CAST(%s AS %s) * (CAST(%s - sample_ns AS %s) / 1e9))",
		 coll_sum_name(COLL_SUM_MEM_BYTE_S), rss, real_type, t, real_type);
	snprintf(memreq, sizeof(memreq), "(%s * %s / %s)", coll_sum_name(COLL_SUM_MEM_REQ_BYTE_S),
		 w2, wall);
	fprintf(f, " SET sample_ns = %s, %s = %s", t, wall, w2);
	for (size_t i = 0; i < ARRAY_SIZE(req); i++)
		fprintf(f, ", %s = %s * %s / %s, %s = %s(%s * %s / %s, %s)",
			coll_sum_name(req[i][0]), coll_sum_name(req[i][0]), w2, wall,
			coll_sum_name(req[i][1]), greatest, coll_sum_name(req[i][0]), w2, wall,
			coll_sum_name(req[i][2]));
	fprintf(f, ", %s = %s, %s = %s, %s = %s(%s, %s)", coll_sum_name(COLL_SUM_MEM_BYTE_S), mem,
		coll_sum_name(COLL_SUM_MEM_REQ_BYTE_S), memreq,
		coll_sum_name(COLL_SUM_MEM_CHARGED_BYTE_S), greatest, memreq, mem);
	/* kept for the node's later tasks_alive statements (a task.sample clears both) */
	fprintf(f, ", rss_bytes = %s, listed_ns = %s", rss, listed);
}

int coll_alive_check(const struct acct_node_alive *alive, const char *const *ids, size_t n)
{
	uint64_t digest = 0;

	if (n > alive->n)
		return -ESTALE;
	if (n < alive->n) /* tasks the statement names that ended or have a newer sample */
		return 0;
	for (size_t i = 0; i < n; i++)
		digest = acct_alive_digest(digest, ids[i]);
	return digest == alive->digest ? 0 : -ESTALE;
}

void coll_open_touch_where(FILE *f, const char *t, const char *base)
{
	/* the row holds the task's sample at base or a touch of it, older than t; a row whose
	 * sample had no wall time cannot tell its requests: left as it is */
	fprintf(f, " WHERE sample_ns >= %s AND sample_ns < %s AND %s > 0", base, t,
		coll_sum_name(COLL_SUM_WALL_S));
}

int coll_query_sql(const struct coll_sql_dialect *d, const struct coll_query *q, char **ret_sql,
		   struct coll_sql_param params[COLL_QUERY_PARAMS_MAX], int *ret_n)
{
	const struct {
		const char *col, *val;
	} eq[] = {
	    {"type", q->type}, {"node", q->node},     {"task_id", q->task_id},
	    {"job", q->job},   {"\"user\"", q->user}, {d->hash_expr, q->hash},
	};
	char *sql = NULL;
	size_t len = 0;
	int n = 0;
	FILE *f = open_memstream(&sql, &len);

	if (!f)
		return -ENOMEM;
	fputs(d->select, f);
	for (size_t k = 0; k < ARRAY_SIZE(eq); k++)
		if (eq[k].val) {
			params[n++] = (struct coll_sql_param){.s = eq[k].val};
			fprintf(f, " AND %s = %c%d", eq[k].col, d->param, n);
		}
	if (q->audit == COLL_QUERY_AUDIT_ONLY || q->hash)
		fputs(" AND substr(type, 1, 6) = 'audit.'", f);
	else if (q->audit == COLL_QUERY_NO_AUDIT)
		fputs(" AND substr(type, 1, 6) <> 'audit.'", f);
	if (q->hash && d->hash_guard)
		fprintf(f, " AND %s", d->hash_guard);
	if (q->from_ns) {
		params[n++] = (struct coll_sql_param){.i = coll_clamp_i64(q->from_ns)};
		fprintf(f, " AND time_ns >= %c%d%s", d->param, n, d->int_cast);
	}
	if (q->to_ns) {
		params[n++] = (struct coll_sql_param){.i = coll_clamp_i64(q->to_ns)};
		fprintf(f, " AND time_ns < %c%d%s", d->param, n, d->int_cast);
	}
	if (q->after_id) {
		params[n++] = (struct coll_sql_param){.i = coll_clamp_i64(q->after_time_ns)};
		params[n++] = (struct coll_sql_param){.s = q->after_id};
		if (d->row_values)
			fprintf(f, " AND (time_ns, record_id) > (%c%d%s, %c%d%s)", d->param, n - 1,
				d->int_cast, d->param, n, d->text_cast);
		else
			fprintf(f, " AND (time_ns > %c%d OR (time_ns = %c%d AND record_id > %c%d))",
				d->param, n - 1, d->param, n - 1, d->param, n);
	}
	fputs(" ORDER BY time_ns, record_id", f);
	if (q->limit) {
		params[n++] = (struct coll_sql_param){.i = coll_clamp_i64(q->limit)};
		fprintf(f, " LIMIT %c%d%s", d->param, n, d->int_cast);
	}
	if (fclose(f) != 0) {
		free(sql);
		return -ENOMEM;
	}
	*ret_sql = sql;
	*ret_n = n;
	return 0;
}

/* v2: rollups spread over the hours a task ran, kill counts, job/node and open tasks. The v1
 * rollups cannot be converted (they lack the spread): they are rebuilt from the stored
 * records. v3: rollup_job_label_day (labels per job and node) and rollup_job_month (job rows
 * per month, for month reports by job or node); filled by the v6 rebuild. */
static int migrate_rollup_tables(const struct coll_migration *m, int version)
{
	static const enum coll_rollup_table v3[] = {COLL_ROLLUP_JOB_LABEL_DAY,
						    COLL_ROLLUP_JOB_MONTH};
	int r;

	if (version == 1) {
		r = m->exec(m->db, "DROP TABLE rollup_hour; DROP TABLE rollup_day;"
				   " DROP TABLE rollup_label_day;");
		if (r < 0)
			return r;
	}
	for (int i = 0; i < (version == 2 ? (int)ARRAY_SIZE(v3) : _COLL_ROLLUP_MAX); i++) {
		_cleanup_free_ char *ddl = coll_rollup_ddl(
		    version == 2 ? v3[i] : (enum coll_rollup_table)i, m->real_type, m->int_type);

		if (!ddl)
			return -ENOMEM;
		r = m->exec(m->db, ddl);
		if (r < 0)
			return r;
	}
	return version == 1 ? m->rebuild_rollups(m->db) : 0;
}

/* v6: no_request_tasks, a count of the tasks that requested no CPUs or no memory (the
 * reports' tasks_without_request); v8: carried_tasks, the tasks that ran on into the next day
 * (the reports' tasks_active); v11: the energy sums. Older rollups lack them: every rollup is
 * rebuilt from the stored records; the queued deltas are dropped (the rebuild covers their
 * records). */
static int migrate_added_sums(const struct coll_migration *m)
{
	static const enum coll_sum added[] = {
	    COLL_SUM_NO_REQUEST_TASKS, COLL_SUM_CARRIED_TASKS, COLL_SUM_ENERGY_CPU_J,
	    COLL_SUM_ENERGY_DRAM_J,    COLL_SUM_ENERGY_GPU_J,  COLL_SUM_ENERGY_UNMEASURED_TASKS};
	int r;

	for (int t = 0; t < _COLL_ROLLUP_MAX; t++) {
		const char *name = coll_rollup_table_name(t);
		char sql[256];

		for (size_t a = 0; a < ARRAY_SIZE(added); a++) {
			const char *col = coll_sum_name(added[a]);
			bool have = false;

			if (m->has_column) {
				r = m->has_column(m->db, name, col, &have);
				if (r < 0)
					return r;
			}
			if (have)
				continue;
			snprintf(sql, sizeof(sql),
				 "ALTER TABLE %s ADD COLUMN %s%s %s NOT NULL DEFAULT 0", name,
				 m->has_column ? "" : "IF NOT EXISTS ", col, m->real_type);
			r = m->exec(m->db, sql);
			if (r < 0)
				return r;
		}
		snprintf(sql, sizeof(sql), "DELETE FROM %s", name);
		r = m->exec(m->db, sql);
		if (r < 0)
			return r;
	}
	r = m->exec(m->db, "DELETE FROM rollup_pending");
	return r < 0 ? r : m->rebuild_rollups(m->db);
}

/* v10: rollup_node_alloc_day (the job_day rows per node and day). Queued deltas of an older
 * collector have no rows for it, so it is not filled from rollup_job_day: the queue is
 * dropped and every rollup rebuilt from the stored records (migrate_added_sums, v11). */
static int migrate_node_alloc(const struct coll_migration *m, int version)
{
	_cleanup_free_ char *ddl =
	    coll_rollup_ddl(COLL_ROLLUP_NODE_ALLOC_DAY, m->real_type, m->int_type);
	_cleanup_free_ char *sql = NULL;

	/* IF NOT EXISTS: a database set back to an older version by hand may keep it */
	if (!ddl ||
	    asprintf(&sql, "CREATE TABLE IF NOT EXISTS %s", ddl + strlen("CREATE TABLE ")) < 0)
		return -ENOMEM;
	/* filled by the rebuild of every rollup of the v11 step (migrate_added_sums) */
	(void)version;
	return m->exec(m->db, sql);
}

/* ---- counted capacity keys (schema v12) ---- */

/* rollup_node_cap_day: per day and class; rollup_node_cap_month: per month, node and class.
 * Both keyed further by one node-day's capacity, so that every node-day of a key has the
 * same capacity and therefore the same price per component: a capacity report prices a key
 * once and multiplies its cents by units (docs/design.md "Node records and idle cost"). */
static const struct {
	const char *name;
	bool node;
} cap_tables[] = {{"rollup_node_cap_day", false}, {"rollup_node_cap_month", true}};

static char *cap_table_ddl(size_t i, const char *real_type, const char *int_type)
{
	char *sql = NULL;

	if (asprintf(
		&sql,
		"CREATE TABLE IF NOT EXISTS %s (bucket TEXT NOT NULL, %slabel_value TEXT NOT NULL,"
		" cpu_cap %s NOT NULL, mem_cap %s NOT NULL, gpu_cap %s NOT NULL,"
		" units %s NOT NULL, tasks %s NOT NULL, wall_s %s NOT NULL, cpu_s %s NOT NULL,"
		" PRIMARY KEY (bucket, %slabel_value, cpu_cap, mem_cap, gpu_cap))",
		cap_tables[i].name, cap_tables[i].node ? "node TEXT NOT NULL, " : "", real_type,
		real_type, real_type, int_type, real_type, real_type, real_type,
		cap_tables[i].node ? "node, " : "") < 0)
		return NULL;
	return sql;
}

/* One node row's energy column x (J, REAL) as integer mJ: the unit of rollup_node_energy_day */
#define NODE_MJ(x) "CAST(round(" x " * 1000) AS BIGINT)"

char *coll_node_cap_trigger_sql(bool add, const char *rec)
{
	char mj[3][96];
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f)
		return NULL;
	for (size_t i = 0; i < ARRAY_SIZE(cap_tables); i++) {
		const char *t = cap_tables[i].name;
		const bool node = cap_tables[i].node;
		char bucket[64], key[512];

		snprintf(bucket, sizeof(bucket), node ? "substr(%s.bucket, 1, 7)" : "%s.bucket",
			 rec);
		snprintf(key, sizeof(key),
			 "bucket = %s%s%s%s AND label_value = %s.label_value AND cpu_cap = "
			 "%s.cpu_charged_core_s AND mem_cap = %s.mem_charged_byte_s AND gpu_cap = "
			 "%s.gpu_charged_s",
			 bucket, node ? " AND node = " : "", node ? rec : "", node ? ".node" : "",
			 rec, rec, rec, rec);
		if (add)
			fprintf(
			    f,
			    "INSERT INTO %s (bucket, %slabel_value, cpu_cap, mem_cap, gpu_cap, "
			    "units,"
			    " tasks, wall_s, cpu_s) VALUES (%s, %s%s%s.label_value,"
			    " %s.cpu_charged_core_s, %s.mem_charged_byte_s, %s.gpu_charged_s, 1,"
			    " %s.tasks, %s.wall_s, %s.cpu_s) ON CONFLICT (bucket, %slabel_value,"
			    " cpu_cap, mem_cap, gpu_cap) DO UPDATE SET units = %s.units + 1,"
			    " tasks = %s.tasks + excluded.tasks, wall_s = %s.wall_s +"
			    " excluded.wall_s, cpu_s = %s.cpu_s + excluded.cpu_s;",
			    t, node ? "node, " : "", bucket, node ? rec : "", node ? ".node, " : "",
			    rec, rec, rec, rec, rec, rec, rec, node ? "node, " : "", t, t, t, t);
		else
			fprintf(f,
				"UPDATE %s SET units = units - 1, tasks = tasks - %s.tasks,"
				" wall_s = wall_s - %s.wall_s, cpu_s = cpu_s - %s.cpu_s WHERE %s;"
				"DELETE FROM %s WHERE %s AND units <= 0;",
				t, rec, rec, rec, key, t, key);
	}
	/* v13: the day's unattributed energy, each row's rounded to integer mJ (exact sums) */
	snprintf(mj[0], sizeof(mj[0]), NODE_MJ("%s.energy_cpu_j"), rec);
	snprintf(mj[1], sizeof(mj[1]), NODE_MJ("%s.energy_dram_j"), rec);
	snprintf(mj[2], sizeof(mj[2]), NODE_MJ("%s.gpu_s"), rec);
	if (add)
		fprintf(f,
			"INSERT INTO rollup_node_energy_day (bucket, node_rows, cpu_mj, dram_mj,"
			" gpu_mj) VALUES (%s.bucket, 1, %s, %s, %s) ON CONFLICT (bucket) DO UPDATE"
			" SET node_rows = rollup_node_energy_day.node_rows + 1,"
			" cpu_mj = rollup_node_energy_day.cpu_mj + excluded.cpu_mj,"
			" dram_mj = rollup_node_energy_day.dram_mj + excluded.dram_mj,"
			" gpu_mj = rollup_node_energy_day.gpu_mj + excluded.gpu_mj;",
			rec, mj[0], mj[1], mj[2]);
	else
		fprintf(f,
			"UPDATE rollup_node_energy_day SET node_rows = node_rows - 1,"
			" cpu_mj = cpu_mj - %s, dram_mj = dram_mj - %s, gpu_mj = gpu_mj - %s"
			" WHERE bucket = %s.bucket;"
			"DELETE FROM rollup_node_energy_day WHERE bucket = %s.bucket AND"
			" node_rows <= 0;",
			mj[0], mj[1], mj[2], rec, rec);
	if (fclose(f) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

/* v13: the nodes' unattributed energy per day, filled from rollup_node_day (the triggers,
 * made or replaced after it, keep it from then on). */
static int migrate_node_energy(const struct coll_migration *m)
{
	/* NODE_MJ of each column, as the triggers sum them */
	static const char fill[] =
	    "DELETE FROM rollup_node_energy_day;"
	    "INSERT INTO rollup_node_energy_day (bucket, node_rows, cpu_mj, dram_mj, gpu_mj)"
	    " SELECT bucket, count(*), sum(CAST(round(energy_cpu_j * 1000) AS BIGINT)),"
	    " sum(CAST(round(energy_dram_j * 1000) AS BIGINT)),"
	    " sum(CAST(round(gpu_s * 1000) AS BIGINT)) FROM rollup_node_day GROUP BY bucket";
	_cleanup_free_ char *ddl = NULL;
	int r;

	if (asprintf(&ddl,
		     "CREATE TABLE IF NOT EXISTS rollup_node_energy_day (bucket TEXT PRIMARY KEY,"
		     " node_rows %s NOT NULL, cpu_mj %s NOT NULL, dram_mj %s NOT NULL,"
		     " gpu_mj %s NOT NULL)",
		     m->int_type, m->int_type, m->int_type, m->int_type) < 0)
		return -ENOMEM;
	r = m->exec(m->db, ddl);
	return r < 0 ? r : m->exec(m->db, fill);
}

/* v12: the counted capacity keys, filled from rollup_node_day, then its triggers. */
static int migrate_node_cap(const struct coll_migration *m)
{
	int r = 0;

	for (size_t i = 0; i < ARRAY_SIZE(cap_tables) && r >= 0; i++) {
		_cleanup_free_ char *ddl = cap_table_ddl(i, m->real_type, m->int_type);
		_cleanup_free_ char *fill = NULL;
		const bool node = cap_tables[i].node;

		if (!ddl ||
		    asprintf(
			&fill,
			"DELETE FROM %s; INSERT INTO %s (bucket, %slabel_value, cpu_cap, mem_cap,"
			" gpu_cap, units, tasks, wall_s, cpu_s) SELECT %s, %slabel_value,"
			" cpu_charged_core_s, mem_charged_byte_s, gpu_charged_s, count(*),"
			" sum(tasks), sum(wall_s), sum(cpu_s) FROM rollup_node_day GROUP BY %s,"
			" %slabel_value, cpu_charged_core_s, mem_charged_byte_s, gpu_charged_s",
			cap_tables[i].name, cap_tables[i].name, node ? "node, " : "",
			node ? "substr(bucket, 1, 7)" : "bucket", node ? "node, " : "",
			node ? "substr(bucket, 1, 7)" : "bucket", node ? "node, " : "") < 0)
			return -ENOMEM;
		r = m->exec(m->db, ddl);
		if (r >= 0)
			r = m->exec(m->db, fill);
	}
	return r < 0 ? r : m->node_cap_triggers(m->db);
}

/* v15: m->rollup_room applied to every table written by upserts or by the triggers: the
 * rollups, the capacity keys and the energy per day (the pages written from then on). */
static int migrate_rollup_room(const struct coll_migration *m)
{
	const char *extra[ARRAY_SIZE(cap_tables) + 1] = {"rollup_node_energy_day"};
	char sql[160];
	int r = 0;

	for (size_t i = 0; i < ARRAY_SIZE(cap_tables); i++)
		extra[i + 1] = cap_tables[i].name;
	for (int t = 0; t < _COLL_ROLLUP_MAX && r >= 0; t++) {
		snprintf(sql, sizeof(sql), "ALTER TABLE %s %s", coll_rollup_def(t)->name,
			 m->rollup_room);
		r = m->exec(m->db, sql);
	}
	for (size_t i = 0; i < ARRAY_SIZE(extra) && r >= 0; i++) {
		snprintf(sql, sizeof(sql), "ALTER TABLE %s %s", extra[i], m->rollup_room);
		r = m->exec(m->db, sql);
	}
	return r;
}

int coll_migrate(const struct coll_migration *m)
{
	int version = 0, r;

	r = m->exec(m->db, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)");
	if (r >= 0)
		r = m->version(m->db, &version);
	if (r < 0)
		return r;
	if (version > COLL_SCHEMA_VERSION)
		return err_set(m->errmsg, m->errlen, -EPROTO,
			       "database schema version %d is newer than this collector (%d)",
			       version, COLL_SCHEMA_VERSION);
	if (version < 1)
		r = m->exec(m->db, m->records_ddl);
	if (r >= 0 && version < 3)
		r = migrate_rollup_tables(m, version);
	/* v4: rollup_hour goes. No report read it (they work in days, whose shares are summed
	 * from the hours in memory) and it was three quarters of the rollup rows written. */
	if (r >= 0 && version < 4)
		r = m->exec(m->db, "DROP TABLE IF EXISTS rollup_hour");
	/* v4 (PostgreSQL), v5 (SQLite): ingest queues its bucketed rollup deltas for a fold */
	if (r >= 0 && version < 5)
		r = m->exec(m->db, m->pending_ddl);
	/* v9: rollup_node_day (node.sample records, none stored before) */
	if (r >= 0 && version >= 2 && version < 9) {
		_cleanup_free_ char *ddl =
		    coll_rollup_ddl(COLL_ROLLUP_NODE_DAY, m->real_type, m->int_type);
		_cleanup_free_ char *sql = NULL;

		/* IF NOT EXISTS: a database set back to an older version by hand may keep it */
		if (ddl && asprintf(&sql, "CREATE TABLE IF NOT EXISTS %s",
				    ddl + strlen("CREATE TABLE ")) < 0)
			sql = NULL;
		r = sql ? m->exec(m->db, sql) : -ENOMEM;
	}
	if (r >= 0 && version >= 2 && version < 10)
		r = migrate_node_alloc(m, version);
	/* v11 (and v6, v8 before it): the added sums, every rollup rebuilt */
	if (r >= 0 && version >= 2 && version < 11)
		r = migrate_added_sums(m);
	/* v13: the unattributed energy per day, before the triggers that keep it are made (v12)
	 * or replaced (a database of version 12) */
	if (r >= 0 && version < 13)
		r = migrate_node_energy(m);
	/* v12: the counted capacity keys (every database: the rollup tables exist by now) */
	if (r >= 0 && version < 12)
		r = migrate_node_cap(m);
	else if (r >= 0 && version < 13)
		r = m->node_cap_triggers(m->db);
	/* v7: a record id received again with another body is kept aside with both bodies
	 * (docs/pipeline.md "Record ids and conflicts") */
	if (r >= 0 && version < 7)
		r = m->exec(m->db, m->conflicts_ddl);
	/* v14: rollup_open keeps the RSS of a task listed unchanged and the time of that
	 * listing (tasks_alive statements) */
	for (int i = 0; r >= 0 && version < 14 && i < 2; i++) {
		const char *col = i ? "listed_ns" : "rss_bytes";
		bool have = false;

		if (m->has_column)
			r = m->has_column(m->db, "rollup_open", col, &have);
		if (r >= 0 && !have) {
			char sql[128];

			snprintf(sql, sizeof(sql), "ALTER TABLE rollup_open ADD COLUMN %s%s %s",
				 m->has_column ? "" : "IF NOT EXISTS ", col, m->int_type);
			r = m->exec(m->db, sql);
		}
	}
	/* v15: room on the rollup tables' pages for their updated rows */
	if (r >= 0 && version < 15 && m->rollup_room)
		r = migrate_rollup_room(m);
	if (r >= 0 && version < COLL_SCHEMA_VERSION) {
		char sql[96];

		snprintf(sql, sizeof(sql),
			 "DELETE FROM schema_version; INSERT INTO schema_version VALUES (%d)",
			 COLL_SCHEMA_VERSION);
		r = m->exec(m->db, sql);
	}
	return r < 0 ? r : m->exec(m->db, m->audit_ddl);
}
