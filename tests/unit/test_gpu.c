// SPDX-License-Identifier: MIT
/*
 * isolation/gpu.c against the stand-in NVML ($(O)/tests/gpu/libnvidia-ml.so.1, built by
 * tests/integration/gpu.mk), fed from fixture files written here.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/macro.h"
#include "isolation/devices.h"
#include "isolation/gpu.h"

static char stub_path[PATH_MAX];
static char fixture[] = "/tmp/corral-test-gpu-XXXXXX";

#define UUID0 "GPU-00000000-0000-0000-0000-000000000000"
#define UUID1 "GPU-11111111-1111-1111-1111-111111111111"
#define UUID2 "GPU-22222222-2222-2222-2222-222222222222"

static void write_fixture(const char *text)
{
	FILE *f = fopen(fixture, "we");
	assert_non_null(f);
	assert_true(fputs(text, f) >= 0);
	assert_int_equal(fclose(f), 0);
}

static const char three_gpus[] =
    "# three GPUs\n"
    "device uuid=" UUID0 " name=Fake-A minor=0 memory=17179869184 mig=0 energy=1000\n"
    "device uuid=" UUID1 " name=Fake-B minor=1 memory=34359738368 mig=0 energy=5000\n"
    "device uuid=" UUID2 " name=Fake-C minor=3 memory=8589934592 mig=0 energy=none\n";

static struct gpu_inventory *open_with(const char *text)
{
	struct gpu_opts o = {.library_path = stub_path};
	struct gpu_inventory *inv = NULL;

	write_fixture(text);
	assert_int_equal(gpu_open(&o, &inv), 0);
	assert_non_null(inv);
	return inv;
}

static void test_inventory(void **state)
{
	struct gpu_inventory *inv = open_with(three_gpus);
	const struct gpu_device *d;

	assert_true(gpu_enabled(inv));
	assert_null(gpu_off_reason(inv));
	assert_int_equal(gpu_count(inv), 3);
	d = gpu_device(inv, 1);
	assert_non_null(d);
	assert_int_equal(d->index, 1);
	assert_string_equal(d->uuid, UUID1);
	assert_string_equal(d->name, "Fake-B");
	assert_true(d->memory_total == 34359738368ULL);
	assert_int_equal(d->minor, 1);
	assert_false(d->mig_enabled);
	assert_true(d->energy_supported);
	assert_int_equal(gpu_device(inv, 2)->minor, 3);
	assert_false(gpu_device(inv, 2)->energy_supported);
	assert_null(gpu_device(inv, 3));
	assert_int_equal(gpu_find_uuid(inv, UUID2), 2);
	assert_int_equal(gpu_find_uuid(inv, "GPU-nope"), -ENOENT);
	assert_int_equal(gpu_free_count(inv), 3);
	gpu_free(inv);
}

static void test_off_states(void **state)
{
	struct gpu_opts absent = {.library_path = "/nonexistent/libnvidia-ml.so.1"};
	struct gpu_inventory *inv = NULL;
	struct gpu_request req;
	struct gpu_allocation a = {.mask = 7};
	char *env[2];
	size_t n = 9;

	/* library absent */
	assert_int_equal(gpu_open(&absent, &inv), 0);
	assert_false(gpu_enabled(inv));
	assert_non_null(strstr(gpu_off_reason(inv), "/nonexistent/libnvidia-ml.so.1"));
	assert_int_equal(gpu_count(inv), 0);
	assert_int_equal(gpu_request_parse("1", &req), 0);
	assert_int_equal(gpu_alloc(inv, 1, &req, &a), -ENODEV);
	assert_int_equal(gpu_request_parse("0", &req), 0);
	assert_int_equal(gpu_alloc(inv, 1, &req, &a), 0);
	assert_true(a.mask == 0);
	assert_int_equal(gpu_env(inv, &a, env, &n), 0);
	assert_int_equal(n, 0);
	gpu_free(inv);

	/* library present, zero GPUs */
	inv = open_with("# no devices\n");
	assert_false(gpu_enabled(inv));
	assert_string_equal(gpu_off_reason(inv), "no GPU reported by NVML");
	gpu_free(inv);

	/* driver not loaded */
	inv = open_with("init fail\n");
	assert_false(gpu_enabled(inv));
	assert_string_equal(gpu_off_reason(inv), "nvmlInit_v2: Driver Not Loaded");
	gpu_free(inv);

	/* environment override is used when opts give no path */
	assert_int_equal(setenv("CORRAL_NVML_LIBRARY", "/nonexistent/other.so", 1), 0);
	assert_int_equal(gpu_open(NULL, &inv), 0);
	assert_non_null(strstr(gpu_off_reason(inv), "/nonexistent/other.so"));
	gpu_free(inv);
	assert_int_equal(setenv("CORRAL_NVML_LIBRARY", stub_path, 1), 0);
	write_fixture(three_gpus);
	assert_int_equal(gpu_open(NULL, &inv), 0);
	assert_true(gpu_enabled(inv));
	gpu_free(inv);
	unsetenv("CORRAL_NVML_LIBRARY");
	gpu_free(NULL);
}

static void test_request_parse(void **state)
{
	struct gpu_request r;

	assert_int_equal(gpu_request_parse("2", &r), 0);
	assert_false(r.by_index);
	assert_int_equal(r.count, 2);
	assert_int_equal(gpu_request_count(&r), 2);
	assert_int_equal(gpu_request_parse("0,2", &r), 0);
	assert_true(r.by_index);
	assert_true(r.index_mask == 5);
	assert_int_equal(gpu_request_count(&r), 2);
	assert_int_equal(gpu_request_parse("63,0", &r), 0);
	assert_true(r.index_mask == (1ULL << 63 | 1));
	assert_int_equal(gpu_request_parse("64", &r), 0);
	assert_int_equal(gpu_request_parse("65", &r), -ERANGE);
	assert_int_equal(gpu_request_parse("0,64", &r), -ERANGE);
	assert_int_equal(gpu_request_parse("", &r), -EINVAL);
	assert_int_equal(gpu_request_parse(NULL, &r), -EINVAL);
	assert_int_equal(gpu_request_parse("a", &r), -EINVAL);
	assert_int_equal(gpu_request_parse("-1", &r), -EINVAL);
	assert_int_equal(gpu_request_parse("1,,2", &r), -EINVAL);
	assert_int_equal(gpu_request_parse("1,1", &r), -EINVAL);
	assert_int_equal(gpu_request_parse("2,", &r), -EINVAL);
	assert_int_equal(gpu_request_parse(",2", &r), -EINVAL);
	assert_int_equal(gpu_request_parse("1, 2", &r), -EINVAL);
	assert_int_equal(gpu_request_parse("99999999999999999999,1", &r), -EINVAL);
}

static void test_allocator(void **state)
{
	struct gpu_inventory *inv = open_with(three_gpus);
	struct gpu_request req;
	struct gpu_allocation a, b, c;

	assert_int_equal(gpu_request_parse("2", &req), 0);
	assert_int_equal(gpu_alloc(inv, 10, &req, &a), 0);
	assert_true(a.mask == 0x3);
	assert_int_equal(gpu_allocation_count(&a), 2);
	assert_int_equal(gpu_free_count(inv), 1);
	/* over-allocation refused, nothing changes */
	assert_int_equal(gpu_alloc(inv, 11, &req, &b), -ENOSPC);
	assert_int_equal(gpu_free_count(inv), 1);
	/* same task twice */
	assert_int_equal(gpu_request_parse("1", &req), 0);
	assert_int_equal(gpu_alloc(inv, 10, &req, &b), -EEXIST);
	assert_int_equal(gpu_alloc(inv, 11, &req, &b), 0);
	assert_true(b.mask == 0x4);
	assert_int_equal(gpu_free_count(inv), 0);
	/* explicit list: busy, missing index */
	assert_int_equal(gpu_request_parse("0,1", &req), 0);
	assert_int_equal(gpu_alloc(inv, 12, &req, &c), -EBUSY);
	assert_int_equal(gpu_request_parse("1,5", &req), 0);
	assert_int_equal(gpu_alloc(inv, 12, &req, &c), -ENODEV);
	/* released on free */
	assert_int_equal(gpu_release(inv, 10), 0);
	assert_int_equal(gpu_free_count(inv), 2);
	gpu_task_allocation(inv, 10, &c);
	assert_true(c.mask == 0);
	assert_int_equal(gpu_request_parse("1,0", &req), 0);
	assert_int_equal(gpu_alloc(inv, 12, &req, &c), 0);
	assert_true(c.mask == 0x3);
	gpu_task_allocation(inv, 12, &a);
	assert_true(a.mask == 0x3);
	assert_int_equal(gpu_release(inv, 99), 0); /* holds nothing */
	gpu_free(inv);

	/* MIG-enabled GPUs are not allocatable as whole GPUs */
	inv = open_with("device uuid=" UUID0 " name=M minor=0 memory=1 mig=1 energy=none\n"
			"device uuid=" UUID1 " name=N minor=1 memory=1 mig=0 energy=none\n");
	assert_true(gpu_device(inv, 0)->mig_enabled);
	assert_int_equal(gpu_free_count(inv), 1);
	assert_int_equal(gpu_request_parse("0", &req), 0);
	req = (struct gpu_request){.by_index = true, .index_mask = 1};
	assert_int_equal(gpu_alloc(inv, 1, &req, &a), -EOPNOTSUPP);
	assert_int_equal(gpu_request_parse("2", &req), 0);
	assert_int_equal(gpu_alloc(inv, 1, &req, &a), -ENOSPC);
	assert_int_equal(gpu_request_parse("1", &req), 0);
	assert_int_equal(gpu_alloc(inv, 1, &req, &a), 0);
	assert_true(a.mask == 0x2);
	gpu_free(inv);
}

static void test_serialization(void **state)
{
	struct gpu_inventory *inv = open_with(three_gpus);
	struct gpu_request req;
	struct gpu_allocation a, b;
	char buf[GPU_UUID_LIST_MAX], small[50];

	assert_int_equal(gpu_request_parse("0,2", &req), 0);
	assert_int_equal(gpu_alloc(inv, 7, &req, &a), 0);
	assert_int_equal(gpu_allocation_format(inv, &a, buf, sizeof(buf)), 0);
	assert_string_equal(buf, UUID0 "," UUID2);
	assert_int_equal(gpu_allocation_format(inv, &a, small, sizeof(small)), -ENOBUFS);
	gpu_free(inv);

	/* agent restart: a fresh inventory, GPUs reordered by the driver */
	inv = open_with("device uuid=" UUID2 " name=Fake-C minor=3 memory=1 mig=0 energy=none\n"
			"device uuid=" UUID1 " name=Fake-B minor=1 memory=1 mig=0 energy=none\n"
			"device uuid=" UUID0 " name=Fake-A minor=0 memory=1 mig=0 energy=none\n");
	assert_int_equal(gpu_adopt(inv, 7, buf, &b), 0);
	assert_true(b.mask == 0x5); /* indices 0 (UUID2) and 2 (UUID0) */
	assert_int_equal(gpu_free_count(inv), 1);
	assert_int_equal(gpu_adopt(inv, 7, buf, &b), 0); /* idempotent for the same task */
	assert_int_equal(gpu_adopt(inv, 8, UUID0, &b), -EBUSY);
	assert_int_equal(gpu_adopt(inv, 8, "GPU-gone", &b), -ENODEV);
	assert_int_equal(gpu_adopt(inv, 8, UUID1 ",", &b), -EINVAL);
	assert_int_equal(gpu_adopt(inv, 8, UUID1 ",GPU-gone", &b), -ENODEV);
	assert_int_equal(gpu_free_count(inv), 1); /* nothing changed on failure */
	assert_int_equal(gpu_adopt(inv, 8, "", &b), 0);
	assert_true(b.mask == 0);
	assert_int_equal(gpu_adopt(inv, 8, UUID1, &b), 0);
	assert_true(b.mask == 0x2);
	assert_int_equal(gpu_allocation_format(inv, &b, buf, sizeof(buf)), 0);
	assert_string_equal(buf, UUID1);
	gpu_free(inv);
}

static void test_env(void **state)
{
	struct gpu_inventory *inv = open_with(three_gpus);
	struct gpu_allocation a = {.mask = 0x6}, none = {.mask = 0};
	char *env[2];
	size_t n = 0;

	assert_int_equal(gpu_env(inv, &a, env, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(env[0], "CUDA_VISIBLE_DEVICES=" UUID1 "," UUID2);
	assert_string_equal(env[1], "NVIDIA_VISIBLE_DEVICES=" UUID1 "," UUID2);
	free(env[0]);
	free(env[1]);
	assert_int_equal(gpu_env(inv, &none, env, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(env[0], "CUDA_VISIBLE_DEVICES=");
	assert_string_equal(env[1], "NVIDIA_VISIBLE_DEVICES=void");
	free(env[0]);
	free(env[1]);
	gpu_free(inv);
}

static void test_sampling(void **state)
{
	static const char devs[] =
	    "device uuid=" UUID0 " name=A minor=0 memory=17179869184 mig=0 energy=1000\n"
	    "device uuid=" UUID1 " name=B minor=1 memory=17179869184 mig=0 energy=5000\n"
	    "device uuid=" UUID2 " name=C minor=2 memory=17179869184 mig=0 energy=100\n";
	char text[2048];
	struct gpu_inventory *inv;
	struct gpu_request req;
	struct gpu_allocation a;
	struct gpu_meter *m = NULL;
	struct gpu_usage u;
	const pid_t pids[] = {100, 101, 102};

	snprintf(text, sizeof(text),
		 "%s"
		 "proc gpu=0 pid=100 mem=1000000 sm=30\n"
		 "proc gpu=0 pid=101 mem=2000000 sm=20\n"
		 "proc gpu=0 pid=999 mem=4000000 sm=45\n" /* not the task's */
		 "proc gpu=1 pid=102 mem=500000 sm=10\n"
		 "proc gpu=1 pid=103 mem=na sm=5\n"
		 "proc gpu=2 pid=100 mem=8000000 sm=90\n", /* not allocated */
		 devs);
	inv = open_with(text);
	assert_int_equal(gpu_request_parse("2", &req), 0);
	assert_int_equal(gpu_alloc(inv, 1, &req, &a), 0);
	assert_true(a.mask == 0x3);
	assert_int_equal(gpu_meter_new(inv, &a, 4000000, 1 * NSEC_PER_SEC, &m), 0);

	assert_int_equal(gpu_meter_sample(inv, m, pids, 3, 2 * NSEC_PER_SEC), 0);
	gpu_meter_usage(m, 3 * NSEC_PER_SEC, &u);
	assert_true(u.memory_current_bytes == 3500000);
	assert_true(u.memory_peak_bytes == 3500000);
	assert_int_equal(u.samples, 1);
	/* (50 on gpu0 + 10 on gpu1) / 2 GPUs */
	assert_true(u.util_avg > 29.99 && u.util_avg < 30.01);
	assert_true(u.gpu_seconds > 3.99 && u.gpu_seconds < 4.01); /* 2 GPUs x 2 s */
	assert_true(u.energy_valid);
	assert_true(u.energy_j == 0);
	assert_false(u.memory_limit_exceeded);

	/* second tick: more memory (over the 4 MB limit), energy advanced */
	snprintf(text, sizeof(text),
		 "device uuid=" UUID0 " name=A minor=0 memory=17179869184 mig=0 energy=3000\n"
		 "device uuid=" UUID1 " name=B minor=1 memory=17179869184 mig=0 energy=5500\n"
		 "proc gpu=0 pid=100 mem=3000000 sm=100\n"
		 "proc gpu=0 pid=101 mem=2000000 sm=20\n"
		 "proc gpu=1 pid=102 mem=500000 sm=50\n");
	write_fixture(text);
	assert_int_equal(gpu_meter_sample(inv, m, pids, 3, 3 * NSEC_PER_SEC), 1);
	/* the watchdog fires once */
	assert_int_equal(gpu_meter_sample(inv, m, pids, 3, 3 * NSEC_PER_SEC), 0);
	gpu_meter_usage(m, 3 * NSEC_PER_SEC, &u);
	assert_true(u.memory_current_bytes == 5500000);
	assert_true(u.memory_peak_bytes == 5500000);
	assert_true(u.memory_limit_exceeded);
	assert_int_equal(u.samples, 3);
	/* ticks: 30, (100 capped + 50)/2 = 75, 75 -> mean 60 */
	assert_true(u.util_avg > 59.99 && u.util_avg < 60.01);
	assert_true(u.energy_j > 2.499 && u.energy_j < 2.501); /* (2000 + 500) mJ */

	/* processes gone: current drops, peak stays */
	write_fixture(devs);
	assert_int_equal(gpu_meter_sample(inv, m, pids, 3, 4 * NSEC_PER_SEC), 0);
	gpu_meter_usage(m, 4 * NSEC_PER_SEC, &u);
	assert_true(u.memory_current_bytes == 0);
	assert_true(u.memory_peak_bytes == 5500000);
	gpu_meter_free(m);

	/* a GPU without energy counters makes the energy figure invalid */
	write_fixture(three_gpus);
	a.mask = 0x4;
	assert_int_equal(gpu_meter_new(inv, &a, 0, 0, &m), 0);
	assert_int_equal(gpu_meter_sample(inv, m, pids, 3, NSEC_PER_SEC), 0);
	gpu_meter_usage(m, NSEC_PER_SEC, &u);
	assert_false(u.energy_valid);
	assert_true(u.gpu_seconds > 0.99 && u.gpu_seconds < 1.01);
	gpu_meter_free(m);

	/* empty allocation: nothing sampled, nothing billed */
	a.mask = 0;
	assert_int_equal(gpu_meter_new(inv, &a, 0, 0, &m), 0);
	assert_int_equal(gpu_meter_sample(inv, m, pids, 3, NSEC_PER_SEC), 0);
	gpu_meter_usage(m, NSEC_PER_SEC, &u);
	assert_true(u.gpu_seconds == 0);
	assert_false(u.energy_valid);
	gpu_meter_free(m);
	a.mask = 1ULL << 40; /* not in the inventory */
	assert_int_equal(gpu_meter_new(inv, &a, 0, 0, &m), -ENODEV);
	gpu_free(inv);
}

/* A restarted agent goes on with a task's meter from its saved state. */
static void test_meter_resume(void **state)
{
	static const char before[] =
	    "device uuid=" UUID0 " name=A minor=0 memory=17179869184 mig=0 energy=1000\n"
	    "device uuid=" UUID1 " name=B minor=1 memory=17179869184 mig=0 energy=5000\n"
	    "proc gpu=1 pid=100 mem=7000000 sm=40\n";
	struct gpu_inventory *inv;
	struct gpu_request req;
	struct gpu_allocation a;
	struct gpu_meter *m = NULL, *m2 = NULL;
	struct gpu_meter_state st;
	struct gpu_usage u;
	const pid_t pids[] = {100};

	(void)state;
	inv = open_with(before);
	assert_int_equal(gpu_request_parse("1", &req), 0);
	assert_int_equal(gpu_alloc(inv, 1, &req, &a), 0);
	a.mask = 0x2; /* GPU 1 */
	assert_int_equal(gpu_meter_new(inv, &a, 0, 10 * NSEC_PER_SEC, &m), 0);
	assert_int_equal(gpu_meter_sample(inv, m, pids, 1, 11 * NSEC_PER_SEC), 0);
	assert_true(gpu_meter_peak(m) == 7000000);
	gpu_meter_get_state(m, &st);
	gpu_meter_free(m); /* the agent dies */

	/* later: the process holds less, the counter moved on */
	write_fixture("device uuid=" UUID0 " name=A minor=0 memory=17179869184 mig=0 energy=9000\n"
		      "device uuid=" UUID1 " name=B minor=1 memory=17179869184 mig=0 energy=8000\n"
		      "proc gpu=1 pid=100 mem=2000000 sm=20\n");
	assert_int_equal(gpu_meter_resume(inv, &a, 0, &st, &m2), 0);
	assert_int_equal(gpu_meter_sample(inv, m2, pids, 1, 20 * NSEC_PER_SEC), 0);
	gpu_meter_usage(m2, 25 * NSEC_PER_SEC, &u);
	assert_true(u.gpu_seconds > 14.99 && u.gpu_seconds < 15.01); /* from the task's start */
	assert_true(u.energy_valid);
	assert_true(u.energy_j > 2.999 && u.energy_j < 3.001); /* 8000 - 5000 mJ on GPU 1 only */
	assert_true(u.memory_peak_bytes == 7000000);	       /* the peak before the restart */
	assert_true(u.memory_current_bytes == 2000000);
	assert_int_equal(u.samples, 2);
	assert_true(u.util_avg > 29.99 && u.util_avg < 30.01); /* (40 + 20) / 2 */
	gpu_meter_free(m2);

	/* the counter went backwards (driver reloaded): energy unknown, the rest goes on */
	write_fixture("device uuid=" UUID0 " name=A minor=0 memory=17179869184 mig=0 energy=9000\n"
		      "device uuid=" UUID1 " name=B minor=1 memory=17179869184 mig=0 energy=10\n");
	assert_int_equal(gpu_meter_resume(inv, &a, 0, &st, &m2), 0);
	gpu_meter_usage(m2, 25 * NSEC_PER_SEC, &u);
	assert_false(u.energy_valid);
	assert_true(u.gpu_seconds > 14.99 && u.gpu_seconds < 15.01);
	gpu_meter_free(m2);
	gpu_free(inv);
}

/* The agent shares one device program per distinct policy: equality must see the allowed set
 * and the uvm major, not the struct's padding. */
static void test_device_policy(void **state)
{
	struct devices_policy a, b;

	(void)state;
	memset(&a, 0xa5, sizeof(a));
	memset(&b, 0x5a, sizeof(b));
	devices_policy_init(&a, 238);
	devices_policy_init(&b, 238);
	assert_true(devices_policy_equal(&a, &b));
	assert_false(devices_policy_allows(&a, 195, 0));
	assert_false(devices_policy_allows(&a, 238, 0));  /* uvm denied without a GPU */
	assert_true(devices_policy_allows(&a, 195, 255)); /* nvidiactl */
	assert_true(devices_policy_allows(&a, 1, 3));	  /* /dev/null: not ours to police */
	assert_int_equal(devices_policy_allow_minor(&a, 200), 0);
	assert_false(devices_policy_equal(&a, &b));
	assert_true(devices_policy_allows(&a, 195, 200));
	assert_true(devices_policy_allows(&a, 238, 7));
	assert_int_equal(devices_policy_allow_minor(&b, 200), 0);
	assert_true(devices_policy_equal(&a, &b));
	assert_int_equal(devices_policy_allow_minor(&b, 254), -ERANGE);
	devices_policy_init(&b, 0); /* same minors, other uvm major */
	assert_int_equal(devices_policy_allow_minor(&b, 200), 0);
	assert_false(devices_policy_equal(&a, &b));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_inventory),	  cmocka_unit_test(test_off_states),
	    cmocka_unit_test(test_request_parse), cmocka_unit_test(test_allocator),
	    cmocka_unit_test(test_serialization), cmocka_unit_test(test_env),
	    cmocka_unit_test(test_sampling),	  cmocka_unit_test(test_device_policy),
	    cmocka_unit_test(test_meter_resume),
	};
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	int fd, rc;

	if (n <= 0)
		return 1;
	exe[n] = 0;
	/* $(O)/tests/unit/test_gpu -> $(O)/tests/gpu/libnvidia-ml.so.1 */
	snprintf(stub_path, sizeof(stub_path), "%s/../gpu/libnvidia-ml.so.1", dirname(exe));
	if (access(stub_path, R_OK) < 0) {
		fprintf(stderr, "stand-in NVML missing: %s (built by tests/integration/gpu.mk)\n",
			stub_path);
		return 1;
	}
	fd = mkstemp(fixture);
	if (fd < 0)
		return 1;
	close(fd);
	setenv("CORRAL_FAKE_NVML", fixture, 1);
	unsetenv("CORRAL_NVML_LIBRARY");
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	unlink(fixture);
	return rc;
}
