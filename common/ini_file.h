/* SPDX-License-Identifier: MIT */
/*
 * INI configuration files (inih) with the checks both programs' config files share: every
 * error names "file:line:", a key set twice in a section is refused (naming both lines), and a
 * line inih cannot parse is a syntax error at its line.
 */
#pragma once

#include <stddef.h>

/* Sets one key. Returns 0, or a negative errno with err filled ("[section] key: problem"). */
typedef int (*ini_file_set_fn)(void *user, const char *section, const char *key, const char *value,
			       char *err, size_t errlen);

/* The most keys one file may set: a config file longer than this is refused. */
#define INI_FILE_MAX_KEYS 4096

/*
 * Parses path, calling set for each key in file order and stopping at the first error.
 * repeatable: NULL, or a NULL-terminated list of "section.key" that may appear more than once
 * (list keys: each line adds an item).
 * Returns 0; -ENOENT (and other open errors) with err = "path: reason"; -EINVAL (or the
 * setter's error) with err = "path:line: message".
 */
int ini_file_load(const char *path, ini_file_set_fn set, void *user, const char *const *repeatable,
		  char *err, size_t errlen);

/* The same over a string already in memory; name stands for the path in messages. */
int ini_file_load_string(const char *name, const char *text, ini_file_set_fn set, void *user,
			 const char *const *repeatable, char *err, size_t errlen);
