/* SPDX-License-Identifier: MIT */
/*
 * Audit record queries shared by the CLI and the HTTP API. See collector/audit_query.h.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collector/audit_query.h"
#include "common/error.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/escape.h"
#include "common/parse.h"

#define FILTER_VALUE_MAX 255

static const char *const audit_types[] = {"exec", "connect", "syscall", "limit",
					  "lost", "summary", "gap"};

static int bad(char *err, size_t errlen, const char *key, const char *want, const char *value)
{
	return err_set(err, errlen, -EINVAL, "%s: expected %s, got '%.64s'", key, want,
		       value ?: "");
}

static int set_time(uint64_t *dst, const char *key, const char *value, char *err, size_t errlen)
{
	uint64_t ns;

	if (!value || parse_rfc3339(value, &ns) < 0 || ns == 0)
		return bad(err, errlen, key, "an RFC 3339 UTC time (2026-03-01T00:00:00Z)", value);
	*dst = ns;
	return 0;
}

int coll_audit_filter_set(struct coll_audit_filter *f, const char *key, const char *value,
			  char *err, size_t errlen)
{
	const char **str = NULL;

	if (!key)
		return -EINVAL;
	if (strcmp(key, "node") == 0)
		str = &f->node;
	else if (strcmp(key, "task") == 0)
		str = &f->task;
	else if (strcmp(key, "job") == 0)
		str = &f->job;
	else if (strcmp(key, "user") == 0)
		str = &f->user;
	if (str) {
		if (!value || !*value || strlen(value) > FILTER_VALUE_MAX)
			return bad(err, errlen, key, "a name of 1..255 bytes", value);
		*str = value;
		return 0;
	}
	if (strcmp(key, "type") == 0) {
		static const char *const full[] = {"audit.exec",  "audit.connect", "audit.syscall",
						   "audit.limit", "audit.lost",	   "audit.summary",
						   "audit.gap"};

		for (size_t i = 0; value && i < ARRAY_SIZE(audit_types); i++)
			if (strcmp(value, audit_types[i]) == 0) {
				f->type = full[i];
				return 0;
			}
		return bad(err, errlen, key, "exec, connect, syscall, limit, lost, summary or gap",
			   value);
	}
	if (strcmp(key, "from") == 0 || strcmp(key, "to") == 0) {
		bool from = key[0] == 'f';
		int r = set_time(from ? &f->from_ns : &f->to_ns, key, value, err, errlen);

		if (r < 0)
			return r;
		if (f->from_ns && f->to_ns && f->from_ns >= f->to_ns) {
			return err_set(err, errlen, -EINVAL,
				       "%s: must be %s than %s (the range is empty)", key,
				       from ? "earlier" : "later", from ? "to" : "from");
		}
		return 0;
	}
	if (strcmp(key, "limit") == 0) {
		uint64_t v;

		if (!value || parse_u64(value, &v) < 0 || v == 0 || v > COLL_AUDIT_LIMIT_MAX)
			return bad(err, errlen, key, "1..100000", value);
		f->limit = (size_t)v;
		return 0;
	}
	if (strcmp(key, "after") == 0) {
		if (!value || coll_audit_cursor_parse(value, &f->after_ns, f->after_id) < 0)
			return bad(err, errlen, key, "a cursor from a previous answer's \"next\"",
				   value);
		f->has_after = true;
		return 0;
	}
	return err_set(err, errlen, -EINVAL, "unknown parameter '%.64s'", key);
}

void coll_audit_filter_query(const struct coll_audit_filter *f, struct coll_query *ret)
{
	*ret = (struct coll_query){
	    .type = f->type,
	    .node = f->node,
	    .task_id = f->task,
	    .job = f->job,
	    .user = f->user,
	    .from_ns = f->from_ns,
	    .to_ns = f->to_ns,
	    .audit = COLL_QUERY_AUDIT_ONLY,
	    .after_time_ns = f->after_ns,
	    .after_id = f->has_after ? f->after_id : NULL,
	};
}

int coll_audit_cursor_format(uint64_t time_ns, const char *record_id, char *buf, size_t len)
{
	size_t idl = strlen(record_id), n;
	int w;

	if (idl == 0 || idl >= ACCT_ID_MAX)
		return -EINVAL;
	w = snprintf(buf, len, "%" PRIu64 ".", time_ns);
	if (w < 0 || (size_t)w + 2 * idl >= len)
		return -ENOBUFS;
	n = (size_t)w;
	for (size_t i = 0; i < idl; i++, n += 2)
		snprintf(buf + n, len - n, "%02x", (unsigned char)record_id[i]);
	return 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	return -1;
}

int coll_audit_cursor_parse(const char *s, uint64_t *ret_time_ns, char ret_id[ACCT_ID_MAX])
{
	char num[DECIMAL_STR_MAX(uint64_t)], id[ACCT_ID_MAX];
	const char *dot = s ? strchr(s, '.') : NULL;
	size_t nl, hl;
	uint64_t t;

	if (!dot)
		return -EINVAL;
	nl = (size_t)(dot - s);
	hl = strlen(dot + 1);
	if (nl == 0 || nl >= sizeof(num) || hl == 0 || hl % 2 || hl / 2 >= ACCT_ID_MAX)
		return -EINVAL;
	memcpy(num, s, nl);
	num[nl] = 0;
	if (parse_u64(num, &t) < 0)
		return -EINVAL;
	for (size_t i = 0; i < hl / 2; i++) {
		int hi = hexval(dot[1 + 2 * i]), lo = hexval(dot[2 + 2 * i]);

		if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
			return -EINVAL;
		id[i] = (char)(hi << 4 | lo);
	}
	id[hl / 2] = 0;
	*ret_time_ns = t;
	memcpy(ret_id, id, hl / 2 + 1);
	return 0;
}

struct page {
	coll_row_fn fn;
	void *ud;
	size_t limit, n;
	bool more;
	uint64_t last_ns;
	char last_id[ACCT_ID_MAX];
};

static int page_cb(const struct coll_row *row, void *ud)
{
	struct page *p = ud;
	int r;

	if (p->limit && p->n == p->limit) {
		p->more = true; /* the one row fetched beyond the page */
		return 0;
	}
	r = p->fn(row, p->ud);
	if (r < 0)
		return r;
	p->n++;
	p->last_ns = row->time_ns;
	snprintf(p->last_id, sizeof(p->last_id), "%s", row->record_id);
	return 0;
}

int coll_audit_query(struct coll_store *s, const struct coll_audit_filter *f, coll_row_fn fn,
		     void *ud, char *next, size_t nextlen)
{
	struct page p = {.fn = fn, .ud = ud, .limit = f->limit};
	struct coll_query q;
	int r;

	coll_audit_filter_query(f, &q);
	q.limit = f->limit ? f->limit + 1 : 0;
	if (next && nextlen)
		next[0] = 0;
	r = coll_store_query(s, &q, page_cb, &p);
	if (r < 0)
		return r;
	if (p.more && next)
		return coll_audit_cursor_format(p.last_ns, p.last_id, next, nextlen);
	return 0;
}

int coll_chain_result_write_json(FILE *out, const char *node, const struct coll_chain_result *r)
{
	fputs("{\"node\":", out);
	fputs_json_string(out, node);
	fprintf(out, ",\"intact\":%s,\"checked\":%" PRIu64, r->intact ? "true" : "false",
		r->checked);
	fprintf(out,
		",\"gaps\":%" PRIu64 ",\"shed_by_policy\":%" PRIu64 ",\"summaries\":%" PRIu64
		",\"summarized\":%" PRIu64,
		r->gaps, r->shed, r->summaries, r->summarized);
	if (r->first_gap[0]) {
		fputs(",\"first_gap\":", out);
		fputs_json_string(out, r->first_gap);
	}
	fprintf(out, ",\"held_as_conflict\":%" PRIu64, r->held);
	if (r->held) {
		fputs(",\"held_ids\":", out);
		fputs_json_string(out, r->held_ids);
	}
	if (!r->intact) {
		fputs(",\"first_bad\":", out);
		fputs_json_string(out, r->first_bad);
		fputs(",\"why\":", out);
		fputs_json_string(out, r->why);
	}
	fputs("}\n", out);
	return ferror(out) ? -EIO : 0;
}
