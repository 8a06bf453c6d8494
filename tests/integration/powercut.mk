# libpowercut.so (tests/integration/powercut/): an LD_PRELOAD library that keeps one file's
# writes in memory until the process syncs it, so that a kill -9 acts as a power cut for that
# file. Used by collector_powercut.sh. Not built with the sanitizers (ASan must be the first
# library of a process, so the test runs only against the plain build).
POWERCUT_SO := $(O)/tests/integration/libpowercut.so

$(POWERCUT_SO): tests/integration/powercut/powercut.c
	$(call msg,SO,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -std=gnu11 $(WARN) -D_GNU_SOURCE -O2 -g -fPIC -shared -o $@ $< -ldl -lpthread

EXTRA_TARGETS += $(POWERCUT_SO)
