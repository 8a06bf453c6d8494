/* SPDX-License-Identifier: MIT */
/* Terminal- and log-safe text: see common/escape.h. */
#include "common/escape.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at p (1..4), its code point in *cp; 0 when invalid. */
static size_t utf8_seq(const unsigned char *p, uint32_t *cp)
{
	uint32_t c = p[0], min;
	size_t n;

	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	if ((c & 0xe0) == 0xc0) {
		n = 2;
		c &= 0x1f;
		min = 0x80;
	} else if ((c & 0xf0) == 0xe0) {
		n = 3;
		c &= 0x0f;
		min = 0x800;
	} else if ((c & 0xf8) == 0xf0) {
		n = 4;
		c &= 0x07;
		min = 0x10000;
	} else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80) /* also stops at the NUL */
			return 0;
		c = (c << 6) | (p[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return n;
}

ssize_t utf8_invalid_at(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	uint32_t cp;

	while (*p) {
		size_t n = utf8_seq(p, &cp);

		if (!n)
			return (ssize_t)(p - (const unsigned char *)s);
		p += n;
	}
	return -1;
}

bool text_printable(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	uint32_t cp;

	while (*p) {
		size_t n = utf8_seq(p, &cp);

		if (!n || cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f))
			return false;
		p += n;
	}
	return true;
}

size_t esc_text(const char *s, char *buf, size_t len)
{
	static const char ctl[] = "\a\b\t\n\v\f\r", name[] = "abtnvfr";
	const unsigned char *p = (const unsigned char *)s;
	size_t need = 0, used = 0;
	bool cut = false;

	while (*p) {
		char tmp[16];
		const char *c;
		size_t k = 0, n;
		uint32_t cp;

		n = utf8_seq(p, &cp);
		if (n == 1 && cp == '\\') {
			memcpy(tmp, "\\\\", 2);
			k = 2;
		} else if (n == 1 && cp >= 0x20 && cp != 0x7f) {
			tmp[0] = (char)cp;
			k = 1;
		} else if (n == 1 && (c = memchr(ctl, (int)cp, sizeof(ctl) - 1))) {
			tmp[0] = '\\';
			tmp[1] = name[c - ctl];
			k = 2;
		} else if (n > 1 && !(cp >= 0x80 && cp <= 0x9f)) {
			memcpy(tmp, p, n);
			k = n;
		} else {
			/* another C0, DEL, C1 (both bytes), or one byte of invalid UTF-8 */
			if (!n)
				n = 1;
			for (size_t i = 0; i < n; i++)
				k += (size_t)snprintf(tmp + k, sizeof(tmp) - k, "\\x%02x", p[i]);
		}
		if (buf && !cut && used + k < len) {
			memcpy(buf + used, tmp, k);
			used += k;
		} else
			cut = true;
		need += k;
		p += n;
	}
	if (buf && len)
		buf[used] = 0;
	return need;
}

char *esc_dup(const char *s)
{
	size_t n = esc_text(s, NULL, 0);
	char *b = malloc(n + 1);

	if (b)
		esc_text(s, b, n + 1);
	return b;
}

void fputs_json_string(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;

	fputc('"', f);
	while (*p) {
		size_t run = 0;

		/* the bytes that need no escape written as one run: a record id is all of them */
		while (p[run] && p[run] != '"' && p[run] != '\\' && p[run] >= 0x20)
			run++;
		fwrite(p, 1, run, f);
		p += run;
		if (!*p)
			break;
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else
			fprintf(f, "\\u%04x", *p);
		p++;
	}
	fputc('"', f);
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *b64_encode(const void *data, size_t len)
{
	const unsigned char *p = data;
	char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;

	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;

		if (i + 1 < len)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < len)
			v |= p[i + 2];
		*o++ = b64_alphabet[(v >> 18) & 63];
		*o++ = b64_alphabet[(v >> 12) & 63];
		*o++ = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
		*o++ = i + 2 < len ? b64_alphabet[v & 63] : '=';
	}
	*o = 0;
	return out;
}

static int b64_value(char c)
{
	const char *p = c ? strchr(b64_alphabet, c) : NULL;

	return p ? (int)(p - b64_alphabet) : -1;
}

int b64_decode(const char *s, char **ret, size_t *ret_len)
{
	size_t n = strlen(s), o = 0;
	char *out;

	if (n % 4)
		return -EINVAL;
	out = malloc(n / 4 * 3 + 1);
	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < n; i += 4) {
		int v[4];
		bool last = i + 4 == n;

		for (int k = 0; k < 4; k++) {
			v[k] = b64_value(s[i + k]);
			/* '=' only as the last one or two characters of the text */
			if (v[k] < 0 &&
			    !(s[i + k] == '=' && last && k >= 2 && (k == 3 || s[i + 3] == '='))) {
				free(out);
				return -EINVAL;
			}
		}
		uint32_t x = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 |
			     (uint32_t)(v[2] < 0 ? 0 : v[2]) << 6 | (uint32_t)(v[3] < 0 ? 0 : v[3]);

		out[o++] = (char)(x >> 16);
		if (v[2] >= 0)
			out[o++] = (char)(x >> 8);
		if (v[3] >= 0)
			out[o++] = (char)x;
	}
	out[o] = 0;
	*ret = out;
	*ret_len = o;
	return 0;
}
