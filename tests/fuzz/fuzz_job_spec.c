/* SPDX-License-Identifier: MIT */
/* Fuzz the job spec parser: never crash, and whatever parses survives a round trip. */
#include "agent/spec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct task_spec s, s2;
	char err[512];
	json_t *j;

	spec_init(&s);
	if (spec_parse((const char *)data, size, &s, err, sizeof(err)) == 0) {
		j = spec_to_json(&s);
		spec_init(&s2);
		if (!j || spec_from_json(j, &s2, err, sizeof(err)) != 0)
			abort(); /* what parsed once must parse again */
		if (s2.argc != s.argc || s2.memory_max != s.memory_max || s2.n_labels != s.n_labels)
			abort();
		json_decref(j);
		spec_clear(&s2);
	} else if (!err[0]) {
		abort(); /* every failure explains itself */
	}
	spec_clear(&s);
	return 0;
}
