// Package crashtest builds the guest image the kernel-crash tests boot:
// the stock kernel with the themisfault agent (faultagent.CrashOn), whose
// kernel panics through sysrq on the requests it names, shared by the
// tests of every layer that needs a real kernel crash (a search, a
// replay through the daemon).
package crashtest
