// Command initstub is a minimal guest /init for the guest package's tests:
// it loads /modules/order with finit_module, reports each step on the
// console and powers the machine off. It stands in for cmd/themis-agent.
package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
)

func main() {
	err := run()
	if err != nil {
		fmt.Println("INITSTUB FAIL:", err)
	} else {
		fmt.Println("INITSTUB OK")
	}
	syscall.Sync()
	if err := syscall.Reboot(syscall.LINUX_REBOOT_CMD_POWER_OFF); err != nil {
		fmt.Println("INITSTUB reboot:", err)
	}
	select {}
}

func run() error {
	order, err := os.ReadFile("/modules/order")
	if err != nil {
		return err
	}
	for _, name := range strings.Fields(string(order)) {
		f, err := os.Open("/modules/" + name)
		if err != nil {
			return err
		}
		errno := finitModule(f.Fd())
		f.Close()
		if errno != 0 && errno != syscall.EEXIST {
			return fmt.Errorf("finit_module %s: %v", name, errno)
		}
		fmt.Println("INITSTUB loaded", name)
	}
	if err := syscall.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	mods, err := os.ReadFile("/proc/modules")
	if err != nil {
		return err
	}
	fmt.Printf("INITSTUB /proc/modules has %d modules\n", len(strings.Split(strings.TrimSpace(string(mods)), "\n")))
	return nil
}
