/* SPDX-License-Identifier: MIT */
#include "agent/config.h"
#include "agent/spec.h"
#include "common/error.h"
#include "common/fileio.h"
#include "common/ini_file.h"
#include "common/macro.h"
#include "common/parse.h"
#include "isolation/seccomp.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

void config_init_defaults(struct agent_config *c)
{
	char host[256] = "localhost";

	memset(c, 0, sizeof(*c));
	(void)gethostname(host, sizeof(host) - 1);
	c->node = strdup(host);
	c->socket_path = strdup("/run/corral/corrald.sock");
	c->socket_group = strdup("corral");
	c->socket_mode = 0660;
	c->state_dir = strdup("/var/lib/corral");
	c->allowed_group = strdup("corral");
	c->allowed_users = strdup("*");
	c->max_tasks = 1024;
	c->slurm_job = true;
	c->reserve_memory = 0;
	c->reserve_cpus = 0;
	c->kill_grace_ns = 10 * NSEC_PER_SEC;
	c->sample_interval_ns = 30 * NSEC_PER_SEC;
	c->sample_unchanged_listed = true;
	c->sample_unchanged_stated = true;
	c->unchanged_list_max = CONFIG_UNCHANGED_LIST_MAX;
	c->cgroup_subtree = strdup("corral");
	c->seccomp_default = strdup("default");
	c->seccomp_dir = strdup("/etc/corral/seccomp");
	c->log_level = strdup("info");
	c->ended_keep = 1000;
	c->sandbox_mount_ns = true;
	c->sandbox_tmp_size = strdup("25%");
	c->sandbox_protect_system = true;
	c->sandbox_private_dev = true;
	c->sandbox_dev_paths = strdup("infiniband fuse");
	c->bpf = BPF_MODE_AUTO;
	c->taskstats = true;
	c->audit = true;
	c->audit_argv_max = 1024;
	c->audit_syscalls_max = AUDIT_SYSCALLS_MAX;
	c->audit_task_rate = 100;
	c->audit_task_burst = 10000;
	c->audit_task_bytes = 64ULL << 20;
	c->audit_task_rate_max = 1000;
	c->audit_task_bytes_max = 256ULL << 20;
	c->audit_summary_interval_ns = 10 * NSEC_PER_SEC;
	c->audit_summary_sample = 8;
	c->batch_records = 500;
	c->failover_after = 3;
	c->failback_ns = 300 * NSEC_PER_SEC;
	c->upload_connect_timeout_ns = 10 * NSEC_PER_SEC;
	c->upload_timeout_ns = 60 * NSEC_PER_SEC;
	c->batch_delay_ns = NSEC_PER_SEC;
	c->upload_zstd = true;
	c->spool_compress = true;
	c->spool_max_bytes = 1ULL << 30;
	c->metrics_tasks = METRICS_TASKS_OFF;
	c->metrics_max_conns = 4096;
	c->metrics_tasks_max = 256;
	c->metrics_timeout_s = 5;
	c->conn_per_uid = 32;
	c->idle_timeout_ns = 60 * NSEC_PER_SEC;
	c->request_timeout_ns = 10 * NSEC_PER_SEC;
	c->send_timeout_ns = 30 * NSEC_PER_SEC;
}

void config_free(struct agent_config *c)
{
	free(c->node);
	free(c->socket_path);
	free(c->socket_group);
	free(c->state_dir);
	free(c->runtime_dir);
	free(c->allowed_group);
	free(c->allowed_users);
	free(c->cgroup_subtree);
	free(c->seccomp_default);
	free(c->seccomp_dir);
	free(c->log_level);
	free(c->node_price_class);
	free(c->node_labels);
	free(c->energy_powercap_root);
	free(c->sandbox_tmp_size);
	free(c->sandbox_dev_paths);
	free(c->metrics_listen);
	free(c->collector_url);
	free(c->token_file);
	free(c->ca_file);
	free(c->pin);
	free(c->client_cert);
	free(c->client_key);
	memset(c, 0, sizeof(*c));
}

static int set_str(char **dst, const char *v)
{
	char *d = strdup(v);

	if (!d)
		return -ENOMEM;
	free(*dst);
	*dst = *v ? d : (free(d), NULL);
	return 0;
}

/* The setters of config_set, by section: each returns CONFIG_UNKNOWN for a key it does not know. */
#define CONFIG_UNKNOWN 1
#define IS(s, k)       (strcmp(section, s) == 0 && strcmp(key, k) == 0)
#define BAD(what)      err_set(err, errlen, -EINVAL, "[%s] %s: %s \"%.64s\"", section, key, what, value)

/* [agent] */
static int config_set_agent(struct agent_config *c, const char *section, const char *key,
			    const char *value, char *err, size_t errlen)
{
	_unused_ uint64_t u;
	_unused_ double d;
	_unused_ bool b;

	if (IS("agent", "node")) {
		if (!*value || strlen(value) > 253)
			return BAD("invalid node name");
		return set_str(&c->node, value);
	}
	if (IS("agent", "socket"))
		return *value == '/' ? set_str(&c->socket_path, value)
				     : BAD("expected an absolute path");
	if (IS("agent", "socket_group"))
		return set_str(&c->socket_group, value);
	if (IS("agent", "socket_mode")) {
		char *end;
		unsigned long m;

		errno = 0;
		m = strtoul(value, &end, 8);
		if (errno || end == value || *end || m > 0777 || (m & 0111))
			return BAD("expected octal permission bits such as 0660 (no execute bits)");
		c->socket_mode = (uint32_t)m;
		return 0;
	}
	if (IS("agent", "state_dir"))
		return *value == '/' ? set_str(&c->state_dir, value)
				     : BAD("expected an absolute path");
	if (IS("agent", "runtime_dir"))
		return *value == '/' ? set_str(&c->runtime_dir, value)
				     : BAD("expected an absolute path");
	if (IS("agent", "allowed_group"))
		return set_str(&c->allowed_group, value);
	if (IS("agent", "allowed_users"))
		return set_str(&c->allowed_users, value);
	if (IS("agent", "allow_root_tasks")) {
		if (parse_bool(value, &b) < 0)
			return BAD("expected yes or no");
		c->allow_root_tasks = b;
		return 0;
	}
	if (IS("agent", "slurm_job")) {
		if (parse_bool(value, &b) < 0)
			return BAD("expected yes or no");
		c->slurm_job = b;
		return 0;
	}
	if (IS("agent", "max_tasks")) {
		if (parse_u64(value, &u) < 0 || u < 1 || u > 65536)
			return BAD("expected an integer 1-65536");
		c->max_tasks = (uint32_t)u;
		return 0;
	}
	if (IS("agent", "ended_keep")) {
		if (parse_u64(value, &u) < 0 || u > 1000000)
			return BAD("expected an integer 0-1000000");
		c->ended_keep = (uint32_t)u;
		return 0;
	}
	if (IS("agent", "reserve_memory")) {
		if (parse_size(value, &u) < 0)
			return BAD("invalid size");
		c->reserve_memory = u;
		return 0;
	}
	if (IS("agent", "reserve_cpus")) {
		if (parse_double(value, &d) < 0 || d > 4096)
			return BAD("expected a number of cores");
		c->reserve_cpus = d;
		return 0;
	}
	if (IS("agent", "kill_grace")) {
		if (parse_duration_ns(value, &u) < 0)
			return BAD("invalid duration");
		c->kill_grace_ns = u;
		return 0;
	}
	if (IS("agent", "sample_interval")) {
		if (parse_duration_ns(value, &u) < 0 || u < NSEC_PER_SEC)
			return BAD("expected a duration of at least 1s");
		c->sample_interval_ns = u;
		return 0;
	}
	if (IS("agent", "sample_unchanged")) {
		if (strcmp(value, "stated") && strcmp(value, "listed") && strcmp(value, "full"))
			return BAD("expected stated, listed or full");
		c->sample_unchanged_listed = strcmp(value, "full") != 0;
		c->sample_unchanged_stated = strcmp(value, "stated") == 0;
		return 0;
	}
	if (IS("agent", "unchanged_list_max")) {
		if (parse_size(value, &u) < 0 || u < 256 || u > CONFIG_UNCHANGED_LIST_MAX)
			return BAD("expected a size from 256 to 192K");
		c->unchanged_list_max = u;
		return 0;
	}
	if (IS("agent", "cgroup_subtree")) {
		if (!*value || strchr(value, '.') == value || strstr(value, ".."))
			return BAD("invalid cgroup name");
		return set_str(&c->cgroup_subtree, value);
	}
	if (IS("agent", "seccomp_default"))
		return set_str(&c->seccomp_default, value);
	if (IS("agent", "seccomp_dir"))
		return set_str(&c->seccomp_dir, value);
	if (IS("agent", "log_level")) {
		if (strcmp(value, "debug") && strcmp(value, "info") && strcmp(value, "notice") &&
		    strcmp(value, "warning") && strcmp(value, "err"))
			return BAD("expected debug|info|notice|warning|err");
		return set_str(&c->log_level, value);
	}
	return CONFIG_UNKNOWN;
}

/* [control], [metering], [sandbox] */
static int config_set_control_metering_sandbox(struct agent_config *c, const char *section,
					       const char *key, const char *value, char *err,
					       size_t errlen)
{
	_unused_ uint64_t u;
	_unused_ double d;
	_unused_ bool b;

	if (IS("control", "max_connections_per_uid")) {
		if (parse_u64(value, &u) < 0 || u < 1 || u > CONTROL_CONN_PER_UID_MAX)
			return BAD("expected an integer 1-240");
		c->conn_per_uid = (uint32_t)u;
		return 0;
	}
	if (IS("control", "idle_timeout") || IS("control", "request_timeout") ||
	    IS("control", "send_timeout")) {
		if (parse_duration_ns(value, &u) < 0 || u < NSEC_PER_SEC / 10 ||
		    u > 86400 * NSEC_PER_SEC)
			return BAD("expected a duration from 100ms to 24h");
		*(key[0] == 'i'	  ? &c->idle_timeout_ns
		  : key[0] == 'r' ? &c->request_timeout_ns
				  : &c->send_timeout_ns) = u;
		return 0;
	}
	if (IS("metering", "bpf")) {
		if (strcmp(value, "auto") == 0)
			c->bpf = BPF_MODE_AUTO;
		else if (strcmp(value, "off") == 0)
			c->bpf = BPF_MODE_OFF;
		else if (strcmp(value, "raw_tp") == 0)
			c->bpf = BPF_MODE_RAW_TP;
		else
			return BAD("expected auto|off|raw_tp");
		return 0;
	}
	if (IS("metering", "cpu_accounting")) {
		if (strcmp(value, "exit") == 0)
			c->cpu_at_switch = false;
		else if (strcmp(value, "switch") == 0)
			c->cpu_at_switch = true;
		else
			return BAD("expected exit|switch");
		return 0;
	}
	if (IS("metering", "taskstats")) {
		if (parse_bool(value, &b) < 0)
			return BAD("expected yes or no");
		c->taskstats = b;
		return 0;
	}
	if (strcmp(section, "sandbox") == 0) {
		bool *bp = NULL;

		if (strcmp(key, "tmp_size") == 0) {
			if (spec_tmp_size_check(value) < 0)
				return BAD("expected a size (K, M, G, T) or a percentage of RAM");
			return set_str(&c->sandbox_tmp_size, value);
		}
		if (strcmp(key, "dev_paths") == 0) {
			if (spec_dev_paths_check(value) < 0)
				return BAD(
				    "expected names under /dev separated by spaces (at most 32, "
				    "no \"..\", none starting with /)");
			return set_str(&c->sandbox_dev_paths, value);
		}
		if (strcmp(key, "mount_namespace") == 0)
			bp = &c->sandbox_mount_ns;
		else if (strcmp(key, "private_dev") == 0)
			bp = &c->sandbox_private_dev;
		else if (strcmp(key, "private_tmp") == 0)
			bp = &c->sandbox_private_tmp;
		else if (strcmp(key, "protect_system") == 0)
			bp = &c->sandbox_protect_system;
		else if (strcmp(key, "ipc_namespace") == 0)
			bp = &c->sandbox_ipc_ns;
		else if (strcmp(key, "uts_namespace") == 0)
			bp = &c->sandbox_uts_ns;
		else if (strcmp(key, "pid_namespace") == 0)
			bp = &c->sandbox_pid_ns;
		else if (strcmp(key, "landlock") == 0)
			bp = &c->sandbox_landlock;
		if (bp) {
			if (parse_bool(value, &b) < 0)
				return BAD("expected yes or no");
			*bp = b;
			return 0;
		}
	}
	return CONFIG_UNKNOWN;
}

/* [audit] */
static int config_set_audit(struct agent_config *c, const char *section, const char *key,
			    const char *value, char *err, size_t errlen)
{
	_unused_ uint64_t u;
	_unused_ double d;
	_unused_ bool b;

	if (IS("audit", "enable")) {
		if (parse_bool(value, &b) < 0)
			return BAD("expected yes or no");
		c->audit = b;
		return 0;
	}
	if (IS("audit", "argv_max")) {
		if (parse_u64(value, &u) < 0 || u < 64 || u > 8192)
			return BAD("expected 64-8192 bytes");
		c->audit_argv_max = (uint32_t)u;
		return 0;
	}
	if (IS("audit", "syscalls_max")) {
		if (parse_u64(value, &u) < 0 || u < 1 || u > 1000000)
			return BAD("expected 1-1000000 records");
		c->audit_syscalls_max = (uint32_t)u;
		return 0;
	}
	if (IS("audit", "net_default")) {
		if (strcmp(value, "allow") == 0)
			c->net_default_deny = false;
		else if (strcmp(value, "deny") == 0)
			c->net_default_deny = true;
		else
			return BAD("expected allow or deny");
		return 0;
	}
	if (IS("audit", "task_rate") || IS("audit", "task_rate_max") || IS("audit", "task_burst")) {
		if (parse_u64(value, &u) < 0 || u > 100000000)
			return BAD("expected an integer 0-100000000 (records per second)");
		if (strcmp(key, "task_burst") == 0 && u < 1)
			return BAD("expected at least 1 record");
		*(strcmp(key, "task_rate") == 0	   ? &c->audit_task_rate
		  : strcmp(key, "task_burst") == 0 ? &c->audit_task_burst
						   : &c->audit_task_rate_max) = u;
		return 0;
	}
	if (IS("audit", "task_bytes") || IS("audit", "task_bytes_max")) {
		if (parse_size(value, &u) < 0)
			return BAD("expected a size (0 = unbounded)");
		*(strcmp(key, "task_bytes") == 0 ? &c->audit_task_bytes
						 : &c->audit_task_bytes_max) = u;
		return 0;
	}
	if (IS("audit", "summary_interval")) {
		if (parse_duration_ns(value, &u) < 0 || u < NSEC_PER_SEC / 10 ||
		    u > 3600 * NSEC_PER_SEC)
			return BAD("expected a duration of 100ms-1h");
		c->audit_summary_interval_ns = u;
		return 0;
	}
	if (IS("audit", "summary_sample")) {
		if (parse_u64(value, &u) < 0 || u > 64)
			return BAD("expected 0-64 events");
		c->audit_summary_sample = (uint32_t)u;
		return 0;
	}
	return CONFIG_UNKNOWN;
}

/*
 * [collector] url (one URL, added to the list: several lines make a list) and urls (the whole
 * list, space-separated; empty: none). Each must be http:// or https://, at most
 * COLLECTOR_URLS_MAX, none twice.
 */
static int config_set_urls(struct agent_config *c, bool add, const char *value, char *err,
			   size_t errlen)
{
	const char *what = add ? "url" : "urls";
	_cleanup_free_ char *all = NULL, *list = NULL;
	char *v[COLLECTOR_URLS_MAX + 1], *save = NULL, *tok;
	size_t n = 0, len = 0;

	if (asprintf(&all, "%s %s", add && c->collector_url ? c->collector_url : "", value) < 0) {
		all = NULL;
		return -ENOMEM;
	}
	for (tok = strtok_r(all, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
		if (strncmp(tok, "http://", 7) && strncmp(tok, "https://", 8))
			return err_set(err, errlen, -EINVAL,
				       "[collector] %s: expected http:// or https:// URLs, got "
				       "\"%.64s\"",
				       what, tok);
		for (size_t i = 0; i < n; i++)
			if (strcmp(v[i], tok) == 0) /* a failover to itself */
				return err_set(err, errlen, -EINVAL,
					       "[collector] %s: \"%.64s\" is in the list twice",
					       what, tok);
		if (n == COLLECTOR_URLS_MAX)
			return err_set(err, errlen, -EINVAL,
				       "[collector] %s: more than %d collector URLs", what,
				       COLLECTOR_URLS_MAX);
		v[n++] = tok;
		len += strlen(tok) + 1;
	}
	list = calloc(1, len + 1);
	if (!list)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (i)
			strcat(list, " ");
		strcat(list, v[i]);
	}
	return set_str(&c->collector_url, list);
}

/* [metrics], [collector], [spool] */
static int config_set_metrics_collector_spool(struct agent_config *c, const char *section,
					      const char *key, const char *value, char *err,
					      size_t errlen)
{
	_unused_ uint64_t u;
	_unused_ double d;
	_unused_ bool b;

	if (IS("metrics", "listen"))
		return set_str(&c->metrics_listen, value);
	if (IS("metrics", "tasks")) {
		if (strcmp(value, "off") == 0)
			c->metrics_tasks = METRICS_TASKS_OFF;
		else if (strcmp(value, "account") == 0)
			c->metrics_tasks = METRICS_TASKS_ACCOUNT;
		else if (strcmp(value, "task") == 0)
			c->metrics_tasks = METRICS_TASKS_TASK;
		else
			return BAD("expected off, account or task");
		return 0;
	}
	if (IS("metrics", "tasks_max")) {
		if (parse_u64(value, &u) < 0 || u < 1 || u > 65536)
			return BAD("expected 1-65536 (tasks or accounts with series)");
		c->metrics_tasks_max = (uint32_t)u;
		return 0;
	}
	if (IS("metrics", "max_connections")) {
		if (parse_u64(value, &u) < 0 || u < 4 || u > 65536)
			return BAD("expected 4-65536");
		c->metrics_max_conns = (uint32_t)u;
		return 0;
	}
	if (IS("metrics", "timeout")) {
		if (parse_duration_ns(value, &u) < 0 || u < NSEC_PER_SEC || u > 600 * NSEC_PER_SEC)
			return BAD("expected a duration of 1s-10m");
		c->metrics_timeout_s = (uint32_t)(u / NSEC_PER_SEC);
		return 0;
	}
	if (IS("collector", "url") || IS("collector", "urls"))
		return config_set_urls(c, strcmp(key, "url") == 0, value, err, errlen);
	if (IS("collector", "client_cert"))
		return set_str(&c->client_cert, value);
	if (IS("collector", "client_key"))
		return set_str(&c->client_key, value);
	if (IS("collector", "failover_after")) {
		if (parse_u64(value, &u) < 0 || u < 1 || u > 100)
			return BAD("expected 1-100 failures in a row");
		c->failover_after = (uint32_t)u;
		return 0;
	}
	if (IS("collector", "connect_timeout") || IS("collector", "request_timeout")) {
		bool conn = key[1] == 'o';

		if (parse_duration_ns(value, &u) < 0 ||
		    u < (conn ? NSEC_PER_SEC / 10 : NSEC_PER_SEC) || u > 3600 * NSEC_PER_SEC)
			return BAD(conn ? "expected a duration of 100ms-1h"
					: "expected a duration of 1s-1h");
		*(conn ? &c->upload_connect_timeout_ns : &c->upload_timeout_ns) = u;
		return 0;
	}
	if (IS("collector", "failback")) {
		if (parse_duration_ns(value, &u) < 0 || u < NSEC_PER_SEC ||
		    u > 86400 * NSEC_PER_SEC)
			return BAD("expected a duration of 1s-24h");
		c->failback_ns = u;
		return 0;
	}
	if (IS("collector", "token_file"))
		return set_str(&c->token_file, value);
	if (IS("collector", "ca_file"))
		return set_str(&c->ca_file, value);
	if (IS("collector", "pin"))
		return set_str(&c->pin, value);
	if (IS("collector", "batch_records")) {
		if (parse_u64(value, &u) < 0 || u < 1 || u > 10000)
			return BAD("expected an integer 1-10000");
		c->batch_records = (uint32_t)u;
		return 0;
	}
	if (IS("collector", "batch_delay")) {
		if (parse_duration_ns(value, &u) < 0)
			return BAD("invalid duration");
		c->batch_delay_ns = u;
		return 0;
	}
	if (IS("collector", "compress")) {
		if (strcmp(value, "zstd") != 0 && strcmp(value, "none") != 0)
			return BAD("expected zstd or none");
		c->upload_zstd = value[0] == 'z';
		return 0;
	}
	if (IS("spool", "compress")) {
		if (parse_bool(value, &b) < 0)
			return BAD("expected true or false");
		c->spool_compress = b;
		return 0;
	}
	if (IS("spool", "max_bytes")) {
		if (parse_size(value, &u) < 0 || u < (1 << 20))
			return BAD("expected a size of at least 1M");
		c->spool_max_bytes = u;
		return 0;
	}
	if (IS("spool", "damaged_max_bytes")) {
		if (parse_size(value, &u) < 0 || u < (64 << 10))
			return BAD("expected a size of at least 64K");
		c->spool_damaged_max = u;
		return 0;
	}
	if (IS("spool", "billing_reserve")) {
		if (parse_size(value, &u) < 0 || u < (64 << 10))
			return BAD("expected a size of at least 64K");
		c->spool_billing_reserve = u;
		return 0;
	}
	return CONFIG_UNKNOWN;
}

/* A node label list: "k=v" pairs, comma separated, keys non-empty and distinct, names of
 * printable ASCII without '=' or ',' (a value may be empty). */
static bool node_labels_valid(const char *v)
{
	_cleanup_free_ char *dup = strdup(v);
	char *save = NULL, *seen[64];
	size_t n = 0;

	if (!dup)
		return false;
	for (const char *p = v; *p; p++)
		if (*p <= ' ' || *p > '~')
			return false;
	for (char *kv = strtok_r(dup, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(kv, '=');

		if (!eq || eq == kv || strchr(eq + 1, '=') || eq - kv >= 128 || strlen(eq) > 128 ||
		    n == ARRAY_SIZE(seen))
			return false;
		*eq = 0;
		for (size_t i = 0; i < n; i++)
			if (strcmp(seen[i], kv) == 0)
				return false;
		seen[n++] = kv;
	}
	return true;
}

static int config_set_node(struct agent_config *c, const char *section, const char *key,
			   const char *value, char *err, size_t errlen)
{
	if (IS("node", "price_class")) {
		size_t len = strlen(value);

		if (len == 0 || len > 63)
			return BAD("expected 1-63 characters");
		for (const char *p = value; *p; p++)
			if (!(isalnum((unsigned char)*p) || strchr("._-", *p)))
				return BAD("expected letters, digits, '.', '_' or '-'");
		return set_str(&c->node_price_class, value);
	}
	if (IS("node", "labels")) {
		if (!node_labels_valid(value))
			return BAD("expected key=value pairs separated by commas (distinct keys, "
				   "no spaces, at most 64)");
		return set_str(&c->node_labels, value);
	}
	if (IS("energy", "powercap_root")) {
		if (value[0] != '/')
			return BAD("expected an absolute path");
		return set_str(&c->energy_powercap_root, value);
	}
	return CONFIG_UNKNOWN;
}

#undef IS
#undef BAD

/* open_memstream of the settings applied while a trace is on (config_trace_begin) */
static FILE *trace_f;
static char *trace_buf;
static size_t trace_len;

int config_trace_begin(void)
{
	free(config_trace_end());
	trace_f = open_memstream(&trace_buf, &trace_len);
	return trace_f ? 0 : -ENOMEM;
}

char *config_trace_end(void)
{
	char *t;

	if (!trace_f)
		return NULL;
	if (fclose(trace_f) != 0) {
		free(trace_buf);
		trace_buf = NULL;
	}
	trace_f = NULL;
	t = trace_buf;
	trace_buf = NULL;
	return t;
}

/* The line after l's (its end when l's is the last). */
static const char *line_next(const char *l)
{
	const char *nl = strchrnul(l, '\n');

	return nl + (*nl != 0);
}

/* The next line at or after *t that sets key (klen bytes: "[section] key"): its value (up to
 * its newline), *t moved past that line; NULL at the trace's end. */
static const char *trace_next(const char **t, const char *key, size_t klen)
{
	while (**t) {
		const char *l = *t;

		*t = line_next(l);
		if (strncmp(l, key, klen) == 0 && strncmp(l + klen, " = ", 3) == 0)
			return l + klen + 3;
	}
	return NULL;
}

/* Whether two values from trace_next (either may be NULL) are the same. */
static bool value_same(const char *va, const char *vb)
{
	if (!va || !vb)
		return !va && !vb;
	return strchrnul(va, '\n') - va == strchrnul(vb, '\n') - vb &&
	       strncmp(va, vb, (size_t)(strchrnul(va, '\n') - va)) == 0;
}

/* Whether the lines of trace a and trace b that set key (klen bytes: "[section] key") give it
 * the same value: the last one (a flag after the file's line wins), or for a list (list) the
 * same values in the same order. */
static bool trace_same(const char *a, const char *b, const char *key, size_t klen, bool list)
{
	const char *va, *vb;

	if (!list) {
		const char *la = NULL, *lb = NULL;

		while ((va = trace_next(&a, key, klen)))
			la = va;
		while ((vb = trace_next(&b, key, klen)))
			lb = vb;
		return value_same(la, lb);
	}
	do {
		va = trace_next(&a, key, klen);
		vb = trace_next(&b, key, klen);
		if (!value_same(va, vb))
			return false;
	} while (va);
	return true;
}

static void list_add(char *list, size_t len, const char *key, size_t klen)
{
	size_t l = strlen(list);

	snprintf(list + l, len - l, "%s%.*s", l ? ", " : "", (int)klen, key);
}

/* Whether a line of traces[t] before l, or of an earlier trace, sets l's key (klen bytes). */
static bool key_met_before(const char *const traces[2], int t, const char *l, size_t klen)
{
	for (int u = 0; u <= t; u++) {
		const char *m = traces[u], *v = trace_next(&m, l, klen);

		if (v && (u < t || v - klen - 3 < l))
			return true;
	}
	return false;
}

static bool name_in(const char *const *names, const char *name)
{
	for (size_t i = 0; names && names[i]; i++)
		if (strcmp(names[i], name) == 0)
			return true;
	return false;
}

void config_trace_diff(const char *old, const char *new, const char *const *live, char *ret_live,
		       size_t live_len, char *ret_restart, size_t restart_len)
{
	const char *traces[2] = {old ?: "", new ?: ""};

	ret_live[0] = ret_restart[0] = 0;
	for (int t = 0; t < 2; t++) {
		for (const char *l = traces[t]; *l; l = line_next(l)) {
			const char *eq = strstr(l, " = "), *sp = strchr(l, ' ');
			char name[128];
			size_t klen;

			if (!eq || eq > strchrnul(l, '\n') || l[0] != '[' || !sp)
				continue;
			klen = (size_t)(eq - l);
			/* each key once: where either trace first sets it */
			if (key_met_before(traces, t, l, klen))
				continue;
			/* "[section] key" -> "section.key" */
			snprintf(name, sizeof(name), "%.*s.%.*s", (int)(sp - l - 2), l + 1,
				 (int)(eq - sp - 1), sp + 1);
			if (trace_same(traces[0], traces[1], l, klen,
				       name_in(config_repeatable_keys, name)))
				continue;
			if (name_in(live, name))
				list_add(ret_live, live_len, l, klen);
			else
				list_add(ret_restart, restart_len, l, klen);
		}
	}
}

int config_set(struct agent_config *c, const char *section, const char *key, const char *value,
	       char *err, size_t errlen)
{
	static int (*const setters[])(struct agent_config *, const char *, const char *,
				      const char *, char *, size_t) = {
	    config_set_agent, config_set_control_metering_sandbox, config_set_audit,
	    config_set_metrics_collector_spool, config_set_node};

	for (size_t i = 0; i < ARRAY_SIZE(setters); i++) {
		int r = setters[i](c, section, key, value, err, errlen);

		if (r != CONFIG_UNKNOWN) {
			if (r >= 0 && trace_f)
				fprintf(trace_f, "[%s] %s = %s\n", section, key, value);
			return r;
		}
	}
	return err_set(err, errlen, -EINVAL, "[%s] %s: unknown key", section, key);
}

static int config_set_cb(void *user, const char *section, const char *key, const char *value,
			 char *err, size_t errlen)
{
	return config_set(user, section, key, value, err, errlen);
}

/* keys whose every line adds an item */
const char *const config_repeatable_keys[] = {"collector.url", NULL};

int config_load(struct agent_config *c, const char *path, char *err, size_t errlen)
{
	return ini_file_load(path, config_set_cb, c, config_repeatable_keys, err, errlen);
}

/* A directory the agent creates if missing: only something else in its place is an error. */
static int check_dir_or_absent(const char *what, const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (!path || stat(path, &st) < 0) {
		if (!path || errno == ENOENT)
			return 0;
		return err_set(err, errlen, -errno, "%s %s: %s", what, path, strerror(errno));
	}
	if (!S_ISDIR(st.st_mode))
		return err_set(err, errlen, -ENOTDIR, "%s %s: not a directory", what, path);
	return 0;
}

int config_read_token(const char *path, char **ret, size_t *ret_len, char *err, size_t errlen)
{
	static const char what[] = "[collector] token_file";
	_cleanup_close_ int fd = open_regular(path);
	_cleanup_free_ char *token = NULL;
	size_t len = 0;
	int r;

	if (fd < 0)
		return err_set(err, errlen, fd, "%s %s: %s", what, path, regular_file_strerror(fd));
	r = secret_fd_check(fd, what, path, err, errlen);
	if (r < 0)
		return r;
	r = read_fd(fd, 4096, &token, &len);
	if (r < 0)
		return err_set(err, errlen, r, "%s %s: %s", what, path,
			       r == -EFBIG ? "larger than 4096 bytes" : strerror(-r));
	while (len > 0 &&
	       (token[len - 1] == '\n' || token[len - 1] == ' ' || token[len - 1] == '\r'))
		token[--len] = 0;
	if (len == 0)
		return err_set(err, errlen, -EINVAL, "%s %s: empty", what, path);
	*ret = TAKE_PTR(token);
	*ret_len = len;
	return 0;
}

int config_check_key(const char *path, char *err, size_t errlen)
{
	static const char what[] = "[collector] client_key";
	_cleanup_close_ int fd = open_regular(path);

	if (fd < 0)
		return err_set(err, errlen, fd, "%s %s: %s", what, path, regular_file_strerror(fd));
	return secret_fd_check(fd, what, path, err, errlen);
}

int config_check_files(const struct agent_config *c, char *err, size_t errlen)
{
	struct sbx_filter *f = NULL;
	char sub[512];
	int fd, r;

	if (c->token_file) {
		_cleanup_free_ char *token = NULL;
		size_t len = 0;

		r = config_read_token(c->token_file, &token, &len, err, errlen);
		if (token)
			explicit_bzero(token, len);
		if (r < 0)
			return r;
	}
	{
		const char *files[][2] = {{"ca_file", c->ca_file}, {"client_cert", c->client_cert}};

		for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
			if (!files[i][1])
				continue;
			fd = open_regular(files[i][1]);
			if (fd < 0)
				return err_set(err, errlen, fd, "[collector] %s %s: %s",
					       files[i][0], files[i][1], regular_file_strerror(fd));
			close(fd);
		}
	}
	if (c->client_key) {
		r = config_check_key(c->client_key, err, errlen);
		if (r < 0)
			return r;
	}
	r = check_dir_or_absent("[agent] state_dir", c->state_dir, err, errlen);
	if (r < 0)
		return r;
	r = check_dir_or_absent("[agent] runtime_dir", c->runtime_dir, err, errlen);
	if (r < 0)
		return r;
	r = check_dir_or_absent("[agent] seccomp_dir", c->seccomp_dir, err, errlen);
	if (r < 0)
		return r;
	/* the default profile compiles, as every task without --seccomp will need it */
	r = sbx_profile_load(c->seccomp_default, c->seccomp_dir, &f, sub, sizeof(sub));
	if (r < 0)
		return err_set(err, errlen, r, "[agent] seccomp_default %s: %s", c->seccomp_default,
			       sub[0] ? sub : strerror(-r));
	sbx_filter_free(f);
	return 0;
}
