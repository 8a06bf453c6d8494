# cgroup unit test: fake cgroupfs tree (mkdir/mkdirat populate control files, rmdir removes
# them, statfs reports cgroup2 for a fake "unified" mount).
TEST_LDFLAGS_test_cgroup := -Wl,--wrap=mkdirat -Wl,--wrap=mkdir -Wl,--wrap=unlinkat \
	-Wl,--wrap=statfs
