/* SPDX-License-Identifier: MIT */
/*
 * Text a task or a client chose, made safe for a terminal or a log line (in the style of
 * systemd's cescape): a backslash, the C0 controls (\a \b \t \n \v \f \r by name, the others
 * as \xHH), DEL, the C1 controls U+0080..U+009F (each of their two UTF-8 bytes as \xHH) and
 * every byte that is not part of valid UTF-8 are escaped; other valid UTF-8 is kept. The
 * result is one line of valid UTF-8 with no control character.
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

/* Escape s into buf (always NUL-terminated when len > 0, cut at an escape or character
 * boundary); returns the length the whole escaped text needs (without the NUL). */
size_t esc_text(const char *s, char *buf, size_t len);
/* Escaped copy (malloc'd); NULL when out of memory. */
char *esc_dup(const char *s);
/* Byte offset of the first byte that is not valid UTF-8 (overlong forms, surrogates and code
 * points above U+10FFFF are invalid), or -1 when s is valid. */
ssize_t utf8_invalid_at(const char *s);
/* Valid UTF-8 without C0, DEL or C1 controls. */
bool text_printable(const char *s);

/* s as a JSON string literal: quotes, backslash and control characters escaped (UTF-8
 * passes through). */
void fputs_json_string(FILE *f, const char *s);

/* Bytes that need not be text (an argument that is not UTF-8) in JSON: standard base64 with
 * padding (RFC 4648 section 4). b64_encode returns a malloc'd string (NULL: out of memory);
 * b64_decode a malloc'd, NUL-terminated copy of the bytes and their number, or -EINVAL for a
 * text that is not canonical base64, -ENOMEM. */
char *b64_encode(const void *data, size_t len);
int b64_decode(const char *s, char **ret, size_t *ret_len);
