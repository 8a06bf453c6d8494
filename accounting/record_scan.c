/* SPDX-License-Identifier: MIT */
/*
 * The record decoder's fast path (record.h, acct_record_scan): a task.start, task.sample or
 * task.end record read in one strict pass over its text, every field written straight into the
 * record, no tree. What it does not take, it hands to the tree decoder (jtree.c + record.c),
 * which then decides alone: another record type, a string with an escape, a control byte or a
 * byte past ASCII, an integer of more than 18 characters, usage.energy_j, members that belong to
 * other record types, and every error of any kind. So the set of accepted records, the fields
 * of each and every error message stay those of the tree decoder by construction; what the
 * scan must never do is accept a record the tree decoder refuses, or read one differently
 * (tests/unit/test_record.c and fuzz_record_decode compare the two on every input).
 *
 * Unknown top-level members (kept in `extra`) are found by a skip over their value, then that
 * value alone is parsed by jtree, which checks it as strictly as the whole record would be.
 */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "accounting/jtree.h"
#include "accounting/record.h"
#include "common/clock.h"
#include "common/macro.h"

#define PASS 1 /* not taken: the tree decoder decides */

/* Unknown top-level members the scan keeps (more: the tree decoder) */
#define SCAN_EXTRA_MAX 16
/* Nesting inside an extra member's value: the whole record's limit is JTREE_MAX_DEPTH, and the
 * record's own object is one level */
#define SCAN_EXTRA_DEPTH (JTREE_MAX_DEPTH - 2)
#define EXIT_WORD_MAX	 64 /* exit.status and exit.by: shorter than this (as record.c) */
#define MESSAGE_MAX	 4096

struct scan {
	const unsigned char *c, *end;
	struct acct_arena *arena; /* strings from here, else from malloc */
};

#define ARENA_CHUNK (64 * 1024)

void *acct_arena_alloc(struct acct_arena *a, size_t n)
{
	return jarena_alloc(&a->chunks, ARENA_CHUNK, n);
}

void acct_arena_free(struct acct_arena *a)
{
	jarena_free(&a->chunks);
}

/* p[0..len) as a C string, from the arena or malloc. */
static char *sdup(struct scan *s, const char *p, size_t len)
{
	char *d = s->arena ? acct_arena_alloc(s->arena, len + 1) : malloc(len + 1);

	if (d) {
		memcpy(d, p, len);
		d[len] = 0;
	}
	return d;
}

struct str {
	const char *p;
	size_t len;
};

struct num {
	bool real;
	int64_t i;
	double d;
};

#define IS(s, lit) ((s).len == sizeof(lit) - 1 && memcmp((s).p, lit, sizeof(lit) - 1) == 0)

static inline void ws(struct scan *s)
{
	while (s->c < s->end && (*s->c == ' ' || *s->c == '\n' || *s->c == '\t' || *s->c == '\r'))
		s->c++;
}

/* After ws: the byte ch is next (and taken). */
static inline bool take(struct scan *s, unsigned char ch)
{
	ws(s);
	if (s->c < s->end && *s->c == ch) {
		s->c++;
		return true;
	}
	return false;
}

/* Bytes that end a plain string: the quote; those the scan leaves to the tree decoder: the
 * backslash, control bytes and bytes past ASCII. */
static const unsigned char str_stop[256] = {
    [0 ... 0x1f] = 1,
    ['"'] = 1,
    ['\\'] = 1,
    [0x80 ... 0xff] = 1,
};

/* A string of printable ASCII without escapes at s->c (after ws): its text, not copied. */
static int str(struct scan *s, struct str *ret)
{
	const unsigned char *c, *end = s->end;

	ws(s);
	if (s->c == end || *s->c != '"')
		return PASS;
	c = ++s->c;
#ifdef __SSE2__
	while (end - c >= 16) {
		const __m128i v = _mm_loadu_si128((const __m128i *)(const void *)c);
		const __m128i stop =
		    _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
					      _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))),
				 _mm_cmplt_epi8(v, _mm_set1_epi8(0x20))); /* signed: also >= 0x80 */
		const unsigned mask = (unsigned)_mm_movemask_epi8(stop);

		if (mask) {
			c += __builtin_ctz(mask);
			goto stop;
		}
		c += 16;
	}
#endif
	while (c < end && !str_stop[*c])
		c++;
#ifdef __SSE2__
stop:
#endif
	if (c == end || *c != '"')
		return PASS;
	ret->p = (const char *)s->c;
	ret->len = (size_t)(c - s->c);
	s->c = c + 1;
	return 0;
}

/* A member name and its colon. */
static int key(struct scan *s, struct str *ret)
{
	if (str(s, ret))
		return PASS;
	return take(s, ':') ? 0 : PASS;
}

/* Powers of ten a double holds exactly. */
static const double exact_pow10[] = {1e0,  1e1,	 1e2,  1e3,  1e4,  1e5,	 1e6,  1e7,
				     1e8,  1e9,	 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
				     1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

/*
 * The number at s->c (after ws), JSON's grammar, read as jtree reads it: an integer of up to
 * 18 characters exactly (longer ones: the tree decoder); a real as strtod reads it. The digits
 * are summed in the same pass that checks them; a real of at most 19 digits whose value and
 * power of ten are exact doubles (at most 2^53 and 10^22) is one correctly rounded division
 * or multiplication, which is what strtod returns; any other real goes to strtod.
 */
static int num(struct scan *s, struct num *ret)
{
	const unsigned char *b, *c, *end = s->end;
	uint64_t m = 0;
	int digits = 0, scale = 0, exp = 0;
	bool neg, exact = true;
	char buf[64], *e;
	size_t len;

	ws(s);
	b = c = s->c;
	neg = c < end && *c == '-';
	c += neg;
	if (c == end || *c < '0' || *c > '9')
		return PASS;
	if (*c == '0')
		c++;
	else
		for (; c < end && *c >= '0' && *c <= '9'; c++)
			if (digits < 19) {
				m = m * 10 + (uint64_t)(*c - '0');
				digits++;
			} else {
				exact = false;
			}
	ret->real = false;
	if (c < end && *c == '.') {
		ret->real = true;
		if (++c == end || *c < '0' || *c > '9')
			return PASS;
		for (; c < end && *c >= '0' && *c <= '9'; c++)
			if (digits < 19) {
				m = m * 10 + (uint64_t)(*c - '0');
				digits++;
				scale++;
			} else {
				exact = false;
			}
	}
	if (c < end && (*c == 'e' || *c == 'E')) {
		bool eneg;

		ret->real = true;
		eneg = ++c < end && *c == '-';
		if (c < end && (*c == '+' || *c == '-'))
			c++;
		if (c == end || *c < '0' || *c > '9')
			return PASS;
		for (; c < end && *c >= '0' && *c <= '9'; c++)
			if (exp < 100000)
				exp = exp * 10 + (*c - '0');
		exp = eneg ? -exp : exp;
	}
	len = (size_t)(c - b);
	s->c = c;
	if (!ret->real) {
		if (len > 18)
			return PASS;
		ret->i = neg ? -(int64_t)m : (int64_t)m;
		return 0;
	}
	exp -= scale;
	if (exact && m <= (1ULL << 53) && exp >= -22 && exp <= 22) {
		double d = (double)m;

		d = exp < 0 ? d / exact_pow10[-exp] : d * exact_pow10[exp];
		ret->d = neg ? -d : d;
		return 0;
	}
	if (len >= sizeof(buf))
		return PASS;
	memcpy(buf, b, len);
	buf[len] = 0;
	ret->d = strtod(buf, &e);
	return *e || !isfinite(ret->d) ? PASS : 0;
}

/* An integer in [0, max] (record.c's get_u64). */
static int u64(struct scan *s, uint64_t max, uint64_t *ret)
{
	struct num n;

	if (num(s, &n) || n.real || n.i < 0 || (uint64_t)n.i > max)
		return PASS;
	*ret = (uint64_t)n.i;
	return 0;
}

/* A finite non-negative number (record.c's get_double). */
static int dbl(struct scan *s, double *ret)
{
	struct num n;
	double d;

	if (num(s, &n))
		return PASS;
	d = n.real ? n.d : (double)n.i;
	if (!isfinite(d) || d < 0)
		return PASS;
	*ret = d;
	return 0;
}

/* An integer of int's range (record.c's get_int). */
static int i32(struct scan *s, int *ret)
{
	struct num n;

	if (num(s, &n) || n.real || n.i < -2147483647LL - 1 || n.i > 2147483647LL)
		return PASS;
	*ret = (int)n.i;
	return 0;
}

static bool null(struct scan *s)
{
	ws(s);
	if (s->end - s->c >= 4 && memcmp(s->c, "null", 4) == 0) {
		s->c += 4;
		return true;
	}
	return false;
}

/* An optional string of fewer than max bytes, copied (null: absent, as record.c's
 * get_str_dup). */
static int str_dup(struct scan *s, size_t max, char **ret)
{
	struct str v;

	if (*ret)
		return PASS; /* the member twice */
	if (null(s))
		return 0;
	if (str(s, &v) || v.len >= max)
		return PASS;
	*ret = sdup(s, v.p, v.len);
	return *ret ? 0 : -ENOMEM;
}

/*
 * The members of an object at s->c: fn(s, name, ud) for each, which reads the value. A name
 * twice: PASS (the tree decoder refuses it). Names are told apart by fn returning a bit per
 * name in *seen.
 */
typedef int (*member_fn)(struct scan *s, const struct str *name, void *ud, uint64_t *bit);

static int object(struct scan *s, member_fn fn, void *ud)
{
	uint64_t seen = 0, bit;
	struct str name;
	int r;

	if (!take(s, '{'))
		return PASS;
	if (take(s, '}'))
		return 0;
	do {
		if (key(s, &name))
			return PASS;
		bit = 0;
		if ((r = fn(s, &name, ud, &bit)) != 0)
			return r;
		if (!bit || (seen & bit))
			return PASS;
		seen |= bit;
	} while (take(s, ','));
	return take(s, '}') ? 0 : PASS;
}

/* task.labels: string values, each key and value shorter than ACCT_NAME_MAX, a key once (as
 * acct_task_add_label checks them), at most ACCT_LABELS_MAX. */
static int labels(struct scan *s, struct acct_task *t)
{
	struct str k[ACCT_LABELS_MAX], v[ACCT_LABELS_MAX];
	size_t n = 0;

	if (t->labels || !take(s, '{'))
		return PASS; /* labels twice */
	if (take(s, '}'))
		return 0;
	do {
		if (n == ACCT_LABELS_MAX || key(s, &k[n]) || str(s, &v[n]) || k[n].len == 0 ||
		    k[n].len >= ACCT_NAME_MAX || v[n].len >= ACCT_NAME_MAX)
			return PASS;
		for (size_t i = 0; i < n; i++)
			if (k[i].len == k[n].len && memcmp(k[i].p, k[n].p, k[n].len) == 0)
				return PASS;
		n++;
	} while (take(s, ','));
	if (!take(s, '}'))
		return PASS;
	t->labels = s->arena ? acct_arena_alloc(s->arena, n * sizeof(*t->labels))
			     : calloc(n, sizeof(*t->labels));
	if (!t->labels)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		t->labels[i].key = sdup(s, k[i].p, k[i].len);
		t->labels[i].value = sdup(s, v[i].p, v[i].len);
		t->n_labels = i + 1; /* (malloc'd: task_clear frees them, NULL or not) */
		if (!t->labels[i].key || !t->labels[i].value)
			return -ENOMEM;
	}
	return 0;
}

static int task_member(struct scan *s, const struct str *n, void *ud, uint64_t *bit)
{
	struct acct_task *t = ud;
	struct str v;
	uint64_t u;

	if (IS(*n, "id")) {
		*bit = 1;
		if (str(s, &v) || v.len == 0 || v.len >= sizeof(t->id))
			return PASS;
		memcpy(t->id, v.p, v.len);
		t->id[v.len] = 0;
		return 0;
	}
	if (IS(*n, "job")) {
		*bit = 2;
		return str_dup(s, ACCT_NAME_MAX, &t->job);
	}
	if (IS(*n, "user")) {
		*bit = 4;
		return str_dup(s, ACCT_NAME_MAX, &t->user);
	}
	if (IS(*n, "account")) {
		*bit = 8;
		return str_dup(s, ACCT_NAME_MAX, &t->account);
	}
	if (IS(*n, "uid")) {
		*bit = 16;
		if (u64(s, UINT32_MAX, &u))
			return PASS;
		t->uid = (uint32_t)u;
		return 0;
	}
	if (IS(*n, "labels")) {
		*bit = 32;
		return labels(s, t);
	}
	return PASS;
}

static int request_member(struct scan *s, const struct str *n, void *ud, uint64_t *bit)
{
	struct acct_request *q = ud;
	uint64_t u;

	if (IS(*n, "cpus")) {
		*bit = 1;
		return dbl(s, &q->cpus);
	}
	if (IS(*n, "memory_bytes")) {
		*bit = 2;
		return u64(s, INT64_MAX, &q->memory_bytes);
	}
	if (IS(*n, "pids")) {
		*bit = 4;
		return u64(s, INT64_MAX, &q->pids);
	}
	if (IS(*n, "gpus")) {
		*bit = 8;
		if (u64(s, UINT32_MAX, &u))
			return PASS;
		q->gpus = (uint32_t)u;
		return 0;
	}
	if (IS(*n, "time_limit_s")) {
		*bit = 16;
		return u64(s, INT64_MAX, &q->time_limit_s);
	}
	if (IS(*n, "cpu_time_limit_s")) {
		*bit = 32;
		return u64(s, INT64_MAX, &q->cpu_time_limit_s);
	}
	if (IS(*n, "gpu_memory_bytes")) {
		*bit = 64;
		return u64(s, INT64_MAX, &q->gpu_memory_bytes);
	}
	return PASS;
}

/* The usage fields' names by number (as acct_usage_field_name: test_record.c compares). */
#define U(f, name) [f] = {name, sizeof(name) - 1}
static const struct {
	const char *s;
	size_t len;
} usage_names[_ACCT_U_MAX] = {
    U(ACCT_U_WALL_NS, "wall_ns"),
    U(ACCT_U_CPU_USER_NS, "cpu_user_ns"),
    U(ACCT_U_CPU_SYSTEM_NS, "cpu_system_ns"),
    U(ACCT_U_MEMORY_PEAK_BYTES, "memory_peak_bytes"),
    U(ACCT_U_MEMORY_BYTE_SECONDS, "memory_byte_seconds"),
    U(ACCT_U_IO_READ_BYTES, "io_read_bytes"),
    U(ACCT_U_IO_WRITE_BYTES, "io_write_bytes"),
    U(ACCT_U_NET_RX_BYTES, "net_rx_bytes"),
    U(ACCT_U_NET_TX_BYTES, "net_tx_bytes"),
    U(ACCT_U_GPU_SECONDS, "gpu_seconds"),
    U(ACCT_U_GPU_MEMORY_PEAK_BYTES, "gpu_memory_peak_bytes"),
    U(ACCT_U_GPU_UTIL_AVG, "gpu_util_avg"),
};
#undef U

const char *acct_scan_usage_field_name(int f)
{
	return f >= 0 && f < _ACCT_U_MAX ? usage_names[f].s : NULL;
}

/* A usage field's number by its name (-1: not one): the length first, then the bytes. */
static int usage_field(const struct str *n)
{
	for (int f = 0; f < _ACCT_U_MAX; f++)
		if (usage_names[f].len == n->len && memcmp(usage_names[f].s, n->p, n->len) == 0)
			return f;
	return -1;
}

static int usage_member(struct scan *s, const struct str *n, void *ud, uint64_t *bit)
{
	struct acct_usage *u = ud;
	int f = n->len ? usage_field(n) : -1;

	switch (f) {
	case ACCT_U_MEMORY_BYTE_SECONDS:
		*bit = 1u << f;
		return dbl(s, &u->memory_byte_seconds);
	case ACCT_U_GPU_SECONDS:
		*bit = 1u << f;
		return dbl(s, &u->gpu_seconds);
	case ACCT_U_GPU_UTIL_AVG:
		*bit = 1u << f;
		return dbl(s, &u->gpu_util_avg);
	case ACCT_U_WALL_NS:
		*bit = 1u << f;
		return u64(s, INT64_MAX, &u->wall_ns);
	case ACCT_U_CPU_USER_NS:
		*bit = 1u << f;
		return u64(s, INT64_MAX, &u->cpu_user_ns);
	case ACCT_U_CPU_SYSTEM_NS:
		*bit = 1u << f;
		return u64(s, INT64_MAX, &u->cpu_system_ns);
	case ACCT_U_MEMORY_PEAK_BYTES:
		*bit = 1u << f;
		return u64(s, INT64_MAX, &u->memory_peak_bytes);
	case ACCT_U_IO_READ_BYTES:
		*bit = 1u << f;
		return u64(s, INT64_MAX, &u->io_read_bytes);
	case ACCT_U_IO_WRITE_BYTES:
		*bit = 1u << f;
		return u64(s, INT64_MAX, &u->io_write_bytes);
	case ACCT_U_NET_RX_BYTES:
		*bit = 1u << f;
		return u64(s, INT64_MAX, &u->net_rx_bytes);
	case ACCT_U_NET_TX_BYTES:
		*bit = 1u << f;
		return u64(s, INT64_MAX, &u->net_tx_bytes);
	case ACCT_U_GPU_MEMORY_PEAK_BYTES:
		*bit = 1u << f;
		return u64(s, INT64_MAX, &u->gpu_memory_peak_bytes);
	default:
		return PASS; /* energy_j too: its checks are the tree decoder's */
	}
}

static int sources_member(struct scan *s, const struct str *n, void *ud, uint64_t *bit)
{
	enum acct_source *src = ud;
	int f = n->len ? usage_field(n) : -1;
	enum acct_source v;
	char buf[16];
	struct str w;

	if (f < 0 || str(s, &w) || w.len >= sizeof(buf))
		return PASS;
	memcpy(buf, w.p, w.len);
	buf[w.len] = 0;
	v = acct_source_from_string(buf);
	if (v == _ACCT_SRC_INVALID || v == ACCT_SRC_NONE)
		return PASS;
	src[f] = v;
	*bit = 1u << f;
	return 0;
}

/* exit.status or exit.by's word, NUL-terminated in buf. */
static int word(struct scan *s, char buf[EXIT_WORD_MAX])
{
	struct str w;

	if (str(s, &w) || w.len >= EXIT_WORD_MAX)
		return PASS;
	memcpy(buf, w.p, w.len);
	buf[w.len] = 0;
	return 0;
}

static int exit_member(struct scan *s, const struct str *n, void *ud, uint64_t *bit)
{
	struct acct_exit *x = ud;
	char w[EXIT_WORD_MAX];

	if (IS(*n, "status")) {
		*bit = 1;
		if (word(s, w))
			return PASS;
		x->status = acct_exit_status_from_string(w);
		return x->status == _ACCT_EXIT_INVALID || x->status == ACCT_EXIT_NONE ? PASS : 0;
	}
	if (IS(*n, "code")) {
		*bit = 2;
		return i32(s, &x->code);
	}
	if (IS(*n, "signal")) {
		*bit = 4;
		if (i32(s, &x->signal))
			return PASS;
		return x->signal < 0 || x->signal > 128 ? PASS : 0;
	}
	if (IS(*n, "message")) {
		*bit = 8;
		return str_dup(s, MESSAGE_MAX, &x->message);
	}
	if (IS(*n, "oom_kills")) {
		*bit = 16;
		return u64(s, INT64_MAX, &x->oom_kills);
	}
	if (IS(*n, "by")) {
		*bit = 32;
		if (null(s))
			return 0;
		if (word(s, w))
			return PASS;
		x->by = acct_exit_by_from_string(w);
		return x->by == _ACCT_BY_INVALID || x->by == ACCT_BY_NONE ? PASS : 0;
	}
	return PASS;
}

/* Past the value at s->c (after ws) without reading it: its end (the caller has jtree check
 * what was skipped). Strings end at their first unescaped quote. */
static int skip(struct scan *s)
{
	const unsigned char *c = s->c, *end = s->end;
	int depth = 0;

	for (; c < end; c++) {
		switch (*c) {
		case '"':
			for (c++; c < end && *c != '"'; c++)
				if (*c == '\\')
					c++;
			if (c >= end)
				return PASS;
			break;
		case '{':
		case '[':
			if (++depth > SCAN_EXTRA_DEPTH)
				return PASS;
			break;
		case '}':
		case ']':
			if (depth == 0)
				goto out;
			depth--;
			break;
		case ',':
			if (depth == 0)
				goto out;
			break;
		default:
			break;
		}
	}
out:
	if (depth != 0)
		return PASS;
	s->c = c;
	return 0;
}

/* An unknown top-level member's value text[0..len) into extra under name, checked by jtree
 * (as it would be inside the whole record). */
static int add_extra(json_t **extra, const struct str *name, const char *text, size_t len)
{
	char k[ACCT_NAME_MAX], jerr[8];
	struct jtree t;
	json_t *v;
	int r;

	if (name->len >= sizeof(k))
		return PASS;
	memcpy(k, name->p, name->len);
	k[name->len] = 0;
	r = jtree_parse(&t, text, len, jerr, sizeof(jerr));
	if (r < 0) {
		jtree_free(&t);
		return r == -ENOMEM ? r : PASS;
	}
	v = jtree_to_json(t.root);
	jtree_free(&t);
	if (!v)
		return -ENOMEM;
	if (!*extra && !(*extra = json_object())) {
		json_decref(v);
		return -ENOMEM;
	}
	return json_object_set_new(*extra, k, v) < 0 ? -ENOMEM : 0;
}

/* record.c's decode_time: "YYYY-MM-DDTHH:MM:SS[.frac](Z|+00:00)", years 1970..2500. */
#define D2(p, i) ((unsigned)((p)[i] - '0') * 10 + (unsigned)((p)[(i) + 1] - '0'))

/*
 * A valid date and time (every field in range, the day within its month, no leap second) with
 * an optional fraction and "Z" or "+00:00", the pattern checked: its time as parse_rfc3339
 * gives it (strptime and timegm), computed here (days from the civil date, H. Hinnant's
 * days_from_civil). False for anything else, which parse_rfc3339 then reads itself.
 */
static bool rtime_valid(const struct str *v, int year, uint64_t *ret)
{
	static const unsigned char mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	const char *p = v->p;
	const unsigned mo = D2(p, 5), d = D2(p, 8), h = D2(p, 11), mi = D2(p, 14), sec = D2(p, 17);
	const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
	uint64_t frac = 0, scale = 100000000ULL, days;
	unsigned yoe, doy;
	size_t i = 19;
	int y;

	if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] + (unsigned)(mo == 2 && leap) ||
	    h > 23 || mi > 59 || sec > 59)
		return false;
	if (i < v->len && p[i] == '.') {
		if (++i == v->len || p[i] < '0' || p[i] > '9')
			return false;
		for (; i < v->len && p[i] >= '0' && p[i] <= '9'; i++) {
			frac += (uint64_t)(p[i] - '0') * scale;
			scale /= 10;
		}
	}
	if (!((v->len - i == 1 && p[i] == 'Z') ||
	      (v->len - i == 6 && memcmp(p + i, "+00:00", 6) == 0)))
		return false;
	y = year - (mo <= 2); /* years from March: February last */
	yoe = (unsigned)(y % 400);
	doy = (153 * (mo > 2 ? mo - 3 : mo + 9) + 2) / 5 + d - 1;
	days = (uint64_t)(y / 400) * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
	*ret = ((days * 24 + h) * 60 + mi) * 60 * NSEC_PER_SEC + sec * NSEC_PER_SEC + frac;
	return true;
}

static int rtime(const struct str *v, uint64_t *ret)
{
	static const char pat[] = "dddd-dd-ddTdd:dd:dd";
	char buf[RFC3339_MAX + 16];
	int year;

	if (v->len >= sizeof(buf) || v->len < sizeof(pat) - 1)
		return PASS;
	for (size_t i = 0; i < sizeof(pat) - 1; i++)
		if (pat[i] == 'd' ? v->p[i] < '0' || v->p[i] > '9' : v->p[i] != pat[i])
			return PASS;
	year =
	    (v->p[0] - '0') * 1000 + (v->p[1] - '0') * 100 + (v->p[2] - '0') * 10 + (v->p[3] - '0');
	if (year < 1970 || year > 2500)
		return PASS;
	if (rtime_valid(v, year, ret))
		return 0;
	memcpy(buf, v->p, v->len);
	buf[v->len] = 0;
	return parse_rfc3339(buf, ret) < 0 ? PASS : 0;
}

enum top {
	TOP_SCHEMA = 1 << 0,
	TOP_TYPE = 1 << 1,
	TOP_ID = 1 << 2,
	TOP_TIME = 1 << 3,
	TOP_NODE = 1 << 4,
	TOP_TASK = 1 << 5,
	TOP_REQUEST = 1 << 6,
	TOP_USAGE = 1 << 7,
	TOP_EXIT = 1 << 8,
	TOP_SOURCES = 1 << 9,
	TOP_REQUIRED = TOP_SCHEMA | TOP_TYPE | TOP_ID | TOP_TIME | TOP_NODE | TOP_TASK,
};

struct extra_at {
	struct str name;
	const char *text;
	size_t len;
};

/* A member scan_top does not decode, kept as raw text for the record's extras: a name twice
 * among them is refused (PASS: the tree decoder refuses it with its message), as is one past
 * SCAN_EXTRA_MAX or an empty name. */
static int top_extra(struct scan *s, struct extra_at *extras, size_t *n_extra, struct str n)
{
	int r;

	if (*n_extra == SCAN_EXTRA_MAX || n.len == 0)
		return PASS;
	for (size_t i = 0; i < *n_extra; i++)
		if (extras[i].name.len == n.len && memcmp(extras[i].name.p, n.p, n.len) == 0)
			return PASS;
	extras[*n_extra].name = n;
	extras[*n_extra].text = (const char *)s->c;
	if ((r = skip(s)) != 0)
		return r;
	extras[*n_extra].len = (size_t)((const char *)s->c - extras[*n_extra].text);
	(*n_extra)++;
	return 0;
}

/* Whether the members seen (enum top) make a whole record of rec's type. */
static bool top_complete(const struct acct_record *rec, unsigned seen)
{
	if ((seen & TOP_REQUIRED) != TOP_REQUIRED)
		return false;
	/* what the record's type requires or refuses */
	if ((rec->type == ACCT_TASK_START && !(seen & TOP_REQUEST)) ||
	    (rec->type != ACCT_TASK_START && !(seen & TOP_USAGE)) ||
	    (rec->type == ACCT_TASK_END) != !!(seen & TOP_EXIT))
		return false;
	if (!rec->task.id[0])
		return false; /* task.id is required */
	if (rec->type == ACCT_TASK_END && rec->exit.status == ACCT_EXIT_NONE)
		return false; /* exit.status is required */
	return true;
}

static int scan_top(struct scan *s, struct acct_record *rec)
{
	struct extra_at extras[SCAN_EXTRA_MAX];
	size_t n_extra = 0;
	unsigned seen = 0, bit;
	struct str n, v;
	int r;

	if (!take(s, '{'))
		return PASS;
	do {
		if (key(s, &n))
			return PASS;
		ws(s);
		bit = 0;
		r = PASS;
		switch (n.len) {
		case 4:
			if (IS(n, "type")) {
				bit = TOP_TYPE;
				if (str(s, &v))
					break;
				if (IS(v, "task.end"))
					rec->type = ACCT_TASK_END;
				else if (IS(v, "task.sample"))
					rec->type = ACCT_TASK_SAMPLE;
				else if (IS(v, "task.start"))
					rec->type = ACCT_TASK_START;
				else
					break; /* the other types: the tree decoder */
				r = 0;
			} else if (IS(n, "time")) {
				bit = TOP_TIME;
				r = str(s, &v) ? PASS : rtime(&v, &rec->time_ns);
			} else if (IS(n, "node")) {
				bit = TOP_NODE;
				if (rec->node || str(s, &v) || v.len == 0 || v.len >= ACCT_NAME_MAX)
					break;
				rec->node = sdup(s, v.p, v.len);
				r = rec->node ? 0 : -ENOMEM;
			} else if (IS(n, "task")) {
				bit = TOP_TASK;
				r = object(s, task_member, &rec->task);
			} else if (IS(n, "exit")) {
				bit = TOP_EXIT;
				r = object(s, exit_member, &rec->exit);
			} else if (IS(n, "hash")) {
				break;
			} else {
				goto extra;
			}
			break;
		case 5:
			if (IS(n, "usage")) {
				bit = TOP_USAGE;
				r = object(s, usage_member, &rec->usage);
			} else if (IS(n, "event")) {
				break;
			} else {
				goto extra;
			}
			break;
		case 6:
			if (!IS(n, "schema"))
				goto extra;
			bit = TOP_SCHEMA;
			if (!str(s, &v) && (IS(v, ACCT_SCHEMA) || IS(v, ACCT_SCHEMA_V2)))
				r = 0;
			break;
		case 7:
			if (IS(n, "request")) {
				bit = TOP_REQUEST;
				r = object(s, request_member, &rec->request);
			} else if (IS(n, "sources")) {
				bit = TOP_SOURCES;
				r = object(s, sources_member, rec->sources);
			} else {
				goto extra;
			}
			break;
		case 9:
			if (IS(n, "record_id")) {
				bit = TOP_ID;
				if (str(s, &v) || v.len == 0 || v.len >= sizeof(rec->record_id))
					break;
				memcpy(rec->record_id, v.p, v.len);
				rec->record_id[v.len] = 0;
				r = 0;
			} else if (IS(n, "prev_hash")) {
				break;
			} else {
				goto extra;
			}
			break;
		default:
		extra:
			r = top_extra(s, extras, &n_extra, n);
			bit = 1u << 31;
			break;
		}
		if (r != 0)
			return r;
		if (bit != 1u << 31) {
			if (seen & bit)
				return PASS;
			seen |= bit;
		}
	} while (take(s, ','));
	if (!take(s, '}'))
		return PASS;
	ws(s);
	if (s->c != s->end || !top_complete(rec, seen))
		return PASS;
	for (size_t i = 0; i < n_extra; i++)
		if ((r = add_extra(&rec->extra, &extras[i].name, extras[i].text, extras[i].len)) !=
		    0)
			return r;
	return 0;
}

int acct_record_scan(const char *buf, size_t len, struct acct_record *ret, struct acct_arena *arena)
{
	struct scan s = {.c = (const unsigned char *)buf,
			 .end = (const unsigned char *)buf + len,
			 .arena = arena};
	struct acct_record rec = {.in_arena = arena != NULL};
	int r;

	if (!buf || len > ACCT_RECORD_MAX_BYTES)
		return PASS;
	r = scan_top(&s, &rec);
	if (r != 0) {
		acct_record_clear(&rec);
		return r;
	}
	*ret = rec;
	return 0;
}
