/* SPDX-License-Identifier: MIT */
/* Record codec: round trips, strict decode errors, extra members, audit hash chain. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "accounting/jtree.h"
#include "accounting/record.h"
#include "common/clock.h"
#include "common/macro.h"
#include "tests/unit/record_same.h"

#define T0 1796224445123456000ULL /* 2026-12-02T15:14:05.123456Z */

static void fill_end(struct acct_record *r)
{
	memset(r, 0, sizeof(*r));
	strcpy(r->record_id, "node1-boot-42");
	r->type = ACCT_TASK_END;
	r->time_ns = T0;
	r->node = strdup("node1");
	strcpy(r->task.id, "t-1");
	r->task.job = strdup("job 7");
	r->task.user = strdup("alice");
	r->task.uid = 1000;
	r->task.account = strdup("physics");
	assert_int_equal(acct_task_add_label(&r->task, "team", "blue"), 0);
	assert_int_equal(acct_task_add_label(&r->task, "queue", "gpu"), 0);
	r->request.cpus = 1.5;
	r->request.memory_bytes = 1ULL << 30;
	r->request.pids = 100;
	r->request.gpus = 1;
	r->request.time_limit_s = 3600;
	r->request.cpu_time_limit_s = 7200;
	r->request.gpu_memory_bytes = 1ULL << 33;
	r->usage.wall_ns = 5 * NSEC_PER_SEC;
	r->usage.cpu_user_ns = 4000000000ULL;
	r->usage.cpu_system_ns = 12345;
	r->usage.memory_peak_bytes = 1 << 20;
	r->usage.memory_byte_seconds = 0.1;
	r->usage.io_read_bytes = 4096;
	r->usage.io_write_bytes = 8192;
	r->usage.net_rx_bytes = 1;
	r->usage.net_tx_bytes = INT64_MAX;
	r->usage.gpu_seconds = 2.25;
	r->usage.gpu_memory_peak_bytes = 3;
	r->usage.gpu_util_avg = 0.5;
	r->sources[ACCT_U_CPU_USER_NS] = ACCT_SRC_EBPF;
	r->sources[ACCT_U_MEMORY_PEAK_BYTES] = ACCT_SRC_CGROUP;
	r->sources[ACCT_U_WALL_NS] = ACCT_SRC_AGENT;
	r->exit.status = ACCT_EXIT_SIGNALED;
	r->exit.signal = 9;
	r->exit.message = strdup("killed by SIGKILL");
	r->exit.oom_kills = 3;
	r->exit.by = ACCT_BY_CLIENT;
}

static void fill_audit(struct acct_record *r, const char *prev)
{
	memset(r, 0, sizeof(*r));
	strcpy(r->record_id, "node1-boot-43");
	r->type = ACCT_AUDIT_EXEC;
	r->time_ns = T0;
	r->node = strdup("node1");
	strcpy(r->task.id, "t-1");
	r->event =
	    json_pack("{s:s,s:[s,s],s:i}", "path", "/bin/true", "argv", "true", "-x", "pid", 123);
	assert_non_null(r->event);
	if (prev)
		strcpy(r->prev_hash, prev);
	assert_int_equal(acct_record_compute_hash(r), 0);
}

/* format_rfc3339_us writes what the snprintf it replaced wrote, cut as snprintf cuts. */
static void test_time_format(void **state)
{
	const uint64_t times[] = {0,
				  999,
				  1000,
				  1796597163473906039ULL,
				  951782399999999999ULL, /* 2000-02-28T23:59:59.999999 */
				  951868800000000000ULL, /* 2000-03-01 */
				  4102444799000001000ULL,
				  UINT64_MAX};
	uint64_t x = 88172645463325252ULL;

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(times) + 2000; i++) {
		uint64_t t =
		    i < ARRAY_SIZE(times) ? times[i] : (x ^= x << 13, x ^= x >> 7, x ^= x << 17);
		time_t sec = (time_t)(t / NSEC_PER_SEC);
		struct tm tm;
		char full[128], want[64], got[64];

		gmtime_r(&sec, &tm);
		snprintf(full, sizeof(full), "%04d-%02d-%02dT%02d:%02d:%02d.%06uZ",
			 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
			 tm.tm_sec, (unsigned)((t % NSEC_PER_SEC) / 1000));
		for (size_t len = 0; len <= 30; len += len < 3 ? 1 : 27) {
			memset(want, 'x', sizeof(want));
			memset(got, 'x', sizeof(got));
			if (len > 0) { /* as snprintf cuts */
				size_t n = MIN(len - 1, strlen(full));

				memcpy(want, full, n);
				want[n] = 0;
			}
			format_rfc3339_us(t, got, len);
			assert_memory_equal(got, want, sizeof(want));
		}
	}
}

static void test_strings(void **state)
{
	for (int t = 0; t < _ACCT_TYPE_MAX; t++)
		assert_int_equal(acct_type_from_string(acct_type_to_string(t)), t);
	for (int s = 0; s < _ACCT_EXIT_MAX; s++)
		assert_int_equal(acct_exit_status_from_string(acct_exit_status_to_string(s)), s);
	for (int s = 0; s < _ACCT_SRC_MAX; s++)
		assert_int_equal(acct_source_from_string(acct_source_to_string(s)), s);
	for (int f = 0; f < _ACCT_U_MAX; f++)
		assert_non_null(acct_usage_field_name(f));
	assert_int_equal(acct_type_from_string("task.bogus"), _ACCT_TYPE_INVALID);
	assert_int_equal(acct_type_from_string(NULL), _ACCT_TYPE_INVALID);
	assert_null(acct_type_to_string(_ACCT_TYPE_MAX));
	assert_string_equal(acct_type_to_string(ACCT_TASK_SAMPLE), "task.sample");
}

static void assert_same(const struct acct_record *a, const struct acct_record *b)
{
	_cleanup_free_ char *ea = NULL, *eb = NULL;

	assert_int_equal(acct_record_encode(a, &ea, NULL), 0);
	assert_int_equal(acct_record_encode(b, &eb, NULL), 0);
	assert_string_equal(ea, eb);
}

static void test_roundtrip_end(void **state)
{
	struct acct_record r, d;
	_cleanup_free_ char *s = NULL;
	char err[256];
	size_t n;

	fill_end(&r);
	assert_int_equal(acct_record_encode(&r, &s, &n), 0);
	assert_int_equal(strlen(s), n);
	assert_null(strchr(s, '\n'));
	assert_non_null(strstr(s, "\"schema\":\"corral.record/v1\""));
	assert_non_null(strstr(s, "\"time\":\"2026-12-02T15:14:05.123456Z\""));
	assert_non_null(strstr(s, "\"sources\":{"));
	assert_non_null(strstr(s, "\"cpu_user_ns\":\"ebpf\""));
	assert_non_null(strstr(s, "\"status\":\"signaled\""));
	assert_int_equal(acct_record_decode(s, n, &d, err, sizeof(err)), 0);
	assert_string_equal(d.record_id, r.record_id);
	assert_int_equal(d.type, ACCT_TASK_END);
	assert_int_equal(d.time_ns, T0);
	assert_string_equal(d.node, "node1");
	assert_string_equal(d.task.user, "alice");
	assert_int_equal(d.task.uid, 1000);
	assert_int_equal(d.task.n_labels, 2);
	assert_true(d.request.cpus == 1.5);
	assert_int_equal(d.usage.net_tx_bytes, INT64_MAX);
	assert_true(d.usage.memory_byte_seconds == 0.1);
	assert_int_equal(d.sources[ACCT_U_CPU_USER_NS], ACCT_SRC_EBPF);
	assert_int_equal(d.sources[ACCT_U_IO_READ_BYTES], ACCT_SRC_NONE);
	assert_int_equal(d.exit.status, ACCT_EXIT_SIGNALED);
	assert_int_equal(d.exit.signal, 9);
	assert_string_equal(d.exit.message, "killed by SIGKILL");
	assert_int_equal(d.exit.oom_kills, 3);
	assert_int_equal(d.exit.by, ACCT_BY_CLIENT);
	assert_null(d.extra);
	assert_same(&r, &d);
	acct_record_clear(&d);

	/* deep copy is independent */
	assert_int_equal(acct_record_copy(&d, &r), 0);
	acct_record_clear(&r);
	assert_string_equal(d.task.labels[1].value, "gpu");
	acct_record_clear(&d);
}

static void test_roundtrip_start_sample(void **state)
{
	struct acct_record r, d;
	_cleanup_free_ char *s = NULL;
	char err[256];

	fill_end(&r);
	r.type = ACCT_TASK_START;
	free(r.exit.message);
	memset(&r.exit, 0, sizeof(r.exit));
	assert_int_equal(acct_record_encode(&r, &s, NULL), 0);
	assert_null(strstr(s, "\"exit\""));
	assert_int_equal(acct_record_decode(s, strlen(s), &d, err, sizeof(err)), 0);
	assert_same(&r, &d);
	acct_record_clear(&d);

	/* a task.end without an exit status cannot be encoded */
	r.type = ACCT_TASK_END;
	free(s);
	s = NULL;
	assert_int_equal(acct_record_encode(&r, &s, NULL), -EINVAL);
	acct_record_clear(&r);
}

static void test_extra_survives(void **state)
{
	static const char in[] =
	    "{\"schema\":\"corral.record/v1\",\"record_id\":\"x-1\",\"type\":\"task.sample\","
	    "\"time\":\"2026-12-02T15:14:05.000001Z\",\"node\":\"n\",\"task\":{\"id\":\"t\"},"
	    "\"usage\":{\"wall_ns\":1},\"usage_detail\":{\"per_gpu\":[1,2]},\"zz\":null}";
	struct acct_record d, d2;
	_cleanup_free_ char *s = NULL;
	char err[256];

	assert_int_equal(acct_record_decode(in, strlen(in), &d, err, sizeof(err)), 0);
	assert_non_null(d.extra);
	assert_int_equal(json_object_size(d.extra), 2);
	assert_int_equal(d.time_ns, T0 - 123456000ULL + 1000);
	assert_int_equal(acct_record_encode(&d, &s, NULL), 0);
	assert_non_null(strstr(s, "\"usage_detail\":{\"per_gpu\":[1,2]}"));
	assert_non_null(strstr(s, "\"zz\":null"));
	assert_int_equal(acct_record_decode(s, strlen(s), &d2, err, sizeof(err)), 0);
	assert_same(&d, &d2);
	acct_record_clear(&d2);

	/* extra must not shadow a reserved member */
	json_object_set_new(d.extra, "node", json_string("evil"));
	free(s);
	s = NULL;
	assert_int_equal(acct_record_encode(&d, &s, NULL), -EINVAL);
	acct_record_clear(&d);
}

struct bad_case {
	const char *json;
	const char *err;
};

#define HDR                                                                                        \
	"{\"schema\":\"corral.record/"                                                             \
	"v1\",\"record_id\":\"x\",\"time\":\"2026-12-02T15:14:05Z\",\"node\":\"n\","
static const struct bad_case bad_cases[] = {
    {"[]", "record: expected a JSON object"},
    {"{", "record: invalid JSON"},
    {"{\"schema\":\"corral.record/v3\",\"type\":\"task.start\"}", "schema: unsupported schema"},
    {"{\"type\":\"task.start\"}", "schema: missing"},
    {"{\"schema\":\"corral.record/v1\",\"type\":\"task.nope\"}", "type: unknown record type"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"cpu_user_ns\":-1}}",
     "usage.cpu_user_ns: expected a non-negative integer"},
#define EN(x) HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"energy_j\":" x "}}"
    {EN("{\"cpu\":1}"), "usage.energy_j.sources: missing"},
    {EN("{\"cpu\":1,\"dram\":1,\"gpu\":1,\"sources\":{\"cpu\":\"rapl\",\"dram\":\"rapl\",\"gpu\":"
	"\"rapl\"}}"),
     "usage.energy_j.sources.gpu: expected"},
    {EN("{\"cpu\":1,\"sources\":{\"cpu\":\"nvml\",\"dram\":\"rapl\",\"gpu\":\"none\"}}"),
     "usage.energy_j.sources.cpu: expected"},
    {EN("{\"cpu\":1,\"dram\":1,\"sources\":{\"cpu\":\"rapl\",\"dram\":\"rapl\"}}"),
     "usage.energy_j.sources.gpu: expected"},
    {EN("{\"cpu\":1,\"gpu\":0,\"sources\":{\"cpu\":\"rapl\",\"dram\":\"rapl\",\"gpu\":\"none\"}}"),
     "usage.energy_j.dram: missing"},
    {EN("{\"cpu\":1,\"dram\":2,\"sources\":{\"cpu\":\"rapl\",\"dram\":\"not_measured\",\"gpu\":"
	"\"not_measured\"}}"),
     "usage.energy_j.dram: present but its source says not_measured"},
    {EN("{\"cpu\":1,\"dram\":2,\"gpu\":0,\"total\":4,\"sources\":{\"cpu\":\"rapl\",\"dram\":"
	"\"rapl\",\"gpu\":\"none\"}}"),
     "usage.energy_j.total: not the sum"},
    {EN("{\"cpu\":1,\"total\":1,\"sources\":{\"cpu\":\"rapl\",\"dram\":\"not_measured\",\"gpu\":"
	"\"not_measured\"}}"),
     "usage.energy_j.total: not the sum"},
    {EN("{\"cpu\":-1,\"dram\":2,\"gpu\":0,\"sources\":{\"cpu\":\"rapl\",\"dram\":\"rapl\",\"gpu\":"
	"\"none\"}}"),
     "usage.energy_j.cpu: expected a non-negative number"},
    {EN("{\"watts\":1,\"sources\":{}}"), "usage.energy_j.watts: unknown field"},
    {EN("[]"), "usage.energy_j: expected an object"},
#undef EN
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"cpu_user_ns\":\"5\"}}",
     "usage.cpu_user_ns: expected a non-negative integer"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"cpu_user_ns\":1.5}}",
     "usage.cpu_user_ns: expected a non-negative integer"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"wall_ns\":"
	 "18446744073709551616}}",
     "record: invalid JSON"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"gpu_seconds\":-0.5}}",
     "usage.gpu_seconds: expected a non-negative number"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"bogus\":1}}",
     "usage.bogus: unknown field"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"}}", "usage: missing"},
    {HDR "\"type\":\"task.start\",\"task\":{\"id\":\"t\"}}", "request: missing"},
    {HDR "\"type\":\"task.end\",\"task\":{\"id\":\"t\"},\"usage\":{}}", "exit: missing"},
    {HDR "\"type\":\"task.end\",\"task\":{\"id\":\"t\"},\"usage\":{},\"exit\":{\"status\":"
	 "\"exited\",\"oom_kills\":-2}}",
     "exit.oom_kills: expected a non-negative integer"},
    {HDR "\"type\":\"task.end\",\"task\":{\"id\":\"t\"},\"usage\":{},\"exit\":{\"status\":"
	 "\"exited\",\"by\":\"admin\"}}",
     "exit.by: unknown value \"admin\""},
    {HDR "\"type\":\"task.end\",\"task\":{\"id\":\"t\"},\"usage\":{},\"exit\":{\"status\":"
	 "\"exited\",\"by\":\"none\"}}",
     "exit.by: unknown value"},
    {HDR "\"type\":\"task.end\",\"task\":{\"id\":\"t\"},\"usage\":{},\"exit\":{\"status\":"
	 "\"exited\",\"by\":3}}",
     "exit.by: expected a string"},
    {HDR "\"type\":\"task.end\",\"task\":{\"id\":\"t\"},\"usage\":{},\"exit\":{\"status\":"
	 "\"none\"}}",
     "exit.status: unknown status"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{},\"exit\":{\"status\":"
	 "\"exited\"}}",
     "exit: only allowed on task.end"},
    {HDR "\"type\":\"task.sample\",\"usage\":{}}", "task: missing"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"\"},\"usage\":{}}",
     "task.id: must not be empty"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\",\"uid\":4294967296},\"usage\":{}}",
     "task.uid: out of range"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\",\"labels\":{\"a\":1}},\"usage\":{}}",
     "task.labels.a: expected a string"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{},\"sources\":{"
	 "\"wall_ns\":\"magic\"}}",
     "sources.wall_ns: unknown source"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{},\"event\":{}}",
     "event: only allowed on audit records"},
    {HDR "\"type\":\"audit.exec\",\"task\":{\"id\":\"t\"},\"event\":{}}", "hash: missing"},
    {HDR "\"type\":\"audit.exec\",\"task\":{\"id\":\"t\"},\"hash\":\"ab\"}", "event: missing"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{},\"node\":\"m\"}",
     "record: invalid JSON"}, /* duplicate key */
    {"{\"schema\":\"corral.record/v1\",\"record_id\":\"x\",\"time\":\"yesterday\",\"node\":\"n\","
     "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{}}",
     "time: expected RFC 3339"},
    {"{\"schema\":\"corral.record/v1\",\"record_id\":\"x\",\"time\":\"9999-12-02T15:14:05Z\","
     "\"node\":\"n\",\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{}}",
     "time: out of range"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\\u0000x\"},\"usage\":{}}",
     "record: invalid JSON at byte"}, /* NUL in a string */
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\xff\"},\"usage\":{}}",
     "record: invalid JSON at byte"}, /* not UTF-8 */
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{},\"x\xc0\xa0y\":1}",
     "record: invalid JSON at byte"}, /* an overlong form in an unknown member's key */
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\",\"labels\":{\"k\":\"\xe0\x80\xaf\"}},"
	 "\"usage\":{}}",
     "record: invalid JSON at byte"}, /* overlong in a label value */
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\xf4\x90\x80\x80\"},\"usage\":{}}",
     "record: invalid JSON at byte"}, /* above U+10FFFF */
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{}} {}",
     "record: invalid JSON at byte"}, /* trailing data */
    {"42", "record: expected a JSON object"},
    {"", "record: invalid JSON"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"wall_ns\":"
	 "-9223372036854775809}}",
     "record: invalid JSON"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"gpu_seconds\":"
	 "1e999}}",
     "record: invalid JSON"},
    {HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\",\"labels\":{\"a\":\"1\","
	 "\"a\":\"2\"}},\"usage\":{}}",
     "record: invalid JSON"}, /* duplicate key in a nested object */
    {HDR "\"type\":\"node.sample\",\"period_ns\":1}", "capacity: missing"},
    {HDR "\"type\":\"node.sample\",\"task\":{\"id\":\"t\"},\"capacity\":{}}",
     "task: not allowed on node.sample records"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{\"cpus\":-1}}",
     "capacity.cpus: expected a non-negative number"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{\"cores\":4}}", "capacity.cores: unknown field"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{\"gpu_models\":\"H100\"}}",
     "capacity.gpu_models: expected an array"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{\"gpu_models\":[1]}}",
     "capacity.gpu_models: expected strings"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{},\"allocated\":{\"gpus\":1.5}}",
     "allocated.gpus: expected a non-negative integer"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{},\"used\":{\"cpu_ns\":-3}}",
     "used.cpu_ns: expected a non-negative integer"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{},\"period_ns\":\"30s\"}",
     "period_ns: expected a non-negative integer"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{},\"labels\":{\"rack\":7}}",
     "labels.rack: expected a string"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{},\"price_class\":5}",
     "price_class: expected a string"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{},\"energy\":{\"package_j\":-1}}",
     "energy.package_j: expected a non-negative number"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{},\"energy\":{\"cpu_j\":1}}",
     "energy.cpu_j: unknown field"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{},\"energy\":{\"sources\":{\"dram_j\":"
	 "\"nvml\"}}}",
     "energy.sources.dram_j: expected \"rapl\""},
    {HDR "\"type\":\"node.sample\",\"capacity\":{},\"energy\":{\"gpu_j\":1,"
	 "\"unattributed_gpu_j\":2}}",
     "energy.unattributed_gpu_j: at most gpu_j"},
    {HDR "\"type\":\"node.sample\",\"capacity\":{},\"energy\":{\"unattributed_gpu_j\":0}}",
     "energy.unattributed_gpu_j: at most gpu_j"},
    {"{\"schema\":\"corral.record/v1\",\"record_id\":7,\"time\":\"2026-12-02T15:14:05Z\","
     "\"node\":\"n\",\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{}}",
     "record_id: expected a string"},
};

static void test_node_sample(void **state)
{
	struct acct_record r = {0}, d, c;
	_cleanup_free_ char *buf = NULL, *buf2 = NULL, *buf3 = NULL;
	const char *task_extra = HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},"
				     "\"usage\":{},\"capacity\":{\"x\":1}}";
	char err[256];
	size_t len, len2;

	(void)state;
	strcpy(r.record_id, "n1/abc/7");
	r.type = ACCT_NODE_SAMPLE;
	r.time_ns = T0;
	r.node = strdup("n1");
	/* no task id, no ns: refused */
	assert_int_equal(acct_record_encode(&r, &buf, &len), -EINVAL);
	assert_int_equal(acct_record_node_sample(&r), 0);
	r.ns->period_ns = 30 * NSEC_PER_SEC;
	r.ns->price_class = strdup("gpu-h100");
	assert_int_equal(acct_node_add_label(r.ns, "rack", "r7"), 0);
	assert_int_equal(acct_node_add_label(r.ns, "rack", "r8"), -EEXIST);
	r.ns->cap_cpus = 62.5;
	r.ns->cap_memory_bytes = 1ULL << 40;
	r.ns->cap_gpus = 2;
	assert_int_equal(acct_node_add_gpu_model(r.ns, "NVIDIA H100 80GB HBM3"), 0);
	assert_int_equal(acct_node_add_gpu_model(r.ns, "NVIDIA H100 80GB HBM3"), 0);
	r.ns->alloc_cpus = 12.25;
	r.ns->alloc_memory_bytes = 1ULL << 35;
	r.ns->alloc_gpus = 1;
	r.ns->alloc_tasks = 3;
	r.ns->used_cpu_ns = 123456789012ULL;
	r.ns->used_memory_bytes = 987654321;
	r.ns->has_rapl = r.ns->has_gpu_energy = true;
	r.ns->energy_package_j = 4321.5;
	r.ns->energy_dram_j = 12.25;
	r.ns->energy_gpu_j = 9000.125;
	assert_int_equal(acct_node_add_unchanged(r.ns, "t-1", 30001, 1048576), 0);
	assert_int_equal(acct_node_add_unchanged(r.ns, "t-2", 0, 0), 0);
	assert_int_equal(acct_node_add_unchanged(r.ns, "t-3", 5, 4096), 0);
	assert_int_equal(acct_node_add_unchanged(r.ns, "", 5, 4096), -EINVAL);
	r.ns->has_unattributed_gpu = true;
	r.ns->unattributed_gpu_j = 1000.5;
	assert_int_equal(acct_record_encode(&r, &buf, &len), 0);
	assert_non_null(strstr(buf, "\"tasks_unchanged\":[[\"t-1\",30001,1048576],[\"t-2\",0,0],"));
	assert_non_null(strstr(buf, "\"sources\":{\"package_j\":\"rapl\",\"dram_j\":\"rapl\","
				    "\"gpu_j\":\"nvml\",\"unattributed_gpu_j\":\"nvml\"}"));
	assert_null(strstr(buf, "\"task\""));
	assert_non_null(strstr(buf, "\"type\":\"node.sample\""));
	assert_int_equal(acct_record_decode(buf, len, &d, err, sizeof(err)), 0);
	assert_int_equal(d.type, ACCT_NODE_SAMPLE);
	assert_non_null(d.ns);
	assert_null(d.extra);
	assert_string_equal(d.ns->price_class, "gpu-h100");
	assert_int_equal(d.ns->n_labels, 1);
	assert_string_equal(d.ns->labels[0].value, "r7");
	assert_int_equal(d.ns->n_gpu_models, 2);
	assert_true(d.ns->cap_cpus == 62.5 && d.ns->alloc_cpus == 12.25);
	assert_int_equal(d.ns->cap_memory_bytes, 1ULL << 40);
	assert_int_equal(d.ns->cap_gpus, 2);
	assert_int_equal(d.ns->alloc_memory_bytes, 1ULL << 35);
	assert_int_equal(d.ns->alloc_gpus, 1);
	assert_int_equal(d.ns->alloc_tasks, 3);
	assert_int_equal(d.ns->used_cpu_ns, 123456789012ULL);
	assert_int_equal(d.ns->used_memory_bytes, 987654321);
	assert_int_equal(d.ns->period_ns, 30 * NSEC_PER_SEC);
	assert_true(d.ns->has_rapl && d.ns->has_gpu_energy);
	assert_true(d.ns->energy_package_j == 4321.5 && d.ns->energy_dram_j == 12.25 &&
		    d.ns->energy_gpu_j == 9000.125);
	assert_int_equal(d.ns->n_unchanged, 3);
	assert_string_equal(d.ns->unchanged[0].id, "t-1");
	assert_int_equal(d.ns->unchanged[0].age_ms, 30001);
	assert_int_equal(d.ns->unchanged[0].rss_bytes, 1048576);
	assert_string_equal(d.ns->unchanged[2].id, "t-3");
	assert_int_equal(d.ns->unchanged[2].rss_bytes, 4096);
	assert_true(d.ns->has_unattributed_gpu && d.ns->unattributed_gpu_j == 1000.5);
	/* copy and re-encode: the same bytes */
	assert_int_equal(acct_record_copy(&c, &d), 0);
	assert_int_equal(acct_record_encode(&c, &buf2, &len2), 0);
	assert_int_equal(len, len2);
	assert_memory_equal(buf, buf2, len);
	acct_record_clear(&c);
	acct_record_clear(&d);
	acct_record_clear(&r);
	/* on a task record, "capacity" stays an ordinary extra member */
	assert_int_equal(acct_record_decode(task_extra, strlen(task_extra), &d, err, sizeof(err)),
			 0);
	assert_null(d.ns);
	assert_non_null(json_object_get(d.extra, "capacity"));
	assert_int_equal(acct_record_encode(&d, &buf3, &len), 0);
	assert_non_null(strstr(buf3, "\"capacity\":{\"x\":1}"));
	acct_record_clear(&d);
	/* tasks_unchanged: each bad shape refused, naming the field and the entry */
	{
		static const char *const bad[] = {"{}",
						  "[[\"t\",1]]",
						  "[[1,1,1]]",
						  "[[\"t\",-1,0]]",
						  "[[\"t\",1,1.5]]",
						  "[[\"\",1,1]]",
						  "[\"t\"]",
						  "[[\"t\",1,1,1]]"};
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			_cleanup_free_ char *rec = NULL;

			assert_true(asprintf(&rec,
					     HDR
					     "\"type\":\"node.sample\",\"capacity\":{\"cpus\":1},"
					     "\"tasks_unchanged\":%s}",
					     bad[i]) > 0);
			assert_int_equal(acct_record_decode(rec, strlen(rec), &d, err, sizeof(err)),
					 -EINVAL);
			assert_non_null(strstr(err, "tasks_unchanged"));
		}
	}
}

/* usage.energy_j: measured parts, a part not measured (no number), the total only when every
 * part is measured; node.sample's unattributed energy. */
static void test_energy(void **state)
{
	struct acct_record r, d;
	_cleanup_free_ char *s = NULL, *s2 = NULL;
	char err[256];
	double tot;

	fill_end(&r);
	r.usage.energy = (struct acct_energy){
	    .present = true,
	    .j = {12.5, 0.25, 0},
	    .src = {ACCT_ESRC_RAPL, ACCT_ESRC_RAPL, ACCT_ESRC_NONE},
	};
	assert_int_equal(acct_record_encode(&r, &s, NULL), 0);
	assert_non_null(strstr(s, "\"energy_j\":{"));
	assert_non_null(strstr(s, "\"total\":12.75"));
	assert_int_equal(acct_record_decode(s, strlen(s), &d, err, sizeof(err)), 0);
	assert_true(d.usage.energy.present);
	assert_true(d.usage.energy.j[ACCT_ENERGY_CPU] == 12.5);
	assert_int_equal(d.usage.energy.src[ACCT_ENERGY_GPU], ACCT_ESRC_NONE);
	assert_true(acct_energy_total(&d.usage.energy, &tot) && tot == 12.75);
	assert_same(&r, &d);
	acct_record_clear(&d);

	/* a GPU task whose GPUs gave no energy: no gpu number, no total */
	r.usage.energy.src[ACCT_ENERGY_GPU] = ACCT_ESRC_NOT_MEASURED;
	r.usage.energy.j[ACCT_ENERGY_GPU] = 7; /* not written */
	assert_int_equal(acct_record_encode(&r, &s2, NULL), 0);
	assert_null(strstr(s2, "\"total\""));
	assert_null(strstr(s2, "\"gpu\":7"));
	assert_non_null(strstr(s2, "\"gpu\":\"not_measured\""));
	assert_int_equal(acct_record_decode(s2, strlen(s2), &d, err, sizeof(err)), 0);
	assert_false(acct_energy_total(&d.usage.energy, &tot));
	assert_int_equal(d.usage.energy.src[ACCT_ENERGY_GPU], ACCT_ESRC_NOT_MEASURED);
	acct_record_clear(&d);
	acct_record_clear(&r);

	/* records of agents before it: no energy_j, decoded as absent */
	{
		static const char old[] = HDR
		    "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"wall_ns\":5}}";

		assert_int_equal(acct_record_decode(old, strlen(old), &d, err, sizeof(err)), 0);
		assert_false(d.usage.energy.present);
		acct_record_clear(&d);
	}
}

static void test_bad(void **state)
{
	for (size_t i = 0; i < ARRAY_SIZE(bad_cases); i++) {
		struct acct_record d;
		char err[256] = "";
		int r;

		r = acct_record_decode(bad_cases[i].json, strlen(bad_cases[i].json), &d, err,
				       sizeof(err));
		if (r != -EINVAL || strncmp(err, bad_cases[i].err, strlen(bad_cases[i].err)) != 0) {
			print_error("case %zu: r=%d err=\"%s\", want \"%s\"\n", i, r, err,
				    bad_cases[i].err);
			fail();
		}
	}
}

/* The decoder's tree: exact 64-bit integers, nesting limit, unknown members kept as JSON. */
static void test_tree_limits(void **state)
{
	char err[256], buf[1024];
	struct acct_record d;
	struct jtree t;
	size_t n = 0;
	const char *nums = "{\"a\":9223372036854775807,\"b\":-9223372036854775808,"
			   "\"c\":1.5e3,\"d\":[true,false,null,\"\\u00e9\"]}";

	assert_int_equal(jtree_parse(&t, nums, strlen(nums), err, sizeof(err)), 0);
	assert_int_equal(jtree_get(t.root, "a")->type, JT_INT);
	assert_true(jtree_get(t.root, "a")->i == INT64_MAX);
	assert_true(jtree_get(t.root, "b")->i == INT64_MIN);
	assert_int_equal(jtree_get(t.root, "c")->type, JT_REAL);
	assert_true(jtree_get(t.root, "c")->d == 1500.0);
	assert_int_equal(jtree_get(t.root, "d")->kids.n, 4);
	assert_string_equal(jtree_get(t.root, "d")->kids.last->str.s, "\xc3\xa9");
	jtree_free(&t);
	/* strict UTF-8: 2, 3 and 4 byte forms and a surrogate pair pass; the error says why */
	nums = "{\"\xc3\xa9\":\"\xe2\x82\xac\xf0\x9f\x98\x80\\ud83d\\ude00\"}";
	assert_int_equal(jtree_parse(&t, nums, strlen(nums), err, sizeof(err)), 0);
	assert_string_equal(jtree_get(t.root, "\xc3\xa9")->str.s,
			    "\xe2\x82\xac\xf0\x9f\x98\x80\xf0\x9f\x98\x80");
	jtree_free(&t);
	nums = "{\"a\":\"\xed\xa0\x80\"}"; /* a surrogate encoded directly */
	assert_int_equal(jtree_parse(&t, nums, strlen(nums), err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "UTF-8"));
	jtree_free(&t);
	/* a lone surrogate escape (high without its low half, a low half alone) is no character */
	{
		static const char *const lone[] = {"{\"a\":\"\\ud800\"}", "{\"a\":\"\\ud800x\"}",
						   "{\"a\":\"\\ud800\\u0041\"}",
						   "{\"a\":\"\\udc00\"}"};

		for (size_t i = 0; i < ARRAY_SIZE(lone); i++) {
			assert_int_equal(
			    jtree_parse(&t, lone[i], strlen(lone[i]), err, sizeof(err)), -EINVAL);
			assert_non_null(strstr(err, "UTF-8"));
			jtree_free(&t);
		}
	}
	/* JSON's grammar, strictly: each of these is refused with the byte where it goes wrong */
	{
		static const struct {
			const char *doc, *err;
		} bad[] = {
		    {"", "at byte 0: no value"},
		    {" \n", "at byte 2: no value"},
		    {"{\"a\":01}", "at byte 6: parse error"},
		    {"{\"a\":-}", "at byte 6: lexical error: malformed number"},
		    {"{\"a\":1.}", "at byte 7: lexical error: malformed number"},
		    {"{\"a\":1e}", "at byte 7: lexical error: malformed number"},
		    {"{\"a\":tru}", "at byte 5: lexical error: invalid string"},
		    {"{\"a\":\"x\ty\"}", "at byte 7: lexical error: invalid character inside"},
		    {"{\"a\":\"\\x\"}", "at byte 6: lexical error: inside a string"},
		    {"{\"a\":\"\\u12g4\"}", "at byte 6: lexical error: invalid (non-hex)"},
		    {"{\"a\" 1}", "at byte 5: parse error: object key and value"},
		    {"{a:1}", "at byte 1: parse error: invalid object key"},
		    {"{\"a\":1,}", "at byte 7: parse error: invalid object key"},
		    {"[1,]", "at byte 3: lexical error: invalid char"},
		    {"[1 2]", "at byte 3: parse error: after array element"},
		    {"{\"a\":1 \"b\":2}", "at byte 7: parse error: after key and value"},
		    {"{\"a\":1}x", "at byte 7: parse error: trailing garbage"},
		    {"{\"a\":1}{}", "at byte 7: parse error: trailing garbage"},
		    {"{\"a\":\f1}", "at byte 5: lexical error: invalid char"},
		    {"{\"a\":[1,{\"b\":\"c", "at byte 15: parse error: premature EOF"},
		    {"{\"a\":1,\"a\":2}", "at byte 7: duplicate object key"},
		};

		for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
			int r = jtree_parse(&t, bad[i].doc, strlen(bad[i].doc), err, sizeof(err));

			if (r != -EINVAL || strncmp(err, bad[i].err, strlen(bad[i].err)) != 0) {
				print_error("case %zu: r=%d err=\"%s\", want \"%s\"\n", i, r, err,
					    bad[i].err);
				fail();
			}
			jtree_free(&t);
		}
	}
	/* strings of every length around the 16-byte steps of the scan: kept whole; a control
	 * byte, an escape or a byte past ASCII found at every position */
	for (size_t len = 0; len < 40; len++) {
		char doc[64], want[48];

		memset(want, 'x', len);
		want[len] = 0;
		snprintf(doc, sizeof(doc), "[\"%s\"]", want);
		assert_int_equal(jtree_parse(&t, doc, strlen(doc), err, sizeof(err)), 0);
		assert_string_equal(t.root->kids.first->str.s, want);
		jtree_free(&t);
		for (size_t k = 0; k < len; k++) {
			doc[2 + k] = '\t';
			assert_int_equal(jtree_parse(&t, doc, strlen(doc), err, sizeof(err)),
					 -EINVAL);
			assert_non_null(strstr(err, "invalid character inside string"));
			jtree_free(&t);
			doc[2 + k] = '\xe9'; /* not UTF-8 alone */
			assert_int_equal(jtree_parse(&t, doc, strlen(doc), err, sizeof(err)),
					 -EINVAL);
			assert_non_null(strstr(err, "UTF-8"));
			jtree_free(&t);
			doc[2 + k] = '"'; /* the string ends there: what follows is garbage */
			assert_int_equal(jtree_parse(&t, doc, strlen(doc), err, sizeof(err)),
					 -EINVAL);
			jtree_free(&t);
			doc[2 + k] = 'x';
		}
	}
	/* a real of many digits is one double, whatever its length */
	nums = "[0.1000000000000000000000000000000000000000000000000000000000000000000000001]";
	assert_int_equal(jtree_parse(&t, nums, strlen(nums), err, sizeof(err)), 0);
	assert_true(t.root->kids.first->d == 0.1);
	jtree_free(&t);

	/* integers of every length around the 18 digits summed without strtoll, either sign;
	 * one past int64_t refused */
	{
		static const char *const ints[] = {"0",
						   "-0",
						   "7",
						   "-7",
						   "123456789012345678",
						   "-123456789012345678",
						   "999999999999999999",
						   "-999999999999999999",
						   "1234567890123456789",
						   "-1234567890123456789"};
		char doc[64];

		for (size_t i = 0; i < ARRAY_SIZE(ints); i++) {
			snprintf(doc, sizeof(doc), "{\"a\":%s}", ints[i]);
			assert_int_equal(jtree_parse(&t, doc, strlen(doc), err, sizeof(err)), 0);
			assert_int_equal(jtree_get(t.root, "a")->type, JT_INT);
			assert_true(jtree_get(t.root, "a")->i == strtoll(ints[i], NULL, 10));
			jtree_free(&t);
		}
		nums = "{\"a\":9223372036854775808}";
		assert_int_equal(jtree_parse(&t, nums, strlen(nums), err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "too big integer"));
		jtree_free(&t);
	}
	/* a NUL byte (escaped) in a string or key, inside an 8-byte ASCII run or in the tail */
	{
		static const char *const nul[] = {"{\"a\":\"abcdefgh\\u0000ijklmnop\"}",
						  "{\"a\":\"ab\\u0000\"}", "{\"a\":\"\\u0000\"}",
						  "{\"abcdefghij\\u0000k\":1}"};

		for (size_t i = 0; i < ARRAY_SIZE(nul); i++) {
			assert_int_equal(jtree_parse(&t, nul[i], strlen(nul[i]), err, sizeof(err)),
					 -EINVAL);
			assert_non_null(strstr(err, "NUL byte"));
			jtree_free(&t);
		}
	}

	/* JTREE_MAX_DEPTH nested arrays parse, one more does not */
	for (int i = 0; i < JTREE_MAX_DEPTH; i++)
		buf[n++] = '[';
	for (int i = 0; i < JTREE_MAX_DEPTH; i++)
		buf[n++] = ']';
	assert_int_equal(jtree_parse(&t, buf, n, err, sizeof(err)), 0);
	jtree_free(&t);
	memmove(buf + 1, buf, n);
	buf[0] = '[';
	buf[++n] = ']';
	n++;
	assert_int_equal(jtree_parse(&t, buf, n, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "nesting too deep"));
	jtree_free(&t);

	/* a record whose unknown member is a large nested value: kept, and in the heap arena */
	n = (size_t)snprintf(buf, sizeof(buf),
			     HDR "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{},"
				 "\"x_site\":{\"rack\":[1,2.5,\"r\",{\"u\":null}],\"k\":true}}");
	assert_int_equal(acct_record_decode(buf, n, &d, err, sizeof(err)), 0);
	assert_non_null(d.extra);
	assert_int_equal(json_integer_value(json_array_get(
			     json_object_get(json_object_get(d.extra, "x_site"), "rack"), 0)),
			 1);
	acct_record_clear(&d);
}

static void test_oversize(void **state)
{
	size_t n = ACCT_RECORD_MAX_BYTES + 1;
	_cleanup_free_ char *big = malloc(n);
	struct acct_record d;
	char err[128];

	assert_non_null(big);
	memset(big, ' ', n);
	assert_int_equal(acct_record_decode(big, n, &d, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "longer than"));
}

static void test_audit_chain(void **state)
{
	struct acct_record a, b, d;
	_cleanup_free_ char *s = NULL, *c = NULL;
	char err[256];
	size_t n;

	fill_audit(&a, NULL);
	fill_audit(&b, a.hash);
	assert_int_equal(strlen(a.hash), 64);
	assert_string_equal(b.prev_hash, a.hash);
	assert_int_equal(acct_record_verify_hash(&a), 0);
	assert_int_equal(acct_record_verify_hash(&b), 0);

	/* canonical: sorted, compact, no "hash" */
	assert_int_equal(acct_record_canonical(&b, &c, &n), 0);
	assert_null(strstr(c, "\"hash\""));
	assert_non_null(strstr(c, "\"prev_hash\""));
	assert_true(strstr(c, "\"event\"") < strstr(c, "\"node\""));

	assert_int_equal(acct_record_encode(&b, &s, NULL), 0);
	assert_non_null(strstr(s, "\"hash\""));
	assert_null(strstr(s, "\"usage\""));
	assert_int_equal(acct_record_decode(s, strlen(s), &d, err, sizeof(err)), 0);
	assert_int_equal(acct_record_verify_hash(&d), 0);
	assert_same(&b, &d);

	/* tampering breaks the hash */
	json_object_set_new(d.event, "pid", json_integer(124));
	assert_int_equal(acct_record_verify_hash(&d), -EBADMSG);
	acct_record_clear(&d);

	/* a non-hex hash is refused by the encoder */
	b.hash[0] = 'X';
	free(s);
	s = NULL;
	assert_int_equal(acct_record_encode(&b, &s, NULL), -EINVAL);
	acct_record_clear(&a);
	acct_record_clear(&b);
}

static void test_labels(void **state)
{
	struct acct_task t = {0};
	char key[16];

	assert_int_equal(acct_task_add_label(&t, "", "x"), -EINVAL);
	for (int i = 0; i < ACCT_LABELS_MAX; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		assert_int_equal(acct_task_add_label(&t, key, "v"), 0);
	}
	assert_int_equal(acct_task_add_label(&t, "more", "v"), -E2BIG);
	assert_int_equal(t.n_labels, ACCT_LABELS_MAX);
	for (size_t i = 0; i < t.n_labels; i++) {
		free(t.labels[i].key);
		free(t.labels[i].value);
	}
	free(t.labels);
}

/* ---- the decoder's fast path (acct_record_scan) against its tree decoder ------------------- */

#define SCAN_CORPUS "tests/fuzz/corpus/fuzz_record_decode"

#define SH                                                                                         \
	"{\"schema\":\"corral.record/"                                                             \
	"v1\",\"record_id\":\"r-1\",\"time\":\"2026-12-02T15:14:05.5Z\","                          \
	"\"node\":\"n1\","
#define SEND "\"type\":\"task.end\",\"usage\":{\"wall_ns\":1},\"exit\":{\"status\":\"exited\"},"

struct scan_case {
	const char *json;
	bool taken; /* the fast path decodes it (else the tree decoder decides) */
};

static const struct scan_case scan_cases[] = {
    {SH SEND "\"task\":{\"id\":\"t\"}}", true},
    {SH "\"type\":\"task.start\",\"task\":{\"id\":\"t\"},\"request\":{}}", true},
    {SH "\"type\":\"task.start\",\"task\":{\"id\":\"t\"}}", false}, /* request missing */
    {SH "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{}}", true},
    {SH "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"}}", false}, /* usage missing */
    {SH "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{},\"exit\":{\"status\":"
	"\"exited\"}}",
     false},
    {" { \"task\" : { \"labels\" : { \"a\" : \"b\" , \"c\" : \"\" } , \"id\" : \"t\" , \"job\" : "
     "null , \"user\" : \"\" , \"uid\" : 4294967295 } , \"type\" : \"task.end\" , \"schema\" : "
     "\"corral.record/v2\" , \"record_id\" : \"r\" , \"time\" : \"2026-12-02T15:14:05+00:00\" , "
     "\"node\" : \"n\" , \"usage\" : { \"gpu_seconds\" : 1e2 , \"gpu_util_avg\" : 0 , "
     "\"wall_ns\" : -0 } , \"exit\" : { \"by\" : null , \"status\" : \"signaled\" , \"signal\" : "
     "128 , \"code\" : -2147483648 , \"message\" : \"\" } } \r\n",
     true},
    {SH SEND
     "\"task\":{\"id\":\"t\"},\"sources\":{\"wall_ns\":\"agent\",\"gpu_seconds\":"
     "\"nvml\"},\"request\":{\"cpus\":0.25,\"gpus\":4294967295,\"memory_bytes\":"
     "999999999999999999},\"z\":{\"a\":[1,{\"b\":\"\\u00e9\\n\"}],\"c\":-1.5E-3},\"y\":true,"
     "\"x\":\"caf\xc3\xa9\",\"period_ns\":1,\"w\":[]}",
     true},
    /* what the tree decoder refuses: the fast path never takes it */
    {SH SEND "\"task\":{\"id\":\"t\"},\"z\":{\"a\":1,\"a\":2}}", false},
    {SH SEND "\"task\":{\"id\":\"t\"},\"z\":1,\"z\":2}", false},
    {SH SEND "\"task\":{\"id\":\"t\",\"id\":\"u\"}}", false},
    {SH SEND "\"task\":{\"id\":\"t\",\"job\":\"a\",\"job\":\"b\"}}", false},
    {SH SEND "\"task\":{\"id\":\"t\",\"job\":null,\"job\":\"b\"}}", false},
    {SH "\"type\":\"task.end\",\"usage\":{},\"exit\":{\"status\":\"exited\",\"message\":"
	"\"a\",\"message\":\"b\"},\"task\":{\"id\":\"t\"}}",
     false},
    {SH SEND "\"task\":{\"id\":\"t\"},\"node\":\"n2\"}", false},
    {SH SEND "\"task\":{\"id\":\"t\",\"labels\":{\"a\":\"1\",\"a\":\"2\"}}}", false},
    {SH SEND "\"task\":{\"id\":\"t\",\"labels\":{\"\":\"1\"}}}", false},
    {SH SEND "\"task\":{\"id\":\"t\",\"labels\":{\"a\":1}}}", false},
    {SH SEND "\"task\":{\"id\":\"t\",\"labels\":null}}", false},
    {SH SEND "\"task\":{\"id\":\"t\",\"uid\":4294967296}}", false},
    {SH SEND "\"task\":{\"id\":\"t\",\"uid\":1.0}}", false},
    {SH SEND "\"task\":{\"id\":\"\"}}", false},
    {SH SEND "\"task\":{\"id\":\"t\",\"gid\":1}}", false},
    {SH SEND "\"task\":{\"id\":\"t\"},\"hash\":\"\"}", false},
    {SH SEND "\"task\":{\"id\":\"t\"},\"event\":{}}", false},
    {SH SEND "\"task\":{\"id\":\"t\"},\"z\":[1,2}", false},
    {SH SEND "\"task\":{\"id\":\"t\"},\"z\":\"a\x01\"}", false},
    {SH SEND "\"task\":{\"id\":\"t\"},\"z\":1 2}", false},
    {SH SEND "\"task\":{\"id\":\"t\"},\"z\":}", false},
    {SH SEND "\"task\":{\"id\":\"t\"},\"z\":01}", false},
    {SH SEND "\"task\":{\"id\":\"t\"},\"z\":\"\\ud800\"}", false},
    {SH SEND "\"task\":{\"id\":\"t\"}} x", false},
    {SH SEND "\"task\":{\"id\":\"t\"},}", false},
    {SH SEND "\"task\":{\"id\":\"t\"}", false},
    {SH "\"type\":\"task.end\",\"usage\":{\"wall_ns\":1},\"exit\":{\"status\":\"none\"},"
	"\"task\":{\"id\":\"t\"}}",
     false},
    {SH "\"type\":\"task.end\",\"usage\":{\"wall_ns\":1},\"exit\":{\"status\":\"exited\","
	"\"signal\":129},\"task\":{\"id\":\"t\"}}",
     false},
    {SH "\"type\":\"task.end\",\"usage\":{\"wall_ns\":1},\"exit\":{\"status\":\"exited\","
	"\"by\":\"none\"},\"task\":{\"id\":\"t\"}}",
     false},
    {SH "\"type\":\"task.end\",\"usage\":{\"wall_ns\":1},\"exit\":{\"code\":1},\"task\":{\"id\":"
	"\"t\"}}",
     false},
    {SH "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"wall_ns\":1.5}}", false},
    {SH "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"gpu_seconds\":-1}}", false},
    {SH "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"gpu_seconds\":1e999}}",
     false},
    {SH "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{\"wall_ns\":"
	"9223372036854775807}}",
     false}, /* 19 digits: the tree decoder (which takes it) */
    {SH "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{},\"sources\":{\"wall_ns\":"
	"\"none\"}}",
     false},
    {SH "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},\"usage\":{},\"sources\":{\"bogus\":"
	"\"ebpf\"}}",
     false},
    {"{\"schema\":\"corral.record/v1\",\"record_id\":\"r\",\"time\":\"1969-12-31T23:59:59Z\","
     "\"node\":\"n\"," SEND "\"task\":{\"id\":\"t\"}}",
     false},
    {"{\"schema\":\"corral.record/v1\",\"record_id\":\"r\",\"time\":\"2026-12-02 15:14:05Z\","
     "\"node\":\"n\"," SEND "\"task\":{\"id\":\"t\"}}",
     false},
    {"{\"schema\":\"corral.record/v1\",\"record_id\":\"r\",\"time\":\"2026-12-02T15:14:05Z\","
     "\"node\":\"\"," SEND "\"task\":{\"id\":\"t\"}}",
     false},
};

static unsigned scan_taken;

/* acct_record_scan takes buf only as acct_record_decode_tree reads it, and
 * acct_record_decode answers as the tree decoder does (the same error message). */
static int check_scan(const char *buf, size_t len)
{
	struct acct_record a = {0}, b = {0}, c = {0}, e = {0};
	struct acct_arena arena = {0};
	char et[256] = "", ed[256] = "", ee[256] = "";
	int rs = acct_record_scan(buf, len, &a, NULL);
	int rt = acct_record_decode_tree(buf, len, &b, et, sizeof(et));
	int rd = acct_record_decode(buf, len, &c, ed, sizeof(ed));
	int ra = acct_record_decode_in(buf, len, &e, ee, sizeof(ee), &arena);

	if ((rs != 0 && rs != 1) || (rs == 0 && (rt != 0 || !record_same(&a, &b))) || rd != rt ||
	    (rt == 0 && !record_same(&c, &b)) || (rt < 0 && strcmp(ed, et) != 0) || ra != rt ||
	    (rt == 0 && !record_same(&e, &b)) || (rt < 0 && strcmp(ee, et) != 0) ||
	    (rt == 0 && e.in_arena != (rs == 0))) {
		print_error("scan %d tree %d (%s) decode %d (%s) in arena %d on: %.*s\n", rs, rt,
			    et, rd, ed, ra, (int)len, buf);
		fail();
	}
	scan_taken += rs == 0;
	acct_record_clear(&a);
	acct_record_clear(&b);
	acct_record_clear(&c);
	acct_record_clear(&e);
	acct_arena_free(&arena);
	return rs;
}

/* buf and its mutations: each byte deleted, replaced (by one of a few bytes that matter to
 * JSON), and the text cut there. */
static void check_scan_mutations(const char *buf, size_t len)
{
	static const char subst[] = "\"}],:{[ 0-9.e\\n\x80\x01x";
	char *m = malloc(len + 1);

	assert_non_null(m);
	check_scan(buf, len);
	for (size_t i = 0; i < len; i++) {
		memcpy(m, buf, i);
		memcpy(m + i, buf + i + 1, len - i - 1);
		check_scan(m, len - 1);
		memcpy(m, buf, len);
		m[i] = subst[i % (sizeof(subst) - 1)];
		check_scan(m, len);
		check_scan(buf, i);
	}
	free(m);
}

static void test_scan_agrees(void **state)
{
	struct acct_record r;
	char *s = NULL, path[512], buf[65536];
	unsigned files = 0, before;
	struct dirent *de;
	DIR *d;

	for (int f = 0; f < _ACCT_U_MAX; f++)
		assert_string_equal(acct_scan_usage_field_name(f), acct_usage_field_name(f));
	for (size_t i = 0; i < ARRAY_SIZE(scan_cases); i++) {
		const char *j = scan_cases[i].json;

		if (check_scan(j, strlen(j)) != !scan_cases[i].taken) {
			print_error("scan case %zu: taken %d, want %d\n", i, !scan_cases[i].taken,
				    scan_cases[i].taken);
			fail();
		}
		check_scan_mutations(j, strlen(j));
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad_cases); i++)
		check_scan_mutations(bad_cases[i].json, strlen(bad_cases[i].json));
	fill_end(&r);
	assert_int_equal(acct_record_encode(&r, &s, NULL), 0);
	before = scan_taken;
	check_scan_mutations(s, strlen(s));
	assert_true(scan_taken > before);
	free(s);
	acct_record_clear(&r);

	/* reals: the fast path's own conversion (exact cases) and strtod's (the rest) read every
	 * number as the tree decoder's strtod does */
	{
		uint64_t x = 88172645463325252ULL;
		char rec[512];

		before = scan_taken;
		for (int i = 0; i < 20000; i++) {
			unsigned long long a, f;
			int n, fd, ex;

			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			a = x % (i % 3 ? 100000ULL : 100000000000000000ULL);
			f = (x >> 20) % 10000000000ULL;
			fd = (int)(x >> 8 & 15) + 1;
			ex = (int)(x >> 40 & 63) - 32;
			n = snprintf(rec, sizeof(rec),
				     SH "\"type\":\"task.sample\",\"task\":{\"id\":\"t\"},"
					"\"usage\":{\"gpu_seconds\":%llu.%0*llu%s%.0d}}",
				     a, fd, f % 10000000000ULL, x & 1 ? "e" : "", x & 1 ? ex : 0);
			assert_true(n > 0 && (size_t)n < sizeof(rec));
			check_scan(rec, (size_t)n);
		}
		assert_true(scan_taken - before > 15000);
	}

	/* times: the fast path's own reading of a valid one, parse_rfc3339's of the rest */
	{
		static const char *const zones[] = {"Z", "+00:00", "+01:00", "z", "", "ZZ"};
		static const char *const fracs[] = {
		    "", ".0", ".5", ".123456", ".000001", ".1234567891234", ".", ".x"};
		char rec[512];
		unsigned k = 0;

		before = scan_taken;
		for (int y = 1969; y <= 2501; y += (y < 1975 || y > 2495 || y % 100 == 0) ? 1 : 37)
			for (int m = 0; m <= 13; m++)
				for (int dd = 0; dd <= 32; dd += dd < 27 ? 9 : 1, k++) {
					int n = snprintf(
					    rec, sizeof(rec),
					    "{\"schema\":\"corral.record/v1\",\"record_id\":\"r\","
					    "\"time\":\"%04d-%02d-%02dT%02u:%02u:%02u%s%s\","
					    "\"node\":"
					    "\"n\"," SEND "\"task\":{\"id\":\"t\"}}",
					    y, m, dd, k % 7 ? k % 24 : 23 + k % 3,
					    k % 5 ? k % 60 : 59 + k % 3,
					    k % 3 ? k * 7 % 60 : 58 + k % 5,
					    fracs[k % ARRAY_SIZE(fracs)],
					    zones[k / 3 % ARRAY_SIZE(zones)]);

					assert_true(n > 0 && (size_t)n < sizeof(rec));
					check_scan(rec, (size_t)n);
				}
		assert_true(scan_taken - before > 300);
	}

	/* the fuzzer's seeds: every record type */
	d = opendir(SCAN_CORPUS);
	assert_non_null(d);
	while ((de = readdir(d))) {
		FILE *f;
		size_t n;

		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", SCAN_CORPUS, de->d_name);
		f = fopen(path, "r");
		assert_non_null(f);
		n = fread(buf, 1, sizeof(buf), f);
		fclose(f);
		check_scan_mutations(buf, n);
		files++;
	}
	closedir(d);
	assert_true(files >= 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_time_format),	   cmocka_unit_test(test_strings),
	    cmocka_unit_test(test_roundtrip_end),  cmocka_unit_test(test_roundtrip_start_sample),
	    cmocka_unit_test(test_extra_survives), cmocka_unit_test(test_bad),
	    cmocka_unit_test(test_energy),	   cmocka_unit_test(test_node_sample),
	    cmocka_unit_test(test_oversize),	   cmocka_unit_test(test_tree_limits),
	    cmocka_unit_test(test_audit_chain),	   cmocka_unit_test(test_labels),
	    cmocka_unit_test(test_scan_agrees),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
