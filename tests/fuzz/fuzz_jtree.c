/* SPDX-License-Identifier: MIT */
/*
 * The record decoder's JSON parser (accounting/jtree.c) against jansson's strict parser:
 * whatever one accepts the other accepts, with the same value. The differences that the
 * tree's rules allow are checked too: a refusal for duplicate keys, nesting past
 * JTREE_MAX_DEPTH; a raw NUL byte, which jansson lets through after a number and the tree
 * refuses anywhere. Every refusal has a message.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "accounting/jtree.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Deepest nesting of the JSON text (brackets outside strings). */
static int depth_of(const uint8_t *s, size_t n)
{
	int d = 0, max = 0;
	bool in_str = false;

	for (size_t i = 0; i < n; i++) {
		if (in_str) {
			if (s[i] == '\\')
				i++;
			else if (s[i] == '"')
				in_str = false;
		} else if (s[i] == '"') {
			in_str = true;
		} else if (s[i] == '{' || s[i] == '[') {
			if (++d > max)
				max = d;
		} else if (s[i] == '}' || s[i] == ']') {
			d--;
		}
	}
	return max;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[256] = "";
	json_error_t je;
	struct jtree t;
	json_t *ref, *mine = NULL;
	int r;

	r = jtree_parse(&t, (const char *)data, size, err, sizeof(err));
	ref = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &je);
	if (r == 0) {
		mine = jtree_to_json(t.root);
		if (!mine)
			abort();
		/* accepted here: jansson accepts it too, as the same value */
		if (!ref || !json_equal(ref, mine))
			abort();
	} else {
		if (r != -EINVAL || !err[0])
			abort();
		/* refused here: jansson refuses it too, unless only the tree's own limit applies */
		if (ref && depth_of(data, size) <= JTREE_MAX_DEPTH && !memchr(data, 0, size))
			abort();
	}
	json_decref(mine);
	json_decref(ref);
	jtree_free(&t);
	return 0;
}
