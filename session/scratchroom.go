package session

import (
	"fmt"

	"github.com/themisfs/themis/internal/budget"
	"github.com/themisfs/themis/internal/scratch"
	"github.com/themisfs/themis/vmm"
)

// maxMemoryKey is the config key of Config.MaxMemoryMiB, for messages.
const maxMemoryKey = "limits.max_memory_mib"

// scratchRoom is the warning Open logs when dir, the scratch dir where
// QEMU guests keep their RAM (qemu.ScratchDir: a tmpfs), has less room
// than maxMemoryMiB, the most guest RAM the daemon runs at once, or ""
// when it has room. The daemon starts either way: each guest whose RAM
// does not fit is refused when it boots (errkind.ErrExhausted wrapping
// vmm.ErrNoRAM: RESOURCE_EXHAUSTED, naming the dir and its free space).
func scratchRoom(dir string, maxMemoryMiB int) string {
	free, err := scratch.Free(dir)
	if err != nil {
		return fmt.Sprintf("scratch dir for guest RAM: %v", err)
	}
	need := int64(maxMemoryMiB) << 20
	switch {
	case free < vmm.DefaultMemoryMiB<<20:
		return fmt.Sprintf("scratch dir %s has %s free: not one guest of the default %d MiB fits its RAM there; every QEMU session will be refused (RESOURCE_EXHAUSTED) until it has room",
			dir, budget.Size(free), vmm.DefaultMemoryMiB)
	case free < need:
		return fmt.Sprintf("scratch dir %s has %s free, less than %s (%d MiB): QEMU sessions whose guest RAM does not fit there will be refused (RESOURCE_EXHAUSTED)",
			dir, budget.Size(free), maxMemoryKey, maxMemoryMiB)
	}
	return ""
}
