// Package doctor reports what this host can run — KVM with hardware
// virtualization or not, QEMU, the host filesystem tools, the guest image
// cache — which backend "auto" picks and why, and, on request, boots a guest
// and measures it end to end (boot, agent round trip, checkpoint, verified
// restore, the Y2038 witness).
//
// The host probe, the backend rule and the guest's assembly are package
// launch's (Probe, Choose, Boot); doctor reports and measures them and
// decides nothing of its own. Report's JSON field names are a stable
// interface.
package doctor
