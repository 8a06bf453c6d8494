/* SPDX-License-Identifier: MIT */
/*
 * Fuzz the agent's configuration parser (common/ini_file.c over agent/config.c): never crash,
 * never leak, and every error names "config:LINE:" with a line inside the input.
 */
#include "agent/config.h"
#include "common/ini_file.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int set(void *user, const char *section, const char *key, const char *value, char *err,
	       size_t errlen)
{
	return config_set(user, section, key, value, err, errlen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct agent_config c;
	char err[1024];
	char *text = malloc(size + 1);
	size_t lines = 1;
	int r;

	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = 0;
	for (size_t i = 0; i < size && text[i]; i++)
		lines += text[i] == '\n';
	config_init_defaults(&c);
	r = ini_file_load_string("config", text, set, &c, config_repeatable_keys, err, sizeof(err));
	if (r < 0) {
		unsigned long line;

		if (strncmp(err, "config:", 7) != 0 || sscanf(err + 7, "%lu:", &line) != 1 ||
		    line < 1 || line > lines)
			abort();
	}
	config_free(&c);
	free(text);
	return 0;
}
