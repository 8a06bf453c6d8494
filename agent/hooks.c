/* SPDX-License-Identifier: MIT */
/*
 * Optional services of the agent, driven by the main loop: the accounting spool and its
 * uploader (when a collector URL is configured), and the Prometheus /metrics endpoint (when
 * metrics.listen is set). libmicrohttpd runs without threads here: its epoll fd joins the
 * agent's loop, so the agent stays single-threaded.
 */
#include "agent/agent.h"
#include "agent/gpu_glue.h"
#include "agent/hooks.h"
#include "corral_version.h"
#include "agent/loop.h"
#include "agent/log.h"
#include "agent/task.h"
#include "agent/usage.h"
#include "agent/state.h"
#include "agent/emit.h"
#include "accounting/spool.h"
#include "accounting/uploader.h"
#include "bpf/audit.h"
#include "bpf/meter.h"
#include "common/macro.h"
#include "accounting/syncer.h"
#include "common/fileio.h"
#include "common/parse.h"
#include "isolation/cgroup.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/epoll.h>

struct buf {
	char *p;
	size_t len, cap;
};

_printf_(2, 3) static void bprintf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	for (;;) {
		size_t room = b->cap - b->len;

		va_start(ap, fmt);
		n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if (b->p && (size_t)n < room) {
			b->len += (size_t)n;
			return;
		}
		{
			size_t nc = MAX(b->cap * 2, b->len + (size_t)n + 4096);
			char *np = realloc(b->p, nc);

			if (!np)
				return;
			b->p = np;
			b->cap = nc;
		}
	}
}

/* Label values escaped for the Prometheus text format. */
static void esc(const char *s, char *out, size_t len)
{
	size_t o = 0;

	for (; s && *s && o + 3 < len; s++) {
		if (*s == '\\' || *s == '"') {
			out[o++] = '\\';
			out[o++] = *s;
		} else if (*s == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else
			out[o++] = *s;
	}
	out[o] = 0;
}

#define G(name, help, val)                                                                         \
	bprintf(b, "# HELP " name " " help "\n# TYPE " name " gauge\n" name " %llu\n",             \
		(unsigned long long)(val))
#define C(name, help, val)                                                                         \
	bprintf(b, "# HELP " name " " help "\n# TYPE " name " counter\n" name " %llu\n",           \
		(unsigned long long)(val))

/* The agent's own gauges and counters: tasks, control, GPU, BPF metering. */
static void metrics_agent(struct buf *b, struct agent *a)
{
	struct gpu_glue_stats gs;

	G("corral_tasks_live", "Tasks running now.", a->n_live);
	G("corral_tasks_max", "Configured max_tasks.", a->cfg.max_tasks);
	C("corral_tasks_started_total", "Tasks started.", a->stats.tasks_started);
	C("corral_tasks_ended_total", "Tasks whose end record was produced.", a->stats.tasks_ended);
	C("corral_tasks_launch_failed_total", "Tasks that failed to start.",
	  a->stats.launch_failed);
	C("corral_cgroup_pool_hits_total",
	  "Launches that took a cgroup made ahead of time (agent/cgpool.c).",
	  a->stats.cg_pool_hits);
	C("corral_tasks_refused_total", "Launch requests refused (limits, authorization).",
	  a->stats.refused);
	C("corral_tasks_adopted_total", "Tasks re-adopted after an agent restart.",
	  a->stats.tasks_adopted);
	C("corral_tasks_lost_total", "Tasks whose outcome could not be determined.",
	  a->stats.tasks_lost);
	C("corral_records_spooled_total", "Records appended to the spool.",
	  a->stats.records_spooled);
	C("corral_spool_refused_total", "Records the spool refused (full or failing).",
	  a->stats.records_spool_refused);
	C("corral_audit_summarized_total",
	  "Audit events past their task's record budget, counted in audit.summary records.",
	  a->stats.audit_summarized);
	C("corral_audit_summaries_total", "audit.summary records emitted.",
	  a->stats.audit_summaries);
	C("corral_audit_shed_total",
	  "Audit records shed because the spool was full up to its billing reserve (declared "
	  "in audit.gap records).",
	  a->stats.audit_shed);
	C("corral_audit_gaps_total", "audit.gap records emitted.", a->stats.audit_gaps);
	G("corral_agent_degraded",
	  "1 while the state filesystem is full (no new task; see corralctl status).",
	  a->degraded ? 1 : 0);
	G("corral_control_connections", "Control socket connections open.", a->n_conns);
	C("corral_control_connections_refused_total",
	  "Control connections refused (per-user limit, slots kept for root and the agent's "
	  "group).",
	  a->stats.conns_refused);
	C("corral_control_connections_closed_total",
	  "Control connections the agent closed (idle, request or send timeout, replies unread).",
	  a->stats.conns_timed_out);
	G("corral_bpf_loaded", "1 if the BPF metering programs are attached.", a->meter ? 1 : 0);
	if (gpu_glue_stats(a, &gs)) {
		G("corral_gpus", "GPUs found via NVML.", gs.gpus);
		G("corral_gpus_allocated", "GPUs allocated to running tasks.", gs.gpus_allocated);
		G("corral_gpu_api_uprobes",
		  "1 if the libcuda uprobes (API telemetry, the "
		  "synchronous --gpu-memory limit) are attached.",
		  gs.api_uprobes);
		C("corral_gpu_device_program_loads_total",
		  "GPU device-policy BPF programs loaded (one per distinct policy while cached).",
		  gs.device_program_loads);
		G("corral_gpu_device_programs_cached",
		  "Loaded GPU device-policy programs kept for the next tasks.",
		  gs.device_programs_cached);
	}
	if (a->meter) {
		C("corral_bpf_ringbuf_drops_total", "Events lost because the ring buffer was full.",
		  meter_ringbuf_drops(a->meter));
		C("corral_bpf_map_full_total",
		  "Processes, threads or address spaces not tracked because a BPF map was full.",
		  meter_map_full(a->meter));
		G("corral_bpf_tasks_tracked", "Tasks tracked by the BPF programs.",
		  meter_tasks_tracked(a->meter));
		C("corral_bpf_exit_tail_lost_total",
		  "Threads whose CPU and IO after their exit tracepoint were not counted "
		  "(accounting at exit, the map of exited threads full; their tasks' CPU then "
		  "comes from the cgroup).",
		  meter_tail_lost(a->meter));
		C("corral_bpf_exit_drains_total",
		  "Drains of the map of exited threads (accounting at exit).",
		  meter_drains(a->meter));
		C("corral_bpf_live_walks_total",
		  "Walks of the node's threads made by live reads (accounting at exit).",
		  meter_walks(a->meter));
		C("corral_bpf_live_walks_skipped_total",
		  "Live reads that skipped the walk: no task's CPU time moved since the last one "
		  "(accounting at exit; corral_bpf_live_walk_source_info says by which counter).",
		  meter_walks_skipped(a->meter));
		bprintf(
		    b,
		    "# HELP corral_bpf_live_walk_source_info The counter of the tasks' CPU time "
		    "a live read compares to skip its walk, and its resolution in nanoseconds "
		    "(source \"none\": every live read walks).\n"
		    "# TYPE corral_bpf_live_walk_source_info gauge\n"
		    "corral_bpf_live_walk_source_info{source=\"%s\",resolution_ns=\"%llu\"} 1\n",
		    a->cpu_source ? a->cpu_source : "none",
		    (unsigned long long)(a->cpu_source ? a->cpu_source_res_ns : 0));
	}
}

/* The BPF map sweeps, the spool and the uploader. */
static void metrics_pipeline(struct buf *b, struct agent *a)
{
	struct spool_stats ss = {0};
	struct upl_stats us = {0};

	bprintf(b,
		"# HELP corral_node_sample_checks_total Change checks of the running tasks at "
		"node.sample records, by kind: listing (every task listed, an anchor), visits (a "
		"statement that looked only at the tasks that may have changed), every_task (a "
		"statement that asked every task).\n"
		"# TYPE corral_node_sample_checks_total counter\n"
		"corral_node_sample_checks_total{kind=\"listing\"} %llu\n"
		"corral_node_sample_checks_total{kind=\"visits\"} %llu\n"
		"corral_node_sample_checks_total{kind=\"every_task\"} %llu\n",
		(unsigned long long)a->checks_listing, (unsigned long long)a->checks_visits,
		(unsigned long long)a->checks_every_task);
	if (a->meter || a->audit) {
		bprintf(b, "# HELP corral_bpf_map_sweeps_total Whole BPF map walks at a task's end "
			   "(needed only when the programs left entries of the task behind).\n"
			   "# TYPE corral_bpf_map_sweeps_total counter\n");
		if (a->meter)
			bprintf(b, "corral_bpf_map_sweeps_total{programs=\"metering\"} %llu\n",
				(unsigned long long)meter_sweeps(a->meter));
		if (a->audit)
			bprintf(b, "corral_bpf_map_sweeps_total{programs=\"audit\"} %llu\n",
				(unsigned long long)audit_sweeps(a->audit));
	}
	if (a->spool) {
		spool_get_stats(a->spool, &ss);
		G("corral_spool_pending_records", "Records waiting for the collector's ack.",
		  ss.entries_pending);
		G("corral_spool_bytes", "Bytes of spool on disk.", ss.bytes_on_disk);
		G("corral_spool_max_bytes", "The spool's bound ([spool] max_bytes).",
		  a->cfg.spool_max_bytes);
		C("corral_spool_corrupt_frames_total",
		  "Damaged spool regions found over the spool's life (each logged once, kept in "
		  "spool/damaged/; the count is kept in the spool's state file).",
		  ss.corrupt_frames);
		C("corral_spool_torn_bytes_truncated_total", "Torn tail bytes truncated at open.",
		  ss.torn_bytes_truncated);
		C("corral_spool_damaged_copies_dropped_total",
		  "Copies in spool/damaged/ emptied to keep it under [spool] damaged_max_bytes.",
		  ss.damaged_dropped);
		C("corral_spool_acks_not_durable_total",
		  "Acks that found no room at all on the state filesystem (the acked segments "
		  "were removed first; a restart before the next durable ack resends).",
		  ss.acks_not_durable);
	}
	if (a->upl) {
		upl_get_stats(a->upl, &us);
		C("corral_upload_batches_total", "Batches committed by the collector.",
		  us.batches_sent);
		C("corral_upload_records_acked_total", "Records acked.", us.records_acked);
		C("corral_upload_duplicates_total", "Records the collector already had.",
		  us.duplicates);
		C("corral_upload_dead_lettered_total", "Records rejected and set aside.",
		  us.rejected);
		C("corral_upload_conflicts_total",
		  "Records whose id the collector holds with another body (set aside).",
		  us.conflicts);
		C("corral_upload_retries_total", "Failed attempts followed by a backoff.",
		  us.retries);
		G("corral_upload_last_http_status", "HTTP status of the last answer (0: none).",
		  (uint64_t)us.last_http_status);
		bprintf(
		    b,
		    "# HELP corral_upload_backoff_seconds Current backoff delay before the next "
		    "attempt (0: none).\n# TYPE corral_upload_backoff_seconds gauge\n"
		    "corral_upload_backoff_seconds %.3f\n",
		    (double)us.backoff_ms / 1000.0);
		bprintf(b,
			"# HELP corral_upload_last_success_timestamp_seconds When the collector "
			"last committed a batch (Unix time; 0: not since the start).\n"
			"# TYPE corral_upload_last_success_timestamp_seconds gauge\n"
			"corral_upload_last_success_timestamp_seconds %.3f\n",
			(double)us.last_success_ns / 1e9);
		bprintf(b,
			"# HELP corral_upload_last_error_timestamp_seconds When an upload last "
			"failed (Unix time; 0: not since the start).\n"
			"# TYPE corral_upload_last_error_timestamp_seconds gauge\n"
			"corral_upload_last_error_timestamp_seconds %.3f\n",
			(double)us.last_error_ns / 1e9);
		G("corral_upload_failing", "1 while uploads fail (records stay in the spool).",
		  us.last_error[0] != 0);
		C("corral_upload_failovers_total",
		  "Moves to another collector URL ([collector] url list: failover and failback).",
		  us.failovers);
		G("corral_upload_url_index",
		  "Place in the [collector] url list of the collector uploaded to (0: the first).",
		  (uint64_t)us.url_index);
	}
}
#undef G
#undef C

/* One metric family's header. */
static void family(struct buf *b, const char *name, const char *type, const char *help)
{
	bprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* How many series [metrics] tasks_max left out (tasks or accounts past the bound). */
static void omitted(struct buf *b, size_t n)
{
	family(b, "corral_metrics_series_omitted", "gauge",
	       "Tasks or accounts left out of the per-task series by [metrics] tasks_max.");
	bprintf(b, "corral_metrics_series_omitted %zu\n", n);
}

/* [metrics] tasks = account: running tasks, CPU and peak memory per account, for at most
 * tasks_max accounts (the first met). */
static void metrics_accounts(struct buf *b, struct agent *a)
{
	struct acct_sum {
		const char *account;
		char esc[256];
		uint64_t tasks;
		double cpu;
		uint64_t mem;
	} * sums;
	size_t n = 0, cap = MIN((size_t)a->n_live, (size_t)a->cfg.metrics_tasks_max), left = 0;

	sums = calloc(cap ? cap : 1, sizeof(*sums));
	for (struct task *t = a->tasks; sums && t; t = t->next) {
		const char *acct = t->spec.account ? t->spec.account : "";
		size_t i;

		if (t->state != TASK_RUNNING)
			continue;
		for (i = 0; i < n && strcmp(sums[i].account, acct); i++)
			;
		if (i == n) {
			if (n == cap) {
				left++;
				continue;
			}
			sums[n].account = acct;
			esc(acct, sums[n].esc, sizeof(sums[n].esc));
			n++;
		}
		usage_collect(a, t, NULL);
		sums[i].tasks++;
		sums[i].cpu += (double)(t->usage.cpu_user_ns + t->usage.cpu_system_ns) / 1e9;
		sums[i].mem += t->usage.memory_peak_bytes;
	}
	family(b, "corral_account_tasks_running", "gauge", "Running tasks per account.");
	for (size_t i = 0; i < n; i++)
		bprintf(b, "corral_account_tasks_running{account=\"%s\"} %llu\n", sums[i].esc,
			(unsigned long long)sums[i].tasks);
	family(b, "corral_account_running_cpu_seconds", "gauge",
	       "CPU time of the account's running tasks (falls when a task ends).");
	for (size_t i = 0; i < n; i++)
		bprintf(b, "corral_account_running_cpu_seconds{account=\"%s\"} %.6f\n", sums[i].esc,
			sums[i].cpu);
	family(b, "corral_account_running_memory_peak_bytes", "gauge",
	       "Sum of the peak memory of the account's running tasks.");
	for (size_t i = 0; i < n; i++)
		bprintf(b, "corral_account_running_memory_peak_bytes{account=\"%s\"} %llu\n",
			sums[i].esc, (unsigned long long)sums[i].mem);
	omitted(b, left);
	free(sums);
}

/* The per-task families: name, type, help, and the value of one task ("" to leave it out). */
enum task_family {
	TF_CPU,
	TF_MEM_PEAK,
	TF_IO_READ,
	TF_IO_WRITE,
	TF_NET_RX,
	TF_NET_TX,
	TF_WALL,
	TF_MEM_LIMIT,
	TF_CPU_LIMIT,
	_TF_MAX,
};

static const struct {
	const char *name, *type, *help;
} task_families[_TF_MAX] = {
    [TF_CPU] = {"corral_task_cpu_seconds_total", "counter", "CPU time of the task."},
    [TF_MEM_PEAK] = {"corral_task_memory_peak_bytes", "gauge", "Peak memory of the task."},
    [TF_IO_READ] = {"corral_task_io_read_bytes_total", "counter", "Bytes the task read."},
    [TF_IO_WRITE] = {"corral_task_io_write_bytes_total", "counter", "Bytes the task wrote."},
    [TF_NET_RX] = {"corral_task_net_rx_bytes_total", "counter", "Bytes the task received."},
    [TF_NET_TX] = {"corral_task_net_tx_bytes_total", "counter", "Bytes the task sent."},
    [TF_WALL] = {"corral_task_wall_seconds", "gauge", "Time since the task started."},
    [TF_MEM_LIMIT] = {"corral_task_memory_limit_bytes", "gauge", "The task's memory limit."},
    [TF_CPU_LIMIT] = {"corral_task_cpu_limit_cores", "gauge", "The task's CPU limit."},
};

static bool task_value(const struct task *t, enum task_family f, char *v, size_t len)
{
	const struct task_spec *s = &t->spec;
	const struct acct_usage *u = &t->usage;

	switch (f) {
	case TF_CPU:
		snprintf(v, len, "%.6f", (double)(u->cpu_user_ns + u->cpu_system_ns) / 1e9);
		return true;
	case TF_MEM_PEAK:
		snprintf(v, len, "%llu", (unsigned long long)u->memory_peak_bytes);
		return true;
	case TF_IO_READ:
		snprintf(v, len, "%llu", (unsigned long long)u->io_read_bytes);
		return true;
	case TF_IO_WRITE:
		snprintf(v, len, "%llu", (unsigned long long)u->io_write_bytes);
		return true;
	case TF_NET_RX:
		snprintf(v, len, "%llu", (unsigned long long)u->net_rx_bytes);
		return true;
	case TF_NET_TX:
		snprintf(v, len, "%llu", (unsigned long long)u->net_tx_bytes);
		return true;
	case TF_WALL:
		snprintf(v, len, "%.3f", (double)u->wall_ns / 1e9);
		return true;
	case TF_MEM_LIMIT:
		snprintf(v, len, "%llu", (unsigned long long)s->memory_max);
		return s->memory_max != 0;
	case TF_CPU_LIMIT:
		snprintf(v, len, "%.3f", s->cpus);
		return s->cpus > 0;
	default:
		return false;
	}
}

/* [metrics] tasks = task: the figures of each running task, for at most tasks_max tasks (the
 * oldest first); each family once with its HELP and TYPE. */
static void metrics_tasks(struct buf *b, struct agent *a)
{
	size_t cap = a->cfg.metrics_tasks_max, n = 0, left = 0;
	struct task **sel = calloc(cap, sizeof(*sel));
	struct {
		char user[128], acct[256], job[256];
	} *lab = calloc(cap, sizeof(*lab));

	for (struct task *t = a->tasks; sel && lab && t; t = t->next) {
		if (t->state != TASK_RUNNING)
			continue;
		if (n == cap) {
			left++;
			continue;
		}
		usage_collect(a, t, NULL);
		esc(t->user, lab[n].user, sizeof(lab[n].user));
		esc(t->spec.account, lab[n].acct, sizeof(lab[n].acct));
		esc(t->spec.job, lab[n].job, sizeof(lab[n].job));
		sel[n++] = t;
	}
	for (int f = 0; f < _TF_MAX; f++) {
		family(b, task_families[f].name, task_families[f].type, task_families[f].help);
		for (size_t i = 0; i < n; i++) {
			char v[64];

			if (task_value(sel[i], (enum task_family)f, v, sizeof(v)))
				bprintf(b,
					"%s{task=\"%s\",user=\"%s\",account=\"%s\",job=\"%s\"} "
					"%s\n",
					task_families[f].name, sel[i]->id, lab[i].user, lab[i].acct,
					lab[i].job, v);
		}
	}
	omitted(b, left);
	free(sel);
	free(lab);
}

static char *render_metrics(struct agent *a, size_t *ret_len)
{
	struct buf b = {0};
	char node[256];

	esc(a->cfg.node, node, sizeof(node));
	bprintf(
	    &b,
	    "# HELP corral_agent_info Agent identity and modes.\n# TYPE corral_agent_info gauge\n");
	bprintf(&b, "corral_agent_info{node=\"%s\",cgroup_mode=\"%s\",metering=\"%s\"} 1\n", node,
		cg_mode_to_string(cg_root_mode(a->cg)),
		a->meter ? meter_attach_mode(a->meter) : "off");
	bprintf(&b,
		"# HELP corral_build_info The program's version.\n"
		"# TYPE corral_build_info gauge\n"
		"corral_build_info{program=\"corrald\",version=\"%s\"} 1\n",
		CORRAL_VERSION);
	metrics_agent(&b, a);
	metrics_pipeline(&b, a);
	/* Per task: only as configured ([metrics] tasks), because whoever can reach the port
	 * reads them, whether or not it may see those tasks through the control socket. */
	if (a->cfg.metrics_tasks == METRICS_TASKS_ACCOUNT)
		metrics_accounts(&b, a);
	if (a->cfg.metrics_tasks == METRICS_TASKS_TASK)
		metrics_tasks(&b, a);
	*ret_len = b.len;
	return b.p;
}

static enum MHD_Result on_http(void *cls, struct MHD_Connection *conn, const char *url,
			       const char *method, const char *version, const char *upload_data,
			       size_t *upload_data_size, void **con_cls)
{
	struct agent *a = cls;
	struct MHD_Response *resp;
	enum MHD_Result ret;
	size_t len = 0;
	char *body;
	unsigned code = MHD_HTTP_OK;

	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		static char msg[] = "method not allowed\n";

		resp =
		    MHD_create_response_from_buffer(sizeof(msg) - 1, msg, MHD_RESPMEM_PERSISTENT);
		ret = MHD_queue_response(conn, MHD_HTTP_METHOD_NOT_ALLOWED, resp);
		MHD_destroy_response(resp);
		return ret;
	}
	if (strcmp(url, "/metrics") == 0) {
		body = render_metrics(a, &len);
	} else if (strcmp(url, "/healthz") == 0) {
		body = strdup("ok\n");
		len = 3;
	} else {
		body = strdup("not found: try /metrics\n");
		len = body ? strlen(body) : 0;
		code = MHD_HTTP_NOT_FOUND;
	}
	resp = MHD_create_response_from_buffer(
	    len, body ? body : (char *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
	ret = MHD_queue_response(conn, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* The process listening on TCP port (from /proc/net/tcp{,6} and /proc/PID/fd), "" if none
 * is found (another network namespace, no permission). */
static void port_owner(uint32_t port, char *buf, size_t len)
{
	static const char *const tables[] = {"/proc/net/tcp", "/proc/net/tcp6"};
	unsigned long inode = 0;
	_cleanup_closedir_ DIR *proc = NULL;
	struct dirent *de;

	buf[0] = 0;
	for (size_t t = 0; t < ARRAY_SIZE(tables) && !inode; t++) {
		_cleanup_fclose_ FILE *f = fopen(tables[t], "re");
		char line[512];

		while (f && fgets(line, sizeof(line), f)) {
			unsigned lport, st;
			unsigned long ino;

			/* sl local rem st tx:rx tr:when retrnsmt uid timeout inode */
			if (sscanf(line, " %*d: %*[0-9A-Fa-f]:%x %*s %x %*s %*s %*s %*u %*u %lu",
				   &lport, &st, &ino) == 3 &&
			    lport == port && st == 0x0A /* LISTEN */ && ino) {
				inode = ino;
				break;
			}
		}
	}
	if (!inode || !(proc = opendir("/proc")))
		return;
	while ((de = readdir(proc)) && !buf[0]) {
		char path[300], want[64], target[64], comm[64] = "";
		_cleanup_closedir_ DIR *fds = NULL;
		struct dirent *fe;

		if (de->d_name[0] < '1' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/fd", de->d_name);
		if (!(fds = opendir(path)))
			continue;
		snprintf(want, sizeof(want), "socket:[%lu]", inode);
		while ((fe = readdir(fds))) {
			char link[600];
			ssize_t n;

			snprintf(link, sizeof(link), "%s/%s", path, fe->d_name);
			n = readlink(link, target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = 0;
			if (strcmp(target, want) != 0)
				continue;
			snprintf(path, sizeof(path), "/proc/%s/comm", de->d_name);
			{
				_cleanup_fclose_ FILE *cf = fopen(path, "re");

				if (cf && fgets(comm, sizeof(comm), cf))
					comm[strcspn(comm, "\n")] = 0;
			}
			snprintf(buf, len, " (held by %.32s, pid %.16s)", comm[0] ? comm : "?",
				 de->d_name);
			break;
		}
	}
}

static void on_metrics(void *data, int fd, uint32_t events)
{
	struct agent *a = data;

	if (a->metrics)
		(void)MHD_run(a->metrics);
}

static void upl_swap_when_idle(struct agent *a);

static void on_upl(void *data, int fd, uint32_t events)
{
	struct agent *a = data;

	if (a->upl)
		(void)upl_dispatch(a->upl);
	upl_swap_when_idle(a);
}

/* The syncer finished a generation: remove what waited for it. */
static void on_sync(void *data, int fd, uint32_t events)
{
	agent_sync_done(data);
}

static int metrics_start(struct agent *a)
{
	struct sockaddr_in sin = {.sin_family = AF_INET};
	struct sockaddr_in6 sin6 = {.sin6_family = AF_INET6};
	_cleanup_free_ char *host = strdup(a->cfg.metrics_listen);
	const union MHD_DaemonInfo *info;
	struct MHD_Daemon *d;
	struct sockaddr *sa;
	char *colon;
	uint32_t port;
	unsigned flags = MHD_USE_EPOLL;

	if (!host)
		return -ENOMEM;
	colon = strrchr(host, ':');
	if (!colon && parse_u32(host, &port) == 0) { /* a bare port */
		free(host);
		if (asprintf(&host, ":%u", port) < 0) {
			host = NULL;
			return -ENOMEM;
		}
		colon = host;
	}
	if (!colon || parse_u32(colon + 1, &port) < 0 || port == 0 || port > 65535) {
		log_error("[metrics] listen: expected ADDRESS:PORT, got \"%s\"",
			  a->cfg.metrics_listen);
		return -EINVAL;
	}
	*colon = 0;
	if (host[0] == '[') {
		size_t l = strlen(host);

		if (l < 2 || host[l - 1] != ']')
			return -EINVAL;
		host[l - 1] = 0;
		memmove(host, host + 1, l - 1);
	}
	/* no address: localhost (listening on every interface must be asked for: 0.0.0.0) */
	if (inet_pton(AF_INET, *host ? host : "127.0.0.1", &sin.sin_addr) == 1) {
		sin.sin_port = htons((uint16_t)port);
		sa = (struct sockaddr *)&sin;
	} else if (inet_pton(AF_INET6, host, &sin6.sin6_addr) == 1) {
		sin6.sin6_port = htons((uint16_t)port);
		sa = (struct sockaddr *)&sin6;
		flags |= MHD_USE_IPv6;
	} else {
		log_error("[metrics] listen: \"%s\" is not an IP address", host);
		return -EINVAL;
	}
	/* bound once here first: libmicrohttpd does not say why it could not listen */
	{
		int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, r = 0;

		if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
		    bind(fd, sa, sa->sa_family == AF_INET ? sizeof(sin) : sizeof(sin6)) < 0 ||
		    listen(fd, 1) < 0)
			r = -errno;
		if (fd >= 0)
			close(fd);
		if (r < 0) {
			char owner[128] = "";

			if (r == -EADDRINUSE)
				port_owner(port, owner, sizeof(owner));
			log_error(
			    "metrics: cannot listen on %s: %s%s; corrald is exiting (set "
			    "--metrics-listen or [metrics] listen in %s to a free address, or "
			    "leave it empty to serve no metrics)",
			    a->cfg.metrics_listen, strerror(-r), owner,
			    a->config_path ? a->config_path : "the configuration file");
			return r;
		}
	}
	/*
	 * Slow clients: every connection idle for timeout seconds is closed, a request's headers
	 * live in a small pool, and the connection limit is far above what a scraper needs, so a
	 * local user's pile of half-open requests does not lock out the scrape (with the file
	 * limit to match; the unit sets LimitNOFILE=65536).
	 */
	{
		struct rlimit rl;
		unsigned conns = a->cfg.metrics_max_conns;

		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		    rl.rlim_cur < (rlim_t)conns + 256) {
			unsigned fit = rl.rlim_cur > 320 ? (unsigned)rl.rlim_cur - 256 : 64;

			log_warning(
			    "metrics: max_connections %u lowered to %u (open file limit %llu)",
			    conns, fit, (unsigned long long)rl.rlim_cur);
			conns = fit;
		}
		d = MHD_start_daemon(
		    flags, (uint16_t)port, NULL, NULL, on_http, a, MHD_OPTION_SOCK_ADDR, sa,
		    MHD_OPTION_CONNECTION_LIMIT, conns, MHD_OPTION_CONNECTION_TIMEOUT,
		    (unsigned)a->cfg.metrics_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
		    (size_t)16384, MHD_OPTION_LISTEN_BACKLOG_SIZE, 1024u, MHD_OPTION_END);
	}
	if (!d) {
		log_error("metrics: cannot listen on %s: the HTTP server did not start; corrald is "
			  "exiting",
			  a->cfg.metrics_listen);
		return -EADDRINUSE;
	}
	info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info) {
		MHD_stop_daemon(d);
		return -ENOTSUP;
	}
	a->metrics = d;
	loop_add(a->loop, info->epoll_fd, EPOLLIN, on_metrics, a);
	log_info("metrics: serving /metrics on %s", a->cfg.metrics_listen);
	return 0;
}

/* Acked entries leave the spool: the audit chain head must be durable first (state.c). */
/* Each damaged region of the spool, once: what was lost, where its bytes are kept. */
static void spool_report_damage(struct agent *a)
{
	struct spool_damage d[8];
	size_t n;

	while (a->spool && (n = spool_take_damage(a->spool, d, ARRAY_SIZE(d))) > 0)
		for (size_t i = 0; i < n; i++) {
			char next[64] = "";

			if (d[i].next_seq)
				snprintf(next, sizeof(next), "; delivery goes on at entry %llu",
					 (unsigned long long)d[i].next_seq);
			if (d[i].dropped)
				log_warning(
				    "spool: damaged/%s (%llu bytes) emptied: damaged/ holds "
				    "at most [spool] damaged_max_bytes, the oldest copies "
				    "go first",
				    d[i].file, (unsigned long long)d[i].length);
			else if (d[i].torn)
				log_warning(
				    "spool: segment %020llu: torn tail of %llu bytes at offset "
				    "%llu (a write cut short by a crash) truncated%s%s%s",
				    (unsigned long long)d[i].segment,
				    (unsigned long long)d[i].length,
				    (unsigned long long)d[i].offset,
				    d[i].file[0] ? "; kept in damaged/" : "", d[i].file, next);
			else
				log_error(
				    "spool: segment %020llu: %llu damaged bytes at offset %llu "
				    "do not verify (CRC, header or sequence): the record(s) in "
				    "them are lost; %s%s%s",
				    (unsigned long long)d[i].segment,
				    (unsigned long long)d[i].length,
				    (unsigned long long)d[i].offset,
				    d[i].file[0] ? "kept in damaged/" : "could not be kept: ",
				    d[i].file[0] ? d[i].file : strerror(-d[i].keep_error), next);
		}
}

/* A record id the collector holds with another body: not stored, set aside, said loudly. */
static void upl_on_conflict(void *ud, const char *record_id, uint64_t spool_seq)
{
	struct agent *a = ud;

	log_error("record %s (spool entry %llu) CONFLICTS with another record the collector "
		  "stored under the same id: not stored; set aside in %s/dead-letter.ndjson",
		  record_id, (unsigned long long)spool_seq, a->cfg.state_dir);
}

static int upl_before_ack(void *ud)
{
	struct agent *a = ud;
	int r = state_sync_audit_head(a);

	if (r < 0)
		log_error("saving the audit chain head before an ack failed: %s", strerror(-r));
	return r;
}

/* The same [collector] settings in c and n. */
static bool upload_same(const struct agent_config *c, const struct agent_config *n)
{
	return streq_ptr(c->collector_url, n->collector_url) &&
	       streq_ptr(c->token_file, n->token_file) && streq_ptr(c->ca_file, n->ca_file) &&
	       streq_ptr(c->pin, n->pin) && streq_ptr(c->client_cert, n->client_cert) &&
	       streq_ptr(c->client_key, n->client_key) && c->failover_after == n->failover_after &&
	       c->failback_ns == n->failback_ns &&
	       c->upload_connect_timeout_ns == n->upload_connect_timeout_ns &&
	       c->upload_timeout_ns == n->upload_timeout_ns &&
	       c->batch_records == n->batch_records && c->batch_delay_ns == n->batch_delay_ns &&
	       c->upload_zstd == n->upload_zstd;
}

static void secret_free(char *s)
{
	if (s)
		explicit_bzero(s, strlen(s));
	free(s);
}

/*
 * An uploader of c's [collector] settings on the agent's spool, its token read from
 * c->token_file and checked (config_read_token), kept as a->upl_token; -errno after a message,
 * -EALREADY (no message) when a running uploader has the same settings and token.
 */
static int upl_make(struct agent *a, const struct agent_config *c, struct upl **ret)
{
	_cleanup_free_ char *token = NULL;
	struct upl_opts uo = {0};
	size_t len = 0;
	char err[512];
	int r;

	r = c->client_key ? config_check_key(c->client_key, err, sizeof(err)) : 0;
	if (r >= 0 && c->token_file)
		r = config_read_token(c->token_file, &token, &len, err, sizeof(err));
	if (r < 0) {
		log_error("%s", err);
		return r;
	}
	/* a reload that changes nothing, token included, keeps the running uploader */
	if ((a->upl || a->upl_next) && upload_same(&a->cfg, c) &&
	    streq_ptr(token ? token : "", a->upl_token ? a->upl_token : "")) {
		if (token)
			explicit_bzero(token, len);
		return -EALREADY;
	}
	uo.url = c->collector_url;
	uo.token = token ? token : "";
	uo.ca_file = c->ca_file;
	uo.pinned_pubkey = c->pin;
	uo.client_cert = c->client_cert;
	uo.client_key = c->client_key;
	uo.failover_after = c->failover_after;
	uo.failback_ms = c->failback_ns / 1000000;
	uo.connect_timeout_ms = c->upload_connect_timeout_ns / 1000000;
	uo.request_timeout_ms = c->upload_timeout_ns / 1000000;
	uo.state_dir = a->cfg.state_dir;
	uo.batch_records = c->batch_records;
	uo.batch_delay_ms = c->batch_delay_ns / 1000000;
	uo.compress = c->upload_zstd;
	uo.before_ack = upl_before_ack;
	uo.before_ack_ud = a;
	uo.on_conflict = upl_on_conflict;
	uo.on_conflict_ud = a;
	r = upl_new(&uo, a->spool, ret);
	if (r < 0) {
		log_error("uploader for %s: %s", c->collector_url, strerror(-r));
		if (token)
			explicit_bzero(token, len);
		return r;
	}
	secret_free(a->upl_token);
	a->upl_token = TAKE_PTR(token);
	return 0;
}

int agent_hooks_init(struct agent *a)
{
	char dir[512];
	struct spool_opts so = {0};
	int r;

	if (a->cfg.metrics_listen) {
		r = metrics_start(a);
		if (r < 0)
			return r;
	}
	/* Records are always spooled; without a collector they wait there until one is set. */
	snprintf(dir, sizeof(dir), "%s/spool", a->cfg.state_dir);
	so.dir = dir;
	so.max_bytes = a->cfg.spool_max_bytes;
	so.keep_reserve = a->cfg.spool_billing_reserve;
	so.damaged_max_bytes = a->cfg.spool_damaged_max;
	so.compress = a->cfg.spool_compress;
	so.free_space = state_free_space;
	so.free_space_ud = a;
	if (so.keep_reserve >= so.max_bytes) {
		log_error("[spool] billing_reserve must be smaller than max_bytes");
		return -EINVAL;
	}
	r = spool_open(&so, &a->spool);
	if (r < 0) {
		log_error("spool %s: %s", dir, strerror(-r));
		return r;
	}
	spool_report_damage(a);
	r = syncer_start(&a->syncer);
	if (r < 0)
		log_warning("spool: no syncer thread (%s): the loop waits for each fdatasync",
			    strerror(-r));
	else {
		r = loop_add(a->loop, syncer_fd(a->syncer), EPOLLIN, on_sync, a);
		if (r < 0) {
			syncer_stop(a->syncer);
			a->syncer = NULL;
		}
	}
	if (!a->cfg.collector_url) {
		log_info("no collector configured: records wait in the spool %s", dir);
		return 0;
	}
	r = upl_make(a, &a->cfg, &a->upl);
	if (r < 0)
		return r;
	loop_add(a->loop, upl_fd(a->upl), EPOLLIN, on_upl, a);
	log_info("uploading records to %s", a->cfg.collector_url);
	return 0;
}

/* A reload's uploader in place of the running one once no batch is in flight. */
static void upl_swap_when_idle(struct agent *a)
{
	struct upl_stats us;

	if (!a->upl_swap)
		return;
	if (a->upl) {
		upl_get_stats(a->upl, &us);
		if (us.in_flight)
			return;
		loop_del(a->loop, upl_fd(a->upl));
		if (a->upl_next)
			upl_carry_stats(a->upl_next, a->upl);
		upl_free(a->upl);
	}
	a->upl = a->upl_next;
	a->upl_next = NULL;
	a->upl_swap = false;
	a->upl_logged_err[0] = 0;
	if (!a->upl) {
		log_notice("collector: no [collector] url any more: records wait in the spool");
		return;
	}
	loop_add(a->loop, upl_fd(a->upl), EPOLLIN, on_upl, a);
	upl_get_stats(a->upl, &us);
	a->upl_logged_failovers = us.failovers;
	log_notice("collector: uploading to %s with the reloaded [collector] settings", us.url);
	upl_kick(a->upl);
	(void)upl_dispatch(a->upl);
}

int agent_upl_reload(struct agent *a, const struct agent_config *nc)
{
	struct upl *next = NULL;
	int r;

	if (!a->spool)
		return -EINVAL;
	if (!nc->collector_url && !a->upl && !a->upl_next)
		return 0;
	if (nc->collector_url) {
		r = upl_make(a, nc, &next);
		if (r == -EALREADY)
			return 0;
		if (r < 0)
			return r;
	} else {
		secret_free(a->upl_token);
		a->upl_token = NULL;
	}
	upl_free(a->upl_next); /* a swap still waiting from an earlier reload */
	a->upl_next = next;
	a->upl_swap = true;
	if (a->upl)
		upl_hold(a->upl);
	upl_swap_when_idle(a);
	return 0;
}

void agent_hooks_tick(struct agent *a, uint64_t now)
{
	(void)now;
	spool_report_damage(a);
	upl_swap_when_idle(a);
	if (a->upl) {
		struct upl_stats us;
		char *last_err = a->upl_logged_err;

		upl_kick(a->upl);
		(void)upl_dispatch(a->upl);
		upl_get_stats(a->upl, &us);
		/* Log a delivery problem once when it starts, and once when it clears. */
		if (strcmp(us.last_error, last_err) != 0) {
			if (us.last_error[0])
				log_warning(
				    "collector: %s (records stay in the spool and are resent)",
				    us.last_error);
			else if (last_err[0])
				log_notice("collector: delivering again");
			snprintf(last_err, sizeof(a->upl_logged_err), "%s", us.last_error);
		}
		if (us.failovers != a->upl_logged_failovers) {
			log_notice("collector: uploading to %s (place %u in [collector] url)",
				   us.url, us.url_index + 1);
			a->upl_logged_failovers = us.failovers;
		}
	}
	if (a->metrics)
		(void)MHD_run(a->metrics);
}

void agent_hooks_fini(struct agent *a)
{
	agent_sync_stop(a);
	if (a->upl)
		upl_free(a->upl);
	a->upl = NULL;
	upl_free(a->upl_next);
	a->upl_next = NULL;
	secret_free(a->upl_token);
	a->upl_token = NULL;
	for (size_t i = 0; i < a->n_secrets_before; i++)
		free(a->secrets_before[i]);
	free(a->secrets_before);
	a->secrets_before = NULL;
	a->n_secrets_before = 0;
	if (a->spool)
		spool_close(a->spool);
	a->spool = NULL;
	if (a->metrics)
		MHD_stop_daemon(a->metrics);
	a->metrics = NULL;
}
