/* SPDX-License-Identifier: MIT */
/* common/escape.c: terminal- and log-safe text, checked byte by byte. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/escape.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* No control byte, no DEL, no C1, valid UTF-8: what any output may carry. */
static void assert_safe(const char *e)
{
	const unsigned char *p = (const unsigned char *)e;

	assert_int_equal(utf8_invalid_at(e), -1);
	assert_true(text_printable(e));
	for (; *p; p++)
		assert_true(*p >= 0x20 && *p != 0x7f);
}

static void expect(const char *in, const char *want)
{
	char *e = esc_dup(in);

	assert_non_null(e);
	assert_string_equal(e, want);
	assert_safe(e);
	free(e);
}

static void test_every_byte(void **state)
{
	(void)state;
	for (int b = 1; b < 256; b++) {
		char in[4] = {'a', (char)b, 'z', 0}, want[16];

		if (b == '\\')
			snprintf(want, sizeof(want), "a\\\\z");
		else if (b >= 0x20 && b < 0x7f)
			snprintf(want, sizeof(want), "a%cz", b);
		else if (b && strchr("\a\b\t\n\v\f\r", b))
			snprintf(want, sizeof(want), "a\\%cz",
				 "abtnvfr"[strchr("\a\b\t\n\v\f\r", b) - "\a\b\t\n\v\f\r"]);
		else
			snprintf(want, sizeof(want), "a\\x%02xz", b);
		expect(in, want);
		assert_int_equal(utf8_invalid_at(in), b < 0x80 ? -1 : 1);
		assert_int_equal(text_printable(in), b >= 0x20 && b < 0x7f);
	}
}

static void test_utf8(void **state)
{
	(void)state;
	expect("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x8e",
	       "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\x8e");
	expect("\xc2\x9b"
	       "2J",
	       "\\xc2\\x9b2J");				    /* C1 CSI */
	expect("\xc2\x85", "\\xc2\\x85");		    /* NEL */
	expect("\xc2\xa0", "\xc2\xa0");			    /* U+00A0 is text */
	expect("\xc0\xaf", "\\xc0\\xaf");		    /* overlong "/" */
	expect("\xed\xa0\x80", "\\xed\\xa0\\x80");	    /* surrogate */
	expect("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"); /* above U+10FFFF */
	expect("\xe2\x82", "\\xe2\\x82");		    /* cut sequence */
	expect("\x1b]52;c;aGk=\x07", "\\x1b]52;c;aGk=\\a"); /* OSC 52 */
	expect("x\nroot 1 init", "x\\nroot 1 init");
	assert_false(text_printable("\xc2\x9b"));
	assert_true(text_printable("\xc2\xa0"));
	assert_int_equal(utf8_invalid_at("ab\xff"), 2);
}

static void test_truncation(void **state)
{
	char buf[6];

	(void)state;
	assert_int_equal(esc_text("\x01\x02", buf, sizeof(buf)), 8);
	assert_string_equal(buf, "\\x01"); /* cut between escapes, never inside one */
	assert_int_equal(esc_text("abc", buf, 1), 3);
	assert_string_equal(buf, "");
	assert_int_equal(esc_text("abc", NULL, 0), 3);
}

/* Base64: RFC 4648's vectors, every byte value and length round trip, bad texts refused. */
static void test_base64(void **state)
{
	static const char *const vec[][2] = {{"", ""},
					     {"f", "Zg=="},
					     {"fo", "Zm8="},
					     {"foo", "Zm9v"},
					     {"foob", "Zm9vYg=="},
					     {"fooba", "Zm9vYmE="},
					     {"foobar", "Zm9vYmFy"}};
	unsigned char all[256];
	char *e, *d;
	size_t n;

	(void)state;
	for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
		e = b64_encode(vec[i][0], strlen(vec[i][0]));
		assert_string_equal(e, vec[i][1]);
		assert_int_equal(b64_decode(e, &d, &n), 0);
		assert_int_equal(n, strlen(vec[i][0]));
		assert_string_equal(d, vec[i][0]);
		free(e);
		free(d);
	}
	for (int i = 0; i < 256; i++)
		all[i] = (unsigned char)(255 - i);
	for (size_t len = 0; len <= sizeof(all); len++) {
		e = b64_encode(all, len);
		assert_non_null(e);
		assert_int_equal(b64_decode(e, &d, &n), 0);
		assert_int_equal(n, len);
		assert_memory_equal(d, all, len);
		free(e);
		free(d);
	}
	static const char *const bad[] = {"Zg=",  "Zg",	  "Z===",   "Zg=a", "Zm9v!",
					  "Zm 9", "=Zm9", "Zm9v\n", "Z=g="};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(b64_decode(bad[i], &d, &n), -EINVAL);
}

/* fputs_json_string: each of the 255 bytes alone and inside runs, against the escapes JSON
 * requires (quote, backslash, C0 as \u00XX), everything else as it was. */
static void test_json_string(void **state)
{
	(void)state;
	for (int c = 1; c < 256; c++) {
		char in[8], want[32], *out = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&out, &len);

		assert_non_null(f);
		snprintf(in, sizeof(in), "ab%cc", c);
		fputs_json_string(f, in);
		fputs_json_string(f, in + 2);
		fputs_json_string(f, "");
		assert_int_equal(fclose(f), 0);
		if (c == '"' || c == '\\')
			snprintf(want, sizeof(want), "\"ab\\%cc\"\"\\%cc\"\"\"", c, c);
		else if (c < 0x20)
			snprintf(want, sizeof(want), "\"ab\\u%04xc\"\"\\u%04xc\"\"\"", c, c);
		else
			snprintf(want, sizeof(want), "\"ab%cc\"\"%cc\"\"\"", c, c);
		assert_string_equal(out, want);
		free(out);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_every_byte),	cmocka_unit_test(test_base64),
	    cmocka_unit_test(test_utf8),	cmocka_unit_test(test_truncation),
	    cmocka_unit_test(test_json_string),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
