// Package doctor reports what this host can run — KVM with hardware
// virtualization or not, QEMU, the host filesystem tools, the guest image
// cache — which backend "auto" picks and why, and, on request, boots a guest
// and measures it end to end (boot, agent round trip, checkpoint, verified
// restore, the Y2038 witness).
package doctor
