/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "collector/tokens.h"
#include "common/error.h"
#include "common/macro.h"
#include "common/fileio.h"

#define TOKENS_FILE_MAX (16 * 1024 * 1024)

static const char *const role_names[_COLL_ROLE_MAX] = {
    [COLL_ROLE_NODE] = "node",
    [COLL_ROLE_READER] = "reader",
    [COLL_ROLE_AUDITOR] = "auditor",
};

const char *coll_role_to_string(enum coll_role r)
{
	return (unsigned)r < _COLL_ROLE_MAX ? role_names[r] : NULL;
}

enum coll_role coll_role_from_string(const char *s)
{
	for (int i = 0; i < _COLL_ROLE_MAX; i++)
		if (s && strcmp(s, role_names[i]) == 0)
			return i;
	return _COLL_ROLE_INVALID;
}

void coll_tokens_free(struct coll_tokens *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->v[i].name);
		if (t->v[i].token) {
			explicit_bzero(t->v[i].token, t->v[i].token_len);
			free(t->v[i].token);
		}
	}
	free(t->v);
	free(t->ix);
	t->v = NULL;
	t->ix = NULL;
	t->n = 0;
}

struct coll_token_ix {
	unsigned char h[32];
	size_t i; /* into v */
};

static int digest(const char *tok, size_t len, unsigned char h[32])
{
	unsigned int hl = 0;

	return EVP_Digest(tok, len, h, &hl, EVP_sha256(), NULL) == 1 && hl == 32 ? 0 : -ENOMEM;
}

static int ix_cmp(const void *a, const void *b)
{
	const struct coll_token_ix *x = a, *y = b;
	int c = memcmp(x->h, y->h, sizeof(x->h));

	return c ? c : (x->i > y->i) - (x->i < y->i);
}

/* The sorted digest index of t; a token given twice is an error naming its second line. */
static int build_index(struct coll_tokens *t, char *err, size_t errlen)
{
	t->ix = calloc(t->n, sizeof(*t->ix));
	if (!t->ix)
		return -ENOMEM;
	for (size_t i = 0; i < t->n; i++) {
		t->ix[i].i = i;
		if (digest(t->v[i].token, t->v[i].token_len, t->ix[i].h) < 0)
			return -ENOMEM;
	}
	qsort(t->ix, t->n, sizeof(*t->ix), ix_cmp);
	for (size_t k = 1; k < t->n; k++) {
		const struct coll_token *a = &t->v[t->ix[k - 1].i], *b = &t->v[t->ix[k].i];

		if (memcmp(t->ix[k - 1].h, t->ix[k].h, 32) == 0 &&
		    strcmp(a->token, b->token) == 0) {
			snprintf(err, errlen, "line %zu: token already used by %s '%s'", b->lineno,
				 coll_role_to_string(a->role), a->name);
			return -EINVAL;
		}
	}
	return 0;
}

static bool token_char_ok(char c)
{
	return c > ' ' && c < 0x7f;
}

/* Split a line into at most 4 whitespace-separated fields (the 4th means "too many"). */
static int split(char *line, char *f[4])
{
	int n = 0;
	char *save = NULL;

	for (char *p = strtok_r(line, " \t", &save); p && n < 4; p = strtok_r(NULL, " \t", &save))
		f[n++] = p;
	return n;
}

int coll_tokens_parse(const char *buf, size_t len, struct coll_tokens *ret, char *err,
		      size_t errlen)
{
	struct coll_tokens t = {0};
	size_t cap = 0, lineno = 0;
	const char *p = buf, *end = buf + len;
	int r = -EINVAL;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t ll = nl ? (size_t)(nl - p) : (size_t)(end - p);
		char line[COLL_TOKEN_MAX + 2 * 256 + 16];
		char *f[4];
		enum coll_role role;
		int nf;

		lineno++;
		if (ll >= sizeof(line)) {
			snprintf(err, errlen, "line %zu: too long", lineno);
			goto out_free;
		}
		if (memchr(p, 0, ll)) {
			snprintf(err, errlen, "line %zu: NUL byte", lineno);
			goto out_free;
		}
		memcpy(line, p, ll);
		line[ll] = 0;
		p += ll + (nl ? 1 : 0);
		if (ll && line[ll - 1] == '\r')
			line[ll - 1] = 0;
		{
			const char *q = line + strspn(line, " \t");

			if (*q == 0 || *q == '#')
				continue;
		}
		nf = split(line, f);
		if (nf != 3) {
			snprintf(err, errlen,
				 "line %zu: expected \"<role> <name> <token>\", got %s%d field%s",
				 lineno, nf > 3 ? "more than " : "", nf > 3 ? 3 : nf,
				 nf == 1 ? "" : "s");
			goto out_free;
		}
		role = coll_role_from_string(f[0]);
		if (role == _COLL_ROLE_INVALID) {
			snprintf(err, errlen,
				 "line %zu: unknown role '%.32s' (want node, reader or auditor)",
				 lineno, f[0]);
			goto out_free;
		}
		if (strlen(f[1]) > 255) {
			snprintf(err, errlen, "line %zu: name longer than 255 bytes", lineno);
			goto out_free;
		}
		if (strlen(f[2]) < COLL_TOKEN_MIN || strlen(f[2]) > COLL_TOKEN_MAX) {
			snprintf(err, errlen, "line %zu: token must be %d..%d characters", lineno,
				 COLL_TOKEN_MIN, COLL_TOKEN_MAX);
			goto out_free;
		}
		for (const char *c = f[2]; *c; c++)
			if (!token_char_ok(*c)) {
				snprintf(err, errlen,
					 "line %zu: token has a non-printable character", lineno);
				goto out_free;
			}
		if (t.n >= COLL_TOKENS_MAX) {
			snprintf(err, errlen, "line %zu: more than %d tokens", lineno,
				 COLL_TOKENS_MAX);
			goto out_free;
		}
		if (t.n == cap) {
			size_t nc = cap ? cap * 2 : 8;
			struct coll_token *nv = realloc(t.v, nc * sizeof(*nv));

			if (!nv) {
				r = -ENOMEM;
				goto out_free;
			}
			t.v = nv;
			cap = nc;
		}
		t.v[t.n] = (struct coll_token){
		    .role = role,
		    .name = strdup(f[1]),
		    .token = strdup(f[2]),
		    .token_len = strlen(f[2]),
		    .lineno = lineno,
		};
		t.n++;
		explicit_bzero(line, sizeof(line));
		if (!t.v[t.n - 1].name || !t.v[t.n - 1].token) {
			r = -ENOMEM;
			goto out_free;
		}
	}
	if (t.n == 0) {
		snprintf(err, errlen, "no tokens defined");
		goto out_free;
	}
	r = build_index(&t, err, errlen);
	if (r < 0)
		goto out_free;
	*ret = t;
	return 0;

out_free:
	coll_tokens_free(&t);
	return r;
}

int coll_tokens_load(const char *path, struct coll_tokens *ret, char *err, size_t errlen)
{
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	int r;

	fd = open_regular(path);
	if (fd < 0)
		return err_set(err, errlen, fd, "%s: %s", path, regular_file_strerror(fd));
	/* as ssh takes a private key: only this user or root may own it, nobody else reach it */
	r = secret_fd_check(fd, "tokens file", path, err, errlen);
	if (r < 0)
		return r;
	/* the file whose mode was checked, not one put in its place since */
	r = read_fd(fd, TOKENS_FILE_MAX, &buf, &len);
	if (r < 0) {
		return err_set(err, errlen, r, "%s: %s", path, strerror(-r));
	}
	r = coll_tokens_parse(buf, len, ret, err, errlen);
	explicit_bzero(buf, len);
	if (r < 0 && r != -ENOMEM) {
		/* prefix the path to "line N: ..." */
		char tmp[256];

		snprintf(tmp, sizeof(tmp), "%s", err);
		snprintf(err, errlen, "%s: %s", path, tmp);
	}
	return r;
}

const struct coll_token *coll_tokens_find(const struct coll_tokens *t, const char *token,
					  size_t len)
{
	struct coll_token_ix key;
	size_t lo = 0, hi;

	if (!token || len == 0 || len > COLL_TOKEN_MAX || !t->ix || digest(token, len, key.h) < 0)
		return NULL;
	hi = t->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = memcmp(t->ix[mid].h, key.h, sizeof(key.h));

		if (c == 0) {
			const struct coll_token *cand = &t->v[t->ix[mid].i];

			/* the digest matched; the token itself is compared in constant time */
			return cand->token_len == len && CRYPTO_memcmp(cand->token, token, len) == 0
				   ? cand
				   : NULL;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}
