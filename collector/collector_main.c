/* SPDX-License-Identifier: MIT */
/*
 * corral-collector: ingest server for accounting records.
 *   corral-collector serve   [--config FILE] [--listen ADDR:PORT] [--db URI] [--tokens FILE]
 *                            [--max-body BYTES] [--max-records N] [--db-connections N]
 *   corral-collector dump    --db URI [--type T] [--node N] [--task ID] [--limit N]
 *                            [--format table|json]
 *   corral-collector migrate --db URI
 *   corral-collector report  --db URI --prices FILE --from DATE --to DATE
 *                            [--by account|user|job|node|label:KEY[,...]]
 *                            [--period day|week|month|all] [--top N] [--format table|csv|json|html]
 *                            [--idle | --share-idle proportional|by-request|to:ACCOUNT]
 *   corral-collector capacity --db URI --prices FILE --from DATE --to DATE
 *                            [--by node|price_class|none] [--period ...] [--format ...]
 */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "accounting/record.h"
#include "collector/audit_cli.h"
#include "collector/capacity.h"
#include "collector/prices.h"
#include "collector/report.h"
#include "collector/server.h"
#include "collector/store.h"
#include "collector/tls.h"
#include "collector/tokens.h"
#include "common/error.h"
#include "common/ini_file.h"
#include "common/macro.h"
#include "corral_version.h"
#include "common/parse.h"

#define DEFAULT_DB	"sqlite:/var/lib/corral/collector.db"
#define DEFAULT_TOKENS	"/etc/corral/collector.tokens"
#define STOP_TIMEOUT_MS 30000

struct options {
	char *config;
	char *listen;
	char *db;
	char *tokens;
	uint64_t max_body;
	uint64_t max_records;
	uint64_t db_connections; /* 0 = default: 1 for SQLite, 4 for PostgreSQL */
	uint64_t fold_delay_ms;
	bool fold_delay_set;
	/* [server] connection handling, 0 = defaults (server.h) */
	uint64_t threads, max_connections, connections_per_ip, connection_timeout;
	bool reuse_port;
	char *tls_cert, *tls_key, *tls_client_ca; /* [server] TLS; NULL = plain HTTP */
	uint64_t retry_after, max_queued;
	bool no_rollups;
	/* dump */
	const char *type, *node, *task;
	uint64_t limit;
	bool json;
	const char *format;
	/* report (and serve: --prices) */
	char *prices;
	const char *from, *to, *by, *period;
	uint64_t top;
	bool idle;
	const char *share_idle;
};

#define FOLD_DELAY_MAX 3600000 /* ms */

static void options_free(struct options *o)
{
	free(o->config);
	free(o->listen);
	free(o->db);
	free(o->tokens);
	free(o->prices);
	free(o->tls_cert);
	free(o->tls_key);
	free(o->tls_client_ca);
}

static int set_str(char **dst, const char *v)
{
	char *n = strdup(v);

	if (!n)
		return -ENOMEM;
	free(*dst);
	*dst = n;
	return 0;
}

/* One config key (common/ini_file.h adds "file:line: " and refuses duplicates). */
static int config_set(void *user, const char *section, const char *name, const char *value,
		      char *err, size_t errlen)
{
	struct options *o = user;
	int r = 0;

	if (strcmp(section, "server") == 0 && strcmp(name, "listen") == 0)
		r = set_str(&o->listen, value);
	else if (strcmp(section, "server") == 0 && strcmp(name, "tokens_file") == 0)
		r = set_str(&o->tokens, value);
	else if (strcmp(section, "server") == 0 && strcmp(name, "max_body") == 0) {
		if (parse_size(value, &o->max_body) < 0 || o->max_body == 0) {
			return err_set(err, errlen, -EINVAL,
				       "[server] max_body: expected a size (\"16M\"), got '%s'",
				       value);
		}
	} else if (strcmp(section, "server") == 0 && strcmp(name, "max_records") == 0) {
		if (parse_u64(value, &o->max_records) < 0 || o->max_records == 0 ||
		    o->max_records > 10000000) {
			return err_set(err, errlen, -EINVAL,
				       "[server] max_records: expected 1..10000000, got '%s'",
				       value);
		}
	} else if (strcmp(section, "server") == 0 &&
		   (strcmp(name, "threads") == 0 || strcmp(name, "max_connections") == 0 ||
		    strcmp(name, "max_connections_per_ip") == 0 ||
		    strcmp(name, "connection_timeout") == 0)) {
		uint64_t v, max = name[0] == 't' ? 256 : name[0] == 'c' ? 3600 : 1000000;

		if (parse_u64(value, &v) < 0 || v == 0 || v > max) {
			return err_set(err, errlen, -EINVAL,
				       "[server] %s: expected 1..%" PRIu64 "%s, got '%s'", name,
				       max, name[0] == 'c' ? " (seconds)" : "", value);
		}
		*(name[0] == 't'			 ? &o->threads
		  : name[0] == 'c'			 ? &o->connection_timeout
		  : strcmp(name, "max_connections") == 0 ? &o->max_connections
							 : &o->connections_per_ip) = v;
	} else if (strcmp(section, "server") == 0 && strcmp(name, "reuse_port") == 0) {
		if (parse_bool(value, &o->reuse_port) < 0)
			return err_set(err, errlen, -EINVAL,
				       "[server] reuse_port: expected true or false, got '%s'",
				       value);
	} else if (strcmp(section, "server") == 0 && strcmp(name, "tls_cert") == 0)
		r = set_str(&o->tls_cert, value);
	else if (strcmp(section, "server") == 0 && strcmp(name, "tls_key") == 0)
		r = set_str(&o->tls_key, value);
	else if (strcmp(section, "server") == 0 && strcmp(name, "tls_client_ca") == 0)
		r = set_str(&o->tls_client_ca, value);
	else if (strcmp(section, "server") == 0 &&
		 (strcmp(name, "retry_after") == 0 || strcmp(name, "max_queued") == 0)) {
		uint64_t v, max = name[0] == 'r' ? 3600 : 1000000;

		if (parse_u64(value, &v) < 0 || v == 0 || v > max)
			return err_set(err, errlen, -EINVAL,
				       "[server] %s: expected 1..%" PRIu64 "%s, got '%s'", name,
				       max, name[0] == 'r' ? " (seconds)" : " (batches)", value);
		*(name[0] == 'r' ? &o->retry_after : &o->max_queued) = v;
	} else if (strcmp(section, "storage") == 0 && strcmp(name, "db") == 0)
		r = set_str(&o->db, value);
	else if (strcmp(section, "storage") == 0 && strcmp(name, "connections") == 0) {
		if (parse_u64(value, &o->db_connections) < 0 || o->db_connections == 0 ||
		    o->db_connections > COLL_INGEST_POOL_MAX) {
			return err_set(err, errlen, -EINVAL,
				       "[storage] connections: expected 1..%d, got '%s'",
				       COLL_INGEST_POOL_MAX, value);
		}
	} else if (strcmp(section, "storage") == 0 && strcmp(name, "fold_delay_ms") == 0) {
		if (parse_u64(value, &o->fold_delay_ms) < 0 || o->fold_delay_ms > FOLD_DELAY_MAX) {
			return err_set(err, errlen, -EINVAL,
				       "[storage] fold_delay_ms: expected 0..%d, got '%s'",
				       FOLD_DELAY_MAX, value);
		}
		o->fold_delay_set = true;
	} else if (strcmp(section, "report") == 0 && strcmp(name, "prices") == 0)
		r = set_str(&o->prices, value);
	else {
		return err_set(err, errlen, -EINVAL, "[%s] %s: unknown key", section, name);
	}
	return r < 0 ? err_set(err, errlen, r, "[%s] %s: %s", section, name, strerror(-r)) : 0;
}

static int load_config(struct options *o, const char *path)
{
	char err[1024];
	int r = ini_file_load(path, config_set, o, NULL, err, sizeof(err));

	if (r < 0)
		fprintf(stderr, "corral-collector: %s%s\n", r == -ENOENT ? "--config " : "", err);
	return r;
}

static _noreturn_ void usage(int code)
{
	fprintf(
	    code ? stderr : stdout,
	    "usage: corral-collector serve [--config FILE] [--listen ADDR:PORT] [--db URI]\n"
	    "                              [--tokens FILE] [--max-body BYTES] [--max-records N]\n"
	    "                              [--db-connections N] [--fold-delay MS]\n"
	    "       corral-collector dump --db URI [--type T] [--node N] [--task ID] [--limit N]\n"
	    "                             [--format table|json]\n"
	    "       corral-collector migrate --db URI\n"
	    "       corral-collector report --db URI --prices FILE --from YYYY-MM-DD --to "
	    "YYYY-MM-DD\n"
	    "                             [--by account|user|job|node|label:KEY[,...]] "
	    "[--period day|week|month|all]\n"
	    "                             [--top N] [--format table|csv|json|html]\n"
	    "                             [--idle | --share-idle "
	    "proportional|by-request|to:ACCOUNT]\n"
	    "       corral-collector capacity --db URI --prices FILE --from YYYY-MM-DD --to "
	    "YYYY-MM-DD\n"
	    "                             [--by node|price_class|none] [--period "
	    "day|week|month|all]\n"
	    "                             [--format table|csv|json|html]\n"
	    "       (serve also takes --prices FILE for GET /v1/reports/showback, and "
	    "--no-rollups)\n"
	    "       corral-collector audit [verify|breaks] --db URI ... (audit --help)\n"
	    "       corral-collector -V|--version, -h|--help\n"
	    "Short forms: -c --config, -l --listen, -d --db, -t --tokens, -b --max-body.\n"
	    "URI: sqlite:/path/to.db | postgresql://[user@]host[:port]/dbname[?...]\n"
	    "Exit status: 0 success, 1 failure (database, network, file), 2 bad usage or "
	    "configuration.\n");
	exit(code);
}

/* One line for a bad option (getopt's own messages are off), and a hint. */
static void bad_option(int c, char **argv)
{
	const char *arg = argv[optind - 1];

	if (c == ':')
		fprintf(stderr, "corral-collector: option %s needs an argument; try --help\n", arg);
	else if (optopt)
		fprintf(stderr, "corral-collector: unknown option -%c; try --help\n", optopt);
	else
		fprintf(stderr, "corral-collector: unknown option %s; try --help\n", arg);
}

enum {
	OPT_MAX_RECORDS = 0x100,
	OPT_NO_ROLLUPS,
	OPT_DB_CONNECTIONS,
	OPT_FOLD_DELAY,
	OPT_PRICES,
	OPT_FROM,
	OPT_TO,
	OPT_BY,
	OPT_PERIOD,
	OPT_TOP,
	OPT_IDLE,
	OPT_SHARE_IDLE,
};

/* One command-line option: into o, or into cli where a config file may set it too. */
static int parse_option(int c, char **argv, struct options *o, struct options *cli)
{
	int r = 0;

	switch (c) {
	case 'c':
		r = set_str(&cli->config, optarg);
		break;
	case 'l':
		r = set_str(&cli->listen, optarg);
		break;
	case 'd':
		r = set_str(&cli->db, optarg);
		break;
	case 't':
		r = set_str(&cli->tokens, optarg);
		break;
	case 'b':
		if (parse_size(optarg, &cli->max_body) < 0 || cli->max_body == 0) {
			fprintf(stderr,
				"corral-collector: --max-body: expected a size "
				"(\"16M\"), got '%s'\n",
				optarg);
			r = -EINVAL;
		}
		break;
	case OPT_MAX_RECORDS:
		if (parse_u64(optarg, &cli->max_records) < 0 || cli->max_records == 0 ||
		    cli->max_records > 10000000) {
			fprintf(stderr,
				"corral-collector: --max-records: expected 1..10000000, "
				"got '%s'\n",
				optarg);
			r = -EINVAL;
		}
		break;
	case OPT_NO_ROLLUPS:
		o->no_rollups = true;
		break;
	case OPT_DB_CONNECTIONS:
		if (parse_u64(optarg, &cli->db_connections) < 0 || cli->db_connections == 0 ||
		    cli->db_connections > COLL_INGEST_POOL_MAX) {
			fprintf(stderr,
				"corral-collector: --db-connections: expected 1..%d, got "
				"'%s'\n",
				COLL_INGEST_POOL_MAX, optarg);
			r = -EINVAL;
		}
		break;
	case OPT_FOLD_DELAY:
		if (parse_u64(optarg, &cli->fold_delay_ms) < 0 ||
		    cli->fold_delay_ms > FOLD_DELAY_MAX) {
			fprintf(stderr,
				"corral-collector: --fold-delay: expected 0..%d "
				"milliseconds, got '%s'\n",
				FOLD_DELAY_MAX, optarg);
			r = -EINVAL;
		}
		cli->fold_delay_set = true;
		break;
	case 'T':
		o->type = optarg;
		break;
	case 'N':
		o->node = optarg;
		break;
	case 'K':
		o->task = optarg;
		break;
	case 'L':
		if (parse_u64(optarg, &o->limit) < 0) {
			fprintf(stderr, "corral-collector: --limit: expected a number, got '%s'\n",
				optarg);
			r = -EINVAL;
		}
		break;
	case 'F':
		o->format = optarg; /* checked by the command */
		break;
	case OPT_PRICES:
		r = set_str(&cli->prices, optarg);
		break;
	case OPT_FROM:
		o->from = optarg;
		break;
	case OPT_TO:
		o->to = optarg;
		break;
	case OPT_BY:
		o->by = optarg;
		break;
	case OPT_PERIOD:
		o->period = optarg;
		break;
	case OPT_TOP:
		if (parse_u64(optarg, &o->top) < 0 || o->top > 1000000) {
			fprintf(stderr, "corral-collector: --top: expected 0..1000000, got '%s'\n",
				optarg);
			r = -EINVAL;
		}
		break;
	case OPT_IDLE:
		o->idle = true;
		break;
	case OPT_SHARE_IDLE:
		o->share_idle = optarg;
		break;
	case 'h':
		usage(0);
	case 'V':
		printf("corral-collector %s\n", CORRAL_VERSION);
		exit(0);
	default:
		bad_option(c, argv);
		r = -EINVAL;
	}
	return r;
}

/* The config file (--config) first, then the flags in cli override it. */
static int apply_cli(struct options *o, const struct options *cli)
{
	int r = 0;

	if (cli->config) {
		r = set_str(&o->config, cli->config);
		if (r >= 0)
			r = load_config(o, cli->config);
		if (r < 0)
			return r;
	}
	if (cli->listen)
		r = set_str(&o->listen, cli->listen);
	if (r >= 0 && cli->db)
		r = set_str(&o->db, cli->db);
	if (r >= 0 && cli->tokens)
		r = set_str(&o->tokens, cli->tokens);
	if (r >= 0 && cli->prices)
		r = set_str(&o->prices, cli->prices);
	if (cli->max_body)
		o->max_body = cli->max_body;
	if (cli->max_records)
		o->max_records = cli->max_records;
	if (cli->db_connections)
		o->db_connections = cli->db_connections;
	if (cli->fold_delay_set) {
		o->fold_delay_ms = cli->fold_delay_ms;
		o->fold_delay_set = true;
	}
	return r;
}

static int parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
	    {"config", required_argument, NULL, 'c'},
	    {"listen", required_argument, NULL, 'l'},
	    {"db", required_argument, NULL, 'd'},
	    {"tokens", required_argument, NULL, 't'},
	    {"max-body", required_argument, NULL, 'b'},
	    {"max-records", required_argument, NULL, OPT_MAX_RECORDS},
	    {"no-rollups", no_argument, NULL, OPT_NO_ROLLUPS},
	    {"db-connections", required_argument, NULL, OPT_DB_CONNECTIONS},
	    {"fold-delay", required_argument, NULL, OPT_FOLD_DELAY},
	    {"type", required_argument, NULL, 'T'},
	    {"node", required_argument, NULL, 'N'},
	    {"task", required_argument, NULL, 'K'},
	    {"limit", required_argument, NULL, 'L'},
	    {"format", required_argument, NULL, 'F'},
	    {"prices", required_argument, NULL, OPT_PRICES},
	    {"from", required_argument, NULL, OPT_FROM},
	    {"to", required_argument, NULL, OPT_TO},
	    {"by", required_argument, NULL, OPT_BY},
	    {"period", required_argument, NULL, OPT_PERIOD},
	    {"top", required_argument, NULL, OPT_TOP},
	    {"idle", no_argument, NULL, OPT_IDLE},
	    {"share-idle", required_argument, NULL, OPT_SHARE_IDLE},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {},
	};
	struct options cli = {0};
	int c, r = 0;

	opterr = 0;
	while (r >= 0 && (c = getopt_long(argc, argv, ":c:l:d:t:b:hV", longopts, NULL)) != -1)
		r = parse_option(c, argv, o, &cli);
	if (r >= 0 && optind < argc) {
		fprintf(stderr, "corral-collector %s: unexpected argument \"%s\"; try --help\n",
			argv[0], argv[optind]);
		r = -EINVAL;
	}
	if (r >= 0)
		r = apply_cli(o, &cli);
	options_free(&cli);
	return r;
}

static int open_store(const struct options *o, unsigned flags, struct coll_store **ret)
{
	char err[512];
	int r;

	r = coll_store_open(o->db, flags | (o->no_rollups ? COLL_STORE_NO_ROLLUPS : 0), ret, err,
			    sizeof(err));
	if (r < 0)
		fprintf(stderr, "corral-collector: --db / [storage] db: %s (%s)\n", err,
			strerror(-r));
	return r;
}

static void log_stderr(const char *msg)
{
	fprintf(stderr, "corral-collector: %s\n", msg);
}

/*
 * Keep the memory of finished requests in the heap. Each batch allocates its body, its decoded
 * records and about 1 MiB of rollup deltas and frees them at the end; glibc's defaults give
 * every block over 128 KiB back to the kernel at free (mmap), so the next batch faults the same
 * pages in again. At 9-14 us per page fault in the VM the benchmark runs in, that was a tenth
 * of the collector's CPU (docs/collector.md, "Memory"). An operator's GLIBC_TUNABLES malloc
 * settings win.
 */
static void tune_malloc(void)
{
	const char *t = getenv("GLIBC_TUNABLES");

	if (t && strstr(t, "glibc.malloc."))
		return;
	mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024); /* glibc's maximum; above max_body */
	mallopt(M_TRIM_THRESHOLD, 8 * 1024 * 1024);
}

/* The serving process: malloc tuned, descriptors up to the hard limit (one per client
 * connection), SIGTERM/INT/HUP in *mask blocked (taken by sigwait; server threads inherit
 * the mask), SIGPIPE ignored. */
static void serve_process_setup(sigset_t *mask)
{
	struct rlimit rl;

	tune_malloc();
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
	sigemptyset(mask);
	sigaddset(mask, SIGTERM);
	sigaddset(mask, SIGINT);
	sigaddset(mask, SIGHUP);
	pthread_sigmask(SIG_BLOCK, mask, NULL);
	signal(SIGPIPE, SIG_IGN);
}

/* Waits for the signal that stops the server (returned); SIGHUP reads the TLS files again
 * (tokens are read at start: restart to change them). */
static int serve_wait(const sigset_t *mask, struct coll_tls *tls)
{
	char err[512], fp[COLL_TLS_FINGERPRINT_MAX] = "";
	int sig;

	for (;;) {
		if (sigwait(mask, &sig) != 0)
			continue;
		if (sig != SIGHUP)
			return sig;
		if (!tls)
			continue;
		if (coll_tls_reload(tls, err, sizeof(err)) < 0) {
			fprintf(stderr,
				"corral-collector: SIGHUP: [server] %s; the certificates loaded "
				"before stay in use\n",
				err);
			continue;
		}
		coll_tls_fingerprint(tls, fp, sizeof(fp));
		fprintf(stderr, "corral-collector: SIGHUP: TLS files read again, certificate %s\n",
			fp);
	}
}

/* The price sheet at path in *ret (allocated), or a negative errno after a message. */
static int serve_prices(const char *path, struct price_sheet **ret)
{
	_cleanup_free_ struct price_sheet *p = calloc(1, sizeof(*p));
	char err[512];
	int r;

	if (!p)
		return -ENOMEM;
	r = price_sheet_load(path, p, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "corral-collector: --prices / [report] prices: %s\n", err);
		return r;
	}
	*ret = TAKE_PTR(p);
	return 0;
}

static int cmd_serve(struct options *o)
{
	struct coll_server_config cfg = {
	    .listen = o->listen ?: COLL_DEFAULT_LISTEN,
	    .max_body = o->max_body ?: COLL_DEFAULT_MAX_BODY,
	    .max_records = o->max_records ?: COLL_DEFAULT_MAX_RECORDS,
	    .log = log_stderr,
	    .threads = (unsigned)o->threads,
	    .max_connections = (unsigned)o->max_connections,
	    .connections_per_ip = (unsigned)o->connections_per_ip,
	    .connection_timeout = (unsigned)o->connection_timeout,
	    .reuse_port = o->reuse_port,
	    .retry_after = (unsigned)o->retry_after,
	    .max_queued = (size_t)o->max_queued,
	};
	struct coll_tokens tokens = {0};
	struct coll_store *store = NULL;
	struct coll_server *srv = NULL;
	struct coll_tls *tls = NULL;
	struct coll_store *extra[COLL_INGEST_POOL_MAX] = {0};
	size_t nconn = 1, nextra = 0;
	_cleanup_free_ struct price_sheet *prices = NULL;
	char err[512], fp[COLL_TLS_FINGERPRINT_MAX] = "";
	sigset_t mask;
	int sig, r;

	serve_process_setup(&mask);

	r = coll_tokens_load(o->tokens ?: DEFAULT_TOKENS, &tokens, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "corral-collector: --tokens / [server] tokens_file: %s\n", err);
		/* -EPERM: a secret others may reach, a configuration error */
		return r == -EPERM ? 2 : 1;
	}
	if (o->prices && serve_prices(o->prices, &prices) < 0) {
		coll_tokens_free(&tokens);
		return 1;
	}
	if (o->tls_cert || o->tls_key || o->tls_client_ca) {
		r = coll_tls_new(o->tls_cert, o->tls_key, o->tls_client_ca, &tls, err, sizeof(err));
		if (r < 0) {
			fprintf(stderr, "corral-collector: [server] %s\n", err);
			if (r == -EPERM) { /* a key others may reach: a configuration error */
				coll_tokens_free(&tokens);
				return 2;
			}
			goto out;
		}
		cfg.tls = tls;
	}
	r = open_store(o, COLL_STORE_INGEST, &store);
	if (r < 0)
		goto out;
	r = coll_server_start(&cfg, store, &tokens, &srv, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "corral-collector: --listen / [server] listen: %s\n", err);
		goto out;
	}
	nconn = o->db_connections ?: coll_store_default_connections(store);
	if (nconn > 1 && coll_store_single_writer(store)) {
		fprintf(stderr, "corral-collector: --db-connections / [storage] connections: "
				"SQLite has a single writer, use 1\n");
		r = -EINVAL;
		goto out;
	}
	for (; nextra + 1 < nconn; nextra++) {
		r = open_store(o, COLL_STORE_INGEST, &extra[nextra]);
		if (r < 0)
			goto out;
		coll_server_add_ingest_store(srv, extra[nextra]);
	}
	/* ingest queues its rollup deltas (both backends); a connection of its own folds them */
	if (coll_store_defers_rollups(store)) {
		r = open_store(o, 0, &extra[nextra]);
		if (r < 0)
			goto out;
		r = coll_server_set_fold_store(srv, extra[nextra++],
					       o->fold_delay_set ? (unsigned)o->fold_delay_ms
								 : COLL_DEFAULT_FOLD_DELAY_MS);
		if (r < 0) {
			fprintf(stderr, "corral-collector: rollup folder: %s\n", strerror(-r));
			goto out;
		}
	}
	if (prices)
		coll_server_set_prices(srv, prices);
	if (tls)
		coll_tls_fingerprint(tls, fp, sizeof(fp));
	fprintf(stderr,
		"corral-collector: listening on %s (port %u, %s%s%s), %zu tokens, db %s (%zu "
		"connection%s)%s\n",
		cfg.listen, coll_server_port(srv), tls ? "https, certificate " : "http",
		tls ? fp : "", tls && o->tls_client_ca ? ", client certificates" : "", tokens.n,
		store->ops->name, nconn, nconn == 1 ? "" : "s",
		o->no_rollups ? " (rollups off)" : "");
	sd_notify(0, "READY=1");
	sig = serve_wait(&mask, tls);
	sd_notify(0, "STOPPING=1");
	fprintf(stderr, "corral-collector: %s, finishing in-flight batches\n", strsignal(sig));
	coll_server_stop(srv, STOP_TIMEOUT_MS);
	srv = NULL;
	r = 0;
out:
	if (srv)
		coll_server_stop(srv, 0);
	for (size_t i = 0; i < nextra; i++)
		coll_store_close(extra[i]);
	coll_store_close(store);
	coll_tls_free(tls);
	coll_tokens_free(&tokens);
	return r < 0 ? 1 : 0;
}

struct dump_ctx {
	bool json;
	size_t n;
};

static int dump_cb(const struct coll_row *row, void *ud)
{
	struct dump_ctx *d = ud;

	if (d->json)
		printf("%s\n", row->body);
	else
		printf("%-40s %-13s %-27s %-12s %-20s %-12s %s\n", row->record_id, row->type,
		       row->time, row->node, row->task_id, row->account, row->user);
	d->n++;
	return 0;
}

static int cmd_dump(struct options *o)
{
	struct coll_query q = {
	    .type = o->type, .node = o->node, .task_id = o->task, .limit = o->limit};
	struct dump_ctx d = {.json = o->json};
	struct coll_store *store = NULL;
	int r;

	if (!o->db) {
		fprintf(stderr, "corral-collector dump: --db is required\n");
		return 2;
	}
	if (o->type && acct_type_from_string(o->type) == _ACCT_TYPE_INVALID) {
		fprintf(stderr, "corral-collector dump: --type: unknown record type '%s' (one of",
			o->type);
		for (int t = 0; t < _ACCT_TYPE_MAX; t++)
			fprintf(stderr, "%s %s", t ? "," : "", acct_type_to_string(t));
		fprintf(stderr, ")\n");
		return 2;
	}
	if (o->format && strcmp(o->format, "json") == 0)
		d.json = true;
	else if (o->format && strcmp(o->format, "table") != 0) {
		fprintf(stderr,
			"corral-collector dump: --format: expected table or json, got '%s'\n",
			o->format);
		return 2;
	}
	r = open_store(o, 0, &store);
	if (r < 0)
		return 1;
	if (!d.json)
		printf("%-40s %-13s %-27s %-12s %-20s %-12s %s\n", "RECORD_ID", "TYPE", "TIME",
		       "NODE", "TASK", "ACCOUNT", "USER");
	r = coll_store_query(store, &q, dump_cb, &d);
	if (r < 0)
		fprintf(stderr, "corral-collector dump: %s\n", coll_store_errmsg(store));
	else if (!d.json)
		printf("(%zu records)\n", d.n);
	coll_store_close(store);
	return r < 0 ? 1 : 0;
}

static int cmd_migrate(struct options *o)
{
	struct coll_store *store = NULL;
	int v = 0, r;

	if (!o->db) {
		fprintf(stderr, "corral-collector migrate: --db is required\n");
		return 2;
	}
	r = open_store(o, 0, &store);
	if (r < 0)
		return 1;
	r = coll_store_schema_version(store, &v);
	if (r < 0)
		fprintf(stderr, "corral-collector migrate: %s\n", coll_store_errmsg(store));
	else
		printf("schema version %d\n", v);
	coll_store_close(store);
	return r < 0 ? 1 : 0;
}

static int cmd_report(struct options *o)
{
	_cleanup_free_ struct price_sheet *ps = calloc(1, sizeof(*ps));
	enum report_format fmt = REPORT_FMT_TABLE;
	struct coll_store *store = NULL;
	struct report_spec spec;
	struct report rep;
	char err[512];
	int r;

	if (!ps)
		return 1;
	if (!o->db || !o->prices) {
		fprintf(stderr, "corral-collector report: --db and --prices are required\n");
		return 2;
	}
	if (report_spec_init(&spec, o->from, o->to, err, sizeof(err)) < 0 ||
	    (o->by && report_spec_set_by(&spec, o->by, err, sizeof(err)) < 0) ||
	    (o->period && report_spec_set_period(&spec, o->period, err, sizeof(err)) < 0)) {
		fprintf(stderr, "corral-collector report: --%s\n", err);
		return 2;
	}
	spec.top = (size_t)o->top;
	if ((o->idle && report_spec_set_idle(&spec, "row", err, sizeof(err)) < 0) ||
	    (o->share_idle && report_spec_set_idle(&spec, o->share_idle, err, sizeof(err)) < 0) ||
	    report_spec_check(&spec, err, sizeof(err)) < 0) {
		fprintf(stderr, "corral-collector report: --%s\n", err);
		return 2;
	}
	if (o->format && report_format_from_string(o->format, &fmt) < 0) {
		fprintf(stderr,
			"corral-collector report: --format: expected table, csv, json or html, "
			"got '%s'\n",
			o->format);
		return 2;
	}
	r = price_sheet_load(o->prices, ps, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "corral-collector report: --prices: %s\n", err);
		return 2;
	}
	spec.nodes = fmt == REPORT_FMT_HTML; /* the HTML header names them */
	r = open_store(o, 0, &store);
	if (r < 0)
		return 1;
	r = report_build(store, &spec, ps, &rep);
	if (r < 0) {
		fprintf(stderr, "corral-collector report: %s (%s)\n", coll_store_errmsg(store),
			strerror(-r));
		coll_store_close(store);
		return 1;
	}
	r = report_write(&rep, fmt, stdout);
	report_free(&rep);
	coll_store_close(store);
	if (r < 0 || fflush(stdout) != 0) {
		fprintf(stderr, "corral-collector report: writing: %m\n");
		return 1;
	}
	return 0;
}

static int cmd_capacity(struct options *o)
{
	_cleanup_free_ struct price_sheet *ps = calloc(1, sizeof(*ps));
	enum report_format fmt = REPORT_FMT_TABLE;
	enum cap_by by = CAP_BY_NODE;
	struct coll_store *store = NULL;
	struct report_spec spec;
	struct cap_report rep;
	char err[512];
	int r;

	if (!ps)
		return 1;
	if (!o->db || !o->prices) {
		fprintf(stderr, "corral-collector capacity: --db and --prices are required\n");
		return 2;
	}
	if (report_spec_init(&spec, o->from, o->to, err, sizeof(err)) < 0 ||
	    (o->period && report_spec_set_period(&spec, o->period, err, sizeof(err)) < 0)) {
		fprintf(stderr, "corral-collector capacity: --%s\n", err);
		return 2;
	}
	if (o->by && cap_by_from_string(o->by, &by) < 0) {
		fprintf(stderr,
			"corral-collector capacity: --by: expected node, price_class or none, got "
			"'%s'\n",
			o->by);
		return 2;
	}
	if (o->format && report_format_from_string(o->format, &fmt) < 0) {
		fprintf(stderr,
			"corral-collector capacity: --format: expected table, csv, json or html, "
			"got '%s'\n",
			o->format);
		return 2;
	}
	r = price_sheet_load(o->prices, ps, err, sizeof(err));
	if (r < 0) {
		fprintf(stderr, "corral-collector capacity: --prices: %s\n", err);
		return 2;
	}
	r = open_store(o, 0, &store);
	if (r < 0)
		return 1;
	r = cap_build(store, &spec, by, ps, &rep);
	if (r < 0) {
		fprintf(stderr, "corral-collector capacity: %s (%s)\n", coll_store_errmsg(store),
			strerror(-r));
		coll_store_close(store);
		return 1;
	}
	r = cap_write(&rep, fmt, stdout);
	cap_free(&rep);
	coll_store_close(store);
	if (r < 0 || fflush(stdout) != 0) {
		fprintf(stderr, "corral-collector capacity: writing: %m\n");
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct options o = {0};
	const char *cmd;
	int rc;

	if (argc < 2) {
		fprintf(stderr, "corral-collector: missing command (serve, dump, migrate, report, "
				"capacity, audit); try --help\n");
		return 2;
	}
	cmd = argv[1];
	if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0)
		usage(0);
	if (strcmp(cmd, "-V") == 0 || strcmp(cmd, "--version") == 0) {
		printf("corral-collector %s\n", CORRAL_VERSION);
		return 0;
	}
	if (strcmp(cmd, "audit") == 0)
		return coll_cmd_audit(argc - 1, argv + 1);
	if (strcmp(cmd, "serve") && strcmp(cmd, "dump") && strcmp(cmd, "migrate") &&
	    strcmp(cmd, "report") && strcmp(cmd, "capacity")) {
		fprintf(stderr, "corral-collector: unknown %s '%s'; try --help\n",
			cmd[0] == '-' ? "option" : "command", cmd);
		return 2;
	}
	if (parse_args(argc - 1, argv + 1, &o) < 0) {
		options_free(&o);
		return 2;
	}
	if (strcmp(cmd, "serve") == 0) {
		if (!o.db)
			o.db = strdup(DEFAULT_DB);
		rc = cmd_serve(&o);
	} else if (strcmp(cmd, "dump") == 0)
		rc = cmd_dump(&o);
	else if (strcmp(cmd, "migrate") == 0)
		rc = cmd_migrate(&o);
	else if (strcmp(cmd, "capacity") == 0)
		rc = cmd_capacity(&o);
	else
		rc = cmd_report(&o);
	options_free(&o);
	return rc;
}
