/* SPDX-License-Identifier: MIT */
/* Job spec, agent config and the checked parsers of common/parse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/config.h"
#include "agent/spec.h"
#include "common/macro.h"
#include "common/clock.h"
#include "common/fileio.h"
#include "common/parse.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_parse_size(void **state)
{
	uint64_t v;

	(void)state;
	assert_int_equal(parse_size("64M", &v), 0);
	assert_int_equal(v, 64ULL << 20);
	assert_int_equal(parse_size("2G", &v), 0);
	assert_int_equal(v, 2ULL << 30);
	assert_int_equal(parse_size("1.5GiB", &v), 0);
	assert_int_equal(v, 3ULL << 29);
	assert_int_equal(parse_size("512k", &v), 0);
	assert_int_equal(v, 512ULL << 10);
	assert_int_equal(parse_size("100", &v), 0);
	assert_int_equal(v, 100);
	assert_int_equal(parse_size("12Q", &v), -EINVAL);
	assert_int_equal(parse_size("-1M", &v), -EINVAL);
	assert_int_equal(parse_size("", &v), -EINVAL);
	assert_int_equal(parse_size("M", &v), -EINVAL);
	assert_int_equal(parse_size("1Mi", &v), -EINVAL);
	assert_int_equal(parse_size("99999999999P", &v), -ERANGE);
	/* beyond INT64_MAX (a JSON integer): found by the spec fuzzer, it came back negative */
	assert_int_equal(parse_size("00000000000011500213046996777185", &v), -ERANGE);
	assert_int_equal(parse_size("9223372036854775808", &v), -ERANGE);
	assert_int_equal(parse_size("8E", &v), -EINVAL);
	assert_int_equal(parse_size("7P", &v), 0);
	assert_int_equal(v, 7ULL << 50);
}

static void test_parse_misc(void **state)
{
	uint64_t ns, u;
	double d;
	int sig;
	bool b;

	(void)state;
	assert_int_equal(parse_duration_ns("1.5", &ns), 0);
	assert_int_equal(ns, 1500000000ULL);
	assert_int_equal(parse_duration_ns("2m", &ns), 0);
	assert_int_equal(ns, 120ULL * NSEC_PER_SEC);
	assert_int_equal(parse_duration_ns("1h", &ns), 0);
	assert_int_equal(parse_duration_ns("10x", &ns), -EINVAL);
	assert_int_equal(parse_u64("18446744073709551616", &u), -ERANGE);
	assert_int_equal(parse_u64("12a", &u), -EINVAL);
	assert_int_equal(parse_u64(" 1", &u), -EINVAL);
	assert_int_equal(parse_double("0.5", &d), 0);
	assert_true(d == 0.5);
	assert_int_equal(parse_double("nan", &d), -EINVAL);
	assert_int_equal(parse_double("-1", &d), -EINVAL);
	assert_int_equal(parse_signal("KILL", &sig), 0);
	assert_int_equal(sig, 9);
	assert_int_equal(parse_signal("SIGTERM", &sig), 0);
	assert_int_equal(sig, 15);
	assert_int_equal(parse_signal("10", &sig), 0);
	assert_int_equal(sig, 10);
	assert_int_equal(parse_signal("FOO", &sig), -EINVAL);
	assert_int_equal(parse_signal("0", &sig), -ERANGE);
	assert_int_equal(parse_bool("yes", &b), 0);
	assert_true(b);
	assert_int_equal(parse_bool("maybe", &b), -EINVAL);
}

static void test_rfc3339(void **state)
{
	char buf[RFC3339_MAX];
	uint64_t t = 1796227231151432000ULL, back;

	(void)state;
	format_rfc3339_us(t, buf, sizeof(buf));
	assert_string_equal(buf, "2026-12-02T16:00:31.151432Z");
	assert_int_equal(parse_rfc3339(buf, &back), 0);
	assert_int_equal(back, t);
	assert_int_equal(parse_rfc3339("2026-12-02T16:00:31Z", &back), 0);
	assert_int_equal(parse_rfc3339("2026-12-02 16:00:31", &back), -EINVAL);
	assert_int_equal(parse_rfc3339("2026-12-02T16:00:31.Z", &back), -EINVAL);
}

/* Parse a spec, expect failure and that the message names `field`. */
static void expect_spec_error(const char *json, const char *field)
{
	struct task_spec s;
	char err[512] = "";
	int r;

	spec_init(&s);
	r = spec_parse(json, strlen(json), &s, err, sizeof(err));
	spec_clear(&s);
	if (r != -EINVAL || !strstr(err, field)) {
		print_error("spec %s: r=%d err=\"%s\" (wanted field %s)\n", json, r, err, field);
		fail();
	}
}

static void test_spec_errors(void **state)
{
	(void)state;
	expect_spec_error("", "invalid JSON");
	expect_spec_error("[]", "spec");
	expect_spec_error("{}", "command");
	expect_spec_error("{\"command\":[]}", "command");
	expect_spec_error("{\"command\":\"ls\"}", "command");
	expect_spec_error("{\"command\":[1]}", "command[0]");
	expect_spec_error("{\"command\":[\"\"]}", "command[0]");
	expect_spec_error("{\"command\":[\"x\"],\"bogus\":1}", "bogus");
	expect_spec_error("{\"command\":[\"x\"],\"limits\":{\"memory\":\"12Q\"}}", "limits.memory");
	expect_spec_error("{\"command\":[\"x\"],\"limits\":{\"memory\":-5}}", "limits.memory");
	expect_spec_error("{\"command\":[\"x\"],\"limits\":{\"memory\":\"11500213046996777185\"}}",
			  "too large");
	expect_spec_error("{\"command\":[\"x\"],\"limits\":{\"cpus\":\"two\"}}", "limits.cpus");
	expect_spec_error("{\"command\":[\"x\"],\"limits\":{\"cpus\":0.001}}", "limits.cpus");
	expect_spec_error("{\"command\":[\"x\"],\"limits\":{\"pids\":0}}", "limits.pids");
	expect_spec_error("{\"command\":[\"x\"],\"limits\":{\"time\":\"soon\"}}", "limits.time");
	expect_spec_error("{\"command\":[\"x\"],\"limits\":{\"cpu_weight\":20000}}",
			  "limits.cpu_weight");
	expect_spec_error("{\"command\":[\"x\"],\"limits\":{\"gpus\":\"a,b\"}}", "limits.gpus");
	expect_spec_error("{\"command\":[\"x\"],\"limits\":{\"io_read_bps\":{\"/dev/sda\":0}}}",
			  "io_read_bps");
	expect_spec_error("{\"command\":[\"x\"],\"limits\":{\"memory\":100,\"memory_high\":200}}",
			  "memory_high");
	expect_spec_error("{\"command\":[\"x\"],\"limits\":{\"nope\":1}}", "nope");
	expect_spec_error("{\"command\":[\"x\"],\"labels\":{\"bad key\":\"v\"}}", "label key");
	expect_spec_error("{\"command\":[\"x\"],\"labels\":{\"k\":1}}", "labels.k");
	expect_spec_error("{\"command\":[\"x\"],\"env\":{\"A\":1}}", "env.A");
	expect_spec_error("{\"command\":[\"x\"],\"env\":{\"A=B\":\"1\"}}", "env");
	expect_spec_error("{\"command\":[\"x\"],\"workdir\":\"relative\"}", "workdir");
	expect_spec_error("{\"command\":[\"x\"],\"user\":\"a\\nb\"}", "user");
	expect_spec_error("{\"command\":[\"x\"],\"command\":[\"y\"]}", "invalid JSON");
	expect_spec_error("{\"command\":[\"x\"],\"sandbox\":[]}", "sandbox: expected an object");
	expect_spec_error("{\"command\":[\"x\"],\"sandbox\":{\"nope\":1}}", "sandbox: unknown key");
	expect_spec_error("{\"command\":[\"x\"],\"sandbox\":{\"private_tmp\":1}}",
			  "sandbox.private_tmp: expected true or false");
	expect_spec_error("{\"command\":[\"x\"],\"sandbox\":{\"tmp_size\":\"lots\"}}",
			  "sandbox.tmp_size: \"lots\"");
	expect_spec_error("{\"command\":[\"x\"],\"sandbox\":{\"tmp_size\":\"101%\"}}",
			  "sandbox.tmp_size");
	expect_spec_error("{\"command\":[\"x\"],\"sandbox\":{\"read_only_paths\":[\"rel\"]}}",
			  "sandbox.read_only_paths[0]: \"rel\": expected an absolute path");
	expect_spec_error(
	    "{\"command\":[\"x\"],\"sandbox\":{\"inaccessible_paths\":[\"/a/../b\"]}}",
	    "sandbox.inaccessible_paths[0]: \"/a/../b\": not a normalized path");
	expect_spec_error("{\"command\":[\"x\"],\"sandbox\":{\"read_only_paths\":[\"/\"]}}",
			  "other than /");
	expect_spec_error("{\"command\":[\"x\"],\"sandbox\":{\"bind\":[\"/a\"]}}",
			  "sandbox.bind[0]: \"/a\": expected SRC:DST");
	expect_spec_error("{\"command\":[\"x\"],\"sandbox\":{\"bind\":[\"/a:/b:rx\"]}}",
			  "mode must be ro or rw");
	expect_spec_error("{\"command\":[\"x\"],\"sandbox\":{\"bind\":[\"/a:b\"]}}",
			  "\"b\": expected an absolute path");
}

static void test_spec_sandbox(void **state)
{
	const char *json =
	    "{\"command\":[\"x\"],\"sandbox\":{\"mount_namespace\":true,"
	    "\"private_tmp\":true,\"tmp_size\":\"10%\",\"protect_system\":false,"
	    "\"read_only_paths\":[\"/data\"],\"inaccessible_paths\":[\"/home/a/.ssh\"],"
	    "\"bind\":[\"/scratch/a:/scratch:ro\"],\"ipc_namespace\":true,"
	    "\"pid_namespace\":true,\"landlock\":true,\"private_dev\":false}}";
	struct task_spec s, s2;
	char err[256];
	json_t *j;

	(void)state;
	spec_init(&s);
	assert_int_equal(s.sb_uts_ns, -1);
	assert_int_equal(spec_parse(json, strlen(json), &s, err, sizeof(err)), 0);
	assert_int_equal(s.sb_mount_ns, 1);
	assert_int_equal(s.sb_private_tmp, 1);
	assert_int_equal(s.sb_protect_system, 0);
	assert_int_equal(s.sb_ipc_ns, 1);
	assert_int_equal(s.sb_uts_ns, -1);
	assert_string_equal(s.sb_tmp_size, "10%");
	assert_int_equal(s.n_sb_read_only, 1);
	assert_string_equal(s.sb_inaccessible[0], "/home/a/.ssh");
	assert_string_equal(s.sb_bind[0], "/scratch/a:/scratch:ro");
	j = spec_to_json(&s);
	spec_init(&s2);
	assert_int_equal(spec_from_json(j, &s2, err, sizeof(err)), 0);
	json_decref(j);
	assert_int_equal(s2.sb_protect_system, 0);
	assert_int_equal(s2.sb_uts_ns, -1);
	assert_int_equal(s2.sb_pid_ns, 1);
	assert_int_equal(s2.sb_landlock, 1);
	assert_int_equal(s2.sb_private_dev, 0);
	assert_string_equal(s2.sb_bind[0], s.sb_bind[0]);
	assert_string_equal(s2.sb_tmp_size, "10%");
	assert_int_equal(spec_tmp_size_check("1M"), 0);
	assert_int_equal(spec_tmp_size_check("100%"), 0);
	assert_int_equal(spec_tmp_size_check("0%"), -EINVAL);
	assert_int_equal(spec_tmp_size_check("1K"), -EINVAL); /* under a page */
	spec_clear(&s);
	spec_clear(&s2);
}

static void test_spec_roundtrip(void **state)
{
	const char *json =
	    "{\"command\":[\"python3\",\"-c\",\"print(1)\\nprint(2)\"],"
	    "\"env\":{\"A\":\"1\"},\"labels\":{\"project\":\"x\",\"tier\":\"spot\"},"
	    "\"workdir\":\"/tmp\",\"user\":\"nobody\",\"account\":\"acct\",\"job\":\"j\","
	    "\"limits\":{\"memory\":\"2G\",\"cpus\":1.5,\"pids\":32,\"time\":90,"
	    "\"cpu_time\":\"1m\",\"io_write_bps\":{\"8:0\":\"10M\"},\"gpus\":\"0,2\"}}";
	struct task_spec s, s2;
	char err[256];
	json_t *j;

	(void)state;
	spec_init(&s);
	assert_int_equal(spec_parse(json, strlen(json), &s, err, sizeof(err)), 0);
	assert_int_equal(s.argc, 3);
	assert_string_equal(s.argv[2], "print(1)\nprint(2)");
	assert_null(s.argv[3]);
	assert_int_equal(s.memory_max, 2ULL << 30);
	assert_true(s.cpus == 1.5);
	assert_int_equal(s.pids_max, 32);
	assert_int_equal(s.time_limit_ns, 90 * NSEC_PER_SEC);
	assert_int_equal(s.cpu_time_limit_ns, 60 * NSEC_PER_SEC);
	assert_int_equal(s.n_io, 1);
	assert_int_equal(s.io[0].wbps, 10ULL << 20);
	assert_int_equal(s.gpus, 2);
	assert_string_equal(s.gpu_list, "0,2");
	assert_int_equal(s.n_labels, 2);
	j = spec_to_json(&s);
	spec_init(&s2);
	assert_int_equal(spec_from_json(j, &s2, err, sizeof(err)), 0);
	json_decref(j);
	assert_int_equal(s2.memory_max, s.memory_max);
	assert_int_equal(s2.time_limit_ns, s.time_limit_ns);
	assert_string_equal(s2.label_values[1], s.label_values[1]);
	assert_string_equal(s2.env[0], "A=1");
	spec_clear(&s);
	spec_clear(&s2);
}

static void test_spec_flags(void **state)
{
	struct task_spec s;
	char err[256];

	(void)state;
	spec_init(&s);
	assert_int_equal(spec_set_label(&s, "a=b", err, sizeof(err)), 0);
	assert_int_equal(spec_set_label(&s, "a=c", err, sizeof(err)), 0);
	assert_int_equal(s.n_labels, 1);
	assert_string_equal(s.label_values[0], "c");
	assert_int_equal(spec_set_label(&s, "novalue", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "KEY=VALUE"));
	assert_int_equal(spec_set_env(&s, "X=1=2", err, sizeof(err)), 0);
	assert_string_equal(s.env[0], "X=1=2");
	assert_int_equal(spec_set_io(&s, "/dev/sda=5M", false, err, sizeof(err)), 0);
	assert_int_equal(spec_set_io(&s, "/dev/sda=7M", true, err, sizeof(err)), 0);
	assert_int_equal(s.n_io, 1);
	assert_int_equal(s.io[0].rbps, 5ULL << 20);
	assert_int_equal(s.io[0].wbps, 7ULL << 20);
	assert_int_equal(spec_set_io(&s, "/dev/sda", true, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "io_write_bps"));
	for (int i = 0; i < SPEC_LABELS_MAX + 1; i++) {
		char kv[32];

		snprintf(kv, sizeof(kv), "k%d=v", i);
		if (spec_set_label(&s, kv, err, sizeof(err)) < 0) {
			assert_non_null(strstr(err, "at most"));
			break;
		}
	}
	assert_int_equal(s.n_labels, SPEC_LABELS_MAX);
	spec_clear(&s);
}

static void test_config(void **state)
{
	struct agent_config c;
	char path[] = "/tmp/corral-test-config.XXXXXX", err[512];
	int fd;
	FILE *f;

	(void)state;
	config_init_defaults(&c);
	fd = mkstemp(path);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	fprintf(f, "[agent]\nnode = n1\nmax_tasks = 7\nreserve_memory = 1G\nreserve_cpus = 0.5\n"
		   "kill_grace = 3s\n[metering]\nbpf = off\n[collector]\nurl = http://c:1\n"
		   "[spool]\nmax_bytes = 64M\n");
	fclose(f);
	assert_int_equal(config_load(&c, path, err, sizeof(err)), 0);
	assert_string_equal(c.node, "n1");
	assert_int_equal(c.max_tasks, 7);
	assert_int_equal(c.reserve_memory, 1ULL << 30);
	assert_true(c.reserve_cpus == 0.5);
	assert_int_equal(c.kill_grace_ns, 3 * NSEC_PER_SEC);
	assert_int_equal(c.bpf, BPF_MODE_OFF);
	assert_string_equal(c.collector_url, "http://c:1");
	assert_int_equal(c.spool_max_bytes, 64ULL << 20);

	f = fopen(path, "w");
	fprintf(f, "[agent]\nmax_tasks = lots\n");
	fclose(f);
	assert_int_equal(config_load(&c, path, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "max_tasks"));
	assert_non_null(strstr(err, path));
	/* [sandbox]: defaults, values, a bad size named */
	assert_true(c.sandbox_mount_ns && c.sandbox_protect_system && !c.sandbox_private_tmp);
	assert_false(c.sandbox_landlock);
	assert_true(c.sandbox_private_dev);
	assert_string_equal(c.sandbox_dev_paths, "infiniband fuse");
	f = fopen(path, "w");
	fprintf(f, "[sandbox]\nmount_namespace = no\nprivate_tmp = yes\ntmp_size = 512M\n"
		   "ipc_namespace = yes\nlandlock = yes\nprivate_dev = no\n"
		   "dev_paths = kvm dri/renderD128\n");
	fclose(f);
	assert_int_equal(config_load(&c, path, err, sizeof(err)), 0);
	assert_false(c.sandbox_mount_ns);
	assert_true(c.sandbox_private_tmp && c.sandbox_ipc_ns && !c.sandbox_uts_ns);
	assert_string_equal(c.sandbox_tmp_size, "512M");
	assert_true(c.sandbox_landlock);
	assert_false(c.sandbox_private_dev);
	assert_string_equal(c.sandbox_dev_paths, "kvm dri/renderD128");
	f = fopen(path, "w");
	fprintf(f, "[sandbox]\ntmp_size = huge\n");
	fclose(f);
	assert_int_equal(config_load(&c, path, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "[sandbox] tmp_size"));
	f = fopen(path, "w");
	fprintf(f, "[sandbox]\ndev_paths = ../sda\n");
	fclose(f);
	assert_int_equal(config_load(&c, path, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "[sandbox] dev_paths"));
	assert_int_equal(spec_dev_paths_check("/dev/sda"), -EINVAL);
	assert_int_equal(spec_dev_paths_check("a b\tc"), -EINVAL);
	assert_int_equal(spec_dev_paths_check("  infiniband  nvidia-caps "), 0);
	f = fopen(path, "w");
	fprintf(f, "[sandbox]\nprotect_system = maybe\n");
	fclose(f);
	assert_int_equal(config_load(&c, path, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "protect_system"));
	f = fopen(path, "w");
	fprintf(f, "[agent]\nnot_a_key = 1\n");
	fclose(f);
	assert_int_equal(config_load(&c, path, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not_a_key"));
	f = fopen(path, "w");
	fprintf(f, "[collector]\nurl = ftp://x\n");
	fclose(f);
	assert_int_equal(config_load(&c, path, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "url"));
	f = fopen(path, "w");
	fprintf(f, "this is not ini\n");
	fclose(f);
	assert_int_equal(config_load(&c, path, err, sizeof(err)), -EINVAL);
	assert_int_equal(config_set(&c, "agent", "sample_interval", "0.5s", err, sizeof(err)),
			 -EINVAL);
	/* [metering] cpu_accounting: exit (default) or switch, anything else names the key */
	assert_false(c.cpu_at_switch);
	assert_int_equal(config_set(&c, "metering", "cpu_accounting", "switch", err, sizeof(err)),
			 0);
	assert_true(c.cpu_at_switch);
	assert_int_equal(config_set(&c, "metering", "cpu_accounting", "exit", err, sizeof(err)), 0);
	assert_false(c.cpu_at_switch);
	assert_int_equal(config_set(&c, "metering", "cpu_accounting", "often", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "cpu_accounting"));
	assert_non_null(strstr(err, "exit|switch"));
	/* [control] bounds: defaults, values, errors naming the key */
	assert_int_equal(c.conn_per_uid, 32);
	assert_int_equal(c.idle_timeout_ns, 60 * NSEC_PER_SEC);
	assert_int_equal(
	    config_set(&c, "control", "max_connections_per_uid", "8", err, sizeof(err)), 0);
	assert_int_equal(c.conn_per_uid, 8);
	assert_int_equal(
	    config_set(&c, "control", "max_connections_per_uid", "241", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "max_connections_per_uid"));
	assert_int_equal(config_set(&c, "control", "request_timeout", "2s", err, sizeof(err)), 0);
	assert_int_equal(c.request_timeout_ns, 2 * NSEC_PER_SEC);
	assert_int_equal(config_set(&c, "control", "send_timeout", "500ms", err, sizeof(err)), 0);
	assert_int_equal(c.send_timeout_ns, NSEC_PER_SEC / 2);
	assert_int_equal(config_set(&c, "control", "idle_timeout", "0", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "idle_timeout"));
	/* [spool] damaged_max_bytes: 0 (the spool's default) unless set, a bad size named */
	assert_int_equal(c.spool_damaged_max, 0);
	assert_int_equal(config_set(&c, "spool", "damaged_max_bytes", "8M", err, sizeof(err)), 0);
	assert_int_equal(c.spool_damaged_max, 8ULL << 20);
	assert_int_equal(config_set(&c, "spool", "damaged_max_bytes", "1k", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "damaged_max_bytes"));
	/* [collector] url lines make a list, urls sets it whole; bad, repeated URLs named */
	f = fopen(path, "w");
	fprintf(f,
		"[collector]\nurls =\nurl = https://a:1\nurl = https://b:1/\nfailover_after = 2\n"
		"failback = 1m\n");
	fclose(f);
	assert_int_equal(config_load(&c, path, err, sizeof(err)), 0);
	assert_string_equal(c.collector_url, "https://a:1 https://b:1/");
	assert_int_equal(c.failover_after, 2);
	assert_int_equal(c.failback_ns, 60 * NSEC_PER_SEC);
	assert_int_equal(
	    config_set(&c, "collector", "urls", "http://x:1  http://y:2", err, sizeof(err)), 0);
	assert_string_equal(c.collector_url, "http://x:1 http://y:2");
	assert_int_equal(config_set(&c, "collector", "url", "http://x:1", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "twice"));
	assert_int_equal(
	    config_set(&c, "collector", "urls", "http://x:1 ftp://y", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "ftp://y"));
	assert_string_equal(c.collector_url, "http://x:1 http://y:2");
	assert_int_equal(config_set(&c, "collector", "urls", "", err, sizeof(err)), 0);
	assert_null(c.collector_url);
	assert_int_equal(config_set(&c, "collector", "failover_after", "0", err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(c.upload_timeout_ns, 60 * NSEC_PER_SEC);
	assert_int_equal(config_set(&c, "collector", "request_timeout", "2s", err, sizeof(err)), 0);
	assert_int_equal(c.upload_timeout_ns, 2 * NSEC_PER_SEC);
	assert_int_equal(config_set(&c, "collector", "connect_timeout", "500ms", err, sizeof(err)),
			 0);
	assert_int_equal(c.upload_connect_timeout_ns, NSEC_PER_SEC / 2);
	assert_int_equal(config_set(&c, "collector", "request_timeout", "10ms", err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "request_timeout"));
	unlink(path);
	assert_int_equal(config_load(&c, path, err, sizeof(err)), -ENOENT);
	config_free(&c);
}

static void test_files(void **state)
{
	char dir[] = "/tmp/corral-test-files.XXXXXX", path[256], *s = NULL;
	uint64_t v;
	size_t len;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/a/b/c", dir);
	assert_int_equal(mkdir_p(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/f", dir);
	assert_int_equal(write_file_atomic(path, "123\n", 4, 0600), 0);
	assert_int_equal(read_u64_file_at(AT_FDCWD, path, &v), 0);
	assert_int_equal(v, 123);
	assert_int_equal(write_file_replace(path, "hello", 5, 0600), 0);
	assert_int_equal(read_file(path, 100, &s, &len), 0);
	assert_int_equal(len, 5);
	assert_string_equal(s, "hello");
	free(s);
	assert_int_equal(read_file(path, 3, &s, &len), -EFBIG);
	unlink(path);
	snprintf(path, sizeof(path), "rm -rf %s", dir);
	assert_int_equal(system(path), 0);
}

/* Command arguments and environment values that are not UTF-8: {"b64": ...} both ways, every
 * byte 0x01-0xff exact; bad forms refused by name. */
static void test_spec_bytes(void **state)
{
	char all[256], err[256], *txt;
	const char *args[] = {"printf", "%s", "\xff\xfe", all};
	struct task_spec s, s2;
	json_t *j;

	(void)state;
	for (int i = 1; i < 256; i++)
		all[i - 1] = (char)i;
	all[255] = 0;
	spec_init(&s);
	assert_int_equal(spec_set_argv(&s, (char *const *)args, 4), 0);
	assert_int_equal(spec_set_env(&s, "V=a\xc3(z", err, sizeof(err)), 0);
	j = spec_to_json(&s);
	assert_non_null(j);
	txt = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	assert_non_null(strstr(txt, "\"command\":[\"printf\",\"%s\",{\"b64\":\"//4=\"},{\"b64\":"));
	assert_non_null(strstr(txt, "\"env\":{\"V\":{\"b64\":\"YcMoeg==\"}}"));
	spec_init(&s2);
	assert_int_equal(spec_parse(txt, strlen(txt), &s2, err, sizeof(err)), 0);
	free(txt);
	assert_int_equal(s2.argc, 4);
	assert_string_equal(s2.argv[2], "\xff\xfe");
	assert_int_equal(strlen(s2.argv[3]), 255);
	assert_memory_equal(s2.argv[3], all, 255);
	assert_string_equal(s2.env[0], "V=a\xc3(z");
	spec_clear(&s);
	spec_clear(&s2);

	expect_spec_error("{\"command\":[\"x\",{\"b64\":\"//4\"}]}", "command[1].b64: not base64");
	expect_spec_error("{\"command\":[\"x\",{\"b64\":\"YQBi\"}]}",
			  "command[1].b64: contains a NUL");
	expect_spec_error("{\"command\":[\"x\",{\"b64\":1}]}", "command[1]: expected a string, or");
	expect_spec_error("{\"command\":[\"x\",{\"b64\":\"YQ==\",\"y\":1}]}", "command[1]");
	expect_spec_error("{\"command\":[\"x\"],\"env\":{\"V\":{\"hex\":\"ff\"}}}", "env.V");
	expect_spec_error("{\"command\":[\"x\"],\"env\":{\"V\":{\"b64\":\"AA==\"}}}",
			  "env.V.b64: contains a NUL");
	expect_spec_error("{\"command\":[\"x\"],\"job\":{\"b64\":\"//4=\"}}", "job");
	/* text stays text: a spec without such bytes is written as before */
	const char *text = "{\"command\":[\"a\",{\"b64\":\"w6k=\"}]}";

	spec_init(&s);
	assert_int_equal(spec_parse(text, strlen(text), &s, err, sizeof(err)), 0);
	j = spec_to_json(&s);
	assert_string_equal(json_string_value(json_array_get(json_object_get(j, "command"), 1)),
			    "\xc3\xa9");
	json_decref(j);
	spec_clear(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_parse_size),	   cmocka_unit_test(test_parse_misc),
	    cmocka_unit_test(test_rfc3339),	   cmocka_unit_test(test_spec_errors),
	    cmocka_unit_test(test_spec_roundtrip), cmocka_unit_test(test_spec_flags),
	    cmocka_unit_test(test_spec_sandbox),   cmocka_unit_test(test_config),
	    cmocka_unit_test(test_files),	   cmocka_unit_test(test_spec_bytes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
