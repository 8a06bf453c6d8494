# The live-task index test fails the index's growth on purpose: malloc is wrapped.
TEST_LDFLAGS_test_task_index := -Wl,--wrap=malloc
