/* SPDX-License-Identifier: MIT */
/*
 * corrald: the per-node agent. One thread, one epoll loop over: signalfd, a 250 ms tick
 * (limits, samples, watchdog), the control socket and its connections, each task's shim status
 * pipe (or pidfd after re-adoption), the metering ring buffer, the uploader and metrics fds.
 */
#include "agent/agent.h"
#include "corral_version.h"
#include "agent/users.h"
#include "agent/sandbox.h"
#include "isolation/launch.h"
#include "agent/gpu_glue.h"
#include "agent/hooks.h"
#include "agent/log.h"
#include "agent/node_sample.h"
#include "agent/loop.h"
#include "agent/profiles.h"
#include "agent/spawner.h"
#include "agent/task.h"
#include "agent/state.h"
#include "agent/cgpool.h"
#include "agent/adopt.h"
#include "agent/scope.h"
#include "agent/control.h"
#include "agent/taskstats_glue.h"
#include "agent/audit_glue.h"
#include "accounting/spool.h"
#include "bpf/print.h"
#include "bpf/audit.h"
#include "bpf/meter.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/proc.h"
#include "isolation/cgroup.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#define TICK_NS	       (250 * 1000 * 1000ULL)
#define DEFAULT_CONFIG "/etc/corral/corrald.conf"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: corrald [OPTIONS]\n"
	    "Per-node agent: runs tasks in cgroups and seccomp sandboxes, meters them and\n"
	    "streams accounting records to corral-collector.\n\n"
	    "  -c, --config FILE        configuration file (default " DEFAULT_CONFIG ")\n"
	    "      --node NAME          node name in records (default: hostname)\n"
	    "      --socket PATH        control socket (default /run/corral/corrald.sock)\n"
	    "      --state-dir DIR      state directory (default /var/lib/corral)\n"
	    "      --runtime-dir DIR    live-task files (default: the state directory)\n"
	    "      --collector-url URL  collector base URL (enables the uploader); several,\n"
	    "                           space-separated, for failover; replaces [collector] url\n"
	    "      --token-file FILE    bearer token for the collector\n"
	    "      --metrics-listen A:P serve Prometheus /metrics on this address\n"
	    "      --max-tasks N        maximum concurrent tasks\n"
	    "      --cgroup-subtree N   name of the agent's cgroup subtree (default corral)\n"
	    "      --sample-interval D  task.sample interval (default 30s, minimum 1s)\n"
	    "      --kill-grace D       time between SIGTERM and SIGKILL on limits (default 10s)\n"
	    "      --no-bpf             no BPF programs: meter from cgroup files and taskstats\n"
	    "      --no-taskstats       without BPF, do not use taskstats exit records either\n"
	    "      --cpu-accounting M   exit (default) or switch: when BPF folds each thread's "
	    "CPU\n"
	    "      --log-level L        debug|info|notice|warning|err\n"
	    "  -h, --help               this help\n"
	    "  -V, --version            print the version and exit\n\n"
	    "Exit status: 0 after a clean stop, 1 when it could not start, 2 on a bad option\n"
	    "or configuration (the message names the file and line).\n");
}

static const struct option opts[] = {{"config", required_argument, NULL, 'c'},
				     {"node", required_argument, NULL, 'n'},
				     {"socket", required_argument, NULL, 's'},
				     {"state-dir", required_argument, NULL, 'S'},
				     {"runtime-dir", required_argument, NULL, 'R'},
				     {"collector-url", required_argument, NULL, 'u'},
				     {"token-file", required_argument, NULL, 't'},
				     {"metrics-listen", required_argument, NULL, 'm'},
				     {"max-tasks", required_argument, NULL, 'M'},
				     {"cgroup-subtree", required_argument, NULL, 'g'},
				     {"sample-interval", required_argument, NULL, 'i'},
				     {"kill-grace", required_argument, NULL, 'k'},
				     {"no-bpf", no_argument, NULL, 'B'},
				     {"no-taskstats", no_argument, NULL, 'T'},
				     {"cpu-accounting", required_argument, NULL, 'C'},
				     {"log-level", required_argument, NULL, 'l'},
				     {"help", no_argument, NULL, 'h'},
				     {"version", no_argument, NULL, 'V'},
				     {}};
/* ':' first: a missing argument is told apart from an unknown option */
#define OPTSTRING ":c:hV"

/* The command line, kept for a reload (SIGHUP reads the file and applies the flags again). */
static int saved_argc;
static char **saved_argv;

/* One line for a bad option (getopt's own messages are off), and a hint. */
static void bad_option(int c, char **argv)
{
	const char *arg = argv[optind - 1];

	if (c == ':')
		fprintf(stderr, "corrald: option %s needs an argument; try --help\n", arg);
	else if (optopt)
		fprintf(stderr, "corrald: unknown option -%c; try --help\n", optopt);
	else
		fprintf(stderr, "corrald: unknown option %s; try --help\n", arg);
}

/* The flag c as a config key (section, key, value); false for one that is not a key. */
static bool flag_key(int c, const char **sec, const char **key, const char **val)
{
	static const struct {
		int c;
		const char *sec, *key, *val;
	} map[] = {
	    {'n', "agent", "node", NULL},
	    {'s', "agent", "socket", NULL},
	    {'S', "agent", "state_dir", NULL},
	    {'R', "agent", "runtime_dir", NULL},
	    {'u', "collector", "urls", NULL},
	    /* replaces the file's list */ {'t', "collector", "token_file", NULL},
	    {'m', "metrics", "listen", NULL},
	    {'M', "agent", "max_tasks", NULL},
	    {'g', "agent", "cgroup_subtree", NULL},
	    {'i', "agent", "sample_interval", NULL},
	    {'k', "agent", "kill_grace", NULL},
	    {'B', "metering", "bpf", "off"},
	    {'T', "metering", "taskstats", "no"},
	    {'C', "metering", "cpu_accounting", NULL},
	    {'l', "agent", "log_level", NULL},
	};

	for (size_t i = 0; i < ARRAY_SIZE(map); i++)
		if (map[i].c == c) {
			*sec = map[i].sec;
			*key = map[i].key;
			*val = map[i].val ? map[i].val : optarg;
			return true;
		}
	return false;
}

/*
 * The configuration: defaults, then the file (--config, or DEFAULT_CONFIG when it exists),
 * then the flags. Fills cfg (which the caller frees, also on failure) and *ret_path (NULL when
 * the default file is absent). Prints its error; returns 0 or a negative errno.
 */
static int read_config(struct agent_config *cfg, const char **ret_path)
{
	char err[1024];
	const char *config = NULL;
	int c, r;

	/* First pass: the config file, so that flags override it. */
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(saved_argc, saved_argv, OPTSTRING, opts, NULL)) != -1)
		if (c == 'c')
			config = optarg;
	optind = 1;
	config_init_defaults(cfg);
	r = config_load(cfg, config ? config : DEFAULT_CONFIG, err, sizeof(err));
	if (r < 0 && !(r == -ENOENT && !config)) {
		fprintf(stderr, "corrald: %s\n", err);
		return r;
	}
	*ret_path = r == -ENOENT ? NULL : config ? config : DEFAULT_CONFIG;
	while ((c = getopt_long(saved_argc, saved_argv, OPTSTRING, opts, NULL)) != -1) {
		const char *sec, *key, *val;

		if (c == 'c')
			continue;
		if (c == 'h') {
			usage(stdout);
			exit(0);
		}
		if (c == 'V') {
			printf("corrald %s\n", CORRAL_VERSION);
			exit(0);
		}
		if (!flag_key(c, &sec, &key, &val)) {
			bad_option(c, saved_argv);
			return -EINVAL;
		}
		r = config_set(cfg, sec, key, val, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "corrald: --%s\n", err);
			return r;
		}
	}
	if (optind < saved_argc) {
		fprintf(stderr, "corrald: unexpected argument \"%s\"; try --help\n",
			saved_argv[optind]);
		return -EINVAL;
	}
	return 0;
}

static int load_config(struct agent *a, int argc, char **argv)
{
	static char abs_path[4096];
	const char *path = NULL;
	char err[1024];
	int r;

	saved_argc = argc;
	saved_argv = argv;
	config_trace_begin();
	r = read_config(&a->cfg, &path);
	a->config_trace = config_trace_end();
	if (r < 0)
		return r;
	/* Absolute, so that the reload and the messages name the file in use whatever the
	 * directory, and the sandbox can hide it from tasks. */
	if (path && realpath(path, abs_path))
		path = abs_path;
	a->config_path = path;
	/* Every file the configuration names, before anything is loaded. */
	r = config_check_files(&a->cfg, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "corrald: %s (configuration: %s and the command line)\n", err,
			path ? path : "defaults");
		return r;
	}
	return 0;
}

static uint64_t read_mem_total(void)
{
	_cleanup_free_ char *s = NULL;
	unsigned long long kb = 0;
	char *p;

	if (read_file("/proc/meminfo", 1 << 16, &s, NULL) < 0)
		return 0;
	p = strstr(s, "MemTotal:");
	if (p && sscanf(p, "MemTotal: %llu kB", &kb) == 1)
		return kb * 1024;
	return 0;
}

static void reap_children(void)
{
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/* The keys a reload applies at once (reload_apply); a change of any other waits for a restart.
 * The [collector] ones first (reload_after_upload): applied by a new uploader, or left for a
 * restart when it cannot be made (its token file refused). */
static const char *const reload_live_keys[] = {"collector.url",
					       "collector.urls",
					       "collector.token_file",
					       "collector.ca_file",
					       "collector.pin",
					       "collector.client_cert",
					       "collector.client_key",
					       "collector.failover_after",
					       "collector.failback",
					       "collector.connect_timeout",
					       "collector.request_timeout",
					       "collector.batch_records",
					       "collector.batch_delay",
					       "collector.compress",
					       "agent.max_tasks",
					       "agent.reserve_memory",
					       "agent.reserve_cpus",
					       "agent.kill_grace",
					       "agent.sample_interval",
					       "agent.sample_unchanged",
					       "agent.log_level",
					       "metrics.tasks",
					       "metrics.tasks_max",
					       NULL};

/* Path p, a secret's that a reload replaced, kept in a->secrets_before (once). */
static void secret_keep_hidden(struct agent *a, const char *p)
{
	char **v;

	if (!p)
		return;
	for (size_t i = 0; i < a->n_secrets_before; i++)
		if (strcmp(a->secrets_before[i], p) == 0)
			return;
	v = reallocarray(a->secrets_before, a->n_secrets_before + 1, sizeof(*v));
	if (!v || !(v[a->n_secrets_before] = strdup(p))) {
		if (v)
			a->secrets_before = v;
		log_warning("reload: no memory to keep %s hidden from tasks", p);
		return;
	}
	a->secrets_before = v;
	a->n_secrets_before++;
}

/* The live keys past the leading [collector] ones (counted, not a number kept beside the list). */
static const char *const *reload_after_upload(void)
{
	const char *const *k = reload_live_keys;

	while (*k && strncmp(*k, "collector.", strlen("collector.")) == 0)
		k++;
	return k;
}

/* The [collector] settings of nc into the agent's (the new uploader's, for status and the
 * sandbox); a token file or client key they replace stays hidden from tasks. */
static void reload_take_upload(struct agent *a, struct agent_config *nc)
{
	struct agent_config *c = &a->cfg;
	char **strs[][2] = {{&c->collector_url, &nc->collector_url},
			    {&c->token_file, &nc->token_file},
			    {&c->ca_file, &nc->ca_file},
			    {&c->pin, &nc->pin},
			    {&c->client_cert, &nc->client_cert},
			    {&c->client_key, &nc->client_key}};

	if (!streq_ptr(c->token_file, nc->token_file))
		secret_keep_hidden(a, c->token_file);
	if (!streq_ptr(c->client_key, nc->client_key))
		secret_keep_hidden(a, c->client_key);
	for (size_t i = 0; i < ARRAY_SIZE(strs); i++) {
		free(*strs[i][0]);
		*strs[i][0] = *strs[i][1];
		*strs[i][1] = NULL;
	}
	c->failover_after = nc->failover_after;
	c->failback_ns = nc->failback_ns;
	c->upload_connect_timeout_ns = nc->upload_connect_timeout_ns;
	c->upload_timeout_ns = nc->upload_timeout_ns;
	c->batch_records = nc->batch_records;
	c->batch_delay_ns = nc->batch_delay_ns;
	c->upload_zstd = nc->upload_zstd;
}

/* SIGHUP: takes the live keys' values from nc and says what changed; a key changed that only
 * a restart applies is named as such (a reload that said "reloaded" and left it as it was
 * would mislead). trace: nc's settings (config_trace_end), kept as those in force. */
static void reload_apply(struct agent *a, struct agent_config *nc, char *trace)
{
	char live[1024], restart[1024];
	bool upl_ok;
	int lvl;

	/* Limits and policies that are safe to change live. */
	a->cfg.max_tasks = nc->max_tasks;
	a->cfg.reserve_memory = nc->reserve_memory;
	a->cfg.reserve_cpus = nc->reserve_cpus;
	a->cfg.kill_grace_ns = nc->kill_grace_ns;
	a->cfg.sample_interval_ns = nc->sample_interval_ns;
	a->cfg.sample_unchanged_listed = nc->sample_unchanged_listed;
	a->cfg.sample_unchanged_stated = nc->sample_unchanged_stated;
	a->cfg.metrics_tasks = nc->metrics_tasks;
	a->cfg.metrics_tasks_max = nc->metrics_tasks_max;
	lvl = log_level_from_string(nc->log_level);
	log_set_max_level(lvl < 0 ? LOG_INFO : lvl);
	free(a->cfg.log_level);
	a->cfg.log_level = nc->log_level;
	nc->log_level = NULL;

	/* the uploader of the new [collector] settings, its token file read again */
	upl_ok = agent_upl_reload(a, nc) == 0;
	if (upl_ok)
		reload_take_upload(a, nc);
	config_trace_diff(a->config_trace, trace, upl_ok ? reload_live_keys : reload_after_upload(),
			  live, sizeof(live), restart, sizeof(restart));
	/* the settings now in force; while a change waits for a restart, those before it (so
	 * that the next reload still names it) */
	if (trace && !restart[0]) {
		free(a->config_trace);
		a->config_trace = trace;
	} else {
		free(trace);
	}
	if (a->config_path)
		log_notice("configuration reloaded from %s%s%s", a->config_path,
			   live[0] ? "; applied: " : "", live);
	else
		log_notice("configuration reloaded (no file: %s is absent; defaults and the "
			   "command line)%s%s",
			   DEFAULT_CONFIG, live[0] ? "; applied: " : "", live);
	if (restart[0])
		log_warning("changed but not applied until corrald restarts: %s", restart);
}

static void on_signal(void *data, int fd, uint32_t events)
{
	struct agent *a = data;
	struct signalfd_siginfo si;

	while (read(a->sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		switch (si.ssi_signo) {
		case SIGTERM:
		case SIGINT:
			log_notice("received %s: stopping (tasks keep running and are re-adopted "
				   "on the next start)",
				   si.ssi_signo == SIGTERM ? "SIGTERM" : "SIGINT");
			a->quit = true;
			break;
		case SIGHUP: {
			struct agent_config nc;
			const char *path = NULL;
			char *trace;
			int r;

			/* The same file and flags as at the start (read_config prints its error,
			 * which goes to the journal too). */
			config_trace_begin();
			r = read_config(&nc, &path);
			trace = config_trace_end();
			if (r < 0) {
				free(trace);
				log_error("reload of %s failed: %s (keeping the running "
					  "configuration)",
					  a->config_path ? a->config_path : "the configuration",
					  strerror(-r));
				config_free(&nc);
				break;
			}
			if (!a->config_path && path)
				a->config_path = path; /* DEFAULT_CONFIG appeared */
			reload_apply(a, &nc, trace);
			config_free(&nc);
			break;
		}
		case SIGCHLD:
			reap_children();
			break;
		default:
			break;
		}
	}
}

static void on_meter_event(const struct meter_event *ev, void *userdata)
{
	/* Exits are reported by the shim; a task waiting for its threads' final figures may end
	 * now. */
	if (ev->type == METER_EV_SETTLED)
		task_on_meter_settled(userdata, ev->task_key);
	else if (ev->type == METER_EV_OOM_VICTIM)
		task_on_oom_victim(userdata, ev->task_key, ev->pid);
}

static void on_meter_fd(void *data, int fd, uint32_t events)
{
	struct agent *a = data;

	if (a->meter)
		(void)meter_poll(a->meter, on_meter_event, a);
}

/* Every TICK_NS: limits, samples, timeouts, the watchdog. */
static void on_tick(void *data, int fd, uint32_t events)
{
	struct agent *a = data;
	uint64_t exp;

	(void)!read(a->tickfd, &exp, sizeof(exp));
	/* exit events come without a wakeup (meter.h) */
	if (a->meter)
		(void)meter_poll(a->meter, on_meter_event, a);
	task_tick(a, now_ns(CLOCK_MONOTONIC));
	audit_glue_tick(a, now_ns(CLOCK_MONOTONIC));
	audit_glue_addrs_tick(a);
	agent_hooks_tick(a, now_ns(CLOCK_MONOTONIC));
	control_tick(a, now_ns(CLOCK_MONOTONIC));
	state_tick(a, now_ns(CLOCK_MONOTONIC));
	node_sample_tick(a, now_ns(CLOCK_MONOTONIC));
	if (a->watchdog)
		sd_notify(0, "WATCHDOG=1");
}

/*
 * The network programs (metering, audit policy) go once on the parent of every task cgroup
 * instead of on each task's: that saves six program attaches per launch. On failure the
 * loaders attach per task as before.
 */
static void attach_cgroup_root(struct agent *a)
{
	int fd = a->cg ? cg_root_unified_fd(a->cg) : -1;
	int r;

	if (fd < 0)
		return;
	if (a->meter && (r = meter_attach_cgroup_root(a->meter, fd)) < 0)
		log_warning("metering: attaching network programs to the tasks' parent cgroup "
			    "failed (%s): attaching per task",
			    strerror(-r));
	if (a->audit && (r = audit_attach_cgroup_root(a->audit, fd)) < 0)
		log_warning("audit: attaching network policy to the tasks' parent cgroup failed "
			    "(%s): attaching per task",
			    strerror(-r));
}

/* The agent's cgroup subtree. Under systemd with Delegate=yes on v2 the agent's own cgroup is
 * the delegated one. */
static int setup_cgroups(struct agent *a)
{
	struct cg_root_opts cgo = {.subtree = a->cfg.cgroup_subtree,
				   .force_mode = _CG_MODE_INVALID};
	_cleanup_free_ char *self = NULL;
	const char *scope = NULL;
	char *line;
	int r;

	r = scope_setup(a, &scope);
	if (r < 0)
		return r;
	if (scope) {
		cgo.v2_base = scope;
		cgo.subtree = "tasks";
	} else if (read_file("/proc/self/cgroup", 1 << 16, &self, NULL) == 0 &&
		   (line = strstr(self, "0::/")) && getenv("INVOCATION_ID")) {
		char *nl = strchr(line, '\n');

		if (nl)
			*nl = 0;
		cgo.v2_base = line + 3;
	}
	/* Tests only: v2 mode on the unified hierarchy of a v1 hybrid host (no controller there,
	 * so no limits), where the meter accounts at exit and the VM's kernel does not. */
	if (getenv("CORRAL_TEST_CGROUP_V2_ROOT")) {
		cgo.fs_root = getenv("CORRAL_TEST_CGROUP_V2_ROOT");
		cgo.force_mode = CG_MODE_V2;
	}
	r = cg_root_open(&cgo, &a->cg);
	if (r < 0) {
		log_error("cgroups: cannot set up the agent's subtree \"%s\": %s (is the "
			  "cgroup filesystem mounted and writable, and Delegate=yes set?)",
			  a->cfg.cgroup_subtree, strerror(-r));
		return r;
	}
	if (cgo.v2_base && !scope && cg_root_mode(a->cg) == CG_MODE_V2) {
		r = cg_root_move_self(a->cg, "agent");
		if (r < 0)
			log_warning("cgroups: could not move the agent into its own leaf: %s",
				    strerror(-r));
	}
	log_info("cgroups: %s mode%s", cg_mode_to_string(cg_root_mode(a->cg)),
		 cg_root_has_unified(a->cg) ? ", unified hierarchy available for BPF" : "");
	return 0;
}

/* The meter's source of the tasks' CPU time as a whole (meter_set_cpu_source): the subtree's
 * cpuacct.usage (v1) or cpu.stat usage_usec (v2, where the subtree holds only task cgroups: the
 * scope's tasks/ under systemd), charged for every task's threads; none where the agent's own
 * leaf is in the subtree (v2 without the scope): there every live read walks. */
static int subtree_cpu(void *ctx, uint64_t *ret_ns)
{
	return cg_root_cpu_usage(ctx, ret_ns);
}

/* What the start line says of live reads: how they skip the walk of the node's threads. */
static void live_reads_say(const struct agent *a, char *buf, size_t size)
{
	const char *mode = meter_live_mode(a->meter);

	if (!mode)
		snprintf(buf, size, "not needed");
	else if (!a->cpu_source)
		snprintf(buf, size, "%s, walking at every read", mode);
	else
		snprintf(buf, size, "%s, skipped while the subtree's %s stays (%s)", mode,
			 a->cpu_source, a->cpu_source_res_ns > 1 ? "microseconds" : "nanoseconds");
}

/* The BPF meter, unless [metering] bpf = off; its failure leaves the cgroup files. */
static void setup_meter(struct agent *a)
{
	int r;

	if (a->cfg.bpf != BPF_MODE_OFF) {
		struct meter_opts mo = {.max_tasks = a->cfg.max_tasks,
					.force_raw_tp = a->cfg.bpf == BPF_MODE_RAW_TP,
					.cpu_at_switch = a->cfg.cpu_at_switch};
		static char why[128];
		char live[160];

		/* Tests only: a 16-entry map of exited threads that nothing drains before a task's
		 * end, to check that its overflow makes the record take its CPU from the cgroup. */
		if (getenv("CORRAL_TEST_METER_NO_DRAIN")) {
			mo.max_dying = 16;
			mo.no_drain = true;
		}
		r = meter_open(&mo, &a->meter);
		if (r < 0) {
			snprintf(why, sizeof(why), "failed: %s", strerror(-r));
			a->meter_state = why;
			log_warning("BPF metering unavailable (%s): metering from cgroup files%s",
				    strerror(-r), a->cfg.taskstats ? " and taskstats" : "");
			a->meter = NULL;
		} else {
			a->meter_state = meter_attach_mode(a->meter);
			if (meter_live_mode(a->meter) &&
			    cg_root_cpu_usage(a->cg, &(uint64_t){0}) == 0)
				a->cpu_source =
				    cg_root_cpu_usage_source(a->cg, &a->cpu_source_res_ns);
			if (a->cpu_source)
				meter_set_cpu_source(a->meter, subtree_cpu, a->cg);
			loop_add(a->loop, meter_fd(a->meter), EPOLLIN, on_meter_fd, a);
			live_reads_say(a, live, sizeof(live));
			log_info("BPF metering loaded (%s, CPU and IO accounted at %s, live reads "
				 "%s, changes %s, OOM victims %s)",
				 a->meter_state, meter_cpu_accounting(a->meter), live,
				 meter_marks(a->meter) ? "marked" : "not marked",
				 meter_oom_mode(a->meter) ? meter_oom_mode(a->meter)
							  : "from cgroup notifications only");
			if (!a->cfg.cpu_at_switch && strcmp(meter_cpu_accounting(a->meter), "exit"))
				log_notice("BPF metering: accounting at exit needs tp_btf programs "
					   "with task kfuncs (Linux 6.2+); CPU is accounted at "
					   "every context switch instead");
		}
	} else {
		a->meter_state = "off";
	}
}

/*
 * Descriptors: a running task holds one here (its status pipe; a GPU task or one with network
 * rules a few more, and any task its cgroup's for the moment they are read), a starting one
 * about 16 until it runs; the rest is the agent's own (BPF maps and programs, control
 * connections, the spool, the collector). The soft limit is raised, up to the hard one, to
 * what max_tasks needs, and a hard limit below that is said once at start.
 */
#define FDS_PER_TASK 4
#define FDS_AGENT    1024
static void fd_limit_setup(struct agent *a)
{
	rlim_t need = (rlim_t)a->cfg.max_tasks * FDS_PER_TASK + FDS_AGENT;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= need)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < need)
		log_warning("descriptors: the limit is %llu, max_tasks %u needs %llu (%d per task "
			    "and %d): raise the hard limit (LimitNOFILE= in the unit)",
			    (unsigned long long)rl.rlim_cur, a->cfg.max_tasks,
			    (unsigned long long)need, FDS_PER_TASK, FDS_AGENT);
}

static int setup(struct agent *a)
{
	struct itimerspec its = {.it_interval = {0, (long)TICK_NS}, .it_value = {0, (long)TICK_NS}};
	sigset_t mask;
	int r;

	a->listenfd = a->sigfd = a->tickfd = a->syscalls_inotify_fd = a->oom_inotify_fd = -1;
	r = loop_new(&a->loop);
	if (r < 0)
		return r;
	sigemptyset(&mask);
	sigaddset(&mask, SIGTERM);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGHUP);
	sigaddset(&mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	signal(SIGPIPE, SIG_IGN);
	a->sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	a->tickfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (a->sigfd < 0 || a->tickfd < 0 || timerfd_settime(a->tickfd, 0, &its, NULL) < 0)
		return -errno;
	loop_add(a->loop, a->sigfd, EPOLLIN, on_signal, a);
	loop_add(a->loop, a->tickfd, EPOLLIN, on_tick, a);

	if (read_boot_id(a->boot_id) < 0)
		snprintf(a->boot_id, sizeof(a->boot_id), "unknown-boot-id-000000000000000000");
	a->mem_total = read_mem_total();
	a->ncpus = (uint32_t)sysconf(_SC_NPROCESSORS_ONLN);
	fd_limit_setup(a);

	r = mkdir_p(a->cfg.state_dir, 0700);
	if (r < 0) {
		log_error("state directory %s: %s", a->cfg.state_dir, strerror(-r));
		return r;
	}
	r = state_init_counters(a);
	if (r < 0) {
		log_error("state directory %s: cannot write counters: %s", a->cfg.state_dir,
			  strerror(-r));
		return r;
	}

	r = setup_cgroups(a);
	if (r < 0)
		return r;
	/* After the cgroup move: the spawner and its shims start in the agent's leaf. */
	agent_spawner_start(a);

	setup_meter(a);

	r = tsglue_init(a);
	if (r < 0)
		return r;
	r = audit_glue_init(a);
	if (r < 0)
		return r;
	if (a->cfg.sandbox_mount_ns) {
		a->sandbox_unsupported = sandbox_probe();
		if (a->sandbox_unsupported)
			log_warning(
			    "sandbox: tasks cannot have their own mount namespace here: %s; "
			    "tasks that ask for it (the default) are refused until [sandbox] "
			    "mount_namespace = no",
			    a->sandbox_unsupported);
	}
	a->landlock_abi = launch_landlock_abi();
	if (a->cfg.sandbox_landlock && a->landlock_abi < 0)
		log_warning(
		    "sandbox: [sandbox] landlock = yes, but the kernel offers no Landlock (%s): "
		    "tasks that ask for it are refused",
		    strerror(-a->landlock_abi));
	attach_cgroup_root(a);
	r = gpu_glue_init(a);
	if (r < 0)
		return r;
	r = agent_hooks_init(a);
	if (r < 0)
		return r;
	state_load_audit_head(a);
	r = adopt_load(a);
	if (r < 0) {
		log_error("loading task state from %s failed: %s", a->cfg.state_dir, strerror(-r));
		return r;
	}
	r = control_listen(a);
	if (r < 0) {
		log_error("control socket %s: %s", a->cfg.socket_path, strerror(-r));
		return r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct agent a = {0};
	uint64_t usec = 0;
	int r, lvl;

	libbpf_set_print(bpf_print_env);
	r = load_config(&a, argc, argv);
	if (r < 0) {
		config_free(&a.cfg);
		free(a.config_trace);
		return 2;
	}
	lvl = log_level_from_string(a.cfg.log_level);
	log_set_max_level(lvl < 0 ? LOG_INFO : lvl);
	if (geteuid() != 0)
		log_warning("not running as root: tasks run as uid %u only, limits may fail",
			    geteuid());
	(void)prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
	r = setup(&a);
	if (r < 0) {
		log_error("corrald could not start (%s, see above): exiting", strerror(-r));
		sd_notifyf(0, "STATUS=Failed to start: %s\nERRNO=%d", strerror(-r), -r);
		/* what setup made so far (each part tolerates not being there) */
		agent_hooks_fini(&a);
		gpu_glue_fini(&a);
		audit_glue_fini(&a);
		tsglue_fini(&a);
		if (a.meter)
			meter_free(a.meter);
		users_free(a.users);
		profile_cache_free(a.profiles);
		launch_spawner_free(a.spawner);
		free(a.spawner_path);
		cg_root_free(a.cg);
		loop_free(a.loop);
		config_free(&a.cfg);
		free(a.config_trace);
		return 1;
	}
	if (node_sample_start(&a, now_ns(CLOCK_MONOTONIC)) == -ENOMEM)
		log_error("node.sample: out of memory");
	task_flush_records(&a);
	if (sd_watchdog_enabled(0, &usec) > 0) {
		a.watchdog = true;
		a.watchdog_usec = usec;
	}
	log_notice("corrald ready: node %s, %u live task(s) re-adopted, socket %s", a.cfg.node,
		   a.n_live, a.cfg.socket_path);
	sd_notifyf(0, "READY=1\nSTATUS=Running: %u task(s), metering %s", a.n_live,
		   a.meter_state ? a.meter_state : "off");

	while (!a.quit) {
		/* idle work (agent/cgpool.c) runs only when no event is waiting */
		bool idle = agent_has_idle_work(&a);
		int n = loop_run_once(a.loop, idle ? 0 : 1000);

		if (n == -EINTR)
			continue;
		if (n < 0) {
			log_error("epoll_wait: %s", strerror(-n));
			break;
		}
		if (n == 0 && agent_has_idle_work(&a))
			agent_idle_work(&a);
		task_flush_records(&a);
	}
	audit_glue_stop(&a);
	node_sample_stop(&a);
	task_flush_records(&a);
	agent_cg_pool_fini(&a);
	if (state_sync_audit_head(&a) < 0)
		log_error("saving the audit chain head failed");
	sd_notify(0, "STOPPING=1\nSTATUS=Stopping");
	control_close_all(&a);
	agent_hooks_fini(&a);
	gpu_glue_fini(&a);
	audit_glue_fini(&a);
	task_oom_watch_fini(&a);
	tsglue_fini(&a);
	/* Tasks keep running: their state files stay for the next start. */
	while (a.tasks) {
		struct task *t = a.tasks;

		a.tasks = t->next;
		task_free(t);
	}
	while (a.ended) {
		struct task *t = a.ended;

		a.ended = t->next;
		task_free(t);
	}
	task_lists_free(&a);
	a.ended_tail = NULL;
	task_ended_ring_free(&a);
	/* the last flush emptied both (and the syncer's stop removed what waited for it) */
	free(a.pend);
	free(a.unlink_stems);
	if (a.meter)
		meter_free(a.meter);
	users_free(a.users);
	profile_cache_free(a.profiles);
	launch_spawner_free(a.spawner);
	free(a.spawner_path);
	cg_root_free(a.cg);
	loop_free(a.loop);
	(void)unlink(a.cfg.socket_path);
	config_free(&a.cfg);
	free(a.config_trace);
	return 0;
}
