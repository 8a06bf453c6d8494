/* SPDX-License-Identifier: MIT */
/*
 * Bearer tokens of the collector. File format, one token per line:
 *     <role> <name> <token>
 * role: node (may POST records whose "node" equals <name>), reader (GET /v1/records without
 * the audit records, reports), auditor (the audit API only: GET /v1/audit*, nothing else).
 * '#' starts a comment line; blank lines are ignored.
 * The file must be a regular file not accessible by group or others (mode & 077 == 0),
 * since it holds secrets. Tokens are 16..256 printable characters, unique in the file.
 */
#pragma once

#include <stddef.h>

enum coll_role {
	COLL_ROLE_NODE,
	COLL_ROLE_READER,
	COLL_ROLE_AUDITOR,
	_COLL_ROLE_MAX,
	_COLL_ROLE_INVALID = -1,
};

#define COLL_TOKEN_MIN	16
#define COLL_TOKEN_MAX	256
#define COLL_TOKENS_MAX 100000

struct coll_token {
	enum coll_role role;
	char *name;
	char *token;
	size_t token_len;
	size_t lineno; /* in the file it came from */
};

struct coll_token_ix; /* tokens.c: the tokens' SHA-256 digests, sorted */

struct coll_tokens {
	size_t n;
	struct coll_token *v;
	struct coll_token_ix *ix;
};

const char *coll_role_to_string(enum coll_role r);
enum coll_role coll_role_from_string(const char *s);

/* Parse a tokens file held in memory. On error returns -EINVAL and writes "line N: ..." to err. */
int coll_tokens_parse(const char *buf, size_t len, struct coll_tokens *ret, char *err,
		      size_t errlen);
/* Load from a file, checking its type and mode first (-EPERM: group/other access). */
int coll_tokens_load(const char *path, struct coll_tokens *ret, char *err, size_t errlen);
void coll_tokens_free(struct coll_tokens *t);
/* Lookup of a presented token, NULL if unknown: a binary search over the SHA-256 digests of
 * the tokens, then a constant-time comparison with the one candidate. The time taken says
 * how the presented token's digest sorts among theirs, nothing about a token. */
const struct coll_token *coll_tokens_find(const struct coll_tokens *t, const char *token,
					  size_t len);
