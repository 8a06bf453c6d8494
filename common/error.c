/* SPDX-License-Identifier: MIT */
#include "common/error.h"

#include <stdarg.h>
#include <stdio.h>

int err_set(char *err, size_t errlen, int r, const char *fmt, ...)
{
	va_list ap;

	if (err && errlen) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return r;
}
