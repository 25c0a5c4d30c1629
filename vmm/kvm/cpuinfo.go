package kvm

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
)

// HardwareVirtualization reports whether this host's CPU advertises
// hardware virtualization (vmx or svm in /proc/cpuinfo) and why. Without it
// /dev/kvm may still exist (PVM: kvm_pvm), but Linux guests cannot boot and
// only synthetic 64-bit guests at low addresses run natively.
func HardwareVirtualization() (bool, string) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false, fmt.Sprintf("cannot read /proc/cpuinfo: %v", err)
	}
	return hardwareVirtualization(b)
}

func hardwareVirtualization(cpuinfo []byte) (bool, string) {
	sc := bufio.NewScanner(bytes.NewReader(cpuinfo))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "flags" {
			continue
		}
		for _, f := range strings.Fields(v) {
			switch f {
			case "vmx":
				return true, "CPU flag vmx (Intel VT-x)"
			case "svm":
				return true, "CPU flag svm (AMD-V)"
			}
		}
		return false, "no vmx or svm CPU flag: /dev/kvm, if present, is not hardware virtualization (e.g. PVM)"
	}
	return false, "no flags line in /proc/cpuinfo"
}
