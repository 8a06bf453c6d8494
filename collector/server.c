/* SPDX-License-Identifier: MIT */
#include <arpa/inet.h>
#include <inttypes.h>
#include <poll.h>
#include <sys/resource.h>
#include <string.h>

#include "collector/audit_query.h"
#include "collector/report.h"
#include "collector/capacity.h"
#include "collector/server_impl.h"
#include "collector/tls.h"
#include "accounting/zframe.h"
#include "common/error.h"
#include "common/escape.h"
#include "common/parse.h"

/* Queue a response; takes ownership of body (malloc'd or NULL). */
enum MHD_Result srv_reply(struct coll_server *s, struct MHD_Connection *c, unsigned code,
			  const char *ctype, char *body, size_t len)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	srv_count_code(s, code);
	resp = MHD_create_response_from_buffer(
	    len, body ?: (char *)"", body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
	if (!resp) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	/* the request codings POST /v1/records takes (RFC 7694): agents compress after seeing it */
	MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_ENCODING, "zstd");
	if (code == 401)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
	if (code ==
	    503) { /* overloaded or no database: when to come back (the agent adds jitter) */
		char ra[DECIMAL_STR_MAX(unsigned)];

		snprintf(ra, sizeof(ra), "%u", s->retry_after_s);
		MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, ra);
	}
	ret = MHD_queue_response(c, code, resp);
	MHD_destroy_response(resp);
	return ret;
}

_printf_(4, 5) enum MHD_Result srv_reply_error(struct coll_server *s, struct MHD_Connection *c,
					       unsigned code, const char *fmt, ...)
{
	char msg[512];
	char *body = NULL;
	size_t len = 0;
	FILE *f;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	f = open_memstream(&body, &len);
	if (!f)
		return MHD_NO;
	fputs("{\"error\":", f);
	fputs_json_string(f, msg);
	fputs("}\n", f);
	if (fclose(f) != 0) {
		free(body);
		return MHD_NO;
	}
	return srv_reply(s, c, code, "application/json", body, len);
}

const struct coll_token *srv_authenticate(struct coll_server *s, struct MHD_Connection *c)
{
	const char *h =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);

	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return NULL;
	h += 7;
	while (*h == ' ')
		h++;
	return coll_tokens_find(s->tokens, h, strlen(h));
}

static const char *const refusal_names[_SRV_REFUSE_MAX] = {
    [SRV_REFUSE_TOKEN] = "unknown_token",
    [SRV_REFUSE_ROLE] = "wrong_role",
    [SRV_REFUSE_NODE] = "other_node",
    [SRV_REFUSE_CERTIFICATE] = "client_certificate",
};

const char *srv_refusal_name(enum srv_refusal why)
{
	return why >= 0 && why < _SRV_REFUSE_MAX ? refusal_names[why] : "other";
}

/* The client's address as text ("?" when unknown). */
static void peer_address(struct MHD_Connection *c, char *buf, size_t len)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;

	snprintf(buf, len, "?");
	if (sa && sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf,
			  (socklen_t)len);
	else if (sa && sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf,
			  (socklen_t)len);
}

_printf_(6, 7) enum MHD_Result
    srv_refuse(struct coll_server *s, struct MHD_Connection *c, unsigned code, enum srv_refusal why,
	       const struct coll_token *tok, const char *fmt, ...)
{
	char msg[512], peer[INET6_ADDRSTRLEN], who[300], safe[600];
	struct refuse_log_missed missed[REFUSE_LOG_MISSED_MAX];
	size_t n_missed;
	bool log;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	atomic_fetch_add(&s->refused[why < _SRV_REFUSE_MAX ? why : SRV_REFUSE_TOKEN], 1);
	/* the client: the token's name, else the address (a token the collector does not know) */
	peer_address(c, peer, sizeof(peer));
	log = refuse_log_allow(&s->refuse_log, tok ? tok->name : peer, (uint64_t)time(NULL), missed,
			       &n_missed);
	for (size_t i = 0; i < n_missed; i++) {
		esc_text(missed[i].key, safe, sizeof(safe));
		if (missed[i].key[0])
			srv_log(s,
				"%" PRIu64 " more refused requests not logged from %s (at most %d "
				"lines per client per %d s; "
				"corral_collector_requests_refused_total counts them all)",
				missed[i].count, safe, REFUSE_LOG_PER_CLIENT, REFUSE_LOG_WINDOW_S);
		else
			srv_log(s,
				"%" PRIu64
				" more refused requests not logged (at most %d lines per "
				"%d s from all clients)",
				missed[i].count, REFUSE_LOG_ALL, REFUSE_LOG_WINDOW_S);
	}
	if (log) {
		const char *auth =
		    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);

		if (tok)
			snprintf(who, sizeof(who), "%s token of '%s'",
				 coll_role_to_string(tok->role), tok->name);
		else
			snprintf(who, sizeof(who), "%s",
				 auth ? "a token the collector does not know" : "no token");
		/* the message may quote what the client sent */
		esc_text(msg, safe, sizeof(safe));
		srv_log(s, "refused a request from %s (%s): %u %s [%s]", peer, who, code, safe,
			srv_refusal_name(why));
	}
	return srv_reply_error(s, c, code, "%s", msg);
}

_printf_(2, 3) void srv_log(struct coll_server *s, const char *fmt, ...)
{
	char msg[768];
	va_list ap;

	if (!s->log)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	s->log(msg);
}

static int query_cb(const struct coll_row *row, void *ud)
{
	FILE *f = ud;

	fputs(row->body, f);
	fputc('\n', f);
	return 0;
}

/* Reader tokens: every record but the audit trail, which is the auditor's (GET /v1/audit). */
static enum MHD_Result handle_query(struct coll_server *s, struct MHD_Connection *c)
{
	struct coll_query q = {
	    .type = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "type"),
	    .node = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "node"),
	    .task_id = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "task"),
	    .audit = COLL_QUERY_NO_AUDIT,
	    .limit = COLL_QUERY_LIMIT_DEFAULT,
	};
	const char *lim = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
	char *body = NULL;
	size_t len = 0;
	FILE *f;
	int r;

	if (q.type && strncmp(q.type, "audit.", 6) == 0)
		return srv_refuse(s, c, 403, SRV_REFUSE_ROLE, srv_authenticate(s, c),
				  "type: audit records need an auditor token (GET /v1/audit)");
	if (lim) {
		uint64_t v;

		if (parse_u64(lim, &v) < 0 || v == 0 || v > COLL_QUERY_LIMIT_MAX)
			return srv_reply_error(s, c, 400, "limit: expected 1..%d",
					       COLL_QUERY_LIMIT_MAX);
		q.limit = (size_t)v;
	}
	f = open_memstream(&body, &len);
	if (!f)
		return srv_reply_error(s, c, 500, "out of memory");
	r = coll_store_query(s->store, &q, query_cb, f);
	if (fclose(f) != 0 || r < 0) {
		free(body);
		if (r < 0)
			atomic_fetch_add(&s->db_errors, 1);
		return srv_reply_error(s, c, r == -ENOMEM ? 500 : 503, "query failed: %s",
				       coll_store_errmsg(s->store));
	}
	return srv_reply(s, c, 200, "application/x-ndjson", body, len);
}

struct audit_params {
	struct coll_audit_filter *f;
	const char *only; /* accepted keys, space separated; NULL = the filter's own */
	char err[256];
};

static enum MHD_Result audit_param(void *cls, enum MHD_ValueKind kind, const char *key,
				   const char *value)
{
	struct audit_params *p = cls;
	size_t kl = strlen(key);
	const char *at = p->only ? strstr(p->only, key) : NULL;

	(void)kind;
	if (p->only && (!at || (at != p->only && at[-1] != ' ') || (at[kl] && at[kl] != ' '))) {
		snprintf(p->err, sizeof(p->err), "unknown parameter '%.64s' (accepted: %s)", key,
			 p->only);
		return MHD_NO;
	}
	if (coll_audit_filter_set(p->f, key, value, p->err, sizeof(p->err)) < 0)
		return MHD_NO;
	return MHD_YES;
}

/* Apply every query parameter to f; false with p->err naming the bad one. */
static bool audit_params_parse(struct MHD_Connection *c, struct audit_params *p)
{
	MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, audit_param, p);
	return p->err[0] == 0;
}

struct audit_out {
	FILE *f;
	size_t n;
};

static int audit_row(const struct coll_row *row, void *ud)
{
	struct audit_out *o = ud;

	fputs(o->n++ ? ",\n" : "\n", o->f);
	fputs(row->body, o->f); /* as received: the hash covers exactly these bytes */
	return 0;
}

/*
 * A listing's start: every query parameter applied (audit_params_parse), then the reply's
 * memstream opened (*body / *len, set by its fclose) with head written. false when a
 * parameter is wrong or memory short: the error reply is queued in *ret.
 */
static bool audit_list_begin(struct coll_server *s, struct MHD_Connection *c,
			     struct audit_params *p, const char *head, struct audit_out *o,
			     char **body, size_t *len, enum MHD_Result *ret)
{
	if (!audit_params_parse(c, p)) {
		*ret = srv_reply_error(s, c, 400, "%s", p->err);
		return false;
	}
	o->f = open_memstream(body, len);
	if (!o->f) {
		*ret = srv_reply_error(s, c, 500, "out of memory");
		return false;
	}
	fputs(head, o->f);
	return true;
}

/* Close the memstream f of *body / *len (set by fclose) and answer; r < 0: the query failed. */
static enum MHD_Result finish_json(struct coll_server *s, struct MHD_Connection *c, FILE *f,
				   char **body, size_t *len, int r)
{
	if (fclose(f) != 0 || r < 0) {
		free(*body);
		if (r < 0 && r != -ENOMEM)
			atomic_fetch_add(&s->db_errors, 1);
		return srv_reply_error(s, c, r == -ENOMEM || r == 0 ? 500 : 503, "query failed: %s",
				       r == -ENOMEM || r == 0 ? strerror(ENOMEM)
							      : coll_store_errmsg(s->store));
	}
	return srv_reply(s, c, 200, "application/json", *body, *len);
}

static enum MHD_Result handle_audit(struct coll_server *s, struct MHD_Connection *c)
{
	struct coll_audit_filter flt = {.limit = COLL_AUDIT_LIMIT_DEFAULT};
	struct audit_params p = {.f = &flt};
	char next[COLL_AUDIT_CURSOR_MAX], *body = NULL;
	struct audit_out o = {0};
	enum MHD_Result ret;
	size_t len = 0;
	int r;

	if (!audit_list_begin(s, c, &p, "{\"records\":[", &o, &body, &len, &ret))
		return ret;
	r = coll_audit_query(s->store, &flt, audit_row, &o, next, sizeof(next));
	fprintf(o.f, "%s],\"count\":%zu,\"next\":", o.n ? "\n" : "", o.n);
	if (next[0])
		fputs_json_string(o.f, next);
	else
		fputs("null", o.f);
	fputs("}\n", o.f);
	return finish_json(s, c, o.f, &body, &len, r);
}

static enum MHD_Result handle_audit_verify(struct coll_server *s, struct MHD_Connection *c)
{
	struct coll_audit_filter flt = {0};
	struct audit_params p = {.f = &flt, .only = "node"};
	struct coll_chain_result res;
	char *body = NULL;
	size_t len = 0;
	FILE *f;
	int r;

	if (!audit_params_parse(c, &p))
		return srv_reply_error(s, c, 400, "%s", p.err);
	if (!flt.node)
		return srv_reply_error(s, c, 400, "node: required");
	r = coll_chain_verify_node(s->store, flt.node, 0, &res);
	if (r < 0) {
		if (r != -ENOMEM && r != -E2BIG)
			atomic_fetch_add(&s->db_errors, 1);
		return srv_reply_error(
		    s, c, r == -ENOMEM || r == -E2BIG ? 500 : 503, "verify failed: %s",
		    r == -ENOMEM || r == -E2BIG ? strerror(-r) : coll_store_errmsg(s->store));
	}
	f = open_memstream(&body, &len);
	if (!f)
		return srv_reply_error(s, c, 500, "out of memory");
	r = coll_chain_result_write_json(f, flt.node, &res);
	return finish_json(s, c, f, &body, &len, r < 0 ? -ENOMEM : 1);
}

static int break_row(const struct coll_audit_break *b, void *ud)
{
	struct audit_out *o = ud;

	fputs(o->n++ ? ",\n{\"record_id\":" : "\n{\"record_id\":", o->f);
	fputs_json_string(o->f, b->record_id);
	fputs(",\"node\":", o->f);
	fputs_json_string(o->f, b->node);
	fputs(",\"kind\":", o->f);
	fputs_json_string(o->f, b->kind);
	fputs(",\"reason\":", o->f);
	fputs_json_string(o->f, b->reason);
	fputs(",\"detected\":", o->f);
	fputs_json_string(o->f, b->detected);
	fputc('}', o->f);
	return 0;
}

static enum MHD_Result handle_audit_breaks(struct coll_server *s, struct MHD_Connection *c)
{
	struct coll_audit_filter flt = {.limit = COLL_AUDIT_LIMIT_DEFAULT};
	struct audit_params p = {.f = &flt, .only = "node limit"};
	struct audit_out o = {0};
	enum MHD_Result ret;
	char *body = NULL;
	size_t len = 0;
	int r;

	if (!audit_list_begin(s, c, &p, "{\"breaks\":[", &o, &body, &len, &ret))
		return ret;
	r = coll_store_break_query(s->store, flt.node, flt.limit, break_row, &o);
	fprintf(o.f, "%s],\"count\":%zu}\n", o.n ? "\n" : "", o.n);
	return finish_json(s, c, o.f, &body, &len, r < 0 ? r : 1);
}

void coll_server_set_prices(struct coll_server *srv, const struct price_sheet *ps)
{
	atomic_store(&srv->prices, ps);
}

static const char *get_arg(struct MHD_Connection *c, const char *name)
{
	return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
}

/*
 * The arguments every report takes: from, to and period into *spec, format (json or csv) into
 * *fmt, and the price sheet. false when one is wrong: the error reply is queued in *ret.
 */
static bool report_args(struct coll_server *s, struct MHD_Connection *c, struct report_spec *spec,
			enum report_format *fmt, const struct price_sheet **ps,
			enum MHD_Result *ret)
{
	const char *period = get_arg(c, "period"), *format = get_arg(c, "format");
	char err[256];

	*fmt = REPORT_FMT_JSON;
	*ps = atomic_load(&s->prices);
	if (!*ps) {
		*ret =
		    srv_reply_error(s, c, 404, "no price sheet configured (serve --prices FILE)");
		return false;
	}
	if (report_spec_init(spec, get_arg(c, "from"), get_arg(c, "to"), err, sizeof(err)) < 0 ||
	    (period && report_spec_set_period(spec, period, err, sizeof(err)) < 0)) {
		*ret = srv_reply_error(s, c, 400, "%s", err);
		return false;
	}
	if (format && (report_format_from_string(format, fmt) < 0 ||
		       (*fmt != REPORT_FMT_JSON && *fmt != REPORT_FMT_CSV))) {
		*ret = srv_reply_error(s, c, 400, "format: expected json or csv");
		return false;
	}
	return true;
}

/* Writes a built report in a format (f NULL: -ENOMEM) and frees it. */
typedef int (*report_writer)(void *rep, enum report_format fmt, FILE *f);

/* A report's reply: the build's error (built < 0), or the report written in fmt. */
static enum MHD_Result report_reply(struct coll_server *s, struct MHD_Connection *c, int built,
				    enum report_format fmt, report_writer write, void *rep)
{
	char *body = NULL;
	size_t len = 0;
	FILE *f;
	int r;

	if (built < 0) {
		if (built != -ENOMEM)
			atomic_fetch_add(&s->db_errors, 1);
		return srv_reply_error(s, c, built == -ENOMEM ? 500 : 503, "report failed: %s",
				       coll_store_errmsg(s->store));
	}
	f = open_memstream(&body, &len);
	r = write(rep, fmt, f);
	if (!f || fclose(f) != 0 || r < 0) {
		free(body);
		return srv_reply_error(s, c, 500, "out of memory");
	}
	return srv_reply(s, c, 200, fmt == REPORT_FMT_CSV ? "text/csv" : "application/json", body,
			 len);
}

static int showback_write(void *rep, enum report_format fmt, FILE *f)
{
	int r = f ? report_write(rep, fmt, f) : -ENOMEM;

	report_free(rep);
	return r;
}

static enum MHD_Result handle_showback(struct coll_server *s, struct MHD_Connection *c)
{
	const char *by = get_arg(c, "by"), *top = get_arg(c, "top"), *idle = get_arg(c, "idle");
	const char *share = get_arg(c, "share_idle");
	const struct price_sheet *ps;
	enum report_format fmt;
	enum MHD_Result ret;
	struct report_spec spec;
	struct report rep;
	char err[256];

	if (!report_args(s, c, &spec, &fmt, &ps, &ret))
		return ret;
	if (by && report_spec_set_by(&spec, by, err, sizeof(err)) < 0)
		return srv_reply_error(s, c, 400, "%s", err);
	if (top) {
		uint64_t v;

		if (parse_u64(top, &v) < 0 || v > 1000000)
			return srv_reply_error(s, c, 400, "top: expected 0..1000000");
		spec.top = (size_t)v;
	}
	if (idle && strcmp(idle, "1") != 0 && strcmp(idle, "true") != 0 && strcmp(idle, "0") != 0 &&
	    strcmp(idle, "false") != 0)
		return srv_reply_error(s, c, 400, "idle: expected true or false");
	if ((idle && (strcmp(idle, "1") == 0 || strcmp(idle, "true") == 0) &&
	     report_spec_set_idle(&spec, "row", err, sizeof(err)) < 0) ||
	    (share && report_spec_set_idle(&spec, share, err, sizeof(err)) < 0) ||
	    report_spec_check(&spec, err, sizeof(err)) < 0)
		return srv_reply_error(s, c, 400, "%s", err);
	return report_reply(s, c, report_build(s->store, &spec, ps, &rep), fmt, showback_write,
			    &rep);
}

static int capacity_write(void *rep, enum report_format fmt, FILE *f)
{
	int r = f ? cap_write(rep, fmt, f) : -ENOMEM;

	cap_free(rep);
	return r;
}

/* GET /v1/reports/capacity?from=&to=&by=node|price_class|none&period=&format=json|csv */
static enum MHD_Result handle_capacity(struct coll_server *s, struct MHD_Connection *c)
{
	const char *by = get_arg(c, "by");
	const struct price_sheet *ps;
	enum report_format fmt;
	enum cap_by cby = CAP_BY_NODE;
	enum MHD_Result ret;
	struct report_spec spec;
	struct cap_report rep;

	if (!report_args(s, c, &spec, &fmt, &ps, &ret))
		return ret;
	if (by && cap_by_from_string(by, &cby) < 0)
		return srv_reply_error(s, c, 400, "by: expected node, price_class or none");
	return report_reply(s, c, cap_build(s->store, &spec, cby, ps, &rep), fmt, capacity_write,
			    &rep);
}

static bool content_type_ok(struct MHD_Connection *c)
{
	const char *ct =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE);
	static const char *const ok[] = {"application/x-ndjson", "application/ndjson",
					 "application/jsonl", "application/json"};

	if (!ct)
		return false;
	for (size_t i = 0; i < ARRAY_SIZE(ok); i++) {
		size_t l = strlen(ok[i]);

		if (strncasecmp(ct, ok[i], l) == 0 && (ct[l] == 0 || ct[l] == ';' || ct[l] == ' '))
			return true;
	}
	return false;
}

/* The body's coding: none or identity (*zstd false), zstd (true); -EINVAL for any other. */
static int content_encoding(struct MHD_Connection *c, bool *zstd)
{
	const char *ce =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING);

	*zstd = false;
	if (!ce || !*ce || strcasecmp(ce, "identity") == 0)
		return 0;
	if (strcasecmp(ce, "zstd") == 0) {
		*zstd = true;
		return 0;
	}
	return -EINVAL;
}

/* A zstd body replaced by its decoded bytes, at most max_body of them: 0, or a reply. */
static int body_decode(struct coll_server *s, struct MHD_Connection *c, struct request *rq,
		       enum MHD_Result *reply)
{
	char *out = NULL;
	size_t n = 0;
	int r;

	r = zframe_body_unpack(rq->buf, rq->len, s->max_body, &out, &n);
	if (r == -E2BIG)
		*reply = srv_reply_error(
		    s, c, 413, "zstd body of %zu bytes decodes to more than max_body %" PRIu64,
		    rq->len, s->max_body);
	else if (r == -ENOMEM)
		*reply = srv_reply_error(s, c, 500, "out of memory");
	else if (r < 0)
		*reply = srv_reply_error(s, c, 400, "body is not a valid zstd stream (%zu bytes)",
					 rq->len);
	if (r < 0)
		return r;
	free(rq->buf);
	rq->buf = out;
	rq->len = n;
	rq->cap = n + 1;
	rq->zstd = false;
	return 0;
}

/* A POST's headers: a body announced beyond max_body is answered 413 now (to a client waiting
 * for "100 Continue", or one past the drain bound) or read and dropped; else its buffer. */
static enum MHD_Result post_begin(struct coll_server *s, struct MHD_Connection *c,
				  struct request *rq)
{
	const char *cl =
	    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	uint64_t v;

	if (cl && parse_u64(cl, &v) == 0) {
		const char *ex =
		    MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_EXPECT);

		/* a client waiting for "100 Continue" reads the answer now; any
		 * other is sending the body: it is read, dropped and answered */
		if (v > s->max_body && ((ex && strcasecmp(ex, "100-continue") == 0) ||
					v / TOO_BIG_DRAIN_FACTOR > s->max_body))
			return srv_reply_error(
			    s, c, 413, "body of %" PRIu64 " bytes exceeds max_body %" PRIu64, v,
			    s->max_body);
		if (v > s->max_body) {
			rq->too_big = true;
			return MHD_YES;
		}
		rq->buf = malloc(v + 1);
		if (!rq->buf)
			return srv_reply_error(s, c, 500, "out of memory");
		rq->cap = v + 1;
	}
	return MHD_YES;
}

/* The first callback of a request: GET endpoints answered, a POST to /v1/records checked
 * and its body awaited. */
static enum MHD_Result route(struct coll_server *s, struct MHD_Connection *c, struct request *rq,
			     const char *url, bool is_get, bool is_post)
{
	const struct coll_token *tok;
	int r;

	if (strcmp(url, "/healthz") == 0 || strcmp(url, "/metrics") == 0) {
		if (!is_get)
			return srv_reply_error(s, c, 405, "%s: use GET", url);
		if (url[1] == 'm')
			return srv_handle_metrics(s, c);
		if (coll_store_ping(s->store) < 0) {
			atomic_fetch_add(&s->db_errors, 1);
			return srv_reply(s, c, 503, "text/plain", strdup("database unavailable\n"),
					 strlen("database unavailable\n"));
		}
		return srv_reply(s, c, 200, "text/plain", strdup("ok\n"), 3);
	}
	if (strcmp(url, "/v1/audit") == 0 || strcmp(url, "/v1/audit/verify") == 0 ||
	    strcmp(url, "/v1/audit/breaks") == 0) {
		if (!is_get)
			return srv_reply_error(s, c, 405, "%s: use GET", url);
		tok = srv_authenticate(s, c);
		if (!tok)
			return srv_refuse(s, c, 401, SRV_REFUSE_TOKEN, NULL,
					  "missing or unknown bearer token");
		if (tok->role != COLL_ROLE_AUDITOR)
			return srv_refuse(s, c, 403, SRV_REFUSE_ROLE, tok,
					  "%s needs an auditor token, not a %s token", url,
					  coll_role_to_string(tok->role));
		if (url[9] == 0)
			return handle_audit(s, c);
		return url[10] == 'v' ? handle_audit_verify(s, c) : handle_audit_breaks(s, c);
	}
	if (strcmp(url, "/v1/reports/showback") == 0 || strcmp(url, "/v1/reports/capacity") == 0) {
		if (!is_get)
			return srv_reply_error(s, c, 405, "%s: use GET", url);
		tok = srv_authenticate(s, c);
		if (!tok)
			return srv_refuse(s, c, 401, SRV_REFUSE_TOKEN, NULL,
					  "missing or unknown bearer token");
		if (tok->role != COLL_ROLE_READER)
			return srv_refuse(s, c, 403, SRV_REFUSE_ROLE, tok,
					  "reports need a reader token, not a %s token",
					  coll_role_to_string(tok->role));
		return url[12] == 's' ? handle_showback(s, c) : handle_capacity(s, c);
	}
	if (strcmp(url, "/v1/records") != 0)
		return srv_reply_error(s, c, 404, "no such endpoint: %.200s", url);
	if (!is_get && !is_post)
		return srv_reply_error(s, c, 405, "/v1/records: use POST or GET");
	tok = srv_authenticate(s, c);
	if (!tok)
		return srv_refuse(s, c, 401, SRV_REFUSE_TOKEN, NULL,
				  "missing or unknown bearer token");
	if (is_get) {
		if (tok->role != COLL_ROLE_READER)
			return srv_refuse(s, c, 403, SRV_REFUSE_ROLE, tok,
					  "reading records needs a reader token, not a %s token%s",
					  coll_role_to_string(tok->role),
					  tok->role == COLL_ROLE_AUDITOR
					      ? " (audit records: GET /v1/audit)"
					      : "");
		return handle_query(s, c);
	}
	if (tok->role != COLL_ROLE_NODE)
		return srv_refuse(s, c, 403, SRV_REFUSE_ROLE, tok,
				  "only node tokens may write records");
	if (s->tls && coll_tls_has_client_ca(s->tls)) {
		const union MHD_ConnectionInfo *ci =
		    MHD_get_connection_info(c, MHD_CONNECTION_INFO_GNUTLS_SESSION);
		char why[256];

		/* a stolen token alone is not enough: the node's certificate must come with it */
		if (coll_tls_check_peer(s->tls, ci ? ci->tls_session : NULL, tok->name, why,
					sizeof(why)) < 0)
			return srv_refuse(s, c, 403, SRV_REFUSE_CERTIFICATE, tok, "%s", why);
	}
	if (!content_type_ok(c))
		return srv_reply_error(s, c, 400, "Content-Type must be application/x-ndjson");
	r = content_encoding(c, &rq->zstd);
	if (r < 0)
		return srv_reply_error(s, c, 415,
				       "Content-Encoding must be zstd or identity, not \"%.64s\"",
				       MHD_lookup_connection_value(
					   c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_ENCODING));
	return post_begin(s, c, rq);
}

/* n more bytes of a POST body: kept up to max_body, beyond that counted and dropped. */
static enum MHD_Result body_data(struct coll_server *s, struct request *rq, const char *data,
				 size_t n)
{
	if (rq->too_big || rq->len + n > s->max_body) {
		rq->too_big = true;
		rq->dropped += n;
		/* a body without end: not read forever */
		return rq->dropped / TOO_BIG_DRAIN_FACTOR > s->max_body ? MHD_NO : MHD_YES;
	}
	if (rq->len + n + 1 > rq->cap) {
		size_t nc = MAX(rq->cap * 2, rq->len + n + 1);
		char *nb;

		nc = MIN(nc, (size_t)s->max_body + 1);
		nb = realloc(rq->buf, nc);
		if (!nb)
			return MHD_NO;
		rq->buf = nb;
		rq->cap = nc;
	}
	memcpy(rq->buf + rq->len, data, n);
	rq->len += n;
	return MHD_YES;
}

static enum MHD_Result access_handler(void *cls, struct MHD_Connection *c, const char *url,
				      const char *method, const char *version,
				      const char *upload_data, size_t *upload_data_size,
				      void **con_cls)
{
	struct coll_server *s = cls;
	struct request *rq = *con_cls;
	bool is_get =
	    strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
	bool is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
	const struct coll_token *tok;

	if (!rq) {
		rq = calloc(1, sizeof(*rq));
		if (!rq)
			return MHD_NO;
		*con_cls = rq;
		atomic_fetch_add(&s->active, 1);
		rq->started = true;

		return route(s, c, rq, url, is_get, is_post);
	}

	if (rq->post) { /* resumed: the worker has stored the batch */
		struct post_work *pw = rq->post;

		rq->post = NULL;
		return srv_post_answer(s, c, pw);
	}
	if (*upload_data_size > 0) {
		size_t n = *upload_data_size;

		*upload_data_size = 0;
		return body_data(s, rq, upload_data, n);
	}

	/* whole body received */
	if (rq->too_big)
		return srv_reply_error(s, c, 413,
				       "body of %" PRIu64 " bytes exceeds max_body %" PRIu64,
				       rq->len + rq->dropped, s->max_body);
	if (rq->len == 0)
		return srv_reply_error(s, c, 400, "empty body");
	if (rq->zstd) {
		enum MHD_Result reply;

		if (body_decode(s, c, rq, &reply) < 0)
			return reply;
		if (rq->len == 0)
			return srv_reply_error(s, c, 400, "empty body");
	}
	tok = srv_authenticate(s, c);
	if (!tok)
		return srv_refuse(s, c, 401, SRV_REFUSE_TOKEN, NULL,
				  "missing or unknown bearer token");
	return srv_handle_post(s, c, tok, rq);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
		      enum MHD_RequestTerminationCode toe)
{
	struct coll_server *s = cls;
	struct request *rq = *con_cls;

	if (!rq)
		return;
	srv_post_work_free(rq->post);
	free(rq->buf);
	free(rq);
	*con_cls = NULL;
	atomic_fetch_sub(&s->active, 1);
}

int coll_parse_listen(const char *s, void *ret_ss, unsigned *ret_len)
{
	struct sockaddr_storage *ss = ret_ss;
	char host[INET6_ADDRSTRLEN + 2];
	const char *colon, *h, *hend;
	uint32_t port;

	if (!s || !*s)
		return -EINVAL;
	if (s[0] == '[') {
		hend = strchr(s, ']');
		if (!hend || hend[1] != ':')
			return -EINVAL;
		h = s + 1;
		colon = hend + 1;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		h = s;
		hend = colon;
	}
	if ((size_t)(hend - h) >= sizeof(host) || parse_u32(colon + 1, &port) < 0 || port > 65535)
		return -EINVAL;
	memcpy(host, h, (size_t)(hend - h));
	host[hend - h] = 0;
	memset(ss, 0, sizeof(*ss));
	if (s[0] == '[') {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;

		a->sin6_family = AF_INET6;
		a->sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, host, &a->sin6_addr) != 1)
			return -EINVAL;
		*ret_len = sizeof(*a);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)ss;

		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, host, &a->sin_addr) != 1)
			return -EINVAL;
		*ret_len = sizeof(*a);
	}
	return 0;
}

/*
 * The listening socket, bound here rather than by libmicrohttpd so that a port in use is an
 * error with its own message: SO_REUSEADDR (a restart binds while old connections linger in
 * TIME_WAIT) but SO_REUSEPORT only when asked, since with it a second collector started by
 * mistake would share the port and the kernel would split the nodes between the two.
 */
static int listen_socket(const struct coll_server_config *cfg, const struct sockaddr_storage *ss,
			 unsigned sslen, char *err, size_t errlen)
{
	int fd, one = 1, r;

	fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return err_set(err, errlen, -errno, "listen %s: socket: %s", cfg->listen,
			       strerror(errno));
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    (cfg->reuse_port && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) ||
	    (ss->ss_family == AF_INET6 &&
	     setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one)) < 0)) {
		r = -errno;
		close(fd);
		return err_set(err, errlen, r, "listen %s: setsockopt: %s", cfg->listen,
			       strerror(-r));
	}
	if (bind(fd, (const struct sockaddr *)ss, sslen) < 0) {
		r = -errno;
		close(fd);
		if (r == -EADDRINUSE)
			return err_set(err, errlen, r,
				       "listen %s: address already in use (another process "
				       "listens there%s)",
				       cfg->listen,
				       cfg->reuse_port
					   ? " without SO_REUSEPORT"
					   : "; several collectors share a port only with [server] "
					     "reuse_port = true in each");
		return err_set(err, errlen, r, "listen %s: bind: %s", cfg->listen, strerror(-r));
	}
	if (listen(fd, SOMAXCONN) < 0) {
		r = -errno;
		close(fd);
		return err_set(err, errlen, r, "listen %s: %s", cfg->listen, strerror(-r));
	}
	return fd;
}

int coll_server_start(const struct coll_server_config *cfg, struct coll_store *store,
		      const struct coll_tokens *tokens, struct coll_server **ret, char *err,
		      size_t errlen)
{
	struct sockaddr_storage ss;
	unsigned sslen = 0;
	struct coll_server *s;
	/* epoll, a pool of threads: a slow client holds a socket, not a thread */
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC |
			 MHD_ALLOW_SUSPEND_RESUME;
	unsigned threads = cfg->threads ?: COLL_DEFAULT_THREADS,
		 maxconn = cfg->max_connections ?: COLL_DEFAULT_MAX_CONNECTIONS,
		 per_ip = cfg->connections_per_ip ?: COLL_DEFAULT_CONNECTIONS_PER_IP,
		 timeout = cfg->connection_timeout ?: COLL_DEFAULT_CONNECTION_TIMEOUT;
	struct rlimit rl;
	struct MHD_OptionItem tls_opts[3] = {{MHD_OPTION_END, 0, NULL}};
	int lfd, r;

	if (coll_parse_listen(cfg->listen, &ss, &sslen) < 0) {
		return err_set(err, errlen, -EINVAL,
			       "listen: expected ADDR:PORT or [ADDR6]:PORT, got '%.64s'",
			       cfg->listen ?: "");
	}
	if (cfg->tls) {
		r = coll_tls_activate(cfg->tls);
		if (r < 0)
			return err_set(err, errlen, r,
				       "TLS: another server of this process has it");
		/* the certificate through a callback, so that a reload takes effect at once */
		tls_opts[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_CERT_CALLBACK, 0,
						      coll_tls_retrieve_function()};
		/* a trust list makes the server ask for client certificates; they are verified
		 * per request, against the CA as last reloaded (coll_tls_check_peer) */
		if (coll_tls_client_ca_pem(cfg->tls))
			tls_opts[1] =
			    (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0,
						    (void *)coll_tls_client_ca_pem(cfg->tls)};
		flags |= MHD_USE_TLS;
	}
	lfd = listen_socket(cfg, &ss, sslen, err, errlen);
	if (lfd < 0)
		return lfd;
	s = calloc(1, sizeof(*s));
	if (!s) {
		close(lfd);
		return -ENOMEM;
	}
	s->tls = cfg->tls;
	s->store = store;
	pthread_mutex_init(&s->pool_lock, NULL);
	pthread_cond_init(&s->pool_free, NULL);
	refuse_log_init(&s->refuse_log);
	s->pool[0] = store;
	s->npool = 1;
	s->tokens = tokens;
	s->log = cfg->log;
	if (coll_chain_heads_new(&s->heads) < 0) {
		free(s);
		return -ENOMEM;
	}
	pthread_mutex_init(&s->work_lock, NULL);
	pthread_cond_init(&s->work_cond, NULL);
	/* as many ingest workers as server threads: as many batches at the database at once as
	 * when each server thread waited for its own batch */
	s->workers = calloc(threads, sizeof(*s->workers));
	for (unsigned i = 0; s->workers && i < threads; i++) {
		if (pthread_create(&s->workers[i], NULL, srv_ingest_worker, s) != 0)
			break; /* fewer workers; with none, batches are stored inline */
		s->nworkers++;
	}
	s->max_body = cfg->max_body ?: COLL_DEFAULT_MAX_BODY;
	s->max_records = cfg->max_records ?: COLL_DEFAULT_MAX_RECORDS;
	s->retry_after_s = cfg->retry_after ?: COLL_DEFAULT_RETRY_AFTER;
	s->max_queued = cfg->max_queued ?: (size_t)COLL_QUEUE_PER_THREAD * threads;
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* every connection is a descriptor: stay below the limit, keeping some for the database,
	 * the pool's epoll and event descriptors and the files a report opens */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur < (rlim_t)maxconn + 64 + 4 * threads)
		maxconn = rl.rlim_cur > 64 + 4 * threads + 16
			      ? (unsigned)(rl.rlim_cur - 64 - 4 * threads)
			      : 16;
	s->daemon = MHD_start_daemon(
	    flags, 0, NULL, NULL, access_handler, s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)lfd,
	    MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_CONNECTION_LIMIT, maxconn,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_CONNECTION_TIMEOUT, timeout,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)COLL_CONNECTION_MEMORY,
	    MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_NOTIFY_CONNECTION,
	    srv_notify_connection, s, MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
	if (!s->daemon) {
		r = errno ? -errno : -EIO;
		/* lfd is not closed here: libmicrohttpd may have closed it on its failure path,
		 * and closing a number another thread got meanwhile would be worse than a leak */
		snprintf(err, errlen, "listen %s: cannot start HTTP server: %s", cfg->listen,
			 strerror(-r));
		srv_stop_workers(s);
		coll_chain_heads_free(s->heads);
		free(s);
		return r;
	}
	*ret = s;
	return 0;
}

uint16_t coll_server_port(struct coll_server *s)
{
	const union MHD_DaemonInfo *i = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);

	return i ? i->port : 0;
}

void coll_server_stop(struct coll_server *s, unsigned timeout_ms)
{
	MHD_socket fd;

	if (!s)
		return;
	fd = MHD_quiesce_daemon(s->daemon);
	if (fd != MHD_INVALID_SOCKET)
		close(fd);
	/* in-flight batches commit and answer; then the daemon is stopped */
	for (unsigned waited = 0; atomic_load(&s->active) > 0 && waited < timeout_ms; waited += 20)
		poll(NULL, 0, 20);
	/* the workers store what is queued and resume those connections: none is suspended when
	 * the daemon stops */
	srv_stop_workers(s);
	MHD_stop_daemon(s->daemon);
	if (s->fold_started) {
		pthread_mutex_lock(&s->fold_lock);
		s->fold_stop = true;
		pthread_cond_signal(&s->fold_cond);
		pthread_mutex_unlock(&s->fold_lock);
		pthread_join(s->fold_thread, NULL);
		pthread_cond_destroy(&s->fold_cond);
		pthread_mutex_destroy(&s->fold_lock);
	}
	coll_chain_heads_free(s->heads);
	refuse_log_fini(&s->refuse_log);
	free(s);
}
