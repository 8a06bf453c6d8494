# isolation/seccomp.c embeds the built-in profiles with .incbin (paths relative to the repo
# root, where make runs); -MMD does not see them, so name them here.
SBX_PROFILES := $(wildcard isolation/profiles/*.json)
$(O)/isolation/seccomp.o: $(SBX_PROFILES)
