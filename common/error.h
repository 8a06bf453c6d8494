/* SPDX-License-Identifier: MIT */
/*
 * The error convention of every module: a function that can fail returns 0 (or a count) on
 * success and a negative errno on failure; where the caller needs to know more than the errno
 * (which field, which line, which syscall), it passes a message buffer (char *err, size_t
 * errlen) that the function fills, with err_set(), before it returns. Library code never
 * prints: the program logs the message once. docs/design.md, "One error convention".
 */
#pragma once

#include <stddef.h>

#include "common/macro.h"

/* Formats the message into err (when err is not NULL and errlen > 0; always NUL-terminated,
 * cut to fit) and returns r, a negative errno, so that a caller can write
 * `return err_set(err, errlen, -EINVAL, "limits.memory: invalid size \"%s\"", v);`. */
_printf_(4, 5) int err_set(char *err, size_t errlen, int r, const char *fmt, ...);
