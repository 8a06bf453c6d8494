/* SPDX-License-Identifier: MIT */
/*
 * Unit tests of bpf/track.c (the loaders' shared membership helpers) and of the audit trail's
 * option to share the meter's membership map, where neither root nor BPF is needed.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "bpf/audit.h"
#include "bpf/cuda.h"
#include "bpf/print.h"
#include "bpf/track.h"

struct row {
	struct track_slot s;
	int payload;
};

static void test_find_used_slot_only(void **state)
{
	struct row t[4] = {{{7, false}, 1}, {{7, true}, 2}, {{9, true}, 3}, {{0, false}, 4}};
	struct row *r;

	r = track_find(t, sizeof(t[0]), 4, 7);
	assert_non_null(r);
	assert_int_equal(r->payload, 2); /* the unused slot with the same key is skipped */
	r = track_find(t, sizeof(t[0]), 4, 9);
	assert_non_null(r);
	assert_int_equal(r->payload, 3);
	assert_null(track_find(t, sizeof(t[0]), 4, 8));
	assert_null(track_find(t, sizeof(t[0]), 2, 9)); /* beyond n: not looked at */
}

/* Any directory has an id (its 8-byte file handle, else its inode number); no fd: EBADF. */
static void test_cgroup_id_of_a_directory(void **state)
{
	struct stat st;
	uint64_t id = 0;
	int fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(track_cgroup_id(fd, &id), 0);
	assert_true(id != 0);
	close(fd);
	assert_int_equal(track_cgroup_id(-1, &id), -EBADF);
}

static void test_delete_by_task_rejects_big_entries(void **state)
{
	assert_int_equal(track_delete_by_task(-1, 64, 8, 1, 10), -EINVAL);
	assert_int_equal(track_delete_by_task(-1, 4, 4096, 1, 10), -EINVAL);
	assert_int_equal(track_delete_by_task(-1, 4, 4, 1, 10), -EINVAL); /* no room for a key */
}

/* Sharing a map that is not one (or no fd): refused before anything is loaded. */
static void test_audit_share_needs_a_member_map(void **state)
{
	struct audit_opts o = {.share_members = true, .members_fd = -1};
	struct audit *a = (struct audit *)0x1;
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	assert_int_equal(audit_open(&o, &a), -EINVAL);
	assert_ptr_equal(a, (struct audit *)0x1);
	o.members_fd = fd;
	assert_int_equal(audit_open(&o, &a), -EINVAL);
	assert_ptr_equal(a, (struct audit *)0x1);
	close(fd);
}

static void test_cuda_share_needs_a_member_map(void **state)
{
	struct cuda_opts o = {.share_members = true, .members_fd = -1};
	struct cuda_meter *c = (struct cuda_meter *)0x1;
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	assert_int_equal(cuda_open(&o, &c), -EINVAL);
	assert_ptr_equal(c, (struct cuda_meter *)0x1);
	o.members_fd = fd;
	assert_int_equal(cuda_open(&o, &c), -EINVAL);
	assert_ptr_equal(c, (struct cuda_meter *)0x1);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_find_used_slot_only),
	    cmocka_unit_test(test_cgroup_id_of_a_directory),
	    cmocka_unit_test(test_delete_by_task_rejects_big_entries),
	    cmocka_unit_test(test_audit_share_needs_a_member_map),
	    cmocka_unit_test(test_cuda_share_needs_a_member_map),
	};

	libbpf_set_print(bpf_print_env);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
