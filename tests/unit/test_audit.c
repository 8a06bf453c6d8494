/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of bpf/audit.c that need neither root nor BPF: the network rule parser, option
 * validation (before anything is loaded) and the event -> JSON mapping. The programs
 * themselves are exercised by tests/integration/audit_events.sh.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include <cmocka.h>

#include "bpf/print.h"
#include "bpf/audit.h"

static struct audit_net_rule parse_ok(const char *s, int family, const char *addr, unsigned plen,
				      unsigned port)
{
	struct audit_net_rule r;
	uint8_t want[16] = {};
	char err[128] = "";

	assert_int_equal(audit_net_rule_parse(s, AUDIT_NET_DENY, &r, err, sizeof(err)), 0);
	assert_int_equal(r.family, family);
	assert_int_equal(inet_pton(family, addr, want), 1);
	assert_memory_equal(r.addr, want, family == AF_INET ? 4 : 16);
	assert_int_equal(r.prefix_len, plen);
	assert_int_equal(r.port, port);
	assert_int_equal(r.action, AUDIT_NET_DENY);
	return r;
}

static void test_parse_ipv4(void **state)
{
	parse_ok("10.0.0.0/8", AF_INET, "10.0.0.0", 8, 0);
	parse_ok("10.1.2.3", AF_INET, "10.1.2.3", 32, 0);
	parse_ok("10.1.2.3:443", AF_INET, "10.1.2.3", 32, 443);
	parse_ok("0.0.0.0/0:53", AF_INET, "0.0.0.0", 0, 53);
	/* Host bits are cleared. */
	parse_ok("192.168.77.5/20", AF_INET, "192.168.64.0", 20, 0);
}

static void test_parse_ipv6(void **state)
{
	parse_ok("2001:db8::/32", AF_INET6, "2001:db8::", 32, 0);
	parse_ok("::1", AF_INET6, "::1", 128, 0);
	parse_ok("[2001:db8::1]:443", AF_INET6, "2001:db8::1", 128, 443);
	parse_ok("[::/0]:53", AF_INET6, "::", 0, 53);
	parse_ok("::ffff:10.0.0.1", AF_INET6, "::ffff:10.0.0.1", 128, 0);
	parse_ok("2001:db8:abcd:12ff::/57", AF_INET6, "2001:db8:abcd:1280::", 57, 0);
}

static void parse_bad(const char *s, const char *msg_part)
{
	struct audit_net_rule r = {.port = 7};
	char err[160] = "";

	assert_int_equal(audit_net_rule_parse(s, AUDIT_NET_ALLOW, &r, err, sizeof(err)), -EINVAL);
	assert_int_equal(r.port, 7); /* untouched on failure */
	if (!strstr(err, msg_part))
		fail_msg("'%s': message '%s' lacks '%s'", s, err, msg_part);
}

static void test_parse_errors(void **state)
{
	parse_bad("", "empty");
	parse_bad("10.0.0.1:0", "bad port");
	parse_bad("10.0.0.1:65536", "bad port");
	parse_bad("10.0.0.1:http", "bad port");
	parse_bad("10.0.0.1:-1", "bad port");
	parse_bad("10.0.0.0/33", "bad prefix");
	parse_bad("10.0.0.0/", "bad prefix");
	parse_bad("10.0.0.0/8x", "bad prefix");
	parse_bad("::/129", "bad prefix");
	parse_bad("example.com", "bad address");
	parse_bad("example.com:80", "bad address");
	parse_bad("host:80", "bad address");
	parse_bad("10.0.0.256", "bad address");
	parse_bad("[10.0.0.1]:80", "brackets are for IPv6");
	parse_bad("[::1", "missing ']'");
	parse_bad("[::1]80", "expected ':PORT'");
	parse_bad("[::1]:", "bad port");
	parse_bad("1.2.3.4/8:80:90", "bad prefix");
	parse_bad("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		  "too long");
}

static void test_actions(void **state)
{
	assert_string_equal(audit_net_action_to_string(AUDIT_NET_ALLOW), "allow");
	assert_string_equal(audit_net_action_to_string(AUDIT_NET_DENY), "deny");
	assert_null(audit_net_action_to_string(_AUDIT_NET_ACTION_MAX));
	assert_int_equal(audit_net_action_from_string("deny"), AUDIT_NET_DENY);
	assert_int_equal(audit_net_action_from_string("Deny"), _AUDIT_NET_ACTION_INVALID);
	assert_int_equal(audit_net_action_from_string(NULL), _AUDIT_NET_ACTION_INVALID);
}

static void test_open_rejects_bad_options(void **state)
{
	struct audit_opts o1 = {.argv_max = 8193}, o2 = {.ringbuf_bytes = 3 * 4096},
			  o3 = {.max_tasks = 100, .max_pids = 10}, o4 = {.ringbuf_bytes = 512};
	struct audit *a = (struct audit *)0x1;

	assert_int_equal(audit_open(&o1, &a), -EINVAL);
	assert_int_equal(audit_open(&o2, &a), -EINVAL);
	assert_int_equal(audit_open(&o3, &a), -EINVAL);
	assert_int_equal(audit_open(&o4, &a), -EINVAL);
	assert_ptr_equal(a, (struct audit *)0x1); /* ret_ untouched on failure */
}

static void test_exec_json(void **state)
{
	const char *const argv[] = {"ls", "-l", "bad\xff\\x", NULL};
	struct audit_event ev = {.type = AUDIT_EV_EXEC, .task_key = 1, .pid = 42};
	json_t *j;
	char *s;

	ev.exec = (struct audit_exec_event){.path = "/usr/bin/ls",
					    .argc = 3,
					    .argv = argv,
					    .argv_truncated = true,
					    .ppid = 41,
					    .uid = 1000,
					    .gid = 100,
					    .cwd = "/home/u"};
	j = audit_event_to_json(&ev);
	assert_non_null(j);
	s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(
	    s, "{\"argv\":[\"ls\",\"-l\",\"bad\\\\xff\\\\\\\\x\"],\"argv_truncated\":true,"
	       "\"cwd\":\"/home/u\",\"escaped\":[\"argv[2]\"],\"gid\":100,"
	       "\"path\":\"/usr/bin/ls\",\"pid\":42,\"ppid\":41,\"uid\":1000}");
	free(s);
	json_decref(j);
}

static void test_connect_json(void **state)
{
	struct audit_event ev = {.type = AUDIT_EV_CONNECT, .pid = 7};
	json_t *j;
	char *s;

	ev.connect.family = AF_INET6;
	strcpy(ev.connect.address, "2001:db8::1");
	ev.connect.port = 443;
	ev.connect.protocol = IPPROTO_UDP;
	ev.connect.verdict = AUDIT_NET_DENY;
	ev.connect.op = AUDIT_OP_SENDMSG;
	j = audit_event_to_json(&ev);
	assert_non_null(j);
	s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	assert_string_equal(s,
			    "{\"address\":\"2001:db8::1\",\"family\":\"inet6\",\"op\":\"sendmsg\","
			    "\"pid\":7,\"port\":443,\"protocol\":\"udp\",\"verdict\":\"deny\"}");
	free(s);
	json_decref(j);
	ev.type = _AUDIT_EV_MAX;
	assert_null(audit_event_to_json(&ev));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_ipv4),
	    cmocka_unit_test(test_parse_ipv6),
	    cmocka_unit_test(test_parse_errors),
	    cmocka_unit_test(test_actions),
	    cmocka_unit_test(test_open_rejects_bad_options),
	    cmocka_unit_test(test_exec_json),
	    cmocka_unit_test(test_connect_json),
	};

	libbpf_set_print(bpf_print_env);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
